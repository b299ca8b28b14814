//! Waiting: the core's acquisition step driven from Python (blocking and asyncio).

use std::time::Duration;

use pyo3::prelude::*;
use ratebound::any::{self, Acquire};
use ratebound::{Error, Permit};

use crate::convert::*;
use crate::error::*;

// ------------------------------------------------------------- waiting

/// What a reservation or an acquisition step holds: tokens to give back if
/// the waiter gives up.
#[pyclass(frozen, module = "ratebound")]
pub(crate) struct Permit_ {
    /// Taken when given back: a permit is single use.
    pub(crate) permit: std::sync::Mutex<Option<Permit>>,
}

/// One acquisition step as Python sees it: `None` when admitted, else
/// `(seconds_to_sleep, permit_or_None)`: with a permit the tokens are taken
/// (go after sleeping; release the permit if cancelled); without one,
/// sleep and step again.
pub(crate) fn step_to_py(py: Python<'_>, step: Acquire) -> PyResult<Py<PyAny>> {
    Ok(match step {
        Acquire::Admitted => py.None(),
        Acquire::Reserved { wait_nanos, permit } => {
            let p = Py::new(
                py,
                Permit_ {
                    permit: std::sync::Mutex::new(Some(permit)),
                },
            )?;
            (nanos_to_secs(wait_nanos), p)
                .into_pyobject(py)?
                .into_any()
                .unbind()
        }
        Acquire::Retry { wait_nanos } => (nanos_to_secs(wait_nanos), py.None())
            .into_pyobject(py)?
            .into_any()
            .unbind(),
    })
}

/// The clock time `timeout` seconds after `now`, or `None`.
pub(crate) fn deadline(
    py: Python<'_>,
    now: u64,
    timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<u64>> {
    match opt_number(py, "timeout", timeout)? {
        None => Ok(None),
        Some(t) => {
            let d = any::seconds("timeout", t).or_py(py)?;
            Ok(Some(now.saturating_add(d.as_nanos() as u64)))
        }
    }
}

/// Sleeps `nanos` with the GIL released, waking every 50 ms to let Python
/// handle signals (Ctrl-C raises here).
pub(crate) fn sleep_released(py: Python<'_>, nanos: u64) -> PyResult<()> {
    let mut left = Duration::from_nanos(nanos);
    while !left.is_zero() {
        let chunk = left.min(Duration::from_millis(50));
        py.detach(|| std::thread::sleep(chunk));
        left -= chunk;
        py.check_signals()?;
    }
    Ok(())
}

/// Drives acquisition steps to the end, sleeping with the GIL released.
pub(crate) fn acquire_blocking(
    py: Python<'_>,
    mut step: impl FnMut(u64) -> Result<Acquire, Error>,
    now: impl Fn() -> u64,
    release: impl Fn(Permit),
) -> PyResult<()> {
    loop {
        match step(now()).or_py(py)? {
            Acquire::Admitted => return Ok(()),
            Acquire::Reserved { wait_nanos, permit } => {
                return sleep_released(py, wait_nanos).inspect_err(|_| release(permit));
            }
            Acquire::Retry { wait_nanos } => sleep_released(py, wait_nanos)?,
        }
    }
}
