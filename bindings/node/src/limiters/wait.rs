//! The waits `acquire` makes and drives: `Waiter` and its steps.

use std::cell::RefCell;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratebound::Error as CoreError;
use ratebound::any;

use crate::error::OrThrow;

/// A host timer holds at most 2^31 − 1 ms (about 24.8 days; a longer
/// `setTimeout` fires after 1 ms): the core's waiter never asks for more.
pub const HOST_MAX_SLEEP: u64 = ((1 << 31) - 1) * 1_000_000;

/// One caller's wait, made and driven by `acquire` (internal: it has no
/// methods of its own): the deadline, the tokens it holds, when it is over.
#[napi]
pub struct Waiter {
    pub(crate) state: RefCell<any::Waiter>,
}

impl Waiter {
    /// Wraps a core waiter just made, or throws its error.
    pub fn new(env: &Env, made: std::result::Result<any::Waiter, CoreError>) -> Result<Waiter> {
        Ok(Waiter {
            state: RefCell::new(made.or_throw(env)?),
        })
    }
}

/// A wait step for JavaScript: `[0, 0]` done, `[2, nanos]` sleep that long
/// and step again, `[3, nanos]` the timeout cannot be met (nothing taken;
/// `nanos` is the wait that would have been needed).
pub fn step_to_js(env: &Env, step: std::result::Result<any::Wait, CoreError>) -> Result<Vec<f64>> {
    match step {
        Ok(any::Wait::Done) => Ok(vec![0.0, 0.0]),
        Ok(any::Wait::Sleep(nanos)) => Ok(vec![2.0, nanos as f64]),
        Err(CoreError::DeadlineExceeded { wait, .. }) => Ok(vec![3.0, wait.as_nanos() as f64]),
        Err(e) => Err(crate::error::throw(env, &e)),
    }
}
