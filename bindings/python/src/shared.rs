//! `SharedTokenBucket` and `SharedKeyedLimiter`: limits shared by every
//! process on the host through a file-backed memory map (crate
//! `ratebound-shm`). Conversions only: the crate opens, checks and decides.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use ratebound::any;
use ratebound::outbound::{Learned, Learning};
use ratebound::{Error, KeyedAlgorithm, Permit};
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

/// The rate of `learned` under a token bucket's configured quota (the
/// ceiling), in tokens per second; a window does not learn.
pub(crate) fn learned_rate(algorithm: KeyedAlgorithm, learned: Learned) -> Result<f64, Error> {
    match algorithm {
        KeyedAlgorithm::TokenBucket(q) => Ok(Learning::new(q).rate(learned)),
        other => Err(Error::Unsupported {
            operation: "learning a partner's limit (a token bucket learns)",
            algorithm: other.name(),
        }),
    }
}

/// A token bucket shared by every process that opens `path`.
#[pyclass(frozen, subclass, module = "ratebound")]
pub(crate) struct SharedTokenBucket {
    inner: Arc<SharedLimiter>,
}

/// `value` (named `name`) as a pause's duration: a finite number ≥ 0.
fn pause_of(py: Python<'_>, name: &'static str, value: &Bound<'_, PyAny>) -> PyResult<Duration> {
    any::pause_seconds(number(py, name, value)?).or_py(py)
}

single_pymethods!(
    SharedTokenBucket,
    or_shm,
    pause_of,
    Source::Shared,
    Holder::Shared,
    {
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

        /// The algorithm: "token_bucket", "fixed_window" or "sliding_window".
        #[getter]
        fn algorithm(&self) -> &'static str {
            self.inner.algorithm().name()
        }

        /// For the outbound adapters: the word the file keeps of what every
        /// process's adapters learned of the partner's limit
        /// (`ratebound::outbound::Learned`, as bits; 0: nothing learned).
        fn _learned(&self) -> u64 {
            self.inner.learned().to_bits()
        }

        /// For the outbound adapters: replaces the learned word `seen` with
        /// `next` for every process if it is still `seen`, the bucket
        /// running at `next`'s share of its configured quota from now on;
        /// whether it replaced.
        fn _adapt(&self, py: Python<'_>, seen: u64, next: u64) -> PyResult<bool> {
            let (seen, next) = (Learned::from_bits(seen), Learned::from_bits(next));
            self.inner.adapt(seen, next).or_shm(py)
        }

        /// The rate learned of the partner, in tokens per second: the
        /// configured rate when nothing is learned.
        fn _learned_rate(&self, py: Python<'_>) -> PyResult<f64> {
            learned_rate(self.inner.algorithm(), self.inner.learned()).or_py(py)
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
);

impl SharedTokenBucket {
    /// The algorithm and its parameters (the adapters' ceiling).
    pub(crate) fn keyed_algorithm(&self) -> KeyedAlgorithm {
        self.inner.algorithm()
    }

    /// For `reserve`, on the shared word: the wait in nanoseconds and the
    /// permit.
    fn reserved(&self, n: u64, max_wait: Option<Duration>) -> Result<(u64, Permit), ShmError> {
        let r = self.inner.reserve_n(n, max_wait.unwrap_or(Duration::MAX))?;
        let wait = u64::try_from(r.delay().as_nanos()).unwrap_or(u64::MAX);
        Ok((wait, r.into_permit()))
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

keyed_pymethods!(
    SharedKeyedLimiter, or_shm, pause_of, Source::SharedKeyed,
    new(path: PathBuf;) |py, alg, max_keys| {
        let max = max_keys.unwrap_or(ratebound_shm::DEFAULT_SHARED_MAX_KEYS);
        Ok(SharedKeyedLimiter {
            inner: Arc::new(ShmKeyed::open(path, alg, max).or_shm(py)?),
        })
    },
{
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

    /// For the outbound adapters: the word `key`'s slot keeps of what every
    /// process's adapters learned of the partner's limit
    /// (`ratebound::outbound::Learned`, as bits; 0: nothing learned).
    fn _learned(&self, key: &Bound<'_, PyAny>) -> PyResult<u64> {
        with_key(key, |k| Ok(self.inner.learned(k).to_bits()))
    }

    /// For the outbound adapters: replaces `key`'s learned word `seen` with
    /// `next` for every process if it is still `seen`; whether it replaced.
    fn _adapt(&self, py: Python<'_>, key: &Bound<'_, PyAny>, seen: u64, next: u64) -> PyResult<bool> {
        let (seen, next) = (Learned::from_bits(seen), Learned::from_bits(next));
        with_key(key, |k| self.inner.adapt(k, seen, next).or_shm(py))
    }

    /// The rate learned of `key`'s partner, in tokens per second: the
    /// configured rate when nothing is learned.
    fn _learned_rate(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<f64> {
        with_key(key, |k| {
            learned_rate(self.inner.algorithm(), self.inner.learned(k)).or_py(py)
        })
    }

    /// The file the processes share.
    #[getter]
    fn path(&self) -> PathBuf {
        self.inner.path().to_path_buf()
    }

    fn __repr__(&self) -> String {
        format!(
            "SharedKeyedLimiter(path={:?}, keys={}, slots={})",
            self.inner.path().display().to_string(),
            self.inner.len(),
            self.inner.slots()
        )
    }
});
