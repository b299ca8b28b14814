//! The one place where core errors become JavaScript errors.
//!
//! Every error carries `code = "ERR_RATEBOUND_" + Error::code()` in upper
//! case (`ERR_RATEBOUND_INVALID_RATE`, `ERR_RATEBOUND_INSUFFICIENT_CAPACITY`,
//! ...). Numbers out of range are `RangeError`s; values of the wrong kind (a
//! quota string that does not parse, an unknown option name, a missing
//! option, a middleware option of the wrong kind —
//! `ERR_RATEBOUND_INVALID_OPTION`, and a store that refuses the client's
//! configuration — `ERR_RATEBOUND_STORE_MISCONFIGURED`) are `TypeError`s;
//! the rest (`TOO_MANY_KEYS`, and `STORE_UNAVAILABLE`: a wait the fail
//! policy `'closed'` refused while Redis could not decide) are plain
//! `Error`s.

use napi::bindgen_prelude::*;
use ratebound::Error as CoreError;

/// How a core error is thrown.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `RangeError`: a number out of range.
    Range,
    /// `TypeError`: a value of the wrong kind.
    Type,
    /// `Error`: anything else.
    Plain,
}

/// The JavaScript error class for `e`.
pub fn kind(e: &CoreError) -> Kind {
    // The core's typed kind, never the message's text.
    match e.kind() {
        ratebound::ErrorKind::Type => Kind::Type,
        ratebound::ErrorKind::State => Kind::Plain,
        _ => Kind::Range,
    }
}

/// `ERR_RATEBOUND_<CODE>`.
pub fn code(e: &CoreError) -> String {
    format!("ERR_RATEBOUND_{}", e.code().to_ascii_uppercase())
}

/// Throws `e` as its JavaScript error and returns the pending-exception
/// marker napi-rs leaves alone.
pub fn throw(env: &Env, e: &CoreError) -> napi::Error {
    throw_as(env, kind(e), &code(e), &e.to_string())
}

/// Throws an error of `kind` with `code` and `message`.
pub fn throw_as(env: &Env, kind: Kind, code: &str, message: &str) -> napi::Error {
    let thrown = match kind {
        Kind::Range => env.throw_range_error(message, Some(code)),
        Kind::Type => env.throw_type_error(message, Some(code)),
        Kind::Plain => env.throw_error(message, Some(code)),
    };
    match thrown {
        Ok(()) => napi::Error::from_status(Status::PendingException),
        Err(e) => e,
    }
}

/// Converts a core result, throwing its error.
pub trait OrThrow<T> {
    /// The value, or the thrown error.
    fn or_throw(self, env: &Env) -> Result<T>;
}

impl<T> OrThrow<T> for std::result::Result<T, CoreError> {
    fn or_throw(self, env: &Env) -> Result<T> {
        self.map_err(|e| throw(env, &e))
    }
}

/// A `TypeError` with `ERR_INVALID_ARG_TYPE`, as Node's own APIs throw.
pub fn invalid_type(env: &Env, message: &str) -> napi::Error {
    throw_as(env, Kind::Type, "ERR_INVALID_ARG_TYPE", message)
}

/// The core's message for a wait refused because it would be longer than
/// the caller accepts (`Error::DeadlineExceeded`), for the JavaScript
/// `RateLimitExceededError`: `wait` and `maxWait` in seconds (`maxWait`
/// absent: refused at once).
#[napi_derive::napi(skip_typescript)]
pub fn deadline_message(wait: f64, max_wait: Option<f64>) -> String {
    let secs = |s: f64| std::time::Duration::try_from_secs_f64(s).unwrap_or_default();
    CoreError::DeadlineExceeded {
        wait: secs(wait),
        max_wait: secs(max_wait.unwrap_or(0.0)),
    }
    .to_string()
}
