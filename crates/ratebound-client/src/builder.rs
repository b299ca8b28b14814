//! The options every adapter takes, and what they share at run time: the
//! wait before each sending, the core's decision on each answer, the pause.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

// On tokio's time, as the sleeps are (under tokio's paused time, in tests,
// a wait is measured exactly).
use tokio::time::Instant;

use http::HeaderMap;
use ratebound::KeyedLimit;
use ratebound::any::DEFAULT_N;
use ratebound::any::Key::Text;
use ratebound::outbound::{
    Announced, Call, Caller, DEFAULT_BACKOFF, DEFAULT_MAX_PAUSE, DEFAULT_RETRIES, Event, Outbound,
    Sending, Step, Target,
};

use crate::error::CallError;
use crate::{Error, OutboundEvent};

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
    /// The key `request` gives itself (a key function's), else `None`: the
    /// core's rule ([`Caller::call`]: the adapter's key, else the host).
    pub(crate) fn of(&self, request: &R) -> Option<String> {
        match self {
            Key::Custom(f) => Some(f(request)),
            Key::Host | Key::Fixed(_) => None,
        }
    }
}

/// Builds an adapter: `OutboundMiddleware::builder` (feature `reqwest`;
/// `R` = `reqwest::Request`) or `OutboundLayer::builder` (feature
/// `tower`; `R` = `http::request::Parts`); `R` is what a key function
/// sees. Every
/// default is the core's [`Outbound`] and the Python and Node adapters':
/// 2 retries, pauses of at most 5 minutes, 429 and 503 retried for
/// idempotent methods, a backoff of 1 s (doubling) before retrying a
/// refusal that gave no advice, no timeout, one token per sending, the key
/// from the host.
pub struct OutboundBuilder<R> {
    limiter: Arc<dyn KeyedLimit>,
    key: Key<R>,
    timeout: Option<Duration>,
    n: u64,
    retries: u32,
    max_pause: Duration,
    backoff: Duration,
    statuses: Option<Vec<u16>>,
    any_method: bool,
    adaptive: Option<bool>,
    on_decision: Option<OnDecision>,
}

impl<R> OutboundBuilder<R> {
    pub(crate) fn new(limiter: impl KeyedLimit + 'static) -> OutboundBuilder<R> {
        OutboundBuilder {
            limiter: Arc::new(limiter),
            key: Key::Host,
            timeout: None,
            n: DEFAULT_N,
            retries: DEFAULT_RETRIES,
            max_pause: DEFAULT_MAX_PAUSE,
            backoff: DEFAULT_BACKOFF,
            statuses: None,
            any_method: false,
            adaptive: None,
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

    /// Learns the partner's real limit from its answers (default: on,
    /// wherever the limiter can keep it — a token bucket in this process,
    /// in shared memory or in Redis): each refusal (a status to retry on)
    /// cuts the rate the fleet sharing the limiter runs at, each success
    /// after a quiet probe period raises it a step, never above the
    /// limiter's configured quota (a ceiling, not a promise). See
    /// [`ratebound::outbound::Learning`]; each change is told as
    /// [`EventKind::Adapted`](crate::EventKind::Adapted). `false`: the
    /// limiter runs at its configured quota whatever the partner says;
    /// `true` on a limiter that cannot learn fails the build.
    pub fn adaptive(mut self, adaptive: bool) -> Self {
        self.adaptive = Some(adaptive);
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
        // The core's rules for a sending, as Python's and Node's adapters.
        let sending = Sending::new(self.n, self.timeout)?;
        let mut outbound = Outbound::new()
            .with_retries(self.retries)
            .with_max_pause(self.max_pause)?
            .with_backoff(self.backoff)?
            .with_any_method(self.any_method);
        if let Some(statuses) = &self.statuses {
            outbound = outbound.with_statuses(statuses)?;
        }
        let fixed = match &self.key {
            Key::Fixed(key) => Some(key.clone()),
            Key::Host | Key::Custom(_) => None,
        };
        // Only a token bucket can be paused: the core says which.
        let algorithm = self.limiter.algorithm();
        let mut caller = Caller::new(algorithm.name(), outbound, sending, fixed)?;
        if let ratebound::KeyedAlgorithm::TokenBucket(ceiling) = algorithm {
            caller = caller.with_adaptive(self.adaptive, self.limiter.learns(), ceiling)?;
            if !self.limiter.reserves() {
                caller = caller.taking_when_due();
            }
            // The limiter's quota as it is when an answer is read (a
            // `TokenBucket`'s `set_quota` changes it).
            let limiter = Arc::clone(&self.limiter);
            caller = caller.with_live_ceiling(Arc::new(move || match limiter.algorithm() {
                ratebound::KeyedAlgorithm::TokenBucket(now) => now,
                _ => ceiling,
            }));
        }
        let settings = Settings {
            limiter: self.limiter,
            caller,
            on_decision: self.on_decision,
            origin: Instant::now(),
            origin_unix: unix_now(),
        };
        Ok((settings, self.key))
    }
}

/// What an adapter does with its client: the I/O of one sending.
pub(crate) trait Exchange {
    /// A request, as the adapter sends it.
    type Request;
    /// Its answer.
    type Response;
    /// The client's error (a transport error: returned as it is).
    type Error;
    /// A copy of `request` to send again, or `None` when its body is read
    /// once (a stream).
    fn copy(&self, request: &Self::Request) -> Option<Self::Request>;
    /// Sends `request`.
    fn send(
        &mut self,
        request: Self::Request,
    ) -> impl Future<Output = Result<Self::Response, Self::Error>>;
    /// The answer's status, the pause it asks for and the quota it
    /// announces.
    fn answer(&self, response: &Self::Response) -> (u16, Option<Duration>, Option<Announced>);
}

/// What an adapter does around each sending (the same for all of them):
/// the core's call machine ([`Caller`], [`Call`]) says each step, this
/// one loop does it.
pub(crate) struct Settings {
    limiter: Arc<dyn KeyedLimit>,
    caller: Caller,
    on_decision: Option<OnDecision>,
    /// Where the adapter's clock starts (the machine reads time since).
    origin: Instant,
    /// The Unix time at `origin`, in seconds: the adapter dates answers
    /// by its own clock from there (one clock for waits and for the
    /// learned word; in tokio's paused time, a test's answers are dated
    /// exactly).
    origin_unix: f64,
}

impl Settings {
    /// One call of `method` to `target`, keyed by `key` (a key function's)
    /// or the core's rule.
    pub(crate) fn call(
        &self,
        method: &str,
        target: Target<'_>,
        key: Option<String>,
    ) -> Result<Call, Error> {
        Ok(self.caller.call(method, target, key, None, None, true)?)
    }

    /// The pause asked in `headers` (`Retry-After`, `RateLimit` fields)
    /// and the quota they announce (`RateLimit`, `RateLimit-*`,
    /// `X-RateLimit-*`).
    pub(crate) fn read(headers: &HeaderMap) -> (Option<Duration>, Option<Announced>) {
        let now_unix = unix_now();
        let lines = headers
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)));
        ratebound::outbound::read_answer(lines, now_unix)
    }

    /// Runs `call` for `request` through `x`: the machine's steps, the
    /// one loop of every Rust adapter.
    pub(crate) async fn run<X: Exchange>(
        &self,
        mut call: Call,
        request: X::Request,
        mut x: X,
    ) -> Result<X::Response, CallError<X::Error>> {
        let c = &self.caller;
        let mut request = Some(request);
        let mut again = None;
        let mut response = None;
        loop {
            let step = call
                .next(c, self.origin.elapsed())
                .map_err(|e| CallError::Limiter(e.into()))?;
            match step {
                Step::Hold(d) => tokio::time::sleep(d).await,
                Step::Acquire { n, timeout } => {
                    let learns = c.learning().is_some();
                    if learns {
                        call.reserving(self.limiter.learned(Text(call.key())));
                    }
                    match self.limiter.acquire(Text(call.key()), n, timeout).await {
                        Ok(()) => {}
                        // Nothing taken: the machine says hold (a learning
                        // call's line beyond its horizon), or fails the call.
                        Err(ratebound::Error::DeadlineExceeded { wait, .. }) => {
                            call.beyond(wait);
                            continue;
                        }
                        Err(e) => return Err(CallError::Limiter(e.into())),
                    }
                    if learns {
                        call.saw(self.limiter.learned(Text(call.key())));
                    }
                }
                Step::Send => {
                    let Some(r) = request.take() else {
                        unreachable!("the machine sends after a retry only")
                    };
                    if call.may_retry(c) {
                        again = x.copy(&r);
                        if again.is_none() {
                            call.one_shot();
                        }
                    }
                    let res = x.send(r).await.map_err(CallError::Service)?;
                    let (status, asked, announced) = x.answer(&res);
                    let now_unix = self.origin_unix + self.origin.elapsed().as_secs_f64();
                    call.answered_announced(c, status, asked, announced, now_unix);
                    response = Some(res);
                }
                Step::Adapt { seen, next } => {
                    // A store that could not be told learns nothing this
                    // time: the next answer proposes again.
                    let key = Text(call.key());
                    let replaced = self.limiter.adapt(key, seen, next).await;
                    call.adapted(replaced.unwrap_or(false));
                }
                Step::Pause(d) => {
                    // A pause the limiter failed to make is the machine's
                    // to keep (told local).
                    let reach = self.limiter.pause(Text(call.key()), d).await.ok();
                    call.paused(c, reach, self.origin.elapsed());
                }
                Step::Report(e) => self.tell(&call, e),
                Step::Retry => {
                    // The answer is dropped unread: its connection is not
                    // reused, which is all a refusal costs.
                    response = None;
                    request = again.take();
                }
                Step::Done => match response {
                    Some(res) => return Ok(res),
                    None => unreachable!("the machine is done after an answer only"),
                },
            }
        }
    }

    /// Tells the hook; a panicking hook never fails the call (the panic
    /// hook has printed it).
    fn tell(&self, call: &Call, e: Event) {
        let c = &self.caller;
        if let Some(f) = &self.on_decision {
            let event = OutboundEvent {
                outcome: e.outcome,
                key: call.key(),
                duration: e.duration,
                status: e.status,
                attempt: e.attempt,
                capped: e.capped,
                local: e.local,
                rates: e
                    .learned
                    .and_then(|(from, to)| Some((c.rate(from)?, c.rate(to)?))),
            };
            if catch_unwind(AssertUnwindSafe(|| f(&event))).is_err() {
                let _first = self.caller.hook_threw();
            }
        }
    }
}

/// Seconds since the Unix epoch (the clock of HTTP-dates and of a fleet's
/// learned word).
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
