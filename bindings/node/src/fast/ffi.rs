//! The readers and writers of JavaScript values through raw N-API calls:
//! keys, arguments, slot numbers, counts, strings and addresses in; booleans,
//! integers and thrown errors out.

use std::ffi::{CString, c_char, c_void};
use std::ptr;

use napi::bindgen_prelude::*;
use napi::sys;
use ratebound::any::{self, Key};

use crate::error;

/// What went wrong reading a key.
pub enum KeyError {
    /// Not a string, a number or a `Uint8Array`.
    Type,
    /// A number the core's rule refuses ([`Key::from_f64`]: whole, at most
    /// 2^53 in magnitude), with the core's message.
    Range(String),
}

/// Calls `f` with the key `value` holds: a string, a whole number (the
/// core's rule, [`Key::from_f64`]) or the
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
            // SAFETY: live handles (the caller's contract).
            let len = unsafe { utf8_into(env, value, &mut buf) };
            // A string cut short stops at most 3 bytes before the end (at a
            // character boundary): read such strings again, whole.
            if len + 4 < buf.len() {
                return Ok(f(text_key(&buf[..len])));
            }
            let mut heap = Vec::new();
            // SAFETY: as above.
            unsafe { push_utf8(env, value, &mut heap) };
            Ok(f(text_key(&heap)))
        }
        sys::ValueType::napi_number => {
            let mut x = 0f64;
            // SAFETY: a number, as napi_typeof said.
            unsafe { sys::napi_get_value_double(env, value, &mut x) };
            match Key::from_f64(x) {
                Ok(key) => Ok(f(key)),
                Err(e) => Err(KeyError::Range(e.to_string())),
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
            "a key must be a string, a whole number or a Uint8Array (Buffer)",
        ),
        KeyError::Range(message) => error::throw_as(
            env,
            error::Kind::Range,
            "ERR_RATEBOUND_INVALID_KEY",
            &message,
        ),
    }
}

/// Throws `message` as a `kind` error with `code` from a raw callback;
/// null, the callback's return value after a throw.
pub(crate) unsafe fn raw_throw(
    env: sys::napi_env,
    kind: error::Kind,
    code: &str,
    message: &str,
) -> sys::napi_value {
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
    ptr::null_mut()
}

/// Throws the error a bad key gets, from a raw callback; null.
pub(crate) unsafe fn raw_throw_key(env: sys::napi_env, e: &KeyError) -> sys::napi_value {
    // SAFETY: as raw_throw.
    unsafe {
        match e {
            KeyError::Type => raw_throw(
                env,
                error::Kind::Type,
                "ERR_INVALID_ARG_TYPE",
                "a key must be a string, a whole number or a Uint8Array (Buffer)",
            ),
            KeyError::Range(message) => raw_throw(
                env,
                error::Kind::Range,
                "ERR_RATEBOUND_INVALID_KEY",
                message,
            ),
        }
    }
}

/// Throws the core's error `e` from a raw callback; null.
pub(crate) unsafe fn raw_throw_core(env: sys::napi_env, e: &ratebound::Error) -> sys::napi_value {
    // SAFETY: as raw_throw.
    unsafe { raw_throw(env, error::kind(e), &error::code(e), &e.to_string()) }
}

/// Raw N-API entry points: each `fn name(env, [a, b, ...]) as c"jsName"
/// { body }` becomes an `unsafe extern "C"` callback that reads its first
/// arguments into `a`, `b`, ... ([`args`]: missing ones `undefined`) and
/// returns what `body` returns, run with the live handles N-API calls it
/// with; `ENTRIES` lists them by the names [`bind_raw`] gives them.
macro_rules! raw_entries {
    ($(
        $(#[$doc:meta])*
        fn $name:ident($env:ident, [$($arg:ident),*]) as $js:literal $body:block
    )*) => {
        $(
            $(#[$doc])*
            unsafe extern "C" fn $name(
                $env: napi::sys::napi_env,
                info: napi::sys::napi_callback_info,
            ) -> napi::sys::napi_value {
                // SAFETY: called by N-API with live handles.
                unsafe {
                    let [$($arg),*] = $crate::fast::raw_args($env, info);
                    $body
                }
            }
        )*

        /// These entry points by their names in JavaScript.
        pub(super) const ENTRIES: &[(&std::ffi::CStr, napi::sys::napi_callback)] =
            &[$(($js, Some($name))),*];
    };
}
pub(crate) use raw_entries;

/// Up to N arguments; missing ones are `undefined` (N-API fills them).
#[inline(always)]
pub(crate) unsafe fn args<const N: usize>(
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
pub(crate) unsafe fn slot(env: sys::napi_env, v: sys::napi_value) -> u32 {
    let mut h = u32::MAX;
    // SAFETY: live handles; a non-number leaves `h` at MAX, which no slot has.
    unsafe { sys::napi_get_value_uint32(env, v, &mut h) };
    h
}

/// `n`: the core's [`any::count`] — its default when `undefined`, else a
/// whole number ≥ 0 (any other value is NaN to it, refused).
#[inline(always)]
pub(crate) unsafe fn count(
    env: sys::napi_env,
    v: sys::napi_value,
) -> std::result::Result<u64, ratebound::Error> {
    let mut x = 0f64;
    // SAFETY: live handles; `undefined` (or any non-number) reports an error
    // status and leaves `x` alone.
    let status = unsafe { sys::napi_get_value_double(env, v, &mut x) };
    if status == sys::Status::napi_ok {
        return any::count(Some(x));
    }
    let mut kind = 0;
    // SAFETY: live handles.
    unsafe { sys::napi_typeof(env, v, &mut kind) };
    any::count((kind != sys::ValueType::napi_undefined).then_some(f64::NAN))
}

#[inline(always)]
pub(super) unsafe fn boolean(env: sys::napi_env, b: bool) -> sys::napi_value {
    let mut out = ptr::null_mut();
    // SAFETY: live env.
    unsafe { sys::napi_get_boolean(env, b, &mut out) };
    out
}

#[inline(always)]
pub(crate) unsafe fn int(env: sys::napi_env, i: i32) -> sys::napi_value {
    let mut out = ptr::null_mut();
    // SAFETY: live env.
    unsafe { sys::napi_create_int32(env, i, &mut out) };
    out
}

pub(crate) unsafe fn type_of(env: sys::napi_env, v: sys::napi_value) -> i32 {
    let mut kind = sys::ValueType::napi_undefined;
    // SAFETY: live handles (the caller's contract).
    unsafe { sys::napi_typeof(env, v, &mut kind) };
    kind
}

/// An IP address argument (a string), or `None`.
pub(super) unsafe fn opt_ip(env: sys::napi_env, v: sys::napi_value) -> Option<std::net::IpAddr> {
    // SAFETY: live handles (the caller's contract).
    unsafe {
        if type_of(env, v) != sys::ValueType::napi_string {
            return None;
        }
        let mut buf = [0u8; 64];
        let len = utf8_into(env, v, &mut buf);
        std::str::from_utf8(&buf[..len]).ok()?.parse().ok()
    }
}

/// Appends the UTF-8 bytes of the string `v` to `out`; `false` if `v` is
/// not a string.
pub(crate) unsafe fn push_utf8(env: sys::napi_env, v: sys::napi_value, out: &mut Vec<u8>) -> bool {
    let mut len = 0usize;
    // SAFETY: live handles (the caller's contract); a null buffer asks for
    // the length only.
    let status = unsafe { sys::napi_get_value_string_utf8(env, v, ptr::null_mut(), 0, &mut len) };
    if status != sys::Status::napi_ok {
        return false;
    }
    let start = out.len();
    out.resize(start + len + 1, 0);
    // SAFETY: `out[start..]` holds `len + 1` bytes, room for the string and a NUL.
    let written = unsafe { utf8_into(env, v, &mut out[start..]) };
    out.truncate(start + written);
    true
}

/// Copies the string `v` into `buf` as UTF-8, NUL-terminated: at most
/// `buf.len() - 1` bytes, cut at a character boundary; how many.
///
/// # Safety
/// `env` and `v` must be the live handles of the current callback.
#[inline(always)]
pub(crate) unsafe fn utf8_into(env: sys::napi_env, v: sys::napi_value, buf: &mut [u8]) -> usize {
    let mut len = 0usize;
    // SAFETY: live handles (the caller's contract); N-API writes at most
    // `buf.len()` bytes, the NUL included.
    unsafe {
        sys::napi_get_value_string_utf8(
            env,
            v,
            buf.as_mut_ptr().cast::<c_char>(),
            buf.len(),
            &mut len,
        )
    };
    len
}

/// A shared `Float64Array` of `len` numbers and the thread-locals that
/// keep it: `bound` (the env it was made in, the reference that keeps it)
/// and `scratch` (its data pointer).
pub(crate) struct SharedArray {
    pub(crate) len: usize,
    pub(crate) bound:
        &'static std::thread::LocalKey<std::cell::Cell<(sys::napi_env, sys::napi_ref)>>,
    pub(crate) scratch: &'static std::thread::LocalKey<std::cell::Cell<*mut f64>>,
}

/// A new exports object holding `scratch` (the shared array: made once per
/// env and thread, kept by a strong reference — so its data pointer, which
/// nothing can detach: the buffer is never handed out for transfer — for
/// the life of the env) and the raw functions `fns`.
///
/// # Safety
/// `env` is the live env of the current call.
pub(crate) unsafe fn bind_raw<'e>(
    env: &'e Env,
    shared: &SharedArray,
    fns: &[(&std::ffi::CStr, sys::napi_callback)],
) -> Result<Object<'e>> {
    let raw_env = env.raw();
    let exports = Object::new(env)?;
    // SAFETY: `raw_env` is live (the caller's promise); every pointer
    // handed to N-API is a live out-parameter or a NUL-terminated name.
    unsafe {
        let (bound_env, reference) = shared.bound.with(std::cell::Cell::get);
        let mut array = ptr::null_mut();
        if bound_env == raw_env && !reference.is_null() {
            sys::napi_get_reference_value(raw_env, reference, &mut array);
        }
        if array.is_null() {
            let mut data = ptr::null_mut::<c_void>();
            let mut buffer = ptr::null_mut();
            sys::napi_create_arraybuffer(
                raw_env,
                shared.len * std::mem::size_of::<f64>(),
                &mut data,
                &mut buffer,
            );
            sys::napi_create_typedarray(
                raw_env,
                sys::TypedarrayType::float64_array,
                shared.len,
                buffer,
                0,
                &mut array,
            );
            if array.is_null() || data.is_null() {
                return Err(error::invalid_type(env, "cannot create the shared array"));
            }
            let mut reference = ptr::null_mut();
            sys::napi_create_reference(raw_env, array, 1, &mut reference);
            shared.bound.with(|b| b.set((raw_env, reference)));
            shared.scratch.with(|s| s.set(data.cast::<f64>()));
        }
        sys::napi_set_named_property(raw_env, exports.raw(), c"scratch".as_ptr(), array);
        for (name, cb) in fns {
            let mut f = ptr::null_mut();
            sys::napi_create_function(
                raw_env,
                name.as_ptr(),
                name.count_bytes() as isize,
                *cb,
                ptr::null_mut(),
                &mut f,
            );
            sys::napi_set_named_property(raw_env, exports.raw(), name.as_ptr(), f);
        }
    }
    Ok(exports)
}
