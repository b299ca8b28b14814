//! `_RedisAcquisition`, one caller's wait on the engine, and its steps as
//! Python sees them.

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use ratebound_redis::{Acquisition, Step};
use std::sync::Mutex;

use super::RedisCall;

/// One caller's wait for global tokens (`RedisEngine.acquire`).
#[pyclass(name = "_RedisAcquisition", frozen, module = "ratebound")]
pub(crate) struct RedisAcquisition {
    inner: Mutex<Acquisition>,
}

impl RedisAcquisition {
    pub(super) fn new(a: Acquisition) -> Self {
        RedisAcquisition {
            inner: Mutex::new(a),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Acquisition> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A wait's next step as `_RedisEngine.acquire_step` answers it:
/// `("call", RedisCall)`, `("sleep", seconds)` or `("done", source)`.
pub(super) fn step_tuple(py: Python<'_>, step: Step) -> PyResult<Bound<'_, PyTuple>> {
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
