//! The raw N-API readers and writers of the Redis hot path (arguments,
//! strings, keys as strings or `Buffer`s, thrown errors) and the shared
//! `Float64Array` its calls answer in, with its layout:
//! - `[0]` what a step gave (see `raw`); for a call `[1]` its number, `[2]`
//!   its template (-1: none), `[3]` its join class (calls of one class may
//!   go in one batch; -1: never), `[4]` the key's Redis Cluster hash slot;
//! - [`ANSWER`]: an answer, [`STRIDE`] numbers (see `raw`);
//! - [`IDS`]: a batch's call numbers (-1: a member answered already);
//! - [`REPLY`]: the numbers of a reply (a batch's: [`REPLY_LEN`] per call);
//! - [`OUT`]: a batch's answers, [`STRIDE`] numbers each;
//! - [`PLAN`]: what the turns' `flush` and `sweep` hand back (see `turns`).

#![allow(unsafe_code)]

use std::cell::Cell;
use std::ffi::{c_char, c_void};
use std::ptr;

use napi::sys;
use ratebound_redis::{BatchCall, REPLY_LEN};

use crate::error;
use crate::fast::KeyError;

/// Where `enter` puts a call's ticket (see `turns`).
pub const TICKET: usize = call_slot::LEN;
/// Where the turns' steps put what they ask for next.
pub const ASKS: usize = TICKET + 1;
/// Where `sweep` puts when to look again (ms; -1: never).
pub const TIMER: usize = ASKS + 1;
/// Where an answer starts in the shared array.
pub const ANSWER: usize = 8;
/// The numbers of one answer.
pub const STRIDE: usize = 6;
/// Where a batch's call numbers start.
pub const IDS: usize = ANSWER + STRIDE + 2;
/// Where a reply's numbers start.
pub const REPLY: usize = IDS + BatchCall::MAX;
/// Where a batch's answers start.
pub const OUT: usize = REPLY + REPLY_LEN * BatchCall::MAX;
/// Where `flush` and `sweep` write what to do (see `turns`).
pub const PLAN: usize = OUT + STRIDE * BatchCall::MAX;
/// The room there: a turn's sends (at most 256 calls in flight) and more.
pub const PLAN_LEN: usize = 1024;
/// The shared array's length.
pub const LEN: usize = PLAN + PLAN_LEN;

/// A layout: a module `$m` of places (`pub const NAME: usize`, numbered
/// in order from 0) and `$names`, the names `redis_raw.js` reads those
/// places by (`bindRedisPath` gives them as `callSlots`, `decisionSlots`,
/// `reservedSlots`): the one definition of each.
macro_rules! layout {
    ($(
        $(#[$doc:meta])*
        $m:ident, $names:ident: [$($(#[$cdoc:meta])* $name:ident $js:literal),* $(,)?]
    )*) => {$(
        $(#[$doc])*
        pub mod $m {
            #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
            enum Place { $($name),* }
            $($(#[$cdoc])* pub const $name: usize = Place::$name as usize;)*
            /// How many.
            pub const LEN: usize = [$(Place::$name),*].len();
        }
        pub const $names: &[(&str, usize)] = &[$(($js, $m::$name)),*];
    )*};
}

layout! {
    /// What a step publishes at the array's head, by place: what it gave,
    /// and for a call to run its number, template, join class and hash slot.
    call_slot, CALL_SLOTS: [STEP "step", ID "id", TEMPLATE "template", CLASS "cls", SLOT "slot"]

    /// A check's answer, by place from its start ([`ANSWER`](super::ANSWER),
    /// or a batch member's `OUT + i × STRIDE`); `SOURCE`: an index into
    /// `sources`.
    decision_slot, DECISION_SLOTS: [
        ALLOWED "allowed", LIMIT "limit", REMAINING "remaining",
        RETRY_AFTER "retryAfter", RESET_AFTER "resetAfter", SOURCE "source",
    ]

    /// A reservation's answer, by place from its start, as a check's:
    /// `WAIT` the delay, or a refusal's retryAfter (s); `KEPT` 1: the call
    /// that gives it back waits for `redisKeep`.
    reserved_slot, RESERVED_SLOTS: [GRANTED "granted", WAIT "wait", SOURCE "source", KEPT "kept"]
}

// The places fit: a call's head before `TICKET`, `ASKS` and `TIMER`, and
// an answer in `STRIDE` numbers.
const _: () = assert!(TIMER < ANSWER);
const _: () = assert!(decision_slot::LEN == STRIDE && reserved_slot::LEN <= STRIDE);

/// A layout's names and places (`offset` added), for `bindRedisPath`.
pub fn slot_map(
    slots: &[(&'static str, usize)],
    offset: usize,
) -> std::collections::HashMap<&'static str, u32> {
    slots
        .iter()
        .map(|&(name, at)| (name, (offset + at) as u32))
        .collect()
}

thread_local! {
    /// The shared array's data.
    pub static SCRATCH: Cell<*mut f64> = const { Cell::new(ptr::null_mut()) };
    /// The env the array was made in, and the reference that keeps it.
    pub static BOUND: Cell<(sys::napi_env, sys::napi_ref)> =
        const { Cell::new((ptr::null_mut(), ptr::null_mut())) };
}

pub unsafe fn number(env: sys::napi_env, v: sys::napi_value) -> Option<f64> {
    let mut x = 0f64;
    // SAFETY: live handles; a non-number reports an error status.
    let status = unsafe { sys::napi_get_value_double(env, v, &mut x) };
    (status == sys::Status::napi_ok).then_some(x)
}

/// A string argument, or `None` for anything else.
pub unsafe fn string(env: sys::napi_env, v: sys::napi_value) -> Option<String> {
    // SAFETY: live handles (the caller's contract).
    unsafe {
        if type_of(env, v) != sys::ValueType::napi_string {
            return None;
        }
        let mut buf = Vec::new();
        crate::fast::push_utf8(env, v, &mut buf);
        String::from_utf8(buf).ok()
    }
}

/// The fast path's readers: an argument's type, a whole number (a
/// non-number is `u32::MAX`, which no handle or call has) and a count (the
/// core's default when `undefined`); and a number made.
pub(crate) use crate::fast::{
    raw_count as count, raw_int as int, raw_type_of as type_of, raw_uint as uint,
};

/// The fast path's throwers: each returns null, the callback's return value.
pub(crate) use crate::fast::{raw_throw as throw, raw_throw_core as throw_core};

/// Throws the error a bad key gets; the callback's return value.
pub unsafe fn throw_key(env: sys::napi_env, e: KeyError) -> sys::napi_value {
    // SAFETY: live env, as the fast path's.
    unsafe { crate::fast::raw_throw_key(env, &e) }
}

pub unsafe fn no_engine(env: sys::napi_env) -> sys::napi_value {
    // SAFETY: as `throw`.
    unsafe {
        throw(
            env,
            error::Kind::Type,
            "ERR_INVALID_THIS",
            "not a live ratebound Redis engine",
        )
    }
}

pub unsafe fn no_call(env: sys::napi_env, id: u32) -> sys::napi_value {
    // SAFETY: as `throw`.
    unsafe {
        throw(
            env,
            error::Kind::Type,
            "ERR_INVALID_ARG_VALUE",
            &format!("no Redis call {id} in flight"),
        )
    }
}

pub unsafe fn undefined(env: sys::napi_env) -> sys::napi_value {
    let mut out = ptr::null_mut();
    // SAFETY: live env.
    unsafe { sys::napi_get_undefined(env, &mut out) };
    out
}

pub unsafe fn double(env: sys::napi_env, x: f64) -> sys::napi_value {
    let mut out = ptr::null_mut();
    // SAFETY: live env.
    unsafe { sys::napi_create_double(env, x, &mut out) };
    out
}

/// `bytes` as a JavaScript string when they are UTF-8 (what the clients
/// write in one piece), else as a `Buffer`.
pub unsafe fn bytes_value(env: sys::napi_env, bytes: &[u8]) -> sys::napi_value {
    let mut out = ptr::null_mut();
    // SAFETY: live env; `bytes` outlives the calls, which copy it.
    unsafe {
        if std::str::from_utf8(bytes).is_ok() {
            sys::napi_create_string_utf8(
                env,
                bytes.as_ptr().cast::<c_char>(),
                bytes.len() as isize,
                &mut out,
            );
        } else {
            let mut data = ptr::null_mut::<c_void>();
            sys::napi_create_buffer_copy(
                env,
                bytes.len(),
                bytes.as_ptr().cast::<c_void>(),
                &mut data,
                &mut out,
            );
        }
    }
    out
}

/// The shared array's data (null before `bind_redis_path`).
pub fn scratch() -> *mut f64 {
    SCRATCH.with(Cell::get)
}

/// Writes `values` at `at` in the shared array.
pub fn put(at: usize, values: &[f64]) {
    let p = scratch();
    if !p.is_null() && at + values.len() <= LEN {
        // SAFETY: `p` points at the data of the Float64Array of LEN
        // elements made by `bind_redis_path` in this thread, kept alive by
        // a strong reference and never detached; the range is within it.
        unsafe { ptr::copy_nonoverlapping(values.as_ptr(), p.add(at), values.len()) };
    }
}

/// `len` numbers of the shared array from `at` (as many as there are).
pub fn read(at: usize, len: usize) -> &'static [f64] {
    let p = scratch();
    if p.is_null() || at >= LEN {
        return &[];
    }
    let len = len.min(LEN - at);
    // SAFETY: as in `put`. No JavaScript runs while a callback reads it.
    unsafe { std::slice::from_raw_parts(p.add(at), len) }
}
