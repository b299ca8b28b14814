//! `resume` against a real Redis: the engine's calls judged at explicit
//! Redis times (the script's rule, exactly), and the driver's one call on
//! Redis' clock.

mod support;

use std::time::Duration;

use ratebound::{Quota, Resumed};
use ratebound_redis::{
    Algorithm, Begin, CallOutcome, Config, Engine, RedisLimiter, ReserveBegin, Reserved,
};
use redis::aio::ConnectionManager;
use support::{Server, fresh, run};

const MS: u64 = 1_000;
const S: u64 = 1_000 * MS;
/// An instant of Redis' clock far from the test's (µs): the calls name it.
const T0: u64 = 1_000_000 * S;

fn config(quota: &str) -> Config {
    let mut c = Config::new(Algorithm::TokenBucket(Quota::parse(quota).unwrap()));
    c.prefix = format!("{}:", fresh("resume"));
    c.timeout = Duration::from_secs(2);
    c
}

async fn manager(server: &Server) -> ConnectionManager {
    let client = redis::Client::open(server.url()).unwrap();
    ConnectionManager::new(client).await.unwrap()
}

async fn pause(conn: &mut ConnectionManager, e: &Engine, key: &str, d: u64, at: u64) -> u64 {
    let call = e
        .begin_pause(None, key.as_bytes(), Duration::from_micros(d))
        .unwrap()
        .at(at);
    let reply = run(conn, &call).await;
    let (_, shift) = e.finish_pause(CallOutcome::Reply(&reply)).expect("paused");
    shift.as_micros() as u64
}

async fn resume(conn: &mut ConnectionManager, e: &Engine, key: &str, at: u64) -> Resumed {
    let call = e.begin_resume(None, key.as_bytes()).unwrap().at(at);
    let reply = run(conn, &call).await;
    e.finish_resume(CallOutcome::Reply(&reply)).expect("told")
}

/// `(allowed, retry_after µs)` of a check of one at `at`.
async fn check(conn: &mut ConnectionManager, e: &Engine, key: &str, at: u64) -> (bool, u64) {
    let Begin::Call(call) = e.begin(key.as_bytes(), 1).unwrap() else {
        panic!("answered without Redis")
    };
    let call = call.at(at);
    let reply = run(conn, &call).await;
    let d = e.finish(&call, CallOutcome::Reply(&reply));
    (d.is_allowed(), d.retry_after().as_micros() as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lifted_pause_leaves_the_key_as_if_it_had_ended_then() {
    let server = Server::start();
    let mut conn = manager(&server).await;
    let e = Engine::new(config("2/s burst 3")).unwrap();
    assert_eq!(resume(&mut conn, &e, "k", T0).await, Resumed::NotPaused);
    assert_eq!(pause(&mut conn, &e, "k", 10 * S, T0).await, 10 * S);
    assert_eq!(check(&mut conn, &e, "k", T0 + S).await, (false, 9_500 * MS));
    assert_eq!(resume(&mut conn, &e, "k", T0 + S).await, Resumed::Lifted);
    // Empty at T0 + 1 s, one token every 0.5 s from then on.
    assert_eq!(check(&mut conn, &e, "k", T0 + S).await, (false, 500 * MS));
    assert_eq!(
        check(&mut conn, &e, "k", T0 + S + 499 * MS).await,
        (false, MS)
    );
    assert_eq!(
        check(&mut conn, &e, "k", T0 + S + 500 * MS).await,
        (true, 0)
    );
    assert_eq!(
        resume(&mut conn, &e, "k", T0 + 2 * S).await,
        Resumed::NotPaused
    );
    // The end was dropped: a shorter pause now counts whole, and a pause
    // after the lift can be lifted again.
    assert_eq!(pause(&mut conn, &e, "k", 2 * S, T0 + 3 * S).await, 2 * S);
    assert!(!check(&mut conn, &e, "k", T0 + 5 * S + 499 * MS).await.0);
    assert!(check(&mut conn, &e, "k", T0 + 5 * S + 500 * MS).await.0);
    assert_eq!(pause(&mut conn, &e, "k", 20 * S, T0 + 6 * S).await, 20 * S);
    assert_eq!(
        resume(&mut conn, &e, "k", T0 + 7 * S).await,
        Resumed::Lifted
    );
    assert_eq!(
        check(&mut conn, &e, "k", T0 + 7 * S).await,
        (false, 500 * MS)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_behind_the_pause_keeps_it_queued_until_its_end() {
    let server = Server::start();
    let mut conn = manager(&server).await;
    let e = Engine::new(config("2/s burst 3")).unwrap();
    pause(&mut conn, &e, "k", 10 * S, T0).await;
    let ReserveBegin::Call(call) = e
        .begin_reserve(None, b"k", 1, Duration::from_secs(60))
        .unwrap()
    else {
        panic!("answered without Redis")
    };
    let call = call.at(T0 + S);
    let reply = run(&mut conn, &call).await;
    let Reserved::Granted { wait, .. } = e.finish_reserve(&call, CallOutcome::Reply(&reply)) else {
        panic!("reserved behind the pause")
    };
    assert_eq!(wait, Duration::from_millis(9_500));
    assert_eq!(
        resume(&mut conn, &e, "k", T0 + 2 * S).await,
        Resumed::Queued
    );
    // Nothing changed: the next slot is where it was.
    assert_eq!(check(&mut conn, &e, "k", T0 + 2 * S).await, (false, 9 * S));
    assert_eq!(check(&mut conn, &e, "k", T0 + 11 * S).await, (true, 0));
    // A reservation moved by a pause keeps it queued too.
    let e = Engine::new(config("1/s burst 1")).unwrap();
    assert!(check(&mut conn, &e, "m", T0).await.0);
    let ReserveBegin::Call(call) = e
        .begin_reserve(None, b"m", 1, Duration::from_secs(2))
        .unwrap()
    else {
        panic!("answered without Redis")
    };
    let reply = run(&mut conn, &call.at(T0)).await;
    assert_eq!(reply[0], 1, "reserved, due at T0 + 1 s");
    pause(&mut conn, &e, "m", 5 * S, T0).await;
    assert_eq!(
        resume(&mut conn, &e, "m", T0 + 2 * S).await,
        Resumed::Queued
    );
    assert_eq!(check(&mut conn, &e, "m", T0 + 2 * S).await, (false, 5 * S));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_driver_resumes_in_one_call_on_redis_clock() {
    let server = Server::start();
    let limiter = RedisLimiter::new(config("10/s burst 1"), manager(&server).await).unwrap();
    let key = fresh("driver");
    assert_eq!(
        limiter.resume(&key).await.unwrap(),
        Some(Resumed::NotPaused)
    );
    limiter.pause(&key, Duration::from_secs(30)).await.unwrap();
    let refused = limiter.check(&key).await.unwrap();
    assert!(!refused.is_allowed());
    assert!(refused.retry_after() > Duration::from_secs(29));
    assert_eq!(limiter.resume(&key).await.unwrap(), Some(Resumed::Lifted));
    // Empty at the resume, one token 100 ms later: whatever time passed
    // since, the wait is at most one token's.
    let after = limiter.check(&key).await.unwrap();
    assert!(
        after.retry_after() <= Duration::from_millis(100),
        "{:?}",
        after.retry_after()
    );
    assert_eq!(
        limiter.resume(&key).await.unwrap(),
        Some(Resumed::NotPaused)
    );
    // A window cannot be resumed.
    let mut c = config("10/s burst 1");
    c.algorithm = Algorithm::FixedWindow {
        limit: 3,
        window: Duration::from_secs(1),
    };
    let window = RedisLimiter::new(c, manager(&server).await).unwrap();
    let e = window.resume(&key).await.expect_err("unsupported");
    assert_eq!(e.code(), "unsupported");
    assert!(e.to_string().contains("resume"), "{e}");
}
