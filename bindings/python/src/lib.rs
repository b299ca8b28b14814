//! The `ratebound._ratebound` extension module: pyo3 glue over
//! `ratebound::any` and the sans-I/O engine of `ratebound_redis` (whose
//! calls `ratebound.redis` runs with redis-py). Nothing here decides
//! anything: it converts Python values into the core's types, the core's
//! answers and errors back, and releases the GIL while it sleeps.

#[macro_use]
mod methods;

mod clock;
mod convert;
mod decision;
mod error;
mod gate;
mod http;
mod keyed;
mod limiters;
mod native_redis;
mod outbound;
mod redis;
mod shared;
mod waiting;

use pyo3::prelude::*;

use crate::clock::ManualClock;
use crate::decision::Decision;
use crate::gate::{Admission, Ask, Concurrency, Gate, Place};
use crate::http::{client_ip, clock_source, ip_key, ratelimit_policy, retry_after_secs};
use crate::keyed::KeyedLimiter;
use crate::limiters::{Limiter, Reservation};
use crate::redis::{RedisCall, RedisEngine};
use crate::waiting::Waiter;

#[pymodule(gil_used = false)]
fn _ratebound(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ManualClock>()?;
    m.add_class::<Decision>()?;
    m.add_class::<Limiter>()?;
    m.add_class::<Reservation>()?;
    m.add_class::<Waiter>()?;
    m.add_class::<KeyedLimiter>()?;
    m.add_class::<shared::SharedTokenBucket>()?;
    m.add_class::<shared::SharedKeyedLimiter>()?;
    m.add_class::<Gate>()?;
    m.add_class::<Admission>()?;
    m.add_class::<Place>()?;
    m.add_class::<Concurrency>()?;
    m.add_class::<Ask>()?;
    m.add_class::<outbound::Outbound>()?;
    m.add_class::<outbound::Call>()?;
    m.add_class::<RedisEngine>()?;
    m.add_class::<RedisCall>()?;
    m.add_class::<redis::RedisAcquisition>()?;
    m.add_class::<redis::RedisStats>()?;
    m.add_function(wrap_pyfunction!(redis::_misconfigured, m)?)?;
    m.add_function(wrap_pyfunction!(redis::_ran_late, m)?)?;
    // The native Redis connection (a URL in place of a redis-py client).
    m.add_class::<native_redis::NativeRedis>()?;
    m.add_class::<native_redis::NativeCompletions>()?;
    m.add_function(wrap_pyfunction!(native_redis::_is_redis_target, m)?)?;
    m.add_function(wrap_pyfunction!(native_redis::_redis_forked, m)?)?;
    m.add_function(wrap_pyfunction!(retry_after_secs, m)?)?;
    m.add_function(wrap_pyfunction!(ip_key, m)?)?;
    m.add_function(wrap_pyfunction!(client_ip, m)?)?;
    m.add_function(wrap_pyfunction!(ratelimit_policy, m)?)?;
    m.add_function(wrap_pyfunction!(clock_source, m)?)?;
    m.add_function(wrap_pyfunction!(http::_merge_fields, m)?)?;
    m.add_function(wrap_pyfunction!(http::_route_option, m)?)?;
    m.add_function(wrap_pyfunction!(http::_deadline_exceeded, m)?)?;
    // The default caps of the two kinds of per-key table (the decorator's
    // own table is an in-process one).
    m.add("DEFAULT_MAX_KEYS", ratebound::gate::DEFAULT_MAX_KEYS)?;
    m.add(
        "DEFAULT_SHARED_MAX_KEYS",
        ratebound_shm::DEFAULT_SHARED_MAX_KEYS,
    )?;
    m.add("_GATE_FIELDS", ratebound::gate::GATE_FIELDS.to_vec())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
