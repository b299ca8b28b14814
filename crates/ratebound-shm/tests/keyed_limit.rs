//! The shared limiters behind `ratebound::KeyedLimit` (the trait the HTTP
//! layer's remote policies and the outbound adapters take): answered at
//! once, a text key and the same bytes two keys (as in every binding), the
//! scope ignored, a pause for every handle of the file.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::bucket;
use ratebound::any::Key;
use ratebound::pause::Reach;
use ratebound::{KeyedLimit, LimitCheck};
use ratebound_shm::{SharedKeyedLimiter, SharedLimiter};

/// The answer of a check that must need no I/O.
fn at_once(check: LimitCheck) -> bool {
    match check.now() {
        Some(answer) => answer.expect("check").is_allowed(),
        None => panic!("a shared table answers at once"),
    }
}

/// How far a pause of `seconds` for the key `key` through the trait reached.
async fn paused(limit: &dyn KeyedLimit, key: &str, seconds: u64) -> Reach {
    let pause = limit.pause(Key::Text(key), Duration::from_secs(seconds));
    pause.await.expect("pause")
}

#[tokio::test]
async fn a_shared_keyed_table_as_a_keyed_limit() {
    let path = common::dir("shm-keyed-limit", "keyed").join("k.limit");
    let limit: Arc<dyn KeyedLimit> =
        Arc::new(SharedKeyedLimiter::open(&path, bucket("1/minute burst 1"), 64).expect("open"));
    assert_eq!(limit.algorithm(), bucket("1/minute burst 1"));
    assert!(at_once(limit.check("api", Key::Text("k"), 1)));
    assert!(!at_once(limit.check("api", Key::Text("k"), 1)));
    // Another scope is the same key (the file is the policy's own)…
    assert!(!at_once(limit.check("web", Key::Text("k"), 1)));
    // …but the same bytes are another key, as in the bindings.
    assert!(at_once(limit.check("api", Key::Bytes(b"k"), 1)));

    // A second handle on the file sees a pause made through the trait.
    let other = SharedKeyedLimiter::open(&path, bucket("1/minute burst 1"), 64).expect("open");
    assert_eq!(paused(&*limit, "p", 60).await, Reach::Shared);
    assert!(!other.check(Key::Text("p")).expect("check").is_allowed());
    let err = limit
        .acquire(Key::Text("p"), 1, Some(Duration::ZERO))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "deadline_exceeded");
    let err = limit.acquire(Key::Text("q"), 2, None).await.unwrap_err();
    assert_eq!(err.code(), "insufficient_capacity");
    limit
        .acquire(Key::Text("q"), 1, Some(Duration::ZERO))
        .await
        .expect("a full bucket");
}

#[tokio::test]
async fn a_shared_limit_as_a_keyed_limit_ignores_the_key() {
    let path = common::dir("shm-keyed-limit", "single").join("s.limit");
    let limit: Arc<dyn KeyedLimit> =
        Arc::new(SharedLimiter::open(&path, bucket("1/minute burst 2")).expect("open"));
    assert!(at_once(limit.check("api", Key::Text("a"), 1)));
    assert!(at_once(limit.check("web", Key::Bytes(b"b"), 1)));
    assert!(!at_once(limit.check("api", Key::Int(3), 1)));
    assert_eq!(paused(&*limit, "x", 1).await, Reach::Shared);
}

#[tokio::test]
async fn the_shared_limits_learn_through_the_trait_a_window_does_not() {
    use ratebound::outbound::{FULL, Learned};
    let d = common::dir("shm-keyed-limit", "learn");
    let tenth = Learned::new(FULL / 10 + 1, 1);
    let one: Arc<dyn KeyedLimit> =
        Arc::new(SharedLimiter::open(d.join("one.limit"), bucket("1/h burst 100")).expect("open"));
    let keyed: Arc<dyn KeyedLimit> = Arc::new(
        SharedKeyedLimiter::open(d.join("k.limit"), bucket("1/h burst 100"), 64).expect("open"),
    );
    for limit in [&one, &keyed] {
        assert!(limit.learns());
        let k = Key::Text("partner");
        assert_eq!(limit.learned(k), Learned::fresh());
        assert!(
            limit
                .adapt(k, Learned::fresh(), tenth)
                .await
                .expect("adapt")
        );
        assert!(
            !limit
                .adapt(k, Learned::fresh(), tenth)
                .await
                .expect("adapt")
        );
        assert_eq!(limit.learned(k), tenth);
        let admitted = (0..100)
            .filter(|_| at_once(limit.check("api", k, 1)))
            .count();
        assert_eq!(admitted, 10, "a tenth of the burst");
    }
    let window = common::fixed_window(10, Duration::from_secs(1));
    let w: Arc<dyn KeyedLimit> =
        Arc::new(SharedKeyedLimiter::open(d.join("w.limit"), window, 64).expect("open"));
    assert!(!w.learns());
    let err = w
        .adapt(Key::Text("partner"), Learned::fresh(), tenth)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "unsupported");
}
