//! The whole decision of an HTTP rate-limiting middleware, once, for every
//! front door: the tower layer, the Python ASGI/WSGI middleware and the
//! Express/Fastify middleware only convert a request in and a [`Verdict`]
//! out. `spec/gate.json` holds the vectors each of them replays.
//!
//! Re-exported from [`crate::any`].

mod admission;
mod options;
mod request;
mod sequence;
mod spec;
mod verdict;

pub use admission::*;
pub use options::*;
pub use request::*;
pub use sequence::*;
pub use spec::*;
pub use verdict::*;
