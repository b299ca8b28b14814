//! `RedisStats`: what a Redis limiter's decisions came from.

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// What a Redis limiter's decisions came from, counted since it was made
/// (`redis`, `lease`, `damaged`, and the fail policy's `fail_open`,
/// `fail_closed`, `fail_local`; `busy`: refused because the call could not
/// even leave this client before its deadline), and whether its circuit
/// breaker is open now.
#[pyclass(name = "RedisStats", frozen, module = "ratebound.redis")]
pub(crate) struct RedisStats {
    pub(super) inner: ratebound_redis::Stats,
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
