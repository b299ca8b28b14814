//! The outbound decision: what a client calling a partner does with the
//! partner's answer — sans-I/O, as [`Gate`](crate::gate::Gate) is for
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
//! Whatever the count, the same fields announce the partner's quota
//! ([`announced`]: the requests left before the window resets), which a
//! learning adapter follows ([`Learning::announced`]): the fleet spends no
//! more than that count before the reset.
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

use std::time::Duration;

use crate::Error;
use crate::any::{DEFAULT_N, seconds, whole};

mod call;
mod caller;
mod headers;
mod learn;
mod pauses;
mod step;
mod target;

pub use crate::pause::Reach;
pub use call::{
    Call, Caller, CeilingSource, Event, EventKind, LINE_HORIZON, NO_HOST, Step, Target, WAITED_MIN,
    default_key,
};
pub use headers::{
    Announced, MAX_ANNOUNCED_RESET, MAX_WINDOWS, announced, http_date, parse_ratelimit_field,
    parse_retry_after, pause_asked, read_answer,
};
pub use learn::{
    ANNOUNCED_DOWN, ANNOUNCED_UP, DEFAULT_FACTOR, DEFAULT_FLOOR, DEFAULT_GAP, DEFAULT_PROBE,
    DEFAULT_STEP, FULL, Learned, Learning, MAX_INSTANT_MS,
};
pub use pauses::{LOCAL_PAUSES_MAX_KEYS, LocalPauses};

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
        self.max_pause = more_than_zero(
            "max_pause",
            max_pause,
            "must be more than 0 (to obey no pause, ignore the advice's pause)",
        )?;
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
        self.backoff = more_than_zero(
            "backoff",
            backoff,
            "must be more than 0 (no retry goes without a pause: to retry nothing, set retries to 0)",
        )?;
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

    /// The statuses retried (refusals: what a learning adapter cuts on).
    pub fn statuses(&self) -> &[u16] {
        &self.statuses
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
        self.advise_for(idempotent(method), status, asked, attempt)
    }

    /// [`advise_asked`](Self::advise_asked) for a method that is
    /// `idempotent` or not.
    pub(crate) fn advise_for(
        &self,
        idempotent: bool,
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
        let may = attempt < self.retries && (self.retry_any_method || idempotent);
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

/// GET, HEAD, OPTIONS, PUT, DELETE and TRACE (RFC 9110 §9.2.2), in any case.
pub fn idempotent(method: &str) -> bool {
    ["GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"]
        .iter()
        .any(|m| m.eq_ignore_ascii_case(method))
}

/// `d`, unless it is zero: then [`Error::InvalidNumber`] naming `name`,
/// saying `reason`.
fn more_than_zero(
    name: &'static str,
    d: Duration,
    reason: &'static str,
) -> Result<Duration, Error> {
    if d.is_zero() {
        return Err(Error::InvalidNumber {
            name,
            value: "0".to_string(),
            reason,
        });
    }
    Ok(d)
}
