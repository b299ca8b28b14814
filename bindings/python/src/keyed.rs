//! `KeyedLimiter`: per-key limits over the core's fingerprinted keys.

use std::sync::Arc;

use pyo3::prelude::*;
use ratebound::any::{self, AnyKeyed};
use ratebound::outbound::Learned;

use crate::convert::{clock_of, count, number, opt_number, seconds_of, with_key, with_rate};
use crate::decision::{Decision, decision};
use crate::error::OrPy;
use crate::shared::learned_rate;
use crate::waiting::{Source, Waiter};

// ----------------------------------------------------------------- keyed

/// A per-key algorithm from Python's loose options (`KeyedLimiter`,
/// `SharedKeyedLimiter`, `_RedisEngine`): `rate`, `burst`, `limit` and
/// `window`, numbers checked and named, the choice (and the default for
/// `None`) made by the core's `keyed_algorithm`.
pub(crate) fn keyed_algorithm_of(
    py: Python<'_>,
    algorithm: Option<&str>,
    [rate, burst, limit, window]: [Option<&Bound<'_, PyAny>>; 4],
) -> PyResult<ratebound::KeyedAlgorithm> {
    let b = opt_number(py, "burst", burst)?;
    let l = opt_number(py, "limit", limit)?;
    let w = opt_number(py, "window", window)?;
    match rate.filter(|r| !r.is_none()) {
        Some(r) => with_rate(py, r, |r| any::keyed_algorithm(algorithm, Some(r), b, l, w)),
        None => any::keyed_algorithm(algorithm, None, b, l, w).or_py(py),
    }
}

/// A limit per key (str, bytes or int); keys are stored as 128-bit
/// fingerprints, off the Python heap.
#[pyclass(frozen, subclass, module = "ratebound")]
pub(crate) struct KeyedLimiter {
    pub(crate) inner: Arc<AnyKeyed>,
}

keyed_pymethods!(
    KeyedLimiter, or_py, number, Source::Keyed,
    new(; overflow: Option<&str>, clock: Option<&Bound<'_, PyAny>>) |py, alg, max_keys| {
        let c = clock_of(clock)?;
        let o = any::overflow(overflow).or_py(py)?;
        let max = max_keys.map(|m| m as usize);
        Ok(KeyedLimiter {
            inner: Arc::new(AnyKeyed::new(alg, max, o, c).or_py(py)?),
        })
    },
{
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
        let d = seconds_of(py, "seconds", seconds)?;
        let inner = &self.inner;
        Ok(py.detach(|| inner.cleanup_idle(d)))
    }

    /// The cap on tracked keys.
    #[getter]
    fn max_keys(&self) -> usize {
        self.inner.max_keys()
    }

    /// The algorithm: "token_bucket", "fixed_window" or "sliding_window".
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.inner.algorithm()
    }

    /// For the outbound adapters: the word `key` keeps of what they learned
    /// of its partner's limit (`ratebound::outbound::Learned`, as bits; 0:
    /// nothing learned — also for an untracked key and a window).
    fn _learned(&self, key: &Bound<'_, PyAny>) -> PyResult<u64> {
        with_key(key, |k| Ok(self.inner.learned(k).to_bits()))
    }

    /// For the outbound adapters: replaces `key`'s learned word `seen` with
    /// `next` if it is still `seen`, the key deciding at `next`'s share of
    /// the configured quota from now on; whether it replaced.
    fn _adapt(&self, py: Python<'_>, key: &Bound<'_, PyAny>, seen: u64, next: u64) -> PyResult<bool> {
        let (seen, next) = (Learned::from_bits(seen), Learned::from_bits(next));
        with_key(key, |k| self.inner.adapt(k, seen, next).or_py(py))
    }

    /// The rate learned of `key`'s partner, in tokens per second: the
    /// configured rate when nothing is learned.
    fn _learned_rate(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<f64> {
        with_key(key, |k| {
            learned_rate(self.inner.keyed_algorithm(), self.inner.learned(k)).or_py(py)
        })
    }
});
