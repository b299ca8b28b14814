//! The `ratebound` binary run as a user runs it, for the CLI's test files:
//! its output, a fresh scratch file, the usage-error contract.
#![allow(dead_code)] // each user takes its part

use std::path::PathBuf;
use std::process::{Command, Output};

pub fn ratebound(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ratebound"))
        .args(args)
        .output()
        .expect("the binary runs")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A file `name` in the folder `dir` under the target directory, fresh for
/// this test.
pub fn scratch_in(dir: &str, name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

/// Fails with exit code 2 and exactly one line on stderr containing `needle`.
pub fn assert_usage_error(args: &[&str], needle: &str) {
    let o = ratebound(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: one line, got {err:?}");
    assert!(err.contains(needle), "{args:?}: {err:?} lacks {needle:?}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(stdout(&o).is_empty(), "{args:?}: nothing on stdout");
}

/// The JSON a successful run printed.
pub fn json(args: &[&str]) -> serde_json::Value {
    let o = ratebound(args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("JSON output")
}

/// What the `algorithm`/`scope` row of a `simulate --json` result admitted.
pub fn admitted(v: &serde_json::Value, algorithm: &str, scope: &str) -> u64 {
    v["algorithms"]
        .as_array()
        .expect("algorithms")
        .iter()
        .find(|a| a["algorithm"] == algorithm && a["scope"] == scope)
        .and_then(|a| a["admitted"].as_u64())
        .unwrap_or_else(|| panic!("no {algorithm}/{scope} in {v}"))
}
