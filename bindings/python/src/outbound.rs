//! `_Outbound`: the core's outbound decision (`ratebound::outbound`) for
//! the HTTP client adapters — what to do after a partner's response. The
//! binding converts values; the core decides.

use pyo3::prelude::*;

use crate::error::*;

/// The outbound policy; `advise` returns `(pause_seconds | None, capped,
/// retry, gave_up)`.
#[pyclass(name = "_Outbound", module = "ratebound._ratebound", frozen)]
pub(crate) struct Outbound {
    inner: ratebound::outbound::Outbound,
}

#[pymethods]
impl Outbound {
    #[new]
    #[pyo3(signature = (*, retries=2, max_pause=300.0, statuses=None, any_method=false))]
    fn new(
        py: Python<'_>,
        retries: u32,
        max_pause: f64,
        statuses: Option<Vec<u16>>,
        any_method: bool,
    ) -> PyResult<Self> {
        let max_pause = ratebound::any::seconds("max_pause", max_pause).or_py(py)?;
        let mut inner = ratebound::outbound::Outbound::new()
            .with_retries(retries)
            .with_any_method(any_method)
            .with_max_pause(max_pause)
            .or_py(py)?;
        if let Some(statuses) = statuses {
            inner = inner.with_statuses(&statuses).or_py(py)?;
        }
        Ok(Outbound { inner })
    }

    #[getter]
    fn retries(&self) -> u32 {
        self.inner.retries()
    }

    #[getter]
    fn max_pause(&self) -> f64 {
        self.inner.max_pause().as_secs_f64()
    }

    /// What to do after the response to attempt `attempt` (0: the first).
    fn advise(
        &self,
        method: &str,
        status: u16,
        headers: Vec<(String, String)>,
        attempt: u32,
        now_unix: f64,
    ) -> (Option<f64>, bool, bool, bool) {
        let a = self.inner.advise(
            method,
            status,
            headers.iter().map(|(n, v)| (n.as_str(), v.as_str())),
            attempt,
            now_unix,
        );
        (
            a.pause.map(|d| d.as_secs_f64()),
            a.capped,
            a.retry,
            a.gave_up,
        )
    }
}
