//! What the shared-memory test files share: a fresh directory per test,
//! the token bucket of a quota, and this test binary re-run as a worker.
#![allow(dead_code)] // each user takes its part

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ratebound::{KeyedAlgorithm, Quota};

/// A fresh directory `<prefix>-<name>-<pid>` for one test.
pub fn dir(prefix: &str, name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{prefix}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("test dir");
    d
}

/// A fixed window of `limit` per `window`.
pub fn fixed_window(limit: u64, window: Duration) -> KeyedAlgorithm {
    KeyedAlgorithm::FixedWindow { limit, window }
}

pub fn bucket(q: &str) -> KeyedAlgorithm {
    KeyedAlgorithm::TokenBucket(Quota::parse(q).expect("quota"))
}

/// This binary again, running only `test`, as a worker (`role` set to
/// `worker`) with `env`: its stdout piped, its stderr dropped.
pub fn spawn(role: &str, test: &str, env: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(role, "worker")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn a worker process")
}
