//! Conversions between Python and the engine: what became of a call (a
//! driver's report) and a reservation's answer.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};
use ratebound::Error;
use ratebound_redis::{Call, CallKind, CallOutcome, Engine, Reserved};
use std::time::Duration;

use super::tell;
use crate::error::{OrPy, py_err};

/// What became of a call, as a driver reports it to the engine's
/// `finish`-style methods (their `reply`, `timed_out`, `error` and `unsent`
/// arguments), read as the engine reads it: `unsent` first (the call never
/// left this client); then `CallOutcome::reported`: `timed_out`, then
/// `error`, then the `reply`; nothing at all is a failure. A reply that is
/// not a list of ints is `CallOutcome::Malformed`, as Node's binding says
/// of a reply that is not an array of integers.
pub(super) struct Report<'a, 'py> {
    pub(super) reply: Option<&'a Bound<'py, PyAny>>,
    pub(super) timed_out: bool,
    pub(super) error: Option<&'a str>,
    pub(super) unsent: bool,
}

impl<'a, 'py> Report<'a, 'py> {
    pub(super) fn new(
        reply: Option<&'a Bound<'py, PyAny>>,
        timed_out: bool,
        error: Option<&'a str>,
        unsent: bool,
    ) -> Self {
        Report {
            reply,
            timed_out,
            error,
            unsent,
        }
    }

    /// Runs `f` on the outcome, then logs the engine's notices (`tell`).
    /// An error that says the store is misconfigured
    /// (`Engine::misconfigured`) is raised as `StoreMisconfigured` and never
    /// reaches the fail policy (nor `f`): no fail policy answers a typo.
    pub(super) fn settle<R>(
        self,
        py: Python<'_>,
        engine: &Engine,
        f: impl FnOnce(CallOutcome<'_>) -> R,
    ) -> PyResult<R> {
        if !self.unsent
            && !self.timed_out
            && let Some(e) = self.error
        {
            engine.misconfigured(&CallOutcome::Failed(e)).or_py(py)?;
        }
        let r = self.read(f);
        tell(py, engine);
        Ok(r)
    }

    /// Runs `f` on the outcome, without the misconfiguration check (a
    /// give-back's outcome, which only says whether Redis took the tokens
    /// back).
    pub(super) fn read<R>(self, f: impl FnOnce(CallOutcome<'_>) -> R) -> R {
        if self.unsent {
            return f(CallOutcome::Unsent);
        }
        let ints = match self.reply.filter(|r| !r.is_none()) {
            None => None,
            Some(r) if r.is_instance_of::<PyString>() || r.is_instance_of::<PyBytes>() => {
                Some(None)
            }
            Some(r) => Some(r.extract::<Vec<i64>>().ok()),
        };
        let reply = ints.as_ref().map(|v| match v {
            Some(v) => CallOutcome::Reply(v),
            None => CallOutcome::Malformed,
        });
        f(CallOutcome::reported(reply, self.timed_out, self.error))
    }
}

/// A granted reservation as `(delay seconds, source, end_us)` — `end_us`
/// the end of its slot on Redis' clock, for `give_back` (None when Redis
/// did not answer); a refused one raises `RateLimitExceeded`.
pub(super) fn reserved<'py>(
    py: Python<'py>,
    r: Reserved,
    max_wait: Duration,
) -> PyResult<Bound<'py, PyTuple>> {
    match r {
        Reserved::Granted {
            wait,
            source,
            end_us,
            ..
        } => (wait.as_secs_f64(), source.as_str(), end_us).into_pyobject(py),
        Reserved::Refused { wait, .. } | Reserved::Retry { wait, .. } => {
            Err(py_err(py, Error::DeadlineExceeded { wait, max_wait }))
        }
    }
}

/// A reservation call's longest wait (`Duration::MAX` for any other call).
pub(super) fn max_wait(call: &Call) -> Duration {
    match call.kind {
        CallKind::Reserve { max_wait_us } => Duration::from_micros(max_wait_us),
        _ => Duration::MAX,
    }
}
