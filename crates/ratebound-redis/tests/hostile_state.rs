//! What a key can hold that the scripts did not expect — state beyond a
//! limit that a redeploy lowered, values that are not the algorithm's
//! state, another algorithm's state — against a real Redis. Each is that
//! key's own answer (a refusal with the exact wait); none may reach the
//! fail policy or the circuit breaker, which exist for an unreachable or
//! slow Redis, and no other key may notice.

mod support;

use std::time::Duration;

use ratebound::Quota;
use ratebound_redis::{Algorithm, Config, OnError, RedisLimiter, Source};
use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use support::{Server, fresh, manager};

type Limiter = RedisLimiter<ConnectionManager>;

fn bucket(quota: &str) -> Algorithm {
    Algorithm::TokenBucket(Quota::parse(quota).unwrap())
}

fn window(sliding: bool, limit: u64) -> Algorithm {
    let window = Duration::from_secs(60);
    if sliding {
        Algorithm::SlidingWindow { limit, window }
    } else {
        Algorithm::FixedWindow { limit, window }
    }
}

/// A limiter with `on_error` and the default breaker (3 failures in a row
/// open it), on `prefix`.
async fn limiter(
    server: &Server,
    algorithm: Algorithm,
    prefix: &str,
    on_error: OnError,
) -> Limiter {
    let mut c = Config::new(algorithm);
    c.prefix = prefix.to_string();
    c.on_error = on_error;
    // Generous: a slow moment of the machine must not look like a failure.
    c.timeout = Duration::from_secs(2);
    RedisLimiter::new(c, manager(&server.url()).await).unwrap()
}

/// A time well inside one 60 s window, in µs of an explicit clock.
const T0: u64 = 1_200_000_000_000_000 + 1_000_000;

/// Item 1: a redeploy lowers the burst 100 → 2 (or a window's limit
/// 100 → 2) and keeps the prefix. Fifty users who had spent 50 are
/// refused with the exact wait; the breaker stays closed, so a new user is
/// still decided by Redis, under either fail policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowered_limit_refuses_the_users_over_it_and_no_one_else() {
    let server = Server::start();
    for on_error in [OnError::Open, OnError::Closed] {
        // The exact wait: a bucket's TAT is 50 T = 5 s ahead, the new
        // tolerance 2 T = 0.2 s: 4.8 s + T = 4.9 s. A fixed window waits for
        // its end (T0 is 1 s into it); the sliding one until the estimate
        // 50·(60−e)/60 ≤ 1 in the next window: e ≥ 58.8 s, 118.8 s − 1 s.
        for (before, after, want) in [
            (
                bucket("10/s burst 100"),
                bucket("10/s burst 2"),
                Duration::from_millis(4_900),
            ),
            (
                window(false, 100),
                window(false, 2),
                Duration::from_secs(59),
            ),
            (
                window(true, 100),
                window(true, 2),
                Duration::from_millis(117_800),
            ),
        ] {
            let prefix = format!("{}:", fresh("lowered"));
            let old = limiter(&server, before, &prefix, on_error).await;
            let users: Vec<String> = (0..50).map(|i| format!("user-{i}")).collect();
            for u in &users {
                assert!(old.check_n_at(u, 50, T0).await.unwrap().is_allowed());
            }
            let new = limiter(&server, after, &prefix, on_error).await;
            for u in &users {
                for _ in 0..3 {
                    let d = new.check_n_at(u, 1, T0).await.unwrap();
                    let what = format!("{on_error:?} {after:?} {u}: {d:?}");
                    assert_eq!(d.source(), Source::Redis, "{what}");
                    assert!(!d.is_allowed(), "{what}");
                    assert_eq!(d.remaining(), 0, "{what}");
                    assert_eq!(d.retry_after(), want, "{what}");
                }
            }
            assert!(!new.engine().breaker_open(), "{on_error:?} {after:?}");
            let d = new.check_n_at("newcomer", 1, T0).await.unwrap();
            assert_eq!(
                (d.is_allowed(), d.source()),
                (true, Source::Redis),
                "{after:?}"
            );
            // Past the wait, an old user is admitted again.
            let later = T0 + u64::try_from(want.as_micros()).unwrap();
            let d = new.check_n_at("user-0", 1, later).await.unwrap();
            assert!(d.is_allowed(), "{after:?}: {d:?}");
            // A query (n = 0) reports the state and takes nothing.
            let q = new.check_n_at("user-1", 0, T0).await.unwrap();
            assert!(q.is_allowed() && q.remaining() == 0, "{after:?}: {q:?}");
        }
    }
}

/// A redeploy lengthens a sliding window on the same key (60 s → 120 s,
/// and 1 ms → 60 s): the stored window index, counted in the old length,
/// lies ahead of now in the new one. The key is judged damaged — refused
/// for one window at most, with a wait within it — never a window decades
/// away, nor a reply the engine would take for a failing Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lengthened_sliding_window_is_damaged_not_decades_away() {
    let server = Server::start();
    let mut admin = manager(&server.url()).await;
    for (before, after) in [(60_000u64, 120_000u64), (1, 60_000)] {
        let sliding = |ms| Algorithm::SlidingWindow {
            limit: 10,
            window: Duration::from_millis(ms),
        };
        let prefix = format!("{}:", fresh("lengthened"));
        let old = limiter(&server, sliding(before), &prefix, OnError::Open).await;
        // The old state, kept: a 1 ms window's key expires (in Redis' real
        // time) 2 ms after the write, sooner than a loaded machine may make
        // the next call; PERSIST keeps it, and a key that expired before
        // the PERSIST is written again (bounded).
        let redis_key = old.engine().redis_key(None, b"u");
        let mut kept = false;
        for _ in 0..100 {
            assert!(old.check_n_at("u", 3, T0).await.unwrap().is_allowed());
            let persisted: i64 = admin.persist(&redis_key).await.unwrap();
            if persisted == 1 || admin.exists::<_, bool>(&redis_key).await.unwrap() {
                kept = true;
                break;
            }
        }
        assert!(kept, "{before} ms: the old state was never kept");
        let new = limiter(&server, sliding(after), &prefix, OnError::Open).await;
        let window = Duration::from_millis(after);
        for i in 0..3 {
            let d = new.check_n_at("u", 1, T0).await.unwrap();
            let what = format!("{before} ms → {after} ms, check {i}: {d:?}");
            assert!(!d.is_allowed(), "{what}");
            // Found damaged once, rebuilt: then an ordinary full window.
            let want = if i == 0 {
                Source::Damaged
            } else {
                Source::Redis
            };
            assert_eq!(d.source(), want, "{what}");
            assert!(d.retry_after() <= 2 * window, "{what}");
            assert!(d.reset_after() <= 2 * window, "{what}");
        }
        assert!(!new.engine().breaker_open());
        // Two windows on, the key is an ordinary one again.
        let later = T0 + 2 * after * 1000;
        let d = new.check_n_at("u", 1, later).await.unwrap();
        assert_eq!((d.is_allowed(), d.source()), (true, Source::Redis), "{d:?}");
    }
}

/// The values a key can be found holding that no script wrote.
fn damage() -> Vec<&'static str> {
    vec![
        "garbage",
        "",
        "1e300",
        "9223372036854775808",
        "nan",
        "inf",
        "-5",
        "0x10",
        " 12",
        "12:x",
        "1:2:3:4:5",
        // A bucket's learned word beyond its bounds (hi above 2^18 - 1),
        // and a cut of more than the whole (above 65536).
        "1:2:999999:4",
        "1:2:65537:4",
        "99999999999999999999",
    ]
}

/// Item 2: one damaged key is refused (rebuilt as spent, `Source::Damaged`)
/// and heals within one burst period or window; the breaker never opens,
/// other keys are decided by Redis as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_key_is_that_keys_problem_alone() {
    let server = Server::start();
    let mut admin = manager(&server.url()).await;
    for algorithm in [bucket("1/s burst 5"), window(false, 5), window(true, 5)] {
        let prefix = format!("{}:", fresh("damaged"));
        let l = limiter(&server, algorithm, &prefix, OnError::Closed).await;
        let mut values: Vec<Option<&str>> = damage().into_iter().map(Some).collect();
        // None: a list where a string belongs (GET raises WRONGTYPE).
        values.push(None);
        for (i, value) in values.iter().enumerate() {
            let key = format!("k{i}");
            let redis_key = l.engine().redis_key(None, key.as_bytes());
            let _: () = admin.del(&redis_key).await.unwrap();
            match value {
                Some(v) => admin.set::<_, _, ()>(&redis_key, v).await.unwrap(),
                None => admin.rpush::<_, _, ()>(&redis_key, "x").await.unwrap(),
            }
            let what = format!("{algorithm:?} {value:?}");
            let d = l.check_n_at(&key, 1, T0).await.unwrap();
            assert_eq!(
                (d.is_allowed(), d.source()),
                (false, Source::Damaged),
                "{what}"
            );
            assert!(d.retry_after() > Duration::ZERO, "{what}");
            // Rebuilt: readable state now, refused as spent, by Redis.
            let d = l.check_n_at(&key, 1, T0).await.unwrap();
            assert_eq!(
                (d.is_allowed(), d.source()),
                (false, Source::Redis),
                "{what}"
            );
            let kind: String = redis::cmd("TYPE")
                .arg(&redis_key)
                .query_async(&mut admin)
                .await
                .unwrap();
            assert_eq!(kind, "string", "{what}");
            let ttl: i64 = admin.pttl(&redis_key).await.unwrap();
            assert!(ttl > 0, "{what}: the rebuilt key expires ({ttl})");
            // Healed after the wait it gave.
            let heal = T0 + u64::try_from(d.retry_after().as_micros()).unwrap();
            assert!(
                l.check_n_at(&key, 1, heal).await.unwrap().is_allowed(),
                "{what}"
            );
            // Everyone else is untouched.
            let d = l.check_n_at(&format!("other-{i}"), 1, T0).await.unwrap();
            assert_eq!(
                (d.is_allowed(), d.source()),
                (true, Source::Redis),
                "{what}"
            );
        }
        assert!(!l.engine().breaker_open(), "{algorithm:?}");
    }
}

/// Item 3: a token bucket and a fixed window on one key and one prefix
/// keep separate state; two policies of one middleware (scopes) too;
/// instances of one limiter still share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn algorithms_and_policies_never_share_a_key() {
    let server = Server::start();
    let prefix = format!("{}:", fresh("spaces"));
    let tb = limiter(&server, bucket("1/hour burst 20"), &prefix, OnError::Open).await;
    let fw = limiter(&server, window(false, 20), &prefix, OnError::Open).await;
    let (mut by_tb, mut by_fw) = (0, 0);
    for _ in 0..30 {
        let a = tb.check_n_at("alice", 1, T0).await.unwrap();
        let b = fw.check_n_at("alice", 1, T0).await.unwrap();
        assert_eq!((a.source(), b.source()), (Source::Redis, Source::Redis));
        by_tb += u32::from(a.is_allowed());
        by_fw += u32::from(b.is_allowed());
    }
    assert_eq!((by_tb, by_fw), (20, 20));
    assert!(!tb.engine().breaker_open() && !fw.engine().breaker_open());

    // A middleware's two policies, 10/hour burst 20 and 100/hour, on one
    // prefix (the default for both): 300 requests at once let 20 through
    // (the burst), not 99 as when they shared `rb:bob`.
    let burst = limiter(&server, bucket("10/hour burst 20"), &prefix, OnError::Open).await;
    let hourly = limiter(&server, bucket("100/hour"), &prefix, OnError::Open).await;
    let mut admitted = 0;
    for _ in 0..300 {
        let a = burst.check_in("burst", "bob", 1).await.unwrap();
        let b = hourly.check_in("hourly", "bob", 1).await.unwrap();
        admitted += u32::from(a.is_allowed() && b.is_allowed());
    }
    assert_eq!(admitted, 20);
    // Another instance of the hourly policy shares its key: every request
    // asked it, so its 100 are spent.
    let twin = limiter(&server, bucket("100/hour"), &prefix, OnError::Open).await;
    let d = twin.check_in("hourly", "bob", 1).await.unwrap();
    assert!(!d.is_allowed(), "{d:?}");
    // Unscoped, the same limiter is a key of its own.
    assert!(twin.check("bob").await.unwrap().is_allowed());
}
