//! Reading a partner's answer: `Retry-After`, the IETF `RateLimit` field,
//! `RateLimit-*` and `X-RateLimit-*` (see the module's notes for the rules).

use std::time::Duration;

use super::{MAX_HEADER_VALUE, UNIX_TIME_FLOOR};

/// The most quota windows read from one answer (the IETF field may list
/// several policies; more are ignored — a hostile list costs nothing).
pub const MAX_WINDOWS: usize = 4;

/// The longest reset a fleet follows: one day. A window announced to
/// reset later (a year away, a Unix time in milliseconds read as seconds)
/// is no quota to pace by: ignored, as a date in the past is.
pub const MAX_ANNOUNCED_RESET: Duration = Duration::from_secs(86_400);

/// The quota a partner announced on an answer: up to [`MAX_WINDOWS`]
/// windows, each the requests it will still take (`remaining`) before its
/// window resets (`reset`, from the answer's arrival). Read by
/// [`announced`] from the IETF `RateLimit` field (`r`, `t` of each item;
/// the older draft's `remaining`, `reset`), else `RateLimit-Remaining` /
/// `RateLimit-Reset`, else `X-RateLimit-Remaining` / `X-RateLimit-Reset`
/// (a reset above 10⁹ is a Unix time) — the first form that announces
/// one. A window is kept only with a reset above 0 and at most
/// [`MAX_ANNOUNCED_RESET`]; a remaining count too large to hold is
/// `u64::MAX` (the ceiling, once the rule reads it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Announced {
    windows: [(u64, Duration); MAX_WINDOWS],
    len: usize,
}

impl Announced {
    /// One window: `remaining` requests until `reset`; `None` for a reset
    /// of 0 or beyond [`MAX_ANNOUNCED_RESET`].
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use ratebound::outbound::Announced;
    /// let a = Announced::new(12, Duration::from_secs(4)).unwrap();
    /// assert_eq!(a.windows(), &[(12, Duration::from_secs(4))]);
    /// assert!(Announced::new(12, Duration::ZERO).is_none());
    /// assert!(Announced::new(12, Duration::from_secs(365 * 86_400)).is_none());
    /// ```
    pub fn new(remaining: u64, reset: Duration) -> Option<Announced> {
        let mut a = Announced::default();
        a.push(remaining, reset);
        (!a.is_empty()).then_some(a)
    }

    /// This quota and one more window (kept as [`new`](Self::new) keeps
    /// one; beyond [`MAX_WINDOWS`], dropped).
    #[must_use]
    pub fn with(mut self, remaining: u64, reset: Duration) -> Announced {
        self.push(remaining, reset);
        self
    }

    /// The windows: (remaining, reset).
    pub fn windows(&self) -> &[(u64, Duration)] {
        &self.windows[..self.len]
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn push(&mut self, remaining: u64, reset: Duration) {
        if self.len < MAX_WINDOWS && !reset.is_zero() && reset <= MAX_ANNOUNCED_RESET {
            self.windows[self.len] = (remaining, reset);
            self.len += 1;
        }
    }
}

/// The fields of one answer that ratebound reads, each form apart.
#[derive(Default)]
struct Fields {
    retry_after: Option<Duration>,
    field: Option<Duration>,
    field_quota: Announced,
    remaining: Option<u64>,
    reset: Option<u64>,
    x_remaining: Option<u64>,
    x_reset: Option<u64>,
}

impl Fields {
    fn read<'h>(headers: impl IntoIterator<Item = (&'h str, &'h str)>, now_unix: f64) -> Fields {
        let mut f = Fields::default();
        let longest = |a: Option<Duration>, b: Option<Duration>| a.max(b).or(a).or(b);
        for (name, value) in headers {
            if value.len() > MAX_HEADER_VALUE {
                continue;
            }
            let value = value.trim();
            let is = |n: &str| name.eq_ignore_ascii_case(n);
            if is("retry-after") {
                f.retry_after = longest(f.retry_after, parse_retry_after(value, now_unix));
            } else if is("ratelimit") {
                f.field = longest(f.field, parse_ratelimit_field(value));
                field_items(value, |r, t| {
                    f.field_quota.push(r, Duration::from_secs(t));
                });
            } else if is("ratelimit-remaining") {
                f.remaining = integer(value);
            } else if is("ratelimit-reset") {
                f.reset = integer(value);
            } else if is("x-ratelimit-remaining") {
                f.x_remaining = integer(value);
            } else if is("x-ratelimit-reset") {
                f.x_reset = integer(value);
            }
        }
        f
    }

    fn pause(&self, now_unix: f64) -> Option<Duration> {
        let spent = |remaining: Option<u64>, reset: Option<u64>| match (remaining, reset) {
            (Some(0), Some(reset)) => reset_in(reset, now_unix),
            _ => None,
        };
        self.retry_after
            .or(self.field)
            .or_else(|| spent(self.remaining, self.reset))
            .or_else(|| spent(self.x_remaining, self.x_reset))
    }

    fn announced(&self, now_unix: f64) -> Option<Announced> {
        let pair = |remaining: Option<u64>, reset: Option<u64>| {
            Announced::new(remaining?, reset_in(reset?, now_unix)?)
        };
        (!self.field_quota.is_empty())
            .then_some(self.field_quota)
            .or_else(|| pair(self.remaining, self.reset))
            .or_else(|| pair(self.x_remaining, self.x_reset))
    }
}

/// How long the headers ask to pause: `Retry-After` first, then the IETF
/// `RateLimit` field, then `RateLimit-*`, then `X-RateLimit-*`; the longest
/// of what one form says. `None` when nothing valid asks for a pause.
pub fn pause_asked<'h>(
    headers: impl IntoIterator<Item = (&'h str, &'h str)>,
    now_unix: f64,
) -> Option<Duration> {
    Fields::read(headers, now_unix).pause(now_unix)
}

/// The quota the headers announce (see [`Announced`]), `None` when no
/// form announces a valid window. Any answer may carry one, a success as
/// much as a refusal; negative, fractional, overlong or non-numeric
/// values are ignored, as are resets in the past or beyond
/// [`MAX_ANNOUNCED_RESET`].
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use ratebound::outbound::announced;
/// let a = announced([("RateLimit-Remaining", "12"), ("RateLimit-Reset", "4")], 0.0).unwrap();
/// assert_eq!(a.windows(), &[(12, Duration::from_secs(4))]);
/// let a = announced([("RateLimit", r#""default";r=50;t=30"#)], 0.0).unwrap();
/// assert_eq!(a.windows(), &[(50, Duration::from_secs(30))]);
/// assert!(announced([("RateLimit-Remaining", "-1"), ("RateLimit-Reset", "4")], 0.0).is_none());
/// ```
pub fn announced<'h>(
    headers: impl IntoIterator<Item = (&'h str, &'h str)>,
    now_unix: f64,
) -> Option<Announced> {
    Fields::read(headers, now_unix).announced(now_unix)
}

/// [`pause_asked`] and [`announced`] of one answer, its headers read once.
pub fn read_answer<'h>(
    headers: impl IntoIterator<Item = (&'h str, &'h str)>,
    now_unix: f64,
) -> (Option<Duration>, Option<Announced>) {
    let f = Fields::read(headers, now_unix);
    (f.pause(now_unix), f.announced(now_unix))
}

/// A reset of `v` seconds, or a Unix time when `v` is above 10⁹.
fn reset_in(v: u64, now_unix: f64) -> Option<Duration> {
    if v > UNIX_TIME_FLOOR {
        until(v as f64, now_unix)
    } else {
        Some(Duration::from_secs(v))
    }
}

/// From `now_unix` until `at` (Unix seconds), if that is ahead.
fn until(at: f64, now_unix: f64) -> Option<Duration> {
    let d = at - now_unix;
    (d.is_finite() && d > 0.0).then(|| Duration::from_secs_f64(d.min(1e12)))
}

/// A non-negative integer (digits only: no sign, no fraction, no spaces),
/// saturating at `u64::MAX`: a valid value too large to hold is a very
/// long delay — capped to `max_pause`, never dropped (a dropped pause is an
/// immediate retry).
fn integer(v: &str) -> Option<u64> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(v.parse().unwrap_or(u64::MAX))
}

/// `Retry-After`: delay-seconds, or an HTTP-date.
pub fn parse_retry_after(value: &str, now_unix: f64) -> Option<Duration> {
    let value = value.trim();
    if let Some(s) = integer(value) {
        return Some(Duration::from_secs(s));
    }
    until(http_date(value)? as f64, now_unix)
}

/// The IETF `RateLimit` field: the longest `t` among items whose `r` is 0
/// (`"default";r=0;t=30, "burst";r=5;t=1`), or the older draft's
/// `limit=10, remaining=0, reset=30`.
pub fn parse_ratelimit_field(value: &str) -> Option<Duration> {
    let mut longest: Option<Duration> = None;
    field_items(value, |r, t| {
        if r == 0 {
            longest = longest.max(Some(Duration::from_secs(t)));
        }
    });
    longest
}

/// Each (remaining, reset seconds) the IETF `RateLimit` field gives: every
/// item with both `r` and `t`, then the older draft's `remaining` and
/// `reset` members when both are there.
fn field_items(value: &str, mut each: impl FnMut(u64, u64)) {
    let (mut old_remaining, mut old_reset) = (None, None);
    for item in value.split(',') {
        let mut params = item.split(';').map(str::trim);
        let head = params.next().unwrap_or("");
        if let Some((k, v)) = head.split_once('=') {
            // The older draft: key=value members, no item name.
            match k.trim().to_ascii_lowercase().as_str() {
                "remaining" => old_remaining = integer(v.trim()),
                "reset" => old_reset = integer(v.trim()),
                _ => {}
            }
            continue;
        }
        let (mut r, mut t) = (None, None);
        for p in params {
            match p.split_once('=') {
                Some(("r", v)) => r = integer(v),
                Some(("t", v)) => t = integer(v),
                _ => {}
            }
        }
        if let (Some(r), Some(t)) = (r, t) {
            each(r, t);
        }
    }
    if let (Some(r), Some(t)) = (old_remaining, old_reset) {
        each(r, t);
    }
}

/// An HTTP-date (RFC 9110 §5.6.7) as Unix seconds: IMF-fixdate
/// (`Sun, 06 Nov 1994 08:49:37 GMT`), RFC 850 (`Sunday, 06-Nov-94 08:49:37
/// GMT`) or asctime (`Sun Nov  6 08:49:37 1994`).
pub fn http_date(v: &str) -> Option<u64> {
    let parts: Vec<&str> = v.split_whitespace().collect();
    let (day, month, year, time) = match parts.as_slice() {
        [wd, d, m, y, t, "GMT"] if wd.ends_with(',') => (*d, *m, year4(y)?, *t),
        [wd, dmy, t, "GMT"] if wd.ends_with(',') => {
            let mut dmy = dmy.split('-');
            let (d, m, y) = (dmy.next()?, dmy.next()?, dmy.next()?);
            if dmy.next().is_some() || y.len() != 2 {
                return None;
            }
            // RFC 9110: a two-digit year more than 50 years ahead is past.
            let y: u64 = y.parse().ok()?;
            (d, m, if y < 70 { 2000 + y } else { 1900 + y }, *t)
        }
        [_, m, d, t, y] => (*d, *m, year4(y)?, *t),
        _ => return None,
    };
    let day: u64 = day.parse().ok().filter(|d| (1..=31).contains(d))?;
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| *m == month)? as u64
        + 1;
    let mut hms = time.split(':');
    let mut field = |max: u64| -> Option<u64> {
        let f = hms.next()?;
        (f.len() == 2)
            .then(|| f.parse().ok())
            .flatten()
            .filter(|v| *v <= max)
    };
    let (h, m, s) = (field(23)?, field(59)?, field(60)?);
    if hms.next().is_some() {
        return None;
    }
    Some(days_from_civil(year, month, day)? * 86_400 + h * 3_600 + m * 60 + s)
}

fn year4(y: &str) -> Option<u64> {
    (y.len() == 4).then(|| y.parse().ok()).flatten()
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar
/// (from 1970 on), `None` for a day the month does not have.
fn days_from_civil(y: u64, m: u64, d: u64) -> Option<u64> {
    let leap = (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400);
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if y < 1970 || d > month_days[(m - 1) as usize] {
        return None;
    }
    let years = y - 1970;
    // Leap days in [1970, y): those of years 1972, 1976, … minus centuries.
    let leaps = |y: u64| y / 4 - y / 100 + y / 400;
    let days_before_year = years * 365 + leaps(y - 1) - leaps(1969);
    let days_before_month: u64 = month_days[..(m - 1) as usize].iter().sum();
    Some(days_before_year + days_before_month + d - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_in_the_three_forms() {
        let t = 784_111_777; // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(http_date("Sun, 06 Nov 1994 08:49:37 GMT"), Some(t));
        assert_eq!(http_date("Sunday, 06-Nov-94 08:49:37 GMT"), Some(t));
        assert_eq!(http_date("Sun Nov  6 08:49:37 1994"), Some(t));
        assert_eq!(http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(
            http_date("Tue, 29 Feb 2028 00:00:00 GMT"),
            Some(1_835_395_200)
        );
        for bad in [
            "Sun, 31 Feb 2026 00:00:00 GMT",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "06 Nov 1994",
            "",
        ] {
            assert_eq!(http_date(bad), None, "{bad}");
        }
    }
}
