//! A lower learned rate drops the queue in Redis as the in-process bucket
//! does (`TokenBucket::adapt`): the slots taken beyond an empty bucket at
//! the new rate are dropped (their holders, the outbound adapters'
//! waiters, take new ones), a pause on stays, and a raise keeps the
//! schedule — at explicit Redis times, against a real Redis.

mod support;

use std::time::Duration;

use ratebound::Quota;
use ratebound::outbound::{FULL, Learned};
use ratebound_redis::{Algorithm, CallOutcome, Config, Engine, ReserveBegin, Reserved};
use redis::aio::ConnectionManager;
use support::{Server, adapt, fresh, manager, run};

const T0: u64 = 1_200_000_000_000_000;

/// A reservation of `n` for `key` at `at`: its wait.
async fn reserve(conn: &mut ConnectionManager, e: &Engine, key: &str, n: u64, at: u64) -> Duration {
    let ReserveBegin::Call(call) = e
        .begin_reserve(None, key.as_bytes(), n, Duration::from_secs(60))
        .unwrap()
    else {
        panic!("answered without Redis")
    };
    let call = call.at(at);
    let reply = run(conn, &call).await;
    match e.finish_reserve(&call, CallOutcome::Reply(&reply)) {
        Reserved::Granted { wait, .. } => wait,
        other => panic!("{other:?}"),
    }
}

async fn pause(conn: &mut ConnectionManager, e: &Engine, key: &str, d: Duration, at: u64) {
    let call = e.begin_pause(None, key.as_bytes(), d).unwrap().at(at);
    let reply = run(conn, &call).await;
    assert!(e.finish_pause(CallOutcome::Reply(&reply)).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_empties_the_queue_a_raise_keeps_it_a_pause_stays() {
    let server = Server::start();
    let mut conn = manager(&server.url()).await;
    let mut config = Config::new(Algorithm::TokenBucket(
        Quota::per_second(10).unwrap().with_burst(2).unwrap(),
    ));
    config.prefix = format!("{}:", fresh("queue"));
    let e = Engine::new(config).unwrap();
    let key = "partner";
    // Two at once, then eight in line: the last one 800 ms out.
    for i in 0..10u32 {
        let want = Duration::from_millis(u64::from(i.saturating_sub(1)) * 100);
        assert_eq!(reserve(&mut conn, &e, key, 1, T0).await, want, "slot {i}");
    }
    let half = Learned::new(FULL / 2, 1).with_cut(true);
    assert!(adapt(&mut conn, &e, key, Learned::fresh(), half, T0).await);
    // 5/s burst 1 from an empty bucket now: 200 ms, not behind the 800 ms
    // of dropped slots (1 s without the drop).
    assert_eq!(
        reserve(&mut conn, &e, key, 1, T0).await,
        Duration::from_millis(200)
    );
    // A raise keeps the schedule: the next slot follows that one.
    let up = Learned::new(FULL, 2);
    assert!(adapt(&mut conn, &e, key, half, up, T0).await);
    assert_eq!(
        reserve(&mut conn, &e, key, 1, T0).await,
        Duration::from_millis(300)
    );
    // A pause on stays through a drop: nothing before its end.
    pause(&mut conn, &e, key, Duration::from_secs(5), T0).await;
    let cut = Learned::new(FULL / 2, 3).with_cut(true);
    assert!(adapt(&mut conn, &e, key, up, cut, T0).await);
    let wait = reserve(&mut conn, &e, key, 1, T0).await;
    assert!(wait >= Duration::from_secs(5), "{wait:?}");
}
