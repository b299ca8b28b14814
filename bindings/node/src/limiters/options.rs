//! The loose option readers the classes share: numbers, rates, counts and
//! the clock, as JavaScript gives them.

use napi::bindgen_prelude::*;
use ratebound::Error as CoreError;
use ratebound::any::{self, AnyClock, Rate};

use super::clock::ManualClock;
use crate::error::{OrThrow, invalid_type};

/// The clock option: a `ManualClock`, or the process's monotonic clock.
pub fn clock_of(clock: Option<&ManualClock>) -> AnyClock {
    match clock {
        Some(c) => AnyClock::Manual(c.inner.clone()),
        None => AnyClock::default(),
    }
}

/// The rate option: tokens per second, or a quota string.
pub type RateOption = Either<f64, String>;

/// An option as JavaScript gave it; `null` and `undefined` mean "not given".
pub type Loose<'a> = Option<Unknown<'a>>;

fn given<'a>(value: &Loose<'a>) -> Result<Option<(ValueType, Unknown<'a>)>> {
    match value {
        None => Ok(None),
        Some(v) => match v.get_type()? {
            ValueType::Undefined | ValueType::Null => Ok(None),
            t => Ok(Some((t, *v))),
        },
    }
}

/// A number option (`null`/`undefined`: not given).
pub fn loose_number(env: &Env, value: &Loose<'_>, name: &str) -> Result<Option<f64>> {
    match given(value)? {
        None => Ok(None),
        Some((ValueType::Number, v)) => Ok(Some(f64::from_unknown(v)?)),
        Some(_) => Err(invalid_type(env, &format!("{name} must be a number"))),
    }
}

/// A rate option: a number or a quota string (`null`/`undefined`: not given).
pub fn loose_rate(env: &Env, value: &Loose<'_>) -> Result<Option<RateOption>> {
    match given(value)? {
        None => Ok(None),
        Some((ValueType::Number, v)) => Ok(Some(Either::A(f64::from_unknown(v)?))),
        Some((ValueType::String, v)) => Ok(Some(Either::B(String::from_unknown(v)?))),
        Some(_) => Err(invalid_type(
            env,
            "rate must be a number (per second) or a quota string such as '10/s'",
        )),
    }
}

/// A missing required option, as the core names it.
pub fn required(name: &'static str) -> CoreError {
    CoreError::Missing { name }
}

/// `rate` as the core takes it.
pub fn rate_of(rate: &Option<RateOption>) -> std::result::Result<Rate<'_>, CoreError> {
    match rate {
        Some(Either::A(r)) => Ok(Rate::PerSecond(*r)),
        Some(Either::B(s)) => Ok(Rate::Text(s)),
        None => Err(required("rate")),
    }
}

/// A required number option.
pub fn number(value: Option<f64>, name: &'static str) -> std::result::Result<f64, CoreError> {
    value.ok_or_else(|| required(name))
}

/// `n` as the core's `count` takes it (`undefined`: its default, 1).
pub fn tokens(env: &Env, n: Option<f64>) -> Result<u64> {
    any::count(n).or_throw(env)
}
