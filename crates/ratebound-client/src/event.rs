//! What the `on_decision` hook is told.

use std::time::Duration;

/// What happened to a call, for [`OutboundBuilder::on_decision`](crate::OutboundBuilder::on_decision):
/// the core's (`ratebound::outbound::EventKind`), as Python's and Node's
/// adapters name it.
pub use ratebound::outbound::EventKind;

/// What [`OutboundBuilder::on_decision`](crate::OutboundBuilder::on_decision)'s callback
/// is told: the shape of Python's `OutboundEvent`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OutboundEvent<'a> {
    /// What happened.
    pub outcome: EventKind,
    /// The limiter key.
    pub key: &'a str,
    /// How long the request waited ([`EventKind::Waited`]) or the limiter
    /// was paused ([`EventKind::Paused`]); `None` otherwise.
    pub duration: Option<Duration>,
    /// The answer's status (`None` before one): for a gRPC answer, the
    /// status it counts as — 429 for `RESOURCE_EXHAUSTED`, 503 for
    /// `UNAVAILABLE`.
    pub status: Option<u16>,
    /// The sending it is about (0: the first).
    pub attempt: u32,
    /// Whether the pause was cut to `max_pause`.
    pub capped: bool,
    /// Whether the pause reached only this process ([`EventKind::Paused`]):
    /// the limiter's store could not be told (Redis down), so the adapter
    /// keeps it — its sendings for the key, the retry first, wait it out —
    /// and a Redis limiter failing `local` paused its local share.
    pub local: bool,
    /// The fleet's learned rate for the key, from and to, in tokens per
    /// second ([`EventKind::Adapted`]; `None` otherwise).
    pub rates: Option<(f64, f64)>,
}
