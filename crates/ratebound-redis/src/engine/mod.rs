//! The sans-I/O heart: builds each Redis call, turns each reply (or
//! failure) into a [`RedisDecision`], applies the fail policy and the circuit
//! breaker, and keeps the lease bookkeeping. It performs no I/O; the Rust
//! driver ([`crate::RedisLimiter`]) and the Python and Node drivers only run
//! the [`Call`]s it hands out with their language's Redis client.

pub(crate) mod acquisition;
pub(crate) mod algorithm;
pub(crate) mod breaker;
pub(crate) mod call;
pub(crate) mod config;
pub(crate) mod decision;
pub(crate) mod health;
pub(crate) mod learn;
pub(crate) mod lease;
pub(crate) mod misconfig;
pub(crate) mod news;
pub(crate) mod pause;
pub(crate) mod reserve;
pub mod script;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use ratebound::any::{AnyClock, Fingerprint, Fingerprinter};
use ratebound::{Clock, Error, KeyedAlgorithm, KeyedLimiter, Overflow, Quota};

use crate::algorithm::{Algorithm, InRedis, in_redis};
use crate::breaker::Breaker;
use crate::call::{Begin, Call, CallKind, CallOutcome};
use crate::config::{Config, OnError};
use crate::decision::{RedisDecision, Source};
use crate::health::{Health, Notice, Stats};
use crate::lease::Lease;

/// The sans-I/O global limiter (see the module docs).
pub struct Engine {
    pub(crate) config: Config,
    /// The script, its fixed arguments and the key space's tag.
    redis: InRedis,
    pub(crate) breaker: Breaker,
    pub(crate) leases: Mutex<HashMap<Vec<u8>, Lease>>,
    pub(crate) local: Option<KeyedLimiter<Fingerprint, AnyClock>>,
    pub(crate) fingerprints: Fingerprinter,
    pub(crate) clock: AnyClock,
    /// Pauses heard of (see [`Engine::hear`]).
    pub(crate) news: crate::news::News,
    /// The answers' counts and the notices to log.
    pub(crate) health: Health,
    /// The learned word each key's last reply carried (see `learn.rs`).
    pub(crate) words: crate::learn::Words,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
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
    /// [`Error::Unsupported`] for leasing a sliding window, or for an
    /// algorithm Redis has no script for; [`Error::InvalidOption`] for a
    /// zero timeout.
    pub fn new(config: Config) -> Result<Engine, Error> {
        Engine::with_clock(config, AnyClock::default())
    }

    /// As [`new`](Self::new), with `clock` for leases and the breaker.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_clock(config: Config, clock: AnyClock) -> Result<Engine, Error> {
        let redis = in_redis(&config.algorithm)?;
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
                        .with_max_keys(
                            ratebound::gate::DEFAULT_MAX_KEYS,
                            Overflow::EvictLeastRecent,
                        )?,
                )
            }
            _ => None,
        };
        Ok(Engine {
            breaker: Breaker::new(
                config.breaker_threshold.max(1),
                u64::try_from(config.breaker_cooldown.as_nanos()).unwrap_or(u64::MAX),
            ),
            redis,
            leases: Mutex::new(HashMap::new()),
            local,
            fingerprints: Fingerprinter::new(),
            clock,
            news: crate::news::News::new(),
            health: Health::default(),
            words: crate::learn::Words::default(),
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

    /// How many answers this engine gave, by the path that gave them, and
    /// whether the breaker is open now.
    ///
    /// # Examples
    /// ```
    /// use ratebound::Quota;
    /// use ratebound_redis::{Algorithm, Begin, CallOutcome, Config, Engine, OnError};
    /// let mut config = Config::new(Algorithm::TokenBucket(Quota::parse("10/s")?));
    /// config.on_error = OnError::Open;
    /// let engine = Engine::new(config)?;
    /// let Begin::Call(call) = engine.begin(b"k", 1)? else { unreachable!() };
    /// let d = engine.finish(&call, CallOutcome::Failed("connection refused"));
    /// assert!(d.is_allowed());
    /// assert_eq!(engine.stats().fail_open, 1);
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    pub fn stats(&self) -> Stats {
        self.health.stats(self.breaker.is_open())
    }

    /// Whether notices wait to be taken (one atomic load: a driver asks
    /// after each call it finishes).
    pub fn has_notices(&self) -> bool {
        self.health.has_notices()
    }

    /// The notices since the last take, oldest first, each to be logged
    /// once as a warning ([`Notice::message`]): the breaker opening and
    /// closing, and the client's own overload.
    pub fn take_notices(&self) -> Vec<Notice> {
        self.health.take_notices()
    }

    /// The fail policy's name: `"open"`, `"closed"` or `"local"` (the
    /// bindings' `on_error`).
    pub fn policy_name(&self) -> &'static str {
        match self.config.on_error {
            OnError::Open => "open",
            OnError::Closed => "closed",
            OnError::Local(_) => "local",
        }
    }

    /// Redis answered a call at `now`: the breaker closes (and says so
    /// once).
    pub(crate) fn answered(&self, now: u64) {
        self.health.replied(now);
        if self.breaker.success() {
            self.health.closed(self.policy_name());
        }
    }

    /// The error for `outcome` if it is a configuration mistake (a wrong
    /// password, a missing permission or database, TLS to a plain server,
    /// a Unix socket that is not there, a host that does not resolve: see
    /// [`misconfiguration`](crate::misconfiguration)), which a driver
    /// raises instead of finishing the call: no fail policy answers a
    /// mistake no retry can cure, and the breaker does not hear of it.
    ///
    /// # Errors
    /// [`Error::StoreMisconfigured`] naming the cause, without secrets.
    pub fn misconfigured(&self, outcome: &CallOutcome<'_>) -> Result<(), Error> {
        match outcome {
            CallOutcome::Failed(text) => match crate::misconfiguration(text) {
                Some(e) => {
                    // Not an outage: the breaker closes (a probe it let
                    // through is over), so every call meets the mistake
                    // rather than a fail policy.
                    if self.breaker.success() {
                        self.health.closed(self.policy_name());
                    }
                    Err(e)
                }
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// Tells the engine that Redis replied to some call just now — what a
    /// driver calls the moment a reply lands, before the caller that waits
    /// for it runs (a busy client may read replies long after they land).
    /// [`finish`](Self::finish) hears of every reply anyway; this only
    /// makes the engine's view of Redis' liveness sharper, so that a call
    /// that timed out while others were answered is known as the client's
    /// own overload (busy), not the server's (the fail policy).
    pub fn heard_from_redis(&self) {
        self.health.replied(self.clock.now());
    }

    /// Whether `outcome` is this client's own overload rather than
    /// Redis': a call that never left the client ([`CallOutcome::Unsent`]:
    /// the driver says so only when its queue was not held up by a silent
    /// server), or one that timed out while Redis answered other calls of
    /// this engine within the same deadline — the server is alive and
    /// quick enough; what made the call late was the client's own queue
    /// (its pool, its pipeline, a runtime too busy to read the reply).
    /// That is refused as busy (a call that was sent may still have taken
    /// its tokens: refusing is the answer that never exceeds the limit),
    /// and is not a failure for the breaker or the fail policy. A call that
    /// timed out while Redis answered nothing for a whole deadline is the
    /// server's trouble: a failure.
    pub(crate) fn overloaded(&self, outcome: &CallOutcome<'_>, now: u64) -> bool {
        match outcome {
            CallOutcome::Unsent => true,
            CallOutcome::Timeout => self.replied_within_deadline(now),
            _ => false,
        }
    }

    /// Whether Redis answered some call of this engine within one call
    /// deadline before `now`: the server is alive and quick enough.
    fn replied_within_deadline(&self, now: u64) -> bool {
        self.health.replied_within(
            now,
            u64::try_from(self.config.timeout.as_nanos()).unwrap_or(u64::MAX),
        )
    }

    /// Whether Redis answered some call of this engine within the last
    /// call deadline (on the engine's clock): what a driver asks of a call
    /// that never left its queue, to tell its own overload
    /// ([`CallOutcome::Unsent`]) from a silent server's
    /// ([`CallOutcome::Timeout`]).
    #[cfg(feature = "tokio")]
    pub(crate) fn replied_lately(&self) -> bool {
        self.replied_within_deadline(self.clock.now())
    }

    /// A call failed (`outcome` is not a reply of the script's): the
    /// breaker hears of it (and the episode's start is told once).
    pub(crate) fn failed(&self, outcome: &CallOutcome<'_>, now: u64) {
        let cause = match outcome {
            CallOutcome::Timeout => format!("no reply within {:?}", self.config.timeout),
            CallOutcome::Failed(text) => (*text).to_string(),
            CallOutcome::Malformed | CallOutcome::Reply(_) => {
                "a reply that is not the script's".to_string()
            }
            CallOutcome::Unsent => return,
        };
        self.health.set_cause(cause);
        if self.breaker.failure(now) {
            self.health.opened(
                self.policy_name(),
                Duration::from_nanos(self.breaker.cooldown),
            );
        }
    }

    /// A call never left this client: refused as busy, counted, told once
    /// per breaker cool-down; the breaker does not hear of it (but if it
    /// was the half-open breaker's probe, the next call probes).
    pub(crate) fn unsent(&self, now: u64) -> RedisDecision {
        self.breaker.unanswered();
        self.health
            .busy(now, self.breaker.cooldown, self.config.timeout);
        self.health.count(Source::Busy);
        RedisDecision {
            inner: ratebound::Decision::from_parts(
                false,
                self.config.algorithm.capacity(),
                0,
                u64::try_from(self.config.timeout.as_nanos()).unwrap_or(u64::MAX),
                0,
            ),
            source: Source::Busy,
        }
    }

    /// What the last failure was, in words (`"connection refused"`).
    pub(crate) fn last_cause(&self) -> String {
        self.health.cause()
    }

    /// The Redis key for `key`: the prefix, the algorithm's tag (its key
    /// space: `tb`, `fw`, `sw`), then `:` and the key —
    /// `rb:tb:alice` for a token bucket, `rb:fw:alice` for a fixed window.
    /// Within a `scope` (a middleware's policy name, so that two policies
    /// of one middleware never share a key) the tag is followed by `@`, the
    /// scope with `%` and `:` escaped (`%25`, `%3A`), then `:` and the key:
    /// `rb:tb@burst:alice`. Different (scope, key) pairs never give the same
    /// Redis key; every instance of one limiter gives the same one.
    pub fn redis_key(&self, scope: Option<&str>, key: &[u8]) -> Vec<u8> {
        let prefix = self.config.prefix.as_bytes();
        let tag = self.redis.tag.as_bytes();
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
            CallKind::Check | CallKind::Return | CallKind::Resume => n.to_string(),
            CallKind::Lease => self.config.lease.max(n).to_string(),
            CallKind::Reserve { max_wait_us } => max_wait_us.to_string(),
            CallKind::Pause { for_us } => for_us.to_string(),
            CallKind::Adapt { seen, next } => {
                let ((sh, sl), (nh, nl)) = (crate::learn::parts(seen), crate::learn::parts(next));
                format!("{sh}:{sl}:{nh}:{nl}")
            }
        };
        let mut args = vec![
            String::new(),
            self.redis.fixed[0].clone(),
            self.redis.fixed[1].clone(),
            n.to_string(),
            kind.as_str().to_string(),
            max,
        ];
        let hint = self.hint(&key, kind, &mut args);
        Call {
            script: self.redis.script,
            key,
            args,
            kind,
            n,
            hint,
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
                self.health.count(Source::Lease);
                return Ok(Begin::Done(RedisDecision {
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
    pub fn finish(&self, call: &Call, outcome: CallOutcome<'_>) -> RedisDecision {
        let now = self.clock.now();
        let reply = match outcome {
            CallOutcome::Reply(r) if call.replied(r) => r,
            // The client's own overload, not Redis'.
            _ if self.overloaded(&outcome, now) => return self.unsent(now),
            // What is left is Redis' failure (the client's own overload was
            // taken above): a timeout, an error, a reply of another shape —
            // a server that is not running our script. (The scripts reply
            // well-formed for every state a key can hold — beyond the
            // limit, damaged — so no data in Redis lands here.)
            _ => {
                self.failed(&outcome, now);
                return self.fail(&call.key, call.n, now);
            }
        };
        self.answered(now);
        self.heard_word(call, reply);
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
            let entry = leases.entry(call.key.clone()).or_default();
            if entry.expires <= now {
                entry.tokens = 0;
            }
            entry.tokens += spare;
            entry.expires = now.saturating_add(ttl);
            entry.top(spare, (reply[6] as u64).saturating_add(reset_us));
            remaining = entry.tokens;
        }
        let source = if damaged == 1 {
            Source::Damaged
        } else {
            Source::Redis
        };
        self.health.count(source);
        RedisDecision {
            inner: ratebound::Decision::from_parts(
                allowed,
                self.config.algorithm.capacity(),
                remaining,
                retry_us.saturating_mul(1000),
                reset_us.saturating_mul(1000),
            ),
            source,
        }
    }

    /// The fail policy's answer for `n` on `key` (the full key).
    pub(crate) fn fail(&self, key: &[u8], n: u64, now: u64) -> RedisDecision {
        let d = self.fail_uncounted(key, n, now);
        self.health.count(d.source);
        d
    }

    fn fail_uncounted(&self, key: &[u8], n: u64, now: u64) -> RedisDecision {
        let capacity = self.config.algorithm.capacity();
        match self.config.on_error {
            OnError::Open => RedisDecision {
                inner: ratebound::Decision::from_parts(true, capacity, 0, 0, 0),
                source: Source::FailOpen,
            },
            OnError::Closed => RedisDecision {
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
                RedisDecision {
                    inner: d.unwrap_or(refused),
                    source: Source::Local,
                }
            }
        }
    }

    /// The algorithm's name.
    pub fn algorithm(&self) -> &'static str {
        self.config.algorithm.name()
    }

    /// `Ok` for a token bucket; for a window [`Error::Unsupported`] naming
    /// `operation` (a window has no slots to reserve, pause or resume).
    pub(crate) fn bucket_only(&self, operation: &'static str) -> Result<(), Error> {
        if matches!(self.config.algorithm, Algorithm::TokenBucket(_)) {
            return Ok(());
        }
        Err(Error::Unsupported {
            operation,
            algorithm: self.algorithm(),
        })
    }
}
