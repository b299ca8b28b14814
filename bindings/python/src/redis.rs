//! Global limits in Redis: the sans-I/O engine (`RedisEngine_`) and its calls (`RedisCall_`); `ratebound.redis` does the I/O.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyInt, PyString};
use ratebound::Error;
use ratebound::any::{self, Key, Loose};
use ratebound_redis::{Algorithm, Begin, Call, Config, Engine, Outcome};

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
/// then hand the outcome to `RedisEngine_.finish`.
#[pyclass(frozen, module = "ratebound")]
pub(crate) struct RedisCall_ {
    pub(crate) inner: Call,
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
pub(crate) struct RedisEngine_ {
    pub(crate) inner: Engine,
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
    #[pyo3(signature = (algorithm="token_bucket", *, rate=None, burst=None, limit=None, window=None, prefix=None, on_error=None, local_rate=None, timeout=None, lease=None, lease_ttl=None, breaker_threshold=None, breaker_cooldown=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        algorithm: &str,
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
    ) -> PyResult<Self> {
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
        let algorithm = Algorithm::from_keyed(keyed).or_py(py)?;
        let config = Config::from_options(algorithm, &options).or_py(py)?;
        Ok(RedisEngine_ {
            inner: Engine::new(config).or_py(py)?,
        })
    }

    /// Step one of taking `n` (default 1) for `key` (str, bytes or int),
    /// within `scope` if given (a middleware's policy name: its own keys):
    /// a `Decision` already (a lease, or the fail policy while the breaker
    /// is open), or a `RedisCall_` to run and pass to `finish`.
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
