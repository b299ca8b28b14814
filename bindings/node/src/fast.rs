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

use std::cell::{Cell, RefCell};
use std::ffi::{CString, c_char, c_void};
use std::ptr;
use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi::{JsValue, sys};
use napi_derive::napi;
use ratebound::Limiter;
use ratebound::any::{self, AnyKeyed, AnyLimiter, Key};

use crate::error;

/// Slots of live limiters; a slot is freed when its class instance is
/// garbage collected.
struct Slab<T> {
    items: Vec<Option<Arc<T>>>,
    free: Vec<u32>,
}

impl<T> Slab<T> {
    const fn new() -> Slab<T> {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
        }
    }

    fn insert(&mut self, item: Arc<T>) -> u32 {
        match self.free.pop() {
            Some(slot) => {
                self.items[slot as usize] = Some(item);
                slot
            }
            None => {
                self.items.push(Some(item));
                (self.items.len() - 1) as u32
            }
        }
    }

    fn remove(&mut self, slot: u32) {
        if let Some(item) = self.items.get_mut(slot as usize)
            && item.take().is_some()
        {
            self.free.push(slot);
        }
    }

    #[inline]
    fn get(&self, slot: u32) -> Option<&T> {
        self.items.get(slot as usize)?.as_deref()
    }

    #[inline]
    fn get_arc(&self, slot: u32) -> Option<Arc<T>> {
        self.items.get(slot as usize)?.clone()
    }
}

thread_local! {
    static LIMITERS: RefCell<Slab<AnyLimiter>> = const { RefCell::new(Slab::new()) };
    static KEYED: RefCell<Slab<AnyKeyed>> = const { RefCell::new(Slab::new()) };
    static GATES: RefCell<Slab<any::Gate>> = const { RefCell::new(Slab::new()) };
    /// The shared `Float64Array`'s data: [limit, remaining, retry ns, reset ns].
    static SCRATCH: Cell<*mut f64> = const { Cell::new(ptr::null_mut()) };
    /// The env the array was made in, and the reference that keeps it.
    static BOUND: Cell<(sys::napi_env, sys::napi_ref)> =
        const { Cell::new((ptr::null_mut(), ptr::null_mut())) };
}

/// Gives `limiter` a slot in this thread's table.
pub fn register_limiter(limiter: Arc<AnyLimiter>) -> u32 {
    LIMITERS.with(|s| s.borrow_mut().insert(limiter))
}

/// Frees a slot (from a finalizer; harmless if the thread is exiting).
pub fn unregister_limiter(slot: u32) {
    let _ = LIMITERS.try_with(|s| s.borrow_mut().remove(slot));
}

/// Gives `keyed` a slot in this thread's table.
pub fn register_keyed(keyed: Arc<AnyKeyed>) -> u32 {
    KEYED.with(|s| s.borrow_mut().insert(keyed))
}

/// Frees a keyed slot.
pub fn unregister_keyed(slot: u32) {
    let _ = KEYED.try_with(|s| s.borrow_mut().remove(slot));
}

/// Gives `gate` a slot in this thread's table.
pub fn register_gate(gate: Arc<any::Gate>) -> u32 {
    GATES.with(|s| s.borrow_mut().insert(gate))
}

/// Frees a gate's slot.
pub fn unregister_gate(slot: u32) {
    let _ = GATES.try_with(|s| s.borrow_mut().remove(slot));
}

const SCRATCH_LEN: usize = 4;

/// What went wrong reading a key.
pub enum KeyError {
    /// Not a string, a number or a `Uint8Array`.
    Type,
    /// A number that is not a safe integer.
    Range,
}

/// Calls `f` with the key `value` holds: a string, a safe integer or the
/// bytes of a `Uint8Array` (a `Buffer`).
///
/// # Safety
/// `env` and `value` must be the live handles of the current callback.
pub unsafe fn with_key<R>(
    env: sys::napi_env,
    value: sys::napi_value,
    f: impl FnOnce(Key<'_>) -> R,
) -> std::result::Result<R, KeyError> {
    let mut kind = 0;
    // SAFETY: live handles (the caller's contract); `kind` is a valid out pointer.
    unsafe { sys::napi_typeof(env, value, &mut kind) };
    match kind {
        sys::ValueType::napi_string => {
            let mut buf = [0u8; 256];
            let mut len = 0usize;
            // SAFETY: `buf` holds 256 bytes; N-API writes at most 255 and a NUL.
            unsafe {
                sys::napi_get_value_string_utf8(
                    env,
                    value,
                    buf.as_mut_ptr().cast::<c_char>(),
                    buf.len(),
                    &mut len,
                )
            };
            // A string cut short stops at most 3 bytes before the end (at a
            // character boundary): read such strings again, whole.
            if len + 4 < buf.len() {
                return Ok(f(text_key(&buf[..len])));
            }
            let mut full = 0usize;
            // SAFETY: a null buffer asks for the length only.
            unsafe { sys::napi_get_value_string_utf8(env, value, ptr::null_mut(), 0, &mut full) };
            let mut heap = vec![0u8; full + 1];
            // SAFETY: `heap` holds `full + 1` bytes, room for the string and a NUL.
            unsafe {
                sys::napi_get_value_string_utf8(
                    env,
                    value,
                    heap.as_mut_ptr().cast::<c_char>(),
                    heap.len(),
                    &mut len,
                )
            };
            Ok(f(text_key(&heap[..len])))
        }
        sys::ValueType::napi_number => {
            let mut x = 0f64;
            // SAFETY: a number, as napi_typeof said.
            unsafe { sys::napi_get_value_double(env, value, &mut x) };
            if x.is_finite() && x.fract() == 0.0 && x.abs() <= 9_007_199_254_740_991.0 {
                Ok(f(Key::Int(x as i128)))
            } else {
                Err(KeyError::Range)
            }
        }
        sys::ValueType::napi_object => {
            let mut is_typed = false;
            // SAFETY: live handles; `is_typed` is a valid out pointer.
            unsafe { sys::napi_is_typedarray(env, value, &mut is_typed) };
            if !is_typed {
                return Err(KeyError::Type);
            }
            let (mut ty, mut len, mut data) = (0, 0usize, ptr::null_mut::<c_void>());
            // SAFETY: a typed array; the out pointers are valid, the rest null.
            unsafe {
                sys::napi_get_typedarray_info(
                    env,
                    value,
                    &mut ty,
                    &mut len,
                    &mut data,
                    ptr::null_mut(),
                    ptr::null_mut(),
                )
            };
            if ty != sys::TypedarrayType::uint8_array {
                return Err(KeyError::Type);
            }
            let bytes = if len == 0 || data.is_null() {
                &[][..]
            } else {
                // SAFETY: N-API gave the data pointer and length of a live
                // Uint8Array; no JavaScript runs while `f` reads it.
                unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }
            };
            Ok(f(Key::Bytes(bytes)))
        }
        _ => Err(KeyError::Type),
    }
}

fn text_key(bytes: &[u8]) -> Key<'_> {
    // N-API writes valid UTF-8 (lone surrogates become U+FFFD).
    match std::str::from_utf8(bytes) {
        Ok(s) => Key::Text(s),
        Err(_) => Key::Bytes(bytes),
    }
}

/// Throws the error a bad key gets.
pub fn key_error(env: &Env, e: KeyError) -> napi::Error {
    match e {
        KeyError::Type => error::invalid_type(
            env,
            "a key must be a string, a safe integer or a Uint8Array (Buffer)",
        ),
        KeyError::Range => error::throw_as(
            env,
            error::Kind::Range,
            "ERR_RATEBOUND_INVALID_KEY",
            "a numeric key must be a safe integer",
        ),
    }
}

// ---------------------------------------------------------------- raw calls

/// Throws `message` as a `kind` error with `code` from a raw callback.
unsafe fn raw_throw(env: sys::napi_env, kind: error::Kind, code: &str, message: &str) {
    let code = CString::new(code).unwrap_or_default();
    let message = CString::new(message).unwrap_or_default();
    // SAFETY: live env; NUL-terminated strings that outlive the call.
    unsafe {
        match kind {
            error::Kind::Range => sys::napi_throw_range_error(env, code.as_ptr(), message.as_ptr()),
            error::Kind::Type => sys::napi_throw_type_error(env, code.as_ptr(), message.as_ptr()),
            error::Kind::Plain => sys::napi_throw_error(env, code.as_ptr(), message.as_ptr()),
        }
    };
}

unsafe fn raw_throw_core(env: sys::napi_env, e: &ratebound::Error) {
    // SAFETY: as raw_throw.
    unsafe { raw_throw(env, error::kind(e), &error::code(e), &e.to_string()) };
}

/// Up to N arguments; missing ones are `undefined` (N-API fills them).
#[inline(always)]
unsafe fn args<const N: usize>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> [sys::napi_value; N] {
    let mut argc = N;
    let mut argv = [ptr::null_mut(); N];
    // SAFETY: live callback info; `argv` has room for `argc` values.
    unsafe {
        sys::napi_get_cb_info(
            env,
            info,
            &mut argc,
            argv.as_mut_ptr(),
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    argv
}

#[inline(always)]
unsafe fn slot(env: sys::napi_env, v: sys::napi_value) -> u32 {
    let mut h = u32::MAX;
    // SAFETY: live handles; a non-number leaves `h` at MAX, which no slot has.
    unsafe { sys::napi_get_value_uint32(env, v, &mut h) };
    h
}

/// `n`: 1 when `undefined`, else a whole number ≥ 0.
#[inline(always)]
unsafe fn count(
    env: sys::napi_env,
    v: sys::napi_value,
) -> std::result::Result<u64, ratebound::Error> {
    let mut x = 1f64;
    // SAFETY: live handles; `undefined` (or any non-number) reports an error
    // status and leaves `x` alone.
    let status = unsafe { sys::napi_get_value_double(env, v, &mut x) };
    if status != sys::Status::napi_ok {
        let mut kind = 0;
        // SAFETY: live handles.
        unsafe { sys::napi_typeof(env, v, &mut kind) };
        if kind != sys::ValueType::napi_undefined {
            x = f64::NAN;
        }
    }
    any::whole("n", x, 0)
}

#[inline(always)]
unsafe fn boolean(env: sys::napi_env, b: bool) -> sys::napi_value {
    let mut out = ptr::null_mut();
    // SAFETY: live env.
    unsafe { sys::napi_get_boolean(env, b, &mut out) };
    out
}

#[inline(always)]
unsafe fn int(env: sys::napi_env, i: i32) -> sys::napi_value {
    let mut out = ptr::null_mut();
    // SAFETY: live env.
    unsafe { sys::napi_create_int32(env, i, &mut out) };
    out
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

/// `tryAcquire(slot) -> boolean`.
unsafe extern "C" fn raw_try_acquire(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: called by N-API with live handles.
    unsafe {
        let [h] = args::<1>(env, info);
        let h = slot(env, h);
        let ok = LIMITERS.with(|s| s.borrow().get(h).map(AnyLimiter::try_acquire));
        match ok {
            Some(ok) => boolean(env, ok),
            None => {
                raw_throw(
                    env,
                    error::Kind::Type,
                    "ERR_INVALID_THIS",
                    "not a live ratebound limiter",
                );
                ptr::null_mut()
            }
        }
    }
}

/// `check(slot, n) -> 1 | 0`, the decision's numbers in the shared array.
unsafe extern "C" fn raw_check(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: called by N-API with live handles.
    unsafe {
        let [h, n] = args::<2>(env, info);
        let h = slot(env, h);
        let n = match count(env, n) {
            Ok(n) => n,
            Err(e) => {
                raw_throw_core(env, &e);
                return ptr::null_mut();
            }
        };
        let result = LIMITERS.with(|s| s.borrow().get(h).map(|l| l.check_n(n)));
        match result {
            Some(Ok(d)) => int(env, publish(d)),
            Some(Err(e)) => {
                raw_throw_core(env, &e);
                ptr::null_mut()
            }
            None => {
                raw_throw(
                    env,
                    error::Kind::Type,
                    "ERR_INVALID_THIS",
                    "not a live ratebound limiter",
                );
                ptr::null_mut()
            }
        }
    }
}

/// `checkOne(slot) -> 1 | 0`: `check()` without a count (one token; no
/// count to read or validate).
unsafe extern "C" fn raw_check_one(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: called by N-API with live handles.
    unsafe {
        let [h] = args::<1>(env, info);
        let h = slot(env, h);
        let result = LIMITERS.with(|s| s.borrow().get(h).map(|l| l.check_at(l.now())));
        match result {
            Some(d) => int(env, publish(d)),
            None => {
                raw_throw(
                    env,
                    error::Kind::Type,
                    "ERR_INVALID_THIS",
                    "not a live ratebound limiter",
                );
                ptr::null_mut()
            }
        }
    }
}

/// `keyedCheck(slot, key, n) -> 1 | 0`, the numbers in the shared array.
unsafe extern "C" fn raw_keyed_check(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: called by N-API with live handles.
    unsafe {
        let [h, key, n] = args::<3>(env, info);
        let h = slot(env, h);
        let n = match count(env, n) {
            Ok(n) => n,
            Err(e) => {
                raw_throw_core(env, &e);
                return ptr::null_mut();
            }
        };
        let result = KEYED.with(|s| {
            let s = s.borrow();
            let k = s.get(h)?;
            Some(with_key(env, key, |key| k.check_n(key, n)))
        });
        match result {
            Some(Ok(Ok(d))) => int(env, publish(d)),
            Some(Ok(Err(e))) => {
                raw_throw_core(env, &e);
                ptr::null_mut()
            }
            Some(Err(KeyError::Type)) => {
                raw_throw(
                    env,
                    error::Kind::Type,
                    "ERR_INVALID_ARG_TYPE",
                    "a key must be a string, a safe integer or a Uint8Array (Buffer)",
                );
                ptr::null_mut()
            }
            Some(Err(KeyError::Range)) => {
                raw_throw(
                    env,
                    error::Kind::Range,
                    "ERR_RATEBOUND_INVALID_KEY",
                    "a numeric key must be a safe integer",
                );
                ptr::null_mut()
            }
            None => {
                raw_throw(
                    env,
                    error::Kind::Type,
                    "ERR_INVALID_THIS",
                    "not a live ratebound limiter",
                );
                ptr::null_mut()
            }
        }
    }
}

unsafe fn type_of(env: sys::napi_env, v: sys::napi_value) -> i32 {
    let mut kind = sys::ValueType::napi_undefined;
    // SAFETY: live handles (the caller's contract).
    unsafe { sys::napi_typeof(env, v, &mut kind) };
    kind
}

/// An IP address argument (a string), or `None`.
unsafe fn opt_ip(env: sys::napi_env, v: sys::napi_value) -> Option<std::net::IpAddr> {
    // SAFETY: live handles (the caller's contract).
    unsafe {
        if type_of(env, v) != sys::ValueType::napi_string {
            return None;
        }
        let mut buf = [0u8; 64];
        let mut len = 0usize;
        sys::napi_get_value_string_utf8(
            env,
            v,
            buf.as_mut_ptr().cast::<c_char>(),
            buf.len(),
            &mut len,
        );
        std::str::from_utf8(&buf[..len]).ok()?.parse().ok()
    }
}

/// Appends the UTF-8 bytes of the string `v` to `out`; `false` if `v` is
/// not a string.
unsafe fn push_utf8(env: sys::napi_env, v: sys::napi_value, out: &mut Vec<u8>) -> bool {
    let mut len = 0usize;
    // SAFETY: live handles (the caller's contract); a null buffer asks for
    // the length only.
    let status = unsafe { sys::napi_get_value_string_utf8(env, v, ptr::null_mut(), 0, &mut len) };
    if status != sys::Status::napi_ok {
        return false;
    }
    let start = out.len();
    out.resize(start + len + 1, 0);
    let mut written = 0usize;
    // SAFETY: `out[start..]` holds `len + 1` bytes, room for the string and a NUL.
    unsafe {
        sys::napi_get_value_string_utf8(
            env,
            v,
            out[start..].as_mut_ptr().cast::<c_char>(),
            len + 1,
            &mut written,
        )
    };
    out.truncate(start + written);
    true
}

/// A request's header lines as Node gives them (`req.rawHeaders`: a flat
/// array `[name, value, name, value, ...]`, in the order received,
/// duplicates kept), copied out for the core: only the lines of the fields
/// the gate reads ([`any::Gate::header_names`]), and nothing at all when it
/// reads none. Every JavaScript value is read before the core decides, so no
/// JavaScript (an array getter) can run while it does.
pub struct Lines<'n> {
    /// The field names wanted, lower case.
    names: Vec<&'n str>,
    /// Each line: the index of its name in `names`, and its value's range
    /// in `bytes`.
    lines: Vec<(usize, std::ops::Range<usize>)>,
    bytes: Vec<u8>,
}

/// `rawHeaders` that is not a flat array of strings.
pub struct NotRawHeaders;

/// The message of [`NotRawHeaders`].
pub const RAW_HEADERS_TYPE: &str =
    "rawHeaders must be a flat array of strings [name, value, ...] (req.rawHeaders)";

impl<'n> Lines<'n> {
    /// No lines.
    pub fn none() -> Lines<'n> {
        Lines {
            names: Vec::new(),
            lines: Vec::new(),
            bytes: Vec::new(),
        }
    }

    /// The lines of the fields `names` (lower case) in the array `value`
    /// (`undefined`, `null` or a null handle: no lines). Names are compared
    /// without regard to case.
    ///
    /// # Errors
    /// [`NotRawHeaders`] when `value` is neither absent nor an array, or
    /// when a name, or the value of a wanted line, is not a string.
    ///
    /// # Safety
    /// `env` and `value` (unless null) must be the live handles of the
    /// current callback.
    pub unsafe fn read(
        env: sys::napi_env,
        value: sys::napi_value,
        names: impl IntoIterator<Item = &'n str>,
    ) -> std::result::Result<Lines<'n>, NotRawHeaders> {
        let mut out = Lines::none();
        if value.is_null() {
            return Ok(out);
        }
        // SAFETY: live handles (the caller's contract).
        unsafe {
            match type_of(env, value) {
                sys::ValueType::napi_undefined | sys::ValueType::napi_null => return Ok(out),
                sys::ValueType::napi_object => {}
                _ => return Err(NotRawHeaders),
            }
            let mut is_array = false;
            sys::napi_is_array(env, value, &mut is_array);
            if !is_array {
                return Err(NotRawHeaders);
            }
            out.names.extend(names);
            if out.names.is_empty() {
                return Ok(out);
            }
            let mut len = 0u32;
            sys::napi_get_array_length(env, value, &mut len);
            // A name longer than every wanted one by at most 3 bytes still
            // shows as longer: N-API writes whole characters (≤ 4 bytes)
            // into the room of the longest name plus 4.
            let room = out.names.iter().map(|n| n.len()).max().unwrap_or(0) + 5;
            let mut stack = [0u8; 128];
            let mut heap = Vec::new();
            let buf: &mut [u8] = if room <= stack.len() {
                &mut stack[..room]
            } else {
                heap.resize(room, 0);
                &mut heap
            };
            let mut i = 0u32;
            while i + 1 < len {
                let mut name = ptr::null_mut();
                sys::napi_get_element(env, value, i, &mut name);
                let mut written = 0usize;
                let status = sys::napi_get_value_string_utf8(
                    env,
                    name,
                    buf.as_mut_ptr().cast::<c_char>(),
                    buf.len(),
                    &mut written,
                );
                if status != sys::Status::napi_ok {
                    return Err(NotRawHeaders);
                }
                let got = &buf[..written];
                if let Some(which) = out
                    .names
                    .iter()
                    .position(|n| n.as_bytes().eq_ignore_ascii_case(got))
                {
                    let mut line = ptr::null_mut();
                    sys::napi_get_element(env, value, i + 1, &mut line);
                    let start = out.bytes.len();
                    if !push_utf8(env, line, &mut out.bytes) {
                        return Err(NotRawHeaders);
                    }
                    out.lines.push((which, start..out.bytes.len()));
                }
                i += 2;
            }
        }
        Ok(out)
    }
}

impl ratebound::http::Headers for Lines<'_> {
    fn for_each_line<F: FnMut(&[u8])>(&self, name: &str, mut f: F) {
        for (which, range) in &self.lines {
            if self.names[*which].eq_ignore_ascii_case(name) {
                f(&self.bytes[range.clone()]);
            }
        }
    }
}

/// What a gate call's arguments failed on.
pub enum DecideError {
    /// The key.
    Key(KeyError),
    /// The header lines.
    Headers,
}

/// `gate`'s verdict for one request, given to `f`: `key` (absent, `null` or
/// `undefined` for none; read only by a gate whose key is given), the peer
/// and the raw header lines (see [`Lines`]).
///
/// # Safety
/// `env` and the handles (unless null) must be the live handles of the
/// current callback.
pub unsafe fn decide<R>(
    env: sys::napi_env,
    gate: &any::Gate,
    key: sys::napi_value,
    peer: Option<std::net::IpAddr>,
    raw_headers: sys::napi_value,
    f: impl FnOnce(&any::Verdict<'_>) -> R,
) -> std::result::Result<R, DecideError> {
    // SAFETY: the caller's contract.
    unsafe { with_request(env, gate, key, peer, raw_headers, |r| f(&gate.decide(r))) }
}

/// `f` given the request `key`, `peer` and the raw header lines make (see
/// [`decide`]).
///
/// # Safety
/// As [`decide`].
pub unsafe fn with_request<R>(
    env: sys::napi_env,
    gate: &any::Gate,
    key: sys::napi_value,
    peer: Option<std::net::IpAddr>,
    raw_headers: sys::napi_value,
    f: impl FnOnce(&any::Request<'_, Lines<'_>>) -> R,
) -> std::result::Result<R, DecideError> {
    // SAFETY: the caller's contract. Every header line is copied out before
    // `with_key` borrows a Uint8Array's bytes, so no JavaScript runs while
    // the core reads them.
    unsafe {
        let headers =
            Lines::read(env, raw_headers, gate.header_names()).map_err(|_| DecideError::Headers)?;
        let absent = key.is_null()
            || matches!(
                type_of(env, key),
                sys::ValueType::napi_undefined | sys::ValueType::napi_null
            );
        if absent {
            let request = any::Request {
                key: None,
                peer,
                headers: &headers,
            };
            return Ok(f(&request));
        }
        with_key(env, key, |k| {
            let request = any::Request {
                key: Some(k),
                peer,
                headers: &headers,
            };
            f(&request)
        })
        .map_err(DecideError::Key)
    }
}

/// Throws the error a bad gate argument gets.
pub fn decide_error(env: &Env, e: DecideError) -> napi::Error {
    match e {
        DecideError::Key(e) => key_error(env, e),
        DecideError::Headers => error::invalid_type(env, RAW_HEADERS_TYPE),
    }
}

/// `gateDecide(slot, key, peer, rawHeaders)` -> one string,
/// `status \0 contentType \0 body (\0 name \0 value)*`: a single value
/// crosses the boundary whatever the number of header fields.
unsafe extern "C" fn raw_gate_decide(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: called by N-API with live handles.
    unsafe {
        let [h, key, peer, raw_headers] = args::<4>(env, info);
        let h = slot(env, h);
        let peer = opt_ip(env, peer);
        // The gate is held by its own reference, not by a borrow of the
        // table: nothing the call does can then collide with the table.
        let Some(gate) = GATES.with(|s| s.borrow().get_arc(h)) else {
            raw_throw(
                env,
                error::Kind::Type,
                "ERR_INVALID_THIS",
                "not a live ratebound gate",
            );
            return ptr::null_mut();
        };
        let out = decide(env, &gate, key, peer, raw_headers, |verdict| {
            use std::fmt::Write;
            let mut out = String::with_capacity(96);
            let _ = write!(out, "{}", verdict.status);
            out.push('\0');
            if let Some((content_type, body)) = &verdict.body {
                out.push_str(content_type);
                out.push('\0');
                out.push_str(body);
            } else {
                out.push('\0');
            }
            // The outcome and the refusing policy, for `onDecision`.
            out.push('\0');
            out.push_str(verdict.outcome.as_str());
            out.push('\0');
            out.push_str(verdict.refused_by.unwrap_or(""));
            for (name, value) in verdict.fields.iter() {
                out.push('\0');
                out.push_str(name);
                out.push('\0');
                let _ = write!(out, "{value}");
            }
            out
        });
        let out = match out {
            Ok(out) => out,
            Err(DecideError::Key(KeyError::Type)) => {
                raw_throw(
                    env,
                    error::Kind::Type,
                    "ERR_INVALID_ARG_TYPE",
                    "a key must be a string, a safe integer or a Uint8Array (Buffer)",
                );
                return ptr::null_mut();
            }
            Err(DecideError::Key(KeyError::Range)) => {
                raw_throw(
                    env,
                    error::Kind::Range,
                    "ERR_RATEBOUND_INVALID_KEY",
                    "a numeric key must be a safe integer",
                );
                return ptr::null_mut();
            }
            Err(DecideError::Headers) => {
                raw_throw(
                    env,
                    error::Kind::Type,
                    "ERR_INVALID_ARG_TYPE",
                    RAW_HEADERS_TYPE,
                );
                return ptr::null_mut();
            }
        };
        let mut js = ptr::null_mut();
        sys::napi_create_string_utf8(
            env,
            out.as_ptr().cast::<c_char>(),
            out.len() as isize,
            &mut js,
        );
        js
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
/// gateDecide, noop }`. Every copy of `ratebound.js` loaded in one thread
/// (test runners re-evaluate modules) gets the same array, so no copy reads
/// numbers another copy's call left behind.
#[napi(skip_typescript)]
pub fn bind_fast_path(env: &Env) -> Result<Object<'_>> {
    let raw_env = env.raw();
    let exports = Object::new(env)?;
    // SAFETY: `raw_env` is the live env of this call. The array is created
    // here, once per env and thread, and a strong reference keeps it (and
    // so its data pointer, which nothing can detach: the buffer is never
    // handed out for transfer) alive for the life of the env.
    unsafe {
        let (bound_env, reference) = BOUND.with(Cell::get);
        let mut array = ptr::null_mut();
        if bound_env == raw_env && !reference.is_null() {
            sys::napi_get_reference_value(raw_env, reference, &mut array);
        }
        if array.is_null() {
            let mut data = ptr::null_mut::<c_void>();
            let mut buffer = ptr::null_mut();
            sys::napi_create_arraybuffer(
                raw_env,
                SCRATCH_LEN * std::mem::size_of::<f64>(),
                &mut data,
                &mut buffer,
            );
            sys::napi_create_typedarray(
                raw_env,
                sys::TypedarrayType::float64_array,
                SCRATCH_LEN,
                buffer,
                0,
                &mut array,
            );
            if array.is_null() || data.is_null() {
                return Err(error::invalid_type(env, "cannot create the shared array"));
            }
            let mut reference = ptr::null_mut();
            sys::napi_create_reference(raw_env, array, 1, &mut reference);
            BOUND.with(|b| b.set((raw_env, reference)));
            SCRATCH.with(|s| s.set(data.cast::<f64>()));
        }
        sys::napi_set_named_property(raw_env, exports.raw(), c"scratch".as_ptr(), array);
        let fns: [(&std::ffi::CStr, sys::napi_callback); 6] = [
            (c"checkOne", Some(raw_check_one)),
            (c"tryAcquire", Some(raw_try_acquire)),
            (c"gateDecide", Some(raw_gate_decide)),
            (c"check", Some(raw_check)),
            (c"keyedCheck", Some(raw_keyed_check)),
            (c"noop", Some(raw_noop)),
        ];
        for (name, cb) in fns {
            let mut f = ptr::null_mut();
            sys::napi_create_function(
                raw_env,
                name.as_ptr(),
                name.count_bytes() as isize,
                cb,
                ptr::null_mut(),
                &mut f,
            );
            sys::napi_set_named_property(raw_env, exports.raw(), name.as_ptr(), f);
        }
    }
    Ok(exports)
}
