//! Shared limits across real processes (this test binary re-run as
//! workers): one clock, one burst, each key's burst, `kill -9` in the
//! middle of a run, and fresh slots reused (every way a file can be wrong
//! is `files.rs`'s).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{bucket, fixed_window};
use ratebound::KeyedAlgorithm;
use ratebound::any::Key;
use ratebound_shm::{Error, SharedKeyedLimiter, SharedLimiter};

/// A fresh directory for one test.
fn dir(name: &str) -> PathBuf {
    common::dir("shm", name)
}

/// Runs the test `test` of this binary again in a new process, as a worker
/// (`RB_SHM_ROLE` set: the test calls [`work`] and returns) with `env`.
fn spawn(test: &str, env: &[(&str, String)]) -> Child {
    common::spawn("RB_SHM_ROLE", test, env)
}

/// Waits until the worker has opened its table (it prints `ready`); keeps
/// its output open in `readers` so that it can go on printing.
fn ready(child: &mut Child, readers: &mut Vec<BufReader<std::process::ChildStdout>>) {
    let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    loop {
        line.clear();
        let n = out.read_line(&mut line).expect("worker output");
        assert!(n > 0, "the worker ended before it was ready");
        // libtest may have written "test … " on the same line.
        if line.trim_end().ends_with("ready") {
            break;
        }
    }
    readers.push(out);
}

/// A worker's environment: the table at `path` of `quota`, and `more`.
fn worker_env(
    path: &std::path::Path,
    quota: &str,
    more: &[(&'static str, &str)],
) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("RB_SHM_PATH", path.display().to_string()),
        ("RB_SHM_QUOTA", quota.to_string()),
    ];
    env.extend(more.iter().map(|&(k, v)| (k, v.to_string())));
    env
}

/// Four workers of the test `test` at once, with `env`: what they
/// admitted together.
fn four_workers(test: &str, env: &[(&str, String)]) -> u64 {
    let workers: Vec<Child> = (0..4).map(|_| spawn(test, env)).collect();
    workers.into_iter().map(admitted).sum()
}

/// The `admitted=N` a worker printed.
fn admitted(child: Child) -> u64 {
    let out = child.wait_with_output().expect("worker output");
    assert!(out.status.success(), "worker failed");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.split_once("admitted=").map(|(_, n)| n))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count in {text:?}"))
}

/// A fresh directory `name` and the path of a table `file` in it, for a
/// test's parent; `None` in a worker, once [`worked`] has done its part.
fn parent_table(name: &str, file: &str) -> Option<(PathBuf, PathBuf)> {
    if worked() {
        return None;
    }
    let d = dir(name);
    let path = d.join(file);
    Some((d, path))
}

/// True in a worker process: the calling test has done the worker's part
/// (see [`spawn`]) and must return.
fn worked() -> bool {
    if std::env::var_os("RB_SHM_ROLE").is_none() {
        return false;
    }
    work();
    true
}

/// A worker's part, as its environment says.
fn work() {
    if std::env::var("RB_SHM_CLOCK").is_ok() {
        println!("now={}", ratebound::Clock::now(&ratebound_shm::SystemClock));
        return;
    }
    if std::env::var("RB_SHM_REUSE").is_ok() {
        reuse_worker();
        return;
    }
    let path = std::env::var("RB_SHM_PATH").expect("RB_SHM_PATH for a worker");
    let quota = std::env::var("RB_SHM_QUOTA").expect("quota");
    let keys: u64 = std::env::var("RB_SHM_KEYS").map_or(0, |k| k.parse().expect("keys"));
    let iterations: u64 =
        std::env::var("RB_SHM_ITER").map_or(u64::MAX, |k| k.parse().expect("iter"));
    let millis: u64 = std::env::var("RB_SHM_MILLIS").map_or(u64::MAX, |k| k.parse().expect("ms"));
    let log = std::env::var("RB_SHM_LOG").ok();
    let mut log = log.map(|p| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .expect("log")
    });
    let start = Instant::now();
    let mut admitted = 0u64;
    let deadline = Duration::from_millis(millis);
    if keys == 0 {
        let l = SharedLimiter::open(&path, bucket(&quota)).expect("open");
        let mut i = 0;
        while i < iterations && start.elapsed() < deadline {
            admitted += u64::from(l.check().expect("check").is_allowed());
            i += 1;
        }
    } else {
        let max: u64 = std::env::var("RB_SHM_MAX").map_or(1000, |k| k.parse().expect("max"));
        let l = SharedKeyedLimiter::open(&path, bucket(&quota), max).expect("open keyed");
        // For a parent that kills workers only once they run.
        println!("ready");
        let mut i = 0u64;
        while i < iterations && start.elapsed() < deadline {
            let key = i % keys;
            if l.check(Key::Int(key as i128)).expect("check").is_allowed() {
                admitted += 1;
                if let Some(f) = log.as_mut() {
                    // One line per admission, written after it: a kill in
                    // between loses the line, never invents one.
                    writeln!(f, "{key}").expect("log line");
                }
            }
            i += 1;
        }
    }
    println!("admitted={admitted}");
}

#[test]
fn every_process_reads_the_same_clock() {
    if worked() {
        return;
    }
    // CLOCK_MONOTONIC is system-wide: a child's reading falls between the
    // parent's readings before it started and after it ended (a clock
    // calibrated per process, as the TSC-based default is, need not).
    let clock = ratebound_shm::SystemClock;
    for _ in 0..3 {
        let before = ratebound::Clock::now(&clock);
        let child = spawn(
            "every_process_reads_the_same_clock",
            &[("RB_SHM_CLOCK", "1".to_string())],
        );
        let out = child.wait_with_output().expect("child");
        let after = ratebound::Clock::now(&clock);
        let text = String::from_utf8_lossy(&out.stdout);
        let theirs: u64 = text
            .lines()
            .find_map(|l| l.split_once("now=").map(|(_, n)| n.trim().to_string()))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no reading in {text:?}"));
        assert!(
            before <= theirs && theirs <= after,
            "{before} <= {theirs} <= {after}"
        );
    }
}

#[test]
fn four_processes_share_one_burst_exactly() {
    let Some((_, path)) = parent_table("burst", "one.limit") else {
        return;
    };
    // One token an hour: nothing refills during the test.
    let env = worker_env(&path, "1/h burst 1000", &[("RB_SHM_ITER", "20000")]);
    let total = four_workers("four_processes_share_one_burst_exactly", &env);
    assert_eq!(
        total, 1000,
        "four processes together admit exactly the burst"
    );
    let l = SharedLimiter::open(&path, bucket("1/h burst 1000")).expect("open");
    assert_eq!(l.available(), 0);
    // The file is the owner's alone.
    let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn on_the_real_clock_processes_stay_within_burst_plus_rate_times_elapsed() {
    let Some((_, path)) = parent_table("rate", "rate.limit") else {
        return;
    };
    let env = worker_env(&path, "2000/s burst 50", &[("RB_SHM_MILLIS", "300")]);
    let start = Instant::now();
    let total = four_workers(
        "on_the_real_clock_processes_stay_within_burst_plus_rate_times_elapsed",
        &env,
    );
    let elapsed = start.elapsed().as_secs_f64();
    let bound = 50.0 + 2000.0 * elapsed;
    assert!(
        (total as f64) <= bound,
        "{total} admitted > {bound:.0} in {elapsed:.3} s"
    );
    // They did share the refill, not just the burst.
    assert!(total > 50 + 100, "{total} admitted in {elapsed:.3} s");
}

#[test]
fn keyed_processes_share_each_keys_burst() {
    let Some((_, path)) = parent_table("keyed", "keyed.limit") else {
        return;
    };
    let env = worker_env(
        &path,
        "1/h burst 10",
        &[("RB_SHM_KEYS", "50"), ("RB_SHM_ITER", "5000")],
    );
    let total = four_workers("keyed_processes_share_each_keys_burst", &env);
    assert_eq!(total, 50 * 10);
    let l = SharedKeyedLimiter::open(&path, bucket("1/h burst 10"), 1000).expect("open");
    assert_eq!(l.len(), 50, "one slot per key");
    for k in 0..50 {
        assert_eq!(l.available(Key::Int(k)), 0, "key {k}");
    }
    assert_eq!(
        l.available(Key::Int(50)),
        10,
        "an unseen key has its whole burst"
    );
}

#[test]
fn kill_dash_nine_during_a_run_leaves_a_consistent_table() {
    let Some((d, path)) = parent_table("kill", "kill.limit") else {
        return;
    };
    // 100 000 keys of one token each: the workers race through them (each
    // from key 0), claiming slots, while they are being killed.
    let quota = "1/h burst 1";
    let keys = 100_000u64;
    let env = |n: usize| {
        let (keys, log) = (keys.to_string(), d.join(format!("log-{n}")));
        let log = log.display().to_string();
        worker_env(
            &path,
            quota,
            &[
                ("RB_SHM_KEYS", &keys),
                ("RB_SHM_MAX", &keys),
                ("RB_SHM_ITER", &keys),
                ("RB_SHM_LOG", &log),
                ("RB_SHM_MILLIS", "3000"),
            ],
        )
    };
    let mut next = 0;
    let mut readers = Vec::new();
    // A worker is killed only once it runs: on a busy machine a fixed pause
    // may end before a worker has started.
    let mut start = |next: &mut usize| {
        *next += 1;
        let mut child = spawn(
            "kill_dash_nine_during_a_run_leaves_a_consistent_table",
            &env(*next),
        );
        ready(&mut child, &mut readers);
        child
    };
    let mut live: Vec<Child> = (0..3).map(|_| start(&mut next)).collect();
    // Twelve rounds: let them run a little, SIGKILL one, start another.
    for round in 0..12usize {
        std::thread::sleep(Duration::from_millis(15 + 7 * (round as u64 % 3)));
        let mut victim = live.remove(round % live.len());
        victim.kill().expect("SIGKILL");
        let _ = victim.wait();
        live.push(start(&mut next));
    }
    for mut c in live {
        c.kill().expect("SIGKILL");
        let _ = c.wait();
    }
    // What the workers logged is at most what the table counts, which is at
    // most each key's burst.
    let mut logged = vec![0u64; keys as usize];
    for n in 1..=next {
        let Ok(f) = std::fs::File::open(d.join(format!("log-{n}"))) else {
            continue;
        };
        for line in BufReader::new(f).lines() {
            let Ok(line) = line else { continue };
            // A kill mid-line leaves a partial last line: not counted.
            if let Ok(k) = line.trim().parse::<usize>() {
                logged[k] += 1;
            }
        }
    }
    let l = SharedKeyedLimiter::open(&path, bucket(quota), keys)
        .expect("the table opens after the kills");
    let mut counted_total = 0;
    for k in 0..keys {
        // Each key's one token was taken at most once, by whichever process.
        let counted = 1 - l.available(Key::Int(k as i128));
        assert!(
            logged[k as usize] <= counted,
            "key {k}: logged {} > counted {counted}",
            logged[k as usize]
        );
        counted_total += counted;
    }
    let logged_total: u64 = logged.iter().sum();
    eprintln!(
        "kill test: {logged_total} logged, {counted_total} counted, {} slots held",
        l.len()
    );
    assert!(
        logged_total > 1000,
        "the workers ran: {logged_total} logged"
    );
    assert!(counted_total >= logged_total);
    assert!(!l.is_empty() && l.len() <= l.slots());
    // Survivors and new workers keep working: a new key is admitted, an
    // exhausted one refused.
    assert!(
        l.check(Key::Text("after-the-kills"))
            .expect("check")
            .is_allowed()
    );
    assert_eq!(
        logged[0], 1,
        "key 0, first for every worker, was admitted once"
    );
    assert!(!l.check(Key::Int(0)).expect("check").is_allowed());
}

/// One worker of the reuse test: for each `go <phase> <start>` line on
/// stdin, waits for `start` (ns of `CLOCK_MONOTONIC`, so that the workers
/// begin together), takes one for each of the phase's keys, three rounds,
/// at the phase's time, and reports every admission and every refusal for
/// want of a slot.
fn reuse_worker() {
    let path = std::env::var("RB_SHM_PATH").expect("path");
    let start: u64 = std::env::var("RB_SHM_ROTATE")
        .expect("rotate")
        .parse()
        .expect("rotate");
    let l = SharedKeyedLimiter::open(&path, reuse_window(), 1).expect("open");
    println!("ready");
    for line in std::io::stdin().lines() {
        let line = line.expect("stdin");
        let Some((phase, begin)) = line.strip_prefix("go ").and_then(|l| l.split_once(' ')) else {
            break;
        };
        let phase: u64 = phase.parse().expect("phase");
        let begin: u64 = begin.parse().expect("start");
        while ratebound::Clock::now(&ratebound_shm::SystemClock) < begin {
            std::hint::spin_loop();
        }
        let now = phase * REUSE_WINDOW + 1;
        for i in 0..3 * REUSE_KEYS {
            let key = (1000 * phase + (start + i) % REUSE_KEYS) as i128;
            match l.check_n_at(Key::Int(key), 1, now) {
                Ok(d) if d.is_allowed() => println!("admit {key}"),
                Ok(_) => {}
                Err(Error::Limit(ratebound::Error::TooManyKeys { .. })) => {
                    println!("toomany {key}")
                }
                Err(e) => panic!("{e}"),
            }
        }
        println!("done {phase}");
    }
}

const REUSE_WINDOW: u64 = 1_000_000_000;
/// Half the table: a key always finds a fresh slot, whatever the others
/// hold at that instant (each of 4 processes holds at most one slot it is
/// about to give back).
const REUSE_KEYS: u64 = 32;

fn reuse_window() -> KeyedAlgorithm {
    fixed_window(1, Duration::from_nanos(REUSE_WINDOW))
}

#[test]
fn processes_reusing_fresh_slots_admit_each_key_once() {
    let Some((_, path)) = parent_table("reuse", "reuse.limit") else {
        return;
    };
    // 64 slots, filled with keys 0..64 admitted in window 1: no empty slot
    // is left, so every key after this lives in a reused one.
    let l = SharedKeyedLimiter::open(&path, reuse_window(), 1).expect("open");
    let now1 = REUSE_WINDOW + 1;
    for k in 0..64 {
        assert!(
            l.check_n_at(Key::Int(k), 1, now1)
                .expect("room")
                .is_allowed()
        );
    }
    assert!(matches!(
        l.check_n_at(Key::Int(64), 1, now1),
        Err(Error::Limit(ratebound::Error::TooManyKeys { .. }))
    ));
    // Four processes in lockstep: in each window (phase) the last window's
    // slots are fresh, and all four race to reuse them for the same 32 new
    // keys, two from key 0, two from key 16.
    let mut workers: Vec<(Child, BufReader<std::process::ChildStdout>)> = (0..4u64)
        .map(|w| {
            let mut child = Command::new(std::env::current_exe().expect("test binary"))
                .args([
                    "--exact",
                    "processes_reusing_fresh_slots_admit_each_key_once",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("RB_SHM_ROLE", "worker")
                .env("RB_SHM_REUSE", "1")
                .env("RB_SHM_PATH", &path)
                .env("RB_SHM_ROTATE", (w % 2 * 16).to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn a worker");
            let out = BufReader::new(child.stdout.take().expect("stdout"));
            (child, out)
        })
        .collect();
    let read_until = |out: &mut BufReader<std::process::ChildStdout>, end: &str| -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            let n = out.read_line(&mut line).expect("worker output");
            assert!(n > 0, "a worker ended early");
            // libtest may have written "test … " on the same line.
            let line = line.trim_end();
            if line.ends_with(end) {
                return lines;
            }
            if let Some(at) = line.find("admit ").or_else(|| line.find("toomany ")) {
                lines.push(line[at..].to_string());
            }
        }
    };
    for (_, out) in workers.iter_mut() {
        read_until(out, "ready");
    }
    for phase in 2..42u64 {
        let begin = ratebound::Clock::now(&ratebound_shm::SystemClock) + 10_000_000;
        for (child, _) in workers.iter_mut() {
            let stdin = child.stdin.as_mut().expect("stdin");
            writeln!(stdin, "go {phase} {begin}").expect("go");
            stdin.flush().expect("flush");
        }
        let mut admitted = std::collections::BTreeMap::<i128, u32>::new();
        for (_, out) in workers.iter_mut() {
            for line in read_until(out, &format!("done {phase}")) {
                let (what, key) = line.split_once(' ').expect("a report");
                assert_eq!(what, "admit", "phase {phase}: {line}");
                *admitted.entry(key.parse().expect("key")).or_default() += 1;
            }
        }
        let want: std::collections::BTreeMap<i128, u32> = (0..REUSE_KEYS)
            .map(|k| ((1000 * phase + k) as i128, 1))
            .collect();
        assert_eq!(
            admitted, want,
            "phase {phase}: each key admitted once in all"
        );
        // Each key's state is in its slot: a further check is refused.
        let now = phase * REUSE_WINDOW + 1;
        for k in 0..REUSE_KEYS {
            let key = Key::Int((1000 * phase + k) as i128);
            assert!(!l.check_n_at(key, 1, now).expect("check").is_allowed());
        }
    }
    for (mut child, _) in workers {
        drop(child.stdin.take());
        assert!(child.wait().expect("wait").success());
    }
    assert_eq!(l.len(), 64);
}
