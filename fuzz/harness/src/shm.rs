//! Opening a shared-memory table whose file holds arbitrary contents: a
//! valid file with words overwritten, truncated or extended, or bytes
//! that are no table at all. Opening gives a limiter or a typed error
//! (`Mismatch`, `Corrupt`, …), and a limiter over damaged slots decides
//! without a panic.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use ratebound::any::Key;
use ratebound::{KeyedAlgorithm, Quota};
use ratebound_shm::{Error, SharedKeyedLimiter, SharedLimiter};

use crate::Input;

/// The algorithms the templates are made for.
fn algorithms() -> [KeyedAlgorithm; 3] {
    let window = Duration::from_secs(1);
    [
        KeyedAlgorithm::TokenBucket(Quota::parse("10/s burst 5").expect("a quota")),
        KeyedAlgorithm::FixedWindow { limit: 5, window },
        KeyedAlgorithm::SlidingWindow { limit: 5, window },
    ]
}

const MAX_KEYS: u64 = 4;

/// This process's directory for the files, in the temporary directory (a
/// few kilobytes; [`remove_files`] removes it).
fn dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("ratebound-fuzz-shm-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("a temporary directory");
        d
    })
}

/// Removes this process's directory of table files (the replay test calls
/// it at its end; a fuzzer's run leaves it, a few kilobytes).
pub fn remove_files() {
    let _ = std::fs::remove_dir_all(dir());
}

/// A valid file's bytes for each (single or keyed, algorithm), made once
/// on this host (its header holds this boot's identity).
fn templates() -> &'static Vec<Vec<u8>> {
    static T: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    T.get_or_init(|| {
        let mut out = Vec::new();
        for (i, alg) in algorithms().into_iter().enumerate() {
            for keyed in [false, true] {
                let path = dir().join(format!("template-{i}-{keyed}"));
                let _ = std::fs::remove_file(&path);
                if keyed {
                    let l =
                        SharedKeyedLimiter::open(&path, alg, MAX_KEYS).expect("a new keyed table");
                    l.check(Key::Text("seed")).expect("a check");
                } else {
                    let l = SharedLimiter::open(&path, alg).expect("a new table");
                    l.check().expect("a check");
                }
                out.push(std::fs::read(&path).expect("the template"));
                let _ = std::fs::remove_file(&path);
            }
        }
        out
    })
}

fn write(path: &Path, bytes: &[u8]) {
    let _ = std::fs::remove_file(path);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .expect("the file");
    f.write_all(bytes).expect("written");
}

/// An error opening a damaged file must be one of the typed kinds for
/// contents (never `Io` unless the file is too short to map, say).
fn check_error(e: &Error) {
    assert!(!e.to_string().is_empty(), "{e:?}");
    assert!(
        matches!(
            e,
            Error::Mismatch { .. } | Error::Corrupt { .. } | Error::StaleBoot { .. }
        ),
        "an unexpected kind of error for damaged contents: {e:?}"
    );
}

/// See the module's docs. The input: which template, then patches
/// (offset, bytes), then a new length, then the calls' inputs; or, for a
/// first byte of 250 and above, the whole file as the rest of the input.
pub fn shm_open(data: &[u8]) {
    let mut input = Input::new(data);
    let which = input.byte();
    let templates = templates();
    let pick = usize::from(which) % templates.len();
    let bytes = if which >= 250 {
        input.rest().to_vec()
    } else {
        let mut bytes = templates[pick].clone();
        for _ in 0..input.below(6) {
            let at = usize::from(input.u16()) % (bytes.len() + 8);
            let patch = input.bytes(16);
            if bytes.len() < at + patch.len() {
                bytes.resize(at + patch.len(), 0);
            }
            bytes[at..at + patch.len()].copy_from_slice(patch);
        }
        if input.byte() < 24 {
            let len = usize::from(input.u16()) % (bytes.len() + 64);
            bytes.resize(len, 0);
        }
        bytes
    };
    let path = dir().join("table");
    write(&path, &bytes);
    let alg = algorithms()[pick / 2];
    let keyed = pick % 2 == 1;
    let now = u64::from(input.u32());
    if keyed {
        match SharedKeyedLimiter::open(&path, alg, MAX_KEYS) {
            Ok(l) => {
                for _ in 0..input.below(8) {
                    let key = input.bytes(6);
                    let n = u64::from(input.byte() % 8);
                    let at = now.saturating_add(u64::from(input.u32()));
                    match l.check_n_at(Key::Bytes(key), n, at) {
                        Ok(d) => assert!(d.remaining() <= d.limit(), "{d:?}"),
                        Err(e) => assert!(matches!(e, Error::Limit(_)), "{e:?}"),
                    }
                    let _ = l.available(Key::Bytes(key));
                    let _ = l.len();
                }
            }
            Err(e) => check_error(&e),
        }
    } else {
        match SharedLimiter::open(&path, alg) {
            Ok(l) => {
                for _ in 0..input.below(8) {
                    let n = u64::from(input.byte() % 8);
                    let at = now.saturating_add(u64::from(input.u32()));
                    match l.check_n_at(n, at) {
                        Ok(d) => assert!(d.remaining() <= d.limit(), "{d:?}"),
                        Err(e) => assert!(matches!(e, Error::Limit(_)), "{e:?}"),
                    }
                    let _ = l.available();
                }
            }
            Err(e) => check_error(&e),
        }
    }
    let _ = std::fs::remove_file(&path);
}
