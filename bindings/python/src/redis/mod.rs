//! Global limits in Redis: the sans-I/O engine (`_RedisEngine` in Python)
//! and its calls (`_RedisCall`), waits (`_RedisAcquisition`); `ratebound.redis`
//! does the I/O.
//!
//! `call`: the calls; `engine`: the engine; `acquisition`: its waits;
//! `options`: its options; `outcome`: what became of a call, and a
//! reservation's answer; `stats`: `RedisStats`.

mod acquisition;
mod call;
mod engine;
mod options;
mod outcome;
mod stats;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use ratebound::any::Key;
use ratebound_redis::Engine;

use crate::convert::with_key;
use crate::error::py_err;

pub(crate) use acquisition::RedisAcquisition;
pub(crate) use call::RedisCall;
pub(crate) use engine::{RedisEngine, RedisEngine_};
pub(crate) use stats::RedisStats;

/// The raw bytes of a Redis key (str: its UTF-8 bytes; bytes as given;
/// int: its decimal digits), for `f`: Redis stores the key itself (after
/// the prefix), never a fingerprint.
pub(crate) fn with_raw_key<R>(
    obj: &Bound<'_, PyAny>,
    f: impl FnOnce(&[u8]) -> PyResult<R>,
) -> PyResult<R> {
    with_key(obj, |k| match k {
        Key::Text(t) => f(t.as_bytes()),
        Key::Bytes(b) => f(b),
        Key::Int(i) => f(i.to_string().as_bytes()),
    })
}

static LOGGER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Logs the engine's notices (the breaker opened or closed, an episode of
/// calls refused as busy) as warnings of the `ratebound.redis` logger, one
/// line each; nothing to do costs one atomic load. A failing logger is
/// ignored: a decision never fails for its log line.
pub(crate) fn tell(py: Python<'_>, engine: &Engine) {
    if !engine.has_notices() {
        return;
    }
    let notices = engine.take_notices();
    let logger = LOGGER.get_or_try_init(py, || {
        py.import("logging")?
            .call_method1("getLogger", ("ratebound.redis",))
            .map(Bound::unbind)
    });
    let Ok(logger) = logger else { return };
    for n in notices {
        let _ = logger.call_method1(py, "warning", (n.message(),));
    }
}

/// The `StoreMisconfigured` error an error text says (a wrong password, a
/// missing database, ...: `ratebound_redis::misconfiguration`), if any.
pub(crate) fn misconfigured(py: Python<'_>, error: &str) -> Option<PyErr> {
    ratebound_redis::misconfiguration(error).map(|e| py_err(py, e))
}

/// `_ran_late(overshoot, timeout)` (seconds): whether a deadline's timer
/// that fired `overshoot` past the deadline of a call with `timeout` says
/// the client itself was late (`ratebound_redis::plan::ran_late`: a call
/// timed out that way is the client's own overload, refused as busy).
#[pyfunction]
pub(crate) fn _ran_late(overshoot: f64, timeout: f64) -> bool {
    let secs = |s: f64| std::time::Duration::try_from_secs_f64(s).unwrap_or_default();
    overshoot > 0.0 && ratebound_redis::plan::ran_late(secs(overshoot), secs(timeout))
}

/// `_after_evalsha(error, left)`: what the runner does once a call's
/// `EVALSHA` failed with the server error `error` (its text, Redis' code
/// first), `left` seconds before the call's deadline (None: it has none):
/// "eval" — send the call's `EVAL` now, once (`NOSCRIPT`: the server has
/// not got the script) —, "timeout" (`NOSCRIPT` past the deadline) or
/// "failed" (the failure as it is): `ratebound_redis::plan::Resend`.
#[pyfunction]
#[pyo3(signature = (error, left))]
pub(crate) fn _after_evalsha(error: &str, left: Option<f64>) -> &'static str {
    use ratebound_redis::plan::Resend;
    let left = match left {
        None => std::time::Duration::MAX,
        Some(s) if s > 0.0 => {
            std::time::Duration::try_from_secs_f64(s).unwrap_or(std::time::Duration::MAX)
        }
        // Past the deadline (or not a number of seconds): no time left.
        Some(_) => std::time::Duration::ZERO,
    };
    match Resend::after_evalsha(error, left) {
        Resend::Eval => "eval",
        Resend::TimedOut => "timeout",
        Resend::Failed => "failed",
    }
}

/// `_misconfigured(error)`: the `StoreMisconfigured` exception an error
/// text says, or None (for a runner that meets it outside a call).
#[pyfunction]
pub(crate) fn _misconfigured(py: Python<'_>, error: &str) -> Option<Py<PyAny>> {
    misconfigured(py, error).map(|e| e.into_value(py).into_any())
}
