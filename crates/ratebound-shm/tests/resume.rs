//! `resume` on shared memory: two handles on one file, at explicit
//! instants (the system clock's readings, moved forward by hand).

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{bucket, fixed_window};
use ratebound::Resumed;
use ratebound::any::Key;
use ratebound::wait::Step;
use ratebound_shm::{SharedKeyedLimiter, SharedLimiter};

const MS: u64 = 1_000_000;
const S: u64 = 1_000 * MS;

/// A fresh directory for one test.
fn dir(name: &str) -> PathBuf {
    common::dir("shm-resume", name)
}

/// Two handles on one fresh 2/s burst 3 table in the directory `name`.
fn two_handles(name: &str) -> (SharedLimiter, SharedLimiter) {
    let path = dir(name).join("p.limit");
    let open = || SharedLimiter::open(&path, bucket("2/s burst 3")).expect("open");
    (open(), open())
}

#[test]
fn a_resume_by_one_handle_lifts_the_pause_for_every_handle() {
    let (a, b) = two_handles("single");
    let now = a.now();
    assert_eq!(b.resume_at(now).expect("resume"), Resumed::NotPaused);
    a.pause_at(Duration::from_secs(10), now).expect("pause");
    assert!(!b.check_n_at(1, now + S).expect("check").is_allowed());
    assert_eq!(b.resume_at(now + S).expect("resume"), Resumed::Lifted);
    // Empty at now + 1 s, one token every 0.5 s from then on: as a bucket
    // paused for 1 s.
    let first = a.check_n_at(1, now + S).expect("check");
    assert_eq!(first.retry_after(), Duration::from_millis(500));
    assert!(
        !a.check_n_at(1, now + S + 499 * MS)
            .expect("check")
            .is_allowed()
    );
    assert!(
        a.check_n_at(1, now + S + 500 * MS)
            .expect("check")
            .is_allowed()
    );
    assert!(b.check_n_at(1, now + 2 * S).expect("check").is_allowed());
    assert_eq!(
        a.resume_at(now + 2 * S).expect("resume"),
        Resumed::NotPaused
    );
    // Paused again, and lifted again.
    a.pause_at(Duration::from_secs(30), now + 3 * S)
        .expect("pause");
    assert!(!b.check_n_at(1, now + 20 * S).expect("check").is_allowed());
    assert_eq!(b.resume_at(now + 4 * S).expect("resume"), Resumed::Lifted);
    assert!(
        b.check_n_at(1, now + 4 * S + 500 * MS)
            .expect("check")
            .is_allowed()
    );
}

#[test]
fn a_reservation_behind_the_shared_pause_keeps_it_queued() {
    let (a, b) = two_handles("queued");
    let now = a.now();
    a.pause_at(Duration::from_secs(10), now).expect("pause");
    let r = b
        .reserve_n_at(1, Duration::from_secs(60), now + S)
        .expect("reserved behind the pause");
    assert_eq!(r.delay(), Duration::from_millis(9_500));
    assert_eq!(a.resume_at(now + 2 * S).expect("resume"), Resumed::Queued);
    for t in [2 * S, 9 * S, 10 * S + 999 * MS] {
        assert!(
            !a.check_n_at(1, now + t).expect("check").is_allowed(),
            "at {t}"
        );
    }
    assert!(a.check_n_at(1, now + 11 * S).expect("check").is_allowed());
    drop(r);
}

#[test]
fn keyed_resume_lifts_one_key_and_claims_no_slot() {
    let d = dir("keyed");
    let k = SharedKeyedLimiter::open(d.join("k.limit"), bucket("2/s burst 3"), 8).expect("open");
    let other =
        SharedKeyedLimiter::open(d.join("k.limit"), bucket("2/s burst 3"), 8).expect("open");
    let now = k.now();
    assert_eq!(
        k.resume_at(Key::Text("alice"), now).expect("resume"),
        Resumed::NotPaused
    );
    assert_eq!(k.len(), 0, "no slot was claimed");
    for key in ["alice", "bob"] {
        k.pause_at(Key::Text(key), Duration::from_secs(10), now)
            .expect("pause");
    }
    assert_eq!(
        other
            .resume_at(Key::Text("alice"), now + S)
            .expect("resume"),
        Resumed::Lifted
    );
    assert!(
        k.check_n_at(Key::Text("alice"), 1, now + S + 500 * MS)
            .expect("check")
            .is_allowed()
    );
    assert!(
        !k.check_n_at(Key::Text("bob"), 1, now + 9 * S)
            .expect("check")
            .is_allowed()
    );
    // A waiter (holding a slot behind bob's pause) keeps it queued.
    let mut w = k.waiter(1, Some(60.0), u64::MAX).expect("waiter");
    assert!(matches!(
        k.wait_step(&mut w, Key::Text("bob")).expect("step"),
        Step::Sleep(_)
    ));
    assert_eq!(
        other
            .resume_at(Key::Text("bob"), now + 2 * S)
            .expect("resume"),
        Resumed::Queued
    );
    assert!(
        !k.check_n_at(Key::Text("bob"), 1, now + 9 * S)
            .expect("check")
            .is_allowed()
    );
    k.abandon(&mut w, Key::Text("bob")).expect("abandon");
}

#[test]
fn resume_on_a_window_is_unsupported() {
    let d = dir("window");
    let window = fixed_window(3, Duration::from_secs(1));
    let s = SharedLimiter::open(d.join("w.limit"), window).expect("open");
    let k = SharedKeyedLimiter::open(d.join("kw.limit"), window, 8).expect("open");
    for e in [
        s.resume().expect_err("unsupported"),
        k.resume(Key::Int(1)).expect_err("unsupported"),
    ] {
        assert!(e.to_string().contains("resume"), "{e}");
        assert!(matches!(
            e,
            ratebound_shm::Error::Limit(ratebound::Error::Unsupported {
                operation: "resume",
                ..
            })
        ));
    }
}
