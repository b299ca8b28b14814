//! The waits `acquire` makes and drives: `Waiter` and its steps.

use std::cell::RefCell;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratebound::Error as CoreError;
use ratebound::any;
use ratebound::wait::Step;

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

/// What a wait does next, for JavaScript — one protocol for every wait,
/// a local limiter's (`Waiter`) and a Redis limiter's (the engine's
/// acquisition, `redis/raw.rs`), which `ratebound.js`' one `drive` runs:
/// `[CALL, …]` run the call (Redis only) and step again; `[SLEEP, s]`
/// sleep `s` seconds and step again; `[DONE, x]` the tokens are the
/// caller's (`x`: for Redis, the source that answered); `[EXCEEDED, s]`
/// the timeout cannot be met (nothing taken; `s`: the wait it would need).
pub mod step {
    /// Run the call, then step again.
    pub const CALL: f64 = 1.0;
    /// Sleep, then step again.
    pub const SLEEP: f64 = 2.0;
    /// The tokens are the caller's.
    pub const DONE: f64 = 3.0;
    /// The timeout cannot be met.
    pub const EXCEEDED: f64 = 4.0;
    /// In that order, for `bindRedisPath`'s `steps`.
    pub const ALL: [f64; 4] = [CALL, SLEEP, DONE, EXCEEDED];
}

/// A local wait's step for JavaScript (see [`step`]); any other error is
/// thrown.
pub fn step_to_js<E>(
    env: &Env,
    step: std::result::Result<Step, E>,
    exceeded: impl FnOnce(&E) -> Option<std::time::Duration>,
    throw: impl FnOnce(&Env, E) -> Error,
) -> Result<Vec<f64>> {
    match step {
        Ok(Step::Done(())) => Ok(vec![step::DONE]),
        Ok(Step::Sleep(d)) => Ok(vec![step::SLEEP, d.as_secs_f64()]),
        Err(e) => match exceeded(&e) {
            Some(wait) => Ok(vec![step::EXCEEDED, wait.as_secs_f64()]),
            None => Err(throw(env, e)),
        },
    }
}

/// A local limiter's wait step (see [`step_to_js`]).
pub fn core_step(env: &Env, step: std::result::Result<Step, CoreError>) -> Result<Vec<f64>> {
    step_to_js(
        env,
        step,
        |e| match e {
            CoreError::DeadlineExceeded { wait, .. } => Some(*wait),
            _ => None,
        },
        |env, e| crate::error::throw(env, &e),
    )
}

/// The codes of [`step`] by name (internal), for `ratebound.js`.
#[napi(skip_typescript)]
pub fn wait_steps() -> std::collections::HashMap<&'static str, f64> {
    [
        ("call", step::CALL),
        ("sleep", step::SLEEP),
        ("done", step::DONE),
        ("exceeded", step::EXCEEDED),
    ]
    .into_iter()
    .collect()
}
