//! Waiting for a global token against a real Redis: one reservation per
//! acquisition in one order for every instance, cancellation, a pause for
//! everyone, the fail policy while waiting, bad input.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ratebound::Quota;
use ratebound_redis::{Algorithm, Config, OnError, RedisLimiter, RedisReservation, Source};
use redis::aio::ConnectionManager;
use support::{Server, fresh, manager, script_calls_of};
use tokio::sync::Mutex;

type Limiter = RedisLimiter<ConnectionManager>;

async fn bucket(server: &Server, quota: &str, on_error: OnError) -> Limiter {
    let mut c = Config::new(Algorithm::TokenBucket(Quota::parse(quota).unwrap()));
    c.on_error = on_error;
    c.timeout = Duration::from_secs(1);
    RedisLimiter::new(c, manager(&server.url()).await).unwrap()
}

/// Waits until Redis has served `want` script calls in all (bounded):
/// the instant a call of another task has reached Redis.
async fn until_calls(admin: &mut ConnectionManager, want: u64) {
    let start = Instant::now();
    while script_calls_of(admin).await < want {
        assert!(start.elapsed() < Duration::from_secs(10), "no call {want}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A fresh Redis with `count` instances (own connections, fail closed)
/// and the script loaded: every call they make is one EVALSHA.
struct Warm {
    /// The server, stopped when this is dropped.
    _server: Server,
    admin: ConnectionManager,
    instances: Vec<Limiter>,
    /// Script calls Redis had served once the instances were ready.
    before: u64,
}

async fn warm_instances(count: usize, quota: &str) -> Warm {
    let server = Server::start();
    let mut admin = manager(&server.url()).await;
    let mut instances = Vec::new();
    for _ in 0..count {
        instances.push(bucket(&server, quota, OnError::Closed).await);
    }
    instances[0].check(fresh("warm")).await.unwrap();
    let before = script_calls_of(&mut admin).await;
    Warm {
        _server: server,
        admin,
        instances,
        before,
    }
}

/// Fifty instances (own connections) each acquire 3 tokens at 50/s burst
/// 10: completions never run ahead of burst + rate·t, the last completes
/// about (150 − 10)/50 = 2.8 s after the start, and Redis served exactly
/// one script call per acquisition (the script is loaded beforehand, and
/// each instance has one call in flight at a time, so nothing is batched
/// and nothing meets `NOSCRIPT`): no polling, no retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_instances_wait_in_one_order_with_one_call_each() {
    let key = fresh("fifty");
    let mut warm = warm_instances(50, "50/s burst 10").await;
    let done = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for limiter in warm.instances {
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
    let calls = script_calls_of(&mut warm.admin).await - warm.before;
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
    assert_eq!(calls, 150, "one script call per acquisition");
}

/// Six instances each acquire one token at 2/s burst 1, each started once
/// the previous one's reservation has reached Redis: they complete in that
/// order, the k-th at its slot, k·500 ms after the first reservation
/// (never earlier; at most 500 ms later on a loaded machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_are_served_in_the_order_their_reservations_reached_redis() {
    let key = fresh("order");
    let mut warm = warm_instances(6, "2/s burst 1").await;
    let t0 = Instant::now();
    let mut first_reserved = Duration::ZERO;
    let mut tasks = Vec::new();
    for (k, limiter) in warm.instances.into_iter().enumerate() {
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            limiter
                .acquire_n(&key, 1, Some(Duration::from_secs(10)))
                .await
                .unwrap();
            t0.elapsed()
        }));
        until_calls(&mut warm.admin, warm.before + k as u64 + 1).await;
        if k == 0 {
            first_reserved = t0.elapsed();
        }
    }
    let mut done = Vec::new();
    for t in tasks {
        done.push(t.await.unwrap());
    }
    println!("first reserved by {first_reserved:?}; completions {done:?}");
    for (k, t) in done.iter().enumerate() {
        // Slot k is the first reservation's Redis time (within
        // [0, first_reserved] of t0) + k·500 ms.
        let slot = Duration::from_millis(500 * k as u64);
        assert!(*t + Duration::from_millis(2) >= slot, "{k}: {done:?}");
        assert!(
            *t <= first_reserved + slot + Duration::from_millis(500),
            "{k}: {done:?}"
        );
        if k > 0 {
            assert!(done[k - 1] < *t, "out of the reservations' order: {done:?}");
        }
    }
}

/// Where a reservation's slot lies, in time since `origin` on the local
/// clock: Redis judged the call between `lo − delay` and `hi − delay`.
struct Slot {
    lo: Duration,
    hi: Duration,
}

impl Slot {
    /// Whether this slot can be `first`'s plus `after` (2 ms for the µs
    /// rounding of the schedule and the two clocks).
    fn is(&self, first: &Slot, after: Duration) -> bool {
        let e = Duration::from_millis(2);
        self.lo <= first.hi + after + e && first.lo + after <= self.hi + e
    }
}

async fn reserve(
    limiter: &Limiter,
    key: &str,
    origin: Instant,
) -> (RedisReservation<ConnectionManager>, Slot) {
    let lo = origin.elapsed();
    let r = limiter
        .reserve_n(key, 1, Duration::from_secs(10))
        .await
        .unwrap();
    let hi = origin.elapsed();
    let slot = Slot {
        lo: lo + r.delay(),
        hi: hi + r.delay(),
    };
    (r, slot)
}

/// Two instances' reservations interleave in one order, 500 ms apart; a
/// cancelled, a dropped reservation and a dropped acquire each give their
/// slot to the next caller — checked on the slots' times (when Redis
/// judged each call, plus its delay), not on relative delays. One beyond
/// max_wait is refused and takes nothing. (The same rules at explicit
/// Redis times: spec/redis_wait.json, spec_wait.rs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_share_one_order_and_cancel_gives_the_slot_back() {
    let server = Server::start();
    let mut admin = manager(&server.url()).await;
    let key = fresh("reserve");
    let a = bucket(&server, "2/s burst 1", OnError::Closed).await;
    let b = bucket(&server, "2/s burst 1", OnError::Closed).await;
    a.check(fresh("warm")).await.unwrap();
    let ms = |k: u64| Duration::from_millis(500 * k);
    let origin = Instant::now();
    let (r0, s0) = reserve(&a, &key, origin).await;
    assert_eq!(r0.delay(), Duration::ZERO);
    let mut held = vec![r0];
    for (k, limiter) in [(1, &b), (2, &a), (3, &b)] {
        let (r, s) = reserve(limiter, &key, origin).await;
        assert!(s.is(&s0, ms(k)), "slot {k}: {:?}", r.delay());
        held.push(r);
    }
    // Beyond max_wait (the next slot is 2 s after the first): refused,
    // nothing taken.
    let err = a
        .reserve_n(&key, 1, Duration::from_millis(1000))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "deadline_exceeded");
    // The last one cancelled: the next reservation takes its slot.
    let r3 = held.pop().unwrap();
    assert!(r3.cancel().await);
    let (r4, s4) = reserve(&b, &key, origin).await;
    assert!(s4.is(&s0, ms(3)), "slot 3 again: {:?}", r4.delay());
    // A dropped reservation gives its tokens back too (from a spawned
    // task: waited for as Redis' next script call).
    let calls = script_calls_of(&mut admin).await;
    drop(r4);
    until_calls(&mut admin, calls + 1).await;
    let (r5, s5) = reserve(&a, &key, origin).await;
    assert!(s5.is(&s0, ms(3)), "slot 3 again: {:?}", r5.delay());
    held.push(r5);
    // A dropped acquire gives its reservation (slot 4) back as well:
    // dropped once its reservation has reached Redis.
    let calls = script_calls_of(&mut admin).await;
    {
        let waiting = a.acquire_n(&key, 1, None);
        tokio::pin!(waiting);
        tokio::select! {
            _ = &mut waiting => panic!("slot 4 is 2 s away"),
            () = until_calls(&mut admin, calls + 1) => {}
        }
    }
    until_calls(&mut admin, calls + 2).await;
    let (r6, s6) = reserve(&b, &key, origin).await;
    assert!(s6.is(&s0, ms(4)), "slot 4 again: {:?}", r6.delay());
    held.push(r6);
    for r in held {
        r.consume();
    }
}

/// A pause by one instance is seen by another's check, reservation and
/// acquire (each bounded from the instant before the pause was sent: the
/// pause's end is no earlier than that plus its length); a second pause
/// inside the first changes nothing; an acquire that cannot end before its
/// (long) timeout fails at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_is_for_everyone_and_once() {
    let server = Server::start();
    let key = fresh("pause");
    let a = bucket(&server, "100/s burst 10", OnError::Closed).await;
    let b = bucket(&server, "100/s burst 10", OnError::Closed).await;
    assert!(b.check(&key).await.unwrap().is_allowed());
    let pause = Duration::from_millis(1000);
    let t = Instant::now();
    let shift = a.pause(&key, pause).await.unwrap();
    assert!(
        shift.is_some_and(|s| s >= pause - Duration::from_millis(1)),
        "{shift:?}"
    );
    // Inside it, from another instance: covered already, nothing shifts.
    let again = b.pause(&key, Duration::from_millis(100)).await.unwrap();
    assert_eq!(again, Some(Duration::ZERO));
    // Each answer's wait reaches the pause's end (1 ms: µs rounding).
    let d = b.check(&key).await.unwrap();
    assert!(!d.is_allowed(), "{d:?}");
    assert!(
        t.elapsed() + d.retry_after() + Duration::from_millis(1) >= pause,
        "{d:?}"
    );
    let r = b.reserve_n(&key, 1, Duration::from_secs(5)).await.unwrap();
    assert!(
        t.elapsed() + r.delay() + Duration::from_millis(1) >= pause,
        "{r:?}"
    );
    r.consume();
    b.acquire_n(&key, 1, Some(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(t.elapsed() >= pause, "{:?}", t.elapsed());
    // An acquire that cannot end before its timeout fails at once: long
    // before the 20 s it may wait.
    a.pause(&key, Duration::from_secs(60)).await.unwrap();
    let t = Instant::now();
    let err = b
        .acquire_n(&key, 1, Some(Duration::from_secs(20)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "deadline_exceeded");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
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

/// Instance A holds reservations up to 2 s ahead (2/s burst 1, five
/// waiters); instance B (its own connection) pauses the key 1 s, 100 ms in
/// — 400 ms before the first slot it moves, time enough for the news to
/// reach A on a loaded machine. A's waiters complete only after the
/// pause's end, in their order, each 1 s after its old time — and the
/// script ran once per acquisition (and once for the pause): no call was
/// added.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_already_sleeping_move_past_a_pause_made_elsewhere() {
    let server = Server::start();
    let mut admin = manager(&server.url()).await;
    let key = fresh("sleeping");
    let client = redis::Client::open(server.url()).unwrap();
    let a = bucket(&server, "2/s burst 1", OnError::Closed)
        .await
        .with_pause_news(client)
        .await;
    assert!(a.listening());
    let b = bucket(&server, "2/s burst 1", OnError::Closed).await;
    // The script is loaded: every call below is one EVALSHA.
    b.check(fresh("warm")).await.unwrap();
    let before = script_calls_of(&mut admin).await;
    let pause = Duration::from_millis(1000);
    let t0 = Instant::now();
    let tasks = waiters(&a, &key, 5, t0);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let paused_at = t0.elapsed();
    let shift = b.pause(&key, pause).await.unwrap();
    assert!(
        shift.is_some_and(|s| s >= pause - Duration::from_millis(1)),
        "{shift:?}"
    );
    let end = paused_at + pause;
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
        // Its old time (due 500 ms after the previous one: 500i ms after
        // the first reservation), 1 s later; generous above.
        let want = Duration::from_millis(500 * i as u64) + pause;
        assert!(
            *t + Duration::from_millis(2) >= want && *t <= want + Duration::from_millis(500),
            "waiter {i} at {t:?}, want ~{want:?}"
        );
        assert!(done[i - 1] < *t, "out of order: {done:?}");
    }
    let calls = script_calls_of(&mut admin).await - before;
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
/// own pause reaches its own waiters without listening. (2/s burst 1: the
/// second waiter's old time is 500 ms; pauses of 1 s from 100 ms.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_does_not_listen_goes_ahead_and_its_next_call_finds_the_pause() {
    let server = Server::start();
    let key = fresh("deaf");
    let c = bucket(&server, "2/s burst 1", OnError::Closed).await;
    let b = bucket(&server, "2/s burst 1", OnError::Closed).await;
    assert!(!c.listening());
    let pause = Duration::from_millis(1000);
    let t0 = Instant::now();
    let tasks = waiters(&c, &key, 2, t0);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let paused_at = t0.elapsed();
    b.pause(&key, pause).await.unwrap();
    let end = paused_at + pause;
    let mut done = Vec::new();
    for t in tasks {
        done.push(t.await.unwrap());
    }
    assert!(
        done[1] < end && done[1] + Duration::from_millis(2) >= Duration::from_millis(500),
        "it went at its old time, 500 ms: {done:?} (the pause ends {end:?})"
    );
    c.acquire_n(&key, 1, Some(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(t0.elapsed() >= end, "the next call waits past the pause");

    // Its own pause: told at once.
    let key = fresh("own");
    let t0 = Instant::now();
    let tasks = waiters(&c, &key, 2, t0);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let paused_at = t0.elapsed();
    c.pause(&key, pause).await.unwrap();
    let mut done = Vec::new();
    for t in tasks {
        done.push(t.await.unwrap());
    }
    let end = paused_at + pause;
    assert!(done[1] >= end, "{done:?} (the pause ends {end:?})");
}

/// While Redis is down: open returns at once, closed fails at once (long
/// before the 30 s the wait may take), local waits on the local share —
/// its second token exactly a period (100 ms) after the first. (The
/// deadline itself, exactly: deadlines.rs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_policies_while_waiting() {
    let mut server = Server::start();
    let open = bucket(&server, "10/s burst 1", OnError::Open).await;
    let closed = bucket(&server, "10/s burst 1", OnError::Closed).await;
    let local = bucket(&server, "10/s burst 1", OnError::Local(10.0)).await;
    server.kill();
    let timeout = Some(Duration::from_secs(30));
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
    // Two call deadlines (1 s each) at most, generously: never the wait.
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // The local share: 10/s burst 1: the second is due 100 ms after the
    // first was taken (measured from before it: never less).
    let t = Instant::now();
    assert_eq!(
        local.acquire_n("k", 1, timeout).await.unwrap(),
        Source::Local
    );
    assert_eq!(
        local.acquire_n("k", 1, timeout).await.unwrap(),
        Source::Local
    );
    assert!(
        t.elapsed() >= Duration::from_millis(99),
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
    // A window waits by sleeping its exact retry_after and asking again:
    // it ends in the next window (windows are whole seconds of Redis'
    // clock, the system's: W·k to W·(k + 1)), never in the full one. The
    // window is filled at least 300 ms before its end, known to the ms.
    let key = fresh("window");
    let unix = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
    };
    let full = loop {
        let (lo, in_window) = (unix().as_secs(), unix().subsec_millis());
        if in_window >= 700 {
            tokio::time::sleep(Duration::from_millis(1010 - u64::from(in_window))).await;
            continue;
        }
        fw.acquire_n(&key, 2, None).await.unwrap();
        if unix().as_secs() == lo {
            break lo;
        }
    };
    fw.acquire_n(&key, 1, Some(Duration::from_secs(3)))
        .await
        .unwrap();
    let now = unix();
    assert!(now.as_secs() > full, "{now:?}: still in the window {full}");
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
    let before = script_calls_of(&mut admin).await;
    for _ in 0..4 {
        assert_eq!(a.acquire_n(&key, 1, None).await.unwrap(), Source::Lease);
    }
    assert_eq!(
        script_calls_of(&mut admin).await - before,
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
