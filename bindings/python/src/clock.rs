//! `ManualClock`: a clock tests move by hand.

use pyo3::prelude::*;
use ratebound::Clock;

use crate::convert::{nanos_to_secs, seconds_of, whole_nanos};

// ----------------------------------------------------------------- clock

/// A clock that moves only when told to; starts at 0.
#[pyclass(frozen, module = "ratebound")]
pub(crate) struct ManualClock {
    pub(crate) inner: ratebound::ManualClock,
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
        self.inner.advance(seconds_of(py, "seconds", seconds)?);
        Ok(())
    }

    /// Sets the clock to `seconds` since its epoch (may go backwards).
    fn set(&self, py: Python<'_>, seconds: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.set(seconds_of(py, "seconds", seconds)?);
        Ok(())
    }

    /// Moves the clock forward by `nanos` nanoseconds.
    fn advance_ns(&self, py: Python<'_>, nanos: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.advance_nanos(whole_nanos(py, nanos)?);
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
