//! `RedisLimiter` behind `ratebound::KeyedLimit` (the trait the HTTP
//! layer's remote policies and the outbound adapters take), against a real
//! Redis: a check in its scope, a text key and the same bytes one key (an
//! integer its digits), a wait, a pause for the fleet.

mod support;

use std::sync::Arc;
use std::time::Duration;

use ratebound::any::Key;
use ratebound::pause::Reach;
use ratebound::{KeyedAlgorithm, KeyedLimit, Quota};
use ratebound_redis::{Algorithm, Config, OnError, RedisLimiter};
use support::{Server, fresh, manager};

async fn allowed(limit: &dyn KeyedLimit, scope: &str, key: Key<'_>) -> bool {
    limit
        .check(scope, key, 1)
        .answer()
        .await
        .expect("check")
        .is_allowed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_limiter_as_a_keyed_limit() {
    let server = Server::start();
    let quota = Quota::parse("1/minute burst 1").unwrap();
    let mut c = Config::new(Algorithm::TokenBucket(quota));
    c.on_error = OnError::Closed;
    c.timeout = Duration::from_secs(2);
    let redis = RedisLimiter::new(c, manager(&server.url()).await).unwrap();
    let limit: Arc<dyn KeyedLimit> = Arc::new(redis.clone());
    assert_eq!(limit.algorithm(), KeyedAlgorithm::TokenBucket(quota));

    // A check needs I/O: it answers a future that owns what it needs.
    let k = fresh("kl");
    let check = limit.check("api", Key::Text(&k), 1);
    assert!(check.now().is_none(), "a Redis check is pending");
    assert!(allowed(limit.as_ref(), "api", Key::Text(&k)).await);
    // The same bytes are the same key in Redis…
    assert!(!allowed(limit.as_ref(), "api", Key::Bytes(k.as_bytes())).await);
    // …in the policy's own scope only.
    assert!(allowed(limit.as_ref(), "web", Key::Text(&k)).await);
    // An integer is its decimal digits.
    let n = i128::from(std::process::id()) * 1_000_000 + 7;
    assert!(allowed(limit.as_ref(), "int", Key::Int(n)).await);
    assert!(!allowed(limit.as_ref(), "int", Key::Text(&n.to_string())).await);

    // A wait, and a pause every instance obeys.
    let w = fresh("kl-wait");
    limit
        .acquire(Key::Text(&w), 1, Some(Duration::ZERO))
        .await
        .expect("a full bucket");
    let err = limit
        .acquire(Key::Bytes(w.as_bytes()), 1, Some(Duration::ZERO))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "deadline_exceeded");
    let p = fresh("kl-pause");
    assert_eq!(
        limit
            .pause(Key::Text(&p), Duration::from_secs(60))
            .await
            .expect("pause"),
        Reach::Shared
    );
    assert!(
        !redis
            .check(&p)
            .await
            .expect("check")
            .decision()
            .is_allowed()
    );
}
