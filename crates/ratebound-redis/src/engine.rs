//! The sans-I/O heart: builds each Redis call, turns each reply (or
//! failure) into a [`Decision`], applies the fail policy and the circuit
//! breaker, and keeps the lease bookkeeping. It performs no I/O; the Rust
//! driver ([`crate::RedisLimiter`]) and the Python and Node drivers only run
//! the [`Call`]s it hands out with their language's Redis client.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use ratebound::any::{AnyClock, Fingerprint, Fingerprinter};
use ratebound::{Clock, Error, KeyedAlgorithm, KeyedLimiter, Overflow, Quota};

pub use crate::config::{Config, OnError};
use crate::script::{FIXED_WINDOW, GCRA, SLIDING_WINDOW, Script};

/// The largest integer a double holds exactly: the scripts' arithmetic is
/// exact below it.
const MAX_EXACT: u128 = 1 << 53;

/// What a global limit counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// A GCRA token bucket: `rate` per second, bursts of `burst`.
    TokenBucket(Quota),
    /// At most `limit` per window, windows aligned to Redis' clock.
    FixedWindow {
        /// Requests per window.
        limit: u64,
        /// The window.
        window: Duration,
    },
    /// A sliding window counter of `limit` per `window`.
    SlidingWindow {
        /// Requests per window.
        limit: u64,
        /// The window.
        window: Duration,
    },
}

impl Algorithm {
    /// The most one key can take at once (burst, or limit).
    pub fn capacity(&self) -> u64 {
        match self {
            Algorithm::TokenBucket(q) => q.burst(),
            Algorithm::FixedWindow { limit, .. } | Algorithm::SlidingWindow { limit, .. } => *limit,
        }
    }

    /// The global limit for one of the core's per-key algorithms.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for an algorithm Redis has no script for.
    pub fn from_keyed(algorithm: KeyedAlgorithm) -> Result<Algorithm, Error> {
        match algorithm {
            KeyedAlgorithm::TokenBucket(q) => Ok(Algorithm::TokenBucket(q)),
            KeyedAlgorithm::FixedWindow { limit, window } => {
                Ok(Algorithm::FixedWindow { limit, window })
            }
            KeyedAlgorithm::SlidingWindow { limit, window } => {
                Ok(Algorithm::SlidingWindow { limit, window })
            }
            _ => Err(Error::Unsupported {
                operation: "a global limit in Redis",
                algorithm: "this algorithm",
            }),
        }
    }

    /// The same limit as the core's per-key algorithm — the shape a
    /// middleware advertises for it (`RateLimit-Policy`).
    pub fn keyed(&self) -> KeyedAlgorithm {
        match *self {
            Algorithm::TokenBucket(q) => KeyedAlgorithm::TokenBucket(q),
            Algorithm::FixedWindow { limit, window } => {
                KeyedAlgorithm::FixedWindow { limit, window }
            }
            Algorithm::SlidingWindow { limit, window } => {
                KeyedAlgorithm::SlidingWindow { limit, window }
            }
        }
    }

    /// Average tokens per second over the long run.
    fn rate(&self) -> f64 {
        match self {
            Algorithm::TokenBucket(q) => 1e9 / q.emission_interval_nanos() as f64,
            Algorithm::FixedWindow { limit, window }
            | Algorithm::SlidingWindow { limit, window } => *limit as f64 / window.as_secs_f64(),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Algorithm::TokenBucket(_) => "token_bucket",
            Algorithm::FixedWindow { .. } => "fixed_window",
            Algorithm::SlidingWindow { .. } => "sliding_window",
        }
    }

    /// The key space's name after the prefix: each algorithm keeps its
    /// state in a format of its own, so a token bucket and a window on the
    /// same key can never read each other's state. The limit's numbers are
    /// not part of it: a limiter whose rate, burst or limit changes (a
    /// redeploy) keeps its keys, and a state beyond the new limit is
    /// refused with the exact wait.
    pub fn tag(&self) -> &'static str {
        match self {
            Algorithm::TokenBucket(_) => "tb",
            Algorithm::FixedWindow { .. } => "fw",
            Algorithm::SlidingWindow { .. } => "sw",
        }
    }
}

/// Which path answered a [`Decision`].
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
}

impl Source {
    /// `"redis"`, `"lease"`, `"fail_open"`, `"fail_closed"`, `"local"` or
    /// `"damaged"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Redis => "redis",
            Source::Lease => "lease",
            Source::FailOpen => "fail_open",
            Source::FailClosed => "fail_closed",
            Source::Local => "local",
            Source::Damaged => "damaged",
        }
    }
}

/// A global limit's answer: the core's [`ratebound::Decision`] and the
/// path that produced it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    inner: ratebound::Decision,
    source: Source,
}

impl Decision {
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

/// What a [`Call`] asks of Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    /// Take `n` tokens or nothing.
    Check,
    /// Take at least `n` and up to the lease size.
    Lease,
    /// Give unspent leased tokens (or a reservation's) back.
    Return,
    /// Take `n` tokens now or ahead of time, if they are due within
    /// `max_wait_us` (a token bucket's reservation).
    Reserve {
        /// The longest wait, in µs.
        max_wait_us: u64,
    },
    /// Empty the bucket for `for_us` µs from Redis' now, moving every
    /// reserved slot past it.
    Pause {
        /// How long, in µs.
        for_us: u64,
    },
}

impl CallKind {
    /// `"check"`, `"lease"`, `"return"`, `"reserve"` or `"pause"`: the
    /// script's mode.
    pub fn as_str(self) -> &'static str {
        match self {
            CallKind::Check => "check",
            CallKind::Lease => "lease",
            CallKind::Return => "return",
            CallKind::Reserve { .. } => "reserve",
            CallKind::Pause { .. } => "pause",
        }
    }
}

/// One script run for a driver to perform: `EVALSHA sha 1 key args...`,
/// and on a `NOSCRIPT` reply `EVAL text 1 key args...` once (which also
/// loads the script). The reply is seven integers, for [`Engine::finish`]
/// (or [`Engine::finish_reserve`], [`Engine::finish_pause`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// The script.
    pub script: &'static Script,
    /// The one key (see [`Engine::redis_key`]): cluster-safe.
    pub key: Vec<u8>,
    /// The arguments, as Redis strings.
    pub args: Vec<String>,
    /// What the call asks.
    pub kind: CallKind,
    /// The tokens the caller asked for.
    pub n: u64,
}

impl Call {
    /// The same call judged at `now_us` (µs) instead of Redis' `TIME`: the
    /// explicit-time twin, for replaying test vectors.
    pub fn at(mut self, now_us: u64) -> Call {
        self.args[0] = now_us.to_string();
        self
    }
}

/// What became of a [`Call`].
#[derive(Clone, Copy, Debug)]
pub enum Outcome<'a> {
    /// The script's reply.
    Reply(&'a [i64]),
    /// No reply within the deadline. The call may still have run: its
    /// tokens may be spent.
    Timeout,
    /// A connection or server error (its text, for nothing but logs).
    Failed(&'a str),
}

/// The first step of a check: an answer already, or a call to make.
#[derive(Clone, Debug)]
pub enum Begin {
    /// Answered without Redis (a lease, or the fail policy while the breaker
    /// is open).
    Done(Decision),
    /// Run this call, then pass its outcome to [`Engine::finish`].
    Call(Call),
}

/// Tokens leased for one key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lease {
    pub(crate) tokens: u64,
    pub(crate) expires: u64,
}

/// A circuit breaker: after `threshold` consecutive failures it opens for
/// `cooldown`, answering with the fail policy and sending nothing; then one
/// probe at a time is let through, and a success closes it.
#[derive(Debug)]
pub(crate) struct Breaker {
    failures: AtomicU32,
    /// Clock time until which the breaker is open; 0 when closed.
    open_until: AtomicU64,
    probing: AtomicBool,
    threshold: u32,
    pub(crate) cooldown: u64,
}

impl Breaker {
    pub(crate) fn may_call(&self, now: u64) -> bool {
        // Ordering: Relaxed throughout — the breaker is advice about a
        // remote server, not a guard of memory; a stale view costs at most
        // one extra call or one extra fail-policy answer.
        let until = self.open_until.load(Ordering::Relaxed);
        if until == 0 {
            return true;
        }
        if now < until {
            return false;
        }
        // Half open: one probe at a time.
        self.probing
            .compare_exchange(false, true, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    pub(crate) fn success(&self) {
        self.failures.store(0, Ordering::Relaxed);
        self.open_until.store(0, Ordering::Relaxed);
        self.probing.store(false, Ordering::Relaxed);
    }

    pub(crate) fn failure(&self, now: u64) {
        let failures = self
            .failures
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        if failures >= self.threshold {
            self.open_until
                .store(now.saturating_add(self.cooldown).max(1), Ordering::Relaxed);
        }
        self.probing.store(false, Ordering::Relaxed);
    }

    fn is_open(&self) -> bool {
        self.open_until.load(Ordering::Relaxed) != 0
    }
}

/// The sans-I/O global limiter (see the module docs).
pub struct Engine {
    pub(crate) config: Config,
    script: &'static Script,
    /// The script's fixed arguments after `now`, `n`, `mode`.
    fixed: [String; 2],
    pub(crate) breaker: Breaker,
    pub(crate) leases: Mutex<HashMap<Vec<u8>, Lease>>,
    pub(crate) local: Option<KeyedLimiter<Fingerprint, AnyClock>>,
    pub(crate) fingerprints: Fingerprinter,
    pub(crate) clock: AnyClock,
    /// Pauses heard of (see [`Engine::hear`]).
    pub(crate) news: crate::news::News,
}

/// Whether `r` is a reply of the scripts: seven integers, none negative.
pub(crate) fn well_formed(r: &[i64]) -> bool {
    r.len() == 7 && r.iter().all(|v| *v >= 0)
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn micros_up(nanos: u128) -> u128 {
    nanos.div_ceil(1000)
}

impl Engine {
    /// An engine for `config`, reading the monotonic clock for leases and
    /// the breaker (decisions use Redis' clock).
    ///
    /// # Errors
    /// [`Error::RateTooHigh`] for a bucket faster than one token per µs
    /// (Redis keeps µs); [`Error::InvalidWindow`] for a window under 1 µs or
    /// a sliding window whose `limit × window(µs)` exceeds 2^53 (the
    /// script's arithmetic would no longer be exact);
    /// [`Error::Unsupported`] for leasing a sliding window;
    /// [`Error::InvalidOption`] for a zero timeout.
    pub fn new(config: Config) -> Result<Engine, Error> {
        Engine::with_clock(config, AnyClock::default())
    }

    /// As [`new`](Self::new), with `clock` for leases and the breaker.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_clock(config: Config, clock: AnyClock) -> Result<Engine, Error> {
        let (script, fixed) = match config.algorithm {
            Algorithm::TokenBucket(q) => {
                let t = micros_up(u128::from(q.emission_interval_nanos()));
                if u128::from(q.emission_interval_nanos()) < 1000 {
                    return Err(Error::RateTooHigh {
                        value: format!(
                            "{} per second (Redis keeps microseconds: at most 1000000 per second per key)",
                            1e9 / q.emission_interval_nanos() as f64
                        ),
                    });
                }
                let tau = t * u128::from(q.burst());
                (&GCRA, [t.to_string(), tau.to_string()])
            }
            Algorithm::FixedWindow { limit, window }
            | Algorithm::SlidingWindow { limit, window } => {
                let w = window.as_nanos();
                if w < 1000 || w % 1000 != 0 {
                    return Err(Error::InvalidWindow {
                        nanos: w,
                        reason: "a Redis window is a whole number of microseconds, at least 1"
                            .to_string(),
                    });
                }
                // The core's checks of limit and window.
                KeyedLimiter::<u8>::new(KeyedAlgorithm::FixedWindow { limit, window })?;
                let w = w / 1000;
                let sliding = matches!(config.algorithm, Algorithm::SlidingWindow { .. });
                if sliding && u128::from(limit) * w > MAX_EXACT {
                    return Err(Error::InvalidWindow {
                        nanos: window.as_nanos(),
                        reason: format!(
                            "too long for limit {limit} in Redis: limit × window in µs must be at most 2^53"
                        ),
                    });
                }
                let script = if sliding {
                    &SLIDING_WINDOW
                } else {
                    &FIXED_WINDOW
                };
                (script, [limit.to_string(), w.to_string()])
            }
        };
        if config.lease > 0 && matches!(config.algorithm, Algorithm::SlidingWindow { .. }) {
            return Err(Error::Unsupported {
                operation: "leasing",
                algorithm: "sliding_window",
            });
        }
        if config.timeout.is_zero() {
            return Err(Error::InvalidOption {
                name: "timeout",
                value: "0".to_string(),
                reason: "every call needs a deadline above zero",
            });
        }
        let local = match config.on_error {
            OnError::Local(rate) => {
                let share = rate / config.algorithm.rate();
                let burst = ((config.algorithm.capacity() as f64 * share).round() as u64).max(1);
                let quota = Quota::per_second(rate)?.with_burst(burst)?;
                Some(
                    KeyedLimiter::new(KeyedAlgorithm::TokenBucket(quota))?
                        .with_clock(clock.clone())
                        .with_max_keys(100_000, Overflow::EvictLeastRecent)?,
                )
            }
            _ => None,
        };
        Ok(Engine {
            breaker: Breaker {
                failures: AtomicU32::new(0),
                open_until: AtomicU64::new(0),
                probing: AtomicBool::new(false),
                threshold: config.breaker_threshold.max(1),
                cooldown: u64::try_from(config.breaker_cooldown.as_nanos()).unwrap_or(u64::MAX),
            },
            script,
            fixed,
            leases: Mutex::new(HashMap::new()),
            local,
            fingerprints: Fingerprinter::new(),
            clock,
            news: crate::news::News::new(),
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Every call's deadline.
    pub fn timeout(&self) -> Duration {
        self.config.timeout
    }

    /// Whether the circuit breaker is open (Redis is being spared).
    pub fn breaker_open(&self) -> bool {
        self.breaker.is_open()
    }

    /// The Redis key for `key`: the prefix, the algorithm's
    /// [tag](Algorithm::tag), then `:` and the key —
    /// `rb:tb:alice` for a token bucket, `rb:fw:alice` for a fixed window.
    /// Within a `scope` (a middleware's policy name, so that two policies
    /// of one middleware never share a key) the tag is followed by `@`, the
    /// scope with `%` and `:` escaped (`%25`, `%3A`), then `:` and the key:
    /// `rb:tb@burst:alice`. Different (scope, key) pairs never give the same
    /// Redis key; every instance of one limiter gives the same one.
    pub fn redis_key(&self, scope: Option<&str>, key: &[u8]) -> Vec<u8> {
        let prefix = self.config.prefix.as_bytes();
        let tag = self.config.algorithm.tag().as_bytes();
        let extra = scope.map_or(0, |s| 1 + 3 * s.len());
        let mut k = Vec::with_capacity(prefix.len() + tag.len() + extra + 1 + key.len());
        k.extend_from_slice(prefix);
        k.extend_from_slice(tag);
        if let Some(scope) = scope {
            k.push(b'@');
            for b in scope.bytes() {
                match b {
                    b'%' => k.extend_from_slice(b"%25"),
                    b':' => k.extend_from_slice(b"%3A"),
                    _ => k.push(b),
                }
            }
        }
        k.push(b':');
        k.extend_from_slice(key);
        k
    }

    pub(crate) fn call(&self, key: Vec<u8>, kind: CallKind, n: u64) -> Call {
        let max = match kind {
            CallKind::Check | CallKind::Return => n,
            CallKind::Lease => self.config.lease.max(n),
            CallKind::Reserve { max_wait_us } => max_wait_us,
            CallKind::Pause { for_us } => for_us,
        };
        let mode = kind.as_str();
        Call {
            script: self.script,
            key,
            args: vec![
                String::new(),
                self.fixed[0].clone(),
                self.fixed[1].clone(),
                n.to_string(),
                mode.to_string(),
                max.to_string(),
            ],
            kind,
            n,
        }
    }

    /// Step one of taking `n` tokens for `key`. `n = 0` is a query, as in
    /// the core: admitted, nothing taken, the key's state reported (it asks
    /// Redis even when a lease holds tokens, and never leases).
    ///
    /// # Errors
    /// [`Error::InsufficientCapacity`] for an `n` above the burst (or
    /// limit), which can never pass.
    pub fn begin(&self, key: &[u8], n: u64) -> Result<Begin, Error> {
        self.begin_in(None, key, n)
    }

    /// [`begin`](Self::begin) for `key` within `scope` (see
    /// [`redis_key`](Self::redis_key)): what a middleware calls for its
    /// policy named `scope`.
    ///
    /// # Errors
    /// As [`begin`](Self::begin).
    pub fn begin_in(&self, scope: Option<&str>, key: &[u8], n: u64) -> Result<Begin, Error> {
        let capacity = self.config.algorithm.capacity();
        if n > capacity {
            return Err(Error::InsufficientCapacity {
                requested: n,
                burst: capacity,
            });
        }
        let now = self.clock.now();
        let full = self.redis_key(scope, key);
        let leasing = self.config.lease > 0 && n > 0;
        if leasing {
            let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(lease) = leases.get_mut(&full)
                && lease.expires > now
                && lease.tokens >= n
            {
                lease.tokens -= n;
                let left = lease.tokens;
                return Ok(Begin::Done(Decision {
                    inner: ratebound::Decision::from_parts(true, capacity, left, 0, 0),
                    source: Source::Lease,
                }));
            }
        }
        if !self.breaker.may_call(now) {
            return Ok(Begin::Done(self.fail(&full, n, now)));
        }
        let kind = if leasing {
            CallKind::Lease
        } else {
            CallKind::Check
        };
        Ok(Begin::Call(self.call(full, kind, n)))
    }

    /// Step two: the decision from what became of `call`.
    pub fn finish(&self, call: &Call, outcome: Outcome<'_>) -> Decision {
        let now = self.clock.now();
        let reply = match outcome {
            Outcome::Reply(r) if well_formed(r) => r,
            // A reply of another shape is a server that is not running our
            // script: a failure like any other. (The scripts reply
            // well-formed for every state a key can hold — beyond the limit,
            // damaged — so no data in Redis lands here.)
            Outcome::Reply(_) | Outcome::Timeout | Outcome::Failed(_) => {
                self.breaker.failure(now);
                return self.fail(&call.key, call.n, now);
            }
        };
        self.breaker.success();
        let [allowed, remaining, retry_us, reset_us, taken, damaged] =
            [reply[0], reply[1], reply[2], reply[3], reply[4], reply[5]].map(|v| v as u64);
        let allowed = allowed == 1;
        let mut remaining = remaining;
        if allowed && call.kind == CallKind::Lease && taken > call.n {
            let spare = taken - call.n;
            let ttl = u64::try_from(self.config.lease_ttl.as_nanos()).unwrap_or(u64::MAX);
            let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
            if leases.len() >= 100_000 {
                leases.retain(|_, l| l.expires > now && l.tokens > 0);
            }
            let entry = leases.entry(call.key.clone()).or_insert(Lease {
                tokens: 0,
                expires: 0,
            });
            if entry.expires <= now {
                entry.tokens = 0;
            }
            entry.tokens += spare;
            entry.expires = now.saturating_add(ttl);
            remaining = entry.tokens;
        }
        Decision {
            inner: ratebound::Decision::from_parts(
                allowed,
                self.config.algorithm.capacity(),
                remaining,
                retry_us.saturating_mul(1000),
                reset_us.saturating_mul(1000),
            ),
            source: if damaged == 1 {
                Source::Damaged
            } else {
                Source::Redis
            },
        }
    }

    /// The fail policy's answer for `n` on `key` (the full key).
    pub(crate) fn fail(&self, key: &[u8], n: u64, now: u64) -> Decision {
        let capacity = self.config.algorithm.capacity();
        match self.config.on_error {
            OnError::Open => Decision {
                inner: ratebound::Decision::from_parts(true, capacity, 0, 0, 0),
                source: Source::FailOpen,
            },
            OnError::Closed => Decision {
                inner: ratebound::Decision::from_parts(
                    false,
                    capacity,
                    0,
                    self.breaker.cooldown,
                    0,
                ),
                source: Source::FailClosed,
            },
            OnError::Local(_) => {
                let refused =
                    ratebound::Decision::from_parts(false, capacity, 0, self.breaker.cooldown, 0);
                let fp = self.fingerprints.of(1, key);
                // More than the local share's burst can never pass locally.
                let d = self
                    .local
                    .as_ref()
                    .and_then(|local| local.check_n_at(&fp, n, now).ok());
                Decision {
                    inner: d.unwrap_or(refused),
                    source: Source::Local,
                }
            }
        }
    }

    /// The calls that give every unspent leased token back (on shutdown);
    /// the leases are forgotten. Run each like any call; their outcome
    /// needs no [`finish`](Self::finish).
    pub fn drain(&self) -> Vec<Call> {
        let now = self.clock.now();
        let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        leases
            .drain()
            .filter(|(_, l)| l.tokens > 0 && l.expires > now)
            .map(|(key, l)| self.call(key, CallKind::Return, l.tokens))
            .collect()
    }

    /// Leased tokens held now, over all keys.
    pub fn leased(&self) -> u64 {
        let now = self.clock.now();
        let leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        leases
            .values()
            .filter(|l| l.expires > now)
            .map(|l| l.tokens)
            .sum()
    }

    /// The algorithm's name.
    pub fn algorithm(&self) -> &'static str {
        self.config.algorithm.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratebound::ManualClock;

    fn engine(on_error: OnError, lease: u64) -> (Engine, ManualClock) {
        let clock = ManualClock::new();
        let mut c = Config::new(Algorithm::TokenBucket(
            Quota::parse("10/s burst 20").unwrap(),
        ));
        c.on_error = on_error;
        c.lease = lease;
        c.breaker_threshold = 2;
        c.breaker_cooldown = Duration::from_millis(100);
        (
            Engine::with_clock(c, AnyClock::Manual(clock.clone())).unwrap(),
            clock,
        )
    }

    fn call(e: &Engine, key: &str, n: u64) -> Call {
        match e.begin(key.as_bytes(), n).unwrap() {
            Begin::Call(c) => c,
            Begin::Done(d) => panic!("expected a call, got {d:?}"),
        }
    }

    #[test]
    fn calls_carry_the_script_key_and_arguments() {
        let (e, _) = engine(OnError::Open, 0);
        let c = call(&e, "alice", 3);
        assert_eq!(c.script.name, "gcra");
        assert_eq!(c.key, b"rb:tb:alice");
        // now (Redis TIME), T = 100 000 µs, tau = 20 T, n, mode, max.
        assert_eq!(c.args, ["", "100000", "2000000", "3", "check", "3"]);
        assert_eq!(c.clone().at(42).args[0], "42");
        let d = e.finish(&c, Outcome::Reply(&[1, 17, 0, 300_000, 3, 0, 7]));
        assert_eq!(d.source(), Source::Redis);
        assert_eq!(d.remaining(), 17);
        assert_eq!(d.reset_after(), Duration::from_millis(300));
        let d = e.finish(&c, Outcome::Reply(&[0, 0, 250, 2_000_000, 0, 0, 7]));
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after(), Duration::from_micros(250));
        // The script found the key damaged and rebuilt it: a refusal of
        // Redis', which the breaker counts as a success.
        let d = e.finish(&c, Outcome::Reply(&[0, 0, 100_000, 2_000_000, 0, 1, 7]));
        assert_eq!((d.is_allowed(), d.source()), (false, Source::Damaged));
    }

    #[test]
    fn the_breaker_opens_after_failures_and_probes_after_its_cooldown() {
        let (e, clock) = engine(OnError::Closed, 0);
        let c = call(&e, "k", 1);
        let d = e.finish(&c, Outcome::Timeout);
        assert_eq!(d.source(), Source::FailClosed);
        assert_eq!(d.retry_after(), Duration::from_millis(100));
        assert!(!e.breaker_open());
        e.finish(&call(&e, "k", 1), Outcome::Failed("connection refused"));
        assert!(e.breaker_open());
        // Open: answered without a call.
        assert!(
            matches!(e.begin(b"k", 1).unwrap(), Begin::Done(d) if d.source() == Source::FailClosed)
        );
        clock.advance(Duration::from_millis(100));
        // One probe at a time.
        let probe = call(&e, "k", 1);
        assert!(matches!(e.begin(b"k", 1).unwrap(), Begin::Done(_)));
        e.finish(&probe, Outcome::Reply(&[1, 19, 0, 100_000, 1, 0, 7]));
        assert!(!e.breaker_open());
        call(&e, "k", 1);
        // A reply of the wrong shape is a failure too (0.1.0's five fields, six,
        // a negative field).
        for reply in [
            &[1, 2, 3][..],
            &[1, 19, 0, 100_000, 1],
            &[0, -3, 1, 1, 0, 0],
        ] {
            let (e, _) = engine(OnError::Closed, 0);
            let d = e.finish(&call(&e, "k", 1), Outcome::Reply(reply));
            assert_eq!(d.source(), Source::FailClosed, "{reply:?}");
        }
    }

    #[test]
    fn open_and_local_policies() {
        let (e, _) = engine(OnError::Open, 0);
        let d = e.finish(&call(&e, "k", 1), Outcome::Timeout);
        assert!(d.is_allowed());
        assert_eq!(d.source(), Source::FailOpen);
        // Local at 5/s (half of 10/s): burst 20 × 0.5 = 10 per key.
        let (e, _) = engine(OnError::Local(5.0), 0);
        let c = call(&e, "k", 1);
        let allowed = (0..12)
            .filter(|_| e.finish(&c, Outcome::Timeout).is_allowed())
            .count();
        assert_eq!(allowed, 10);
        assert_eq!(e.finish(&c, Outcome::Timeout).source(), Source::Local);
    }

    #[test]
    fn leases_are_spent_locally_and_given_back() {
        let (e, clock) = engine(OnError::Open, 5);
        let c = call(&e, "k", 1);
        assert_eq!(c.args[4..], ["lease", "5"]);
        let d = e.finish(&c, Outcome::Reply(&[1, 15, 0, 500_000, 5, 0, 7]));
        assert_eq!((d.source(), d.remaining()), (Source::Redis, 4));
        for left in [3, 2] {
            match e.begin(b"k", 1).unwrap() {
                Begin::Done(d) => assert_eq!((d.source(), d.remaining()), (Source::Lease, left)),
                Begin::Call(_) => panic!("the lease has tokens"),
            }
        }
        assert_eq!(e.leased(), 2);
        // More than the lease holds: a call.
        assert!(matches!(e.begin(b"k", 3).unwrap(), Begin::Call(_)));
        let returns = e.drain();
        assert_eq!(returns.len(), 1);
        assert_eq!(returns[0].kind, CallKind::Return);
        assert_eq!(returns[0].args[3..5], ["2", "return"]);
        assert_eq!(e.leased(), 0);
        // Leases lapse.
        e.finish(
            &call(&e, "j", 1),
            Outcome::Reply(&[1, 15, 0, 500_000, 5, 0, 7]),
        );
        clock.advance(Duration::from_secs(1));
        assert!(matches!(e.begin(b"j", 1).unwrap(), Begin::Call(_)));
        assert!(e.drain().is_empty());
    }

    #[test]
    fn key_spaces_are_named_by_algorithm_and_scope() {
        let (tb, _) = engine(OnError::Open, 0);
        let fw = Engine::new(Config::new(Algorithm::FixedWindow {
            limit: 5,
            window: Duration::from_secs(1),
        }))
        .unwrap();
        let sw = Engine::new(Config::new(Algorithm::SlidingWindow {
            limit: 5,
            window: Duration::from_secs(1),
        }))
        .unwrap();
        assert_eq!(tb.redis_key(None, b"alice"), b"rb:tb:alice");
        assert_eq!(fw.redis_key(None, b"alice"), b"rb:fw:alice");
        assert_eq!(sw.redis_key(None, b"alice"), b"rb:sw:alice");
        assert_eq!(tb.redis_key(Some("burst"), b"alice"), b"rb:tb@burst:alice");
        // Injective: a scope with ':' or '%' cannot mimic another pair.
        let keys = [
            tb.redis_key(Some("a:b"), b"c"),
            tb.redis_key(Some("a"), b"b:c"),
            tb.redis_key(Some("a%3Ab"), b"c"),
            tb.redis_key(None, b"a:b:c"),
            tb.redis_key(Some(""), b"a:b:c"),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b, "{:?}", String::from_utf8_lossy(a));
            }
        }
        assert_eq!(keys[0], b"rb:tb@a%3Ab:c");
        // Calls carry the scoped key.
        match tb.begin_in(Some("hourly"), b"k", 1).unwrap() {
            Begin::Call(c) => assert_eq!(c.key, b"rb:tb@hourly:k"),
            Begin::Done(d) => panic!("{d:?}"),
        }
    }

    #[test]
    fn n_zero_is_a_query_that_never_leases() {
        let (e, _) = engine(OnError::Open, 5);
        let c = call(&e, "k", 0);
        assert_eq!(
            (c.kind, &c.args[3..5]),
            (CallKind::Check, &["0".to_string(), "check".to_string()][..])
        );
        // A lease with tokens does not answer a query either.
        e.finish(
            &call(&e, "k", 1),
            Outcome::Reply(&[1, 15, 0, 500_000, 5, 0, 7]),
        );
        assert_eq!(e.leased(), 4);
        assert!(matches!(e.begin(b"k", 0).unwrap(), Begin::Call(_)));
        assert_eq!(e.leased(), 4);
    }

    #[test]
    fn bad_settings_are_typed_errors() {
        assert_eq!(
            e_code(Config::new(Algorithm::TokenBucket(
                Quota::per_second(2e6).unwrap()
            ))),
            "rate_too_high"
        );
        let w = |window| Algorithm::FixedWindow { limit: 10, window };
        assert_eq!(
            e_code(Config::new(w(Duration::from_nanos(1500)))),
            "invalid_window"
        );
        assert_eq!(e_code(Config::new(w(Duration::ZERO))), "invalid_window");
        let mut c = Config::new(Algorithm::SlidingWindow {
            limit: 10,
            window: Duration::from_secs(1),
        });
        c.lease = 10;
        assert_eq!(e_code(c), "unsupported");
        let mut c = Config::new(w(Duration::from_secs(1)));
        c.timeout = Duration::ZERO;
        assert_eq!(e_code(c), "invalid_option");
        assert_eq!(
            OnError::parse("sometimes", None).unwrap_err().code(),
            "invalid_option"
        );
        let (e, _) = engine(OnError::Open, 0);
        assert_eq!(
            e.begin(b"k", 21).unwrap_err().code(),
            "insufficient_capacity"
        );
    }

    #[test]
    fn loose_options_are_parsed_once_for_every_binding() {
        use ratebound::any::Loose;
        let a = Algorithm::TokenBucket(Quota::parse("10/s burst 20").unwrap());
        let c = Config::from_options(
            a,
            &[
                ("onError", Loose::Text("local")),
                ("local_rate", Loose::Number(2.0)),
                ("prefix", Loose::Text("x:")),
                ("breakerThreshold", Loose::Number(5.0)),
                ("breaker_cooldown", Loose::Number(0.25)),
            ],
        )
        .unwrap();
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
        let sliding = Algorithm::from_keyed(KeyedAlgorithm::SlidingWindow {
            limit: 5,
            window: Duration::from_secs(1),
        });
        assert!(matches!(
            sliding,
            Ok(Algorithm::SlidingWindow { limit: 5, .. })
        ));
    }

    fn e_code(c: Config) -> &'static str {
        Engine::new(c).unwrap_err().code()
    }
}
