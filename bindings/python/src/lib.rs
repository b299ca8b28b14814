//! The `ratebound._ratebound` extension module: pyo3 glue over
//! `ratebound::any` and the sans-I/O engine of `ratebound_redis` (whose
//! calls `ratebound.redis` runs with redis-py). Nothing here decides
//! anything: it converts Python values into the core's types, the core's
//! answers and errors back, and releases the GIL while it sleeps.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use ratebound::any::{
    self, Acquire, AnyClock, AnyKeyed, AnyLimiter, Gate, GateOptions, Key, KeySource, Loose, Rate,
};
use ratebound::http::{Forwarding, Headers};
use ratebound::{Clock, Error, KeyedAlgorithm, Limiter as _, Permit};
use ratebound_redis::{Algorithm, Begin, Call, CallKind, Config, Engine, OnError, Outcome, Source};

// ---------------------------------------------------------------- errors

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// The Python exception for a core error: the classes live in
/// `ratebound._errors` (plain Python, so they pickle and subclass normally);
/// each carries `.code`, the core's stable `Error::code()`.
fn py_err(py: Python<'_>, e: Error) -> PyErr {
    let class = match &e {
        Error::InsufficientCapacity { .. } => "InsufficientCapacity",
        Error::DeadlineExceeded { .. } => "RateLimitExceeded",
        Error::TooManyKeys { .. } => "TooManyKeys",
        Error::Unsupported { .. } => "Unsupported",
        Error::InvalidOption { .. } => "ConfigError",
        Error::Missing { .. } => "MissingValue",
        _ => "QuotaError",
    };
    let made = (|| -> PyResult<PyErr> {
        let module =
            ERRORS.get_or_try_init(py, || py.import("ratebound._errors").map(Bound::unbind))?;
        let cls = module.bind(py).getattr(class)?;
        let instance = match &e {
            Error::DeadlineExceeded { wait, .. } => {
                cls.call1((e.to_string(), e.code(), wait.as_secs_f64()))?
            }
            _ => cls.call1((e.to_string(), e.code()))?,
        };
        Ok(PyErr::from_value(instance))
    })();
    made.unwrap_or_else(|err| err)
}

trait OrPy<T> {
    fn or_py(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> OrPy<T> for Result<T, Error> {
    fn or_py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| py_err(py, e))
    }
}

// ------------------------------------------------------ value conversion

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_string())
}

/// A number argument as a float; a bool, a string or anything else is a
/// `TypeError`, an int too large for a float a `QuotaError` naming it.
fn number(py: Python<'_>, name: &'static str, obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    if obj.is_instance_of::<PyBool>()
        || !(obj.is_instance_of::<PyInt>() || obj.is_instance_of::<PyFloat>())
    {
        return Err(PyTypeError::new_err(format!(
            "{name} must be a number, got {}",
            type_name(obj)
        )));
    }
    obj.extract::<f64>().map_err(|_| {
        py_err(
            py,
            Error::InvalidNumber {
                name,
                value: obj.repr().map(|r| r.to_string()).unwrap_or_default(),
                reason: "is too large",
            },
        )
    })
}

/// A count of nanoseconds: an int from 0 to 2^64 - 1 (a `QuotaError`
/// naming the value outside that, a `TypeError` for anything but an int).
fn whole_nanos(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "nanos must be an int, got {}",
            type_name(obj)
        )));
    }
    obj.extract::<u64>().map_err(|_| {
        py_err(
            py,
            Error::InvalidNumber {
                name: "nanos",
                value: obj.repr().map(|r| r.to_string()).unwrap_or_default(),
                reason: "must be a whole number of nanoseconds from 0 to 2^64 - 1",
            },
        )
    })
}

fn opt_number(
    py: Python<'_>,
    name: &'static str,
    obj: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<f64>> {
    match obj {
        Some(o) if !o.is_none() => number(py, name, o).map(Some),
        _ => Ok(None),
    }
}

fn required(py: Python<'_>, name: &'static str, obj: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
    match obj {
        Some(o) if !o.is_none() => number(py, name, o),
        _ => Err(py_err(py, Error::Missing { name })),
    }
}

/// A token count: a whole number ≥ 0 (an int).
fn count(py: Python<'_>, obj: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
    match obj {
        None => Ok(1),
        Some(o) => {
            if let Ok(n) = o.extract::<u64>()
                && !o.is_instance_of::<PyBool>()
            {
                return Ok(n);
            }
            any::whole("n", number(py, "n", o)?, 0).or_py(py)
        }
    }
}

/// A rate: tokens per second (int or float) or a quota string.
fn with_rate<T>(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    f: impl FnOnce(Rate<'_>) -> Result<T, Error>,
) -> PyResult<T> {
    if let Ok(s) = obj.cast::<PyString>() {
        let text = s.to_cow()?;
        return f(Rate::Text(&text)).or_py(py);
    }
    let r = number(py, "rate", obj).map_err(|e| {
        if e.is_instance_of::<PyTypeError>(py) {
            PyTypeError::new_err(format!(
                "rate must be a number of tokens per second or a string like \"10/s\", got {}",
                type_name(obj)
            ))
        } else {
            e
        }
    })?;
    f(Rate::PerSecond(r)).or_py(py)
}

fn clock_of(clock: Option<&Bound<'_, PyAny>>) -> PyResult<AnyClock> {
    match clock {
        None => Ok(AnyClock::default()),
        Some(c) if c.is_none() => Ok(AnyClock::default()),
        Some(c) => match c.cast::<ManualClock>() {
            Ok(m) => Ok(AnyClock::Manual(m.get().inner.clone())),
            Err(_) => Err(PyTypeError::new_err(format!(
                "clock must be a ratebound.ManualClock or None, got {}",
                type_name(c)
            ))),
        },
    }
}

/// Calls `f` with the key as the core takes it (str, bytes or int; a bool
/// or anything else is a `TypeError`).
fn with_key<R>(obj: &Bound<'_, PyAny>, f: impl FnOnce(Key<'_>) -> PyResult<R>) -> PyResult<R> {
    if let Ok(s) = obj.cast::<PyString>() {
        // One temporary bytes object: the abi3 (3.9) API has no borrowed
        // UTF-8 view. A lone surrogate raises UnicodeEncodeError here.
        let utf8 = s.encode_utf8()?;
        let text = std::str::from_utf8(utf8.as_bytes())
            .map_err(|_| PyValueError::new_err("a str key must encode to UTF-8"))?;
        return f(Key::Text(text));
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return f(Key::Bytes(b.as_bytes()));
    }
    if obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<PyBool>() {
        let i = obj
            .extract::<i128>()
            .map_err(|_| PyValueError::new_err("an int key must fit in 128 bits"))?;
        return f(Key::Int(i));
    }
    Err(PyTypeError::new_err(format!(
        "a key must be str, bytes or int, got {}",
        type_name(obj)
    )))
}

fn nanos_to_secs(n: u64) -> f64 {
    n as f64 / 1e9
}

// ----------------------------------------------------------------- clock

/// A clock that moves only when told to; starts at 0.
#[pyclass(frozen, module = "ratebound")]
struct ManualClock {
    inner: ratebound::ManualClock,
}

#[pymethods]
impl ManualClock {
    #[new]
    fn new() -> Self {
        ManualClock {
            inner: ratebound::ManualClock::new(),
        }
    }

    /// Moves the clock forward by `seconds`.
    fn advance(&self, py: Python<'_>, seconds: &Bound<'_, PyAny>) -> PyResult<()> {
        let d = any::seconds("seconds", number(py, "seconds", seconds)?).or_py(py)?;
        self.inner.advance(d);
        Ok(())
    }

    /// Moves the clock forward by `nanos` nanoseconds.
    fn advance_ns(&self, py: Python<'_>, nanos: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.advance_nanos(whole_nanos(py, nanos)?);
        Ok(())
    }

    /// Sets the clock to `seconds` since its epoch (may go backwards).
    fn set(&self, py: Python<'_>, seconds: &Bound<'_, PyAny>) -> PyResult<()> {
        let d = any::seconds("seconds", number(py, "seconds", seconds)?).or_py(py)?;
        self.inner.set(d);
        Ok(())
    }

    /// Sets the clock to `nanos` since its epoch (may go backwards).
    fn set_ns(&self, py: Python<'_>, nanos: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.set_nanos(whole_nanos(py, nanos)?);
        Ok(())
    }

    /// Seconds since the epoch.
    fn now(&self) -> f64 {
        nanos_to_secs(self.inner.now())
    }

    /// Nanoseconds since the epoch.
    fn now_ns(&self) -> u64 {
        self.inner.now()
    }

    fn __repr__(&self) -> String {
        format!("ManualClock(now={})", nanos_to_secs(self.inner.now()))
    }
}

// -------------------------------------------------------------- decision

/// A limiter's answer. `bool(d)` is `d.allowed`; `d.source` says which
/// path of a Redis limiter answered (`None` for a local limiter).
#[pyclass(frozen, module = "ratebound")]
struct Decision {
    inner: ratebound::Decision,
    source: Option<Source>,
}

#[pymethods]
impl Decision {
    #[getter]
    fn allowed(&self) -> bool {
        self.inner.is_allowed()
    }
    #[getter]
    fn limit(&self) -> u64 {
        self.inner.limit()
    }
    #[getter]
    fn remaining(&self) -> u64 {
        self.inner.remaining()
    }
    /// Seconds until the same request would be allowed (0.0 if allowed).
    #[getter]
    fn retry_after(&self) -> f64 {
        nanos_to_secs(self.inner.retry_after_nanos())
    }
    /// Seconds until the limiter is back to its full quota.
    #[getter]
    fn reset_after(&self) -> f64 {
        nanos_to_secs(self.inner.reset_after_nanos())
    }
    #[getter]
    fn retry_after_ns(&self) -> u64 {
        self.inner.retry_after_nanos()
    }
    #[getter]
    fn reset_after_ns(&self) -> u64 {
        self.inner.reset_after_nanos()
    }
    /// A Redis limiter's path: "redis", "lease", "fail_open",
    /// "fail_closed" or "local"; `None` for a local limiter.
    #[getter]
    fn source(&self) -> Option<&'static str> {
        self.source.map(Source::as_str)
    }
    fn __bool__(&self) -> bool {
        self.inner.is_allowed()
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Decision>()
            .is_ok_and(|o| o.get().inner == self.inner && o.get().source == self.source)
    }
    fn __repr__(&self) -> String {
        let source = match self.source {
            Some(s) => format!(", source='{}'", s.as_str()),
            None => String::new(),
        };
        format!(
            "Decision(allowed={}, limit={}, remaining={}, retry_after={}, reset_after={}{source})",
            if self.inner.is_allowed() {
                "True"
            } else {
                "False"
            },
            self.inner.limit(),
            self.inner.remaining(),
            nanos_to_secs(self.inner.retry_after_nanos()),
            nanos_to_secs(self.inner.reset_after_nanos()),
        )
    }
}

fn decision(py: Python<'_>, d: ratebound::Decision) -> PyResult<Py<Decision>> {
    Py::new(
        py,
        Decision {
            inner: d,
            source: None,
        },
    )
}

// ------------------------------------------------------------- waiting

/// What a reservation or an acquisition step holds: tokens to give back if
/// the waiter gives up.
#[pyclass(frozen, module = "ratebound")]
struct Permit_ {
    permit: Permit,
    released: AtomicBool,
}

/// One acquisition step as Python sees it: `None` when admitted, else
/// `(seconds_to_sleep, permit_or_None)`: with a permit the tokens are taken
/// (go after sleeping; release the permit if cancelled); without one,
/// sleep and step again.
fn step_to_py(py: Python<'_>, step: Acquire) -> PyResult<Py<PyAny>> {
    Ok(match step {
        Acquire::Admitted => py.None(),
        Acquire::Reserved { wait_nanos, permit } => {
            let p = Py::new(
                py,
                Permit_ {
                    permit,
                    released: AtomicBool::new(false),
                },
            )?;
            (nanos_to_secs(wait_nanos), p)
                .into_pyobject(py)?
                .into_any()
                .unbind()
        }
        Acquire::Retry { wait_nanos } => (nanos_to_secs(wait_nanos), py.None())
            .into_pyobject(py)?
            .into_any()
            .unbind(),
    })
}

/// The clock time `timeout` seconds after `now`, or `None`.
fn deadline(py: Python<'_>, now: u64, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    match opt_number(py, "timeout", timeout)? {
        None => Ok(None),
        Some(t) => {
            let d = any::seconds("timeout", t).or_py(py)?;
            Ok(Some(now.saturating_add(d.as_nanos() as u64)))
        }
    }
}

/// Sleeps `nanos` with the GIL released, waking every 50 ms to let Python
/// handle signals (Ctrl-C raises here).
fn sleep_released(py: Python<'_>, nanos: u64) -> PyResult<()> {
    let mut left = Duration::from_nanos(nanos);
    while !left.is_zero() {
        let chunk = left.min(Duration::from_millis(50));
        py.detach(|| std::thread::sleep(chunk));
        left -= chunk;
        py.check_signals()?;
    }
    Ok(())
}

/// Drives acquisition steps to the end, sleeping with the GIL released.
fn acquire_blocking(
    py: Python<'_>,
    mut step: impl FnMut(u64) -> Result<Acquire, Error>,
    now: impl Fn() -> u64,
    release: impl Fn(Permit),
) -> PyResult<()> {
    loop {
        match step(now()).or_py(py)? {
            Acquire::Admitted => return Ok(()),
            Acquire::Reserved { wait_nanos, permit } => {
                return sleep_released(py, wait_nanos).inspect_err(|_| release(permit));
            }
            Acquire::Retry { wait_nanos } => sleep_released(py, wait_nanos)?,
        }
    }
}

// --------------------------------------------------------------- limiter

/// The base of every single limiter; construct the subclasses
/// (`TokenBucket`, `FixedWindow`, ...) from the `ratebound` package.
#[pyclass(frozen, subclass, module = "ratebound")]
struct Limiter {
    inner: Arc<AnyLimiter>,
}

#[pymethods]
impl Limiter {
    #[new]
    #[pyo3(signature = (algorithm, *, rate=None, burst=None, limit=None, window=None, max_delay=None, members=None, clock=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        algorithm: &str,
        rate: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
        limit: Option<&Bound<'_, PyAny>>,
        window: Option<&Bound<'_, PyAny>>,
        max_delay: Option<&Bound<'_, PyAny>>,
        members: Option<&Bound<'_, PyAny>>,
        clock: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let c = clock_of(clock)?;
        let rate_obj = || -> PyResult<&Bound<'_, PyAny>> {
            rate.filter(|r| !r.is_none())
                .ok_or_else(|| py_err(py, Error::Missing { name: "rate" }))
        };
        let inner = match algorithm {
            "token_bucket" => {
                let b = opt_number(py, "burst", burst)?;
                with_rate(py, rate_obj()?, |r| AnyLimiter::token_bucket(r, b, c))?
            }
            "leaky_bucket" => {
                let d = required(py, "max_delay", max_delay)?;
                with_rate(py, rate_obj()?, |r| AnyLimiter::leaky_bucket(r, d, c))?
            }
            "fixed_window" | "sliding_window" | "sliding_log" => {
                let l = required(py, "limit", limit)?;
                let w = required(py, "window", window)?;
                let made = match algorithm {
                    "fixed_window" => AnyLimiter::fixed_window(l, w, c),
                    "sliding_window" => AnyLimiter::sliding_window(l, w, c),
                    _ => AnyLimiter::sliding_log(l, w, c),
                };
                made.or_py(py)?
            }
            "all_of" => {
                let mut list = Vec::new();
                if let Some(m) = members {
                    for item in m.try_iter()? {
                        let item = item?;
                        let l = item.cast::<Limiter>().map_err(|_| {
                            PyTypeError::new_err(format!(
                                "AllOf members must be ratebound limiters, got {}",
                                type_name(&item)
                            ))
                        })?;
                        list.push(l.get().inner.clone());
                    }
                }
                AnyLimiter::all_of(list).or_py(py)?
            }
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown algorithm {other:?}"
                )));
            }
        };
        Ok(Limiter {
            inner: Arc::new(inner),
        })
    }

    /// Takes `n` (default 1) if the limit allows; the decision says so
    /// either way. A refusal is not an error.
    #[pyo3(signature = (n=None))]
    fn check(&self, py: Python<'_>, n: Option<&Bound<'_, PyAny>>) -> PyResult<Py<Decision>> {
        let d = match n {
            None => self.inner.check_at(self.inner.now()),
            Some(_) => {
                let n = count(py, n)?;
                self.inner.check_n_at(n, self.inner.now()).or_py(py)?
            }
        };
        decision(py, d)
    }

    /// Like `check`, returning only whether it was allowed.
    #[pyo3(signature = (n=None))]
    fn try_acquire(&self, py: Python<'_>, n: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        match n {
            None => Ok(self.inner.try_acquire()),
            Some(_) => {
                let n = count(py, n)?;
                Ok(self
                    .inner
                    .check_n_at(n, self.inner.now())
                    .or_py(py)?
                    .is_allowed())
            }
        }
    }

    /// What `check(n)` would answer, without taking anything.
    #[pyo3(signature = (n=None))]
    fn peek(&self, py: Python<'_>, n: Option<&Bound<'_, PyAny>>) -> PyResult<Py<Decision>> {
        let n = count(py, n)?;
        let d = self.inner.peek_n_at(n, self.inner.now()).or_py(py)?;
        decision(py, d)
    }

    /// Tokens (requests) that could be taken now.
    fn available(&self) -> u64 {
        self.inner.available()
    }

    /// The most that can ever be taken at once (burst or window limit).
    #[getter]
    fn limit(&self) -> u64 {
        self.inner.limit()
    }

    /// The algorithm's name, e.g. "token_bucket".
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.inner.algorithm()
    }

    /// Takes `n` now even if they arrive only later, if within `max_wait`
    /// seconds (None: any wait). Token and leaky buckets only.
    #[pyo3(signature = (n=None, max_wait=None))]
    fn reserve(
        &self,
        py: Python<'_>,
        n: Option<&Bound<'_, PyAny>>,
        max_wait: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Reservation> {
        let n = count(py, n)?;
        let max_wait = match opt_number(py, "max_wait", max_wait)? {
            Some(s) => Some(any::seconds("max_wait", s).or_py(py)?),
            None => None,
        };
        let (wait, permit) = self
            .inner
            .reserve_n_at(n, max_wait, self.inner.now())
            .or_py(py)?;
        Ok(Reservation {
            limiter: self.inner.clone(),
            permit,
            wait,
            cancelled: AtomicBool::new(false),
        })
    }

    /// Replaces a token bucket's rate (and burst), converting its state.
    #[pyo3(signature = (rate, burst=None))]
    fn set_quota(
        &self,
        py: Python<'_>,
        rate: &Bound<'_, PyAny>,
        burst: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let b = opt_number(py, "burst", burst)?;
        let q = with_rate(py, rate, |r| any::quota(r, b))?;
        self.inner.set_quota_at(q, self.inner.now()).or_py(py)
    }

    /// Blocks the calling thread (GIL released) until `n` are taken; raises
    /// `RateLimitExceeded` at once if `timeout` seconds cannot suffice.
    #[pyo3(signature = (n=None, timeout=None))]
    fn acquire_blocking(
        &self,
        py: Python<'_>,
        n: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let n = count(py, n)?;
        let limiter = &self.inner;
        let deadline = deadline(py, limiter.now(), timeout)?;
        acquire_blocking(
            py,
            |now| limiter.acquire_step(n, deadline, now),
            || limiter.now(),
            |p| limiter.release(p),
        )
    }

    /// For `acquire`: the deadline (clock ns) for a timeout in seconds.
    #[pyo3(signature = (timeout=None))]
    fn _deadline(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<u64>> {
        deadline(py, self.inner.now(), timeout)
    }

    /// For `acquire`: one step (see `step_to_py`).
    fn _step(
        &self,
        py: Python<'_>,
        n: &Bound<'_, PyAny>,
        deadline: Option<u64>,
    ) -> PyResult<Py<PyAny>> {
        let n = count(py, Some(n))?;
        let step = self
            .inner
            .acquire_step(n, deadline, self.inner.now())
            .or_py(py)?;
        step_to_py(py, step)
    }

    /// For `acquire`: gives back a step's tokens (once).
    fn _release(&self, permit: &Bound<'_, Permit_>) {
        let p = permit.get();
        if !p.released.swap(true, Ordering::AcqRel) {
            self.inner.release(p.permit);
        }
    }
}

/// Tokens taken ahead of time by `reserve`: act after `delay` seconds, or
/// `cancel()` to give them back.
#[pyclass(frozen, module = "ratebound")]
struct Reservation {
    limiter: Arc<AnyLimiter>,
    permit: Permit,
    wait: u64,
    cancelled: AtomicBool,
}

#[pymethods]
impl Reservation {
    /// Seconds to wait before acting.
    #[getter]
    fn delay(&self) -> f64 {
        nanos_to_secs(self.wait)
    }
    #[getter]
    fn delay_ns(&self) -> u64 {
        self.wait
    }
    #[getter]
    fn tokens(&self) -> u64 {
        self.permit.tokens()
    }
    /// Gives the tokens back as far as no later taker depends on them
    /// (once; later calls do nothing).
    fn cancel(&self) {
        if !self.cancelled.swap(true, Ordering::AcqRel) {
            self.limiter.release(self.permit);
        }
    }
    fn __repr__(&self) -> String {
        format!(
            "Reservation(tokens={}, delay={})",
            self.permit.tokens(),
            nanos_to_secs(self.wait)
        )
    }
}

// ----------------------------------------------------------------- keyed

/// A limit per key (str, bytes or int); keys are stored as 128-bit
/// fingerprints, off the Python heap.
#[pyclass(frozen, subclass, module = "ratebound")]
struct KeyedLimiter {
    inner: Arc<AnyKeyed>,
}

#[pymethods]
impl KeyedLimiter {
    #[new]
    #[pyo3(signature = (rate=None, burst=None, *, algorithm="token_bucket", limit=None, window=None, max_keys=None, overflow="evict", clock=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        rate: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
        algorithm: &str,
        limit: Option<&Bound<'_, PyAny>>,
        window: Option<&Bound<'_, PyAny>>,
        max_keys: Option<&Bound<'_, PyAny>>,
        overflow: &str,
        clock: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let c = clock_of(clock)?;
        let b = opt_number(py, "burst", burst)?;
        let l = opt_number(py, "limit", limit)?;
        let w = opt_number(py, "window", window)?;
        let alg = match rate.filter(|r| !r.is_none()) {
            Some(r) => with_rate(py, r, |r| any::keyed_algorithm(algorithm, Some(r), b, l, w))?,
            None => any::keyed_algorithm(algorithm, None, b, l, w).or_py(py)?,
        };
        let max = match opt_number(py, "max_keys", max_keys)? {
            Some(m) => Some(any::whole("max_keys", m, 1).or_py(py)? as usize),
            None => None,
        };
        let o = any::overflow(overflow).or_py(py)?;
        Ok(KeyedLimiter {
            inner: Arc::new(AnyKeyed::new(alg, max, o, c).or_py(py)?),
        })
    }

    /// Takes `n` (default 1) for `key` if its limit allows.
    #[pyo3(signature = (key, n=None))]
    fn check(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<Decision>> {
        let n = count(py, n)?;
        let d = with_key(key, |k| self.inner.check_n(k, n).or_py(py))?;
        decision(py, d)
    }

    /// Like `check`, returning only whether it was allowed.
    #[pyo3(signature = (key, n=None))]
    fn try_acquire(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let n = count(py, n)?;
        with_key(key, |k| {
            Ok(self.inner.check_n(k, n).or_py(py)?.is_allowed())
        })
    }

    /// Tokens `key` could take now.
    fn available(&self, key: &Bound<'_, PyAny>) -> PyResult<u64> {
        with_key(key, |k| Ok(self.inner.available(k)))
    }

    /// Forgets `key`; whether it was tracked.
    fn remove(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        with_key(key, |k| Ok(self.inner.remove(k)))
    }

    /// Gives `key` a full quota again.
    fn reset(&self, key: &Bound<'_, PyAny>) -> PyResult<()> {
        with_key(key, |k| {
            self.inner.reset(k);
            Ok(())
        })
    }

    /// Drops keys whose state is fresh (as if never seen); how many.
    fn cleanup(&self, py: Python<'_>) -> usize {
        let inner = &self.inner;
        py.detach(|| inner.cleanup())
    }

    /// Drops keys idle for at least `seconds`; how many.
    fn cleanup_idle(&self, py: Python<'_>, seconds: &Bound<'_, PyAny>) -> PyResult<usize> {
        let d = any::seconds("seconds", number(py, "seconds", seconds)?).or_py(py)?;
        let inner = &self.inner;
        Ok(py.detach(|| inner.cleanup_idle(d)))
    }

    /// The cap on tracked keys.
    #[getter]
    fn max_keys(&self) -> usize {
        self.inner.max_keys()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Blocks (GIL released) until `n` are taken for `key`; raises
    /// `RateLimitExceeded` at once if `timeout` seconds cannot suffice.
    #[pyo3(signature = (key, n=None, timeout=None))]
    fn acquire_blocking(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let n = count(py, n)?;
        let limiter = &self.inner;
        let deadline = deadline(py, limiter.now(), timeout)?;
        with_key(key, |key| {
            acquire_blocking(
                py,
                |now| limiter.acquire_step(key, n, deadline, now),
                || limiter.now(),
                |_| {},
            )
        })
    }

    /// For `acquire`: the deadline (clock ns) for a timeout in seconds.
    #[pyo3(signature = (timeout=None))]
    fn _deadline(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<u64>> {
        deadline(py, self.inner.now(), timeout)
    }

    /// For `acquire`: one step (see `step_to_py`).
    fn _step(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: &Bound<'_, PyAny>,
        deadline: Option<u64>,
    ) -> PyResult<Py<PyAny>> {
        let n = count(py, Some(n))?;
        let step = with_key(key, |k| {
            self.inner
                .acquire_step(k, n, deadline, self.inner.now())
                .or_py(py)
        })?;
        step_to_py(py, step)
    }
}

// ----------------------------------------------------------------- redis

/// The raw bytes of a Redis key (str: its UTF-8 bytes; bytes as given;
/// int: its decimal digits), for `f`: Redis stores the key itself (after
/// the prefix), never a fingerprint.
fn with_raw_key<R>(obj: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> PyResult<R>) -> PyResult<R> {
    with_key(obj, |k| match k {
        Key::Text(t) => f(t.as_bytes()),
        Key::Bytes(b) => f(b),
        Key::Int(i) => f(i.to_string().as_bytes()),
    })
}

/// Seconds (int or float, ≥ 0) as a `Duration`, or `default` for `None`.
fn opt_seconds(
    py: Python<'_>,
    name: &'static str,
    obj: Option<&Bound<'_, PyAny>>,
    default: Duration,
) -> PyResult<Duration> {
    match opt_number(py, name, obj)? {
        Some(s) => any::seconds(name, s).or_py(py),
        None => Ok(default),
    }
}

/// A whole number ≥ `min` (int, or a float without a fraction), or
/// `default` for `None`.
fn opt_whole(
    py: Python<'_>,
    name: &'static str,
    obj: Option<&Bound<'_, PyAny>>,
    min: u64,
    default: u64,
) -> PyResult<u64> {
    match opt_number(py, name, obj)? {
        Some(n) => any::whole(name, n, min).or_py(py),
        None => Ok(default),
    }
}

/// One script run the engine asks for (see `ratebound.redis`): run
/// `EVALSHA sha 1 key *args`, and on `NOSCRIPT` `EVAL text 1 key *args`,
/// then hand the outcome to `RedisEngine_.finish`.
#[pyclass(frozen, module = "ratebound")]
struct RedisCall_ {
    inner: Call,
}

#[pymethods]
impl RedisCall_ {
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
    /// What the call asks: "check", "lease" or "return".
    #[getter]
    fn kind(&self) -> &'static str {
        match self.inner.kind {
            CallKind::Check => "check",
            CallKind::Lease => "lease",
            CallKind::Return => "return",
        }
    }
    /// The tokens asked for.
    #[getter]
    fn n(&self) -> u64 {
        self.inner.n
    }
    /// The same call judged at `now_us` (µs of Redis time) instead of
    /// Redis' `TIME`: the explicit-time twin, for replaying test vectors.
    fn at(&self, py: Python<'_>, now_us: &Bound<'_, PyAny>) -> PyResult<RedisCall_> {
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
        Ok(RedisCall_ {
            inner: self.inner.clone().at(now),
        })
    }
    fn __repr__(&self) -> String {
        format!(
            "RedisCall_(script={:?}, key={:?}, args={:?})",
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
#[pyclass(frozen, module = "ratebound")]
struct RedisEngine_ {
    inner: Engine,
}

impl RedisEngine_ {
    fn decision(py: Python<'_>, d: ratebound_redis::Decision) -> PyResult<Py<Decision>> {
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
impl RedisEngine_ {
    #[new]
    #[pyo3(signature = (algorithm="token_bucket", *, rate=None, burst=None, limit=None, window=None, prefix="rb:", on_error="open", local_rate=None, timeout=None, lease=None, lease_ttl=None, breaker_threshold=None, breaker_cooldown=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        algorithm: &str,
        rate: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
        limit: Option<&Bound<'_, PyAny>>,
        window: Option<&Bound<'_, PyAny>>,
        prefix: &str,
        on_error: &str,
        local_rate: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        lease: Option<&Bound<'_, PyAny>>,
        lease_ttl: Option<&Bound<'_, PyAny>>,
        breaker_threshold: Option<&Bound<'_, PyAny>>,
        breaker_cooldown: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let b = opt_number(py, "burst", burst)?;
        let l = opt_number(py, "limit", limit)?;
        let w = opt_number(py, "window", window)?;
        let keyed = match rate.filter(|r| !r.is_none()) {
            Some(r) => with_rate(py, r, |r| any::keyed_algorithm(algorithm, Some(r), b, l, w))?,
            None => any::keyed_algorithm(algorithm, None, b, l, w).or_py(py)?,
        };
        let algorithm = match keyed {
            KeyedAlgorithm::TokenBucket(q) => Algorithm::TokenBucket(q),
            KeyedAlgorithm::FixedWindow { limit, window } => {
                Algorithm::FixedWindow { limit, window }
            }
            KeyedAlgorithm::SlidingWindow { limit, window } => {
                Algorithm::SlidingWindow { limit, window }
            }
            _ => {
                return Err(PyValueError::new_err(format!(
                    "unknown algorithm {algorithm:?}"
                )));
            }
        };
        let mut config = Config::new(algorithm);
        config.prefix = prefix.to_string();
        config.on_error =
            OnError::parse(on_error, opt_number(py, "local_rate", local_rate)?).or_py(py)?;
        config.timeout = opt_seconds(py, "timeout", timeout, config.timeout)?;
        config.lease = opt_whole(py, "lease", lease, 0, 0)?;
        config.lease_ttl = opt_seconds(py, "lease_ttl", lease_ttl, config.lease_ttl)?;
        let threshold = opt_whole(
            py,
            "breaker_threshold",
            breaker_threshold,
            1,
            u64::from(config.breaker_threshold),
        )?;
        config.breaker_threshold = u32::try_from(threshold).map_err(|_| {
            py_err(
                py,
                Error::InvalidNumber {
                    name: "breaker_threshold",
                    value: threshold.to_string(),
                    reason: "must be at most 2^32 - 1",
                },
            )
        })?;
        config.breaker_cooldown = opt_seconds(
            py,
            "breaker_cooldown",
            breaker_cooldown,
            config.breaker_cooldown,
        )?;
        Ok(RedisEngine_ {
            inner: Engine::new(config).or_py(py)?,
        })
    }

    /// Step one of taking `n` (default 1) for `key` (str, bytes or int):
    /// a `Decision` already (a lease, or the fail policy while the breaker
    /// is open), or a `RedisCall_` to run and pass to `finish`.
    #[pyo3(signature = (key, n=None))]
    fn begin(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let n = count(py, n)?;
        match with_raw_key(key, |k| self.inner.begin(k, n).or_py(py))? {
            Begin::Done(d) => Ok(Self::decision(py, d)?.into_any()),
            Begin::Call(call) => Ok(Py::new(py, RedisCall_ { inner: call })?.into_any()),
        }
    }

    /// Step two: the decision from what became of `call` — its `reply` (the
    /// script's list of ints), `timed_out=True` (no reply within the
    /// deadline), or `error` (a connection or server error's text).
    #[pyo3(signature = (call, reply=None, timed_out=false, error=None))]
    fn finish(
        &self,
        py: Python<'_>,
        call: &Bound<'_, RedisCall_>,
        reply: Option<&Bound<'_, PyAny>>,
        timed_out: bool,
        error: Option<&str>,
    ) -> PyResult<Py<Decision>> {
        let call = &call.get().inner;
        let d = if timed_out {
            self.inner.finish(call, Outcome::Timeout)
        } else if let Some(e) = error {
            self.inner.finish(call, Outcome::Failed(e))
        } else if let Some(r) = reply.filter(|r| !r.is_none()) {
            // Anything but a list of ints is a server not running our
            // script: a failure like any other.
            match r.extract::<Vec<i64>>() {
                Ok(v) if !r.is_instance_of::<PyString>() && !r.is_instance_of::<PyBytes>() => {
                    self.inner.finish(call, Outcome::Reply(&v))
                }
                _ => self
                    .inner
                    .finish(call, Outcome::Failed("the reply is not a list of integers")),
            }
        } else {
            return Err(PyTypeError::new_err(
                "finish needs the call's reply, timed_out=True or error",
            ));
        };
        Self::decision(py, d)
    }

    /// The calls that give every unspent leased token back (run them on
    /// close); the leases are forgotten. Their outcome needs no `finish`.
    fn drain(&self) -> Vec<RedisCall_> {
        self.inner
            .drain()
            .into_iter()
            .map(|inner| RedisCall_ { inner })
            .collect()
    }

    /// Whether the circuit breaker is open (Redis is being spared).
    #[getter]
    fn breaker_open(&self) -> bool {
        self.inner.breaker_open()
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

// ------------------------------------------------------------------ http

/// A middleware option as the core's loose parser takes it: `None` is "not
/// given" (the core's default).
fn set_option(options: &mut GateOptions, name: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = value.py();
    if value.is_none() {
        return Ok(());
    }
    let result = if let Ok(s) = value.cast::<PyString>() {
        options.set(name, Loose::Text(&s.to_cow()?))
    } else if value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must not be a bool, got {}",
            value.repr()?
        )));
    } else if value.is_instance_of::<PyInt>() || value.is_instance_of::<PyFloat>() {
        options.set(name, Loose::Number(number(py, "option", value)?))
    } else {
        let mut texts = Vec::new();
        for item in value.try_iter().map_err(|_| {
            PyTypeError::new_err(format!(
                "{name} must be a str, a number or a list of str, got {}",
                type_name(value)
            ))
        })? {
            let item = item?;
            texts.push(item.extract::<String>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "{name} entries must be str, got {}",
                    type_name(&item)
                ))
            })?);
        }
        let list: Vec<&str> = texts.iter().map(String::as_str).collect();
        options.set(name, Loose::List(&list))
    };
    result.or_py(py)
}

/// The header lines of a request as the Python servers hand them over: an
/// ASGI `scope["headers"]` list of `(name, value)` bytes pairs, or a WSGI
/// environ (`HTTP_X_API_KEY`; the server has already joined repeated lines
/// with commas).
enum PyHeaders<'a, 'py> {
    Asgi(&'a Bound<'py, PyAny>),
    Environ(&'a Bound<'py, PyDict>, &'a [(String, Py<PyString>)]),
    None,
}

/// Bytes of a latin-1 WSGI string (PEP 3333 "native strings").
fn latin1(s: &str, out: &mut Vec<u8>) {
    out.clear();
    out.extend(
        s.chars()
            .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?')),
    );
}

impl Headers for PyHeaders<'_, '_> {
    fn for_each_line<F: FnMut(&[u8])>(&self, name: &str, mut f: F) {
        match self {
            PyHeaders::None => {}
            PyHeaders::Asgi(list) => {
                let Ok(iter) = list.try_iter() else { return };
                for item in iter.flatten() {
                    let (Ok(n), Ok(v)) = (item.get_item(0), item.get_item(1)) else {
                        continue;
                    };
                    let (Ok(n), Ok(v)) = (n.cast::<PyBytes>(), v.cast::<PyBytes>()) else {
                        continue;
                    };
                    if n.as_bytes().eq_ignore_ascii_case(name.as_bytes()) {
                        f(v.as_bytes());
                    }
                }
            }
            PyHeaders::Environ(environ, keys) => {
                let Some((_, key)) = keys.iter().find(|(n, _)| n == name) else {
                    return;
                };
                let Ok(Some(value)) = environ.get_item(key.bind(environ.py())) else {
                    return;
                };
                let mut buf = Vec::new();
                if let Ok(s) = value.cast::<PyString>() {
                    if let Ok(text) = s.to_cow() {
                        latin1(&text, &mut buf);
                        f(&buf);
                    }
                } else if let Ok(b) = value.cast::<PyBytes>() {
                    f(b.as_bytes());
                }
            }
        }
    }
}

/// The whole decision of the ASGI and WSGI middleware (`ratebound.asgi`,
/// `ratebound.wsgi` drive it): built from the middleware's options by the
/// core's parser, every rule and default the core's.
#[pyclass(frozen, module = "ratebound")]
struct Gate_ {
    inner: Gate,
    /// Header names and the fixed policy value, made once as Python
    /// objects: `(name, as bytes, as str)`.
    fixed: Vec<(String, Py<PyAny>, Py<PyAny>)>,
    /// The header names the gate reads, with their WSGI environ keys.
    environ_keys: Vec<(String, Py<PyString>)>,
}

const FIELD_NAMES: [&str; 7] = [
    "ratelimit-policy",
    "ratelimit",
    "retry-after",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "text/plain; charset=utf-8",
];

impl Gate_ {
    /// `f` given the request `key`, `peer` and `headers` (an ASGI header
    /// list, or with `wsgi` the environ) make.
    fn with_request<'py, R>(
        &self,
        key: Option<&Bound<'py, PyAny>>,
        peer: Option<&str>,
        headers: Option<&Bound<'py, PyAny>>,
        wsgi: bool,
        f: impl FnOnce(&any::Request<'_, PyHeaders<'_, 'py>>) -> PyResult<R>,
    ) -> PyResult<R> {
        let peer = peer.and_then(|p| p.parse::<IpAddr>().ok());
        let environ;
        let lines = match headers.filter(|h| !h.is_none()) {
            None => PyHeaders::None,
            Some(h) if wsgi => {
                environ = h
                    .cast::<PyDict>()
                    .map_err(|_| PyTypeError::new_err("a WSGI environ must be a dict"))?;
                PyHeaders::Environ(environ, &self.environ_keys)
            }
            Some(h) => PyHeaders::Asgi(h),
        };
        let run = |key: Option<Key<'_>>| {
            f(&any::Request {
                key,
                peer,
                headers: &lines,
            })
        };
        match key.filter(|k| !k.is_none()) {
            Some(k) => with_key(k, |k| run(Some(k))),
            None => run(None),
        }
    }

    /// `(status, headers, content_type, body)` for Python.
    fn verdict<'py>(
        &self,
        py: Python<'py>,
        v: &any::Verdict<'_>,
        wsgi: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let headers = PyList::empty(py);
        for (name, value) in v.fields.iter() {
            let value = match value {
                any::Field::Text(t) => self.text(py, t, wsgi),
                any::Field::Number(n) => self.text(py, &n.to_string(), wsgi),
            };
            headers.append((self.text(py, name, wsgi), value))?;
        }
        let (ctype, body) = match &v.body {
            Some((c, b)) => (
                Some(self.text(py, c, wsgi)),
                Some(PyBytes::new(py, b.as_bytes())),
            ),
            None => (None, None),
        };
        (v.status, headers, ctype, body).into_pyobject(py)
    }

    /// `text` as bytes (ASGI) or str (WSGI), from the cache when it is one of
    /// the fixed strings.
    fn text<'py>(&self, py: Python<'py>, text: &str, wsgi: bool) -> Bound<'py, PyAny> {
        match self.fixed.iter().find(|(t, _, _)| t == text) {
            Some((_, b, s)) => if wsgi { s } else { b }.bind(py).clone(),
            None if wsgi => PyString::new(py, text).into_any(),
            None => PyBytes::new(py, text.as_bytes()).into_any(),
        }
    }
}

#[pymethods]
impl Gate_ {
    /// `policies`: `(name, algorithm, rate, burst, limit, window)` tuples;
    /// `options`: the middleware's options by name (`None` values are not
    /// given); `given_key`: the application passes each request's key.
    #[new]
    #[pyo3(signature = (policies, options, *, given_key=false, clock=None, remote=None))]
    fn new(
        py: Python<'_>,
        policies: &Bound<'_, PyAny>,
        options: &Bound<'_, PyDict>,
        given_key: bool,
        clock: Option<&Bound<'_, PyAny>>,
        remote: Option<Vec<(String, PyRef<'_, RedisEngine_>)>>,
    ) -> PyResult<Self> {
        let mut list = Vec::new();
        for item in policies.try_iter()? {
            let item = item?;
            let tuple = item.cast::<PyTuple>().map_err(|_| {
                PyTypeError::new_err(
                    "policies must be (name, algorithm, rate, burst, limit, window) tuples",
                )
            })?;
            let name: String = tuple.get_item(0)?.extract()?;
            let algorithm: String = tuple.get_item(1)?.extract()?;
            let rate = tuple.get_item(2)?;
            let b = opt_number(py, "burst", Some(&tuple.get_item(3)?))?;
            let l = opt_number(py, "limit", Some(&tuple.get_item(4)?))?;
            let w = opt_number(py, "window", Some(&tuple.get_item(5)?))?;
            let alg = if rate.is_none() {
                any::keyed_algorithm(&algorithm, None, b, l, w).or_py(py)?
            } else {
                with_rate(py, &rate, |r| {
                    any::keyed_algorithm(&algorithm, Some(r), b, l, w)
                })?
            };
            list.push((name, alg));
        }
        let mut o = GateOptions::default();
        for (name, value) in options.iter() {
            let name: String = name.extract()?;
            set_option(&mut o, &name, &value)?;
        }
        if given_key {
            o.key = KeySource::Given;
        }
        for (name, engine) in remote.iter().flatten() {
            o.remote
                .push((name.clone(), engine.inner.config().algorithm.keyed()));
        }
        let inner = Gate::new(list, o, clock_of(clock)?).or_py(py)?;
        let fixed = FIELD_NAMES
            .iter()
            .copied()
            .chain([inner.policy_field()])
            .map(|t| {
                (
                    t.to_string(),
                    PyBytes::new(py, t.as_bytes()).into_any().unbind(),
                    PyString::new(py, t).into_any().unbind(),
                )
            })
            .collect();
        let environ_keys = inner
            .header_names()
            .map(|n| {
                let key = format!("HTTP_{}", n.to_ascii_uppercase().replace('-', "_"));
                (n.to_string(), PyString::new(py, &key).unbind())
            })
            .collect();
        Ok(Gate_ {
            inner,
            fixed,
            environ_keys,
        })
    }

    /// `(status, headers, content_type, body)`: status 0 lets the request
    /// through with `headers` added to its response; otherwise answer with
    /// status, headers and body. `headers` in: the ASGI scope's header
    /// list, or with `wsgi=True` the WSGI environ. Header names and values
    /// and the content type out are bytes, or with `wsgi=True` str (the body
    /// stays bytes).
    #[pyo3(signature = (key, peer=None, headers=None, wsgi=false))]
    fn decide<'py>(
        &self,
        py: Python<'py>,
        key: Option<&Bound<'py, PyAny>>,
        peer: Option<&str>,
        headers: Option<&Bound<'py, PyAny>>,
        wsgi: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        self.with_request(key, peer, headers, wsgi, |r| {
            self.verdict(py, &self.inner.decide(r), wsgi)
        })
    }

    /// The request's key as text every instance derives alike, for the
    /// `remote` (Redis) policies: bytes (`key:…`, `ip:…` or `anonymous`), or
    /// the status a keyless request is refused with.
    #[pyo3(signature = (key, peer=None, headers=None, wsgi=false))]
    fn identity<'py>(
        &self,
        py: Python<'py>,
        key: Option<&Bound<'py, PyAny>>,
        peer: Option<&str>,
        headers: Option<&Bound<'py, PyAny>>,
        wsgi: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.with_request(key, peer, headers, wsgi, |r| {
            Ok(match self.inner.identity(r) {
                Ok(text) => PyBytes::new(py, &text).into_any(),
                Err(status) => status.into_pyobject(py)?.into_any(),
            })
        })
    }

    /// `decide` with the `remote` policies' decisions for the request's
    /// `identity`, in order (none when `identity` gave a status).
    #[pyo3(signature = (key, peer, headers, remote, wsgi=false))]
    fn decide_with<'py>(
        &self,
        py: Python<'py>,
        key: Option<&Bound<'py, PyAny>>,
        peer: Option<&str>,
        headers: Option<&Bound<'py, PyAny>>,
        remote: Vec<PyRef<'py, Decision>>,
        wsgi: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let decisions: Vec<ratebound::Decision> = remote.iter().map(|d| d.inner).collect();
        self.with_request(key, peer, headers, wsgi, |r| {
            self.verdict(py, &self.inner.decide_with(r, &decisions), wsgi)
        })
    }

    /// Load shedding: a place among the requests in flight (always `True`
    /// without a concurrency limit); pair a `True` with one `leave()`.
    fn try_enter(&self) -> bool {
        self.inner.try_enter()
    }

    /// Gives back a place from `try_enter`.
    fn leave(&self) {
        self.inner.leave();
    }

    /// Whether a concurrency limit is set.
    #[getter]
    fn capped(&self) -> bool {
        self.inner.is_capped()
    }

    /// The 503 answer to a shed request, as `decide` returns answers.
    #[pyo3(signature = (wsgi=false))]
    fn shed<'py>(&self, py: Python<'py>, wsgi: bool) -> PyResult<Bound<'py, PyTuple>> {
        self.verdict(py, &self.inner.shed(), wsgi)
    }

    /// The `RateLimit-Policy` field value.
    #[getter]
    fn policy_field(&self) -> &str {
        self.inner.policy_field()
    }

    /// Keys tracked (by the first policy).
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Drops fresh per-key state; how many entries went.
    fn cleanup(&self, py: Python<'_>) -> usize {
        let inner = &self.inner;
        py.detach(|| inner.cleanup())
    }
}

/// An IPv6 prefix length: a whole number ≥ 0; above 128 counts as 128.
fn prefix_of(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<u8> {
    let bits = any::whole("ipv6_prefix", number(py, "ipv6_prefix", obj)?, 0).or_py(py)?;
    Ok(bits.min(128) as u8)
}

/// Whole seconds, rounded up, for a wait of `nanos` (the Retry-After value).
#[pyfunction]
fn retry_after_secs(py: Python<'_>, nanos: &Bound<'_, PyAny>) -> PyResult<u64> {
    Ok(ratebound::http::retry_after_secs(Duration::from_nanos(
        whole_nanos(py, nanos)?,
    )))
}

/// The address to key on: IPv4-mapped unwrapped, IPv6 cut to `prefix` bits.
#[pyfunction]
#[pyo3(signature = (ip, prefix=None))]
fn ip_key(py: Python<'_>, ip: &str, prefix: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
    let prefix = match prefix.filter(|p| !p.is_none()) {
        Some(p) => prefix_of(py, p)?,
        None => 64,
    };
    let ip: IpAddr = ip
        .parse()
        .map_err(|_| PyValueError::new_err(format!("not an IP address: {ip:?}")))?;
    Ok(ratebound::http::ip_key(ip, prefix).to_string())
}

/// The client's address from the peer and the request's header lines
/// (`(name, value)` pairs of str or bytes, in order), believing only the
/// `client_ip_header` (default `X-Forwarded-For`) of `trusted_proxies` (CIDR
/// strings or a hop count) — the middleware's rule.
#[pyfunction]
#[pyo3(signature = (peer, headers=None, trusted_proxies=None, client_ip_header=None))]
fn client_ip(
    py: Python<'_>,
    peer: &str,
    headers: Option<&Bound<'_, PyAny>>,
    trusted_proxies: Option<&Bound<'_, PyAny>>,
    client_ip_header: Option<&str>,
) -> PyResult<String> {
    let peer: IpAddr = peer
        .parse()
        .map_err(|_| PyValueError::new_err(format!("not an IP address: {peer:?}")))?;
    let mut o = GateOptions::default();
    if let Some(t) = trusted_proxies {
        set_option(&mut o, "trusted_proxies", t)?;
    }
    let forwarding = match client_ip_header {
        Some(name) => Forwarding::parse(name).or_py(py)?,
        None => Forwarding::default(),
    };
    let mut lines: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    if let Some(h) = headers.filter(|h| !h.is_none()) {
        let as_bytes = |o: Bound<'_, PyAny>| -> PyResult<Vec<u8>> {
            if let Ok(s) = o.cast::<PyString>() {
                Ok(s.to_cow()?.as_bytes().to_vec())
            } else {
                o.extract::<Vec<u8>>().map_err(|_| {
                    PyTypeError::new_err("header lines are (name, value) pairs of str or bytes")
                })
            }
        };
        for item in h.try_iter()? {
            let item = item?;
            lines.push((as_bytes(item.get_item(0)?)?, as_bytes(item.get_item(1)?)?));
        }
    }
    Ok(ratebound::http::client_ip(peer, &lines, &forwarding, &o.trusted).to_string())
}

/// The `RateLimit-Policy` value for `(name, quota_string)` token-bucket
/// policies.
#[pyfunction]
fn ratelimit_policy(py: Python<'_>, policies: Vec<(String, String)>) -> PyResult<String> {
    let mut list = Vec::new();
    for (name, quota) in policies {
        let q = ratebound::Quota::parse(&quota).or_py(py)?;
        list.push(ratebound::http::Policy::for_quota(&name, q).or_py(py)?);
    }
    Ok(ratebound::http::ratelimit_policy(&list))
}

/// The clock source the default clock uses ("tsc" or "os").
#[pyfunction]
fn clock_source() -> &'static str {
    ratebound::MonotonicClock::source()
}

#[pymodule(gil_used = false)]
fn _ratebound(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ManualClock>()?;
    m.add_class::<Decision>()?;
    m.add_class::<Limiter>()?;
    m.add_class::<Reservation>()?;
    m.add_class::<Permit_>()?;
    m.add_class::<KeyedLimiter>()?;
    m.add_class::<Gate_>()?;
    m.add_class::<RedisEngine_>()?;
    m.add_class::<RedisCall_>()?;
    m.add_function(wrap_pyfunction!(retry_after_secs, m)?)?;
    m.add_function(wrap_pyfunction!(ip_key, m)?)?;
    m.add_function(wrap_pyfunction!(client_ip, m)?)?;
    m.add_function(wrap_pyfunction!(ratelimit_policy, m)?)?;
    m.add_function(wrap_pyfunction!(clock_source, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
