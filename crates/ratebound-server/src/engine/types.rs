//! The engine's public types: its bounds, its errors, its options.

use std::sync::Arc;

use crate::backend::Backend;
use crate::model::Place;
use crate::store::UnixClock;

/// The most descriptors one request may carry.
pub const MAX_DESCRIPTORS: usize = 256;
/// The most entries one descriptor may carry.
pub const MAX_ENTRIES: usize = 64;
/// The longest key or value of an entry, and the longest domain, in bytes.
pub const MAX_TEXT: usize = 4096;

/// A request the engine refuses to decide: too large, or malformed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestError {
    /// A part of the request is larger than the engine takes.
    TooLarge {
        /// What (`"descriptors"`, `"entries"`, `"value"`, ...).
        what: &'static str,
        /// Its size.
        size: u64,
        /// The most taken.
        max: u64,
    },
    /// A field is missing or out of range.
    Invalid {
        /// What is wrong, naming the field and the value.
        reason: String,
    },
    /// The limits' store could not decide (a full shared-memory table, a
    /// Redis that refuses this client, a fail policy `closed` that
    /// refused): the request is not answered OK, and the error is counted.
    Unavailable {
        /// The store's reason.
        reason: String,
    },
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::TooLarge { what, size, max } => {
                write!(f, "{what}: {size} is more than the {max} taken")
            }
            RequestError::Invalid { reason } | RequestError::Unavailable { reason } => {
                f.write_str(reason)
            }
        }
    }
}

impl std::error::Error for RequestError {}

/// A rule the engine cannot decide by, found when it takes the rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleError {
    /// Where the limit was written.
    pub place: Place,
    /// The core's reason.
    pub reason: String,
}

impl std::fmt::Display for RuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = &self.place;
        write!(
            f,
            "{}:{}:{}: {}",
            p.file.display(),
            p.line,
            p.column,
            self.reason
        )
    }
}

impl std::error::Error for RuleError {}

/// How the engine keeps its state.
#[derive(Clone, Debug)]
pub struct Options {
    /// The clock: Unix time in ns (default: [`UnixClock`]).
    pub clock: ratebound::any::AnyClock,
    /// The most keys each distinct limit tracks (the least recently used
    /// forgotten beyond; default 1 000 000). In shared memory, each
    /// limit's file has room for this many.
    pub max_keys: usize,
    /// Where the limits' state lives (default: in this process).
    pub backend: Backend,
    /// Whether answers carry `RateLimit`, `RateLimit-Policy` and
    /// `Retry-After` for the gateway to add (`response_headers_to_add`;
    /// default on — the reference server's `LIMIT_RESPONSE_HEADERS_ENABLED`).
    pub response_headers: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            clock: ratebound::any::AnyClock::Shared(Arc::new(UnixClock::new())),
            max_keys: 1_000_000,
            backend: Backend::Local,
            response_headers: true,
        }
    }
}
