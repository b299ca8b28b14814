//! `_Outbound`: the core's outbound decision (`ratebound::outbound`) for
//! the HTTP client adapters — what to do after a partner's response. The
//! binding converts values; the core decides.

use pyo3::prelude::*;

use crate::convert::*;
use crate::error::*;

/// The outbound policy; `advise` returns `(pause_seconds | None, capped,
/// retry, gave_up)`. Each adapter holds one, with the pauses it keeps in
/// this process when its limiter's store could not be told
/// (`ratebound::outbound::LocalPauses`: `paused`, `hold`).
#[pyclass(name = "_Outbound", module = "ratebound._ratebound", frozen)]
pub(crate) struct Outbound {
    inner: ratebound::outbound::Outbound,
    pauses: ratebound::outbound::LocalPauses,
}

#[pymethods]
impl Outbound {
    /// The policy: each option not given (or None) is the core's default
    /// (`Outbound::from_loose`: 2 retries, pauses of at most 300 s, 429
    /// and 503, idempotent methods only, a backoff of 1 s doubling before
    /// retrying a refusal that gave no advice); the core checks them all.
    #[new]
    #[pyo3(signature = (*, retries=None, max_pause=None, statuses=None, any_method=None, backoff=None))]
    fn new(
        py: Python<'_>,
        retries: Option<&Bound<'_, PyAny>>,
        max_pause: Option<&Bound<'_, PyAny>>,
        statuses: Option<&Bound<'_, PyAny>>,
        any_method: Option<bool>,
        backoff: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let retries = opt_number(py, "retries", retries)?;
        let max_pause = opt_number(py, "max_pause", max_pause)?;
        let backoff = opt_number(py, "backoff", backoff)?;
        let statuses = match statuses.filter(|s| !s.is_none()) {
            Some(list) => {
                let mut out = Vec::new();
                for s in list.try_iter()? {
                    out.push(number(py, "status", &s?)?);
                }
                Some(out)
            }
            None => None,
        };
        let inner = ratebound::outbound::Outbound::from_loose(
            retries,
            max_pause,
            statuses.as_deref(),
            any_method,
            backoff,
        )
        .or_py(py)?;
        Ok(Outbound {
            inner,
            pauses: ratebound::outbound::LocalPauses::new(),
        })
    }

    /// Each sending's `(n, timeout)` as the core reads them
    /// (`Sending::from_loose`): `n` tokens (default 1, at least 1), a wait
    /// of at most `timeout` seconds (None: as long as it takes).
    #[staticmethod]
    #[pyo3(signature = (n=None, timeout=None))]
    fn sending(
        py: Python<'_>,
        n: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(u64, Option<f64>)> {
        let s = ratebound::outbound::Sending::from_loose(
            opt_number(py, "n", n)?,
            opt_number(py, "timeout", timeout)?,
        )
        .or_py(py)?;
        Ok((s.n(), s.timeout().map(|t| t.as_secs_f64())))
    }

    #[getter]
    fn retries(&self) -> u32 {
        self.inner.retries()
    }

    #[getter]
    fn max_pause(&self) -> f64 {
        self.inner.max_pause().as_secs_f64()
    }

    #[getter]
    fn backoff(&self) -> f64 {
        self.inner.backoff().as_secs_f64()
    }

    /// Takes note of a pause of `key` for `seconds` that reached everyone
    /// sharing the limiter (`shared`) or only this process; whether it is
    /// local (then kept: see `hold`).
    fn paused(&self, key: &str, seconds: f64, shared: bool) -> bool {
        use ratebound::outbound::Reach;
        let reach = if shared { Reach::Shared } else { Reach::Local };
        let d = std::time::Duration::try_from_secs_f64(seconds).unwrap_or_default();
        self.pauses.paused(key, d, reach, std::time::Instant::now())
    }

    /// How long a sending for `key` must wait before it asks its limiter
    /// for a token, in seconds (None: go); `RateLimitExceeded` when that
    /// is longer than `timeout`.
    #[pyo3(signature = (key, timeout=None))]
    fn hold(&self, py: Python<'_>, key: &str, timeout: Option<f64>) -> PyResult<Option<f64>> {
        // Checked by `sending` already: a bad one here is no limit.
        let timeout = timeout.and_then(|t| std::time::Duration::try_from_secs_f64(t).ok());
        let wait = self
            .pauses
            .hold(key, timeout, std::time::Instant::now())
            .or_py(py)?;
        Ok(wait.map(|d| d.as_secs_f64()))
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
