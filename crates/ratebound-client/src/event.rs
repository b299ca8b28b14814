//! What the `on_decision` hook is told.

use std::time::Duration;

/// What happened to a call, for [`Builder::on_decision`](crate::Builder::on_decision).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// The limiter made the request wait [`OutboundEvent::duration`]
    /// before it went out (told for waits of 1 ms or more).
    Waited,
    /// The partner's answer paused the limiter for
    /// [`OutboundEvent::duration`], for everyone sharing it
    /// ([`OutboundEvent::capped`] when cut to `max_pause`;
    /// [`OutboundEvent::local`] when only this process could be paused) —
    /// as the partner asked, or, for a refusal that gave no advice, the
    /// backoff.
    Paused,
    /// The answer is sent again, through the limiter.
    Retried,
    /// A status to retry on, but the request may not be sent again
    /// (retries spent, a method that is not idempotent, a body that cannot
    /// be copied): the caller gets this response.
    GaveUp,
}

impl Outcome {
    /// `"waited"`, `"paused"`, `"retried"` or `"gave_up"`, as Python's
    /// `OutboundEvent.outcome` and Node's `onDecision` name them.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Waited => "waited",
            Outcome::Paused => "paused",
            Outcome::Retried => "retried",
            Outcome::GaveUp => "gave_up",
        }
    }
}

/// What [`Builder::on_decision`](crate::Builder::on_decision)'s callback
/// is told: the shape of Python's `OutboundEvent`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutboundEvent<'a> {
    /// What happened.
    pub outcome: Outcome,
    /// The limiter key.
    pub key: &'a str,
    /// How long the request waited ([`Outcome::Waited`]) or the limiter
    /// was paused ([`Outcome::Paused`]); `None` otherwise.
    pub duration: Option<Duration>,
    /// The answer's status (`None` before one): for a gRPC answer, the
    /// status it counts as — 429 for `RESOURCE_EXHAUSTED`, 503 for
    /// `UNAVAILABLE`.
    pub status: Option<u16>,
    /// The sending it is about (0: the first).
    pub attempt: u32,
    /// Whether the pause was cut to `max_pause`.
    pub capped: bool,
    /// Whether the pause reached only this process ([`Outcome::Paused`]):
    /// the limiter's store could not be told (Redis down), so the adapter
    /// keeps it — its sendings for the key, the retry first, wait it out —
    /// and a Redis limiter failing `local` paused its local share.
    pub local: bool,
}
