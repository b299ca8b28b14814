//! Waiting for a global token: the engine's reservation, pause and
//! acquisition steps for `redis.js` to drive (it runs each call with the
//! application's client and sleeps what it is told; every rule is the
//! engine's).

use std::sync::Mutex;
use std::time::Duration;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratebound::Error as CoreError;
use ratebound::any::{self, Key};
use ratebound_redis::{Acquisition, ReserveBegin, Reserved, Step};

use crate::error::OrThrow;
use crate::keyed::js_key;
use crate::limiters::tokens;
use crate::redis::{RedisCall, RedisEngine, with_outcome};

/// One caller's wait for global tokens (`RedisEngine.acquire`).
#[napi]
pub struct RedisAcquisition {
    inner: Mutex<Acquisition>,
}

impl RedisAcquisition {
    fn lock(&self) -> std::sync::MutexGuard<'_, Acquisition> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A reservation granted: act after `delay` seconds.
#[napi(object, object_from_js = false)]
pub struct Granted {
    /// Seconds until the tokens are due.
    pub delay: f64,
    /// Which path answered (`'redis'`, `'lease'`, `'fail_open'`, ...).
    pub source: &'static str,
    /// The end of the slot the tokens took, in µs of Redis' clock (the
    /// bucket's TAT as the reservation left it), for `giveBack`; absent
    /// when Redis did not answer.
    pub end_us: Option<f64>,
}

/// What became of a pause, and what to tell the other instances.
#[napi(object, object_from_js = false)]
pub struct PauseNews {
    /// The shift the pause gave the reserved slots, in seconds (0: a pause
    /// already on covered it).
    pub shift: f64,
    /// The message to `PUBLISH` on `pauseChannel`; absent when there is
    /// nothing to tell (a zero shift). This engine's own waiters are told
    /// already.
    pub news: Option<Buffer>,
}

/// What became of an adapt of the learned word, and what to tell the
/// other instances.
#[napi(object, object_from_js = false)]
pub struct AdaptNews {
    /// Whether the word was replaced (false: another instance changed it
    /// first, or Redis could not be told).
    pub replaced: bool,
    /// The message to `PUBLISH` on `pauseChannel`; absent when there is
    /// nothing to tell (not replaced).
    pub news: Option<Buffer>,
}

/// A wait that cannot end within its timeout.
#[napi(object, object_from_js = false)]
pub struct Exceeded {
    /// Seconds the tokens would need.
    pub retry_after: f64,
}

fn seconds(env: &Env, name: &'static str, v: Option<f64>) -> Result<Option<Duration>> {
    v.map(|t| any::seconds(name, t)).transpose().or_throw(env)
}

fn granted(r: Reserved) -> Either<Granted, Exceeded> {
    match r {
        Reserved::Granted {
            wait,
            source,
            end_us,
            ..
        } => Either::A(Granted {
            delay: wait.as_secs_f64(),
            source: source.as_str(),
            // Redis' µs are below 2^53: exact as a double.
            end_us: end_us.map(|e| e as f64),
        }),
        Reserved::Refused { wait, .. } | Reserved::Retry { wait, .. } => Either::B(Exceeded {
            retry_after: wait.as_secs_f64(),
        }),
    }
}

impl RedisEngine {
    /// Runs `f` with the raw bytes of a JS key (a string's UTF-8, a
    /// number's decimal text, a `Uint8Array`'s bytes: what Redis stores
    /// after the prefix), its error thrown.
    pub(crate) fn with_raw<R>(
        &self,
        env: &Env,
        key: Unknown<'_>,
        f: impl FnOnce(&[u8]) -> std::result::Result<R, CoreError>,
    ) -> Result<R> {
        let r = js_key(env, &key, |k| match k {
            Key::Text(s) => f(s.as_bytes()),
            Key::Bytes(b) => f(b),
            Key::Int(i) => f(i.to_string().as_bytes()),
        })?;
        r.or_throw(env)
    }
}

#[napi]
impl RedisEngine {
    /// A wait for `n` (default 1) tokens for `key` (within `scope`),
    /// failing if it cannot end within `timeout` seconds (none: as long as
    /// it takes).
    ///
    /// @throws {RangeError} `ERR_RATEBOUND_INVALID_NUMBER` for a bad `n` or
    /// timeout, `ERR_RATEBOUND_INSUFFICIENT_CAPACITY` for `n` above the burst.
    #[napi(
        ts_args_type = "key: string | number | Uint8Array, n?: number, timeout?: number | null, scope?: string | null"
    )]
    pub fn acquire(
        &self,
        env: Env,
        key: Unknown<'_>,
        n: Option<f64>,
        timeout: Option<f64>,
        scope: Option<String>,
    ) -> Result<RedisAcquisition> {
        let n = tokens(&env, n)?;
        let timeout = seconds(&env, "timeout", timeout)?;
        let a = self.with_raw(&env, key, |k| {
            self.engine.acquire(scope.as_deref(), k, n, timeout)
        })?;
        Ok(RedisAcquisition {
            inner: Mutex::new(a),
        })
    }

    /// What the wait does next: a `RedisCall` (run it, then
    /// `acquireReply`), a number (sleep that many seconds, then step
    /// again), a string (done: the source that answered), or
    /// `{ retryAfter }` — it cannot end within its timeout (nothing taken).
    #[napi(ts_return_type = "RedisCall | number | string | Exceeded")]
    pub fn acquire_step(
        &self,
        env: Env,
        a: &RedisAcquisition,
    ) -> Result<Either4<RedisCall, f64, &'static str, Exceeded>> {
        Ok(match self.engine.acquire_step(&mut a.lock()) {
            Ok(Step::Call(call)) => Either4::A(RedisCall { call }),
            Ok(Step::Sleep(d)) => Either4::B(d.as_secs_f64()),
            Ok(Step::Done(source)) => Either4::C(source.as_str()),
            Err(CoreError::DeadlineExceeded { wait, .. }) => Either4::D(Exceeded {
                retry_after: wait.as_secs_f64(),
            }),
            Err(e) => return Err::<_, CoreError>(e).or_throw(&env),
        })
    }

    /// Hands the wait what became of the call its last step gave.
    #[napi(
        ts_args_type = "a: RedisAcquisition, reply: unknown, timedOut?: boolean, error?: string | null, unsent?: boolean"
    )]
    pub fn acquire_reply(
        &self,
        a: &RedisAcquisition,
        reply: Option<Unknown<'_>>,
        timed_out: Option<bool>,
        error: Option<String>,
        unsent: Option<bool>,
    ) -> Result<()> {
        with_outcome(reply, timed_out, error, unsent, |o| {
            self.engine.acquire_reply(&mut a.lock(), o);
        })
    }

    /// The caller gave up: the call that gives held tokens back, or null.
    #[napi]
    pub fn acquire_abandon(&self, a: &RedisAcquisition) -> Option<RedisCall> {
        self.engine
            .acquire_abandon(&mut a.lock())
            .map(|call| RedisCall { call })
    }

    /// Step one of a reservation of `n` for `key` due within `maxWait`
    /// seconds (none: any wait): answered already (a lease, the fail
    /// policy: `Granted`, or `Exceeded` — refused, nothing taken) or a
    /// `RedisCall` for `finishReserve`.
    ///
    /// @throws {Error} `ERR_RATEBOUND_UNSUPPORTED` for a window.
    #[napi(
        ts_args_type = "key: string | number | Uint8Array, n?: number, maxWait?: number | null, scope?: string | null",
        ts_return_type = "Granted | Exceeded | RedisCall"
    )]
    pub fn begin_reserve(
        &self,
        env: Env,
        key: Unknown<'_>,
        n: Option<f64>,
        max_wait: Option<f64>,
        scope: Option<String>,
    ) -> Result<Either3<Granted, Exceeded, RedisCall>> {
        let n = tokens(&env, n)?;
        let max_wait = seconds(&env, "maxWait", max_wait)?.unwrap_or(Duration::MAX);
        let begun = self.with_raw(&env, key, |k| {
            self.engine.begin_reserve(scope.as_deref(), k, n, max_wait)
        })?;
        Ok(match begun {
            ReserveBegin::Done(r) => match granted(r) {
                Either::A(g) => Either3::A(g),
                Either::B(x) => Either3::B(x),
            },
            ReserveBegin::Call(call) => Either3::C(RedisCall { call }),
        })
    }

    /// Step two of a reservation: `Granted`, or `Exceeded` when the tokens
    /// are due only beyond its maxWait (nothing taken).
    #[napi(
        ts_args_type = "call: RedisCall, reply: unknown, timedOut?: boolean, error?: string | null, unsent?: boolean",
        ts_return_type = "Granted | Exceeded"
    )]
    pub fn finish_reserve(
        &self,
        call: &RedisCall,
        reply: Option<Unknown<'_>>,
        timed_out: Option<bool>,
        error: Option<String>,
        unsent: Option<bool>,
    ) -> Result<Either<Granted, Exceeded>> {
        Ok(granted(with_outcome(
            reply,
            timed_out,
            error,
            unsent,
            |o| self.engine.finish_reserve(&call.call, o),
        )?))
    }

    /// The call that gives a reservation's tokens back (`reserveCall`: the
    /// call that took them; `endUs`: the end of their slot, its
    /// `Granted.endUs`). Redis takes them back only if nothing was built
    /// on them since (no later reservation, no pause).
    ///
    /// @throws {RangeError} `ERR_RATEBOUND_INVALID_NUMBER` for an `endUs`
    /// that is not a whole number of µs from 0 to 2^53 − 1.
    #[napi]
    pub fn give_back(&self, env: Env, reserve_call: &RedisCall, end_us: f64) -> Result<RedisCall> {
        if !(end_us.is_finite()
            && end_us >= 0.0
            && end_us.fract() == 0.0
            && end_us < 9_007_199_254_740_992.0)
        {
            return Err(CoreError::InvalidNumber {
                name: "endUs",
                value: end_us.to_string(),
                reason: "the end of a slot is a whole number of µs from 0 to 2^53 - 1",
            })
            .or_throw(&env);
        }
        Ok(RedisCall {
            call: self.engine.give_back(&reserve_call.call, end_us as u64),
        })
    }

    /// Whether a give-back's outcome says Redis took the tokens back
    /// (false: built on since, or the call failed).
    #[napi(ts_args_type = "reply: unknown, timedOut?: boolean, error?: string | null")]
    pub fn given_back(
        &self,
        reply: Option<Unknown<'_>>,
        timed_out: Option<bool>,
        error: Option<String>,
    ) -> Result<bool> {
        with_outcome(reply, timed_out, error, None, ratebound_redis::given_back)
    }

    /// The call that pauses `key` for `seconds` for every instance.
    ///
    /// @throws {RangeError} `ERR_RATEBOUND_INVALID_NUMBER` for a bad
    /// duration; {Error} `ERR_RATEBOUND_UNSUPPORTED` for a window.
    #[napi(
        ts_args_type = "key: string | number | Uint8Array, seconds: number, scope?: string | null"
    )]
    pub fn begin_pause(
        &self,
        env: Env,
        key: Unknown<'_>,
        seconds: f64,
        scope: Option<String>,
    ) -> Result<RedisCall> {
        let d = any::pause_seconds(seconds).or_throw(&env)?;
        let call = self.with_raw(&env, key, |k| {
            self.engine.begin_pause(scope.as_deref(), k, d)
        })?;
        Ok(RedisCall { call })
    }

    /// The call that lifts the pause on `key` for every instance if nothing
    /// was built on it (one script run, on Redis' clock).
    ///
    /// @throws {Error} `ERR_RATEBOUND_UNSUPPORTED` for a window.
    #[napi(ts_args_type = "key: string | number | Uint8Array, scope?: string | null")]
    pub fn begin_resume(
        &self,
        env: Env,
        key: Unknown<'_>,
        scope: Option<String>,
    ) -> Result<RedisCall> {
        let call = self.with_raw(&env, key, |k| self.engine.begin_resume(scope.as_deref(), k))?;
        Ok(RedisCall { call })
    }

    /// What became of a resume: `'lifted'`, `'not_paused'` or `'queued'`,
    /// or null when Redis could not be told.
    #[napi(
        ts_args_type = "reply: unknown, timedOut?: boolean, error?: string | null, unsent?: boolean",
        ts_return_type = "'lifted' | 'not_paused' | 'queued' | null"
    )]
    pub fn finish_resume(
        &self,
        reply: Option<Unknown<'_>>,
        timed_out: Option<bool>,
        error: Option<String>,
        unsent: Option<bool>,
    ) -> Result<Option<&'static str>> {
        with_outcome(reply, timed_out, error, unsent, |o| {
            self.engine.finish_resume(o).map(|r| r.as_str())
        })
    }

    /// Pauses `key` for `seconds` in this process's local share (the limit
    /// of `onError: 'local'`), for a pause Redis could not be told of;
    /// whether there was a local share to pause.
    ///
    /// @throws {RangeError} `ERR_RATEBOUND_INVALID_NUMBER` for a bad
    /// duration.
    #[napi(
        ts_args_type = "key: string | number | Uint8Array, seconds: number, scope?: string | null"
    )]
    pub fn pause_local(
        &self,
        env: Env,
        key: Unknown<'_>,
        seconds: f64,
        scope: Option<String>,
    ) -> Result<bool> {
        let d = any::seconds("seconds", seconds).or_throw(&env)?;
        self.with_raw(&env, key, |k| {
            Ok(self.engine.pause_local(scope.as_deref(), k, d))
        })
    }

    /// What became of the pause `call` and the news to publish for the
    /// waiters of the other instances (`{ shift, news }`), or null when
    /// Redis could not be told.
    #[napi(
        ts_args_type = "call: RedisCall, reply: unknown, timedOut?: boolean, error?: string | null, unsent?: boolean"
    )]
    pub fn finish_pause_news(
        &self,
        call: &RedisCall,
        reply: Option<Unknown<'_>>,
        timed_out: Option<bool>,
        error: Option<String>,
        unsent: Option<bool>,
    ) -> Result<Option<PauseNews>> {
        let paused = with_outcome(reply, timed_out, error, unsent, |o| {
            self.engine.finish_pause(o)
        })?;
        Ok(paused.map(|(start_us, shift)| PauseNews {
            shift: shift.as_secs_f64(),
            news: self
                .engine
                .pause_news(&call.call, start_us, shift)
                .map(Buffer::from),
        }))
    }

    /// `key`'s learned word (internal: the outbound adapters), a `u64` in
    /// decimal: the one the last reply for the key carried (no I/O; `'0'`,
    /// nothing learned, before any).
    #[napi(ts_args_type = "key: string | number | Uint8Array, scope?: string | null")]
    pub fn learned_word(
        &self,
        env: Env,
        key: Unknown<'_>,
        scope: Option<String>,
    ) -> Result<String> {
        let learned = self.with_raw(&env, key, |k| Ok(self.engine.learned(scope.as_deref(), k)))?;
        Ok(crate::outbound::word(learned))
    }

    /// The rate in force for `key` after what the outbound adapters of
    /// every instance learned of its partner's real limit, in tokens per
    /// second (as the last reply for the key carried it; no I/O): the
    /// configured rate while nothing is learned.
    ///
    /// @throws {TypeError} `ERR_RATEBOUND_UNSUPPORTED` for a window (it
    /// does not learn), `ERR_INVALID_ARG_TYPE` for a bad key.
    #[napi(ts_args_type = "key: string | number | Uint8Array, scope?: string | null")]
    pub fn learned_rate(&self, env: Env, key: Unknown<'_>, scope: Option<String>) -> Result<f64> {
        let algorithm = self.engine.config().algorithm;
        self.with_raw(&env, key, |k| {
            crate::shared::learned_rate(algorithm, self.engine.learned(scope.as_deref(), k))
        })
    }

    /// The call that replaces `key`'s learned word `seen` with `next` for
    /// every instance if it is still `seen` (words: `u64`s in decimal;
    /// internal: the outbound adapters' `'adapt'`), or null when Redis
    /// cannot be told now (the breaker is open: nothing is learned).
    ///
    /// @throws {TypeError} `ERR_INVALID_ARG_TYPE` for a word that is not a
    /// `u64` in decimal or a bad key, `ERR_RATEBOUND_UNSUPPORTED` for a
    /// window.
    #[napi(
        ts_args_type = "key: string | number | Uint8Array, seen: string, next: string, scope?: string | null"
    )]
    pub fn begin_adapt(
        &self,
        env: Env,
        key: Unknown<'_>,
        seen: String,
        next: String,
        scope: Option<String>,
    ) -> Result<Option<RedisCall>> {
        let seen = crate::outbound::word_of(&env, "seen", &seen)?;
        let next = crate::outbound::word_of(&env, "next", &next)?;
        self.with_raw(&env, key, |k| {
            match self.engine.begin_adapt(scope.as_deref(), k, seen, next) {
                Ok(call) => Ok(Some(RedisCall { call })),
                Err(CoreError::StoreUnavailable { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })
    }

    /// What became of the adapt `call` (`replaced`: false when another
    /// instance had changed it first, or Redis could not be told — nothing
    /// learned: the next answer proposes again) and the news to publish on
    /// `pauseChannel` for the other instances' waiters (`news`, null:
    /// nothing to tell; `Engine::finish_adapt_news`).
    #[napi(
        ts_args_type = "call: RedisCall, reply: unknown, timedOut?: boolean, error?: string | null, unsent?: boolean"
    )]
    pub fn finish_adapt(
        &self,
        call: &RedisCall,
        reply: Option<Unknown<'_>>,
        timed_out: Option<bool>,
        error: Option<String>,
        unsent: Option<bool>,
    ) -> Result<AdaptNews> {
        let (replaced, news) = with_outcome(reply, timed_out, error, unsent, |o| {
            self.engine
                .finish_adapt_news(&call.call, o)
                .unwrap_or((false, None))
        })?;
        Ok(AdaptNews {
            replaced,
            news: news.map(Buffer::from),
        })
    }

    /// The pub/sub channel of this prefix's pause news (`'rb:pause'`).
    #[napi(getter)]
    pub fn pause_channel(&self) -> String {
        String::from_utf8_lossy(&self.engine.pause_channel()).into_owned()
    }

    /// Takes in a message heard on `pauseChannel`; whether it was news
    /// (malformed, foreign or known messages are ignored). Waits that hold
    /// a reservation the pause moved sleep on at their next step.
    #[napi]
    pub fn hear(&self, message: Buffer) -> bool {
        self.engine.hear(&message)
    }

    /// What became of a pause: the shift it gave the reserved slots in
    /// seconds (0: a pause already on covered it), or null when Redis could
    /// not be told.
    #[napi(
        ts_args_type = "reply: unknown, timedOut?: boolean, error?: string | null, unsent?: boolean"
    )]
    pub fn finish_pause(
        &self,
        reply: Option<Unknown<'_>>,
        timed_out: Option<bool>,
        error: Option<String>,
        unsent: Option<bool>,
    ) -> Result<Option<f64>> {
        with_outcome(reply, timed_out, error, unsent, |o| {
            self.engine.finish_pause(o).map(|(_, s)| s.as_secs_f64())
        })
    }
}
