//! `RedisEngine`: the sans-I/O engine of `ratebound-redis` (global limits
//! in Redis), for the JavaScript driver in `redis.js`.
//!
//! The engine decides everything — which script, which key and arguments,
//! what a reply, a timeout or an error means, the fail policy, the circuit
//! breaker and the leases — and performs no I/O. `redis.js` runs each
//! [`RedisCall`] with the application's ioredis or node-redis client
//! (`EVALSHA`, and `EVAL` once on `NOSCRIPT`, within one deadline) and hands
//! back what became of it.

use napi::JsValue;
use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratebound::Error as CoreError;
use ratebound::any;
use ratebound::gate::Loose as CoreLoose;
use ratebound_redis::{Begin, Call, CallOutcome, Config, Engine, Notice, OnError};

mod ffi;
mod finish;
mod raw;
mod table;
mod turns;

pub use raw::{
    bind_redis_path, redis_call_script, redis_drop, redis_heard, redis_keep, redis_misconfigured,
    redis_template, redis_use_slots,
};
pub use turns::{redis_is_no_script, redis_turns_open, redis_turns_stats};

use std::sync::Arc;

use crate::error::{OrThrow, invalid_type};
use crate::keyed::keyed_algorithm_of;
use crate::limiters::{Decision, loose_number, tokens};
use crate::slab::Registered;

/// Options of `new RedisEngine(...)` (and of `redis.TokenBucket`,
/// `redis.FixedWindow`, `redis.SlidingWindow`, which add `client`).
#[napi(object, object_to_js = false)]
pub struct RedisEngineOptions<'a> {
    /// `'token_bucket'` (the default, with `rate` and `burst`),
    /// `'fixed_window'` or `'sliding_window'` (with `limit` and `window`).
    #[napi(ts_type = "'token_bucket' | 'fixed_window' | 'sliding_window'")]
    pub algorithm: Option<String>,
    /// Tokens per second per key, or a quota string (`'10/s burst 20'`).
    #[napi(ts_type = "number | string")]
    pub rate: Option<Unknown<'a>>,
    /// The most tokens one key holds (token bucket).
    #[napi(ts_type = "number")]
    pub burst: Option<Unknown<'a>>,
    /// Requests per window per key (windows).
    #[napi(ts_type = "number")]
    pub limit: Option<Unknown<'a>>,
    /// The window in seconds (windows; a whole number of microseconds).
    #[napi(ts_type = "number")]
    pub window: Option<Unknown<'a>>,
    /// Prepended to every key in Redis (default `'rb:'`).
    #[napi(ts_type = "string")]
    pub prefix: Option<Unknown<'a>>,
    /// What answers while Redis is down, slow or erroring: `'open'` (admit,
    /// the default), `'closed'` (refuse, `retryAfter` = `breakerCooldown`)
    /// or `'local'` (a local token bucket per key at `localRate`).
    #[napi(ts_type = "'open' | 'closed' | 'local'")]
    pub on_error: Option<Unknown<'a>>,
    /// With `onError: 'local'`: this instance's share of the rate, tokens
    /// per second (e.g. rate / number of instances); its burst is the
    /// burst scaled by the same share, at least 1.
    #[napi(ts_type = "number")]
    pub local_rate: Option<Unknown<'a>>,
    /// Every call's deadline in seconds (default 0.05), `NOSCRIPT` retry
    /// included. A call that timed out may still have run in Redis.
    #[napi(ts_type = "number")]
    pub timeout: Option<Unknown<'a>>,
    /// Tokens taken per round trip and spent locally (default 0: none).
    /// Not with `'sliding_window'`.
    #[napi(ts_type = "number")]
    pub lease: Option<Unknown<'a>>,
    /// Seconds leased tokens may be spent before they lapse (default 1).
    #[napi(ts_type = "number")]
    pub lease_ttl: Option<Unknown<'a>>,
    /// Seconds an open circuit breaker answers with the fail policy before
    /// it lets one probe through (default 1).
    #[napi(ts_type = "number")]
    pub breaker_cooldown: Option<Unknown<'a>>,
    /// Consecutive failures that open the breaker (default 3).
    #[napi(ts_type = "number")]
    pub breaker_threshold: Option<Unknown<'a>>,
}

/// The answer of a global limit: the usual decision and the path that gave
/// it. A refusal is a decision, never an exception.
#[napi(object, object_from_js = false)]
pub struct RedisDecision {
    /// Whether the request was admitted (and its tokens taken).
    pub allowed: bool,
    /// The burst, or the window's limit.
    pub limit: f64,
    /// Whole tokens left (for a `'lease'` answer: this instance's lease).
    pub remaining: f64,
    /// Seconds until the same request could be admitted; 0 when allowed.
    pub retry_after: f64,
    /// Seconds until the key's state is fresh again.
    pub reset_after: f64,
    /// Which path answered: `'redis'`, `'lease'` (tokens leased earlier),
    /// `'fail_open'`, `'fail_closed'` or `'local'` (the fail policy),
    /// `'damaged'` (Redis answered, but the key held a value no script
    /// wrote: it was rebuilt as spent and the request refused), or `'busy'`
    /// (the call never left this client — its own overload, not Redis':
    /// refused, `retryAfter` the call's deadline, the breaker untouched).
    #[napi(
        ts_type = "'redis' | 'lease' | 'fail_open' | 'fail_closed' | 'local' | 'damaged' | 'busy'"
    )]
    pub source: &'static str,
}

impl From<ratebound_redis::RedisDecision> for RedisDecision {
    fn from(d: ratebound_redis::RedisDecision) -> RedisDecision {
        // The numbers as every decision gives them to JavaScript.
        let Decision {
            allowed,
            limit,
            remaining,
            retry_after,
            reset_after,
        } = Decision::from(d.decision());
        RedisDecision {
            allowed,
            limit,
            remaining,
            retry_after,
            reset_after,
            source: d.source().as_str(),
        }
    }
}

/// How many answers a global limit gave, by the path that gave them
/// (counted since it was made), and whether its breaker is open now.
#[napi(object, object_from_js = false)]
pub struct RedisStats {
    /// Redis decided.
    pub redis: f64,
    /// Leased tokens answered.
    pub lease: f64,
    /// Redis decided on a key that held a value no script wrote.
    pub damaged: f64,
    /// Redis could not decide; the fail policy `'open'` admitted.
    pub fail_open: f64,
    /// Redis could not decide; the fail policy `'closed'` refused.
    pub fail_closed: f64,
    /// Redis could not decide; the local share (`'local'`) decided.
    pub fail_local: f64,
    /// The call never left this client before its deadline (its own
    /// overload): refused as busy, not the fail policy's.
    pub busy: f64,
    /// Whether the circuit breaker is open now.
    pub breaker_open: bool,
}

/// One episode worth a warning: the breaker opening or closing, or the
/// client's own overload. `message` is the one log line (the same text in
/// every language).
#[napi(object, object_from_js = false)]
pub struct RedisNotice {
    /// `'breaker_opened'`, `'breaker_closed'`, `'busy'` (calls refused as
    /// busy: the client's own overload), or `'notice'` (a kind this
    /// version does not name).
    #[napi(ts_type = "'breaker_opened' | 'breaker_closed' | 'busy' | 'notice'")]
    pub kind: &'static str,
    /// The warning line.
    pub message: String,
}

/// One script run for the driver to perform: `EVALSHA sha 1 key ...args`,
/// and on a `NOSCRIPT` error `EVAL text 1 key ...args` once, within one
/// deadline; then `engine.finish(call, ...)`.
#[napi]
pub struct RedisCall {
    pub(crate) call: Call,
}

#[napi]
impl RedisCall {
    /// The script's SHA-1 (for `EVALSHA`).
    #[napi(getter)]
    pub fn sha(&self) -> &'static str {
        self.call.script.sha()
    }

    /// The script's Lua source (for `EVAL` after `NOSCRIPT`).
    #[napi(getter)]
    pub fn text(&self) -> &'static str {
        self.call.script.text
    }

    /// The script's name: `'gcra'`, `'fixed_window'` or `'sliding_window'`.
    #[napi(getter)]
    pub fn script(&self) -> &'static str {
        self.call.script.name
    }

    /// The one key: the prefix and the caller's key, as raw bytes.
    #[napi(getter)]
    pub fn key(&self) -> Buffer {
        Buffer::from(self.call.key.clone())
    }

    /// The script's arguments, as Redis strings.
    #[napi(getter)]
    pub fn args(&self) -> Vec<String> {
        self.call.args.clone()
    }

    /// `[sha, key, ...args]` in one crossing (what a driver sends with
    /// `EVALSHA sha 1 key ...args`): the key a string when it is valid
    /// UTF-8 (the clients' one-piece write path), else a `Buffer`.
    #[napi(ts_return_type = "Array<string | Buffer>")]
    pub fn command(&self) -> Vec<Either<&'static str, Either<String, Buffer>>> {
        let mut out = Vec::with_capacity(2 + self.call.args.len());
        out.push(Either::A(self.call.script.sha()));
        out.push(Either::B(match std::str::from_utf8(&self.call.key) {
            Ok(text) => Either::A(text.to_string()),
            Err(_) => Either::B(Buffer::from(self.call.key.clone())),
        }));
        for a in &self.call.args {
            out.push(Either::B(Either::A(a.clone())));
        }
        out
    }

    /// What the call asks: `'check'`, `'lease'`, `'return'` (from
    /// `drain()`: give leased tokens back; such calls need no `finish`),
    /// `'reserve'`, `'pause'`, `'resume'` or `'adapt'`.
    #[napi(
        getter,
        ts_return_type = "'check' | 'lease' | 'return' | 'reserve' | 'pause' | 'resume' | 'adapt'"
    )]
    pub fn kind(&self) -> &'static str {
        self.call.kind.as_str()
    }

    /// The tokens asked for.
    #[napi(getter)]
    pub fn n(&self) -> f64 {
        self.call.n as f64
    }

    /// The same call judged at `nowUs` (whole microseconds of Redis time)
    /// instead of Redis' `TIME`: the explicit-time twin, for replaying test
    /// vectors. Production calls never need it.
    #[napi]
    pub fn at(&self, env: Env, now_us: f64) -> Result<RedisCall> {
        let now = any::whole("nowUs", now_us, 0).or_throw(&env)?;
        Ok(RedisCall {
            call: self.call.clone().at(now),
        })
    }
}

/// A string option (`null`/`undefined`: not given).
fn loose_string(env: &Env, value: &Option<Unknown<'_>>, name: &str) -> Result<Option<String>> {
    let Some(v) = value else { return Ok(None) };
    match v.get_type()? {
        ValueType::Undefined | ValueType::Null => Ok(None),
        ValueType::String => Ok(Some(String::from_unknown(*v)?)),
        _ => Err(invalid_type(env, &format!("{name} must be a string"))),
    }
}

/// The engine's option names as JavaScript spells them.
fn js_names(e: CoreError) -> CoreError {
    match e {
        CoreError::InvalidOption {
            name: "local_rate",
            value,
            ..
        } => CoreError::InvalidOption {
            name: "localRate",
            // The core shows the Rust `Option<f64>`; say it as JavaScript.
            value: match value
                .strip_prefix("Some(")
                .and_then(|v| v.strip_suffix(')'))
                .map(str::parse::<f64>)
            {
                Some(Ok(v)) => v.to_string(),
                Some(Err(_)) => value,
                None => "undefined".to_string(),
            },
            reason: "onError 'local' needs a positive localRate (tokens per second)",
        },
        CoreError::InvalidOption {
            name: "on_error",
            value,
            ..
        } => CoreError::InvalidOption {
            name: "onError",
            value,
            reason: "is 'open', 'closed' or 'local'",
        },
        e => e,
    }
}

/// A global limit's engine (see `redis.js` for the drivers): one key per
/// limit in Redis, one Lua script per algorithm, Redis' own clock, an
/// explicit fail policy with a circuit breaker, and token leasing. It
/// performs no I/O: `begin` answers locally (a lease, or the fail policy
/// while the breaker is open) or hands out a `RedisCall`, whose outcome
/// `finish` turns into the decision.
///
/// ```js
/// const engine = new RedisEngine({ rate: 10, burst: 20, onError: 'closed' })
/// const b = engine.begin('partner-api', 1)
/// if (b instanceof RedisCall) {
///   // EVALSHA b.sha 1 b.key ...b.args (EVAL b.text ... on NOSCRIPT), within engine.timeout s
///   const d = engine.finish(b, reply, timedOut, errorText)   // reply: 7 integers, or null
/// }
/// ```
#[napi]
pub struct RedisEngine {
    /// The engine, numbered in this thread's table of the raw hot path
    /// (`table`).
    pub(crate) engine: Registered<Engine>,
}

#[napi]
impl RedisEngine {
    /// An engine: `{ rate, burst }` (token bucket) or `{ algorithm:
    /// 'fixed_window' | 'sliding_window', limit, window }`, plus the Redis
    /// options (`prefix`, `onError`, `localRate`, `timeout`, `lease`,
    /// `leaseTtl`, `breakerCooldown`, `breakerThreshold`).
    ///
    /// @throws {RangeError} for a number out of range (`ERR_RATEBOUND_INVALID_RATE`,
    /// `ERR_RATEBOUND_RATE_TOO_HIGH` above 1 000 000/s,
    /// `ERR_RATEBOUND_INVALID_WINDOW`, `ERR_RATEBOUND_INVALID_NUMBER`, ...);
    /// {TypeError} `ERR_RATEBOUND_INVALID_OPTION` for an unknown `onError`
    /// or `'local'` without `localRate`, `ERR_RATEBOUND_UNSUPPORTED` for
    /// leasing a sliding window.
    #[napi(constructor)]
    pub fn new(env: Env, options: Option<RedisEngineOptions<'_>>) -> Result<RedisEngine> {
        let o = options.ok_or_else(|| invalid_type(&env, "options are required"))?;
        let algorithm =
            keyed_algorithm_of(&env, &o.algorithm, &o.rate, &o.burst, &o.limit, &o.window)?;
        // Every option is parsed, checked and defaulted by the core.
        let prefix = loose_string(&env, &o.prefix, "prefix")?;
        let on_error = loose_string(&env, &o.on_error, "onError")?;
        let mut options: Vec<(&str, CoreLoose<'_>)> = Vec::new();
        if let Some(p) = &prefix {
            options.push(("prefix", CoreLoose::Text(p)));
        }
        if let Some(e) = &on_error {
            options.push(("onError", CoreLoose::Text(e)));
        }
        for (name, value) in [
            ("localRate", &o.local_rate),
            ("timeout", &o.timeout),
            ("lease", &o.lease),
            ("leaseTtl", &o.lease_ttl),
            ("breakerThreshold", &o.breaker_threshold),
            ("breakerCooldown", &o.breaker_cooldown),
        ] {
            if let Some(n) = loose_number(&env, value, name)? {
                options.push((name, CoreLoose::Number(n)));
            }
        }
        let config = Config::from_options(algorithm, &options)
            .map_err(js_names)
            .or_throw(&env)?;
        let engine = Arc::new(Engine::new(config).map_err(js_names).or_throw(&env)?);
        Ok(RedisEngine {
            engine: Registered::new(engine, table::register, table::unregister),
        })
    }

    /// Step one of taking `n` (default 1) tokens for `key`: a decision
    /// already (a lease, or the fail policy while the breaker is open), or a
    /// `RedisCall` to run. Keys are strings (UTF-8), whole numbers of at
    /// most 2^53 in magnitude (their decimal text) or `Uint8Array`s (their
    /// bytes), sent to Redis as raw bytes after the prefix: `'1'`, `1` and
    /// `Buffer.from('1')` are the same key in Redis.
    ///
    /// `n = 0` is a query (admitted, nothing taken). Within `scope` (a
    /// middleware's policy name) the key is that policy's own.
    ///
    /// @throws {RangeError} `ERR_RATEBOUND_INVALID_KEY` for a number key
    /// that is not one, `ERR_RATEBOUND_INSUFFICIENT_CAPACITY` for an
    /// `n` above the burst (or limit), `ERR_RATEBOUND_INVALID_NUMBER` for
    /// an `n` that is not a whole number; {TypeError}
    /// `ERR_INVALID_ARG_TYPE` for a key of another kind.
    #[napi(
        ts_args_type = "key: string | number | Uint8Array, n?: number, scope?: string | null",
        ts_return_type = "RedisDecision | RedisCall"
    )]
    pub fn begin(
        &self,
        env: Env,
        key: Unknown<'_>,
        n: Option<f64>,
        scope: Option<String>,
    ) -> Result<Either<RedisDecision, RedisCall>> {
        let n = tokens(&env, n)?;
        let begun = self.with_raw(&env, key, |k| self.engine.begin_in(scope.as_deref(), k, n))?;
        match begun {
            Begin::Done(d) => Ok(Either::A(d.into())),
            Begin::Call(call) => Ok(Either::B(RedisCall { call })),
        }
    }

    /// Step two: the decision from what became of `call` — `timedOut` (no
    /// reply within the deadline), else an `error` text (a connection or
    /// server error), else the script's reply (nine integers), read in
    /// that order by the engine (`CallOutcome::reported`). A reply that is
    /// not an array of integers (`CallOutcome::Malformed`), or of another
    /// shape, counts as a failure, as in Python. Failures feed the circuit
    /// breaker and are answered by the fail policy. `unsent`: the call never
    /// left this client before its deadline (its pool or queue was full) —
    /// refused with source `'busy'`, neither a failure nor the fail
    /// policy's.
    #[napi(
        ts_args_type = "call: RedisCall, reply: unknown, timedOut?: boolean, error?: string | null, unsent?: boolean"
    )]
    pub fn finish(
        &self,
        call: &RedisCall,
        reply: Option<Unknown<'_>>,
        timed_out: Option<bool>,
        error: Option<String>,
        unsent: Option<bool>,
    ) -> Result<RedisDecision> {
        with_outcome(reply, timed_out, error, unsent, |o| {
            self.engine.finish(&call.call, o)
        })
        .map(RedisDecision::from)
    }

    /// The calls that give every unspent leased token back (on shutdown);
    /// the leases are forgotten. Run each like any call; their outcome
    /// needs no `finish`.
    #[napi]
    pub fn drain(&self) -> Vec<RedisCall> {
        self.engine
            .drain()
            .into_iter()
            .map(|call| RedisCall { call })
            .collect()
    }

    /// The engine's number for the driver's raw hot path (internal).
    #[napi(getter, skip_typescript)]
    pub fn handle(&self) -> u32 {
        self.engine.handle
    }

    /// Whether the circuit breaker is open (Redis is being spared).
    #[napi(getter)]
    pub fn breaker_open(&self) -> bool {
        self.engine.breaker_open()
    }

    /// The answers so far by the path that gave them, and the breaker.
    #[napi(getter)]
    pub fn stats(&self) -> RedisStats {
        let s = self.engine.stats();
        RedisStats {
            redis: s.redis as f64,
            lease: s.lease as f64,
            damaged: s.damaged as f64,
            fail_open: s.fail_open as f64,
            fail_closed: s.fail_closed as f64,
            fail_local: s.fail_local as f64,
            busy: s.busy as f64,
            breaker_open: s.breaker_open,
        }
    }

    /// Whether notices wait to be taken (`takeNotices`).
    #[napi(getter)]
    pub fn has_notices(&self) -> bool {
        self.engine.has_notices()
    }

    /// The notices since the last take, oldest first: each to be logged
    /// once (`redis.js` emits them as process warnings).
    #[napi]
    pub fn take_notices(&self) -> Vec<RedisNotice> {
        self.engine
            .take_notices()
            .into_iter()
            .map(|n| RedisNotice {
                kind: match n {
                    Notice::BreakerOpened { .. } => "breaker_opened",
                    Notice::BreakerClosed { .. } => "breaker_closed",
                    Notice::Busy { .. } => "busy",
                    _ => "notice",
                },
                message: n.message(),
            })
            .collect()
    }

    /// Every call's deadline, in seconds.
    #[napi(getter)]
    pub fn timeout(&self) -> f64 {
        self.engine.timeout().as_secs_f64()
    }

    /// Leased tokens held now, over all keys.
    #[napi(getter)]
    pub fn leased(&self) -> f64 {
        self.engine.leased() as f64
    }

    /// The most one key admits at once (burst, or limit).
    #[napi(getter)]
    pub fn limit(&self) -> f64 {
        self.engine.config().algorithm.capacity() as f64
    }

    /// `'token_bucket'`, `'fixed_window'` or `'sliding_window'`.
    #[napi(getter)]
    pub fn algorithm(&self) -> &'static str {
        self.engine.algorithm()
    }

    /// The prefix of every key in Redis.
    #[napi(getter)]
    pub fn prefix(&self) -> String {
        self.engine.config().prefix.clone()
    }

    /// The fail policy: `'open'`, `'closed'` or `'local'`.
    #[napi(getter, ts_return_type = "'open' | 'closed' | 'local'")]
    pub fn on_error(&self) -> &'static str {
        match self.engine.config().on_error {
            OnError::Open => "open",
            OnError::Closed => "closed",
            OnError::Local(_) => "local",
        }
    }
}

/// Runs `f` on what became of a call, as the engine reads a driver's
/// report (`unsent` first — the call never left the client, its own
/// overload: `CallOutcome::Unsent`; then `CallOutcome::reported`:
/// `timedOut`, then `error`, then the reply): a reply is an array of numbers made integers by the engine's
/// rule (`CallOutcome::of_numbers`); anything else given as the reply is
/// `CallOutcome::Malformed` — what Python's binding says of a reply that
/// is not a list of ints.
pub(crate) fn with_outcome<R>(
    reply: Option<Unknown<'_>>,
    timed_out: Option<bool>,
    error: Option<String>,
    unsent: Option<bool>,
    f: impl FnOnce(CallOutcome<'_>) -> R,
) -> Result<R> {
    // Never sent (the client's own overload): before anything else.
    if unsent == Some(true) {
        return Ok(f(CallOutcome::Unsent));
    }
    // None: no reply; Some(None): a reply that is no array of numbers.
    let numbers: Option<Option<Vec<f64>>> = match reply {
        None => None,
        Some(v) => match v.get_type()? {
            ValueType::Undefined | ValueType::Null => None,
            ValueType::Object if v.is_array()? => Some(Vec::<f64>::from_unknown(v).ok()),
            _ => Some(None),
        },
    };
    let mut ints = Vec::new();
    let reply = numbers.as_ref().map(|n| match n {
        Some(n) => CallOutcome::of_numbers(n, &mut ints),
        None => CallOutcome::Malformed,
    });
    Ok(f(CallOutcome::reported(
        reply,
        timed_out == Some(true),
        error.as_deref(),
    )))
}
