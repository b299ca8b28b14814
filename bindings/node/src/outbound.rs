//! `Outbound` and `OutboundCall`: the core's outbound call machine
//! (`ratebound::outbound::{Caller, Call}`) for the fetch and axios
//! adapters — every step of a call and every rule around the partner's
//! answer. The binding converts values; the core decides.

use std::sync::Arc;

use std::time::Duration;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratebound::any::AnyLimiter;
use ratebound::outbound::{Caller, Learned, Reach, Step, Target};
use ratebound::{KeyedAlgorithm, Quota};

use crate::error::{OrThrow, invalid_type};
use crate::keyed::KeyedLimiter;
use crate::limiters::{TokenBucket, from_ms};
use crate::redis::RedisEngine;
use crate::shared::{SharedKeyedLimiter, SharedTokenBucket};

/// The options of an `Outbound` policy.
#[napi(object, object_to_js = false)]
pub struct OutboundOptions<'a> {
    /// The limiter's algorithm (default `'token_bucket'`): anything else
    /// cannot be paused and is refused.
    pub algorithm: Option<String>,
    /// One key for every call (default: each request's host and port).
    pub key: Option<String>,
    /// The tokens each sending takes (default 1).
    pub n: Option<f64>,
    /// The longest wait for them, in seconds (default: as long as it takes).
    pub timeout: Option<f64>,
    /// The most retries (default 2).
    pub retries: Option<f64>,
    /// The longest pause obeyed, in seconds (default 300).
    pub max_pause: Option<f64>,
    /// The statuses retried (default `[429, 503]`).
    pub statuses: Option<Vec<f64>>,
    /// Retry POST and PATCH too (default false: idempotent methods only).
    pub any_method: Option<bool>,
    /// The pause before retrying a refusal that gave no advice, in seconds
    /// (default 1), doubled for each earlier refusal of the call and cut to
    /// `maxPause`.
    pub backoff: Option<f64>,
    /// Learn the partner's real limit from its answers (see
    /// `OutboundCall.next`'s `'adapt'`): a refusal cuts the rate every
    /// caller sharing `limiter` runs at, a quiet success steps it back up,
    /// never above the limiter's configured quota. Default: on where
    /// `limiter` keeps what is learned (a token bucket: local, shared or
    /// Redis), off elsewhere;
    /// `true` on a limiter that cannot keep it throws `TypeError`
    /// (`ERR_RATEBOUND_UNSUPPORTED`).
    pub adaptive: Option<bool>,
    /// The adapter's limiter: whether it keeps what is learned, and its
    /// configured quota (the ceiling of what is learned). Absent: one that
    /// does not learn.
    #[napi(ts_type = "unknown")]
    pub limiter: Option<Unknown<'a>>,
}

/// The configured quota of `limiter` when it keeps a learned word (the
/// local `TokenBucket` and token-bucket `KeyedLimiter`; a
/// `SharedTokenBucket` or token-bucket `SharedKeyedLimiter`, whose file
/// keeps it for every process; a Redis `TokenBucket`, whose key in Redis
/// keeps it for every instance); `None` for every other limiter (windows).
fn ceiling_of(limiter: Option<Unknown<'_>>) -> Option<Quota> {
    let limiter = limiter?;
    let bucket = |algorithm| match algorithm {
        KeyedAlgorithm::TokenBucket(q) => Some(q),
        _ => None,
    };
    if let Ok(local) = ClassInstance::<TokenBucket>::from_unknown(limiter) {
        return local.core().map(ratebound::TokenBucket::ceiling);
    }
    if let Ok(shared) = ClassInstance::<SharedTokenBucket>::from_unknown(limiter) {
        return bucket(shared.keyed_algorithm());
    }
    if let Ok(keyed) = ClassInstance::<SharedKeyedLimiter>::from_unknown(limiter) {
        return bucket(keyed.algorithm());
    }
    if let Ok(keyed) = ClassInstance::<KeyedLimiter>::from_unknown(limiter) {
        return bucket(keyed.keyed_algorithm());
    }
    // A Redis limiter (`redis.TokenBucket`): its native engine, which
    // keeps the word beside the bucket in Redis for every instance.
    let engine = |value: Unknown<'_>| {
        ClassInstance::<RedisEngine>::from_unknown(value)
            .ok()
            .and_then(|e| bucket(e.engine.config().algorithm))
    };
    if let Some(q) = engine(limiter) {
        return Some(q);
    }
    if limiter.get_type().ok()? == ValueType::Object {
        let object = Object::from_unknown(limiter).ok()?;
        if let Ok(Some(inner)) = object.get_named_property::<Option<Unknown<'_>>>("engine") {
            return engine(inner);
        }
    }
    None
}

/// A learned word as the limiters and the machine pass it through
/// JavaScript: the `u64` in decimal (a number would lose its low bits).
pub(crate) fn word(learned: Learned) -> String {
    learned.to_bits().to_string()
}

/// A learned word from its decimal text (`name` says which, for the error).
///
/// @throws {TypeError} `ERR_INVALID_ARG_TYPE` for text that is not a
/// `u64` in decimal.
pub(crate) fn word_of(env: &Env, name: &str, text: &str) -> Result<Learned> {
    text.parse::<u64>().map(Learned::from_bits).map_err(|_| {
        invalid_type(
            env,
            &format!("{name} is a learned word (a u64 in decimal), not {text:?}"),
        )
    })
}

/// What to do after a response.
#[napi(object)]
pub struct Advice {
    /// Pause the limiter this many seconds, for everyone sharing it (`null`:
    /// no pause asked).
    pub pause: Option<f64>,
    /// The pause was cut to `maxPause`.
    pub capped: bool,
    /// Send the request again, through the limiter's `acquire`.
    pub retry: bool,
    /// A retryable status the request may not be retried on: the caller
    /// gets this response.
    pub gave_up: bool,
}

/// What each sending of an adapter waits for (see `Outbound.sending`).
#[napi(object)]
pub struct Sending {
    /// The tokens each sending takes.
    pub n: f64,
    /// The longest wait for them, in seconds (`null`: as long as it takes).
    pub timeout: Option<f64>,
}

/// The outbound policy: which answers to retry and how long a pause may be.
///
/// Each adapter holds one, with the pauses it keeps in this process when
/// its limiter's store could not be told (`paused`, `hold`).
#[napi]
pub struct Outbound {
    caller: Arc<Caller>,
}

#[napi]
impl Outbound {
    /// A policy; each option left out is the core's default and the core
    /// checks them all (`Outbound::from_loose`): bad ones throw
    /// `RangeError` (`ERR_RATEBOUND_INVALID_NUMBER`).
    #[napi(constructor)]
    pub fn new(env: Env, options: Option<OutboundOptions>) -> Result<Outbound> {
        let o = options.unwrap_or(OutboundOptions {
            algorithm: None,
            key: None,
            n: None,
            timeout: None,
            retries: None,
            max_pause: None,
            statuses: None,
            any_method: None,
            backoff: None,
            adaptive: None,
            limiter: None,
        });
        let inner = ratebound::outbound::Outbound::from_loose(
            o.retries,
            o.max_pause,
            o.statuses.as_deref(),
            o.any_method,
            o.backoff,
        )
        .or_throw(&env)?;
        let sending = ratebound::outbound::Sending::from_loose(o.n, o.timeout).or_throw(&env)?;
        let algorithm = o.algorithm.as_deref().unwrap_or("token_bucket");
        let caller = Caller::new(algorithm, inner, sending, o.key).or_throw(&env)?;
        // The core's rule for `adaptive` (`Caller::with_adaptive`); a
        // limiter that keeps nothing learned has no ceiling to learn under,
        // and the one given is never read.
        let caller = match ceiling_of(o.limiter) {
            Some(ceiling) => caller.with_adaptive(o.adaptive, true, ceiling),
            None => Quota::with_period(Duration::from_secs(1))
                .and_then(|unread| caller.with_adaptive(o.adaptive, false, unread)),
        }
        .or_throw(&env)?;
        // A local keyed limiter takes a waiter's tokens only when they are
        // due (it decides again after each sleep): no slot to price again.
        let caller = match o.limiter {
            Some(l) if ClassInstance::<KeyedLimiter>::from_unknown(l).is_ok() => {
                caller.taking_when_due()
            }
            _ => caller,
        };
        // A local `TokenBucket`'s quota as it is when an answer is read
        // (`setQuota` changes it): the ceiling of what is learned.
        let caller = match o
            .limiter
            .and_then(|l| ClassInstance::<TokenBucket>::from_unknown(l).ok())
        {
            Some(local) => {
                let bucket = local.shared();
                let built = caller.learning().map(|l| l.ceiling());
                match built {
                    Some(built) => caller.with_live_ceiling(Arc::new(move || match &*bucket {
                        AnyLimiter::TokenBucket(b) => b.ceiling(),
                        _ => built,
                    })),
                    None => caller,
                }
            }
            None => caller,
        };
        Ok(Outbound {
            caller: Arc::new(caller),
        })
    }

    /// Each sending's `n` and `timeout` as the core reads them
    /// (`Sending::from_loose`): `n` tokens (default 1, at least 1), a wait
    /// of at most `timeout` seconds (default: as long as it takes).
    ///
    /// @throws {RangeError} `ERR_RATEBOUND_INVALID_NUMBER` naming `n` or
    /// `timeout`.
    #[napi]
    pub fn sending(env: Env, n: Option<f64>, timeout: Option<f64>) -> Result<Sending> {
        let s = ratebound::outbound::Sending::from_loose(n, timeout).or_throw(&env)?;
        Ok(Sending {
            n: s.n() as f64,
            timeout: s.timeout().map(|t| t.as_secs_f64()),
        })
    }

    /// Whether this adapter learns the partner's limit (`adaptive`): after
    /// each acquisition it tells the call the limiter's learned word
    /// (`OutboundCall.saw`).
    #[napi(getter)]
    pub fn learning(&self) -> bool {
        self.caller.learning().is_some()
    }

    /// The most retries.
    #[napi(getter)]
    pub fn retries(&self) -> u32 {
        self.caller.outbound().retries()
    }

    /// The longest pause obeyed, in seconds.
    #[napi(getter)]
    pub fn max_pause(&self) -> f64 {
        self.caller.outbound().max_pause().as_secs_f64()
    }

    /// The pause before the first retry of a refusal that gave no advice,
    /// in seconds.
    #[napi(getter)]
    pub fn backoff(&self) -> f64 {
        self.caller.outbound().backoff().as_secs_f64()
    }

    /// One call of `method` to `scheme//host:port` (`port` null: none
    /// given), with the request's own `key`, `n` and `timeout` (this one
    /// only when `timeoutGiven`: null is then "no timeout"); `resendable`
    /// unless its body is read once.
    ///
    /// @throws {RangeError} `ERR_RATEBOUND_INVALID_NUMBER` naming `n` or
    /// `timeout`.
    #[napi]
    #[allow(clippy::too_many_arguments)]
    pub fn call(
        &self,
        env: Env,
        method: String,
        scheme: String,
        host: String,
        port: Option<u32>,
        key: Option<String>,
        n: Option<f64>,
        timeout: Option<f64>,
        timeout_given: bool,
        resendable: bool,
    ) -> Result<OutboundCall> {
        let target = Target {
            scheme: &scheme,
            host: &host,
            port: port.and_then(|p| u16::try_from(p).ok()),
        };
        let timeout = timeout_given.then_some(timeout);
        let call = self
            .caller
            .call_loose(&method, target, key, n, timeout, resendable)
            .or_throw(&env)?;
        Ok(OutboundCall {
            caller: self.caller.clone(),
            call,
        })
    }

    /// Whether a throw of the adapter's hook is the first (to be warned
    /// of); the later ones are swallowed.
    #[napi]
    pub fn hook_threw(&self) -> bool {
        self.caller.hook_threw()
    }

    /// What to do after the response to attempt `attempt` (0: the first) of
    /// `method`, with `status` and `headers` (`[name, value]` pairs),
    /// received at `nowUnix` (seconds since the Unix epoch).
    #[napi]
    pub fn advise(
        &self,
        method: String,
        status: u32,
        headers: Vec<Vec<String>>,
        attempt: u32,
        now_unix: f64,
    ) -> Advice {
        let status = u16::try_from(status).unwrap_or(0);
        let pairs = headers.iter().filter_map(|h| match h.as_slice() {
            [n, v] => Some((n.as_str(), v.as_str())),
            _ => None,
        });
        let a = self
            .caller
            .outbound()
            .advise(&method, status, pairs, attempt, now_unix);
        Advice {
            pause: a.pause.map(|d| d.as_secs_f64()),
            capped: a.capped,
            retry: a.retry,
            gave_up: a.gave_up,
        }
    }
}

/// One step of a call (see `OutboundCall.next`): `kind` is `'hold'`,
/// `'acquire'`, `'send'`, `'adapt'`, `'pause'`, `'event'`, `'retry'`,
/// `'done'` or `'exceeded'`.
#[napi(object, object_from_js = false)]
#[derive(Default)]
pub struct OutboundStep {
    /// What to do.
    pub kind: &'static str,
    /// `hold`, `pause`: seconds; `event`: the wait or the pause (null
    /// for others).
    pub seconds: Option<f64>,
    /// `acquire`: the tokens.
    pub n: Option<f64>,
    /// `acquire`: the longest wait left, in seconds (null: none);
    /// `exceeded`: the longest wait the call accepted.
    pub timeout: Option<f64>,
    /// `event`: `'waited'`, `'adapted'`, `'paused'`, `'retried'` or
    /// `'gave_up'`.
    pub outcome: Option<&'static str>,
    /// `event`: the answer's status (null before one).
    pub status: Option<u32>,
    /// `event`: the sending (0: the first).
    pub attempt: Option<u32>,
    /// `event`: the pause was cut to `maxPause`.
    pub capped: Option<bool>,
    /// `event`: the pause reached only this process.
    pub local: Option<bool>,
    /// `adapt`: the learned word this sending went under, a `u64` in
    /// decimal (replace it only if the limiter still holds it).
    pub seen: Option<String>,
    /// `adapt`: the learned word the answer calls for (decimal).
    pub next: Option<String>,
    /// `event` `'adapted'`: the learned rate before, in tokens per second.
    pub from_rate: Option<f64>,
    /// `event` `'adapted'`: the learned rate now, in tokens per second.
    pub to_rate: Option<f64>,
}

fn step(kind: &'static str) -> OutboundStep {
    OutboundStep {
        kind,
        ..OutboundStep::default()
    }
}

/// One call's steps (`Outbound.call`).
#[napi]
pub struct OutboundCall {
    caller: Arc<Caller>,
    call: ratebound::outbound::Call,
}

#[napi]
impl OutboundCall {
    /// The limiter key (when the request gave none of its own).
    #[napi(getter)]
    pub fn key(&self) -> String {
        self.call.key().to_string()
    }

    /// The next step at `nowMs` (the adapter's monotonic clock, in ms);
    /// `'exceeded'` (with the wait in `seconds`, the longest wait accepted
    /// in `timeout`) when a pause kept in this
    /// process holds the sending beyond its timeout: the call fails at
    /// once, sending nothing.
    #[napi]
    pub fn next(&mut self, env: Env, now_ms: f64) -> Result<OutboundStep> {
        let s = match self.call.next(&self.caller, from_ms(now_ms)) {
            Ok(s) => s,
            Err(ratebound::Error::DeadlineExceeded { wait, max_wait }) => {
                return Ok(OutboundStep {
                    seconds: Some(wait.as_secs_f64()),
                    timeout: Some(max_wait.as_secs_f64()),
                    ..step("exceeded")
                });
            }
            Err(e) => return Err(e).or_throw(&env),
        };
        Ok(match s {
            Step::Hold(d) => OutboundStep {
                seconds: Some(d.as_secs_f64()),
                ..step("hold")
            },
            Step::Acquire { n, timeout } => OutboundStep {
                n: Some(n as f64),
                timeout: timeout.map(|t| t.as_secs_f64()),
                ..step("acquire")
            },
            Step::Send => step("send"),
            Step::Adapt { seen, next } => OutboundStep {
                seen: Some(word(seen)),
                next: Some(word(next)),
                ..step("adapt")
            },
            Step::Pause(d) => OutboundStep {
                seconds: Some(d.as_secs_f64()),
                ..step("pause")
            },
            Step::Report(e) => OutboundStep {
                seconds: e.duration.map(|d| d.as_secs_f64()),
                outcome: Some(e.outcome.as_str()),
                status: e.status.map(u32::from),
                attempt: Some(e.attempt),
                capped: Some(e.capped),
                local: Some(e.local),
                from_rate: e.learned.and_then(|(from, _)| self.caller.rate(from)),
                to_rate: e.learned.and_then(|(_, to)| self.caller.rate(to)),
                ..step("event")
            },
            Step::Retry => step("retry"),
            Step::Done => step("done"),
        })
    }

    /// The answer: its `status` and `headers` (`[name, value]` pairs),
    /// received at `nowUnix` (seconds since the Unix epoch).
    #[napi]
    pub fn answered(&mut self, status: u32, headers: Vec<Vec<String>>, now_unix: f64) {
        let status = u16::try_from(status).unwrap_or(0);
        let pairs = headers.iter().filter_map(|h| match h.as_slice() {
            [n, v] => Some((n.as_str(), v.as_str())),
            _ => None,
        });
        self.call.answered(&self.caller, status, pairs, now_unix);
    }

    /// The limiter refused the tokens `'acquire'` asked for with its
    /// `RateLimitExceededError` (nothing taken): they were `seconds` away
    /// (its `retryAfter`). The machine says what next: hold and ask again
    /// (a learning call's line beyond the horizon), or `'exceeded'`.
    #[napi]
    pub fn beyond(&mut self, seconds: f64) {
        self.call
            .beyond(Duration::try_from_secs_f64(seconds).unwrap_or_default());
    }

    /// The learned word when the wait for the tokens began (the limiter's
    /// `learnedWord`, read before asking for them): a cut that comes while
    /// the sending is in line makes the machine ask for the tokens again
    /// rather than send at the old pace.
    ///
    /// @throws {TypeError} `ERR_INVALID_ARG_TYPE` for text that is not a
    /// `u64` in decimal.
    #[napi]
    pub fn reserving(&mut self, env: Env, word: String) -> Result<()> {
        self.call
            .reserving(word_of(&env, "the learned word", &word)?);
        Ok(())
    }

    /// The learned word the limiter held for the call's key once the
    /// tokens came (the limiter's, a `u64` in decimal): what the answer's
    /// evidence is about. Told only when the adapter learns
    /// (`Outbound.learning`).
    ///
    /// @throws {TypeError} `ERR_INVALID_ARG_TYPE` for text that is not a
    /// `u64` in decimal.
    #[napi]
    pub fn saw(&mut self, env: Env, word: String) -> Result<()> {
        self.call.saw(word_of(&env, "the learned word", &word)?);
        Ok(())
    }

    /// Whether the limiter replaced its learned word as the `'adapt'` step
    /// asked (false too when it failed): when it did, the `'adapted'`
    /// event comes next.
    #[napi]
    pub fn adapted(&mut self, replaced: bool) {
        self.call.adapted(replaced);
    }

    /// Where the pause took hold: true (everyone sharing the limiter),
    /// false (only this process), null (the limiter failed to make it).
    #[napi]
    pub fn paused(&mut self, shared: Option<bool>, now_ms: f64) {
        let reach = shared.map(|s| if s { Reach::Shared } else { Reach::Local });
        self.call.paused(&self.caller, reach, from_ms(now_ms));
    }
}
