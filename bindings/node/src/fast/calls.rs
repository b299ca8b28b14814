//! The hot calls (`tryAcquire`, `check`, `checkOne`, keyed `check`, the
//! benchmarks' `noop`), the shared decision array they write to, and their
//! registration with JavaScript (`bindFastPath`).

use std::cell::Cell;
use std::ptr;

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;
use ratebound::Limiter;

use super::admit::{self, OUTCOMES, PRIORITIES, field_names};
use super::ffi::{
    boolean, count, int, raw_entries, raw_throw, raw_throw_core, raw_throw_key, slot, with_key,
};
use super::slots::{KEYED, LIMITERS};
use crate::error;

thread_local! {
    /// The shared `Float64Array`'s data: [limit, remaining, retry ns, reset
    /// ns], then a gate's answer from [`GATE_AT`] ([`gate_slot`]).
    static SCRATCH: Cell<*mut f64> = const { Cell::new(ptr::null_mut()) };
    /// The env the array was made in, and the reference that keeps it.
    static BOUND: Cell<(sys::napi_env, sys::napi_ref)> =
        const { Cell::new((ptr::null_mut(), ptr::null_mut())) };
}

/// Where a gate's numbers start in the shared array, and how many.
pub(super) const GATE_AT: usize = 4;
pub(super) const GATE_LEN: usize = 12;

/// Each number of a gate's answer, by its place after [`GATE_AT`]: the one
/// definition of that layout. `admit` writes by these names;
/// `bindFastPath` gives `ratebound.js` the same names (`gateSlots`, from
/// [`GATE_SLOTS`]) with their places in `scratch`, which it reads by.
pub(super) mod gate_slot {
    /// What `gateAdmit` found: 0 exempt, 1 a verdict, 2 remote policies to ask.
    pub const FOUND: usize = 0;
    /// The HTTP status (0: the request passes).
    pub const STATUS: usize = 1;
    /// The outcome, an index into `outcomes`.
    pub const OUTCOME: usize = 2;
    /// The refusing policy, an index into the gate's policy names (-1: none).
    pub const REFUSED_BY: usize = 3;
    /// The concurrency place held (-1: none).
    pub const PLACE: usize = 4;
    /// Which fields the verdict has: bit 0 `RateLimit-Policy`, 1
    /// `RateLimit`, 2 the legacy three, 3 `Retry-After`.
    pub const FIELDS: usize = 5;
    /// The legacy fields' numbers: limit, remaining, reset (s).
    pub const LIMIT: usize = 6;
    pub const REMAINING: usize = 7;
    pub const RESET: usize = 8;
    /// `Retry-After` (s).
    pub const RETRY_AFTER: usize = 9;
    /// The request's priority, an index into `priorities` (-1: none).
    pub const PRIORITY: usize = 10;
    /// 1 when a store episode's notice comes with the strings.
    pub const NOTICE: usize = 11;
}

/// The names `ratebound.js` reads a gate's numbers by (`gateSlots`).
const GATE_SLOTS: [(&str, usize); GATE_LEN] = [
    ("found", gate_slot::FOUND),
    ("status", gate_slot::STATUS),
    ("outcome", gate_slot::OUTCOME),
    ("refusedBy", gate_slot::REFUSED_BY),
    ("place", gate_slot::PLACE),
    ("fields", gate_slot::FIELDS),
    ("limit", gate_slot::LIMIT),
    ("remaining", gate_slot::REMAINING),
    ("reset", gate_slot::RESET),
    ("retryAfter", gate_slot::RETRY_AFTER),
    ("priority", gate_slot::PRIORITY),
    ("notice", gate_slot::NOTICE),
];

// Every place of the layout named once, none past its end.
const _: () = {
    let mut seen = [false; GATE_LEN];
    let mut i = 0;
    while i < GATE_LEN {
        let at = GATE_SLOTS[i].1;
        assert!(
            at < GATE_LEN && !seen[at],
            "a gate slot named twice or out of range"
        );
        seen[at] = true;
        i += 1;
    }
};
const SCRATCH_LEN: usize = GATE_AT + GATE_LEN;

/// Writes a gate's numbers to the shared array, from [`GATE_AT`].
#[inline(always)]
pub(super) fn publish_gate(values: &[f64]) {
    let p = SCRATCH.with(Cell::get);
    if !p.is_null() {
        let n = values.len().min(GATE_LEN);
        // SAFETY: as in `publish`; `GATE_AT + n <= SCRATCH_LEN`.
        unsafe { ptr::copy_nonoverlapping(values.as_ptr(), p.add(GATE_AT), n) };
    }
}

/// Writes a decision to the shared array; 1 if allowed, 0 if refused.
#[inline(always)]
fn publish(d: ratebound::Decision) -> i32 {
    let p = SCRATCH.with(Cell::get);
    if !p.is_null() {
        // SAFETY: `p` points at the data of the Float64Array of SCRATCH_LEN
        // elements made by `bind_fast_path` in this thread, kept alive by a
        // strong reference and never detached.
        unsafe {
            *p = d.limit() as f64;
            *p.add(1) = d.remaining() as f64;
            *p.add(2) = d.retry_after_nanos() as f64;
            *p.add(3) = d.reset_after_nanos() as f64;
        }
    }
    i32::from(d.is_allowed())
}

/// Throws the `TypeError` of a call on what is no live limiter (a freed
/// slot, or none); null, the callback's return value.
#[cold]
unsafe fn not_live(env: sys::napi_env) -> sys::napi_value {
    // SAFETY: live env (the caller's N-API call).
    unsafe {
        raw_throw(
            env,
            error::Kind::Type,
            "ERR_INVALID_THIS",
            "not a live ratebound limiter",
        )
    }
}

raw_entries! {
    /// `tryAcquire(slot) -> boolean`.
    fn raw_try_acquire(env, [h]) as c"tryAcquire" {
        let h = slot(env, h);
        let ok = LIMITERS.with(|s| s.borrow().get(h).map(|l| l.try_acquire()));
        match ok {
            Some(ok) => boolean(env, ok),
            None => not_live(env),
        }
    }

    /// `check(slot, n) -> 1 | 0`, the decision's numbers in the shared array.
    fn raw_check(env, [h, n]) as c"check" {
        let h = slot(env, h);
        let n = match count(env, n) {
            Ok(n) => n,
            Err(e) => return raw_throw_core(env, &e),
        };
        match LIMITERS.with(|s| s.borrow().get(h).map(|l| l.check_n(n))) {
            Some(Ok(d)) => int(env, publish(d)),
            Some(Err(e)) => raw_throw_core(env, &e),
            None => not_live(env),
        }
    }

    /// `checkOne(slot) -> 1 | 0`: `check()` without a count (one token; no
    /// count to read or validate).
    fn raw_check_one(env, [h]) as c"checkOne" {
        let h = slot(env, h);
        match LIMITERS.with(|s| s.borrow().get(h).map(|l| l.check_at(l.now()))) {
            Some(d) => int(env, publish(d)),
            None => not_live(env),
        }
    }

    /// `keyedCheck(slot, key, n) -> 1 | 0`, the numbers in the shared array.
    fn raw_keyed_check(env, [h, key, n]) as c"keyedCheck" {
        let h = slot(env, h);
        let n = match count(env, n) {
            Ok(n) => n,
            Err(e) => return raw_throw_core(env, &e),
        };
        let result = KEYED.with(|s| {
            let s = s.borrow();
            let k = s.get(h)?;
            Some(with_key(env, key, |key| k.check_n(key, n)))
        });
        match result {
            Some(Ok(Ok(d))) => int(env, publish(d)),
            Some(Ok(Err(e))) => raw_throw_core(env, &e),
            Some(Err(e)) => raw_throw_key(env, &e),
            None => not_live(env),
        }
    }
}

/// An empty call, the floor the benchmarks compare against.
unsafe extern "C" fn raw_noop(
    env: sys::napi_env,
    _info: sys::napi_callback_info,
) -> sys::napi_value {
    let mut out = ptr::null_mut();
    // SAFETY: live env.
    unsafe { sys::napi_get_undefined(env, &mut out) };
    out
}

/// The shared decision array of this thread and the raw entry points
/// (internal): `{ scratch, tryAcquire, check, checkOne, keyedCheck,
/// gateAdmit, gateFinish, placeRelease, placeResponded, noop }`, and the
/// core's words the gate's answers are read with: `gateSlots` (each of a
/// gate's numbers by name, its place in `scratch`: [`gate_slot`]), `outcomes`, `priorities`, `fieldNames` and
/// `policyFields`. Every copy of `ratebound.js` loaded in one thread
/// (test runners re-evaluate modules) gets the same array, so no copy reads
/// numbers another copy's call left behind.
#[napi(skip_typescript)]
pub fn bind_fast_path(env: &Env) -> Result<Object<'_>> {
    static SHARED: crate::fast::SharedArray = crate::fast::SharedArray {
        len: SCRATCH_LEN,
        bound: &BOUND,
        scratch: &SCRATCH,
    };
    let noop: (&std::ffi::CStr, sys::napi_callback) = (c"noop", Some(raw_noop));
    let fns: Vec<_> = ENTRIES
        .iter()
        .chain(admit::ENTRIES)
        .chain([&noop])
        .copied()
        .collect();
    // SAFETY: `env` is the live env of this call.
    let exports = unsafe { crate::fast::bind_raw(env, &SHARED, &fns)? };
    let mut exports = exports;
    let slots: std::collections::HashMap<&str, u32> = GATE_SLOTS
        .iter()
        .map(|&(name, at)| (name, (GATE_AT + at) as u32))
        .collect();
    exports.set("gateSlots", slots)?;
    let outcomes: Vec<&str> = OUTCOMES.iter().map(|o| o.as_str()).collect();
    exports.set("outcomes", outcomes)?;
    let priorities: Vec<&str> = PRIORITIES.iter().map(|p| p.as_str()).collect();
    exports.set("priorities", priorities)?;
    exports.set("fieldNames", field_names())?;
    exports.set("policyFields", ratebound::gate::POLICY_FIELDS.to_vec())?;
    Ok(exports)
}
