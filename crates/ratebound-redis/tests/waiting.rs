//! Waiting for a global token against a real Redis: one reservation per
//! acquisition in one order for every instance, cancellation, a pause for
//! everyone, the fail policy while waiting, bad input.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ratebound::Quota;
use ratebound_redis::{Algorithm, Config, OnError, RedisLimiter, Source};
use redis::aio::ConnectionManager;
use support::{Server, fresh};
use tokio::sync::Mutex;

type Limiter = RedisLimiter<ConnectionManager>;

async fn manager(url: &str) -> ConnectionManager {
    let client = redis::Client::open(url).expect("url");
    ConnectionManager::new(client).await.expect("connect")
}

async fn bucket(server: &Server, quota: &str, on_error: OnError) -> Limiter {
    let mut c = Config::new(Algorithm::TokenBucket(Quota::parse(quota).unwrap()));
    c.on_error = on_error;
    c.timeout = Duration::from_secs(1);
    RedisLimiter::new(c, manager(&server.url()).await).unwrap()
}

async fn script_calls(conn: &mut ConnectionManager) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    support::script_calls(&info)
}

/// Fifty instances (own connections) each acquire 3 tokens at 50/s burst
/// 10: completions never run ahead of burst + rate·t, the last completes
/// about (150 − 10)/50 = 2.8 s after the start, and Redis served about one
/// script call per acquisition (plus one EVAL per connection): no polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_instances_wait_in_one_order_with_one_call_each() {
    let server = Server::start();
    let mut admin = manager(&server.url()).await;
    let key = fresh("fifty");
    let mut instances = Vec::new();
    for _ in 0..50 {
        instances.push(bucket(&server, "50/s burst 10", OnError::Closed).await);
    }
    let before = script_calls(&mut admin).await;
    let done = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for limiter in instances {
        let (key, done) = (key.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..3 {
                let source = limiter
                    .acquire_n(&key, 1, Some(Duration::from_secs(10)))
                    .await
                    .unwrap();
                assert_eq!(source, Source::Redis);
                done.lock().await.push(start.elapsed());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let calls = script_calls(&mut admin).await - before;
    let mut times = done.lock().await.clone();
    times.sort();
    assert_eq!(times.len(), 150);
    // Never ahead of the bound: the k-th completion (1-based) no earlier
    // than (k − 10)/50 s (1 ms for the µs rounding of the schedule).
    for (i, t) in times.iter().enumerate() {
        let earliest = (i as f64 + 1.0 - 10.0).max(0.0) / 50.0 - 0.001;
        assert!(
            t.as_secs_f64() >= earliest,
            "completion {i} at {t:?} < {earliest}"
        );
    }
    let last = times[149].as_secs_f64();
    println!("fifty instances: 150 acquisitions, last at {last:.3} s, {calls} script calls");
    assert!((2.8..2.8 + 0.6).contains(&last), "last at {last}");
    // One EVALSHA per acquisition; each connection's first meets NOSCRIPT
    // once (then EVAL): at most 150 + 50.
    assert!((150..=200).contains(&calls), "{calls} script calls");
}

/// Two instances' reservations interleave in one order; a cancelled one
/// gives its slot to the next caller; one beyond max_wait is refused and
/// takes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_share_one_order_and_cancel_gives_the_slot_back() {
    let server = Server::start();
    let key = fresh("reserve");
    let a = bucket(&server, "10/s burst 1", OnError::Closed).await;
    let b = bucket(&server, "10/s burst 1", OnError::Closed).await;
    let max = Duration::from_secs(5);
    let r0 = a.reserve_n(&key, 1, max).await.unwrap();
    let r1 = b.reserve_n(&key, 1, max).await.unwrap();
    let r2 = a.reserve_n(&key, 1, max).await.unwrap();
    let r3 = b.reserve_n(&key, 1, max).await.unwrap();
    let delays: Vec<u128> = [&r0, &r1, &r2, &r3]
        .iter()
        .map(|r| r.delay().as_millis())
        .collect();
    // 100 ms apart, in the order the calls reached Redis (less the time
    // between the calls, a few ms).
    assert_eq!(delays[0], 0);
    for (i, d) in delays.iter().enumerate().skip(1) {
        let want = 100 * i as u128;
        assert!(*d <= want && *d + 20 >= want, "{delays:?}");
    }
    // Beyond max_wait: refused, nothing taken.
    let err = a
        .reserve_n(&key, 1, Duration::from_millis(250))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "deadline_exceeded");
    // The last one cancelled: the next reservation takes its slot.
    assert!(r3.cancel().await);
    let r4 = b.reserve_n(&key, 1, max).await.unwrap();
    assert!(r4.delay() <= Duration::from_millis(300), "{:?}", r4.delay());
    assert!(r4.delay() + Duration::from_millis(20) >= Duration::from_millis(300));
    // A dropped reservation gives its tokens back too.
    drop(r4);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r5 = a.reserve_n(&key, 1, max).await.unwrap();
    assert!(r5.delay() <= Duration::from_millis(300), "{:?}", r5.delay());
    for r in [r0, r1, r2, r5] {
        r.consume();
    }
    // A dropped acquire gives its reservation back as well.
    let waiting = a.acquire_n(&key, 1, None);
    let _ = tokio::time::timeout(Duration::from_millis(20), waiting).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r6 = b.reserve_n(&key, 1, max).await.unwrap();
    assert!(r6.delay() <= Duration::from_millis(300), "{:?}", r6.delay());
    r6.consume();
}

/// A pause by one instance is seen by another's check, reservation and
/// acquire; a second pause inside the first changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_is_for_everyone_and_once() {
    let server = Server::start();
    let key = fresh("pause");
    let a = bucket(&server, "100/s burst 10", OnError::Closed).await;
    let b = bucket(&server, "100/s burst 10", OnError::Closed).await;
    assert!(b.check(&key).await.unwrap().is_allowed());
    let shift = a.pause(&key, Duration::from_millis(400)).await.unwrap();
    assert!(
        shift.is_some_and(|s| s >= Duration::from_millis(399)),
        "{shift:?}"
    );
    // Inside it, from another instance: covered already, nothing shifts.
    let again = b.pause(&key, Duration::from_millis(100)).await.unwrap();
    assert_eq!(again, Some(Duration::ZERO));
    let d = b.check(&key).await.unwrap();
    assert!(
        !d.is_allowed() && d.retry_after() > Duration::from_millis(300),
        "{d:?}"
    );
    let r = b.reserve_n(&key, 1, Duration::from_secs(5)).await.unwrap();
    assert!(r.delay() > Duration::from_millis(300), "{:?}", r.delay());
    r.consume();
    let t = Instant::now();
    b.acquire_n(&key, 1, Some(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(
        t.elapsed() > Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    // An acquire that cannot end before its timeout fails at once.
    a.pause(&key, Duration::from_secs(10)).await.unwrap();
    let t = Instant::now();
    let err = b
        .acquire_n(&key, 1, Some(Duration::from_millis(500)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "deadline_exceeded");
    assert!(
        t.elapsed() < Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
}

/// Starts `count` acquisitions of one token on `key`, each reserved before
/// the next starts (10 ms apart; a reservation takes well under 1 ms here):
/// their completion times from `t0`, in the order they reserved.
fn waiters(
    limiter: &Limiter,
    key: &str,
    count: usize,
    t0: Instant,
) -> Vec<tokio::task::JoinHandle<Duration>> {
    (0..count)
        .map(|i| {
            let (limiter, key) = (limiter.clone(), key.to_string());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(10 * i as u64)).await;
                limiter
                    .acquire_n(&key, 1, Some(Duration::from_secs(10)))
                    .await
                    .unwrap();
                t0.elapsed()
            })
        })
        .collect()
}

/// Instance A holds reservations up to 400 ms ahead (10/s burst 1, five
/// waiters); instance B (its own connection) pauses the key 600 ms. A hears
/// of it on the pause channel: its waiters complete only after the pause's
/// end, in their order, each 600 ms after its old time — and the script
/// ran once per acquisition (and once for the pause): no call was added.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_already_sleeping_move_past_a_pause_made_elsewhere() {
    let server = Server::start();
    let mut admin = manager(&server.url()).await;
    let key = fresh("sleeping");
    let client = redis::Client::open(server.url()).unwrap();
    let a = bucket(&server, "10/s burst 1", OnError::Closed)
        .await
        .with_pause_news(client)
        .await;
    assert!(a.listening());
    let b = bucket(&server, "10/s burst 1", OnError::Closed).await;
    // The script is loaded: every call below is one EVALSHA.
    b.check(fresh("warm")).await.unwrap();
    let before = script_calls(&mut admin).await;
    let t0 = Instant::now();
    let tasks = waiters(&a, &key, 5, t0);
    tokio::time::sleep(Duration::from_millis(60)).await;
    let paused_at = t0.elapsed();
    let shift = b.pause(&key, Duration::from_millis(600)).await.unwrap();
    assert!(
        shift.is_some_and(|s| s >= Duration::from_millis(599)),
        "{shift:?}"
    );
    let end = paused_at + Duration::from_millis(600);
    let mut done = Vec::new();
    for t in tasks {
        done.push(t.await.unwrap());
    }
    println!("pause at {paused_at:?}, its end {end:?}; completions {done:?}");
    assert!(done[0] < paused_at, "the burst went at once: {done:?}");
    for (i, t) in done.iter().enumerate().skip(1) {
        assert!(
            *t >= end,
            "waiter {i} at {t:?}, inside the pause (ends {end:?})"
        );
        // Its old time (reserved ~10i ms after t0, due 100 ms after the
        // previous one: 100i ms), 600 ms later.
        let want = Duration::from_millis(100 * i as u64 + 600);
        assert!(
            *t + Duration::from_millis(30) >= want && *t <= want + Duration::from_millis(150),
            "waiter {i} at {t:?}, want ~{want:?}"
        );
        assert!(done[i - 1] <= *t, "out of order: {done:?}");
    }
    let calls = script_calls(&mut admin).await - before;
    assert_eq!(
        calls,
        5 + 1,
        "one script call per acquisition, one for the pause"
    );
    // The listener stops at shutdown.
    a.shutdown().await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!a.listening());
}

/// A waiter whose limiter does not listen (no `with_pause_news`) goes ahead
/// at its old time, inside another instance's pause — the documented
/// limitation — and its next call finds the pause in Redis. A limiter's
/// own pause reaches its own waiters without listening.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_does_not_listen_goes_ahead_and_its_next_call_finds_the_pause() {
    let server = Server::start();
    let key = fresh("deaf");
    let c = bucket(&server, "10/s burst 1", OnError::Closed).await;
    let b = bucket(&server, "10/s burst 1", OnError::Closed).await;
    assert!(!c.listening());
    let t0 = Instant::now();
    let tasks = waiters(&c, &key, 2, t0);
    tokio::time::sleep(Duration::from_millis(40)).await;
    let paused_at = t0.elapsed();
    b.pause(&key, Duration::from_millis(500)).await.unwrap();
    let end = paused_at + Duration::from_millis(500);
    let mut done = Vec::new();
    for t in tasks {
        done.push(t.await.unwrap());
    }
    assert!(
        done[1] < end && done[1] >= Duration::from_millis(95),
        "it went at its old time, 100 ms: {done:?} (the pause ends {end:?})"
    );
    c.acquire_n(&key, 1, Some(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(t0.elapsed() >= end, "the next call waits past the pause");

    // Its own pause: told at once.
    let key = fresh("own");
    let t0 = Instant::now();
    let tasks = waiters(&c, &key, 2, t0);
    tokio::time::sleep(Duration::from_millis(40)).await;
    let paused_at = t0.elapsed();
    c.pause(&key, Duration::from_millis(500)).await.unwrap();
    let mut done = Vec::new();
    for t in tasks {
        done.push(t.await.unwrap());
    }
    let end = paused_at + Duration::from_millis(500);
    assert!(done[1] >= end, "{done:?} (the pause ends {end:?})");
}

/// While Redis is down: open returns at once, closed fails at once, local
/// waits on the local share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_policies_while_waiting() {
    let mut server = Server::start();
    let open = bucket(&server, "10/s burst 1", OnError::Open).await;
    let closed = bucket(&server, "10/s burst 1", OnError::Closed).await;
    let local = bucket(&server, "10/s burst 1", OnError::Local(10.0)).await;
    server.kill();
    let timeout = Some(Duration::from_secs(2));
    let t = Instant::now();
    assert_eq!(
        open.acquire_n("k", 1, timeout).await.unwrap(),
        Source::FailOpen
    );
    let err = closed.acquire_n("k", 1, timeout).await.unwrap_err();
    // Issue 36: it says Redis is unavailable and the policy refused — not
    // that a 100 ms wait exceeds a 2 s maximum.
    assert_eq!(err.code(), "store_unavailable", "{err}");
    assert!(
        err.to_string().contains("redis unavailable (")
            && err.to_string().contains("the fail policy 'closed' refused"),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // The local share: 10/s burst 1: the second waits ~100 ms.
    assert_eq!(
        local.acquire_n("k", 1, timeout).await.unwrap(),
        Source::Local
    );
    let t = Instant::now();
    assert_eq!(
        local.acquire_n("k", 1, timeout).await.unwrap(),
        Source::Local
    );
    assert!(
        t.elapsed() >= Duration::from_millis(90),
        "{:?}",
        t.elapsed()
    );
}

fn code<T>(r: Result<T, ratebound::Error>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(e) => e.code(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_typed_error_never_a_hang() {
    let server = Server::start();
    let tb = bucket(&server, "10/s burst 2", OnError::Closed).await;
    assert_eq!(
        code(tb.acquire_n("k", 3, None).await),
        "insufficient_capacity"
    );
    // n = 0 is a query and a pause of 0 changes nothing, as locally (both
    // raised before): the bucket's 2 tokens are still there after them.
    assert_eq!(code(tb.acquire_n("k", 0, None).await), "ok");
    assert_eq!(code(tb.pause("k", Duration::ZERO).await), "ok");
    assert_eq!(code(tb.reserve_n("k", 0, Duration::ZERO).await), "ok");
    assert_eq!(code(tb.acquire_n("k", 2, Some(Duration::ZERO)).await), "ok");
    // A pause longer than a day is refused (a key left for 31 years).
    assert_eq!(
        code(tb.pause("k", Duration::from_secs(1_000_000_000)).await),
        "invalid_number"
    );
    assert_eq!(
        code(tb.reserve_n("k", 3, Duration::from_secs(1)).await),
        "insufficient_capacity"
    );
    let mut c = Config::new(Algorithm::FixedWindow {
        limit: 2,
        window: Duration::from_secs(1),
    });
    c.timeout = Duration::from_secs(1);
    let fw = RedisLimiter::new(c, manager(&server.url()).await).unwrap();
    assert_eq!(
        code(fw.pause("k", Duration::from_secs(1)).await),
        "unsupported"
    );
    assert_eq!(
        code(fw.reserve_n("k", 1, Duration::from_secs(1)).await),
        "unsupported"
    );
    // A window waits by sleeping its exact retry_after and asking again.
    let key = fresh("window");
    fw.acquire_n(&key, 2, None).await.unwrap();
    let t = Instant::now();
    fw.acquire_n(&key, 1, Some(Duration::from_secs(3)))
        .await
        .unwrap();
    assert!(t.elapsed() > Duration::ZERO);
}

/// Leased tokens serve a wait first (no call); a wait never spends tokens
/// another instance holds in its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_serve_waits_first() {
    let server = Server::start();
    let mut admin = manager(&server.url()).await;
    let key = fresh("lease-wait");
    let leased = |lease| {
        let mut c = Config::new(Algorithm::TokenBucket(
            Quota::parse("10/s burst 10").unwrap(),
        ));
        c.lease = lease;
        c.timeout = Duration::from_secs(1);
        c
    };
    let a = RedisLimiter::new(leased(5), manager(&server.url()).await).unwrap();
    let b = RedisLimiter::new(leased(0), manager(&server.url()).await).unwrap();
    // A's check leases 5: 1 used, 4 held.
    assert!(a.check(&key).await.unwrap().is_allowed());
    let before = script_calls(&mut admin).await;
    for _ in 0..4 {
        assert_eq!(a.acquire_n(&key, 1, None).await.unwrap(), Source::Lease);
    }
    assert_eq!(
        script_calls(&mut admin).await - before,
        0,
        "served by the lease"
    );
    // B cannot take A's leased tokens: 5 of 10 are left in Redis.
    for _ in 0..5 {
        assert_eq!(
            b.acquire_n(&key, 1, Some(Duration::ZERO)).await.unwrap(),
            Source::Redis
        );
    }
    let err = b
        .acquire_n(&key, 1, Some(Duration::from_millis(50)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "deadline_exceeded");
}
