//! What the gate answers, typed: `Admission`, the concurrency `Place`, and
//! `Ask`, a request waiting for its remote policies.

use std::sync::{Mutex, MutexGuard, PoisonError};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use ratebound::gate;
use ratebound::http::{ConcurrencyCap, Priority};

// ------------------------------------------------------------ answers

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A request's place among the requests in flight under the gate's
/// `concurrency_limit`: hold it until the response is done — a streaming
/// body until it is closed — then `release()` it (or `close()`: the same;
/// both idempotent). Released too when garbage-collected.
#[pyclass(frozen, module = "ratebound")]
pub(crate) struct Place {
    pub(super) inner: Mutex<Option<gate::Place>>,
}

#[pymethods]
impl Place {
    /// Gives the place back now (nothing if it already was).
    fn release(&self) {
        drop(lock(&self.inner).take());
    }

    /// The response's head is going out: under an adaptive limit
    /// (`concurrency_limit="auto"`) the request's latency is taken now,
    /// once — a long streamed body is not a slow service — while the
    /// place stays held until `release()`. Nothing for a fixed limit, or
    /// once released.
    fn responded(&self) {
        if let Some(p) = lock(&self.inner).as_mut() {
            p.responded();
        }
    }

    /// `release()`, under the name a response body's `close()` has.
    fn close(&self) {
        self.release();
    }

    /// Whether the place is still held.
    #[getter]
    fn held(&self) -> bool {
        lock(&self.inner).is_some()
    }

    fn __repr__(&self) -> &'static str {
        if self.held() {
            "Place(held)"
        } else {
            "Place(released)"
        }
    }
}

/// The gate's answer to a request. `status` 0 (`passed`): on to the
/// application with `headers` added to its response, holding `place` (when
/// the gate is capped) until the response is done; otherwise answer with
/// `status`, `headers`, `content_type` and `body`. Header names and values
/// and the content type are bytes, or str for a WSGI request; the body is
/// bytes. `outcome` (`"allowed"`, `"refused"`, `"shed"`, `"rejected"`,
/// `"store_error"`) and `refused_by` (the refusing policy, or the remote
/// policy that failed) are what `on_decision` was told; `notice` is the
/// line to log when a remote policy's episode of failures begins (with a
/// `"store_error"` outcome: a warning) or ends.
#[pyclass(frozen, freelist = 64, module = "ratebound")]
pub(crate) struct Admission {
    // The fields the front doors read on every request are Python objects
    // (`None` for nothing): a frozen class's `Py` fields are struct members,
    // read by the interpreter without a call.
    /// 0 to go on; else the status to answer with.
    #[pyo3(get)]
    pub(super) status: Py<PyAny>,
    /// The quota fields, `(name, value)` pairs.
    #[pyo3(get)]
    pub(super) headers: Py<PyList>,
    /// A refusal's content type, or `None`.
    #[pyo3(get)]
    pub(super) content_type: Py<PyAny>,
    /// A refusal's body, or `None`.
    #[pyo3(get)]
    pub(super) body: Py<PyAny>,
    /// The concurrency place of a passing request under a cap, or `None`.
    #[pyo3(get)]
    pub(super) place: Py<PyAny>,
    pub(super) code: u16,
    pub(super) outcome: gate::Outcome,
    pub(super) refused_by: Option<String>,
    pub(super) priority: Option<Priority>,
    pub(super) notice: Option<String>,
}

#[pymethods]
impl Admission {
    /// Whether the request goes on to the application.
    #[getter]
    fn passed(&self) -> bool {
        self.code == 0
    }

    #[getter]
    fn outcome(&self) -> &'static str {
        self.outcome.as_str()
    }

    #[getter]
    fn refused_by(&self) -> Option<&str> {
        self.refused_by.as_deref()
    }

    /// The log line of a remote policy's episode of failures that this
    /// request began or ended (the core's `StoreNotice`), else `None`.
    #[getter]
    fn notice(&self) -> Option<&str> {
        self.notice.as_deref()
    }

    /// A shed request's priority (`"normal"`, `"background"`); `None`
    /// for every other outcome.
    #[getter]
    fn priority(&self) -> Option<&'static str> {
        self.priority.map(Priority::as_str)
    }

    fn __repr__(&self) -> String {
        let by = match &self.refused_by {
            Some(name) => format!(", refused_by={name:?}"),
            None => String::new(),
        };
        format!(
            "Admission(status={}, outcome={:?}{by})",
            self.code,
            self.outcome.as_str()
        )
    }
}

/// The concurrency limit as it is now, for metrics (`mw.concurrency`):
/// `limit` (the number in force), `in_flight` (requests holding a place),
/// `adaptive` (learned from latency), and for an adaptive limit
/// `baseline_ms` (the latency of requests that met no queue), `recent_ms`
/// (the last window's mean latency) — `None` until measured — and
/// `windows` (how many windows of samples moved the limit).
#[pyclass(frozen, get_all, module = "ratebound")]
pub(crate) struct Concurrency {
    limit: usize,
    in_flight: usize,
    adaptive: bool,
    baseline_ms: Option<f64>,
    recent_ms: Option<f64>,
    windows: u64,
}

impl Concurrency {
    pub(super) fn of(cap: &ConcurrencyCap) -> Concurrency {
        let state = cap.state();
        let ms = |us: f64| (us > 0.0).then_some(us / 1000.0);
        Concurrency {
            limit: state.map_or_else(|| cap.limit(), |s| s.limit),
            in_flight: cap.in_flight(),
            adaptive: state.is_some(),
            baseline_ms: state.and_then(|s| ms(s.baseline_us)),
            recent_ms: state.and_then(|s| ms(s.recent_us)),
            windows: state.map_or(0, |s| s.windows),
        }
    }
}

#[pymethods]
impl Concurrency {
    fn __repr__(&self) -> String {
        let ms = |v: Option<f64>| v.map_or("None".to_string(), |v| format!("{v:.3}"));
        format!(
            "Concurrency(limit={}, in_flight={}, adaptive={}, baseline_ms={}, recent_ms={}, windows={})",
            self.limit,
            self.in_flight,
            if self.adaptive { "True" } else { "False" },
            ms(self.baseline_ms),
            ms(self.recent_ms),
            self.windows
        )
    }
}

/// A request waiting for the gate's remote policies (Redis limiters,
/// shared-memory tables): each checks `identity` (`key:…`, `ip:…` or
/// `anonymous`, the same in every instance) in its own scope, then
/// `Gate.finish(ask, answers)` decides. It holds the request's concurrency
/// place: `close()` it (or let it go) when the answers never come.
#[pyclass(frozen, module = "ratebound")]
pub(crate) struct Ask {
    pub(super) inner: Mutex<Option<gate::Ask>>,
    /// What each remote policy checks.
    #[pyo3(get)]
    pub(super) identity: Py<PyBytes>,
    pub(super) wsgi: bool,
    pub(super) label: Option<Py<PyAny>>,
    /// The gate that asked (its address).
    pub(super) gate: usize,
}

#[pymethods]
impl Ask {
    /// Gives the request's place back without deciding (idempotent).
    fn close(&self) {
        drop(lock(&self.inner).take());
    }
}
