//! The hot entry points, as raw N-API callbacks.
//!
//! A napi-rs `#[napi]` class method pays for argument conversion, borrow
//! tracking and a class check on every call (about 260 ns with napi-rs
//! 3.16, measured in `bench/`), more than the decision itself. So
//! `tryAcquire`, `check` and the keyed `check` are plain functions here,
//! taking a limiter's slot number in a per-thread table instead of `this`,
//! and writing a decision's numbers into a `Float64Array` that `ratebound.js`
//! shares with this module once, so no object is built on this side.
//!
//! Each Node.js thread (the main thread, every worker) has its own table:
//! a limiter lives in the thread that made it.

#![allow(unsafe_code)]

mod admit;
mod calls;
mod ffi;
mod gate_wire;
mod headers;
mod hooks;
mod slots;

pub use calls::bind_fast_path;
pub use ffi::{KeyError, key_error, with_key};
pub(crate) use ffi::{
    SharedArray, args as raw_args, bind_raw, count as raw_count, int as raw_int, push_utf8,
    raw_entries, raw_throw, raw_throw_core, raw_throw_key, slot as raw_uint,
    type_of as raw_type_of,
};
pub use gate_wire::{DecideError, decide_error, with_request};
pub use headers::{Lines, NotRawHeaders, RAW_HEADERS_TYPE};
pub use hooks::{HOOK_NAMES, HookRefs, KEY_HOOK, PRIORITY_HOOK};
pub use slots::{
    register_gate, register_keyed, register_limiter, unregister_gate, unregister_keyed,
    unregister_limiter,
};
