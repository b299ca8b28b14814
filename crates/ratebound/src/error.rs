//! The one error type: misuse, never a denial.

use std::fmt;
use std::time::Duration;

/// What went wrong when a limiter was built or called incorrectly.
///
/// A refused request is *not* an error: it is a [`Decision`](crate::Decision)
/// whose [`is_allowed`](crate::Decision::is_allowed) is false. Errors are for
/// input that can never succeed. Every variant has a stable [`code`](Error::code)
/// that the Python and Node bindings expose unchanged, and a lowercase message
/// that names the offending value.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The rate is zero, negative, NaN or infinite.
    InvalidRate {
        /// The rate as the caller gave it.
        value: String,
    },
    /// The rate is so high that one token would take less than 1 ns.
    RateTooHigh {
        /// The rate as the caller gave it.
        value: String,
    },
    /// One token would take longer than the supported maximum, or
    /// `burst × period` would exceed it (2^60 ns, about 36 years).
    PeriodTooLong {
        /// The offending span in nanoseconds (saturated at `u128::MAX`).
        nanos: u128,
    },
    /// The burst is zero.
    InvalidBurst {
        /// The burst as given.
        burst: u64,
    },
    /// A string did not parse (a quota, a CIDR network, a policy name).
    Parse {
        /// The whole input.
        input: String,
        /// What was wrong with it.
        reason: &'static str,
    },
    /// More tokens were requested at once than the bucket can ever hold.
    InsufficientCapacity {
        /// Tokens requested.
        requested: u64,
        /// The bucket's burst (capacity).
        burst: u64,
    },
    /// A window limiter's limit is zero or larger than its state can count.
    InvalidLimit {
        /// The limit as given.
        limit: u64,
        /// The largest limit this algorithm and window accept.
        max: u64,
    },
    /// A window is zero, longer than 2^60 ns, or too short for its limit
    /// (the window index and the counts share one 64-bit word).
    InvalidWindow {
        /// The window in nanoseconds (saturated at `u128::MAX`).
        nanos: u128,
        /// What is wrong with it.
        reason: String,
    },
    /// A composite limiter was given no members.
    NoLimiters,
    /// A keyed limiter at its `max_keys` cap, with the `RejectNewKeys`
    /// policy, was asked about a key it does not track. Nothing changed.
    TooManyKeys {
        /// The cap.
        max_keys: usize,
    },
    /// A keyed limiter's tier does not exist, or its tiers do not fit
    /// together (another algorithm, another window, more than four).
    InvalidTier {
        /// The tier asked for (or the number of tiers given).
        tier: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// Waiting for the tokens would take longer than the caller allows.
    /// Nothing was taken.
    DeadlineExceeded {
        /// How long the caller would have had to wait.
        wait: Duration,
        /// The longest wait the caller accepted.
        max_wait: Duration,
    },
    /// A number given by name (from a binding's options, a seconds value) is
    /// not usable: NaN, infinite, negative, not a whole number where one is
    /// needed, or out of range.
    InvalidNumber {
        /// The parameter's name, e.g. `"window"`.
        name: &'static str,
        /// The value as given.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The algorithm cannot do what was asked (e.g. reserve tokens ahead of
    /// time in a fixed window).
    Unsupported {
        /// What was asked.
        operation: &'static str,
        /// The algorithm asked.
        algorithm: &'static str,
    },
    /// A permit given back to a limiter (or for a key) that did not issue
    /// it: nothing is given back.
    ForeignPermit,
    /// A value that is required was not given (Python's `None`, JavaScript's
    /// `undefined` or `null`).
    Missing {
        /// The value's name.
        name: &'static str,
    },
    /// A middleware option with a value it cannot take (an unknown name, a
    /// header name that is not a token, an option that needs another one).
    InvalidOption {
        /// The option, as the caller spelt it.
        name: &'static str,
        /// The value given.
        value: String,
        /// What it must be.
        reason: &'static str,
    },
    /// A remote store (Redis) could not decide, and its fail policy
    /// refused — or the call never left this client (its pool or queue was
    /// full until the deadline). Nothing was taken.
    StoreUnavailable {
        /// What happened, as one clause (e.g. `"redis unreachable
        /// (connection refused): the fail policy 'closed' refused"`).
        cause: String,
        /// When asking again makes sense.
        retry_after: Duration,
    },
    /// A remote store refused this client's configuration (a wrong
    /// password or user, a permission, a database that does not exist, TLS
    /// to a server without it, a Unix socket that is not there, a host
    /// name that does not resolve): an error at once, never the fail
    /// policy's to answer. Passwords are never part of `cause`.
    StoreMisconfigured {
        /// The store's own words (or the client's), without secrets.
        cause: String,
    },
}

/// What kind of mistake an [`Error`] is, for the bindings to pick their
/// language's error class by — never by the message's text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A value of the wrong kind, or none where one is required (a quota
    /// string that does not parse, an unknown option, an operation the
    /// algorithm does not have): Python `TypeError`-like, JavaScript
    /// `TypeError`.
    Type,
    /// A value of the right kind out of range (a rate of 0, a burst the
    /// request can never fit): Python `ValueError`-like, JavaScript
    /// `RangeError`.
    Range,
    /// A refusal of state, not of input (a keyed limiter at its key cap).
    State,
}

impl Error {
    /// The kind of mistake (see [`ErrorKind`]).
    ///
    /// # Examples
    /// ```
    /// use ratebound::{ErrorKind, Quota};
    /// assert_eq!(Quota::per_second(0).unwrap_err().kind(), ErrorKind::Range);
    /// assert_eq!(Quota::parse("ten per second").unwrap_err().kind(), ErrorKind::Type);
    /// ```
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Parse { .. }
            | Error::Unsupported { .. }
            | Error::NoLimiters
            | Error::InvalidOption { .. }
            | Error::Missing { .. }
            | Error::ForeignPermit => ErrorKind::Type,
            Error::StoreMisconfigured { .. } => ErrorKind::Type,
            Error::TooManyKeys { .. } | Error::StoreUnavailable { .. } => ErrorKind::State,
            _ => ErrorKind::Range,
        }
    }

    /// A stable, machine-readable identifier for the kind of error,
    /// identical in Rust, Python and Node.
    ///
    /// # Examples
    /// ```
    /// let err = ratebound::Quota::per_second(0).unwrap_err();
    /// assert_eq!(err.code(), "invalid_rate");
    /// ```
    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidRate { .. } => "invalid_rate",
            Error::RateTooHigh { .. } => "rate_too_high",
            Error::PeriodTooLong { .. } => "period_too_long",
            Error::InvalidBurst { .. } => "invalid_burst",
            Error::Parse { .. } => "parse_error",
            Error::InsufficientCapacity { .. } => "insufficient_capacity",
            Error::DeadlineExceeded { .. } => "deadline_exceeded",
            Error::InvalidLimit { .. } => "invalid_limit",
            Error::InvalidWindow { .. } => "invalid_window",
            Error::NoLimiters => "no_limiters",
            Error::TooManyKeys { .. } => "too_many_keys",
            Error::InvalidTier { .. } => "invalid_tier",
            Error::InvalidNumber { .. } => "invalid_number",
            Error::Unsupported { .. } => "unsupported",
            Error::InvalidOption { .. } => "invalid_option",
            Error::Missing { .. } => "missing",
            Error::ForeignPermit => "foreign_permit",
            Error::StoreUnavailable { .. } => "store_unavailable",
            Error::StoreMisconfigured { .. } => "store_misconfigured",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidRate { value } => {
                write!(f, "invalid rate {value}: must be a positive, finite number")
            }
            Error::RateTooHigh { value } => write!(
                f,
                "rate {value} is too high: one token would take less than 1 ns"
            ),
            // u128::MAX stands for a span beyond u128 (a rate like 5e-324
            // per second): say so rather than print the placeholder.
            Error::PeriodTooLong { nanos: u128::MAX } => write!(
                f,
                "period of more than 2^128 ns is too long: the maximum is 2^60 ns (about 36 years)"
            ),
            Error::PeriodTooLong { nanos } => write!(
                f,
                "period of {nanos} ns is too long: the maximum is 2^60 ns (about 36 years)"
            ),
            Error::InvalidBurst { burst } => {
                write!(f, "invalid burst {burst}: must be at least 1")
            }
            Error::Parse { input, reason } => {
                write!(f, "cannot parse {input:?}: {reason}")
            }
            Error::InsufficientCapacity { requested, burst } => write!(
                f,
                "requested {requested} tokens but the burst is {burst}: the request can never succeed"
            ),
            Error::InvalidLimit { limit, max } => {
                write!(f, "invalid limit {limit}: must be between 1 and {max}")
            }
            Error::InvalidWindow { nanos, reason } => {
                write!(f, "invalid window of {nanos} ns: {reason}")
            }
            Error::NoLimiters => write!(f, "a composite limiter needs at least one member"),
            Error::TooManyKeys { max_keys } => write!(
                f,
                "the limiter already tracks its maximum of {max_keys} keys and refuses new ones"
            ),
            Error::InvalidTier { tier, reason } => write!(f, "invalid tier {tier}: {reason}"),
            Error::DeadlineExceeded { wait, max_wait } => write!(
                f,
                "waiting {wait:?} for tokens exceeds the maximum wait of {max_wait:?}"
            ),
            Error::InvalidNumber {
                name,
                value,
                reason,
            } => write!(f, "invalid {name} {value}: {reason}"),
            Error::InvalidOption {
                name,
                value,
                reason,
            } => write!(f, "invalid {name} {value:?}: {reason}"),
            Error::Missing { name } => write!(f, "missing {name}: a value is required"),
            Error::ForeignPermit => write!(
                f,
                "the permit was issued by another limiter or for another key: nothing was given back"
            ),
            Error::Unsupported {
                operation,
                algorithm,
            } => write!(f, "{algorithm} does not support {operation}"),
            Error::StoreUnavailable { cause, retry_after } => {
                write!(f, "{cause}; nothing was taken, retry in {retry_after:?}")
            }
            Error::StoreMisconfigured { cause } => write!(
                f,
                "the store refused this client's configuration: {cause} (an error, not the fail policy's to answer)"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// A number as an error message shows it: plain decimals for ordinary
/// values, scientific notation for huge or tiny ones (`1e300`, not 301
/// digits).
pub(crate) fn show(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude != 0.0 && !(1e-4..1e16).contains(&magnitude) {
        format!("{value:e}")
    } else {
        value.to_string()
    }
}

/// `InsufficientCapacity` when `n` exceeds `limit`.
pub(crate) fn capacity(n: u64, limit: u64) -> Result<(), Error> {
    if n > limit {
        Err(Error::InsufficientCapacity {
            requested: n,
            burst: limit,
        })
    } else {
        Ok(())
    }
}
