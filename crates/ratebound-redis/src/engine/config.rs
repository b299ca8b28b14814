//! How a global limiter is set up: [`Config`], its one parser of loosely
//! typed options for the bindings, and the fail policy [`OnError`].

use std::time::Duration;

use ratebound::Error;
use ratebound::any;
use ratebound::gate::Loose;

use crate::algorithm::Algorithm;

/// What answers while Redis is down, slow or erroring.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OnError {
    /// Admit (availability over the limit).
    Open,
    /// Refuse, with `Retry-After` = the breaker's cool-down.
    Closed,
    /// A local token bucket per key, at this many tokens per second — a
    /// share of the global rate (e.g. rate / number of instances); its burst
    /// is the global burst scaled by the same share, at least 1. At most
    /// [`ratebound::gate::DEFAULT_MAX_KEYS`] keys, the least recent forgotten:
    /// an in-process table, capped as every other.
    Local(f64),
}

impl OnError {
    /// By name: `"open"`, `"closed"`, or `"local"` with `local_rate`.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for another name, or `"local"` without a
    /// positive `local_rate`.
    pub fn parse(name: &str, local_rate: Option<f64>) -> Result<OnError, Error> {
        match (name, local_rate) {
            ("open", _) => Ok(OnError::Open),
            ("closed", _) => Ok(OnError::Closed),
            ("local", Some(r)) if r.is_finite() && r > 0.0 => Ok(OnError::Local(r)),
            ("local", _) => Err(Error::InvalidOption {
                name: "local_rate",
                value: format!("{local_rate:?}"),
                reason: "on_error \"local\" needs a positive local_rate (tokens per second)",
            }),
            (other, _) => Err(Error::InvalidOption {
                name: "on_error",
                value: other.to_string(),
                reason: "is \"open\", \"closed\" or \"local\"",
            }),
        }
    }
}

/// How a global limiter is set up.
#[derive(Clone, Debug)]
pub struct Config {
    /// What it counts.
    pub algorithm: Algorithm,
    /// Prepended to every key (default `"rb:"`); see [`Engine::redis_key`](crate::Engine::redis_key).
    pub prefix: String,
    /// What answers when Redis cannot (default [`OnError::Open`]).
    pub on_error: OnError,
    /// Every call's deadline (default 50 ms).
    pub timeout: Duration,
    /// Tokens taken per round trip and spent locally (0: no leasing).
    pub lease: u64,
    /// How long leased tokens may be spent before they lapse (default 1 s).
    pub lease_ttl: Duration,
    /// Consecutive failures that open the circuit breaker (default 3).
    pub breaker_threshold: u32,
    /// How long an open breaker answers with the fail policy before it
    /// lets one probe through (default 1 s); also a fail-closed refusal's
    /// `retry_after`.
    pub breaker_cooldown: Duration,
    /// Whether calls in flight together are batched (default `true`):
    /// several checks in flight on one connection go out as one script run
    /// over many keys ([`BatchCall`](crate::BatchCall)); decisions are
    /// identical; `false` sends one call per check. A check with nothing
    /// else in flight always goes alone.
    pub batch: bool,
}

impl Config {
    /// Defaults for `algorithm`.
    pub fn new(algorithm: Algorithm) -> Config {
        Config {
            algorithm,
            prefix: "rb:".to_string(),
            on_error: OnError::Open,
            timeout: Duration::from_millis(50),
            lease: 0,
            lease_ttl: Duration::from_secs(1),
            breaker_threshold: 3,
            breaker_cooldown: Duration::from_secs(1),
            batch: true,
        }
    }
}

/// The options [`Config::from_options`] knows, in Python's and JavaScript's
/// spelling.
const OPTIONS: [(&str, &str); 9] = [
    ("prefix", "prefix"),
    ("on_error", "onError"),
    ("local_rate", "localRate"),
    ("timeout", "timeout"),
    ("lease", "lease"),
    ("lease_ttl", "leaseTtl"),
    ("breaker_threshold", "breakerThreshold"),
    ("breaker_cooldown", "breakerCooldown"),
    ("batch", "batch"),
];

/// The longest deadline: what one host timer holds (2^31 − 1 ms, Node's
/// `setTimeout`), so that every driver can enforce it.
const MAX_TIMEOUT_MS: u64 = (1 << 31) - 1;

impl Config {
    /// A configuration from loosely typed options (`snake_case` or
    /// `camelCase`), the one parser of the Python and Node drivers; options
    /// not given keep [`Config::new`]'s defaults.
    ///
    /// | option | value |
    /// |---|---|
    /// | `prefix` | a string |
    /// | `on_error` | `"open"`, `"closed"`, `"local"` (with `local_rate`, tokens/s) |
    /// | `timeout` | seconds, above 0 and at most 2 147 483 (a host timer's longest) |
    /// | `lease` | a whole number ≥ 0 |
    /// | `lease_ttl` | seconds, above 0 |
    /// | `breaker_threshold` | a whole number, 1 to 2^32 − 1 |
    /// | `breaker_cooldown` | seconds |
    /// | `batch` | a boolean (default `true`; see [`Config::batch`]) |
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for an unknown option or a value of the
    /// wrong kind; [`Error::InvalidNumber`] naming an out-of-range number;
    /// [`OnError::parse`]'s errors.
    ///
    /// # Examples
    /// ```
    /// use ratebound::{KeyedAlgorithm, Quota, gate::Loose};
    /// use ratebound_redis::Config;
    /// let a = KeyedAlgorithm::TokenBucket(Quota::parse("10/s burst 20")?);
    /// let c = Config::from_options(a, &[("leaseTtl", Loose::Number(0.5)), ("lease", Loose::Number(10.0))])?;
    /// assert_eq!((c.lease, c.lease_ttl.as_millis()), (10, 500));
    /// let err = Config::from_options(a, &[("timeout", Loose::Number(0.0))]).unwrap_err();
    /// assert_eq!(err.to_string(), "invalid timeout 0: must be above 0 and at most 2147483 seconds");
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    pub fn from_options(
        algorithm: Algorithm,
        options: &[(&str, Loose<'_>)],
    ) -> Result<Config, Error> {
        let mut c = Config::new(algorithm);
        let (mut on_error, mut local_rate) = (None, None);
        for &(name, value) in options {
            let (snake, spelt) =
                ratebound::gate::option_name(&OPTIONS, name, "is not a Redis limiter option")?;
            let wrong_type = |reason| Error::InvalidOption {
                name: spelt,
                value: format!("{value:?}"),
                reason,
            };
            let number = || match value {
                Loose::Number(n) => Ok(n),
                _ => Err(wrong_type("must be a number")),
            };
            let text = || match value {
                Loose::Text(t) => Ok(t),
                _ => Err(wrong_type("must be a string")),
            };
            let out_of_range = |reason| Error::InvalidNumber {
                name: spelt,
                value: format!("{}", number().unwrap_or(f64::NAN)),
                reason,
            };
            match snake {
                "prefix" => c.prefix = text()?.to_string(),
                "on_error" => on_error = Some(text()?),
                "local_rate" => local_rate = Some(number()?),
                "timeout" => {
                    let t = any::seconds(spelt, number()?)?;
                    if t < Duration::from_micros(1) || t > Duration::from_millis(MAX_TIMEOUT_MS) {
                        return Err(out_of_range("must be above 0 and at most 2147483 seconds"));
                    }
                    c.timeout = t;
                }
                "lease" => c.lease = any::whole(spelt, number()?, 0)?,
                "lease_ttl" => {
                    c.lease_ttl = any::seconds(spelt, number()?)?;
                    if c.lease_ttl.is_zero() {
                        return Err(out_of_range("must be above 0 seconds"));
                    }
                }
                "batch" => match value {
                    Loose::Bool(b) => c.batch = b,
                    _ => return Err(wrong_type("must be a boolean")),
                },
                "breaker_threshold" => {
                    let t = any::whole(spelt, number()?, 1)?;
                    c.breaker_threshold =
                        u32::try_from(t).map_err(|_| out_of_range("must be at most 2^32 - 1"))?;
                }
                _ => c.breaker_cooldown = any::seconds(spelt, number()?)?,
            }
        }
        c.on_error = OnError::parse(on_error.unwrap_or("open"), local_rate)?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ratebound::Quota;

    use super::*;

    #[test]
    fn loose_options_are_parsed_once_for_every_binding() {
        use ratebound::gate::Loose;
        let a = Algorithm::TokenBucket(Quota::parse("10/s burst 20").unwrap());
        let c = Config::from_options(
            a,
            &[
                ("onError", Loose::Text("local")),
                ("local_rate", Loose::Number(2.0)),
                ("prefix", Loose::Text("x:")),
                ("breakerThreshold", Loose::Number(5.0)),
                ("breaker_cooldown", Loose::Number(0.25)),
                ("batch", Loose::Bool(false)),
            ],
        )
        .unwrap();
        assert!(!c.batch);
        assert!(Config::new(a).batch, "batching is on by default");
        assert_eq!(c.on_error, OnError::Local(2.0));
        assert_eq!((c.prefix.as_str(), c.breaker_threshold), ("x:", 5));
        assert_eq!(c.breaker_cooldown, Duration::from_millis(250));
        assert_eq!(
            c.timeout,
            Duration::from_millis(50),
            "defaults are Config::new's"
        );
        for (name, value, code, text) in [
            (
                "timeout",
                Loose::Number(3e6),
                "invalid_number",
                "invalid timeout 3000000",
            ),
            (
                "leaseTtl",
                Loose::Number(0.0),
                "invalid_number",
                "invalid leaseTtl 0",
            ),
            ("lease", Loose::Number(1.5), "invalid_number", "lease 1.5"),
            (
                "breaker_threshold",
                Loose::Number(5e9),
                "invalid_number",
                "at most 2^32 - 1",
            ),
            (
                "timeout",
                Loose::Text("soon"),
                "invalid_option",
                "must be a number",
            ),
            (
                "prefix",
                Loose::Number(1.0),
                "invalid_option",
                "must be a string",
            ),
            ("colour", Loose::Text("red"), "invalid_option", "colour"),
            ("batch", Loose::Number(1.0), "invalid_option", "Number(1.0)"),
            (
                "batch",
                Loose::Text("yes"),
                "invalid_option",
                "must be a boolean",
            ),
            (
                "on_error",
                Loose::Text("local"),
                "invalid_option",
                "local_rate",
            ),
        ] {
            let err = Config::from_options(a, &[(name, value)]).unwrap_err();
            assert_eq!(err.code(), code, "{name}: {err}");
            assert!(err.to_string().contains(text), "{name}: {err}");
        }
    }
}
