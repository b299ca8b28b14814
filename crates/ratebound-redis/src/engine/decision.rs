//! A global limit's answer: [`RedisDecision`], and the path that produced it
//! ([`Source`]).

use std::time::Duration;

/// Which path answered a [`RedisDecision`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// Redis decided.
    Redis,
    /// Tokens leased earlier from Redis, spent locally.
    Lease,
    /// Redis failed; the fail policy admitted.
    FailOpen,
    /// Redis failed; the fail policy refused.
    FailClosed,
    /// Redis failed; the local share of the limit decided.
    Local,
    /// Redis decided, but the key held a value the script did not write
    /// (another type, a value that is not the algorithm's state): the key
    /// was rebuilt as spent — a bucket empty, a window full, from now —
    /// and the request refused. That key is refused until it refills (at
    /// most one burst period or window); no other key, and not the
    /// circuit breaker, is affected.
    Damaged,
    /// The call never left this client before its deadline: its own
    /// connection pool or queue was full (back-pressure, not an outage).
    /// Refused, with the call's deadline as the wait; not the fail policy's
    /// answer, and not a failure for the circuit breaker.
    Busy,
}

impl Source {
    /// `"redis"`, `"lease"`, `"fail_open"`, `"fail_closed"`, `"local"`,
    /// `"damaged"` or `"busy"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Redis => "redis",
            Source::Lease => "lease",
            Source::FailOpen => "fail_open",
            Source::FailClosed => "fail_closed",
            Source::Local => "local",
            Source::Damaged => "damaged",
            Source::Busy => "busy",
        }
    }
}

/// A global limit's answer: the core's [`ratebound::Decision`] and the
/// path that produced it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedisDecision {
    pub(crate) inner: ratebound::Decision,
    pub(crate) source: Source,
}

impl RedisDecision {
    /// Which path answered.
    pub fn source(&self) -> Source {
        self.source
    }

    /// The decision itself.
    pub fn decision(&self) -> ratebound::Decision {
        self.inner
    }

    /// Whether the request may go on.
    pub fn is_allowed(&self) -> bool {
        self.inner.is_allowed()
    }

    /// The limit (burst, or requests per window).
    pub fn limit(&self) -> u64 {
        self.inner.limit()
    }

    /// Whole tokens left (for a leased answer: this instance's lease).
    pub fn remaining(&self) -> u64 {
        self.inner.remaining()
    }

    /// How long until the request could succeed (zero when allowed).
    pub fn retry_after(&self) -> Duration {
        self.inner.retry_after()
    }

    /// How long until the key's state is fresh again.
    pub fn reset_after(&self) -> Duration {
        self.inner.reset_after()
    }
}
