//! Faults of a real Redis, alone in their own test binary (and the tests
//! here take turns): for each fail policy, a server killed and restarted,
//! `CLIENT PAUSE`, `SCRIPT FLUSH`, and waits under `CLIENT PAUSE`.
//!
//! Real time on a shared machine: a call's time has a liveness bound only
//! ([`BOUND`], the 50 ms deadline + 2.5 s), far below the `CLIENT PAUSE`
//! (30 s, lifted by `CLIENT UNPAUSE` once the test has seen what it needs)
//! a call without a deadline would wait out. The exact rule — the fail
//! policy answers exactly at the deadline, an open breaker at once — is
//! checked in tokio's virtual time by `deadlines.rs`
//! (`a_silent_server_gets_the_fail_policy_exactly_at_the_deadline`,
//! `waits_on_a_silent_server_follow_the_fail_policy_at_the_deadline`,
//! `batched_callers_on_a_silent_server_answer_at_their_own_deadline`).

mod support;

use std::time::{Duration, Instant};

use ratebound::Quota;
use ratebound_redis::{Algorithm, Config, OnError, RedisLimiter, Source};
use redis::aio::ConnectionManager;
use support::{Server, fresh, manager};
use tokio::sync::MutexGuard;

/// One test at a time: each pauses or kills its server.
static TURNS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A call's time at most: its deadline, and generous slack (liveness) for a
/// loaded machine.
const BOUND: Duration = Duration::from_millis(50 + 2_500);

/// How long `CLIENT PAUSE` would hold the server: far past [`BOUND`]. The
/// tests end it with [`unpause`] as soon as they have seen the calls it
/// stalls.
const PAUSE_MS: u64 = 30_000;

/// Stalls every script call (`CLIENT PAUSE … WRITE` holds `EVALSHA`) while
/// the admin connection can still lift it.
async fn pause(admin: &mut ConnectionManager) {
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(PAUSE_MS)
        .arg("WRITE")
        .query_async(admin)
        .await
        .unwrap();
}

/// Lifts [`pause`].
async fn unpause(admin: &mut ConnectionManager) {
    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query_async(admin)
        .await
        .unwrap();
}

fn policy_config(on_error: OnError) -> Config {
    let mut c = Config::new(Algorithm::TokenBucket(
        Quota::parse("100/s burst 100").unwrap(),
    ));
    c.on_error = on_error;
    c.timeout = Duration::from_millis(50);
    c.breaker_cooldown = Duration::from_millis(200);
    c
}

/// Checks until `want` answers (bounded by `within`); the longest call.
async fn until_source(
    limiter: &RedisLimiter<ConnectionManager>,
    key: &str,
    want: Source,
    within: Duration,
) -> Duration {
    let start = Instant::now();
    let mut longest = Duration::ZERO;
    loop {
        let t = Instant::now();
        let d = limiter.check(key).await.unwrap();
        longest = longest.max(t.elapsed());
        if d.source() == want {
            return longest;
        }
        assert!(
            start.elapsed() < within,
            "no {want:?} within {within:?} (last {:?})",
            d.source()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// This test's turn (held while the guard lives), a fresh server and an
/// admin connection to it.
async fn my_turn_on_a_server() -> (MutexGuard<'static, ()>, Server, ConnectionManager) {
    let turn = TURNS.lock().await;
    let server = Server::start();
    let admin = manager(&server.url()).await;
    (turn, server, admin)
}

/// A limiter on `server` with the fail policy `on_error` (and the other
/// settings of [`policy_config`]), and a fresh key Redis has answered once.
async fn answered_once(
    server: &Server,
    on_error: OnError,
    name: &str,
) -> (RedisLimiter<ConnectionManager>, String) {
    let limiter = RedisLimiter::new(policy_config(on_error), manager(&server.url()).await).unwrap();
    let key = fresh(name);
    assert_eq!(limiter.check(&key).await.unwrap().source(), Source::Redis);
    (limiter, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_fail_policy_does_what_it_says_and_recovers() {
    let _turn = TURNS.lock().await;
    for (on_error, failed) in [
        (OnError::Open, Source::FailOpen),
        (OnError::Closed, Source::FailClosed),
        (OnError::Local(50.0), Source::Local),
    ] {
        let mut server = Server::start();
        let (limiter, key) = answered_once(&server, on_error, "faults").await;

        // Killed: every call answers within its deadline, by the policy.
        server.kill();
        let mut longest = Duration::ZERO;
        for _ in 0..10 {
            let t = Instant::now();
            let d = limiter.check(&key).await.unwrap();
            longest = longest.max(t.elapsed());
            assert_eq!(d.source(), failed, "{on_error:?}");
            match on_error {
                OnError::Open => assert!(d.is_allowed()),
                OnError::Closed => {
                    assert!(!d.is_allowed());
                    assert_eq!(d.retry_after(), Duration::from_millis(200));
                }
                OnError::Local(_) => assert!(d.is_allowed(), "the local share's burst"),
            }
        }
        assert!(longest <= BOUND, "{longest:?}");
        assert!(limiter.engine().breaker_open());

        // Restarted (empty: no script, no keys): the breaker probes after
        // its cool-down and Redis answers again, with the same client.
        server.restart();
        let longest = until_source(&limiter, &key, Source::Redis, Duration::from_secs(10)).await;
        assert!(longest <= BOUND, "{longest:?}");

        // Slow: CLIENT PAUSE makes calls miss their deadline.
        let mut admin = manager(&server.url()).await;
        pause(&mut admin).await;
        let t = Instant::now();
        let d = limiter.check(&key).await.unwrap();
        let took = t.elapsed();
        assert_eq!(d.source(), failed);
        assert!(took <= BOUND, "{took:?}");
        unpause(&mut admin).await;
        let longest = until_source(&limiter, &key, Source::Redis, Duration::from_secs(10)).await;
        assert!(longest <= BOUND, "{longest:?}");

        // SCRIPT FLUSH: transparent (EVALSHA's NOSCRIPT loads it again).
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut admin)
            .await
            .unwrap();
        assert_eq!(limiter.check(&key).await.unwrap().source(), Source::Redis);
    }
}

/// Waiting while Redis is paused (CLIENT PAUSE): the reservation misses
/// its call deadline and the fail policy answers the wait — `open` goes
/// ahead, `closed` fails at once, `local` waits on the local share — and
/// no wait exceeds its timeout by more than one call deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_under_client_pause_follow_the_fail_policy() {
    let (_turn, server, mut admin) = my_turn_on_a_server().await;
    for (on_error, want) in [
        (OnError::Open, Some(Source::FailOpen)),
        (OnError::Closed, None),
        (OnError::Local(50.0), Some(Source::Local)),
    ] {
        let limiter =
            RedisLimiter::new(policy_config(on_error), manager(&server.url()).await).unwrap();
        let key = fresh("pause-wait");
        assert_eq!(
            limiter.acquire_n(&key, 1, None).await.unwrap(),
            Source::Redis
        );
        pause(&mut admin).await;
        let t = Instant::now();
        let got = limiter
            .acquire_n(&key, 1, Some(Duration::from_millis(200)))
            .await;
        let took = t.elapsed();
        match want {
            Some(source) => assert_eq!(got.unwrap(), source, "{on_error:?}"),
            // Issue 36: the fail policy's refusal says so, and why.
            None => {
                let e = got.unwrap_err();
                assert_eq!(e.code(), "store_unavailable", "{e}");
                let text = e.to_string();
                assert!(
                    text.contains("redis unavailable (no reply within 50ms)")
                        && text.contains("the fail policy 'closed' refused"),
                    "{text}"
                );
            }
        }
        // One call deadline (50 ms; generously bounded), never the pause:
        // none of them needed to wait for tokens.
        assert!(took <= BOUND, "{on_error:?}: {took:?}");
        unpause(&mut admin).await;
    }
}

/// Batching under `CLIENT PAUSE`: 64 callers in flight on one limiter
/// (one queued behind the other's send), every one answered by the fail
/// policy within its own deadline — none hangs behind a stalled batch —
/// and Redis answers again once the pause is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_callers_under_client_pause_answer_within_their_deadline() {
    let (_turn, server, mut admin) = my_turn_on_a_server().await;
    for (on_error, failed) in [
        (OnError::Open, Source::FailOpen),
        (OnError::Closed, Source::FailClosed),
    ] {
        assert!(policy_config(on_error).batch, "batching is the default");
        let (limiter, key) = answered_once(&server, on_error, "pause-batch").await;
        pause(&mut admin).await;
        let mut callers = Vec::new();
        for i in 0..64 {
            let (limiter, key) = (limiter.clone(), format!("{key}:{i}"));
            callers.push(tokio::spawn(async move {
                let t = Instant::now();
                let d = limiter.check(&key).await.unwrap();
                (d.source(), t.elapsed())
            }));
        }
        for c in callers {
            let (source, took) = tokio::time::timeout(Duration::from_secs(10), c)
                .await
                .expect("no caller hangs")
                .unwrap();
            assert_eq!(source, failed, "{on_error:?}");
            assert!(took <= BOUND, "{on_error:?}: {took:?}");
        }
        unpause(&mut admin).await;
        let longest = until_source(&limiter, &key, Source::Redis, Duration::from_secs(10)).await;
        assert!(longest <= BOUND, "{longest:?}");
    }
}

/// A configuration mistake is an error, never the fail policy (issue 36):
/// the server starts requiring a password the limiter's connection does not
/// have (its connections are killed, and the connection manager connects
/// again without one). Every call is then `NOAUTH`: with the fail policy
/// `open` that used to admit everything, silently and for good; now each
/// check is a `store_misconfigured` error naming the cause, and the breaker
/// never opens. Once the server takes the client again, Redis decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_the_client_lacks_is_an_error_not_the_fail_policy() {
    let (_turn, server, mut admin) = my_turn_on_a_server().await;
    let (limiter, key) = answered_once(&server, OnError::Open, "noauth").await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("s3cret-pw")
        .query_async(&mut admin)
        .await
        .unwrap();
    // Every other connection must authenticate again.
    let me: i64 = redis::cmd("CLIENT")
        .arg("ID")
        .query_async(&mut admin)
        .await
        .unwrap();
    let _: redis::Value = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(me + 1)
        .arg("SKIPME")
        .arg("yes")
        .query_async(&mut admin)
        .await
        .unwrap_or(redis::Value::Nil);
    let _: redis::Value = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query_async(&mut admin)
        .await
        .unwrap();
    // Bounded: the reconnection lands within a few calls. The calls that
    // met the dropped connection itself are an outage, for the fail policy
    // (and the breaker, which may open for a cool-down); from the first
    // answer of the server on, each call is the mistake, never the policy.
    let mut errors = 0;
    let mut dropped = 0;
    for _ in 0..50 {
        match limiter.check(&key).await {
            Ok(d) if errors == 0 && d.source() == Source::FailOpen => dropped += 1,
            Err(e) => {
                assert_eq!(e.code(), "store_misconfigured", "{e}");
                let text = e.to_string();
                assert!(text.contains("authentication required"), "{text}");
                assert!(!text.contains("s3cret-pw"), "{text}");
                errors += 1;
                if errors == 5 {
                    break;
                }
            }
            Ok(d) => assert_ne!(d.source(), Source::FailOpen, "never the fail policy"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(errors, 5, "the mistake is reported at every call");
    let stats = limiter.stats();
    println!("{dropped} answers while the connection was dropped; {stats:?}");
    assert_eq!(stats.fail_policy(), dropped, "{stats:?}");
    assert!(!stats.breaker_open, "{stats:?}");
}
