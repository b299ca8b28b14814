//! Cancelled waits against a real Redis: a wait given up in the middle of
//! the queue gives nothing back, so the queue never exceeds the bound.
//! The waits are the engine's acquisitions (the sans-I/O protocol every
//! driver runs: step, call, reply, abandon), so each admission is judged at
//! the instant Redis reserved for it, exact on Redis' clock, not at a
//! wall-clock wake-up.

mod support;

use std::time::Duration;

use ratebound::Quota;
use ratebound_redis::{Acquisition, Algorithm, CallOutcome, Config, Engine, Step, given_back};
use redis::aio::ConnectionManager;
use support::{Server, fresh, run};

/// Starts a wait for one token: its reservation is made in Redis. Returns
/// the wait and the instant its token is due, in µs of Redis' clock (the
/// reply's now + wait).
async fn wait(e: &Engine, conn: &mut ConnectionManager, key: &str) -> (Acquisition, u64) {
    let mut a = e.acquire(None, key.as_bytes(), 1, None).unwrap();
    let Step::Call(call) = e.acquire_step(&mut a).unwrap() else {
        panic!("a wait in Redis makes a call first")
    };
    let reply = run(conn, &call).await;
    e.acquire_reply(&mut a, CallOutcome::Reply(&reply));
    (a, (reply[6] + reply[2]) as u64)
}

/// The most tokens due in any window `[d_i, d_j]` beyond what `burst +
/// rate·t` allows (`T` µs a token), and that window's count and bound.
fn worst_window(mut due: Vec<u64>, t_us: u64, burst: u64) -> (i64, usize, u64, u64) {
    due.sort_unstable();
    let mut worst = (i64::MIN, 0, 0, 0);
    for i in 0..due.len() {
        for j in i..due.len() {
            let span = due[j] - due[i];
            let count = j - i + 1;
            let bound = burst + span / t_us;
            let excess = count as i64 - bound as i64;
            if excess > worst.0 {
                worst = (excess, count, bound, span);
            }
        }
    }
    worst
}

/// 400 waiters at 100/s burst 5; 0.2 s in, every other one still waiting
/// gives up, and as many new callers queue. The survivors keep their
/// slots; the new callers must come after them, not into the span the
/// cancelled ones left — the old script moved the bucket back one period
/// per cancel whatever was queued behind, and packed the new callers among
/// the survivors: 275 tokens due within 1.82 s, against a bound of 187.
/// The cancels at the end of the queue still give back, last first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_in_the_middle_of_the_queue_never_lets_it_exceed_the_bound() {
    let server = Server::start();
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = ConnectionManager::new(client).await.unwrap();
    let mut c = Config::new(Algorithm::TokenBucket(
        Quota::parse("100/s burst 5").unwrap(),
    ));
    c.timeout = Duration::from_secs(2);
    let e = Engine::new(c).unwrap();
    let key = fresh("middle");
    let (t_us, burst) = (10_000, 5);

    let mut waits = Vec::new();
    for _ in 0..400 {
        waits.push(wait(&e, &mut conn, &key).await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut admitted = Vec::new();
    let (mut cancelled, mut returned) = (0, 0);
    for (i, (mut a, due)) in waits.into_iter().enumerate() {
        // One whose token came already went ahead: it cannot give up.
        let waiting = matches!(e.acquire_step(&mut a).unwrap(), Step::Sleep(_));
        if i % 2 == 0 && waiting {
            let back = e.acquire_abandon(&mut a).expect("a held slot to give back");
            let reply = run(&mut conn, &back).await;
            cancelled += 1;
            returned += usize::from(reply[4] > 0);
        } else {
            admitted.push(due);
        }
    }
    assert!(cancelled >= 150, "{cancelled} cancelled");
    let mut late = Vec::new();
    for _ in 0..cancelled {
        let (a, due) = wait(&e, &mut conn, &key).await;
        admitted.push(due);
        late.push((a, due));
    }
    let (excess, count, bound, span) = worst_window(admitted, t_us, burst);
    println!(
        "{cancelled} cancelled ({returned} given back); worst window: {count} due in {span} µs, bound {bound}"
    );
    // Each cancel was in the middle of the queue (the last waiter is one
    // of the survivors): none gives anything back.
    assert_eq!(returned, 0);
    assert!(
        excess <= 0,
        "{count} tokens due within {span} µs of Redis' clock, above burst + rate·t = {bound}"
    );
    // At the end of the queue, cancels give back, last first (each finds
    // the bucket where it left it): the next caller is due where the first
    // of them was.
    let first = late[late.len() - 3].1;
    for (mut a, _) in late.drain(late.len() - 3..).rev() {
        let back = e.acquire_abandon(&mut a).expect("a held slot to give back");
        let reply = run(&mut conn, &back).await;
        assert!(given_back(CallOutcome::Reply(&reply)), "{reply:?}");
    }
    assert_eq!(wait(&e, &mut conn, &key).await.1, first);
}
