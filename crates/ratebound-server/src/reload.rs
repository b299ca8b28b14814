//! Hot reload: the configuration path watched, and swapped at once when it
//! changes.
//!
//! [`Watcher::poll`] reads what the path holds (the file, or every YAML
//! file of the directory, as [`Config::load`](crate::model::Config::load)
//! reads them) and compares it with what it read last, byte for byte (a
//! hash of the names and contents: a file rewritten in place within the
//! same second, with the same length, is still seen). When it changed,
//! the whole configuration is read again and put in force
//! ([`Engine::reload`]); a file that does not read — a YAML error, a bad
//! value, a limit the engine cannot decide by — is reported (its file,
//! line and column) and **the rules in force stay**. Polling rather than
//! file-system events: it needs nothing of the platform, sees a
//! Kubernetes ConfigMap's symlink swap like any edit, and costs a read of
//! a few small files per period.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use crate::engine::Engine;
use crate::model::Config;

/// What a [`Watcher::poll`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Polled {
    /// Nothing changed since the last poll.
    Unchanged,
    /// The path changed and its rules are in force now: the domains read.
    Reloaded {
        /// The domains now in force.
        domains: Vec<String>,
    },
    /// The path changed but does not read: why (the file, line, column
    /// and bad value). The rules in force stay; the same content is not
    /// reported again.
    Refused {
        /// The error, as `path:line:column: message`.
        error: String,
    },
}

/// Watches a configuration path (see the module's notes).
#[derive(Debug)]
pub struct Watcher {
    path: PathBuf,
    seen: u64,
}

impl Watcher {
    /// A watcher of `path`, whose content now is taken as the one in force
    /// (the engine was built from it).
    pub fn new(path: impl Into<PathBuf>) -> Watcher {
        let path = path.into();
        let seen = stamp(&path);
        Watcher { path, seen }
    }

    /// The path watched.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the path; when it changed since the last poll, puts its rules
    /// in force in `engine`, or says why not.
    pub fn poll(&mut self, engine: &Engine) -> Polled {
        let now = stamp(&self.path);
        if now == self.seen {
            return Polled::Unchanged;
        }
        self.seen = now;
        match Config::load(&self.path) {
            Err(e) => Polled::Refused {
                error: e.to_string(),
            },
            Ok(config) => {
                let domains = config.domains.keys().cloned().collect();
                match engine.reload(config) {
                    Ok(()) => Polled::Reloaded { domains },
                    Err(e) => Polled::Refused {
                        error: e.to_string(),
                    },
                }
            }
        }
    }
}

/// A hash of what `path` holds: the file's bytes, or each directory
/// entry's name and bytes in name order (an entry that cannot be read
/// counts as its error's kind, so that it changes the stamp when it heals).
fn stamp(path: &Path) -> u64 {
    let mut h = DefaultHasher::new();
    match std::fs::read_dir(path) {
        Ok(dir) => {
            let mut names: Vec<PathBuf> = dir.filter_map(|e| e.ok().map(|e| e.path())).collect();
            names.sort();
            for name in names {
                name.hash(&mut h);
                content(&name, &mut h);
            }
        }
        Err(_) => content(path, &mut h),
    }
    h.finish()
}

fn content(path: &Path, h: &mut DefaultHasher) {
    match std::fs::read(path) {
        Ok(bytes) => bytes.hash(h),
        Err(e) => format!("{:?}", e.kind()).hash(h),
    }
}
