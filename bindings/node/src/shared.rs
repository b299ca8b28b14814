//! `SharedTokenBucket` and `SharedKeyedLimiter`: limits shared by every
//! process on the host (cluster workers, PM2 instances) through a
//! file-backed memory map (crate `ratebound-shm`). Conversions only.

use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratebound::KeyedAlgorithm;
use ratebound::any::{self, Key};
use ratebound::outbound::{Learned, Learning};
use ratebound_shm::{Error as ShmError, SharedKeyedLimiter as ShmKeyed, SharedLimiter};

use std::cell::Cell;
use std::sync::Arc;

use crate::error::{Kind, OrThrow, throw, throw_as};
use crate::limiters::{
    Decision, HOST_MAX_SLEEP, Holder, Reservation, Waiter, loose_number, loose_rate, rate_of,
    step_to_js, tokens,
};

/// The rate of `learned` under a token bucket's configured quota (the
/// ceiling), in tokens per second; a window does not learn.
pub(crate) fn learned_rate(
    algorithm: KeyedAlgorithm,
    learned: Learned,
) -> std::result::Result<f64, ratebound::Error> {
    match algorithm {
        KeyedAlgorithm::TokenBucket(q) => Ok(Learning::new(q).rate(learned)),
        other => Err(ratebound::Error::Unsupported {
            operation: "learning a partner's limit (a token bucket learns)",
            algorithm: other.name(),
        }),
    }
}

/// A wait step for JavaScript (see `limiters::step_to_js`), from a shared
/// limiter.
fn shm_step(
    env: &Env,
    step: std::result::Result<ratebound::wait::Step, ShmError>,
) -> Result<Vec<f64>> {
    step_to_js(
        env,
        step,
        |e| match e {
            ShmError::Limit(ratebound::Error::DeadlineExceeded { wait, .. }) => Some(*wait),
            _ => None,
        },
        shm_throw,
    )
}

/// A wait the table made, or its error thrown.
fn shm_waiter(env: &Env, made: std::result::Result<any::Waiter, ShmError>) -> Result<Waiter> {
    let made = made.or_throw(env)?;
    Waiter::new(env, Ok(made))
}

/// `seconds` as a pause's duration.
fn pause_of(env: &Env, seconds: f64) -> Result<std::time::Duration> {
    any::pause_seconds(seconds).or_throw(env)
}

/// A shared-memory error as a JavaScript error: the core's for limiter
/// errors; otherwise an `Error` with `code` `ERR_RATEBOUND_SHM_IO`,
/// `_SHM_MISMATCH`, `_SHM_CORRUPT`, `_SHM_PERMISSIONS` or `_SHM_STALE_BOOT`
/// and a message naming the file.
fn shm_throw(env: &Env, e: ShmError) -> napi::Error {
    match e {
        ShmError::Limit(core) => throw(env, &core),
        other => {
            let code = format!("ERR_RATEBOUND_{}", other.code().to_ascii_uppercase());
            throw_as(env, Kind::Plain, &code, &other.to_string())
        }
    }
}

/// A shared-memory result, its error thrown by [`shm_throw`].
impl<T> OrThrow<T> for std::result::Result<T, ShmError> {
    fn or_throw(self, env: &Env) -> Result<T> {
        self.map_err(|e| shm_throw(env, e))
    }
}

/// Options of `new SharedTokenBucket(...)`.
#[napi(object, object_to_js = false)]
pub struct SharedTokenBucketOptions<'a> {
    /// The file every process opens (e.g. under `/dev/shm`); made with mode
    /// 0600 if missing.
    pub path: String,
    /// Tokens per second, or a quota string (`'10/s burst 20'`).
    #[napi(ts_type = "number | string")]
    pub rate: Option<Unknown<'a>>,
    /// The most tokens held at once.
    #[napi(ts_type = "number")]
    pub burst: Option<Unknown<'a>>,
}

/// A token bucket shared by every process that opens `path`: one burst and
/// one refill for all of them, updated lock-free in shared memory.
#[napi]
pub struct SharedTokenBucket {
    inner: Arc<SharedLimiter>,
}

impl SharedTokenBucket {
    /// The algorithm and its parameters (the adapters' ceiling).
    pub(crate) fn keyed_algorithm(&self) -> KeyedAlgorithm {
        self.inner.algorithm()
    }
}

#[napi]
impl SharedTokenBucket {
    /// Opens (or makes) the shared bucket at `path`.
    ///
    /// @throws {Error} `ERR_RATEBOUND_SHM_MISMATCH` when the file holds
    /// another limit, `_SHM_CORRUPT`, `_SHM_PERMISSIONS`, `_SHM_IO` (a
    /// missing directory); {RangeError}/{TypeError} for a bad rate or burst.
    #[napi(constructor)]
    pub fn new(
        env: Env,
        options: Option<SharedTokenBucketOptions<'_>>,
    ) -> Result<SharedTokenBucket> {
        let o = options.ok_or_else(|| crate::error::invalid_type(&env, "options are required"))?;
        let rate = loose_rate(&env, &o.rate)?;
        let burst = loose_number(&env, &o.burst, "burst")?;
        let quota = rate_of(&rate)
            .and_then(|r| any::quota(r, burst))
            .or_throw(&env)?;
        let inner =
            SharedLimiter::open(&o.path, KeyedAlgorithm::TokenBucket(quota)).or_throw(&env)?;
        Ok(SharedTokenBucket {
            inner: Arc::new(inner),
        })
    }

    /// Takes `n` (default 1) now if all `n` are there, for every process.
    #[napi]
    pub fn check(&self, env: Env, n: Option<f64>) -> Result<Decision> {
        let n = tokens(&env, n)?;
        self.inner.check_n(n).map(Decision::from).or_throw(&env)
    }

    /// Takes one (or `n`) now if it is there: the decision only.
    #[napi(ts_args_type = "n?: number")]
    pub fn try_acquire(&self, env: Env) -> Result<bool> {
        self.inner.check().map(|d| d.is_allowed()).or_throw(&env)
    }

    /// Tokens available now.
    #[napi]
    pub fn available(&self) -> f64 {
        self.inner.available() as f64
    }

    /// Takes `n` tokens (default 1) now on the shared word even if they
    /// are not there yet, as long as they will be within `maxWait` seconds
    /// (default: any wait), for every process: act after
    /// `reservation.delay` seconds, or `cancel()` to give them back.
    ///
    /// @throws {RangeError} `ERR_RATEBOUND_DEADLINE_EXCEEDED` (nothing
    /// taken) when the wait would be longer.
    #[napi]
    pub fn reserve(&self, env: Env, n: Option<f64>, max_wait: Option<f64>) -> Result<Reservation> {
        let n = tokens(&env, n)?;
        let max_wait = match max_wait {
            Some(m) => any::seconds("maxWait", m).or_throw(&env)?,
            None => std::time::Duration::MAX,
        };
        let r = self.inner.reserve_n(n, max_wait).or_throw(&env)?;
        let wait = u64::try_from(r.delay().as_nanos()).unwrap_or(u64::MAX);
        Ok(Reservation {
            limiter: Holder::Shared(self.inner.clone()),
            permit: Cell::new(Some(r.into_permit())),
            wait,
        })
    }

    /// Empties the bucket for every process for `seconds`, refilling at the
    /// rate afterwards; a pause ending no later than one already on changes
    /// nothing, reservations already held keep their time.
    ///
    /// @throws {RangeError} `ERR_RATEBOUND_INVALID_NUMBER` for `seconds`
    /// that are not a finite number ≥ 0.
    #[napi]
    pub fn pause(&self, env: Env, seconds: f64) -> Result<()> {
        let d = pause_of(&env, seconds)?;
        self.inner.pause(d).or_throw(&env)
    }

    /// Lifts the pause for every process now if nothing was built on it:
    /// `'lifted'`, `'not_paused'` or `'queued'` (see `TokenBucket.resume`).
    #[napi(ts_return_type = "'lifted' | 'not_paused' | 'queued'")]
    pub fn resume(&self, env: Env) -> Result<&'static str> {
        self.inner.resume().map(|r| r.as_str()).or_throw(&env)
    }

    /// A wait for `n` tokens (internal: `acquire`).
    #[napi(skip_typescript)]
    pub fn waiter(&self, env: Env, n: Option<f64>, timeout: Option<f64>) -> Result<Waiter> {
        let n = tokens(&env, n)?;
        shm_waiter(&env, self.inner.waiter(n, timeout, HOST_MAX_SLEEP))
    }

    /// One step of a wait (internal: `acquire`).
    #[napi(skip_typescript)]
    pub fn wait_step(&self, env: Env, waiter: &Waiter) -> Result<Vec<f64>> {
        shm_step(&env, self.inner.wait_step(&mut waiter.state.borrow_mut()))
    }

    /// Ends a wait early, giving back what it holds (internal).
    #[napi(skip_typescript)]
    pub fn abandon_wait(&self, env: Env, waiter: &Waiter) -> Result<()> {
        self.inner
            .abandon(&mut waiter.state.borrow_mut())
            .or_throw(&env)
    }

    /// The burst.
    #[napi(getter)]
    pub fn limit(&self) -> f64 {
        self.inner.limit() as f64
    }

    /// The rate in force after what the outbound adapters of every process
    /// calling through this file learned of the partner's real limit
    /// (`rb.fetch`, `rb.axios`: `adaptive`; the file keeps it beside the
    /// bucket), in tokens per second: the configured rate while nothing is
    /// learned, never above it. One bucket holds one rate: a `key` is
    /// accepted (as a keyed limiter's gauge takes one) and changes nothing.
    #[napi(ts_args_type = "key?: string | number | Uint8Array")]
    pub fn learned_rate(&self, env: Env) -> Result<f64> {
        learned_rate(self.inner.algorithm(), self.inner.learned()).or_throw(&env)
    }

    /// The learned word (internal: the outbound adapters), a `u64` in
    /// decimal.
    #[napi(skip_typescript)]
    pub fn learned_word(&self) -> String {
        crate::outbound::word(self.inner.learned())
    }

    /// Replaces the learned word `seen` with `next` for every process if
    /// it is still `seen` (internal: the outbound adapters' `'adapt'`
    /// step); whether it did.
    #[napi(skip_typescript)]
    pub fn adapt_word(&self, env: Env, seen: String, next: String) -> Result<bool> {
        let seen = crate::outbound::word_of(&env, "seen", &seen)?;
        let next = crate::outbound::word_of(&env, "next", &next)?;
        self.inner.adapt(seen, next).or_throw(&env)
    }

    /// The algorithm: `'token_bucket'`, `'fixed_window'` or `'sliding_window'`.
    #[napi(getter)]
    pub fn algorithm(&self) -> &'static str {
        self.inner.algorithm().name()
    }

    /// The file the processes share.
    #[napi(getter)]
    pub fn path(&self) -> String {
        self.inner.path().display().to_string()
    }
}

/// Options of `new SharedKeyedLimiter(...)`.
#[napi(object, object_to_js = false)]
pub struct SharedKeyedLimiterOptions<'a> {
    /// The file every process opens; made with mode 0600 if missing.
    pub path: String,
    /// `'token_bucket'` (default, with `rate` and `burst`),
    /// `'fixed_window'` or `'sliding_window'` (with `limit` and `window`).
    pub algorithm: Option<String>,
    /// Tokens per second per key, or a quota string.
    #[napi(ts_type = "number | string")]
    pub rate: Option<Unknown<'a>>,
    /// The most tokens one key holds.
    #[napi(ts_type = "number")]
    pub burst: Option<Unknown<'a>>,
    /// Requests per window per key (windows).
    #[napi(ts_type = "number")]
    pub limit: Option<Unknown<'a>>,
    /// The window in seconds (windows).
    #[napi(ts_type = "number")]
    pub window: Option<Unknown<'a>>,
    /// Room for this many keys, fixed when the file is made (default
    /// 10 000).
    #[napi(ts_type = "number")]
    pub max_keys: Option<Unknown<'a>>,
}

/// One limit per key shared by every process that opens `path`, in a table
/// of fixed size. Keys are fingerprinted like `KeyedLimiter`'s (and
/// Python's): the same key is the same key in every language.
#[napi]
pub struct SharedKeyedLimiter {
    inner: ShmKeyed,
}

impl SharedKeyedLimiter {
    /// The algorithm, for a middleware that takes this limiter as a policy.
    pub fn algorithm(&self) -> KeyedAlgorithm {
        self.inner.algorithm()
    }

    fn key<R>(&self, env: &Env, key: &Unknown<'_>, f: impl FnOnce(Key<'_>) -> R) -> Result<R> {
        crate::keyed::js_key(env, key, f)
    }
}

#[napi]
impl SharedKeyedLimiter {
    /// Opens (or makes) the shared keyed limiter at `path`.
    ///
    /// @throws {Error} as `SharedTokenBucket`'s constructor.
    #[napi(constructor)]
    pub fn new(
        env: Env,
        options: Option<SharedKeyedLimiterOptions<'_>>,
    ) -> Result<SharedKeyedLimiter> {
        let o = options.ok_or_else(|| crate::error::invalid_type(&env, "options are required"))?;
        let algorithm = crate::keyed::keyed_algorithm_of(
            &env,
            &o.algorithm,
            &o.rate,
            &o.burst,
            &o.limit,
            &o.window,
        )?;
        let max = match loose_number(&env, &o.max_keys, "maxKeys")? {
            Some(m) => any::whole("maxKeys", m, 1).or_throw(&env)?,
            None => ratebound_shm::DEFAULT_SHARED_MAX_KEYS,
        };
        let inner = ShmKeyed::open(&o.path, algorithm, max).or_throw(&env)?;
        Ok(SharedKeyedLimiter { inner })
    }

    /// Takes `n` (default 1) for `key` now if all `n` are there.
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
        self.key(&env, &key, |k| self.inner.check(k))?
            .map(|d| d.is_allowed())
            .or_throw(&env)
    }

    /// How many `key` could take now.
    #[napi(ts_args_type = "key: string | number | Uint8Array")]
    pub fn available(&self, env: Env, key: Unknown<'_>) -> Result<f64> {
        Ok(self.key(&env, &key, |k| self.inner.available(k))? as f64)
    }

    /// Empties `key`'s token bucket for every process for `seconds`.
    ///
    /// @throws {RangeError} `ERR_RATEBOUND_INVALID_NUMBER` for bad
    /// `seconds`; {TypeError} `ERR_RATEBOUND_UNSUPPORTED` for a window.
    #[napi(ts_args_type = "key: string | number | Uint8Array, seconds: number")]
    pub fn pause(&self, env: Env, key: Unknown<'_>, seconds: f64) -> Result<()> {
        let d = pause_of(&env, seconds)?;
        self.key(&env, &key, |k| self.inner.pause(k, d))?
            .or_throw(&env)
    }

    /// Lifts `key`'s pause for every process now if nothing was built on
    /// it: `'lifted'`, `'not_paused'` or `'queued'`.
    ///
    /// @throws {TypeError} `ERR_RATEBOUND_UNSUPPORTED` for a window.
    #[napi(
        ts_args_type = "key: string | number | Uint8Array",
        ts_return_type = "'lifted' | 'not_paused' | 'queued'"
    )]
    pub fn resume(&self, env: Env, key: Unknown<'_>) -> Result<&'static str> {
        self.key(&env, &key, |k| self.inner.resume(k))?
            .map(|r| r.as_str())
            .or_throw(&env)
    }

    /// A wait for `n` tokens of some key (internal: `acquire`).
    #[napi(skip_typescript)]
    pub fn waiter(&self, env: Env, n: Option<f64>, timeout: Option<f64>) -> Result<Waiter> {
        let n = tokens(&env, n)?;
        shm_waiter(&env, self.inner.waiter(n, timeout, HOST_MAX_SLEEP))
    }

    /// One step of a wait for `key` (internal: `acquire`).
    #[napi(skip_typescript)]
    pub fn wait_step(&self, env: Env, waiter: &Waiter, key: Unknown<'_>) -> Result<Vec<f64>> {
        let step = self.key(&env, &key, |k| {
            self.inner.wait_step(&mut waiter.state.borrow_mut(), k)
        })?;
        shm_step(&env, step)
    }

    /// Ends a wait for `key` early, giving back what it holds (internal).
    #[napi(skip_typescript)]
    pub fn abandon_wait(&self, env: Env, waiter: &Waiter, key: Unknown<'_>) -> Result<()> {
        self.key(&env, &key, |k| {
            self.inner.abandon(&mut waiter.state.borrow_mut(), k)
        })?
        .or_throw(&env)
    }

    /// The most one check can take.
    #[napi(getter)]
    pub fn limit(&self) -> f64 {
        self.inner.limit() as f64
    }

    /// The algorithm: `'token_bucket'`, `'fixed_window'` or `'sliding_window'`.
    #[napi(getter, js_name = "algorithm")]
    pub fn algorithm_name(&self) -> &'static str {
        self.inner.algorithm().name()
    }

    /// The rate in force for `key` after what the outbound adapters of
    /// every process learned of its partner's real limit (the adapters'
    /// key: each request's host unless they were given one; the file keeps
    /// it in the key's slot), in tokens per second: the configured rate
    /// while nothing is learned.
    ///
    /// @throws {TypeError} `ERR_RATEBOUND_UNSUPPORTED` for a window (which
    /// does not learn), `ERR_INVALID_ARG_TYPE` for a bad key.
    #[napi(ts_args_type = "key: string | number | Uint8Array")]
    pub fn learned_rate(&self, env: Env, key: Unknown<'_>) -> Result<f64> {
        let learned = self.key(&env, &key, |k| self.inner.learned(k))?;
        learned_rate(self.inner.algorithm(), learned).or_throw(&env)
    }

    /// `key`'s learned word (internal: the outbound adapters), a `u64` in
    /// decimal.
    #[napi(skip_typescript)]
    pub fn learned_word(&self, env: Env, key: Unknown<'_>) -> Result<String> {
        let learned = self.key(&env, &key, |k| self.inner.learned(k))?;
        Ok(crate::outbound::word(learned))
    }

    /// Replaces `key`'s learned word `seen` with `next` for every process
    /// if it is still `seen` (internal: the outbound adapters' `'adapt'`
    /// step); whether it did.
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

    /// Slots in the table (twice `maxKeys`, at least 64).
    #[napi(getter)]
    pub fn slots(&self) -> f64 {
        self.inner.slots() as f64
    }

    /// Slots held by a key.
    #[napi(getter)]
    pub fn size(&self) -> f64 {
        self.inner.len() as f64
    }

    /// The file the processes share.
    #[napi(getter)]
    pub fn path(&self) -> String {
        self.inner.path().display().to_string()
    }
}
