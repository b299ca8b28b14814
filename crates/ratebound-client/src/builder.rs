//! The options every adapter takes, and what they share at run time: the
//! wait before each sending, the core's decision on each answer, the pause.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

// On tokio's time, as the sleeps are (under tokio's paused time, in tests,
// a wait is measured exactly).
use tokio::time::Instant;

use http::HeaderMap;
use ratebound::any::DEFAULT_N;
use ratebound::outbound::{
    DEFAULT_BACKOFF, DEFAULT_MAX_PAUSE, DEFAULT_RETRIES, LocalPauses, Outbound, Reach, Sending,
};

use crate::{Error, OutboundEvent, OutboundLimiter, Outcome};

type OnDecision = Arc<dyn Fn(&OutboundEvent<'_>) + Send + Sync>;
type KeyFn<R> = Arc<dyn Fn(&R) -> String + Send + Sync>;

/// Where a request's limiter key comes from.
pub(crate) enum Key<R> {
    /// The URL's host and port (`host:port` when a port is given that is
    /// not the scheme's default, as Node's `url.host`).
    Host,
    Fixed(String),
    Custom(KeyFn<R>),
}

impl<R> Key<R> {
    /// The key of `request`, with `host` for [`Key::Host`].
    pub(crate) fn of(&self, request: &R, host: impl FnOnce(&R) -> String) -> String {
        match self {
            Key::Host => host(request),
            Key::Fixed(key) => key.clone(),
            Key::Custom(f) => f(request),
        }
    }
}

/// The key when a request names no host (a path-only URI, as tonic's
/// requests to a `Channel` are): one key for all of them.
pub(crate) const NO_HOST: &str = "default";

/// Builds an adapter: `RateLimitMiddleware::builder` (feature `reqwest`;
/// `R` = `reqwest::Request`) or `RateLimitLayer::builder` (feature
/// `tower`; `R` = `http::request::Parts`); `R` is what a key function
/// sees. Every
/// default is the core's [`Outbound`] and the Python and Node adapters':
/// 2 retries, pauses of at most 5 minutes, 429 and 503 retried for
/// idempotent methods, a backoff of 1 s (doubling) before retrying a
/// refusal that gave no advice, no timeout, one token per sending, the key
/// from the host.
pub struct Builder<R> {
    limiter: Arc<dyn OutboundLimiter>,
    key: Key<R>,
    timeout: Option<Duration>,
    n: u64,
    retries: u32,
    max_pause: Duration,
    backoff: Duration,
    statuses: Option<Vec<u16>>,
    any_method: bool,
    on_decision: Option<OnDecision>,
}

impl<R> Builder<R> {
    pub(crate) fn new(limiter: impl OutboundLimiter + 'static) -> Builder<R> {
        Builder {
            limiter: Arc::new(limiter),
            key: Key::Host,
            timeout: None,
            n: DEFAULT_N,
            retries: DEFAULT_RETRIES,
            max_pause: DEFAULT_MAX_PAUSE,
            backoff: DEFAULT_BACKOFF,
            statuses: None,
            any_method: false,
            on_decision: None,
        }
    }

    /// Uses one limiter key for every request (default: the request's host
    /// and port, `host:port` when the URL gives a port that is not the
    /// scheme's default).
    pub fn key(mut self, key: &str) -> Self {
        self.key = Key::Fixed(key.to_string());
        self
    }

    /// Takes each request's limiter key from `f`.
    pub fn key_fn(mut self, f: impl Fn(&R) -> String + Send + Sync + 'static) -> Self {
        self.key = Key::Custom(Arc::new(f));
        self
    }

    /// Waits at most `timeout` for each sending's tokens (default: as long
    /// as it takes); a longer wait fails at once with the limiter's
    /// [`ratebound::Error::DeadlineExceeded`] and sends nothing.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Takes `n` tokens per sending (default 1).
    pub fn n(mut self, n: u64) -> Self {
        self.n = n;
        self
    }

    /// Sends a request at most `retries` more times (default 2; 0: never).
    pub fn retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    /// Obeys pauses of at most `max_pause` (default 5 minutes): a partner
    /// asking for longer is obeyed for `max_pause`.
    pub fn max_pause(mut self, max_pause: Duration) -> Self {
        self.max_pause = max_pause;
        self
    }

    /// Pauses `backoff` before retrying a refusal that gave no advice (a
    /// 429 or 503 with no `Retry-After` and no `RateLimit` fields), doubled
    /// for each earlier refusal of the call and cut to `max_pause`
    /// (default 1 s: 1 s, 2 s, 4 s). No retry goes without a pause.
    pub fn backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    /// Retries answers with these statuses (default: 429 and 503).
    pub fn statuses(mut self, statuses: &[u16]) -> Self {
        self.statuses = Some(statuses.to_vec());
        self
    }

    /// Retries every method, POST and PATCH too — and so gRPC calls, which
    /// are all POSTs (default: GET, HEAD, OPTIONS, PUT, DELETE and TRACE
    /// only).
    pub fn any_method(mut self, any: bool) -> Self {
        self.any_method = any;
        self
    }

    /// Calls `f` for each wait, pause, retry and give-up (see
    /// [`OutboundEvent`]) — for metrics and logs. Unset, nothing is done
    /// for it.
    pub fn on_decision(mut self, f: impl Fn(&OutboundEvent<'_>) + Send + Sync + 'static) -> Self {
        self.on_decision = Some(Arc::new(f));
        self
    }

    /// The checked options.
    pub(crate) fn finish(self) -> Result<(Settings, Key<R>), Error> {
        let algorithm = self.limiter.algorithm();
        if algorithm != "token_bucket" {
            return Err(Error::Limit(ratebound::Error::Unsupported {
                operation: "pause (an outbound limiter must be a token bucket)",
                algorithm,
            }));
        }
        // The core's rule for a sending, as Python's and Node's adapters.
        let sending = Sending::new(self.n, self.timeout)?;
        let mut outbound = Outbound::new()
            .with_retries(self.retries)
            .with_max_pause(self.max_pause)?
            .with_backoff(self.backoff)?
            .with_any_method(self.any_method);
        if let Some(statuses) = &self.statuses {
            outbound = outbound.with_statuses(statuses)?;
        }
        let settings = Settings {
            limiter: self.limiter,
            outbound,
            timeout: sending.timeout(),
            n: sending.n(),
            on_decision: self.on_decision,
            pauses: LocalPauses::new(),
        };
        Ok((settings, self.key))
    }
}

/// What an adapter does around each sending (the same for all of them).
pub(crate) struct Settings {
    limiter: Arc<dyn OutboundLimiter>,
    outbound: Outbound,
    timeout: Option<Duration>,
    n: u64,
    on_decision: Option<OnDecision>,
    /// The pauses the limiter's store could not be told of, kept here.
    pauses: LocalPauses,
}

/// The core's advice on one answer, with the status it was given for.
pub(crate) struct Decision {
    status: u16,
    pause: Option<Duration>,
    capped: bool,
    retry: bool,
    gave_up: bool,
}

impl Settings {
    /// Whether the answer to attempt `attempt` may be retried (else the
    /// request is not copied).
    pub(crate) fn may_retry(&self, attempt: u32) -> bool {
        attempt < self.outbound.retries()
    }

    /// Waits out a pause kept in this process (the limiter's store could
    /// not be told of it), then for the sending's tokens.
    pub(crate) async fn acquire(&self, key: &str, attempt: u32) -> Result<(), Error> {
        let start = Instant::now();
        let mut timeout = self.timeout;
        if let Some(hold) = self.pauses.hold(key, timeout, start.into_std())? {
            tokio::time::sleep(hold).await;
            timeout = timeout.map(|t| t.saturating_sub(start.elapsed()));
        }
        self.limiter.acquire(key, self.n, timeout).await?;
        let waited = start.elapsed();
        if waited >= Duration::from_millis(1) {
            self.tell(
                Event {
                    outcome: Outcome::Waited,
                    duration: Some(waited),
                    status: None,
                    attempt,
                    capped: false,
                    local: false,
                },
                key,
            );
        }
        Ok(())
    }

    /// The core's advice on the answer to attempt `attempt`; `asked` is a
    /// pause the answer asked for outside its HTTP headers (a gRPC
    /// `RetryInfo`), capped at `max_pause` here — the longer of the two is
    /// obeyed.
    pub(crate) fn decide(
        &self,
        method: &str,
        status: u16,
        headers: &HeaderMap,
        attempt: u32,
        asked: Option<Duration>,
    ) -> Decision {
        let now_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let lines = headers
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)));
        // The longer of the headers' pause and one asked elsewhere (a gRPC
        // `RetryInfo`); the core caps it and adds the backoff.
        let asked = ratebound::outbound::pause_asked(lines, now_unix)
            .max(asked)
            .filter(|d| !d.is_zero());
        let advice = self.outbound.advise_asked(method, status, asked, attempt);
        Decision {
            status,
            pause: advice.pause,
            capped: advice.capped,
            retry: advice.retry,
            gave_up: advice.gave_up,
        }
    }

    /// Obeys `decision`: pauses the limiter for everyone if asked, and says
    /// whether to send again (`resendable`: the request can be).
    pub(crate) async fn settle(
        &self,
        key: &str,
        decision: &Decision,
        attempt: u32,
        resendable: bool,
    ) -> bool {
        let status = Some(decision.status);
        if let Some(pause) = decision.pause {
            // A pause the store could not be told of (Redis down), or the
            // limiter could not make (a shared table with no slot for the
            // key), is kept in this process: an outage does not cancel it.
            let reach = self.limiter.pause(key, pause).await.unwrap_or(Reach::Local);
            let local = self
                .pauses
                .paused(key, pause, reach, Instant::now().into_std());
            self.tell(
                Event {
                    outcome: Outcome::Paused,
                    duration: Some(pause),
                    status,
                    attempt,
                    capped: decision.capped,
                    local,
                },
                key,
            );
        }
        let plain = |outcome| Event {
            outcome,
            duration: None,
            status,
            attempt,
            capped: false,
            local: false,
        };
        if decision.retry && resendable {
            self.tell(plain(Outcome::Retried), key);
            return true;
        }
        if decision.retry || decision.gave_up {
            self.tell(plain(Outcome::GaveUp), key);
        }
        false
    }

    fn tell(&self, e: Event, key: &str) {
        if let Some(f) = &self.on_decision {
            f(&OutboundEvent {
                outcome: e.outcome,
                key,
                duration: e.duration,
                status: e.status,
                attempt: e.attempt,
                capped: e.capped,
                local: e.local,
            });
        }
    }
}

/// An event but its key.
struct Event {
    outcome: Outcome,
    duration: Option<Duration>,
    status: Option<u16>,
    attempt: u32,
    capped: bool,
    local: bool,
}
