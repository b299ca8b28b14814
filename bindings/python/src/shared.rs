//! `SharedTokenBucket` and `SharedKeyedLimiter`: limits shared by every
//! process on the host through a file-backed memory map (crate
//! `ratebound-shm`). Conversions only: the crate opens, checks and decides.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use ratebound::any;
use ratebound::{Error, KeyedAlgorithm};
use ratebound_shm::{Error as ShmError, SharedKeyedLimiter as ShmKeyed, SharedLimiter};

use crate::convert::{count, number, opt_number, opt_seconds, with_key, with_rate};
use crate::decision::{Decision, decision};
use crate::error::{OrPy, error_class, py_err};
use crate::limiters::{Holder, Reservation};
use crate::waiting::{Source, Waiter};

/// A shared-memory error as a Python exception: `SharedStatePermissionError`
/// (a `PermissionError`) for the file's owner or mode, `SharedStateError`
/// (an `OSError`) for the rest of the file's troubles, the core's classes
/// for limiter errors. Each carries `.code`.
pub(crate) fn shm_err(py: Python<'_>, e: ShmError) -> PyErr {
    let class = match e {
        ShmError::Limit(core) => return py_err(py, core),
        ShmError::Permissions { .. } => "SharedStatePermissionError",
        _ => "SharedStateError",
    };
    let made = (|| -> PyResult<PyErr> {
        let cls = error_class(py, class)?;
        Ok(PyErr::from_value(cls.call1((e.to_string(), e.code()))?))
    })();
    made.unwrap_or_else(|err| err)
}

pub(crate) trait OrShm<T> {
    fn or_shm(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> OrShm<T> for Result<T, ShmError> {
    fn or_shm(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| shm_err(py, e))
    }
}

/// A token bucket shared by every process that opens `path`.
#[pyclass(frozen, subclass, module = "ratebound")]
pub(crate) struct SharedTokenBucket {
    inner: Arc<SharedLimiter>,
}

/// `seconds` as a pause's duration: a finite number ≥ 0.
fn pause_of(py: Python<'_>, seconds: &Bound<'_, PyAny>) -> PyResult<std::time::Duration> {
    any::pause_seconds(number(py, "seconds", seconds)?).or_py(py)
}

#[pymethods]
impl SharedTokenBucket {
    #[new]
    #[pyo3(signature = (path, rate=None, burst=None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        rate: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let rate = rate
            .filter(|r| !r.is_none())
            .ok_or_else(|| py_err(py, Error::Missing { name: "rate" }))?;
        let b = opt_number(py, "burst", burst)?;
        let quota = with_rate(py, rate, |r| any::quota(r, b))?;
        Ok(SharedTokenBucket {
            inner: Arc::new(
                SharedLimiter::open(path, KeyedAlgorithm::TokenBucket(quota)).or_shm(py)?,
            ),
        })
    }

    /// Takes `n` (default 1) now if all `n` are there, for every process.
    #[pyo3(signature = (n=None))]
    fn check(&self, py: Python<'_>, n: Option<&Bound<'_, PyAny>>) -> PyResult<Py<Decision>> {
        let n = count(py, n)?;
        decision(py, self.inner.check_n(n).or_shm(py)?)
    }

    /// `check(n).allowed`, without building the decision.
    #[pyo3(signature = (n=None))]
    fn try_acquire(&self, py: Python<'_>, n: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let n = count(py, n)?;
        Ok(self.inner.check_n(n).or_shm(py)?.is_allowed())
    }

    /// Tokens available now.
    fn available(&self) -> u64 {
        self.inner.available()
    }

    /// Takes `n` now on the shared word even if they arrive only later, if
    /// within `max_wait` seconds (None: any wait), for every process.
    #[pyo3(signature = (n=None, max_wait=None))]
    fn reserve(
        &self,
        py: Python<'_>,
        n: Option<&Bound<'_, PyAny>>,
        max_wait: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Reservation> {
        let n = count(py, n)?;
        let max_wait = opt_seconds(py, "max_wait", max_wait)?.unwrap_or(std::time::Duration::MAX);
        let r = self.inner.reserve_n(n, max_wait).or_shm(py)?;
        let wait = u64::try_from(r.delay().as_nanos()).unwrap_or(u64::MAX);
        let permit = r.into_permit();
        Ok(Reservation::new(
            Holder::Shared(self.inner.clone()),
            permit,
            wait,
        ))
    }

    /// Empties the bucket for every process for `seconds`; it refills at
    /// the rate afterwards.
    fn pause(&self, py: Python<'_>, seconds: &Bound<'_, PyAny>) -> PyResult<()> {
        let d = pause_of(py, seconds)?;
        self.inner.pause(d).or_shm(py)
    }

    /// Lifts the pause for every process now if nothing was built on it:
    /// "lifted", "not_paused" or "queued".
    fn resume(&self, py: Python<'_>) -> PyResult<&'static str> {
        self.inner.resume().map(|r| r.as_str()).or_shm(py)
    }

    /// Blocks the calling thread (GIL released) until `n` are taken; raises
    /// `RateLimitExceeded` at once, taking nothing, if `timeout` seconds
    /// cannot suffice.
    #[pyo3(signature = (n=None, timeout=None))]
    fn acquire_blocking(
        &self,
        py: Python<'_>,
        n: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self._waiter(py, n, timeout)?.run_blocking(py)
    }

    /// For `acquire`: a wait for `n` (see `Waiter`).
    #[pyo3(signature = (n=None, timeout=None))]
    fn _waiter(
        &self,
        py: Python<'_>,
        n: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Waiter> {
        let n = count(py, n)?;
        Waiter::of(py, Source::Shared(self.inner.clone()), n, timeout)
    }

    /// The burst.
    #[getter]
    fn limit(&self) -> u64 {
        self.inner.limit()
    }

    /// The algorithm: "token_bucket", "fixed_window" or "sliding_window".
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.inner.algorithm().name()
    }

    /// The file the processes share.
    #[getter]
    fn path(&self) -> PathBuf {
        self.inner.path().to_path_buf()
    }

    fn __repr__(&self) -> String {
        format!(
            "SharedTokenBucket(path={:?}, limit={}, available={})",
            self.inner.path().display().to_string(),
            self.inner.limit(),
            self.inner.available()
        )
    }
}

/// One limit per key, shared by every process that opens `path`; room for
/// `max_keys` keys, fixed when the file is made.
#[pyclass(frozen, subclass, module = "ratebound")]
pub(crate) struct SharedKeyedLimiter {
    inner: Arc<ShmKeyed>,
}

impl SharedKeyedLimiter {
    /// The algorithm, for a middleware that takes this limiter as a policy.
    pub(crate) fn algorithm(&self) -> KeyedAlgorithm {
        self.inner.algorithm()
    }
}

#[pymethods]
impl SharedKeyedLimiter {
    #[new]
    #[pyo3(signature = (path, rate=None, burst=None, *, algorithm=None, limit=None, window=None, max_keys=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        rate: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
        algorithm: Option<&str>,
        limit: Option<&Bound<'_, PyAny>>,
        window: Option<&Bound<'_, PyAny>>,
        max_keys: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let alg = crate::keyed::keyed_algorithm_of(py, algorithm, rate, burst, limit, window)?;
        let max = match opt_number(py, "max_keys", max_keys)? {
            Some(m) => any::whole("max_keys", m, 1).or_py(py)?,
            None => ratebound_shm::DEFAULT_SHARED_MAX_KEYS,
        };
        Ok(SharedKeyedLimiter {
            inner: Arc::new(ShmKeyed::open(path, alg, max).or_shm(py)?),
        })
    }

    /// Takes `n` (default 1) for `key` if its limit allows, for every
    /// process.
    #[pyo3(signature = (key, n=None))]
    fn check(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<Decision>> {
        let n = count(py, n)?;
        let d = with_key(key, |k| self.inner.check_n(k, n).or_shm(py))?;
        decision(py, d)
    }

    /// `check(key, n).allowed`.
    #[pyo3(signature = (key, n=None))]
    fn try_acquire(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let n = count(py, n)?;
        with_key(key, |k| {
            Ok(self.inner.check_n(k, n).or_shm(py)?.is_allowed())
        })
    }

    /// How many `key` could take now.
    fn available(&self, key: &Bound<'_, PyAny>) -> PyResult<u64> {
        with_key(key, |k| Ok(self.inner.available(k)))
    }

    /// Empties `key`'s token bucket for every process for `seconds`.
    fn pause(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        seconds: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let d = pause_of(py, seconds)?;
        with_key(key, |k| self.inner.pause(k, d).or_shm(py))
    }

    /// Lifts `key`'s pause for every process now if nothing was built on
    /// it: "lifted", "not_paused" or "queued".
    fn resume(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<&'static str> {
        with_key(key, |k| self.inner.resume(k).map(|r| r.as_str()).or_shm(py))
    }

    /// Blocks (GIL released) until `n` are taken for `key`; raises
    /// `RateLimitExceeded` at once, taking nothing, if `timeout` seconds
    /// cannot suffice.
    #[pyo3(signature = (key, n=None, timeout=None))]
    fn acquire_blocking(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self._waiter(py, key, n, timeout)?.run_blocking(py)
    }

    /// For `acquire`: a wait for `n` of `key` (see `Waiter`).
    #[pyo3(signature = (key, n=None, timeout=None))]
    fn _waiter(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Waiter> {
        let n = count(py, n)?;
        Waiter::of(
            py,
            Source::SharedKeyed(self.inner.clone(), key.clone().unbind()),
            n,
            timeout,
        )
    }

    /// The most one check can take.
    #[getter]
    fn limit(&self) -> u64 {
        self.inner.limit()
    }

    /// The algorithm: "token_bucket", "fixed_window" or "sliding_window".
    #[getter(algorithm)]
    fn algorithm_name(&self) -> &'static str {
        self.inner.algorithm().name()
    }

    /// Slots in the table (twice `max_keys`, at least 64).
    #[getter]
    fn slots(&self) -> usize {
        self.inner.slots()
    }

    /// The file the processes share.
    #[getter]
    fn path(&self) -> PathBuf {
        self.inner.path().to_path_buf()
    }

    /// Slots held by a key.
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "SharedKeyedLimiter(path={:?}, keys={}, slots={})",
            self.inner.path().display().to_string(),
            self.inner.len(),
            self.inner.slots()
        )
    }
}
