//! What the shared-memory test files share: a fresh directory per test and
//! the token bucket of a quota.

use std::path::PathBuf;

use ratebound::{KeyedAlgorithm, Quota};

/// A fresh directory `<prefix>-<name>-<pid>` for one test.
pub fn dir(prefix: &str, name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{prefix}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("test dir");
    d
}

pub fn bucket(q: &str) -> KeyedAlgorithm {
    KeyedAlgorithm::TokenBucket(Quota::parse(q).expect("quota"))
}
