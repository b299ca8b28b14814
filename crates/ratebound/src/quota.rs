//! Quotas: how fast tokens come back (the emission interval T) and how many
//! can be spent at once (the burst b).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::Error;

/// The longest span a quota may describe: one token's period, and
/// `burst × period`, must each stay at or under 2^60 ns (about 36.5 years).
pub const MAX_SPAN_NANOS: u64 = 1 << 60;

const NANOS_PER_SECOND: u128 = 1_000_000_000;

/// A rate limit: one token every [`emission_interval`](Quota::emission_interval)
/// (`T`), at most [`burst`](Quota::burst) (`b`) tokens at once.
///
/// A quota is exact integer nanoseconds. When a rate does not divide a second
/// evenly (3/s), `T` is rounded **up** to the next nanosecond, so a limiter
/// never admits more than the stated rate; the error is under 1 ns per token.
///
/// Rates may be fractional (`Quota::per_second(0.5)` is one token every two
/// seconds). Unless [`with_burst`](Quota::with_burst) says otherwise, the burst
/// is the whole number of tokens in one period of the rate's unit (at least 1):
/// `per_minute(100)` allows 100 at once, then one every 600 ms.
///
/// # Examples
/// ```
/// use ratebound::Quota;
/// use std::time::Duration;
///
/// let q = Quota::per_second(10)?.with_burst(20)?;
/// assert_eq!(q.emission_interval(), Duration::from_millis(100));
/// assert_eq!(q.burst(), 20);
/// assert_eq!(Quota::parse("10/s burst 20")?, q);
/// assert_eq!(Quota::parse("2/500ms")?.emission_interval(), Duration::from_millis(250));
/// # Ok::<(), ratebound::Error>(())
/// ```
///
/// # Errors
/// Constructors return [`Error::InvalidRate`] for a zero, negative, NaN or
/// infinite rate, [`Error::RateTooHigh`] when one token would take under 1 ns,
/// [`Error::PeriodTooLong`] past [`MAX_SPAN_NANOS`], [`Error::InvalidBurst`]
/// for a burst of 0 and [`Error::Parse`] for a string that does not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quota {
    period: u64,
    burst: u64,
}

impl Quota {
    /// `rate` tokens per second, burst `max(1, ⌊rate⌋)`.
    ///
    /// # Errors
    /// See [`Quota`].
    pub fn per_second(rate: impl Into<f64>) -> Result<Quota, Error> {
        Self::per_unit(rate.into(), NANOS_PER_SECOND)
    }

    /// `rate` tokens per minute, burst `max(1, ⌊rate⌋)`.
    ///
    /// # Errors
    /// See [`Quota`].
    pub fn per_minute(rate: impl Into<f64>) -> Result<Quota, Error> {
        Self::per_unit(rate.into(), 60 * NANOS_PER_SECOND)
    }

    /// `rate` tokens per hour, burst `max(1, ⌊rate⌋)`.
    ///
    /// # Errors
    /// See [`Quota`].
    pub fn per_hour(rate: impl Into<f64>) -> Result<Quota, Error> {
        Self::per_unit(rate.into(), 3600 * NANOS_PER_SECOND)
    }

    /// One token every `period`, burst 1.
    ///
    /// # Errors
    /// [`Error::RateTooHigh`] for a zero period, [`Error::PeriodTooLong`]
    /// past [`MAX_SPAN_NANOS`].
    pub fn with_period(period: Duration) -> Result<Quota, Error> {
        let nanos = period.as_nanos();
        if nanos == 0 {
            return Err(Error::RateTooHigh {
                value: format!("1 per {period:?}"),
            });
        }
        Self::from_parts(nanos, 1)
    }

    /// The same rate with a burst of `burst` tokens.
    ///
    /// # Errors
    /// [`Error::InvalidBurst`] for 0, [`Error::PeriodTooLong`] when
    /// `burst × period` exceeds [`MAX_SPAN_NANOS`].
    pub fn with_burst(self, burst: u64) -> Result<Quota, Error> {
        Self::from_parts(u128::from(self.period), burst)
    }

    /// Parses a quota such as `"10/s"`, `"100/minute"`, `"5000/hour"`,
    /// `"2/500ms"`, `"1.5/s"`, `"10 per second"` or `"10/s burst 20"`.
    ///
    /// The count may be a decimal; the period is an optional decimal
    /// multiplier and a unit (`ns`, `us`, `ms`, `s`/`sec`/`second`,
    /// `m`/`min`/`minute`, `h`/`hr`/`hour`, `d`/`day`, plurals allowed).
    /// The count is exact decimal arithmetic: `"1.5/s"` is one token every
    /// 666666667 ns (⌈10⁹/1.5⌉), burst 1.
    ///
    /// # Errors
    /// [`Error::Parse`] naming the input and what is wrong with it; the rate
    /// and burst errors of [`Quota`] for values out of range.
    pub fn parse(input: &str) -> Result<Quota, Error> {
        parse_quota(input)
    }

    /// `T`: the time to earn back one token.
    pub fn emission_interval(&self) -> Duration {
        Duration::from_nanos(self.period)
    }

    /// `T` in nanoseconds.
    pub fn emission_interval_nanos(&self) -> u64 {
        self.period
    }

    /// `b`: the most tokens that can be taken at once.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// `τ = b·T`: the time to refill an empty bucket, in nanoseconds.
    pub fn tolerance_nanos(&self) -> u64 {
        // Cannot overflow: checked against MAX_SPAN_NANOS at construction.
        self.period * self.burst
    }

    /// Tokens per second, as a float (for display; decisions use `T`).
    pub fn rate_per_second(&self) -> f64 {
        1e9 / self.period as f64
    }

    /// Rebuilds a quota from parameters that were valid when stored.
    pub(crate) fn from_params(period: u64, burst: u64) -> Quota {
        Quota { period, burst }
    }

    fn per_unit(rate: f64, unit_nanos: u128) -> Result<Quota, Error> {
        let (num, den) = rational_from_f64(rate)?;
        from_ratio(num, den, 1, 1, unit_nanos, &rate.to_string())
    }

    fn from_parts(period: u128, burst: u64) -> Result<Quota, Error> {
        if burst == 0 {
            return Err(Error::InvalidBurst { burst });
        }
        let span = period.saturating_mul(u128::from(burst));
        if period > u128::from(MAX_SPAN_NANOS) || span > u128::from(MAX_SPAN_NANOS) {
            return Err(Error::PeriodTooLong { nanos: span });
        }
        // Both fit: period ≤ span ≤ 2^60.
        Ok(Quota {
            period: period as u64,
            burst,
        })
    }
}

/// `count_num/count_den` tokens per `mult_num/mult_den × unit_nanos` ns.
fn from_ratio(
    count_num: u128,
    count_den: u128,
    mult_num: u128,
    mult_den: u128,
    unit_nanos: u128,
    shown: &str,
) -> Result<Quota, Error> {
    if count_num == 0 {
        return Err(Error::InvalidRate {
            value: shown.to_string(),
        });
    }
    // T = (mult · unit · count_den) / (mult_den · count_num), rounded up.
    let too_long = Error::PeriodTooLong { nanos: u128::MAX };
    let top = mult_num
        .checked_mul(unit_nanos)
        .and_then(|v| v.checked_mul(count_den))
        .ok_or(too_long.clone())?;
    let bottom = mult_den.checked_mul(count_num).ok_or(Error::RateTooHigh {
        value: shown.to_string(),
    })?;
    if top < bottom {
        return Err(Error::RateTooHigh {
            value: shown.to_string(),
        });
    }
    let period = top.div_ceil(bottom);
    let burst = u64::try_from((count_num / count_den).max(1)).unwrap_or(u64::MAX);
    match Quota::from_parts(period, burst) {
        Err(Error::PeriodTooLong { .. }) if period <= u128::from(MAX_SPAN_NANOS) => {
            // The default burst is too large for the span; name the real culprit.
            Err(Error::PeriodTooLong {
                nanos: period.saturating_mul(u128::from(burst)),
            })
        }
        other => other,
    }
}

/// The exact decimal value of a positive finite float, as `num/den`.
fn rational_from_f64(x: f64) -> Result<(u128, u128), Error> {
    if !x.is_finite() || x <= 0.0 {
        return Err(Error::InvalidRate {
            value: x.to_string(),
        });
    }
    // Display gives the shortest decimal that round-trips: 0.1 is "0.1".
    match parse_decimal(&x.to_string()) {
        Some(r) => Ok(r),
        // More than 30 significant digits: far outside any usable range.
        None if x > 1.0 => Err(Error::RateTooHigh {
            value: x.to_string(),
        }),
        None => Err(Error::PeriodTooLong { nanos: u128::MAX }),
    }
}

/// Parses `digits[.digits]` into `num/den` with at most 30 digits in all.
fn parse_decimal(s: &str) -> Option<(u128, u128)> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let int = int.trim_start_matches('0');
    let frac = frac.trim_end_matches('0');
    if int.len() + frac.len() > 30 {
        return None;
    }
    let digits: String = [int, frac].concat();
    let num = if digits.is_empty() {
        0
    } else {
        digits.parse::<u128>().ok()?
    };
    Some((num, 10u128.pow(frac.len() as u32)))
}

fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" | "nanosecond" | "nanoseconds" => 1,
        "us" | "µs" | "microsecond" | "microseconds" => 1_000,
        "ms" | "millisecond" | "milliseconds" => 1_000_000,
        "s" | "sec" | "secs" | "second" | "seconds" => NANOS_PER_SECOND,
        "m" | "min" | "mins" | "minute" | "minutes" => 60 * NANOS_PER_SECOND,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600 * NANOS_PER_SECOND,
        "d" | "day" | "days" => 86_400 * NANOS_PER_SECOND,
        _ => return None,
    })
}

fn parse_quota(input: &str) -> Result<Quota, Error> {
    let fail = |reason: &'static str| Error::Parse {
        input: input.to_string(),
        reason,
    };
    let text = input.trim().to_lowercase();
    let (rate_part, burst) = match text.find("burst") {
        Some(i) => {
            let value = text[i + "burst".len()..]
                .trim_start()
                .trim_start_matches(['=', ':'])
                .trim();
            let burst = value
                .parse::<u64>()
                .map_err(|_| fail("the burst must be a whole number, e.g. \"burst 20\""))?;
            (text[..i].trim().trim_end_matches(',').trim(), Some(burst))
        }
        None => (text.as_str(), None),
    };
    let (count, per) = rate_part
        .split_once('/')
        .or_else(|| rate_part.split_once(" per "))
        .ok_or_else(|| fail("expected <count>/<period>, e.g. \"10/s\" or \"2/500ms\""))?;
    let count = count.trim();
    if count.starts_with('-') {
        return Err(Error::InvalidRate {
            value: count.to_string(),
        });
    }
    let (count_num, count_den) =
        parse_decimal(count).ok_or_else(|| fail("the count must be a decimal number"))?;
    let per = per.trim();
    let split = per
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| fail("the period needs a unit, e.g. \"s\", \"ms\" or \"minute\""))?;
    let (mult, unit) = (per[..split].trim(), per[split..].trim());
    let (mult_num, mult_den) = if mult.is_empty() {
        (1, 1)
    } else {
        parse_decimal(mult).ok_or_else(|| fail("the period must be a decimal number"))?
    };
    if mult_num == 0 {
        return Err(fail("the period must be longer than zero"));
    }
    let unit = unit_nanos(unit).ok_or_else(|| fail("unknown time unit"))?;
    let quota = from_ratio(count_num, count_den, mult_num, mult_den, unit, count)?;
    match burst {
        Some(b) => quota.with_burst(b),
        None => Ok(quota),
    }
}

impl FromStr for Quota {
    type Err = Error;
    fn from_str(s: &str) -> Result<Quota, Error> {
        parse_quota(s)
    }
}

/// Formats as `1/<T> burst <b>` with `T` in the largest exact unit, a string
/// that [`Quota::parse`] reads back to the same quota.
impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 6] = [
            (3_600_000_000_000, "h"),
            (60_000_000_000, "min"),
            (1_000_000_000, "s"),
            (1_000_000, "ms"),
            (1_000, "us"),
            (1, "ns"),
        ];
        let (size, name) = UNITS
            .iter()
            .copied()
            .find(|(size, _)| self.period.is_multiple_of(*size))
            .unwrap_or((1, "ns"));
        write!(f, "1/{}{} burst {}", self.period / size, name, self.burst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nanos(s: &str) -> u64 {
        Quota::parse(s).unwrap().emission_interval_nanos()
    }

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(nanos("10/s"), 100_000_000);
        assert_eq!(nanos("100/minute"), 600_000_000);
        assert_eq!(nanos("5000/hour"), 720_000_000);
        assert_eq!(nanos("2/500ms"), 250_000_000);
        assert_eq!(nanos("1.5/s"), 666_666_667);
        assert_eq!(nanos("10 per second"), 100_000_000);
        assert_eq!(nanos("3/s"), 333_333_334);
        assert_eq!(nanos("0.5/s"), 2_000_000_000);
        let q = Quota::parse("10/s burst 20").unwrap();
        assert_eq!((q.emission_interval_nanos(), q.burst()), (100_000_000, 20));
        assert_eq!(Quota::parse(" 10/S, Burst=20 ").unwrap(), q);
        assert_eq!(Quota::parse("100/minute").unwrap().burst(), 100);
        // A rate whose period is beyond u128 says so, not u128::MAX ns.
        for tiny in [5e-324, 1e-300, 1e-30] {
            let err = Quota::per_second(tiny).unwrap_err();
            assert_eq!(err.code(), "period_too_long");
            assert_eq!(
                err.to_string(),
                "period of more than 2^128 ns is too long: the maximum is 2^60 ns (about 36 years)",
                "{tiny}"
            );
        }
        let err = Quota::per_second(1e-10).unwrap_err().to_string();
        assert!(
            err.starts_with("period of 10000000000000000000 ns"),
            "{err}"
        );
        assert_eq!(Quota::parse("1.5/s").unwrap().burst(), 1);
    }

    #[test]
    fn float_constructors_are_exact_decimals() {
        assert_eq!(
            Quota::per_second(0.1).unwrap().emission_interval_nanos(),
            10_000_000_000
        );
        assert_eq!(
            Quota::per_second(3).unwrap().emission_interval_nanos(),
            333_333_334
        );
        assert_eq!(
            Quota::per_minute(100).unwrap(),
            Quota::parse("100/min").unwrap()
        );
        assert_eq!(
            Quota::per_hour(5000).unwrap(),
            Quota::parse("5000/h").unwrap()
        );
        assert_eq!(Quota::per_second(1e9).unwrap().emission_interval_nanos(), 1);
    }

    #[test]
    fn display_parses_back() {
        for s in [
            "10/s burst 20",
            "3/s",
            "1/day",
            "7/13ms burst 9",
            "1000000000/s",
        ] {
            let q = Quota::parse(s).unwrap();
            assert_eq!(Quota::parse(&q.to_string()).unwrap(), q, "{s} -> {q}");
        }
    }
}
