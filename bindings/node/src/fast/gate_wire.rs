//! The gate's wire format: a gate call's arguments (key, peer, raw header
//! lines) read into a request, and the verdict written back to
//! `middleware.js` as one string.

use std::ffi::c_char;
use std::ptr;

use napi::bindgen_prelude::*;
use napi::sys;
use ratebound::any;

use super::ffi::{KeyError, args, key_error, opt_ip, raw_throw, slot, type_of, with_key};
use super::headers::{Lines, RAW_HEADERS_TYPE};
use super::slots::GATES;
use crate::error;

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
pub(super) unsafe extern "C" fn raw_gate_decide(
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
