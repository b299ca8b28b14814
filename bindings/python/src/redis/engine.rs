//! `_RedisEngine`, the sans-I/O engine of a global limit in Redis.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use ratebound::Error;
use ratebound::any;
use ratebound::outbound::{Learned, Learning};
use std::time::Duration;

use ratebound_redis::{Begin, Engine, ReserveBegin};

use super::acquisition::{RedisAcquisition, step_tuple};
use super::options::config;
use super::outcome::{Report, max_wait, reserved};
use super::{RedisCall, RedisStats, tell, with_raw_key};
use crate::convert::{clock_of, count, number, opt_seconds, seconds_of};
use crate::decision::Decision;
use crate::error::{OrPy, py_err};
use crate::keyed::keyed_algorithm_of;

/// The sans-I/O engine of a global limit in Redis (`ratebound_redis`):
/// it builds each call, turns each outcome into a `Decision`, and keeps
/// the fail policy, the circuit breaker and the leases. `ratebound.redis`
/// runs its calls with redis-py.
#[pyclass(name = "_RedisEngine", frozen, module = "ratebound")]
pub(crate) struct RedisEngine {
    pub(crate) inner: std::sync::Arc<Engine>,
}

/// The engine's Rust name before issue 25 (Python's `RedisEngine_`, now
/// `_RedisEngine`), kept for the gate's binding, which casts to it.
pub(crate) type RedisEngine_ = RedisEngine;

impl RedisEngine {
    fn decision(py: Python<'_>, d: ratebound_redis::RedisDecision) -> PyResult<Py<Decision>> {
        Py::new(
            py,
            Decision {
                inner: d.decision(),
                source: Some(d.source()),
            },
        )
    }
}

redis_pymethods! {
impl RedisEngine {
    #[new]
    #[pyo3(signature = (algorithm=None, *, rate=None, burst=None, limit=None, window=None, prefix=None, on_error=None, local_rate=None, timeout=None, lease=None, lease_ttl=None, breaker_threshold=None, breaker_cooldown=None, batch=None, clock=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        algorithm: Option<&str>,
        rate: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
        limit: Option<&Bound<'_, PyAny>>,
        window: Option<&Bound<'_, PyAny>>,
        prefix: Option<&str>,
        on_error: Option<&str>,
        local_rate: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        lease: Option<&Bound<'_, PyAny>>,
        lease_ttl: Option<&Bound<'_, PyAny>>,
        breaker_threshold: Option<&Bound<'_, PyAny>>,
        breaker_cooldown: Option<&Bound<'_, PyAny>>,
        batch: Option<&Bound<'_, PyAny>>,
        clock: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        // The clock of the breaker's cool-down, the leases, the local share
        // and the waits: a `ManualClock` puts them on a test's virtual time.
        let clock = clock_of(clock)?;
        let algorithm = keyed_algorithm_of(py, algorithm, [rate, burst, limit, window])?;
        let numbers = [
            ("local_rate", local_rate),
            ("timeout", timeout),
            ("lease", lease),
            ("lease_ttl", lease_ttl),
            ("breaker_threshold", breaker_threshold),
            ("breaker_cooldown", breaker_cooldown),
        ];
        let config = config(py, algorithm, prefix, on_error, numbers, batch)?;
        Ok(RedisEngine {
            inner: std::sync::Arc::new(Engine::with_clock(config, clock).or_py(py)?),
        })
    }



    /// What the wait does next: `("call", RedisCall)` (run it, then
    /// `acquire_reply`), `("sleep", seconds)` or `("done", source)`.
    /// Raises `RateLimitExceeded` when it cannot end within its timeout.
    fn acquire_step<'py>(
        &self,
        py: Python<'py>,
        a: &Bound<'py, RedisAcquisition>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let step = self.inner.acquire_step(&mut a.get().lock());
        tell(py, &self.inner);
        step_tuple(py, step.or_py(py)?)
    }

    /// The caller gave up: the call that gives held tokens back, if any.
    fn acquire_abandon(&self, a: &Bound<'_, RedisAcquisition>) -> Option<RedisCall> {
        self.inner
            .acquire_abandon(&mut a.get().lock())
            .map(|inner| RedisCall { inner })
    }


    /// The call that gives a reservation's tokens back (`reserve_call`: the
    /// call that took them; `end_us`: the end of their slot, the third item
    /// `finish_reserve` answered). Redis takes them back only if nothing was
    /// built on them since (no later reservation, no pause).
    fn give_back(&self, reserve_call: &Bound<'_, RedisCall>, end_us: u64) -> RedisCall {
        RedisCall {
            inner: self.inner.give_back(&reserve_call.get().inner, end_us),
        }
    }

    /// The pub/sub channel of this prefix's pause news (`"rb:pause"`).
    #[getter]
    fn pause_channel(&self) -> String {
        String::from_utf8_lossy(&self.inner.pause_channel()).into_owned()
    }

    /// Takes in a message heard on `pause_channel`; whether it was news
    /// (malformed, foreign or known messages are ignored). Waits that hold
    /// a reservation the pause moved sleep on at their next step.
    fn hear(&self, message: &[u8]) -> bool {
        self.inner.hear(message)
    }

    /// The calls that give every unspent leased token back (run them on
    /// close); the leases are forgotten. Their outcome needs no `finish`.
    fn drain(&self) -> Vec<RedisCall> {
        self.inner
            .drain()
            .into_iter()
            .map(|inner| RedisCall { inner })
            .collect()
    }

    /// Whether the circuit breaker is open (Redis is being spared).
    #[getter]
    fn breaker_open(&self) -> bool {
        self.inner.breaker_open()
    }

    /// What the decisions came from so far (`RedisStats`).
    #[getter]
    fn stats(&self) -> RedisStats {
        self.inner.stats().into()
    }

    /// Every call's deadline, in seconds.
    #[getter]
    fn timeout(&self) -> f64 {
        self.inner.timeout().as_secs_f64()
    }

    /// The algorithm's name.
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.inner.algorithm()
    }

    /// The most one key can take at once (burst, or limit).
    #[getter]
    fn limit(&self) -> u64 {
        self.inner.config().algorithm.capacity()
    }

    /// The key prefix.
    #[getter]
    fn prefix(&self) -> &str {
        &self.inner.config().prefix
    }

    /// The fail policy: `"open"`, `"closed"` or `"local"` (the outbound
    /// adapters warn about `"open"`).
    #[getter]
    fn on_error(&self) -> &'static str {
        self.inner.policy_name()
    }

    /// Leased tokens held now, over all keys.
    fn leased(&self) -> u64 {
        self.inner.leased()
    }

    /// For the outbound adapters: the word the fleet has learned of
    /// `key`'s partner (`ratebound::outbound::Learned`, as bits; 0: nothing
    /// learned), as the last reply of Redis for the key said — no I/O
    /// (`Engine::learned`).
    #[pyo3(signature = (key, scope=None))]
    fn learned(&self, key: &Bound<'_, PyAny>, scope: Option<&str>) -> PyResult<u64> {
        with_raw_key(key, |k| Ok(self.inner.learned(scope, k).to_bits()))
    }

    /// The rate learned of `key`'s partner in tokens per second (the
    /// configured rate when nothing is learned); `Unsupported` for a
    /// window, which does not learn.
    #[pyo3(signature = (key, scope=None))]
    fn learned_rate(&self, py: Python<'_>, key: &Bound<'_, PyAny>, scope: Option<&str>) -> PyResult<f64> {
        let learned = with_raw_key(key, |k| Ok(self.inner.learned(scope, k)))?;
        match self.inner.config().algorithm {
            ratebound::KeyedAlgorithm::TokenBucket(q) => Ok(Learning::new(q).rate(learned)),
            other => Err(py_err(
                py,
                Error::Unsupported {
                    operation: "learning a partner's limit (a token bucket learns)",
                    algorithm: other.name(),
                },
            )),
        }
    }

    /// The call that replaces `key`'s learned word `seen` with `next` for
    /// every instance if it is still `seen` (`Engine::begin_adapt`), for
    /// `finish_adapt`; None while the circuit breaker spares Redis (nothing
    /// is learned). `Unsupported` for a window.
    #[pyo3(signature = (key, seen, next, scope=None))]
    fn begin_adapt(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        seen: u64,
        next: u64,
        scope: Option<&str>,
    ) -> PyResult<Option<RedisCall>> {
        let (seen, next) = (Learned::from_bits(seen), Learned::from_bits(next));
        let begun = with_raw_key(key, |k| Ok(self.inner.begin_adapt(scope, k, seen, next)))?;
        tell(py, &self.inner);
        match begun {
            Ok(inner) => Ok(Some(RedisCall { inner })),
            Err(Error::StoreUnavailable { .. }) => Ok(None),
            Err(e) => Err(py_err(py, e)),
        }
    }

}

scoped {
    /// Step one of taking `n` (default 1) for `key` (str, bytes or int),
    /// within `scope` if given (a middleware's policy name: its own keys):
    /// a `Decision` already (a lease, or the fail policy while the breaker
    /// is open), or a `RedisCall` to run and pass to `finish`.
    fn begin(self, py, key, n, scope) -> PyResult<Py<PyAny>> {
        let n = count(py, n)?;
        match with_raw_key(key, |k| self.inner.begin_in(scope, k, n).or_py(py))? {
            Begin::Done(d) => Ok(Self::decision(py, d)?.into_any()),
            Begin::Call(call) => Ok(Py::new(py, RedisCall { inner: call })?.into_any()),
        }
    }

    /// A wait for `n` (default 1) tokens for `key`, within `scope` if
    /// given, failing if it cannot end within `timeout` seconds (None: as
    /// long as it takes); driven by `acquire_step`.
    fn acquire(self, py, key, n, scope; timeout) -> PyResult<RedisAcquisition> {
        let n = count(py, n)?;
        let timeout = opt_seconds(py, "timeout", timeout)?;
        let a = with_raw_key(key, |k| self.inner.acquire(scope, k, n, timeout).or_py(py))?;
        Ok(RedisAcquisition::new(a))
    }

    /// Step one of a reservation of `n` for `key` due within `max_wait`
    /// seconds (None: any wait): `(delay, source, None)` already (a lease, the
    /// fail policy) or a `RedisCall` for `finish_reserve`. Raises
    /// `RateLimitExceeded` when refused, taking nothing.
    fn begin_reserve(self, py, key, n, scope; max_wait) -> PyResult<Py<PyAny>> {
        let n = count(py, n)?;
        let max_wait = opt_seconds(py, "max_wait", max_wait)?.unwrap_or(Duration::MAX);
        let begun = with_raw_key(key, |k| {
            self.inner.begin_reserve(scope, k, n, max_wait).or_py(py)
        })?;
        match begun {
            ReserveBegin::Done(r) => Ok(reserved(py, r, max_wait)?.into_any().unbind()),
            ReserveBegin::Call(call) => Ok(Py::new(py, RedisCall { inner: call })?.into_any()),
        }
    }
}

keyed {
    /// The call that pauses `key` for `seconds` for every instance.
    fn begin_pause(self, py, key, scope; seconds) -> PyResult<RedisCall> {
        let d = any::pause_seconds(number(py, "seconds", seconds)?).or_py(py)?;
        let call = with_raw_key(key, |k| self.inner.begin_pause(scope, k, d).or_py(py))?;
        Ok(RedisCall { inner: call })
    }

    /// The call that lifts the pause on `key` for every instance if
    /// nothing was built on it (one script run, on Redis' clock).
    fn begin_resume(self, py, key, scope) -> PyResult<RedisCall> {
        let call = with_raw_key(key, |k| self.inner.begin_resume(scope, k).or_py(py))?;
        Ok(RedisCall { inner: call })
    }

    /// Pauses `key` for `seconds` in this process's local share (the
    /// limit of `on_error="local"`), for a pause Redis could not be told
    /// of; whether there was a local share to pause.
    fn pause_local(self, py, key, scope; seconds) -> PyResult<bool> {
        let d = seconds_of(py, "seconds", seconds)?;
        with_raw_key(key, |k| Ok(self.inner.pause_local(scope, k, d)))
    }
}

outcome {

    /// Step two: the decision from what became of `call` — its `reply` (the
    /// script's list of ints), `timed_out=True` (no reply within the
    /// deadline), `error` (a connection or server error's text), or
    /// `unsent=True` (it never left this client before its deadline: a
    /// full pool; refused as "busy", never the fail policy's). An error that
    /// says the store is misconfigured raises `StoreMisconfigured`.
    fn finish<'py>(self, py, report; call: &Bound<'py, RedisCall>) -> PyResult<Py<Decision>> {
        let call = &call.get().inner;
        let d = report.settle(py, &self.inner, |o| self.inner.finish(call, o))?;
        Self::decision(py, d)
    }

    /// Whether the adapt `call` replaced the learned word (False: another
    /// instance changed it first, or Redis did not answer — nothing is
    /// learned) and the news to `PUBLISH` on `pause_channel` for the other
    /// instances' waiters (None: nothing to tell; `Engine::finish_adapt_news`).
    fn finish_adapt<'py>(
        self, py, report; call: &Bound<'py, RedisCall>
    ) -> PyResult<(bool, Option<Bound<'py, PyBytes>>)> {
        let call = &call.get().inner;
        let done = report.settle(py, &self.inner, |o| self.inner.finish_adapt_news(call, o))?;
        let (replaced, news) = done.unwrap_or((false, None));
        Ok((replaced, news.map(|m| PyBytes::new(py, &m))))
    }

    /// Hands the wait what became of the call its last step gave.
    fn acquire_reply<'py>(self, py, report; a: &Bound<'py, RedisAcquisition>) -> PyResult<()> {
        report.settle(py, &self.inner, |o| {
            self.inner.acquire_reply(&mut a.get().lock(), o);
        })?;
        Ok(())
    }

    /// Step two of a reservation: `(delay, source, end_us)`, or
    /// `RateLimitExceeded` (nothing taken) when the tokens are due only
    /// beyond its max_wait.
    fn finish_reserve<'py>(
        self, py, report; call: &Bound<'py, RedisCall>
    ) -> PyResult<Bound<'py, PyTuple>> {
        let call = &call.get().inner;
        let r = report.settle(py, &self.inner, |o| self.inner.finish_reserve(call, o))?;
        reserved(py, r, max_wait(call))
    }

    /// The outcome of a reservation's call whose caller went away before
    /// it came (a cancelled task): the call that gives back what Redis
    /// reserved, if anything (see `Engine::orphaned`).
    fn orphaned<'py>(
        self, py, report; call: &Bound<'py, RedisCall>
    ) -> PyResult<Option<RedisCall>> {
        let call = &call.get().inner;
        let back = report.settle(py, &self.inner, |o| self.inner.orphaned(call, o))?;
        Ok(back.map(|inner| RedisCall { inner }))
    }

    /// Whether a give-back's outcome says Redis took the tokens back
    /// (False: built on since, or the call failed).
    fn given_back<'py>(self, _py, report) -> bool {
        report.read(ratebound_redis::given_back)
    }

    /// What became of a resume: "lifted", "not_paused" or "queued", or
    /// None when Redis could not be told.
    fn finish_resume<'py>(self, py, report) -> PyResult<Option<&'static str>> {
        report.settle(py, &self.inner, |o| self.inner.finish_resume(o).map(|r| r.as_str()))
    }

    /// What became of a pause: the shift it gave the reserved slots, in
    /// seconds (0.0: a pause already on covered it), or None when Redis
    /// could not be told.
    fn finish_pause<'py>(self, py, report) -> PyResult<Option<f64>> {
        let shift = |(_, s): (u64, Duration)| s.as_secs_f64();
        report.settle(py, &self.inner, |o| self.inner.finish_pause(o).map(shift))
    }

    /// What became of the pause `call` and what to tell the other
    /// instances: `(shift seconds, news)` — `news` the message to `PUBLISH`
    /// on `pause_channel` (None: nothing to tell, a pause already on covered
    /// it); this engine's own waiters are told already — or None when Redis
    /// could not be told.
    fn finish_pause_news<'py>(
        self, py, report; call: &Bound<'py, RedisCall>
    ) -> PyResult<Option<(f64, Option<Bound<'py, PyBytes>>)>> {
        let call = &call.get().inner;
        let paused = report.settle(py, &self.inner, |o| self.inner.finish_pause(o))?;
        Ok(paused.map(|(start_us, shift)| {
            let news = self.inner.pause_news(call, start_us, shift);
            (shift.as_secs_f64(), news.map(|m| PyBytes::new(py, &m)))
        }))
    }
}
}
