//! The front door's hooks (exempt, critical, priority, the key function,
//! `on_decision`), called with the framework's request for the core's
//! request sequence.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use ratebound::any::Key;
use ratebound::gate;
use ratebound::gate::Hooks;
use ratebound::http::Priority;

use super::{Gate, PriorityHook, priority_of};
use crate::convert::with_key;

/// The front door's functions of the request, for the core's sequence. A
/// Python exception in one is kept (and nothing more is called) until the
/// sequence returns, then raised.
pub(super) struct PyHooks<'a, 'py> {
    pub(super) gate: &'a Gate,
    pub(super) request: &'a Bound<'py, PyAny>,
    pub(super) label: Option<&'a Bound<'py, PyAny>>,
    pub(super) error: Option<PyErr>,
}

impl PyHooks<'_, '_> {
    fn ask(&mut self, f: &Option<Py<PyAny>>, failed: bool) -> bool {
        let Some(f) = f else { return false };
        if self.error.is_some() {
            return failed;
        }
        let py = self.request.py();
        match f
            .bind(py)
            .call1((self.request,))
            .and_then(|r| r.is_truthy())
        {
            Ok(answer) => answer,
            Err(e) => {
                self.error = Some(e);
                failed
            }
        }
    }
}

impl Hooks for PyHooks<'_, '_> {
    fn exempt(&mut self) -> bool {
        // A raising exempt() ends the sequence at once: no place, no token.
        let gate = self.gate;
        self.ask(&gate.exempt, true)
    }

    fn critical(&mut self) -> bool {
        // Raising: shed (no token spent), the error raised.
        let gate = self.gate;
        self.ask(&gate.critical, false)
    }

    fn priority(&mut self) -> Option<Priority> {
        // `None` answered: normal. Raising, or an answer that is no
        // priority: the core's fail-safe answer (shed, 503 with
        // Retry-After), the error logged — never a 500.
        let gate = self.gate;
        match &gate.priority {
            None => Some(Priority::Normal),
            Some(PriorityHook::Fixed(p)) => Some(*p),
            Some(PriorityHook::Call(_)) if self.error.is_some() => None,
            Some(PriorityHook::Call(f)) => {
                let py = self.request.py();
                match f.bind(py).call1((self.request,)).and_then(|p| {
                    if p.is_none() {
                        Ok(Priority::Normal)
                    } else {
                        priority_of(&p)
                    }
                }) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        log_hook_error(
                            py,
                            "priority(request) failed: the request is shed (503)",
                            e,
                        );
                        None
                    }
                }
            }
        }
    }

    fn with_key<R>(&mut self, f: impl FnOnce(Option<Key<'_>>) -> R) -> Option<R> {
        let gate = self.gate;
        let Some(key_fn) = &gate.key else {
            return Some(f(None));
        };
        if self.error.is_some() {
            return None;
        }
        let mut f = Some(f);
        let mut call = |key: Option<Key<'_>>| (f.take().expect("the key is given once"))(key);
        let key = key_fn.bind(self.request.py()).call1((self.request,));
        let failed = match key {
            Ok(k) if k.is_none() => return Some(call(None)),
            Ok(k) => match with_key(&k, |k| Ok(call(Some(k)))) {
                Ok(answer) => return Some(answer),
                Err(e) => e,
            },
            Err(e) => e,
        };
        // The key function raised, or gave what is no key: the sequence
        // stops (no bucket charged, nothing reported) and admit raises it.
        self.error = Some(failed);
        None
    }

    fn report(&mut self, verdict: &gate::Verdict<'_>) {
        let gate = self.gate;
        let Some((on_decision, event)) = &gate.on_decision else {
            return;
        };
        if self.error.is_some() {
            return;
        }
        let py = self.request.py();
        let label = match &gate.label {
            Some(l) => Some(l.bind(py)),
            None => self.label,
        };
        let told = event
            .bind(py)
            .call1((
                verdict.outcome.as_str(),
                verdict.refused_by,
                gate.policies.bind(py),
                label,
                verdict.priority.map(Priority::as_str),
            ))
            .and_then(|e| on_decision.bind(py).call1((e,)));
        if let Err(e) = told {
            self.error = Some(e);
        }
    }
}

/// Logs `e` as an error of the `ratebound` logger, with its traceback; a
/// failing logger is ignored (a decision never fails for its log line).
fn log_hook_error(py: Python<'_>, message: &str, e: PyErr) {
    let logged = py.import("logging").and_then(|logging| {
        let logger = logging.call_method1("getLogger", ("ratebound",))?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("exc_info", e.into_value(py))?;
        logger.call_method("error", (message,), Some(&kwargs))
    });
    drop(logged);
}
