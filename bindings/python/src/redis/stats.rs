//! `RedisStats`: what a Redis limiter's decisions came from.

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// What a Redis limiter's decisions came from, counted since it was made
/// (`redis`, `lease`, `damaged`, and the fail policy's `fail_open`,
/// `fail_closed`, `fail_local`; `busy`: refused because the call could not
/// even leave this client before its deadline), and whether its circuit
/// breaker is open now.
#[pyclass(name = "RedisStats", frozen, get_all, module = "ratebound.redis")]
pub(crate) struct RedisStats {
    /// Decisions Redis made.
    redis: u64,
    /// Decisions a lease made.
    lease: u64,
    /// Refusals of a key whose value no script wrote.
    damaged: u64,
    /// Admitted by the fail policy "open".
    fail_open: u64,
    /// Refused by the fail policy "closed".
    fail_closed: u64,
    /// Answered by the fail policy "local".
    fail_local: u64,
    /// Refused because no connection came free before the deadline.
    busy: u64,
    /// Whether the circuit breaker is open.
    breaker_open: bool,
}

impl From<ratebound_redis::Stats> for RedisStats {
    fn from(s: ratebound_redis::Stats) -> Self {
        RedisStats {
            redis: s.redis,
            lease: s.lease,
            damaged: s.damaged,
            fail_open: s.fail_open,
            fail_closed: s.fail_closed,
            fail_local: s.fail_local,
            busy: s.busy,
            breaker_open: s.breaker_open,
        }
    }
}

impl RedisStats {
    /// The counters by name, in their order.
    fn counters(&self) -> [(&'static str, u64); 7] {
        [
            ("redis", self.redis),
            ("lease", self.lease),
            ("damaged", self.damaged),
            ("fail_open", self.fail_open),
            ("fail_closed", self.fail_closed),
            ("fail_local", self.fail_local),
            ("busy", self.busy),
        ]
    }
}

#[pymethods]
impl RedisStats {
    /// The counters and `breaker_open` as a dict.
    fn _asdict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (name, v) in self.counters() {
            d.set_item(name, v)?;
        }
        d.set_item("breaker_open", self.breaker_open)?;
        Ok(d)
    }
    fn __repr__(&self) -> String {
        let counters: Vec<String> = self
            .counters()
            .iter()
            .map(|(name, v)| format!("{name}={v}"))
            .collect();
        let open = if self.breaker_open { "True" } else { "False" };
        format!("RedisStats({}, breaker_open={open})", counters.join(", "))
    }
}
