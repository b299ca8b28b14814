//! Bad input is a typed error when an adapter is built, naming the value:
//! a window limiter (it cannot be paused), a zero `max_pause`, a status
//! outside 100–599, `n = 0` — for both adapters, and for every limiter.

mod support;

use std::time::Duration;

use http::request::Parts;
use ratebound::{KeyedAlgorithm, KeyedLimit, Quota, TokenBucket};
use ratebound_client::{Error, OutboundBuilder, OutboundLayer, OutboundMiddleware};
use ratebound_redis::{Algorithm, Config, RedisLimiter};
use ratebound_shm::{SharedKeyedLimiter, SharedLimiter};

fn bucket() -> TokenBucket {
    TokenBucket::new(Quota::parse("10/s").expect("quota"))
}

/// Builds both adapters with `f`'s options; both errors must agree.
fn both(
    limiter: impl KeyedLimit + Clone + 'static,
    f: impl Fn(OutboundBuilder<reqwest::Request>) -> OutboundBuilder<reqwest::Request>,
    g: impl Fn(OutboundBuilder<Parts>) -> OutboundBuilder<Parts>,
) -> Error {
    let a = f(OutboundMiddleware::builder(limiter.clone()))
        .build()
        .unwrap_err();
    let b = g(OutboundLayer::builder(limiter)).build().unwrap_err();
    assert_eq!(a.to_string(), b.to_string());
    assert_eq!(a.code(), b.code());
    a
}

fn window() -> KeyedAlgorithm {
    KeyedAlgorithm::FixedWindow {
        limit: 100,
        window: Duration::from_secs(60),
    }
}

#[test]
fn window_limiters_are_refused_shared_memory() {
    let dir = std::env::temp_dir().join(format!("ratebound-client-build-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir); // a failed run's
    std::fs::create_dir_all(&dir).expect("dir");
    let single =
        std::sync::Arc::new(SharedLimiter::open(dir.join("w.limit"), window()).expect("open"));
    let sliding = KeyedAlgorithm::SlidingWindow {
        limit: 100,
        window: Duration::from_secs(60),
    };
    let keyed = std::sync::Arc::new(
        SharedKeyedLimiter::open(dir.join("k.limit"), sliding, 16).expect("open"),
    );
    let e = both(single, |b| b, |b| b);
    assert_eq!(e.code(), "unsupported");
    assert_eq!(
        e.to_string(),
        "fixed_window does not support pause (an outbound limiter must be a token bucket)"
    );
    assert!(matches!(
        e,
        Error::Limit(ratebound::Error::Unsupported {
            algorithm: "fixed_window",
            ..
        })
    ));
    let e = both(keyed, |b| b, |b| b);
    assert_eq!(
        e.to_string(),
        "sliding_window does not support pause (an outbound limiter must be a token bucket)"
    );
    // A shared token bucket is taken.
    let tb = KeyedAlgorithm::TokenBucket(Quota::parse("10/s").expect("quota"));
    let ok = SharedLimiter::open(dir.join("tb.limit"), tb).expect("open");
    assert!(OutboundMiddleware::builder(ok).build().is_ok());
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[tokio::test]
async fn window_limiters_are_refused_redis() {
    let redis = support::Redis::start();
    let conn = redis::aio::ConnectionManager::new(redis::Client::open(redis.url()).expect("url"))
        .await
        .expect("connect");
    let window = Algorithm::SlidingWindow {
        limit: 100,
        window: Duration::from_secs(60),
    };
    let limiter = RedisLimiter::new(Config::new(window), conn.clone()).expect("limiter");
    let e = both(limiter, |b| b, |b| b);
    assert_eq!(
        e.to_string(),
        "sliding_window does not support pause (an outbound limiter must be a token bucket)"
    );
    let tb =
        RedisLimiter::token_bucket(Quota::parse("10/s").expect("quota"), conn).expect("limiter");
    assert!(OutboundLayer::builder(tb).build().is_ok());
}

#[test]
fn a_zero_max_pause_is_refused() {
    let e = both(
        std::sync::Arc::new(bucket()),
        |b| b.max_pause(Duration::ZERO),
        |b| b.max_pause(Duration::ZERO),
    );
    assert_eq!(e.code(), "invalid_number");
    assert!(
        e.to_string()
            .starts_with("invalid max_pause 0: must be more than 0"),
        "{e}"
    );
}

#[test]
fn a_status_outside_100_to_599_is_refused() {
    for bad in [600, 99, 0] {
        let e = both(
            std::sync::Arc::new(bucket()),
            |b| b.statuses(&[429, bad]),
            |b| b.statuses(&[429, bad]),
        );
        assert_eq!(e.code(), "invalid_number");
        assert_eq!(
            e.to_string(),
            format!("invalid status {bad}: must be an HTTP status, 100 to 599")
        );
    }
    assert!(
        OutboundMiddleware::builder(bucket())
            .statuses(&[429, 503, 502])
            .build()
            .is_ok()
    );
}

#[test]
fn zero_tokens_per_sending_is_refused() {
    let e = both(std::sync::Arc::new(bucket()), |b| b.n(0), |b| b.n(0));
    assert_eq!(e.to_string(), "invalid n 0: must be at least 1");
}
