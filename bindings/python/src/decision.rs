//! `Decision`: the core's answer, with the path that answered for global limits.

use pyo3::prelude::*;
use ratebound_redis::Source;

use crate::convert::nanos_to_secs;

// -------------------------------------------------------------- decision

/// A limiter's answer. `bool(d)` is `d.allowed`; `d.source` says which
/// path of a Redis limiter answered (`None` for a local limiter).
#[pyclass(frozen, module = "ratebound")]
pub(crate) struct Decision {
    pub(crate) inner: ratebound::Decision,
    pub(crate) source: Option<Source>,
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
    /// "fail_closed", "local" or "damaged" (the key held a value no script
    /// wrote: rebuilt as spent, refused); `None` for a local limiter.
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

pub(crate) fn decision(py: Python<'_>, d: ratebound::Decision) -> PyResult<Py<Decision>> {
    Py::new(
        py,
        Decision {
            inner: d,
            source: None,
        },
    )
}
