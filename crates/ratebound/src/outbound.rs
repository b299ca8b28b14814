//! The outbound decision: what a client calling a partner does with the
//! partner's answer — sans-I/O, as [`Gate`](crate::any::Gate) is for
//! servers. Given a response's method, status and headers, it says how long
//! to pause the limiter (for every caller sharing it: the fleet, through a
//! Redis limiter) and whether to send the request again (through the
//! limiter's `acquire`, so a retry never adds traffic beyond the limit).
//! Adapters (httpx, requests, fetch, axios, reqwest, tower) do only I/O.
//!
//! What a partner may say, all read, all bounded:
//! - `Retry-After`: delay-seconds or an HTTP-date (RFC 9110 §10.2.3; the
//!   three date forms of §5.6.7), counted from the response's arrival.
//! - The IETF `RateLimit` field (draft-ietf-httpapi-ratelimit-headers):
//!   items such as `"default";r=0;t=30` — a remaining count `r` of 0 with
//!   `t` seconds is a pause until then, on any status. The older draft form
//!   `limit=10, remaining=0, reset=30` is read too.
//! - `RateLimit-Remaining` / `RateLimit-Reset` and `X-RateLimit-Remaining`
//!   / `X-RateLimit-Reset`: a remaining count of 0 with a reset in seconds,
//!   or (a value above 10⁹) a Unix time.
//!
//! A pause longer than [`Outbound::max_pause`] (default 5 minutes) is cut to
//! it, however many digits it has — a hostile or broken partner cannot stop
//! the fleet for a year, nor make it retry at once — and a value that is
//! negative, fractional where an integer is due, longer than
//! [`MAX_HEADER_VALUE`], or not a number is ignored, as is a date in the past. A retry is due only on
//! the configured statuses (429 and 503), only for idempotent methods (GET,
//! HEAD, OPTIONS, PUT, DELETE, TRACE) unless told otherwise, and at most
//! `retries` times (default 2).
//!
//! **No retry without a pause.** A refusal that gives no advice (a 429 or
//! 503 with no `Retry-After` and no `RateLimit` fields, as a reverse
//! proxy's limiter sends) is retried only after a pause of the default
//! backoff ([`Outbound::backoff`], 1 s by default), doubled for each
//! earlier refusal of the same call and cut to `max_pause`: the first
//! refusal pauses 1 s, the second 2 s, the third 4 s.
//!
//! **An outage does not cancel a pause.** An adapter applies each pause to
//! its limiter, for everyone sharing it; when the limiter's store (Redis)
//! cannot be told, the pause is kept in this process instead
//! ([`LocalPauses`]: every later sending of the adapter for that key, its
//! own retry first, waits it out) and the adapter reports it as local.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::Error;
use crate::any::{DEFAULT_N, seconds, whole};

/// The longest header value read (longer ones are ignored: hostile).
pub const MAX_HEADER_VALUE: usize = 1024;

/// The longest pause obeyed by default: 5 minutes.
pub const DEFAULT_MAX_PAUSE: Duration = Duration::from_secs(300);

/// The pause before retrying a refusal that gave no advice, by default:
/// 1 s, doubled for each earlier refusal of the same call (see
/// [`Outbound::with_backoff`]).
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(1);

/// The most retries by default.
pub const DEFAULT_RETRIES: u32 = 2;

/// The statuses retried by default: 429 Too Many Requests and 503 Service
/// Unavailable.
pub const DEFAULT_STATUSES: [u16; 2] = [429, 503];

/// A Unix time (seconds) above which an `X-RateLimit-Reset` is a moment,
/// not a number of seconds (10⁹ s is September 2001; no window is 31 years).
const UNIX_TIME_FLOOR: u64 = 1_000_000_000;

/// What to do after a response (see [`Outbound::advise`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Advice {
    /// Pause the limiter for this long from now, for everyone sharing it
    /// (`None`: no pause). A retry is always preceded by one: the
    /// partner's, else the default backoff.
    pub pause: Option<Duration>,
    /// Whether the pause was cut to the maximum.
    pub capped: bool,
    /// Send the request again (after `acquire` on the limiter, which waits
    /// out the pause).
    pub retry: bool,
    /// The status is one to retry but the request may not be (retries
    /// spent, or a method that is not idempotent): the caller gets this
    /// response.
    pub gave_up: bool,
}

/// The outbound policy: which answers to retry and how long a pause may be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outbound {
    retries: u32,
    max_pause: Duration,
    statuses: Vec<u16>,
    retry_any_method: bool,
    backoff: Duration,
}

impl Default for Outbound {
    fn default() -> Self {
        Outbound {
            retries: DEFAULT_RETRIES,
            max_pause: DEFAULT_MAX_PAUSE,
            backoff: DEFAULT_BACKOFF,
            statuses: DEFAULT_STATUSES.to_vec(),
            retry_any_method: false,
        }
    }
}

/// What each sending of an adapter waits for: `n` tokens of its limiter,
/// for at most `timeout` (`None`: as long as it takes). The same rules in
/// every adapter (Rust, Python, Node): checked once here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sending {
    n: u64,
    timeout: Option<Duration>,
}

impl Default for Sending {
    fn default() -> Self {
        Sending {
            n: DEFAULT_N,
            timeout: None,
        }
    }
}

impl Sending {
    /// `n` tokens per sending (at least 1: a sending that took none would
    /// not wait for the limit), waiting at most `timeout`.
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] naming `n` for 0.
    pub fn new(n: u64, timeout: Option<Duration>) -> Result<Sending, Error> {
        if n == 0 {
            return Err(Error::InvalidNumber {
                name: "n",
                value: "0".to_string(),
                reason: "must be at least 1",
            });
        }
        Ok(Sending { n, timeout })
    }

    /// From the numbers a dynamic language passes: `n` (default
    /// [`DEFAULT_N`]) a whole number ≥ 1, `timeout` seconds (default: no
    /// timeout) as [`seconds`] takes them.
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] naming `n` or `timeout`.
    ///
    /// # Examples
    /// ```
    /// use ratebound::outbound::Sending;
    /// let s = Sending::from_loose(None, Some(0.5))?;
    /// assert_eq!((s.n(), s.timeout().map(|t| t.as_millis())), (1, Some(500)));
    /// assert_eq!(Sending::from_loose(Some(0.0), None).unwrap_err().to_string(),
    ///            "invalid n 0: must be at least 1");
    /// assert!(Sending::from_loose(None, Some(-1.0)).is_err());
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    pub fn from_loose(n: Option<f64>, timeout: Option<f64>) -> Result<Sending, Error> {
        let n = match n {
            Some(n) => whole("n", n, 1)?,
            None => DEFAULT_N,
        };
        let timeout = timeout.map(|t| seconds("timeout", t)).transpose()?;
        Sending::new(n, timeout)
    }

    /// The tokens each sending takes.
    pub fn n(&self) -> u64 {
        self.n
    }

    /// The longest wait for them (`None`: as long as it takes).
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
}

impl Outbound {
    /// Two retries, pauses of at most 5 minutes, 429 and 503 retried for
    /// idempotent methods, a backoff of 1 s (doubling) before retrying a
    /// refusal that gave no advice.
    pub fn new() -> Outbound {
        Outbound::default()
    }

    /// The policy from the options a dynamic language passes, each `None`
    /// when not given: `retries` (default [`DEFAULT_RETRIES`]) a whole
    /// number ≥ 0, `max_pause` (default [`DEFAULT_MAX_PAUSE`]) seconds
    /// above 0, `statuses` (default [`DEFAULT_STATUSES`]) HTTP statuses,
    /// `any_method` (default false), `backoff` (default
    /// [`DEFAULT_BACKOFF`]) seconds above 0. Every binding passes its
    /// options through this one reader.
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] naming `retries`, `max_pause`, `status` or
    /// `backoff`.
    ///
    /// # Examples
    /// ```
    /// use ratebound::outbound::Outbound;
    /// let o = Outbound::from_loose(None, Some(60.0), None, None, Some(0.25))?;
    /// assert_eq!((o.retries(), o.max_pause().as_secs()), (2, 60));
    /// assert_eq!(o.backoff().as_millis(), 250);
    /// assert_eq!(Outbound::from_loose(Some(1.5), None, None, None, None).unwrap_err().to_string(),
    ///            "invalid retries 1.5: must be a whole number");
    /// assert_eq!(Outbound::from_loose(None, None, None, None, Some(0.0)).unwrap_err().code(),
    ///            "invalid_number");
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    pub fn from_loose(
        retries: Option<f64>,
        max_pause: Option<f64>,
        statuses: Option<&[f64]>,
        any_method: Option<bool>,
        backoff: Option<f64>,
    ) -> Result<Outbound, Error> {
        let mut o = Outbound::new().with_any_method(any_method.unwrap_or(false));
        if let Some(b) = backoff {
            o = o.with_backoff(seconds("backoff", b)?)?;
        }
        if let Some(r) = retries {
            // Beyond u32::MAX retries is "always": the attempt count never
            // gets there.
            o = o.with_retries(u32::try_from(whole("retries", r, 0)?).unwrap_or(u32::MAX));
        }
        if let Some(m) = max_pause {
            o = o.with_max_pause(seconds("max_pause", m)?)?;
        }
        if let Some(list) = statuses {
            let mut codes = Vec::with_capacity(list.len());
            for &s in list {
                let code = whole("status", s, 0)?;
                match u16::try_from(code) {
                    Ok(code) => codes.push(code),
                    // Beyond u16: no HTTP status.
                    Err(_) => {
                        return Err(Error::InvalidNumber {
                            name: "status",
                            value: code.to_string(),
                            reason: "must be an HTTP status, 100 to 599",
                        });
                    }
                }
            }
            o = o.with_statuses(&codes)?;
        }
        Ok(o)
    }

    /// Retries at most `retries` times (0: never).
    #[must_use]
    pub fn with_retries(mut self, retries: u32) -> Outbound {
        self.retries = retries;
        self
    }

    /// Obeys pauses of at most `max_pause`.
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] for a zero `max_pause` (a pause could never
    /// be obeyed: say `with_retries(0)` and ignore pauses instead).
    pub fn with_max_pause(mut self, max_pause: Duration) -> Result<Outbound, Error> {
        if max_pause.is_zero() {
            return Err(Error::InvalidNumber {
                name: "max_pause",
                value: "0".to_string(),
                reason: "must be more than 0 (to obey no pause, ignore the advice's pause)",
            });
        }
        self.max_pause = max_pause;
        Ok(self)
    }

    /// Retries answers with these statuses (instead of 429 and 503).
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] naming a status outside 400–599: no HTTP
    /// status, or a success or redirect (retried, every such request would
    /// be sent again).
    pub fn with_statuses(mut self, statuses: &[u16]) -> Result<Outbound, Error> {
        if let Some(&bad) = statuses.iter().find(|s| !(100..=599).contains(*s)) {
            return Err(Error::InvalidNumber {
                name: "status",
                value: bad.to_string(),
                reason: "must be an HTTP status, 100 to 599",
            });
        }
        // A success or a redirect retried would send every such answer's
        // request again: `statuses=[200]` tripled every GET.
        if let Some(&bad) = statuses.iter().find(|s| **s < 400) {
            return Err(Error::InvalidNumber {
                name: "status",
                value: bad.to_string(),
                reason: "a retried status is a refusal or an error, 400 to 599 (a success or a redirect is never sent again)",
            });
        }
        self.statuses = statuses.to_vec();
        Ok(self)
    }

    /// Pauses `backoff` before retrying a refusal that gave no advice (no
    /// `Retry-After`, no `RateLimit` fields), doubled for each earlier
    /// refusal of the same call and cut to `max_pause` (default 1 s: 1 s,
    /// 2 s, 4 s, ...).
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] for a zero `backoff` (a retry always
    /// waits: to send none, say `with_retries(0)`).
    pub fn with_backoff(mut self, backoff: Duration) -> Result<Outbound, Error> {
        if backoff.is_zero() {
            return Err(Error::InvalidNumber {
                name: "backoff",
                value: "0".to_string(),
                reason: "must be more than 0 (no retry goes without a pause: to retry nothing, set retries to 0)",
            });
        }
        self.backoff = backoff;
        Ok(self)
    }

    /// Retries every method, POST and PATCH too (default: idempotent only).
    #[must_use]
    pub fn with_any_method(mut self, any: bool) -> Outbound {
        self.retry_any_method = any;
        self
    }

    /// The most retries.
    pub fn retries(&self) -> u32 {
        self.retries
    }

    /// The longest pause obeyed.
    pub fn max_pause(&self) -> Duration {
        self.max_pause
    }

    /// The pause before the first retry of a refusal that gave no advice.
    pub fn backoff(&self) -> Duration {
        self.backoff
    }

    /// What to do after the response to attempt `attempt` (0: the first
    /// sending) of `method`, with `status` and `headers` (name, value;
    /// names in any case), received at `now_unix` (seconds since the Unix
    /// epoch, for HTTP-dates and Unix-time resets).
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use ratebound::outbound::Outbound;
    /// let o = Outbound::new();
    /// // The partner's advice is obeyed...
    /// let a = o.advise("GET", 429, [("Retry-After", "2")], 0, 0.0);
    /// assert_eq!((a.pause, a.retry), (Some(Duration::from_secs(2)), true));
    /// // ...and a bare refusal is retried after the backoff, doubling.
    /// let a = o.advise("GET", 503, [], 1, 0.0);
    /// assert_eq!((a.pause, a.retry), (Some(Duration::from_secs(2)), true));
    /// ```
    pub fn advise<'h>(
        &self,
        method: &str,
        status: u16,
        headers: impl IntoIterator<Item = (&'h str, &'h str)>,
        attempt: u32,
        now_unix: f64,
    ) -> Advice {
        self.advise_asked(method, status, pause_asked(headers, now_unix), attempt)
    }

    /// [`advise`](Self::advise) given the pause the answer asked for
    /// (`asked`: from its headers, [`pause_asked`], or elsewhere — a gRPC
    /// `RetryInfo` — the longer of them; `None`: none).
    pub fn advise_asked(
        &self,
        method: &str,
        status: u16,
        asked: Option<Duration>,
        attempt: u32,
    ) -> Advice {
        let cut = |d: Duration| {
            if d > self.max_pause {
                (Some(self.max_pause), true)
            } else {
                (Some(d), false)
            }
        };
        let retryable = self.statuses.contains(&status);
        let may = attempt < self.retries && (self.retry_any_method || idempotent(method));
        let retry = retryable && may;
        let (pause, capped) = match asked {
            Some(d) if !d.is_zero() => cut(d),
            // No retry without a pause: the backoff, doubled per earlier
            // refusal of this call (every earlier attempt was one: only a
            // refusal is retried).
            _ if retry => cut(self.backoff.saturating_mul(1u32 << attempt.min(31))),
            _ => (None, false),
        };
        Advice {
            pause,
            capped,
            retry,
            gave_up: retryable && !may,
        }
    }
}

/// Where an adapter's pause took hold (see [`LocalPauses::paused`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reach {
    /// The limiter itself: everyone sharing it (the fleet, for a Redis
    /// limiter) waits.
    Shared,
    /// Only this process: the limiter's store could not be told (Redis
    /// unreachable); a Redis limiter failing `local` had its local share
    /// paused.
    Local,
}

/// The most keys [`LocalPauses`] holds; beyond, the pause ending first is
/// forgotten.
pub const LOCAL_PAUSES_MAX_KEYS: usize = 10_000;

/// The pauses an adapter keeps in this process because its limiter's
/// store could not be told of them (Redis down): an outage does not cancel
/// a partner's pause. Each sending asks [`hold`](Self::hold) before it
/// waits for its token, so the retry of the refused call, and every other
/// call of the adapter for that key, goes out no sooner than the partner
/// asked — whatever the limiter's fail policy lets through.
///
/// Sans-I/O: the caller passes the instant and does the sleeping.
///
/// # Examples
/// ```
/// use std::time::{Duration, Instant};
/// use ratebound::outbound::{LocalPauses, Reach};
/// let pauses = LocalPauses::new();
/// let now = Instant::now();
/// // Redis was told: nothing for this process to keep.
/// assert!(!pauses.paused("partner", Duration::from_secs(2), Reach::Shared, now));
/// assert_eq!(pauses.hold("partner", None, now)?, None);
/// // Redis could not be told: this process waits 2 s.
/// assert!(pauses.paused("partner", Duration::from_secs(2), Reach::Local, now));
/// let later = now + Duration::from_millis(500);
/// assert_eq!(pauses.hold("partner", None, later)?, Some(Duration::from_millis(1500)));
/// // A wait beyond the sending's timeout fails at once.
/// assert!(pauses.hold("partner", Some(Duration::from_secs(1)), later).is_err());
/// assert_eq!(pauses.hold("partner", None, now + Duration::from_secs(2))?, None);
/// # Ok::<(), ratebound::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct LocalPauses {
    // A lock, not atomics: pauses are rare (a partner's refusal during an
    // outage) and a read of an empty table is one uncontended lock.
    until: Mutex<HashMap<String, Instant>>,
}

impl LocalPauses {
    /// An empty table.
    pub fn new() -> LocalPauses {
        LocalPauses::default()
    }

    /// Takes note of a pause of `key` for `pause` from `now` that took
    /// hold as `reach` says: one that reached only this process
    /// ([`Reach::Local`]) is kept (a pause ending no later than one already
    /// kept changes nothing). Whether the pause is local — what the
    /// adapter's `paused` event says.
    pub fn paused(&self, key: &str, pause: Duration, reach: Reach, now: Instant) -> bool {
        if reach == Reach::Shared || pause.is_zero() {
            return reach == Reach::Local;
        }
        let Some(end) = now.checked_add(pause) else {
            return true;
        };
        let mut until = self.until.lock().unwrap_or_else(|e| e.into_inner());
        until.retain(|_, e| *e > now);
        if until.len() >= LOCAL_PAUSES_MAX_KEYS && !until.contains_key(key) {
            let first = until
                .iter()
                .min_by_key(|(_, e)| **e)
                .map(|(k, _)| k.clone());
            if let Some(first) = first {
                until.remove(&first);
            }
        }
        let e = until.entry(key.to_string()).or_insert(end);
        *e = (*e).max(end);
        true
    }

    /// How long a sending for `key` must wait at `now` before it asks its
    /// limiter for a token (`None`: no pause kept).
    ///
    /// # Errors
    /// [`Error::DeadlineExceeded`] when that is longer than `timeout` (the
    /// sending's longest wait): it fails at once, as a limiter's wait
    /// would.
    pub fn hold(
        &self,
        key: &str,
        timeout: Option<Duration>,
        now: Instant,
    ) -> Result<Option<Duration>, Error> {
        let until = self.until.lock().unwrap_or_else(|e| e.into_inner());
        if until.is_empty() {
            return Ok(None);
        }
        let wait = match until.get(key) {
            Some(end) if *end > now => *end - now,
            _ => return Ok(None),
        };
        match timeout {
            Some(max_wait) if wait > max_wait => Err(Error::DeadlineExceeded { wait, max_wait }),
            _ => Ok(Some(wait)),
        }
    }
}

/// GET, HEAD, OPTIONS, PUT, DELETE and TRACE (RFC 9110 §9.2.2), in any case.
pub fn idempotent(method: &str) -> bool {
    ["GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"]
        .iter()
        .any(|m| m.eq_ignore_ascii_case(method))
}

/// How long the headers ask to pause: `Retry-After` first, then the IETF
/// `RateLimit` field, then `RateLimit-*`, then `X-RateLimit-*`; the longest
/// of what one form says. `None` when nothing valid asks for a pause.
pub fn pause_asked<'h>(
    headers: impl IntoIterator<Item = (&'h str, &'h str)>,
    now_unix: f64,
) -> Option<Duration> {
    let mut retry_after = None;
    let mut field = None;
    let (mut remaining, mut reset) = (None, None);
    let (mut x_remaining, mut x_reset) = (None, None);
    let longest = |a: Option<Duration>, b: Option<Duration>| a.max(b).or(a).or(b);
    for (name, value) in headers {
        if value.len() > MAX_HEADER_VALUE {
            continue;
        }
        let value = value.trim();
        let is = |n: &str| name.eq_ignore_ascii_case(n);
        if is("retry-after") {
            retry_after = longest(retry_after, parse_retry_after(value, now_unix));
        } else if is("ratelimit") {
            field = longest(field, parse_ratelimit_field(value));
        } else if is("ratelimit-remaining") {
            remaining = integer(value);
        } else if is("ratelimit-reset") {
            reset = integer(value);
        } else if is("x-ratelimit-remaining") {
            x_remaining = integer(value);
        } else if is("x-ratelimit-reset") {
            x_reset = integer(value);
        }
    }
    let spent = |remaining: Option<u64>, reset: Option<u64>| match (remaining, reset) {
        (Some(0), Some(reset)) => reset_in(reset, now_unix),
        _ => None,
    };
    retry_after
        .or(field)
        .or_else(|| spent(remaining, reset))
        .or_else(|| spent(x_remaining, x_reset))
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
        if let (Some(0), Some(t)) = (r, t) {
            longest = longest.max(Some(Duration::from_secs(t)));
        }
    }
    match (old_remaining, old_reset) {
        (Some(0), Some(reset)) => longest.max(Some(Duration::from_secs(reset))),
        _ => longest,
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

#[cfg(test)]
mod local_pauses_tests {
    use super::*;

    #[test]
    fn a_full_table_forgets_the_pause_ending_first_and_later_pauses_extend() {
        let p = LocalPauses::new();
        let now = Instant::now();
        let s = Duration::from_secs;
        for i in 0..LOCAL_PAUSES_MAX_KEYS {
            p.paused(&format!("k{i}"), s(10 + i as u64), Reach::Local, now);
        }
        assert!(p.paused("new", s(5), Reach::Local, now));
        // k0 ended first: forgotten; the others and the new one are kept.
        assert_eq!(p.hold("k0", None, now).unwrap(), None);
        assert_eq!(p.hold("k1", None, now).unwrap(), Some(s(11)));
        assert_eq!(p.hold("new", None, now).unwrap(), Some(s(5)));
        // A shorter pause changes nothing; a longer one extends.
        p.paused("new", s(1), Reach::Local, now);
        assert_eq!(p.hold("new", None, now).unwrap(), Some(s(5)));
        p.paused("new", s(7), Reach::Local, now);
        assert_eq!(p.hold("new", None, now).unwrap(), Some(s(7)));
        // Expired pauses are dropped when the next one is noted.
        let later = now + s(20_000);
        p.paused("x", s(1), Reach::Local, later);
        assert_eq!(p.until.lock().unwrap().len(), 1);
    }
}
