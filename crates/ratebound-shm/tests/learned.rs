//! What the outbound adapters learn of a partner's limit, kept in the file
//! beside each slot's state: one process adapts, every process decides at
//! the learned share of the configured quota; damaged words never raise
//! the rate; a table of the old layout is refused.

mod common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Child;

use common::{bucket, fixed_window};
use ratebound::any::Key;
use ratebound::outbound::{FULL, Learned};
use ratebound_shm::{Error, SharedKeyedLimiter, SharedLimiter};

/// One tenth of the ceiling (rounded up to the next 65536th, so that a
/// tenth of a burst of 100 is 10), changed at 1 ms.
fn tenth() -> Learned {
    Learned::new(FULL / 10 + 1, 1).with_cut(true)
}

/// The byte offset of word `slot_word` of slot `slot` (the header is 16
/// words, a slot 8).
fn offset(slot: u64, slot_word: u64) -> u64 {
    (16 + 8 * slot + slot_word) * 8
}

/// Writes `value` into the file's word at `at` (bytes), as a damaged or
/// hand-edited file would hold it (the map sees the page cache).
fn poke(path: &Path, at: u64, value: u64) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open for a poke");
    f.write_all_at(&value.to_le_bytes(), at).expect("poke");
}

fn worker_role() -> Option<String> {
    std::env::var("RB_SHM_LEARN_ROLE").ok()
}

/// This binary again, running `test` as a worker with `env`.
fn spawn(test: &str, env: &[(&str, String)]) -> Child {
    common::spawn("RB_SHM_LEARN_ROLE", test, env)
}

/// The `key=value` a worker printed.
fn printed(child: Child, key: &str) -> String {
    let out = child.wait_with_output().expect("worker output");
    assert!(out.status.success(), "worker failed");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            l.split_once(&format!("{key}="))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no {key} in {text:?}"))
}

/// A worker's part: adapt (`RB_SHM_DO=adapt`) or count admissions at one
/// instant (`check`) on the table at `RB_SHM_PATH`, keyed when
/// `RB_SHM_KEY` is set.
fn work() {
    let path = PathBuf::from(std::env::var("RB_SHM_PATH").expect("path"));
    let quota = std::env::var("RB_SHM_QUOTA").expect("quota");
    let what = std::env::var("RB_SHM_DO").expect("what to do");
    let key: Option<i128> = std::env::var("RB_SHM_KEY")
        .ok()
        .map(|k| k.parse().expect("key"));
    match (what.as_str(), key) {
        ("adapt", None) => {
            let l = SharedLimiter::open(&path, bucket(&quota)).expect("open");
            println!(
                "replaced={}",
                l.adapt(Learned::fresh(), tenth()).expect("adapt")
            );
        }
        ("adapt", Some(k)) => {
            let l = SharedKeyedLimiter::open(&path, bucket(&quota), 100).expect("open");
            let r = l.adapt(Key::Int(k), Learned::fresh(), tenth());
            println!("replaced={}", r.expect("adapt"));
        }
        ("check", None) => {
            let l = SharedLimiter::open(&path, bucket(&quota)).expect("open");
            let now = l.now();
            let n = (0..10_000)
                .filter(|_| l.check_n_at(1, now).expect("check").is_allowed())
                .count();
            println!("learned={}", l.learned().to_bits());
            println!("admitted={n}");
        }
        ("check", Some(k)) => {
            let l = SharedKeyedLimiter::open(&path, bucket(&quota), 100).expect("open");
            let now = l.now();
            let n = (0..10_000)
                .filter(|_| {
                    l.check_n_at(Key::Int(k), 1, now)
                        .expect("check")
                        .is_allowed()
                })
                .count();
            println!("admitted={n}");
        }
        other => panic!("unknown worker part {other:?}"),
    }
}

fn env(path: &Path, quota: &str, what: &str, key: Option<i128>) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("RB_SHM_PATH", path.display().to_string()),
        ("RB_SHM_QUOTA", quota.to_string()),
        ("RB_SHM_DO", what.to_string()),
    ];
    if let Some(k) = key {
        env.push(("RB_SHM_KEY", k.to_string()));
    }
    env
}

#[test]
fn a_word_one_process_learns_sets_the_rate_of_another() {
    if worker_role().is_some() {
        return work();
    }
    let test = "a_word_one_process_learns_sets_the_rate_of_another";
    let path = common::dir("learn", "single").join("one.limit");
    // One token an hour: nothing refills while the test runs; a tenth of
    // a burst of 1000 is 100.
    let quota = "1/h burst 1000";
    let adapter = spawn(test, &env(&path, quota, "adapt", None));
    assert_eq!(printed(adapter, "replaced"), "true");
    let checker = spawn(test, &env(&path, quota, "check", None));
    let l = SharedLimiter::open(&path, bucket(quota)).expect("open");
    assert_eq!(
        l.learned(),
        tenth(),
        "the parent reads what the worker learned"
    );
    let out = checker.wait_with_output().expect("checker");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("admitted=100\n"), "{text}");
    assert!(
        text.contains(&format!("learned={}\n", tenth().to_bits())),
        "{text}"
    );
    // The word replaced once: a second proposal from the fresh word fails.
    assert!(
        !l.adapt(Learned::fresh(), Learned::new(FULL / 2, 2))
            .expect("adapt")
    );
    assert_eq!(l.learned(), tenth());
}

#[test]
fn a_key_learned_in_one_process_limits_that_key_in_another() {
    if worker_role().is_some() {
        return work();
    }
    let test = "a_key_learned_in_one_process_limits_that_key_in_another";
    let path = common::dir("learn", "keyed").join("keyed.limit");
    let quota = "1/h burst 100";
    let adapter = spawn(test, &env(&path, quota, "adapt", Some(7)));
    assert_eq!(printed(adapter, "replaced"), "true");
    let seven = spawn(test, &env(&path, quota, "check", Some(7)));
    let eight = spawn(test, &env(&path, quota, "check", Some(8)));
    assert_eq!(printed(seven, "admitted"), "10", "key 7 at a tenth");
    assert_eq!(printed(eight, "admitted"), "100", "key 8 learned nothing");
    let l = SharedKeyedLimiter::open(&path, bucket(quota), 100).expect("open");
    assert_eq!(l.learned(Key::Int(7)), tenth());
    assert_eq!(l.learned(Key::Int(8)), Learned::fresh());
    assert_eq!(l.learned(Key::Int(9)), Learned::fresh(), "no slot: fresh");
}

#[test]
fn checks_run_at_the_learned_rate_from_the_schedule_as_it_was() {
    let path = common::dir("learn", "rate").join("rate.limit");
    // 10/s burst 1: one every 100 ms; at half, one every 200 ms.
    let l = SharedLimiter::open(&path, bucket("10/s burst 1")).expect("open");
    let t0 = l.now();
    let ms = 1_000_000;
    assert!(l.check_n_at(1, t0).expect("check").is_allowed());
    let half = Learned::new(FULL / 2, 1);
    assert!(l.adapt(Learned::fresh(), half).expect("adapt"));
    assert!(!l.adapt(Learned::fresh(), half).expect("adapt"), "a CAS");
    // The next token is where the schedule had it (t0 + 100 ms), the one
    // after it 200 ms later (the ceiling would give it at t0 + 200 ms).
    assert!(!l.check_n_at(1, t0 + 99 * ms).expect("check").is_allowed());
    assert!(l.check_n_at(1, t0 + 100 * ms).expect("check").is_allowed());
    let refused = l.check_n_at(1, t0 + 200 * ms).expect("check");
    assert!(!refused.is_allowed());
    assert_eq!(refused.retry_after_nanos(), 100 * ms, "at half the rate");
    assert!(l.check_n_at(1, t0 + 300 * ms).expect("check").is_allowed());
    // Back to the ceiling (the word at the full fraction): the token
    // taken at half the rate keeps its place (the next at t0 + 500 ms),
    // the one after comes 100 ms later.
    assert!(l.adapt(half, Learned::new(FULL, 2)).expect("adapt"));
    assert!(!l.check_n_at(1, t0 + 499 * ms).expect("check").is_allowed());
    assert!(l.check_n_at(1, t0 + 500 * ms).expect("check").is_allowed());
    assert!(!l.check_n_at(1, t0 + 599 * ms).expect("check").is_allowed());
    assert!(l.check_n_at(1, t0 + 600 * ms).expect("check").is_allowed());
}

#[test]
fn damaged_words_never_raise_the_rate_nor_panic() {
    let d = common::dir("learn", "damaged");
    let (single, keyed) = (d.join("one.limit"), d.join("keyed.limit"));
    let quota = "1/h burst 50";
    let ceiling = ratebound::Quota::parse(quota).expect("quota");
    let one = SharedLimiter::open(&single, bucket(quota)).expect("open");
    let many = SharedKeyedLimiter::open(&keyed, bucket(quota), 32).expect("open keyed");
    let now = one.now();
    // A key's slot: adapt claims it (and leaves its state fresh).
    let key = Key::Int(3);
    assert!(many.adapt(key, Learned::fresh(), tenth()).expect("adapt"));
    let slot = (0..many.slots() as u64)
        .find(|&s| {
            let f = std::fs::File::open(&keyed).expect("open");
            let mut w = [0u8; 8];
            f.read_exact_at(&mut w, offset(s, 4)).expect("read");
            u64::from_le_bytes(w) == tenth().to_bits()
        })
        .expect("the key's slot holds its word");
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut words = vec![0, u64::MAX, 1 << 63, 1 << 62, (1 << 61) - 1, FULL as u64];
    for _ in 0..200 {
        // xorshift64
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        words.push(x);
    }
    for w in words {
        // A fresh state, then the damaged word.
        poke(&single, offset(0, 1), 0);
        poke(&single, offset(0, 4), w);
        poke(&keyed, offset(slot, 1), 0);
        poke(&keyed, offset(slot, 4), w);
        let learned = one.learned();
        assert!(learned.fraction_units() <= FULL, "{w:#x}");
        assert!(one.available() <= 50, "{w:#x}");
        // The burst of the word's share of the ceiling: from 1 to 50.
        let burst = learned.scale(ceiling).burst();
        assert!((1..=50).contains(&burst), "{w:#x}");
        let n = (0..100)
            .filter(|_| one.check_n_at(1, now).expect("check").is_allowed())
            .count() as u64;
        assert_eq!(n, burst, "{w:#x}: admitted");
        let n = (0..100)
            .filter(|_| many.check_n_at(key, 1, now).expect("check").is_allowed())
            .count() as u64;
        assert_eq!(n, burst, "{w:#x}: admitted for the key");
        // Every other operation on the word: no panic.
        let _ = one.reserve_n_at(1, std::time::Duration::from_secs(1), now);
        one.pause_at(std::time::Duration::from_millis(1), now)
            .expect("pause");
        let _ = one.resume_at(now);
        let _ = many.available(key);
        // An adapter that read the word (as `learned` reads it) replaces
        // it: a damaged word heals at the next change.
        let seen = one.learned();
        assert!(one.adapt(seen, Learned::fresh()).expect("adapt"), "{w:#x}");
        assert_eq!(one.learned(), Learned::fresh());
        let seen = many.learned(key);
        assert!(many.adapt(key, seen, tenth()).expect("adapt"), "{w:#x}");
        assert_eq!(many.learned(key), tenth());
    }
}

#[test]
fn a_reused_slot_forgets_its_old_keys_word() {
    let path = common::dir("learn", "reuse").join("reuse.limit");
    // max_keys 1: 64 slots, one window — the whole table.
    let l = SharedKeyedLimiter::open(&path, bucket("1/h burst 10"), 1).expect("open");
    assert_eq!(l.slots(), 64);
    let now = l.now();
    // 64 keys learn (their states stay fresh: reusable).
    for k in 0..64 {
        assert!(
            l.adapt_at(Key::Int(k), Learned::fresh(), tenth(), now)
                .expect("adapt")
        );
    }
    assert_eq!(l.len(), 64);
    // A 65th key reuses a slot: it decides at the ceiling, not at the old
    // key's tenth.
    let new = Key::Int(1000);
    let n = (0..20)
        .filter(|_| l.check_n_at(new, 1, now).expect("check").is_allowed())
        .count();
    assert_eq!(n, 10, "the whole burst");
    assert_eq!(l.learned(new), Learned::fresh());
    let forgotten = (0..64)
        .filter(|&k| l.learned(Key::Int(k)) == Learned::fresh())
        .count();
    assert_eq!(forgotten, 1, "one old key lost its slot and its word");
}

#[test]
fn windows_do_not_learn() {
    let d = common::dir("learn", "windows");
    let w = fixed_window(10, std::time::Duration::from_secs(1));
    let one = SharedLimiter::open(d.join("one.limit"), w).expect("open");
    let many = SharedKeyedLimiter::open(d.join("many.limit"), w, 10).expect("open");
    let unsupported = |e: Error| {
        assert!(
            matches!(
                e,
                Error::Limit(ratebound::Error::Unsupported {
                    algorithm: "fixed_window",
                    ..
                })
            ),
            "{e}"
        );
    };
    unsupported(one.adapt(Learned::fresh(), tenth()).expect_err("a window"));
    unsupported(
        many.adapt(Key::Int(1), Learned::fresh(), tenth())
            .expect_err("a window"),
    );
    assert_eq!(one.learned(), Learned::fresh());
    assert_eq!(many.learned(Key::Int(1)), Learned::fresh());
    assert!(many.is_empty(), "no slot claimed for a refused adapt");
}
