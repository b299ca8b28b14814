//! `KeyedLimiter`: one limit per key, keys off the JavaScript heap.

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi::{JsValue, sys};
use napi_derive::napi;
use ratebound::any::{self, AnyKeyed, Key};

use crate::error::OrThrow;
use crate::fast::{self, key_error, with_key};
use crate::limiters::{
    Decision, HOST_MAX_SLEEP, ManualClock, Waiter, clock_of, core_step, loose_number, loose_rate,
    rate_of, tokens,
};
use crate::slab::Registered;

/// Options of `new KeyedLimiter(...)`.
#[napi(object, object_to_js = false)]
pub struct KeyedLimiterOptions<'a> {
    /// The per-key algorithm: `'token_bucket'` (the default, with `rate` and
    /// `burst`), `'fixed_window'` or `'sliding_window'` (with `limit` and
    /// `window`).
    pub algorithm: Option<String>,
    /// Tokens per second per key, or a quota string (token bucket).
    #[napi(ts_type = "number | string")]
    pub rate: Option<Unknown<'a>>,
    /// The most tokens one key holds (token bucket).
    #[napi(ts_type = "number")]
    pub burst: Option<Unknown<'a>>,
    /// Requests per window per key (windows).
    #[napi(ts_type = "number")]
    pub limit: Option<Unknown<'a>>,
    /// The window in seconds (windows).
    #[napi(ts_type = "number")]
    pub window: Option<Unknown<'a>>,
    /// The most keys tracked at once (default: no cap; `cleanup()` and
    /// `cleanupIdle()` keep memory bounded).
    #[napi(ts_type = "number")]
    pub max_keys: Option<Unknown<'a>>,
    /// At the cap: `'evict'` the least recent key (the default) or
    /// `'reject'` new keys (their `check` throws `ERR_RATEBOUND_TOO_MANY_KEYS`).
    pub overflow: Option<String>,
    /// A `ManualClock` to decide with (default: the monotonic clock).
    pub clock: Option<&'static ManualClock>,
}

/// A per-key algorithm from JavaScript's loose options (`KeyedLimiter`,
/// `SharedKeyedLimiter`): types checked, the choice (and the default when
/// none is named) made by the core's `keyed_algorithm`.
pub fn keyed_algorithm_of(
    env: &Env,
    algorithm: &Option<String>,
    rate: &Option<Unknown<'_>>,
    burst: &Option<Unknown<'_>>,
    limit: &Option<Unknown<'_>>,
    window: &Option<Unknown<'_>>,
) -> Result<ratebound::KeyedAlgorithm> {
    let rate_option = loose_rate(env, rate)?;
    let rate = match &rate_option {
        Some(_) => Some(rate_of(&rate_option).or_throw(env)?),
        None => None,
    };
    let burst = loose_number(env, burst, "burst")?;
    let limit = loose_number(env, limit, "limit")?;
    let window = loose_number(env, window, "window")?;
    any::keyed_algorithm(algorithm.as_deref(), rate, burst, limit, window).or_throw(env)
}

/// One limit per key (API key, user id, IP): a token bucket, fixed window or
/// sliding window for each key, created on first use. Keys are strings, safe
/// integers or `Uint8Array`s (`'1'`, `1` and `Buffer.from('1')` are three
/// keys); each is stored as a 128-bit keyed fingerprint in native memory
/// (about 36 bytes per key, nothing on the V8 heap).
#[napi]
pub struct KeyedLimiter {
    inner: Registered<AnyKeyed>,
}

/// `f` of a JavaScript key argument (string, integer or Uint8Array), or the
/// key's `TypeError`/`RangeError`. A number is a key by the core's rule,
/// `Key::from_f64` (a whole number, at most 2^53 in magnitude); its
/// refusal is a `RangeError` with `ERR_RATEBOUND_INVALID_KEY` and the
/// core's message.
pub fn js_key<R>(env: &Env, key: &Unknown<'_>, f: impl FnOnce(Key<'_>) -> R) -> Result<R> {
    if key.get_type()? == ValueType::Number {
        let x = f64::from_unknown(*key)?;
        return match Key::from_f64(x) {
            Ok(k) => Ok(f(k)),
            Err(e) => Err(crate::error::throw_as(
                env,
                crate::error::Kind::Range,
                "ERR_RATEBOUND_INVALID_KEY",
                &e.to_string(),
            )),
        };
    }
    let raw_env: sys::napi_env = env.raw();
    // SAFETY: the env and the argument of the current call.
    #[allow(unsafe_code)]
    let r = unsafe { with_key(raw_env, key.raw(), f) };
    r.map_err(|e| key_error(env, e))
}

impl KeyedLimiter {
    fn key<R>(&self, env: &Env, key: &Unknown<'_>, f: impl FnOnce(Key<'_>) -> R) -> Result<R> {
        js_key(env, key, f)
    }

    /// The algorithm as configured (a token bucket's quota: the ceiling of
    /// what outbound adapters learn).
    pub(crate) fn keyed_algorithm(&self) -> ratebound::KeyedAlgorithm {
        self.inner.keyed_algorithm()
    }
}

#[napi]
impl KeyedLimiter {
    /// A keyed limiter: `{ rate, burst }` per key, or `{ algorithm:
    /// 'fixed_window' | 'sliding_window', limit, window }`.
    #[napi(constructor)]
    pub fn new(env: Env, options: Option<KeyedLimiterOptions<'_>>) -> Result<KeyedLimiter> {
        let o = options.ok_or_else(|| crate::error::invalid_type(&env, "options are required"))?;
        let algorithm =
            keyed_algorithm_of(&env, &o.algorithm, &o.rate, &o.burst, &o.limit, &o.window)?;
        let max_keys = match loose_number(&env, &o.max_keys, "maxKeys")? {
            Some(m) => Some(any::whole("maxKeys", m, 1).or_throw(&env)? as usize),
            None => None,
        };
        let overflow = any::overflow(o.overflow.as_deref()).or_throw(&env)?;
        let inner =
            AnyKeyed::new(algorithm, max_keys, overflow, clock_of(o.clock)).or_throw(&env)?;
        Ok(KeyedLimiter {
            inner: Registered::new(
                Arc::new(inner),
                fast::register_keyed,
                fast::unregister_keyed,
            ),
        })
    }

    /// Takes `n` (default 1) for `key` now if all `n` are there.
    ///
    /// @throws {RangeError} `ERR_RATEBOUND_INSUFFICIENT_CAPACITY` for more
    /// than a key ever holds; {Error} `ERR_RATEBOUND_TOO_MANY_KEYS` for a new
    /// key at the cap with `overflow: 'reject'`.
    #[napi(ts_args_type = "key: string | number | Uint8Array, n?: number")]
    pub fn check(&self, env: Env, key: Unknown<'_>, n: Option<f64>) -> Result<Decision> {
        let n = tokens(&env, n)?;
        self.key(&env, &key, |k| self.inner.check_n(k, n))?
            .map(Decision::from)
            .or_throw(&env)
    }

    /// Takes one (or `n`) for `key` now if it is there: the decision only.
    #[napi(ts_args_type = "key: string | number | Uint8Array, n?: number")]
    pub fn try_acquire(&self, env: Env, key: Unknown<'_>) -> Result<bool> {
        self.key(&env, &key, |k| self.inner.try_acquire(k))?
            .or_throw(&env)
    }

    /// How many `key` could take now.
    #[napi(ts_args_type = "key: string | number | Uint8Array")]
    pub fn available(&self, env: Env, key: Unknown<'_>) -> Result<f64> {
        Ok(self.key(&env, &key, |k| self.inner.available(k))? as f64)
    }

    /// Forgets `key`; whether it was tracked.
    #[napi(ts_args_type = "key: string | number | Uint8Array")]
    pub fn remove(&self, env: Env, key: Unknown<'_>) -> Result<bool> {
        self.key(&env, &key, |k| self.inner.remove(k))
    }

    /// Gives `key` a fresh (full) state.
    #[napi(ts_args_type = "key: string | number | Uint8Array")]
    pub fn reset(&self, env: Env, key: Unknown<'_>) -> Result<()> {
        self.key(&env, &key, |k| self.inner.reset(k))
    }

    /// Drops the keys whose state is fresh again (removing them changes no
    /// future decision); how many went.
    #[napi]
    pub fn cleanup(&self) -> f64 {
        self.inner.cleanup() as f64
    }

    /// Drops the keys idle for at least `seconds`; how many went.
    #[napi]
    pub fn cleanup_idle(&self, env: Env, seconds: f64) -> Result<f64> {
        let idle = any::seconds("seconds", seconds).or_throw(&env)?;
        Ok(self.inner.cleanup_idle(idle) as f64)
    }

    /// Keys tracked.
    #[napi(getter)]
    pub fn size(&self) -> f64 {
        self.inner.len() as f64
    }

    /// The cap on tracked keys.
    #[napi(getter)]
    pub fn max_keys(&self) -> f64 {
        self.inner.max_keys() as f64
    }

    /// The algorithm: `'token_bucket'`, `'fixed_window'` or `'sliding_window'`.
    #[napi(getter)]
    pub fn algorithm(&self) -> &'static str {
        self.inner.algorithm()
    }

    /// The slot of the fast entry points (internal).
    #[napi(getter, skip_typescript)]
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    /// Empties `key`'s token bucket for `seconds`, refilling at the rate
    /// afterwards (see `TokenBucket.pause`).
    ///
    /// @throws {RangeError} `ERR_RATEBOUND_INVALID_NUMBER` for bad
    /// `seconds`; {TypeError} `ERR_RATEBOUND_UNSUPPORTED` for the windows.
    #[napi(ts_args_type = "key: string | number | Uint8Array, seconds: number")]
    pub fn pause(&self, env: Env, key: Unknown<'_>, seconds: f64) -> Result<()> {
        self.key(&env, &key, |k| self.inner.pause(k, seconds))?
            .or_throw(&env)
    }

    /// Lifts `key`'s pause now: `'lifted'` (empty now, refilling at the
    /// rate from now on) or `'not_paused'` (a key never has reservations
    /// behind its pause).
    ///
    /// @throws {TypeError} `ERR_RATEBOUND_UNSUPPORTED` for the windows.
    #[napi(
        ts_args_type = "key: string | number | Uint8Array",
        ts_return_type = "'lifted' | 'not_paused' | 'queued'"
    )]
    pub fn resume(&self, env: Env, key: Unknown<'_>) -> Result<&'static str> {
        self.key(&env, &key, |k| self.inner.resume(k))?
            .map(|r| r.as_str())
            .or_throw(&env)
    }

    /// The rate in force for `key` after what the outbound adapters calling
    /// through this limiter learned of its partner's real limit (the
    /// adapters' key: each request's host unless they were given one; the
    /// limiter keeps it beside the key's state, and drops it with the
    /// key), in tokens per second: the configured rate while nothing is
    /// learned.
    ///
    /// @throws {TypeError} `ERR_RATEBOUND_UNSUPPORTED` for a window (which
    /// does not learn), `ERR_INVALID_ARG_TYPE` for a bad key.
    #[napi(ts_args_type = "key: string | number | Uint8Array")]
    pub fn learned_rate(&self, env: Env, key: Unknown<'_>) -> Result<f64> {
        let learned = self.key(&env, &key, |k| self.inner.learned(k))?;
        crate::shared::learned_rate(self.inner.keyed_algorithm(), learned).or_throw(&env)
    }

    /// `key`'s learned word (internal: the outbound adapters), a `u64` in
    /// decimal.
    #[napi(skip_typescript)]
    pub fn learned_word(&self, env: Env, key: Unknown<'_>) -> Result<String> {
        let learned = self.key(&env, &key, |k| self.inner.learned(k))?;
        Ok(crate::outbound::word(learned))
    }

    /// Replaces `key`'s learned word `seen` with `next` if it is still
    /// `seen` (internal: the outbound adapters' `'adapt'` step); whether it
    /// did.
    #[napi(skip_typescript)]
    pub fn adapt_word(
        &self,
        env: Env,
        key: Unknown<'_>,
        seen: String,
        next: String,
    ) -> Result<bool> {
        let seen = crate::outbound::word_of(&env, "seen", &seen)?;
        let next = crate::outbound::word_of(&env, "next", &next)?;
        self.key(&env, &key, |k| self.inner.adapt(k, seen, next))?
            .or_throw(&env)
    }

    /// A wait for `n` tokens of some key (internal: `acquire`).
    #[napi(skip_typescript)]
    pub fn waiter(&self, env: Env, n: Option<f64>, timeout: Option<f64>) -> Result<Waiter> {
        let n = tokens(&env, n)?;
        Waiter::new(&env, self.inner.waiter(n, timeout, HOST_MAX_SLEEP))
    }

    /// One step of a wait for `key` (internal: `acquire`).
    #[napi(skip_typescript)]
    pub fn wait_step(&self, env: Env, waiter: &Waiter, key: Unknown<'_>) -> Result<Vec<f64>> {
        let step = self.key(&env, &key, |k| {
            self.inner.wait_step(&mut waiter.state.borrow_mut(), k)
        })?;
        core_step(&env, step)
    }
}
