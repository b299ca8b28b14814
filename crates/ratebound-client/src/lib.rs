#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// Without an adapter (neither `reqwest` nor `tower`), what they share is
// unused.
#[cfg_attr(not(any(feature = "reqwest", feature = "tower")), allow(dead_code))]
mod builder;
mod error;
mod event;
#[cfg(feature = "tower")]
mod grpc;
#[cfg(feature = "tower")]
mod layer;
#[cfg(feature = "reqwest")]
mod middleware;

pub use builder::OutboundBuilder;
#[cfg(feature = "tower")]
pub use error::CallError;
pub use error::Error;
pub use event::{EventKind, OutboundEvent};
#[cfg(feature = "tower")]
pub use layer::{OutboundLayer, OutboundService, RetryBody};
#[cfg(feature = "reqwest")]
pub use middleware::OutboundMiddleware;
