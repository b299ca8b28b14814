//! A gate call's arguments (key, peer, raw header lines) read into a
//! request, for `Gate.decide`.

use napi::bindgen_prelude::*;
use napi::sys;
use ratebound::gate;

use super::ffi::{KeyError, key_error, type_of, with_key};
use super::headers::{Lines, RAW_HEADERS_TYPE};
use crate::error;

/// What a gate call's arguments failed on.
pub enum DecideError {
    /// The key.
    Key(KeyError),
    /// The header lines.
    Headers,
}

/// `f` given the request `key` (absent, `null` or `undefined` for none;
/// read only by a gate whose key is given), the peer and the raw header
/// lines (see [`Lines`]) make.
///
/// # Safety
/// `env` and the handles (unless null) must be the live handles of the
/// current callback.
pub unsafe fn with_request<R>(
    env: sys::napi_env,
    gate: &gate::Gate,
    key: sys::napi_value,
    peer: Option<std::net::IpAddr>,
    raw_headers: sys::napi_value,
    f: impl FnOnce(&gate::Request<'_, Lines<'_>>) -> R,
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
            let request = gate::Request {
                key: None,
                peer,
                headers: &headers,
            };
            return Ok(f(&request));
        }
        with_key(env, key, |k| {
            let request = gate::Request {
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
