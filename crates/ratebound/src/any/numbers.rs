//! Numbers as a dynamic language passes them (a float): [`seconds`],
//! [`whole`], a [`Rate`] as a number or a quota string, checked once here and
//! named in the error, so every binding refuses the same values alike.

use std::time::Duration;

use crate::error::show;
use crate::{Error, MAX_SPAN_NANOS, Quota};

/// The longest pause a limiter takes: a day. A longer one is refused, not
/// cut — a Redis key paused for `1e9` s would outlive the service by 31
/// years.
pub const MAX_PAUSE: Duration = Duration::from_secs(86_400);

/// A pause of `value` seconds, as a dynamic language passes them: 0 (a
/// pause that changes nothing) up to [`MAX_PAUSE`].
///
/// # Errors
/// [`Error::InvalidNumber`] naming `seconds` and the value for NaN, an
/// infinity, a negative value or more than a day.
///
/// # Examples
/// ```
/// use ratebound::any::pause_seconds;
/// assert_eq!(pause_seconds(0.0)?.as_nanos(), 0);
/// assert_eq!(pause_seconds(1e9).unwrap_err().to_string(),
///            "invalid seconds 1000000000: a pause is at most 86400 s (a day)");
/// # Ok::<(), ratebound::Error>(())
/// ```
pub fn pause_seconds(value: f64) -> Result<Duration, Error> {
    let d = seconds("seconds", value)?;
    check_pause(d)?;
    Ok(d)
}

/// [`Error::InvalidNumber`] for a pause longer than [`MAX_PAUSE`].
///
/// # Errors
/// As said.
pub fn check_pause(d: Duration) -> Result<(), Error> {
    if d > MAX_PAUSE {
        return Err(Error::InvalidNumber {
            name: "seconds",
            value: show(d.as_secs_f64()),
            reason: "a pause is at most 86400 s (a day)",
        });
    }
    Ok(())
}

/// `value` seconds as a [`Duration`] (rounded to the nearest nanosecond).
///
/// # Errors
/// [`Error::InvalidNumber`] naming `name` for NaN, an infinity, a negative
/// value or more than 2^60 ns (about 36 years).
///
/// # Examples
/// ```
/// use ratebound::any::seconds;
/// assert_eq!(seconds("window", 0.25)?.as_nanos(), 250_000_000);
/// assert_eq!(seconds("window", -1.0).unwrap_err().to_string(),
///            "invalid window -1: must be a finite number of seconds, at least 0");
/// # Ok::<(), ratebound::Error>(())
/// ```
pub fn seconds(name: &'static str, value: f64) -> Result<Duration, Error> {
    if !value.is_finite() || value < 0.0 {
        return Err(Error::InvalidNumber {
            name,
            value: show(value),
            reason: "must be a finite number of seconds, at least 0",
        });
    }
    let nanos = (value * 1e9).round();
    if nanos > MAX_SPAN_NANOS as f64 {
        return Err(Error::InvalidNumber {
            name,
            value: show(value),
            reason: "must be at most 2^60 ns (about 36 years)",
        });
    }
    // In range and whole: the conversion is exact.
    Ok(Duration::from_nanos(nanos as u64))
}

/// 2^53: the bound of every whole number a dynamic language passes as a
/// double (counts, limits, bursts, integer keys). Every integer up to it is
/// exact in a double; above it, not every one is.
pub(crate) const MAX_EXACT: f64 = 9_007_199_254_740_992.0;

/// `value` as a whole number of at least `min` and at most 2^53 (the largest
/// integer a double holds exactly).
///
/// # Errors
/// [`Error::InvalidNumber`] naming `name` for NaN, an infinity, a fraction
/// or a value out of range.
pub fn whole(name: &'static str, value: f64, min: u64) -> Result<u64, Error> {
    let reason = if !value.is_finite() {
        "must be a finite whole number"
    } else if value.fract() != 0.0 {
        "must be a whole number"
    } else if value < min as f64 {
        if min == 0 {
            "must not be negative"
        } else {
            "must be at least 1"
        }
    } else if value > MAX_EXACT {
        "must be at most 2^53"
    } else {
        return Ok(value as u64);
    };
    Err(Error::InvalidNumber {
        name,
        value: show(value),
        reason,
    })
}

/// The tokens a call takes when it names none: `check()`, `acquire()`,
/// `reserve()` and their keyed and global twins in every binding.
pub const DEFAULT_N: u64 = 1;

/// A count of tokens `n` as a dynamic language passes it: `None` (not
/// given) is [`DEFAULT_N`]; otherwise a whole number from 0 (a query: admitted,
/// nothing taken) to 2^53.
///
/// # Errors
/// [`Error::InvalidNumber`] naming `n`, as [`whole`].
///
/// # Examples
/// ```
/// use ratebound::any::{DEFAULT_N, count};
/// assert_eq!(count(None)?, DEFAULT_N);
/// assert_eq!(count(Some(0.0))?, 0);
/// assert_eq!(count(Some(1.5)).unwrap_err().to_string(),
///            "invalid n 1.5: must be a whole number");
/// # Ok::<(), ratebound::Error>(())
/// ```
pub fn count(n: Option<f64>) -> Result<u64, Error> {
    match n {
        None => Ok(DEFAULT_N),
        Some(n) => whole("n", n, 0),
    }
}

/// A rate as a dynamic language gives it.
#[derive(Clone, Copy, Debug)]
pub enum Rate<'a> {
    /// Tokens per second.
    PerSecond(f64),
    /// A quota string for [`Quota::parse`], e.g. `"100/minute"` or
    /// `"10/s burst 20"`.
    Text(&'a str),
}

/// The quota for `rate`, with `burst` (a whole number ≥ 1) replacing the
/// rate's own burst when given.
///
/// # Errors
/// The [`Quota`] constructors' errors; [`Error::InvalidNumber`] for a burst
/// that is not a whole number ≥ 1.
pub fn quota(rate: Rate<'_>, burst: Option<f64>) -> Result<Quota, Error> {
    let q = match rate {
        Rate::PerSecond(r) => Quota::per_second(r)?,
        Rate::Text(t) => Quota::parse(t)?,
    };
    match burst {
        Some(b) => q.with_burst(whole("burst", b, 1)?),
        None => Ok(q),
    }
}

pub(super) fn window_args(limit: f64, window: f64) -> Result<(u64, Duration), Error> {
    Ok((whole("limit", limit, 1)?, seconds("window", window)?))
}

/// The IPv6 prefix keys are grouped by when none is given: a /64 is what
/// one subscriber gets.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;

/// An IPv6 prefix length for option `name`: a whole number ≥ 0; above 128
/// counts as 128 (the whole address).
///
/// # Errors
/// [`Error::InvalidNumber`] naming `name` for a negative, fractional or
/// non-finite value.
///
/// # Examples
/// ```
/// assert_eq!(ratebound::any::ipv6_prefix("ipv6_prefix", 200.0)?, 128);
/// assert!(ratebound::any::ipv6_prefix("ipv6_prefix", 1.5).is_err());
/// # Ok::<(), ratebound::Error>(())
/// ```
pub fn ipv6_prefix(name: &'static str, bits: f64) -> Result<u8, Error> {
    Ok(whole(name, bits, 0)?.min(128) as u8)
}
