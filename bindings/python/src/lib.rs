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

/// Adds each class, or each function, to the module `m`.
macro_rules! add {
    ($m:ident, classes: $($class:ty),+) => {
        $($m.add_class::<$class>()?;)+
    };
    ($m:ident, functions: $($f:path),+) => {
        $($m.add_function(wrap_pyfunction!($f, $m)?)?;)+
    };
}

#[pymodule(gil_used = false)]
fn _ratebound(m: &Bound<'_, PyModule>) -> PyResult<()> {
    add!(m, classes:
        ManualClock, Decision, Limiter, Reservation, Waiter, KeyedLimiter,
        shared::SharedTokenBucket, shared::SharedKeyedLimiter, Gate, Admission, Place,
        Concurrency, Ask, outbound::Outbound, outbound::Call, RedisEngine, RedisCall,
        redis::RedisAcquisition, redis::RedisStats, native_redis::NativeRedis,
        native_redis::NativeCompletions
    );
    add!(m, functions:
        redis::_misconfigured, redis::_ran_late, redis::_after_evalsha, native_redis::_is_redis_target,
        native_redis::_redis_forked, retry_after_secs, ip_key, client_ip, ratelimit_policy,
        clock_source, http::_merge_fields, http::_route_option, http::_deadline_exceeded
    );
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
