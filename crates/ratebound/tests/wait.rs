//! Async waiting (feature `tokio`), on tokio's paused clock.
#![cfg(feature = "tokio")]

use std::time::Duration;

use ratebound::{ManualClock, Quota, TokenBucket};
use tokio::time::Instant;

fn bucket(per_second: u32, burst: u64) -> TokenBucket<ManualClock> {
    let quota = Quota::per_second(per_second)
        .unwrap()
        .with_burst(burst)
        .unwrap();
    TokenBucket::with_clock(quota, ManualClock::new())
}

#[tokio::test(start_paused = true)]
async fn wait_n_sleeps_exactly_the_reserved_delay() {
    let bucket = bucket(10, 1);
    let start = Instant::now();
    bucket.wait_n(1, Duration::ZERO).await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
    bucket.wait_n(1, Duration::from_secs(1)).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    bucket.until_ready().await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(300));
}

#[tokio::test(start_paused = true)]
async fn a_deadline_that_cannot_be_met_fails_at_once_and_takes_nothing() {
    let bucket = bucket(10, 1);
    bucket.wait_n(1, Duration::ZERO).await.unwrap();
    let start = Instant::now();
    let err = bucket
        .wait_n(1, Duration::from_millis(99))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "deadline_exceeded");
    assert!(err.to_string().contains("100ms"), "{err}");
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "it must not sleep before failing"
    );
    // Nothing was taken: the next token is still 100 ms away, not 200.
    assert_eq!(bucket.check().retry_after(), Duration::from_millis(100));
}

#[tokio::test(start_paused = true)]
async fn dropping_the_future_gives_the_tokens_back() {
    let bucket = bucket(10, 2);
    bucket.wait_n(2, Duration::ZERO).await.unwrap();
    let waiting = bucket.wait_n(2, Duration::from_secs(1));
    // Poll it until it is asleep, then give up on it.
    let gave_up = tokio::time::timeout(Duration::from_millis(50), waiting).await;
    assert!(gave_up.is_err(), "the wait needs 200 ms");
    // The abandoned reservation is returned: the bucket owes nothing beyond
    // the first two tokens (whose refill is on the frozen manual clock).
    assert_eq!(bucket.check().retry_after(), Duration::from_millis(100));
}

#[tokio::test(start_paused = true)]
async fn waiting_for_more_than_the_burst_is_an_error() {
    let bucket = bucket(10, 3);
    let err = bucket.until_n_ready(4).await.unwrap_err();
    assert_eq!(err.code(), "insufficient_capacity");
}

#[tokio::test(start_paused = true)]
async fn background_cleanup_drops_fresh_keys_and_stops_with_its_handle() {
    use ratebound::{KeyedAlgorithm, KeyedLimiter};
    use std::sync::Arc;
    let clock = ManualClock::new();
    let limiter = Arc::new(
        KeyedLimiter::new(KeyedAlgorithm::TokenBucket(
            Quota::parse("10/s burst 1").unwrap(),
        ))
        .unwrap()
        .with_clock(clock.clone()),
    );
    limiter.check(&1u32).unwrap();
    limiter.check(&2u32).unwrap();
    let task = limiter.spawn_cleanup(Duration::from_secs(60));
    tokio::time::sleep(Duration::from_secs(61)).await;
    assert_eq!(limiter.len(), 2, "nothing is fresh yet on the manual clock");
    clock.advance(Duration::from_secs(1));
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(limiter.len(), 0, "the second pass dropped both");
    task.stop();
    limiter.check(&3u32).unwrap();
    clock.advance(Duration::from_secs(1));
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(limiter.len(), 1, "a stopped task cleans nothing");
}
