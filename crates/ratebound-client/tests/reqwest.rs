//! The reqwest-middleware adapter against a strict partner on 127.0.0.1
//! with its own token bucket: pacing, retries, pauses, timeouts, keys.
//!
//! In tokio's paused time: the local bucket reads a [`TokioClock`], the
//! partner's bucket and log read tokio's clock, and every wait sleeps on
//! tokio's timer, so waits and pauses are checked exactly. (Real sockets:
//! while a request is in flight the paused clock may jump to the next
//! timer, which can only make an arrival later — never a wait shorter.)

mod support;

use std::time::Duration;

use ratebound::{Quota, TokenBucket, TokioClock};
use ratebound_client::{Error, OutboundBuilder, OutboundMiddleware};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use support::{Events, Partner, call_all, reply, reqwest_client, strict};
use tokio::time::Instant;

/// A client through the middleware `builder` makes.
fn client(builder: OutboundBuilder<reqwest::Request>) -> ClientWithMiddleware {
    let middleware = builder.build().expect("middleware");
    ClientBuilder::new(reqwest_client())
        .with(middleware)
        .build()
}

/// The middleware over a bucket of `quota`, telling `events`.
fn told(quota: &str, events: &Events) -> OutboundBuilder<reqwest::Request> {
    OutboundMiddleware::builder(bucket(quota)).on_decision(events.hook())
}

fn bucket(quota: &str) -> TokenBucket<TokioClock> {
    TokenBucket::with_clock(Quota::parse(quota).expect("quota"), TokioClock::new())
}

#[tokio::test(start_paused = true)]
async fn thirty_concurrent_calls_wait_their_turn_and_none_is_refused() {
    // A partner of 25/s, bursts of 10; our limit 20/s, bursts of 5.
    let partner = Partner::start(strict(25.0, 10.0)).await;
    let events = Events::default();
    let client = client(told("20/s burst 5", &events));
    let start = Instant::now();
    let statuses = call_all(&[client], 30, &partner.url("/items")).await;
    let elapsed = start.elapsed();
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        30,
        "{statuses:?}"
    );
    assert_eq!(partner.count(429), 0);
    assert_eq!(partner.count(200), 30);
    // 5 at once, then one every 50 ms: the last goes at 1.25 s. Each
    // wait exactly so (all 30 began at 0).
    assert!(elapsed >= Duration::from_millis(1250), "{elapsed:?}");
    let mut waits: Vec<Duration> = events
        .all()
        .iter()
        .filter(|e| e.0 == "waited")
        .filter_map(|e| e.2)
        .collect();
    waits.sort();
    let want: Vec<Duration> = (1..=25).map(|k| Duration::from_millis(50 * k)).collect();
    assert_eq!(waits, want);
    println!("30 calls: 30 x 200, 0 x 429 in {elapsed:?}; 25 waited 50 ms apart");
}

/// A partner answering with `statuses` in turn (the last one from then
/// on), counting what it got.
fn scripted(
    statuses: &'static [(u16, &'static str)],
) -> impl Fn(&support::Hit) -> http::Response<support::Body> + Send + Sync {
    move |hit| {
        let (status, retry_after) = statuses[hit.index.min(statuses.len() - 1)];
        let body = format!("answer {}", hit.index + 1);
        if retry_after.is_empty() {
            reply(status, &[], &body)
        } else {
            reply(status, &[("retry-after", retry_after)], &body)
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_503_then_200_is_retried_exactly_once() {
    let partner = Partner::start(scripted(&[(503, ""), (200, "")])).await;
    let events = Events::default();
    let client = client(told("100/s burst 10", &events));
    let response = client.get(partner.url("/")).send().await.expect("send");
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.expect("body"), "answer 2");
    assert_eq!(partner.hits(), 2);
    // No retry without a pause: the bare 503 paused the default backoff
    // (and, learning by default, cut the learned rate first); the 200 a
    // second later, after a quiet probe period, steps it up again.
    assert_eq!(
        events.outcomes(),
        ["adapted", "paused", "retried", "adapted"]
    );
    let port = partner.addr.port();
    let key = format!("127.0.0.1:{port}");
    let all: Vec<_> = events
        .all()
        .into_iter()
        .filter(|e| e.0 != "waited" && e.0 != "adapted")
        .collect();
    assert_eq!(
        all,
        [
            (
                "paused".into(),
                key.clone(),
                Some(Duration::from_secs(1)),
                Some(503),
                0,
                false,
                false
            ),
            ("retried".into(), key, None, Some(503), 0, false, false)
        ]
    );
}

/// The partner's receptions, in seconds since its first, and the gaps
/// between them.
fn gaps(partner: &Partner) -> Vec<Duration> {
    let log = partner.log();
    log.windows(2).map(|w| w[1].at - w[0].at).collect()
}

#[tokio::test(start_paused = true)]
async fn a_bare_429_is_retried_only_after_the_backoff_which_doubles_up_to_max_pause() {
    // A reverse proxy's limiter: 429 with no Retry-After, no RateLimit
    // fields, three times, then 200.
    let partner = Partner::start(scripted(&[(429, ""), (429, ""), (429, ""), (200, "")])).await;
    let events = Events::default();
    let client = client(
        told("100/s burst 10", &events)
            .retries(3)
            .backoff(Duration::from_millis(200))
            .max_pause(Duration::from_millis(500)),
    );
    let response = client.get(partner.url("/")).send().await.expect("send");
    assert_eq!(response.status(), 200);
    assert_eq!(partner.hits(), 4);
    // 200 ms, doubled to 400 ms, doubled to 800 ms cut to 500 ms: each
    // retry reached the partner no sooner (the pause starts when the
    // refusal is read, after the partner sent it).
    let gaps = gaps(&partner);
    assert_eq!(gaps.len(), 3);
    for (gap, pause) in gaps.iter().zip([200, 400, 500]) {
        assert!(
            *gap >= Duration::from_millis(pause),
            "gap {gap:?} < {pause} ms: {gaps:?}"
        );
    }
    let paused: Vec<_> = events
        .all()
        .into_iter()
        .filter(|e| e.0 == "paused")
        .map(|e| (e.2, e.4, e.5, e.6))
        .collect();
    let ms = Duration::from_millis;
    assert_eq!(
        paused,
        [
            (Some(ms(200)), 0, false, false),
            (Some(ms(400)), 1, false, false),
            (Some(ms(500)), 2, true, false)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_post_is_not_retried_unless_any_method() {
    // (any_method, the status answered, the partner's hits)
    for (any_method, status, hits) in [(false, 503, 1), (true, 200, 2)] {
        let partner = Partner::start(scripted(&[(503, ""), (200, "")])).await;
        let events = Events::default();
        let client = client(told("100/s burst 10", &events).any_method(any_method));
        let response = client
            .post(partner.url("/orders"))
            .body("{}")
            .send()
            .await
            .expect("send");
        assert_eq!(response.status(), status, "any_method {any_method}");
        assert_eq!(partner.hits(), hits, "any_method {any_method}");
        if !any_method {
            // The refusal is evidence all the same (learning by default).
            assert_eq!(events.outcomes(), ["adapted", "gave_up"]);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_year_long_retry_after_pauses_for_max_pause_only() {
    let partner = Partner::start(scripted(&[(429, "31536000"), (200, "")])).await;
    let events = Events::default();
    let client = client(
        told("100/s burst 10", &events)
            .max_pause(Duration::from_secs(1))
            .retries(0)
            // The pause's arithmetic at the configured rate, exactly.
            .adaptive(false),
    );
    let response = client.get(partner.url("/")).send().await.expect("send");
    assert_eq!(response.status(), 429);
    let paused = events.all()[0].clone();
    assert_eq!(paused.0, "paused");
    assert_eq!(paused.2, Some(Duration::from_secs(1)));
    assert!(paused.5, "capped");
    // The next call waits out the second, not a year: the pause's second,
    // then one token of 100/s (the pause left the bucket empty), exactly.
    let response = client.get(partner.url("/")).send().await.expect("send");
    assert_eq!(response.status(), 200);
    let waited = events
        .all()
        .last()
        .filter(|e| e.0 == "waited")
        .and_then(|e| e.2);
    assert_eq!(waited, Some(Duration::from_millis(1000 + 10)));
    assert_eq!(partner.hits(), 2);
    assert_eq!(events.outcomes(), ["paused", "gave_up"]);
    println!("Retry-After: 31536000 with max_pause 1 s: the next call waited {waited:?}");
}

#[tokio::test(start_paused = true)]
async fn when_retries_are_spent_the_caller_gets_the_last_429() {
    let partner = Partner::start(scripted(&[(429, "")])).await;
    let events = Events::default();
    let client = client(told("100/s burst 10", &events).backoff(Duration::from_millis(20)));
    let response = client.get(partner.url("/")).send().await.expect("send");
    assert_eq!(response.status(), 429);
    assert_eq!(response.text().await.expect("body"), "answer 3");
    assert_eq!(partner.hits(), 3);
    // Each retry after its backoff; the last refusal, not retried, pauses
    // nothing. The first refusal cuts the learned rate; the next two come
    // within the gap after that cut (20 and 60 ms on the adapter's clock):
    // no evidence against the new rate.
    assert_eq!(
        events.outcomes(),
        [
            "adapted", "paused", "retried", "paused", "retried", "gave_up"
        ]
    );
    let attempts: Vec<u32> = events
        .all()
        .iter()
        .filter(|e| e.0 != "waited")
        .map(|e| e.4)
        .collect();
    assert_eq!(attempts, [0, 0, 0, 1, 1, 2]);
}

#[tokio::test(start_paused = true)]
async fn a_wait_beyond_the_timeout_fails_at_once_and_sends_nothing() {
    let partner = Partner::start(strict(100.0, 10.0)).await;
    let client = client(
        OutboundMiddleware::builder(bucket("1/s burst 1")).timeout(Duration::from_millis(100)),
    );
    let first = client.get(partner.url("/")).send().await.expect("send");
    assert_eq!(first.status(), 200);
    // At once: not after any part of the timeout.
    let start = Instant::now();
    let err = client.get(partner.url("/")).send().await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::ZERO);
    let ours = Error::from_reqwest(&err).expect("the limiter's error");
    assert_eq!(ours.code(), "deadline_exceeded");
    assert!(matches!(
        ours,
        Error::Limit(ratebound::Error::DeadlineExceeded { .. })
    ));
    assert_eq!(partner.hits(), 1, "the partner got nothing more");
}

#[tokio::test(start_paused = true)]
async fn keys_come_from_the_host_a_string_or_a_function() {
    for case in 0..3 {
        // A 503 first: its pause's event names the key.
        let partner = Partner::start(scripted(&[(503, ""), (200, "")])).await;
        let events = Events::default();
        let builder = told("100/s burst 10", &events).backoff(Duration::from_millis(20));
        let (builder, want) = match case {
            0 => (builder, format!("127.0.0.1:{}", partner.addr.port())),
            1 => (builder.key("partner"), "partner".to_string()),
            _ => (
                builder.key_fn(|r: &reqwest::Request| r.url().path().to_string()),
                "/a".to_string(),
            ),
        };
        let client = client(builder);
        let response = client.get(partner.url("/a")).send().await.expect("send");
        assert_eq!(response.status(), 200);
        // After the learned rate's cut (learning by default).
        assert_eq!(events.all()[1].0, "paused");
        assert_eq!(events.all()[1].1, want, "case {case}");
    }
}

/// The bucket's quota changed after the middleware was built (10/s → 20/s):
/// the partner's announced quota (100 left for 10 s) is a share of the
/// quota as it is now — the bucket then runs at 100 / (20 + 20·10) of it,
/// 9.09/s, not at 100 / (10 + 10·10) of it (18.2/s: twice what the
/// partner announced).
#[tokio::test(start_paused = true)]
async fn an_announced_quota_is_a_share_of_the_bucket_as_it_is_now() {
    let partner = Partner::start(|_| {
        reply(
            200,
            &[("RateLimit-Remaining", "100"), ("RateLimit-Reset", "10")],
            "ok",
        )
    })
    .await;
    let shared = std::sync::Arc::new(bucket("10/s burst 10"));
    let client = client(OutboundMiddleware::builder(shared.clone()));
    shared.set_quota(Quota::parse("20/s burst 20").expect("quota"));
    let status = client
        .get(partner.url("/items"))
        .send()
        .await
        .expect("send")
        .status();
    assert_eq!(status, 200);
    let rate = shared.quota().rate_per_second();
    assert!((rate - 100.0 / 11.0).abs() < 0.01, "{rate}");
}
