//! The crate's one error type.

use std::fmt;

/// Why an adapter could not be built, or a call could not be sent.
///
/// Built: the core's errors naming the bad value — a window limiter
/// ([`ratebound::Error::Unsupported`], code `unsupported`: it cannot be
/// paused), a zero `max_pause` or a status outside 100–599
/// ([`ratebound::Error::InvalidNumber`], code `invalid_number`), `n = 0`.
/// Sent: the limiter's — most often a wait longer than the `timeout`
/// ([`ratebound::Error::DeadlineExceeded`], code `deadline_exceeded`;
/// nothing was sent), or `n` above the limiter's burst
/// (`insufficient_capacity`). A partner's 429 is never an error: the caller
/// gets the response.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The core's error: a bad option, or the limiter's answer (a wait
    /// beyond the timeout, `n` above the burst).
    Limit(ratebound::Error),
}

impl Error {
    /// A stable, machine-readable identifier: the core's code
    /// (`deadline_exceeded`, `unsupported`, `invalid_number`,
    /// `store_unavailable`, ...).
    pub fn code(&self) -> &'static str {
        match self {
            Error::Limit(e) => e.code(),
        }
    }

    /// This crate's error inside a `reqwest_middleware::Error`, if that is
    /// what it holds (the middleware returns its errors as
    /// `reqwest_middleware::Error::Middleware`).
    #[cfg(feature = "reqwest")]
    pub fn from_reqwest(err: &reqwest_middleware::Error) -> Option<&Error> {
        match err {
            reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<Error>(),
            _ => None,
        }
    }
}

impl From<ratebound::Error> for Error {
    fn from(e: ratebound::Error) -> Error {
        Error::Limit(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Limit(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Limit(e) => Some(e),
        }
    }
}

/// What a call through an adapter fails with (the tower layer's
/// [`OutboundService`](crate::OutboundService) returns it).
#[derive(Debug)]
pub enum CallError<E> {
    /// The limiter's error: a wait beyond the timeout
    /// ([`ratebound::Error::DeadlineExceeded`]; nothing was sent), `n`
    /// above the burst.
    Limiter(Error),
    /// The inner service's error.
    Service(E),
}

impl<E: fmt::Display> fmt::Display for CallError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Limiter(e) => e.fmt(f),
            CallError::Service(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for CallError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CallError::Limiter(e) => std::error::Error::source(e),
            CallError::Service(e) => e.source(),
        }
    }
}
