//! `ManualClock`: a clock moved only by hand, for tests.

use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratebound::any;

use super::options::{loose_number, number};
use crate::error::OrThrow;

/// A clock moved only by hand, for tests: it starts at 0 and every limiter
/// given it as `clock` decides at its time. Thread-safe and shared: any
/// number of limiters may use one clock.
#[napi]
pub struct ManualClock {
    pub(crate) inner: ratebound::ManualClock,
}

#[napi]
impl ManualClock {
    /// A new clock at time 0.
    #[napi(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> ManualClock {
        ManualClock {
            inner: ratebound::ManualClock::new(),
        }
    }

    /// Moves the clock forward by `seconds` (a finite number ≥ 0).
    #[napi(ts_args_type = "seconds: number")]
    pub fn advance(&self, env: Env, seconds: Option<Unknown<'_>>) -> Result<()> {
        let seconds = number(loose_number(&env, &seconds, "seconds")?, "seconds").or_throw(&env)?;
        let by = any::seconds("seconds", seconds).or_throw(&env)?;
        self.inner.advance(by);
        Ok(())
    }

    /// Moves the clock forward by a whole number of nanoseconds.
    #[napi]
    pub fn advance_nanos(&self, env: Env, nanos: f64) -> Result<()> {
        let nanos = any::whole("nanos", nanos, 0).or_throw(&env)?;
        self.inner.advance_nanos(nanos);
        Ok(())
    }

    /// Sets the time to a whole number of nanoseconds since the clock's
    /// epoch (it may move backwards: limiters tolerate that).
    #[napi]
    pub fn set_nanos(&self, env: Env, nanos: f64) -> Result<()> {
        let nanos = any::whole("nanos", nanos, 0).or_throw(&env)?;
        self.inner.set_nanos(nanos);
        Ok(())
    }

    /// The time in seconds since the clock's epoch.
    #[napi]
    pub fn now(&self) -> f64 {
        ratebound::Clock::now(&self.inner) as f64 / 1e9
    }

    /// The time in nanoseconds since the clock's epoch (exact up to 2^53).
    #[napi]
    pub fn now_nanos(&self) -> f64 {
        ratebound::Clock::now(&self.inner) as f64
    }
}

/// A JavaScript time in ms (`performance.now()`'s, a driver's own clock)
/// as the core's instant; anything but a finite number ≥ 0 is 0.
pub fn from_ms(ms: f64) -> std::time::Duration {
    std::time::Duration::try_from_secs_f64(ms / 1000.0).unwrap_or_default()
}
