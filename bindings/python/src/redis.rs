//! Global limits in Redis: the sans-I/O engine (`_RedisEngine` in Python)
//! and its calls (`_RedisCall`), waits (`_RedisAcquisition`); `ratebound.redis`
//! does the I/O.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyString, PyTuple};
use ratebound::Error;
use ratebound::any::{self, Key, Loose};
use std::sync::Mutex;
use std::time::Duration;

use ratebound_redis::{
    Acquisition, Algorithm, Begin, Call, CallOutcome, Config, Engine, ReserveBegin, Reserved, Step,
};

use crate::convert::*;
use crate::decision::*;
use crate::error::*;

// ----------------------------------------------------------------- redis

/// The raw bytes of a Redis key (str: its UTF-8 bytes; bytes as given;
/// int: its decimal digits), for `f`: Redis stores the key itself (after
/// the prefix), never a fingerprint.
pub(crate) fn with_raw_key<R>(
    obj: &Bound<'_, PyAny>,
    f: impl FnOnce(&[u8]) -> PyResult<R>,
) -> PyResult<R> {
    with_key(obj, |k| match k {
        Key::Text(t) => f(t.as_bytes()),
        Key::Bytes(b) => f(b),
        Key::Int(i) => f(i.to_string().as_bytes()),
    })
}

/// One script run the engine asks for (see `ratebound.redis`): run
/// `EVALSHA sha 1 key *args`, and on `NOSCRIPT` `EVAL text 1 key *args`,
/// then hand the outcome to `RedisEngine.finish`.
#[pyclass(name = "_RedisCall", frozen, module = "ratebound")]
pub(crate) struct RedisCall {
    pub(crate) inner: Call,
}

#[pymethods]
impl RedisCall {
    /// The script's SHA-1 (hex), for `EVALSHA`.
    #[getter]
    fn sha(&self) -> &'static str {
        self.inner.script.sha()
    }
    /// The script's Lua source, for `EVAL` after a `NOSCRIPT` reply.
    #[getter]
    fn text(&self) -> &'static str {
        self.inner.script.text
    }
    /// The script's short name: "gcra", "fixed_window", "sliding_window".
    #[getter]
    fn script(&self) -> &'static str {
        self.inner.script.name
    }
    /// The one key: the prefix and the caller's key, raw bytes.
    #[getter]
    fn key<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.key)
    }
    /// The script's arguments (ARGV), as strings.
    #[getter]
    fn args(&self) -> Vec<String> {
        self.inner.args.clone()
    }
    /// `EVALSHA sha 1 key *args` in Redis' protocol (RESP), ready to be
    /// written to a connection as it is (`send_packed_command`).
    #[getter]
    fn command<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(
            py,
            &packed(&self.inner, b"EVALSHA", self.inner.script.sha()),
        )
    }
    /// `EVAL text 1 key *args` in Redis' protocol: the same call after a
    /// `NOSCRIPT` reply, loading the script.
    #[getter]
    fn eval_command<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &packed(&self.inner, b"EVAL", self.inner.script.text))
    }
    /// What the call asks: "check", "lease", "return", "reserve" or "pause".
    #[getter]
    fn kind(&self) -> &'static str {
        self.inner.kind.as_str()
    }
    /// The tokens asked for.
    #[getter]
    fn n(&self) -> u64 {
        self.inner.n
    }
    /// The same call judged at `now_us` (µs of Redis time) instead of
    /// Redis' `TIME`: the explicit-time twin, for replaying test vectors.
    fn at(&self, py: Python<'_>, now_us: &Bound<'_, PyAny>) -> PyResult<RedisCall> {
        if now_us.is_instance_of::<PyBool>() || !now_us.is_instance_of::<PyInt>() {
            return Err(PyTypeError::new_err(format!(
                "now_us must be an int, got {}",
                type_name(now_us)
            )));
        }
        let now = now_us.extract::<u64>().map_err(|_| {
            py_err(
                py,
                Error::InvalidNumber {
                    name: "now_us",
                    value: now_us.repr().map(|r| r.to_string()).unwrap_or_default(),
                    reason: "must be a whole number of microseconds from 0 to 2^64 - 1",
                },
            )
        })?;
        Ok(RedisCall {
            inner: self.inner.clone().at(now),
        })
    }
    fn __repr__(&self) -> String {
        format!(
            "_RedisCall(script={:?}, key={:?}, args={:?})",
            self.inner.script.name,
            String::from_utf8_lossy(&self.inner.key),
            self.inner.args
        )
    }
}

/// The sans-I/O engine of a global limit in Redis (`ratebound_redis`):
/// it builds each call, turns each outcome into a `Decision`, and keeps
/// the fail policy, the circuit breaker and the leases. `ratebound.redis`
/// runs its calls with redis-py.
#[pyclass(name = "_RedisEngine", frozen, module = "ratebound")]
pub(crate) struct RedisEngine {
    pub(crate) inner: Engine,
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

#[pymethods]
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
        let b = opt_number(py, "burst", burst)?;
        let l = opt_number(py, "limit", limit)?;
        let w = opt_number(py, "window", window)?;
        let keyed = match rate.filter(|r| !r.is_none()) {
            Some(r) => with_rate(py, r, |r| any::keyed_algorithm(algorithm, Some(r), b, l, w))?,
            None => any::keyed_algorithm(algorithm, None, b, l, w).or_py(py)?,
        };
        // Every option is parsed, checked and defaulted by the core.
        let mut options: Vec<(&str, Loose<'_>)> = Vec::new();
        if let Some(p) = prefix {
            options.push(("prefix", Loose::Text(p)));
        }
        if let Some(o) = on_error {
            options.push(("on_error", Loose::Text(o)));
        }
        for (name, value) in [
            ("local_rate", local_rate),
            ("timeout", timeout),
            ("lease", lease),
            ("lease_ttl", lease_ttl),
            ("breaker_threshold", breaker_threshold),
            ("breaker_cooldown", breaker_cooldown),
        ] {
            if let Some(n) = opt_number(py, name, value)? {
                options.push((name, Loose::Number(n)));
            }
        }
        // `batch` (a bool; anything else is the core's error naming it).
        let batch_text;
        if let Some(b) = batch.filter(|b| !b.is_none()) {
            let loose = if b.is_instance_of::<PyBool>() {
                Loose::Bool(b.extract()?)
            } else {
                batch_text = b.repr()?.to_string();
                Loose::Text(&batch_text)
            };
            options.push(("batch", loose));
        }
        let algorithm = Algorithm::from_keyed(keyed).or_py(py)?;
        let config = Config::from_options(algorithm, &options).or_py(py)?;
        Ok(RedisEngine {
            inner: Engine::with_clock(config, clock).or_py(py)?,
        })
    }

    /// Step one of taking `n` (default 1) for `key` (str, bytes or int),
    /// within `scope` if given (a middleware's policy name: its own keys):
    /// a `Decision` already (a lease, or the fail policy while the breaker
    /// is open), or a `RedisCall` to run and pass to `finish`.
    #[pyo3(signature = (key, n=None, scope=None))]
    fn begin(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<&Bound<'_, PyAny>>,
        scope: Option<&str>,
    ) -> PyResult<Py<PyAny>> {
        let n = count(py, n)?;
        match with_raw_key(key, |k| self.inner.begin_in(scope, k, n).or_py(py))? {
            Begin::Done(d) => Ok(Self::decision(py, d)?.into_any()),
            Begin::Call(call) => Ok(Py::new(py, RedisCall { inner: call })?.into_any()),
        }
    }

    /// Step two: the decision from what became of `call` — its `reply` (the
    /// script's list of ints), `timed_out=True` (no reply within the
    /// deadline), `error` (a connection or server error's text), or
    /// `unsent=True` (it never left this client before its deadline: a
    /// full pool; refused as "busy", never the fail policy's). An error that
    /// says the store is misconfigured raises `StoreMisconfigured`.
    #[pyo3(signature = (call, reply=None, timed_out=false, error=None, unsent=false))]
    fn finish(
        &self,
        py: Python<'_>,
        call: &Bound<'_, RedisCall>,
        reply: Option<&Bound<'_, PyAny>>,
        timed_out: bool,
        error: Option<&str>,
        unsent: bool,
    ) -> PyResult<Py<Decision>> {
        let call = &call.get().inner;
        let d = with_outcome(py, &self.inner, reply, timed_out, error, unsent, |o| {
            self.inner.finish(call, o)
        })?;
        tell(py, &self.inner);
        Self::decision(py, d)
    }

    /// A wait for `n` (default 1) tokens for `key`, within `scope` if
    /// given, failing if it cannot end within `timeout` seconds (None: as
    /// long as it takes); driven by `acquire_step`.
    #[pyo3(signature = (key, n=None, timeout=None, scope=None))]
    fn acquire(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        scope: Option<&str>,
    ) -> PyResult<RedisAcquisition> {
        let n = count(py, n)?;
        let timeout = opt_seconds(py, "timeout", timeout)?;
        let a = with_raw_key(key, |k| self.inner.acquire(scope, k, n, timeout).or_py(py))?;
        Ok(RedisAcquisition {
            inner: Mutex::new(a),
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
        let step = step.or_py(py)?;
        match step {
            Step::Call(call) => {
                ("call", Py::new(py, RedisCall { inner: call })?.into_any()).into_pyobject(py)
            }
            Step::Sleep(d) => (
                "sleep",
                d.as_secs_f64().into_pyobject(py)?.into_any().unbind(),
            )
                .into_pyobject(py),
            Step::Done(source) => (
                "done",
                source.as_str().into_pyobject(py)?.into_any().unbind(),
            )
                .into_pyobject(py),
        }
    }

    /// Hands the wait what became of the call its last step gave.
    #[pyo3(signature = (a, reply=None, timed_out=false, error=None, unsent=false))]
    fn acquire_reply(
        &self,
        py: Python<'_>,
        a: &Bound<'_, RedisAcquisition>,
        reply: Option<&Bound<'_, PyAny>>,
        timed_out: bool,
        error: Option<&str>,
        unsent: bool,
    ) -> PyResult<()> {
        with_outcome(py, &self.inner, reply, timed_out, error, unsent, |o| {
            self.inner.acquire_reply(&mut a.get().lock(), o);
        })?;
        tell(py, &self.inner);
        Ok(())
    }

    /// The caller gave up: the call that gives held tokens back, if any.
    fn acquire_abandon(&self, a: &Bound<'_, RedisAcquisition>) -> Option<RedisCall> {
        self.inner
            .acquire_abandon(&mut a.get().lock())
            .map(|inner| RedisCall { inner })
    }

    /// Step one of a reservation of `n` for `key` due within `max_wait`
    /// seconds (None: any wait): `(delay, source, None)` already (a lease, the
    /// fail policy) or a `RedisCall` for `finish_reserve`. Raises
    /// `RateLimitExceeded` when refused, taking nothing.
    #[pyo3(signature = (key, n=None, max_wait=None, scope=None))]
    fn begin_reserve(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<&Bound<'_, PyAny>>,
        max_wait: Option<&Bound<'_, PyAny>>,
        scope: Option<&str>,
    ) -> PyResult<Py<PyAny>> {
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

    /// Step two of a reservation: `(delay, source, end_us)`, or `RateLimitExceeded`
    /// (nothing taken) when the tokens are due only beyond its max_wait.
    #[pyo3(signature = (call, reply=None, timed_out=false, error=None, unsent=false))]
    fn finish_reserve<'py>(
        &self,
        py: Python<'py>,
        call: &Bound<'py, RedisCall>,
        reply: Option<&Bound<'py, PyAny>>,
        timed_out: bool,
        error: Option<&str>,
        unsent: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let call = &call.get().inner;
        let r = with_outcome(py, &self.inner, reply, timed_out, error, unsent, |o| {
            self.inner.finish_reserve(call, o)
        })?;
        tell(py, &self.inner);
        let max_wait = match call.kind {
            ratebound_redis::CallKind::Reserve { max_wait_us } => {
                Duration::from_micros(max_wait_us)
            }
            _ => Duration::MAX,
        };
        reserved(py, r, max_wait)
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

    /// The outcome of a reservation's call whose caller went away before
    /// it came (a cancelled task): the call that gives back what Redis
    /// reserved, if anything (see `Engine::orphaned`).
    #[pyo3(signature = (call, reply=None, timed_out=false, error=None, unsent=false))]
    fn orphaned(
        &self,
        py: Python<'_>,
        call: &Bound<'_, RedisCall>,
        reply: Option<&Bound<'_, PyAny>>,
        timed_out: bool,
        error: Option<&str>,
        unsent: bool,
    ) -> PyResult<Option<RedisCall>> {
        let call = &call.get().inner;
        let back = with_outcome(py, &self.inner, reply, timed_out, error, unsent, |o| {
            self.inner.orphaned(call, o)
        })?;
        tell(py, &self.inner);
        Ok(back.map(|inner| RedisCall { inner }))
    }

    /// Whether a give-back's outcome says Redis took the tokens back
    /// (False: built on since, or the call failed).
    #[pyo3(signature = (reply=None, timed_out=false, error=None, unsent=false))]
    fn given_back(
        &self,
        reply: Option<&Bound<'_, PyAny>>,
        timed_out: bool,
        error: Option<&str>,
        unsent: bool,
    ) -> bool {
        read_outcome(reply, timed_out, error, unsent, ratebound_redis::given_back)
    }

    /// The call that pauses `key` for `seconds` for every instance.
    #[pyo3(signature = (key, seconds, scope=None))]
    fn begin_pause(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        seconds: &Bound<'_, PyAny>,
        scope: Option<&str>,
    ) -> PyResult<RedisCall> {
        let d = any::pause_seconds(number(py, "seconds", seconds)?).or_py(py)?;
        let call = with_raw_key(key, |k| self.inner.begin_pause(scope, k, d).or_py(py))?;
        Ok(RedisCall { inner: call })
    }

    /// The call that lifts the pause on `key` for every instance if
    /// nothing was built on it (one script run, on Redis' clock).
    #[pyo3(signature = (key, scope=None))]
    fn begin_resume(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        scope: Option<&str>,
    ) -> PyResult<RedisCall> {
        let call = with_raw_key(key, |k| self.inner.begin_resume(scope, k).or_py(py))?;
        Ok(RedisCall { inner: call })
    }

    /// What became of a resume: "lifted", "not_paused" or "queued", or
    /// None when Redis could not be told.
    #[pyo3(signature = (reply=None, timed_out=false, error=None, unsent=false))]
    fn finish_resume(
        &self,
        py: Python<'_>,
        reply: Option<&Bound<'_, PyAny>>,
        timed_out: bool,
        error: Option<&str>,
        unsent: bool,
    ) -> PyResult<Option<&'static str>> {
        let resumed = with_outcome(py, &self.inner, reply, timed_out, error, unsent, |o| {
            self.inner.finish_resume(o).map(|r| r.as_str())
        })?;
        tell(py, &self.inner);
        Ok(resumed)
    }

    /// Pauses `key` for `seconds` in this process's local share (the
    /// limit of `on_error="local"`), for a pause Redis could not be told
    /// of; whether there was a local share to pause.
    #[pyo3(signature = (key, seconds, scope=None))]
    fn pause_local(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        seconds: &Bound<'_, PyAny>,
        scope: Option<&str>,
    ) -> PyResult<bool> {
        let d = any::seconds("seconds", number(py, "seconds", seconds)?).or_py(py)?;
        with_raw_key(key, |k| Ok(self.inner.pause_local(scope, k, d)))
    }

    /// What became of a pause: the shift it gave the reserved slots, in
    /// seconds (0.0: a pause already on covered it), or None when Redis
    /// could not be told.
    #[pyo3(signature = (reply=None, timed_out=false, error=None, unsent=false))]
    fn finish_pause(
        &self,
        py: Python<'_>,
        reply: Option<&Bound<'_, PyAny>>,
        timed_out: bool,
        error: Option<&str>,
        unsent: bool,
    ) -> PyResult<Option<f64>> {
        let shift = with_outcome(py, &self.inner, reply, timed_out, error, unsent, |o| {
            self.inner
                .finish_pause(o)
                .map(|(_, shift)| shift.as_secs_f64())
        })?;
        tell(py, &self.inner);
        Ok(shift)
    }

    /// What became of the pause `call` and what to tell the other
    /// instances: `(shift seconds, news)` — `news` the message to `PUBLISH`
    /// on `pause_channel` (None: nothing to tell, a pause already on covered
    /// it); this engine's own waiters are told already — or None when Redis
    /// could not be told.
    #[pyo3(signature = (call, reply=None, timed_out=false, error=None, unsent=false))]
    fn finish_pause_news<'py>(
        &self,
        py: Python<'py>,
        call: &Bound<'py, RedisCall>,
        reply: Option<&Bound<'py, PyAny>>,
        timed_out: bool,
        error: Option<&str>,
        unsent: bool,
    ) -> PyResult<Option<(f64, Option<Bound<'py, PyBytes>>)>> {
        let call = &call.get().inner;
        let paused = with_outcome(py, &self.inner, reply, timed_out, error, unsent, |o| {
            self.inner.finish_pause(o)
        })?;
        tell(py, &self.inner);
        Ok(paused.map(|(start_us, shift)| {
            let news = self.inner.pause_news(call, start_us, shift);
            (shift.as_secs_f64(), news.map(|m| PyBytes::new(py, &m)))
        }))
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
        RedisStats {
            inner: self.inner.stats(),
        }
    }

    /// The fail policy: `"open"`, `"closed"` or `"local"` (the outbound
    /// adapters warn about `"open"`).
    #[getter]
    fn on_error(&self) -> &'static str {
        match self.inner.config().on_error {
            ratebound_redis::OnError::Closed => "closed",
            ratebound_redis::OnError::Local(_) => "local",
            _ => "open",
        }
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

    /// Leased tokens held now, over all keys.
    fn leased(&self) -> u64 {
        self.inner.leased()
    }
}

/// One caller's wait for global tokens (`RedisEngine.acquire`).
#[pyclass(name = "_RedisAcquisition", frozen, module = "ratebound")]
pub(crate) struct RedisAcquisition {
    inner: Mutex<Acquisition>,
}

impl RedisAcquisition {
    fn lock(&self) -> std::sync::MutexGuard<'_, Acquisition> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `verb head 1 key *args` (`EVALSHA` and the script's SHA-1, or `EVAL`
/// and its text) as one RESP array of bulk strings.
fn packed(call: &Call, verb: &[u8], head: &str) -> Vec<u8> {
    let parts = [verb, head.as_bytes(), b"1", &call.key];
    let size = parts.iter().map(|p| p.len() + 16).sum::<usize>()
        + call.args.iter().map(|a| a.len() + 16).sum::<usize>()
        + 16;
    let mut out = Vec::with_capacity(size);
    let bulk = |out: &mut Vec<u8>, b: &[u8]| {
        out.push(b'$');
        out.extend_from_slice(b.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(b);
        out.extend_from_slice(b"\r\n");
    };
    out.push(b'*');
    out.extend_from_slice((parts.len() + call.args.len()).to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for p in parts {
        bulk(&mut out, p);
    }
    for a in &call.args {
        bulk(&mut out, a.as_bytes());
    }
    out
}

/// Runs `f` on what became of a call, as the engine reads a driver's
/// report (`unsent` first: the call never left this client; then
/// `CallOutcome::reported`: `timed_out`, then `error`, then the `reply`;
/// nothing at all is a failure): a reply that is not a list of ints is
/// `CallOutcome::Malformed`, as Node's binding says of a reply that is not
/// an array of integers. An error that says the store is misconfigured
/// (`Engine::misconfigured`) is raised as `StoreMisconfigured` and never
/// reaches the fail policy: no fail policy answers a typo.
fn with_outcome<R>(
    py: Python<'_>,
    engine: &Engine,
    reply: Option<&Bound<'_, PyAny>>,
    timed_out: bool,
    error: Option<&str>,
    unsent: bool,
    f: impl FnOnce(CallOutcome<'_>) -> R,
) -> PyResult<R> {
    if !unsent
        && !timed_out
        && let Some(e) = error
    {
        engine.misconfigured(&CallOutcome::Failed(e)).or_py(py)?;
    }
    Ok(read_outcome(reply, timed_out, error, unsent, f))
}

/// [`with_outcome`] without the misconfiguration check (a give-back's
/// outcome, which only says whether Redis took the tokens back).
fn read_outcome<R>(
    reply: Option<&Bound<'_, PyAny>>,
    timed_out: bool,
    error: Option<&str>,
    unsent: bool,
    f: impl FnOnce(CallOutcome<'_>) -> R,
) -> R {
    if unsent {
        return f(CallOutcome::Unsent);
    }
    let ints = match reply.filter(|r| !r.is_none()) {
        None => None,
        Some(r) if r.is_instance_of::<PyString>() || r.is_instance_of::<PyBytes>() => Some(None),
        Some(r) => Some(r.extract::<Vec<i64>>().ok()),
    };
    let reply = ints.as_ref().map(|v| match v {
        Some(v) => CallOutcome::Reply(v),
        None => CallOutcome::Malformed,
    });
    f(CallOutcome::reported(reply, timed_out, error))
}

/// A granted reservation as `(delay seconds, source, end_us)` — `end_us`
/// the end of its slot on Redis' clock, for `give_back` (None when Redis
/// did not answer); a refused one raises `RateLimitExceeded`.
fn reserved<'py>(
    py: Python<'py>,
    r: Reserved,
    max_wait: Duration,
) -> PyResult<Bound<'py, PyTuple>> {
    match r {
        Reserved::Granted {
            wait,
            source,
            end_us,
            ..
        } => (wait.as_secs_f64(), source.as_str(), end_us).into_pyobject(py),
        Reserved::Refused { wait, .. } | Reserved::Retry { wait, .. } => {
            Err(py_err(py, Error::DeadlineExceeded { wait, max_wait }))
        }
    }
}

/// Optional seconds, checked by the core (finite, ≥ 0).
fn opt_seconds(
    py: Python<'_>,
    name: &'static str,
    obj: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Duration>> {
    opt_number(py, name, obj)?
        .map(|t| any::seconds(name, t))
        .transpose()
        .or_py(py)
}

/// What a Redis limiter's decisions came from, counted since it was made
/// (`redis`, `lease`, `damaged`, and the fail policy's `fail_open`,
/// `fail_closed`, `fail_local`; `busy`: refused because the call could not
/// even leave this client before its deadline), and whether its circuit
/// breaker is open now.
#[pyclass(name = "RedisStats", frozen, module = "ratebound.redis")]
pub(crate) struct RedisStats {
    inner: ratebound_redis::Stats,
}

#[pymethods]
impl RedisStats {
    /// Decisions Redis made.
    #[getter]
    fn redis(&self) -> u64 {
        self.inner.redis
    }
    /// Decisions a lease made.
    #[getter]
    fn lease(&self) -> u64 {
        self.inner.lease
    }
    /// Refusals of a key whose value no script wrote.
    #[getter]
    fn damaged(&self) -> u64 {
        self.inner.damaged
    }
    /// Admitted by the fail policy "open".
    #[getter]
    fn fail_open(&self) -> u64 {
        self.inner.fail_open
    }
    /// Refused by the fail policy "closed".
    #[getter]
    fn fail_closed(&self) -> u64 {
        self.inner.fail_closed
    }
    /// Answered by the fail policy "local".
    #[getter]
    fn fail_local(&self) -> u64 {
        self.inner.fail_local
    }
    /// Refused because no connection came free before the deadline.
    #[getter]
    fn busy(&self) -> u64 {
        self.inner.busy
    }
    /// Whether the circuit breaker is open.
    #[getter]
    fn breaker_open(&self) -> bool {
        self.inner.breaker_open
    }
    /// The counters and `breaker_open` as a dict.
    fn _asdict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let s = &self.inner;
        for (name, v) in [
            ("redis", s.redis),
            ("lease", s.lease),
            ("damaged", s.damaged),
            ("fail_open", s.fail_open),
            ("fail_closed", s.fail_closed),
            ("fail_local", s.fail_local),
            ("busy", s.busy),
        ] {
            d.set_item(name, v)?;
        }
        d.set_item("breaker_open", s.breaker_open)?;
        Ok(d)
    }
    fn __repr__(&self) -> String {
        let s = &self.inner;
        format!(
            "RedisStats(redis={}, lease={}, damaged={}, fail_open={}, fail_closed={}, fail_local={}, busy={}, breaker_open={})",
            s.redis,
            s.lease,
            s.damaged,
            s.fail_open,
            s.fail_closed,
            s.fail_local,
            s.busy,
            if s.breaker_open { "True" } else { "False" }
        )
    }
}

static LOGGER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Logs the engine's notices (the breaker opened or closed, an episode of
/// calls refused as busy) as warnings of the `ratebound.redis` logger, one
/// line each; nothing to do costs one atomic load. A failing logger is
/// ignored: a decision never fails for its log line.
pub(crate) fn tell(py: Python<'_>, engine: &Engine) {
    if !engine.has_notices() {
        return;
    }
    let notices = engine.take_notices();
    let logger = LOGGER.get_or_try_init(py, || {
        py.import("logging")?
            .call_method1("getLogger", ("ratebound.redis",))
            .map(Bound::unbind)
    });
    let Ok(logger) = logger else { return };
    for n in notices {
        let _ = logger.call_method1(py, "warning", (n.message(),));
    }
}

/// The `StoreMisconfigured` error an error text says (a wrong password, a
/// missing database, ...: `ratebound_redis::misconfiguration`), if any.
pub(crate) fn misconfigured(py: Python<'_>, error: &str) -> Option<PyErr> {
    ratebound_redis::misconfiguration(error).map(|e| py_err(py, e))
}

/// `_misconfigured(error)`: the `StoreMisconfigured` exception an error
/// text says, or None (for a runner that meets it outside a call).
#[pyfunction]
pub(crate) fn _misconfigured(py: Python<'_>, error: &str) -> Option<Py<PyAny>> {
    misconfigured(py, error).map(|e| e.into_value(py).into_any())
}
