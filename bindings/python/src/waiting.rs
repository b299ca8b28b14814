//! Waiting: the core's [`any::Waiter`] driven from Python — a blocking loop
//! here (GIL released), asyncio by `ratebound/_wait.py`'s `drive`, which
//! runs the Redis waits' steps too. Both only
//! sleep what the waiter says and ask it again; the deadline, when the wait
//! is over and what to give back live in the core.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use ratebound::any::{self, AnyKeyed, AnyLimiter};
use ratebound::wait::{Step, drive_blocking_with};
use ratebound_shm::{SharedKeyedLimiter, SharedLimiter};

use crate::convert::{opt_number, with_key};
use crate::error::OrPy;
use crate::shared::OrShm;

/// Python's timers hold any sleep (asyncio re-arms its selector daily;
/// blocking sleeps are cut into 50 ms pieces below).
const HOST_MAX_SLEEP: u64 = u64::MAX;

/// What a `Waiter` waits on.
pub(crate) enum Source {
    Limiter(Arc<AnyLimiter>),
    /// The key as given: converted again at each step, like any call.
    Keyed(Arc<AnyKeyed>, Py<PyAny>),
    /// A shared-memory token bucket or window.
    Shared(Arc<SharedLimiter>),
    /// A key of a shared-memory table, as given.
    SharedKeyed(Arc<SharedKeyedLimiter>, Py<PyAny>),
}

/// One caller's wait (internal: made by `acquire`): `step()` says what to
/// do next (`("sleep", seconds)` or `("done", None)`, the protocol of every
/// wait); `abandon()` gives back what the wait holds.
#[pyclass(frozen, module = "ratebound")]
pub(crate) struct Waiter {
    source: Source,
    state: Mutex<any::Waiter>,
}

impl Waiter {
    /// A wait for `n` from `source`, or for `timeout` seconds at most
    /// (None: any wait). A key is checked first, so that a bad key fails
    /// before any wait.
    pub(crate) fn of(
        py: Python<'_>,
        source: Source,
        n: u64,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Waiter> {
        let timeout = opt_number(py, "timeout", timeout)?;
        let state = match &source {
            Source::Limiter(l) => l.waiter(n, timeout, HOST_MAX_SLEEP).or_py(py)?,
            Source::Keyed(k, key) => {
                with_key(key.bind(py), |_| Ok(()))?;
                k.waiter(n, timeout, HOST_MAX_SLEEP).or_py(py)?
            }
            Source::Shared(l) => l.waiter(n, timeout, HOST_MAX_SLEEP).or_shm(py)?,
            Source::SharedKeyed(k, key) => {
                with_key(key.bind(py), |_| Ok(()))?;
                k.waiter(n, timeout, HOST_MAX_SLEEP).or_shm(py)?
            }
        };
        Ok(Waiter {
            source,
            state: Mutex::new(state),
        })
    }

    fn next(&self, py: Python<'_>) -> PyResult<Step> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match &self.source {
            Source::Limiter(l) => l.wait_step(&mut state).or_py(py),
            Source::Keyed(k, key) => {
                with_key(key.bind(py), |key| k.wait_step(&mut state, key).or_py(py))
            }
            Source::Shared(l) => l.wait_step(&mut state).or_shm(py),
            Source::SharedKeyed(k, key) => {
                with_key(key.bind(py), |key| k.wait_step(&mut state, key).or_shm(py))
            }
        }
    }

    fn give_up(&self, py: Python<'_>) -> PyResult<()> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match &self.source {
            Source::Limiter(l) => l.abandon(&mut state).or_py(py),
            // A keyed wait holds nothing.
            Source::Keyed(..) => Ok(()),
            Source::Shared(l) => l.abandon(&mut state).or_shm(py),
            Source::SharedKeyed(k, key) => {
                with_key(key.bind(py), |key| k.abandon(&mut state, key).or_shm(py))
            }
        }
    }

    /// Steps and sleeps (GIL released) until done, with the core's loop;
    /// gives back what it holds if a signal handler raises during a sleep.
    pub(crate) fn run_blocking(&self, py: Python<'_>) -> PyResult<()> {
        drive_blocking_with(
            &mut (),
            |_| self.next(py),
            |_, never| match never {},
            |d| {
                sleep_released(py, d).or_else(|e| {
                    self.give_up(py)?;
                    Err(e)
                })
            },
        )
    }
}

#[pymethods]
impl Waiter {
    /// What the wait does next, as every wait answers (`ratebound/_wait.py`,
    /// and `_RedisEngine.acquire_step`): `("sleep", seconds)` then step
    /// again, or `("done", None)`: the tokens are taken.
    fn step(&self, py: Python<'_>) -> PyResult<(&'static str, Option<f64>)> {
        Ok(match self.next(py)? {
            Step::Done(()) => ("done", None),
            Step::Sleep(d) => ("sleep", Some(d.as_secs_f64())),
        })
    }

    /// Ends the wait, giving back the tokens it holds (once).
    fn abandon(&self, py: Python<'_>) -> PyResult<()> {
        self.give_up(py)
    }
}

/// Sleeps `left` with the GIL released, waking every 50 ms to let Python
/// handle signals (Ctrl-C raises here).
fn sleep_released(py: Python<'_>, mut left: Duration) -> PyResult<()> {
    while !left.is_zero() {
        let chunk = left.min(Duration::from_millis(50));
        py.detach(|| std::thread::sleep(chunk));
        left -= chunk;
        py.check_signals()?;
    }
    Ok(())
}
