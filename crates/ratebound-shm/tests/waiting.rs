//! Waiting on a shared limiter: acquire, reserve and pause across real
//! processes (this test binary re-run as workers), `kill -9` of a waiting
//! process, and bad input.

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

use common::{bucket, fixed_window};
use ratebound::KeyedAlgorithm;
use ratebound::any::Key;
use ratebound::wait::Step;
use ratebound_shm::{Error, SharedKeyedLimiter, SharedLimiter};

const MS: u64 = 1_000_000;

/// A fresh directory for one test.
fn dir(name: &str) -> PathBuf {
    common::dir("shm-wait", name)
}

fn window(limit: u64, ms: u64) -> KeyedAlgorithm {
    fixed_window(limit, Duration::from_millis(ms))
}

/// This binary again, running only `test`, as a worker with `env`.
fn spawn(test: &str, env: &[(&str, String)]) -> Child {
    common::spawn("RB_SHM_WAIT_ROLE", test, env)
}

/// A fresh directory `name` and a table `file` in it of `alg`, for a test
/// the parent runs alone; `None` in a worker.
fn parent_only(name: &str, file: &str, alg: KeyedAlgorithm) -> Option<(PathBuf, SharedLimiter)> {
    if is_worker() {
        return None;
    }
    let d = dir(name);
    let l = SharedLimiter::open(d.join(file), alg).expect("open");
    Some((d, l))
}

fn is_worker() -> bool {
    std::env::var_os("RB_SHM_WAIT_ROLE").is_some()
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} for a worker"))
}

/// The `done=<ns>` lines a worker printed, in order.
fn completions(child: Child) -> Vec<u64> {
    let out = child.wait_with_output().expect("worker output");
    assert!(out.status.success(), "worker failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            l.split_once("done=")
                .map(|(_, n)| n.trim().parse().expect("ns"))
        })
        .collect()
}

/// Completion times (sorted) never run ahead of `burst + rate·t` from
/// `start`: the i-th (from 0) is no earlier than `start + (i + 1 − burst)·T`.
fn assert_never_early(mut done: Vec<u64>, start: u64, burst: u64, period: u64) {
    done.sort_unstable();
    for (i, &t) in done.iter().enumerate() {
        let due = start + (i as u64 + 1).saturating_sub(burst) * period;
        assert!(
            t >= due,
            "acquisition {i} done at +{} ms, before its due +{} ms",
            (t - start) / MS,
            (due - start) / MS
        );
    }
}

#[test]
fn four_processes_acquiring_share_one_rate_never_early() {
    const TEST: &str = "four_processes_acquiring_share_one_rate_never_early";
    if is_worker() {
        let each: u64 = var("RB_EACH").parse().expect("each");
        if var("RB_KEYED") == "1" {
            let l =
                SharedKeyedLimiter::open(var("RB_PATH"), bucket("20/s burst 2"), 8).expect("open");
            for _ in 0..each {
                l.acquire_n(Key::Text("partner"), 1, None).expect("acquire");
                println!("done={}", l.now());
            }
        } else {
            let l = SharedLimiter::open(var("RB_PATH"), bucket("20/s burst 2")).expect("open");
            for _ in 0..each {
                l.acquire_n(1, Some(Duration::from_secs(60)))
                    .expect("acquire");
                println!("done={}", l.now());
            }
        }
        return;
    }
    for keyed in ["0", "1"] {
        let d = dir(&format!("four-{keyed}"));
        let path = d.join("partner.limit");
        // The parent opens (makes) the table first and reads the clock: the
        // bucket is full, no token can be taken before `start`.
        let start = if keyed == "1" {
            SharedKeyedLimiter::open(&path, bucket("20/s burst 2"), 8)
                .expect("open")
                .now()
        } else {
            SharedLimiter::open(&path, bucket("20/s burst 2"))
                .expect("open")
                .now()
        };
        let env = vec![
            ("RB_PATH", path.display().to_string()),
            ("RB_EACH", "5".to_string()),
            ("RB_KEYED", keyed.to_string()),
        ];
        let workers: Vec<Child> = (0..4).map(|_| spawn(TEST, &env)).collect();
        let done: Vec<u64> = workers.into_iter().flat_map(completions).collect();
        assert_eq!(done.len(), 20, "every acquisition completed");
        // 20 tokens at 20/s with a burst of 2: the last no earlier than
        // 18 periods (900 ms) after the start, each in its turn.
        assert_never_early(done, start, 2, 50 * MS);
    }
}

#[test]
fn kill_dash_nine_of_a_waiting_process_loses_only_its_own_reservation() {
    const TEST: &str = "kill_dash_nine_of_a_waiting_process_loses_only_its_own_reservation";
    let quota = "1/s burst 5";
    if is_worker() {
        let l = SharedLimiter::open(var("RB_PATH"), bucket(quota)).expect("open");
        let mut w = l.waiter(5, None, u64::MAX).expect("waiter");
        // The first step reserves on the shared word.
        assert!(matches!(l.wait_step(&mut w), Ok(Step::Sleep(_))));
        println!("reserved");
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let d = dir("kill");
    let path = d.join("kill.limit");
    let l = SharedLimiter::open(&path, bucket(quota)).expect("open");
    let t0 = l.now();
    // The burst is ours: the worker's 5 are due 5 s from t0.
    assert!(l.check_n_at(5, t0).expect("check").is_allowed());
    let mut child = spawn(TEST, &[("RB_PATH", path.display().to_string())]);
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    loop {
        line.clear();
        assert!(out.read_line(&mut line).expect("read") > 0, "worker ended");
        if line.trim_end().ends_with("reserved") {
            break;
        }
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    // The killed waiter's 5 tokens stay taken — nothing else: one more
    // token is due exactly 6 s after t0 (5 for ours, 5 for its, 1 more,
    // minus the burst of 5).
    let t1 = l.now();
    let r = l
        .reserve_n_at(1, Duration::from_secs(60), t1)
        .expect("reserve");
    assert_eq!(t1 + r.delay().as_nanos() as u64, t0 + 6_000 * MS);
    r.cancel();
    // A waiter that gives up (rather than being killed) gives its tokens
    // back: the same reservation is due at the same time again.
    let mut w = l.waiter(2, None, u64::MAX).expect("waiter");
    assert!(matches!(l.wait_step(&mut w), Ok(Step::Sleep(_))));
    l.abandon(&mut w).expect("abandon");
    let t2 = l.now();
    let r = l
        .reserve_n_at(1, Duration::from_secs(60), t2)
        .expect("reserve");
    assert_eq!(t2 + r.delay().as_nanos() as u64, t0 + 6_000 * MS);
}

fn limit_code(r: Result<impl std::fmt::Debug, Error>) -> &'static str {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.code(),
    }
}

#[test]
fn a_wait_beyond_its_timeout_fails_at_once_taking_nothing() {
    let Some((d, l)) = parent_only("timeout", "t.limit", bucket("1/h burst 1")) else {
        return;
    };
    l.acquire_n(1, Some(Duration::ZERO)).expect("the burst");
    let before = l.now();
    // An hour away, half an hour allowed: refused without sleeping (a
    // sleep would be half an hour), nothing taken.
    assert_eq!(
        limit_code(l.acquire_n(1, Some(Duration::from_secs(1800)))),
        "deadline_exceeded"
    );
    assert!(
        l.now() - before < 60_000 * MS,
        "it failed at once, not after sleeping"
    );
    let r = l.reserve_n(1, Duration::from_secs(7200)).expect("reserve");
    assert!(r.delay() <= Duration::from_secs(3600), "nothing was taken");
    assert_eq!(
        limit_code(l.reserve_n(1, Duration::from_secs(3600))),
        "deadline_exceeded"
    );
    r.cancel();

    let k = SharedKeyedLimiter::open(d.join("k.limit"), bucket("1/h burst 1"), 8).expect("open");
    k.acquire_n(Key::Int(1), 1, None).expect("the burst");
    assert_eq!(
        limit_code(k.acquire_n(Key::Int(1), 1, Some(Duration::from_secs(1800)))),
        "deadline_exceeded"
    );
    // Another key has its own bucket.
    k.acquire_n(Key::Int(2), 1, Some(Duration::ZERO))
        .expect("another key");
}

#[test]
fn a_reservation_holds_its_place_and_cancel_gives_it_back() {
    let Some((d, l)) = parent_only("reserve", "r.limit", bucket("10/s burst 1")) else {
        return;
    };
    let now = l.now();
    let ms = Duration::from_millis;
    let first = l.reserve_n_at(1, Duration::ZERO, now).expect("the burst");
    assert_eq!(first.delay(), Duration::ZERO);
    // One more at `now`, queued for up to a second.
    let queue = || {
        l.reserve_n_at(1, Duration::from_secs(1), now)
            .expect("queued")
    };
    let second = queue();
    assert_eq!(second.delay(), ms(100));
    let third = queue();
    assert_eq!(third.delay(), ms(200));
    third.cancel();
    let again = queue();
    assert_eq!(again.delay(), ms(200), "the slot came back");
    // Dropped, a reservation gives its slot back too; consumed, it keeps it.
    let fourth = queue();
    assert_eq!(fourth.delay(), ms(300));
    drop(fourth);
    let fifth = queue();
    assert_eq!(fifth.delay(), ms(300), "the dropped slot came back");
    fifth.consume();
    let sixth = queue();
    assert_eq!(sixth.delay(), ms(400), "the consumed slot is kept");
    sixth.consume();
    // Another handle's permit is refused, nothing given back.
    let other = SharedLimiter::open(d.join("r.limit"), bucket("10/s burst 1")).expect("open");
    assert_eq!(
        limit_code(other.release(again.into_permit())),
        "foreign_permit"
    );
    first.consume();
    second.consume();
}

#[test]
fn a_pause_empties_the_shared_bucket_for_every_handle() {
    if is_worker() {
        return;
    }
    let d = dir("pause");
    let path = d.join("p.limit");
    let a = SharedLimiter::open(&path, bucket("2/s burst 3")).expect("open");
    let b = SharedLimiter::open(&path, bucket("2/s burst 3")).expect("open");
    let now = a.now();
    a.pause_at(Duration::from_secs(1), now).expect("pause");
    let refused = b.check_n_at(1, now).expect("check");
    assert!(!refused.is_allowed());
    // Empty until 1 s, then one token every 0.5 s.
    assert_eq!(refused.retry_after(), Duration::from_millis(1_500));
    // A shorter pause changes nothing; a longer one extends.
    b.pause_at(Duration::from_millis(200), now).expect("pause");
    assert_eq!(
        b.check_n_at(1, now).expect("check").retry_after(),
        Duration::from_millis(1_500)
    );
    b.pause_at(Duration::from_secs(2), now).expect("pause");
    assert_eq!(
        a.check_n_at(1, now).expect("check").retry_after(),
        Duration::from_millis(2_500)
    );
    // Waiting goes past the pause, refilling at the rate.
    let r = a
        .reserve_n_at(2, Duration::from_secs(10), now)
        .expect("reserve");
    assert_eq!(r.delay(), Duration::from_millis(3_000));

    let k = SharedKeyedLimiter::open(d.join("k.limit"), bucket("2/s burst 3"), 8).expect("open");
    k.pause_at(Key::Text("alice"), Duration::from_secs(1), now)
        .expect("pause");
    let refused = k.check_n_at(Key::Text("alice"), 1, now).expect("check");
    assert_eq!(refused.retry_after(), Duration::from_millis(1_500));
    assert!(
        k.check_n_at(Key::Text("bob"), 1, now)
            .expect("check")
            .is_allowed()
    );
}

#[test]
fn a_pause_by_one_process_moves_the_waiters_of_others_past_it_in_order() {
    const TEST: &str = "a_pause_by_one_process_moves_the_waiters_of_others_past_it_in_order";
    let alg = || bucket("2/s burst 1");
    if is_worker() {
        if var("RB_KEYED") == "1" {
            let l = SharedKeyedLimiter::open(var("RB_PATH"), alg(), 8).expect("open");
            l.acquire_n(Key::Text("partner"), 1, None).expect("acquire");
            println!("done={}", l.now());
        } else {
            let l = SharedLimiter::open(var("RB_PATH"), alg()).expect("open");
            l.acquire_n(1, None).expect("acquire");
            println!("done={}", l.now());
        }
        return;
    }
    for keyed in ["0", "1"] {
        let d = dir(&format!("pause-moves-{keyed}"));
        let path = d.join("partner.limit");
        let single = (keyed == "0").then(|| SharedLimiter::open(&path, alg()).expect("open"));
        let table =
            (keyed == "1").then(|| SharedKeyedLimiter::open(&path, alg(), 8).expect("open"));
        // One period is 500 ms; the parent takes the burst, so the three
        // workers hold slots due 0.5, 1.0 and 1.5 s after `start`.
        let (now, check) = match (&single, &table) {
            (Some(l), _) => (l.now(), l.check_n_at(1, l.now()).expect("check")),
            (_, Some(t)) => (
                t.now(),
                t.check_n_at(Key::Text("partner"), 1, t.now())
                    .expect("check"),
            ),
            _ => unreachable!(),
        };
        assert!(check.is_allowed(), "the burst");
        let start = now;
        let env = vec![
            ("RB_PATH", path.display().to_string()),
            ("RB_KEYED", keyed.to_string()),
        ];
        let workers: Vec<Child> = (0..3).map(|_| spawn(TEST, &env)).collect();
        // Until all three hold their slots: the queue then ends 2 s after
        // `start` (a query, n = 0, takes nothing).
        let queue_end = || match (&single, &table) {
            (Some(l), _) => {
                let now = l.now();
                now + l.check_n_at(0, now).expect("query").reset_after_nanos()
            }
            (_, Some(t)) => {
                let now = t.now();
                now + t
                    .check_n_at(Key::Text("partner"), 0, now)
                    .expect("query")
                    .reset_after_nanos()
            }
            _ => unreachable!(),
        };
        let mut polls = 0;
        while queue_end() < start + 2_000 * MS && polls < 2_000 {
            std::thread::sleep(Duration::from_millis(1));
            polls += 1;
        }
        let paused_at = match (&single, &table) {
            (Some(l), _) => {
                let now = l.now();
                l.pause_at(Duration::from_secs(1), now).expect("pause");
                now
            }
            (_, Some(t)) => {
                let now = t.now();
                t.pause_at(Key::Text("partner"), Duration::from_secs(1), now)
                    .expect("pause");
                now
            }
            _ => unreachable!(),
        };
        assert!(
            paused_at < start + 500 * MS,
            "the workers took {} ms to reserve: the pause came after the first was due",
            (paused_at - start) / MS
        );
        let mut done: Vec<u64> = workers.into_iter().flat_map(completions).collect();
        done.sort_unstable();
        assert_eq!(done.len(), 3, "every waiter completed");
        // Every slot moved 1 s later, in its order: none inside the pause
        // (before it, the first would go at +500 ms).
        for (i, &t) in done.iter().enumerate() {
            let due = start + (i as u64 + 1) * 500 * MS + 1_000 * MS;
            assert!(
                t >= due && t < due + 400 * MS,
                "waiter {i} done at +{} ms, due at +{} ms (pause at +{} ms)",
                (t - start) / MS,
                (due - start) / MS,
                (paused_at - start) / MS
            );
        }
    }
}

#[test]
fn windows_wait_their_retry_after_and_cannot_pause_or_reserve() {
    let Some((d, l)) = parent_only("window", "w.limit", window(2, 200)) else {
        return;
    };
    let start = l.now();
    for _ in 0..3 {
        l.acquire_n(1, None).expect("acquire");
    }
    // Three cannot all fall in the start's window of 2: the last waited
    // for the next window.
    let next_window = (start / (200 * MS) + 1) * 200 * MS;
    assert!(l.now() >= next_window, "acquired before the next window");
    assert_eq!(limit_code(l.pause(Duration::from_secs(1))), "unsupported");
    assert_eq!(
        limit_code(l.reserve_n(1, Duration::from_secs(1))),
        "unsupported"
    );
    let k = SharedKeyedLimiter::open(d.join("k.limit"), window(2, 200), 8).expect("open");
    assert_eq!(
        limit_code(k.pause(Key::Int(1), Duration::from_secs(1))),
        "unsupported"
    );
    assert!(k.is_empty(), "a refused pause claims no slot");
}

#[test]
fn bad_input_is_a_typed_error_never_a_hang() {
    let Some((d, l)) = parent_only("bad", "b.limit", bucket("1/s burst 2")) else {
        return;
    };
    for t in [-1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        assert_eq!(limit_code(l.waiter(1, Some(t), u64::MAX)), "invalid_number");
    }
    assert_eq!(
        limit_code(l.acquire_n(3, None)),
        "insufficient_capacity",
        "n > burst can never be served"
    );
    assert_eq!(
        limit_code(l.reserve_n(3, Duration::MAX)),
        "insufficient_capacity"
    );
    let k = SharedKeyedLimiter::open(d.join("k.limit"), bucket("1/s burst 2"), 8).expect("open");
    assert_eq!(
        limit_code(k.acquire_n(Key::Int(1), 3, None)),
        "insufficient_capacity"
    );
    assert_eq!(
        limit_code(k.waiter(1, Some(-0.5), u64::MAX)),
        "invalid_number"
    );
}

/// The async waits (feature `tokio`): the task sleeps until its tokens are
/// due, never early; a wait dropped while it holds a reservation gives it
/// back, bucket and keyed.
#[cfg(feature = "tokio")]
#[tokio::test(flavor = "current_thread")]
async fn async_acquire_waits_and_a_dropped_wait_gives_back() {
    if is_worker() {
        return;
    }
    let d = dir("async");
    // Checked at explicit times on the table's clock: the burst is taken
    // between t0 and t1, so slot k (10/s) is due between t0 and t1 plus
    // k·100 ms; a reservation judged between s0 and s1 with a delay is due
    // between s0 and s1 plus the delay; the two must meet (1 µs: the
    // delay's rounding). Without the give-back a slot lands 100 ms later.
    let meets = |(t0, t1): (u64, u64), k: u64, (s0, s1): (u64, u64), delay: u64| {
        s0 + delay <= t1 + k * 100 * MS + 1_000 && t0 + k * 100 * MS <= s1 + delay + 1_000
    };
    // The next token (slot 1) came no earlier than 100 ms after the burst.
    let never_early = |now: u64, (t0, _): (u64, u64)| {
        assert!(
            now >= t0 + 100 * MS,
            "never early: {} ns after the burst",
            now - t0
        );
    };
    let l = SharedLimiter::open(d.join("a.limit"), bucket("10/s burst 1")).expect("open");
    let t0 = l.now();
    l.acquire(1, None).await.expect("the burst");
    let burst = (t0, l.now());
    l.acquire(1, Some(Duration::from_secs(5)))
        .await
        .expect("the next token");
    never_early(l.now(), burst);
    // A wait dropped while it holds the next slot (slot 2) gives it back:
    // the next reservation is due at slot 2, not slot 3.
    let dropped = tokio::time::timeout(Duration::from_millis(20), l.acquire(1, None)).await;
    assert!(dropped.is_err(), "still waiting when dropped");
    let s0 = l.now();
    let r = l
        .reserve_n_at(1, Duration::from_secs(1), s0)
        .expect("reserve");
    let delay = u64::try_from(r.delay().as_nanos()).unwrap();
    assert!(
        meets(burst, 2, (s0, s0), delay),
        "slot 2 again: {:?}",
        r.delay()
    );
    r.cancel();
    let err = l.acquire(1, Some(Duration::from_millis(10))).await;
    assert!(
        matches!(
            err,
            Err(Error::Limit(ratebound::Error::DeadlineExceeded { .. }))
        ),
        "{err:?}"
    );

    let k = SharedKeyedLimiter::open(d.join("k.limit"), bucket("10/s burst 1"), 8).expect("open");
    let t0 = k.now();
    k.acquire(Key::Int(7), 1, None).await.expect("the burst");
    let burst = (t0, k.now());
    k.acquire(Key::Int(7), 1, None)
        .await
        .expect("the next token");
    never_early(k.now(), burst);
    let dropped =
        tokio::time::timeout(Duration::from_millis(20), k.acquire(Key::Int(7), 1, None)).await;
    assert!(dropped.is_err());
    // The next waiter's first step reserves the slot given back: slot 2.
    let mut w = k.waiter(1, None, u64::MAX).expect("waiter");
    let s0 = k.now();
    let step = k.wait_step(&mut w, Key::Int(7)).expect("step");
    let judged = (s0, k.now());
    match step {
        Step::Sleep(d) => assert!(
            meets(burst, 2, judged, d.as_nanos() as u64),
            "the dropped wait's slot came back: {d:?}"
        ),
        Step::Done(()) => panic!("the burst is spent"),
    }
    k.abandon(&mut w, Key::Int(7)).expect("give back");
}

/// Cancels in the middle of a queue on the shared word: burst 3, 10/s, all
/// at one instant — the bucket emptied, then A (3), B (3), C (1), and B,
/// then A, cancelled. Nothing comes back (C is built on them), so a new
/// taking of 3 is due after C, never beside it: the old give-back (each
/// cancel freeing the slots "no later taker needs") made it due with C,
/// 4 tokens at one instant against a burst of 3. Cancelled last first, the
/// slots do come back.
#[test]
fn cancels_in_the_middle_of_the_queue_give_nothing_back() {
    let Some((_, l)) = parent_only("middle", "m.limit", bucket("10/s burst 3")) else {
        return;
    };
    let now = l.now();
    let max = Duration::from_secs(60);
    l.reserve_n_at(3, Duration::ZERO, now)
        .expect("burst")
        .consume();
    let a = l.reserve_n_at(3, max, now).expect("a");
    let b = l.reserve_n_at(3, max, now).expect("b");
    let c = l.reserve_n_at(1, max, now).expect("c");
    assert_eq!(c.delay(), Duration::from_millis(700));
    b.cancel();
    a.cancel();
    let new = l.reserve_n_at(3, max, now).expect("new");
    assert_eq!(new.delay(), Duration::from_millis(1_000));
    // The last ones, last first: both come back, and the next taking is
    // due where `new` was.
    let last = l.reserve_n_at(1, max, now).expect("last");
    last.cancel();
    new.cancel();
    let again = l.reserve_n_at(3, max, now).expect("again");
    assert_eq!(again.delay(), Duration::from_millis(1_000));
    again.consume();
    c.consume();
}
