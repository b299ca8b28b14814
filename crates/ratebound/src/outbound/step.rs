//! What the call machine says ([`Step`]) and tells ([`Event`]).

use std::time::Duration;

use super::Learned;

/// What happened, for the adapter's `on_decision` hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventKind {
    /// The limiter made the request wait [`Event::duration`] before it
    /// went out (told for waits of [`WAITED_MIN`](super::WAITED_MIN) or more).
    Waited,
    /// The partner's answer paused the limiter for [`Event::duration`],
    /// for everyone sharing it ([`Event::capped`] when cut to `max_pause`;
    /// [`Event::local`] when only this process could be paused) — as the
    /// partner asked, or, for a refusal that gave no advice, the backoff.
    Paused,
    /// The answer is sent again, through the limiter.
    Retried,
    /// A status to retry on, but the request may not be sent again
    /// (retries spent, a method that is not idempotent, a body that can be
    /// read once): the caller gets this response.
    GaveUp,
    /// The fleet's learned rate for the key changed on this answer
    /// ([`Event::learned`]: from, to): cut on a refusal, or a step up
    /// after a quiet probe period (see [`Learning`](super::Learning)).
    Adapted,
}

impl EventKind {
    /// `"waited"`, `"paused"`, `"retried"`, `"gave_up"` or `"adapted"`, as every
    /// adapter's event names them.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Waited => "waited",
            EventKind::Paused => "paused",
            EventKind::Retried => "retried",
            EventKind::GaveUp => "gave_up",
            EventKind::Adapted => "adapted",
        }
    }
}

/// One event of a call (its key is [`Call::key`](super::Call::key)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub outcome: EventKind,
    /// How long the request waited ([`EventKind::Waited`]) or the limiter
    /// was paused ([`EventKind::Paused`]); `None` otherwise.
    pub duration: Option<Duration>,
    /// The answer's status (`None` before one).
    pub status: Option<u16>,
    /// The sending it is about (0: the first).
    pub attempt: u32,
    /// Whether the pause was cut to `max_pause`.
    pub capped: bool,
    /// Whether the pause reached only this process.
    pub local: bool,
    /// The learned word before and after ([`EventKind::Adapted`]; `None`
    /// otherwise): [`Caller::rate`](super::Caller::rate) says each as a
    /// rate.
    pub learned: Option<(Learned, Learned)>,
}

/// What the adapter does next (see the module's notes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Sleep this long (a pause kept in this process, or a line longer
    /// than [`LINE_HORIZON`](super::LINE_HORIZON): [`Call::beyond`](super::Call::beyond)), then ask again.
    Hold(Duration),
    /// Wait for `n` tokens of the limiter for [`Call::key`](super::Call::key), at most
    /// `timeout` (`None`: as long as it takes); then ask again. The
    /// limiter's deadline error (the tokens further than `timeout`,
    /// nothing taken) is told to [`Call::beyond`](super::Call::beyond), then ask again; any other
    /// limiter error ends the call with it: nothing is sent.
    Acquire {
        /// The tokens.
        n: u64,
        /// The longest wait left.
        timeout: Option<Duration>,
    },
    /// Send the request; then tell [`Call::answered`](super::Call::answered) (or
    /// [`Call::answered_asked`](super::Call::answered_asked)). A transport error ends the call with it.
    Send,
    /// Replace the limiter's learned word for [`Call::key`](super::Call::key): `seen` by
    /// `next`, if it is still `seen` (the limiter's `adapt`); then tell
    /// [`Call::adapted`](super::Call::adapted) whether it was replaced (a failure: not).
    Adapt {
        /// The word this sending went under.
        seen: Learned,
        /// The word the answer calls for.
        next: Learned,
    },
    /// Pause the limiter for [`Call::key`](super::Call::key) this long; then tell
    /// [`Call::paused`](super::Call::paused) where it took hold.
    Pause(Duration),
    /// Tell the hook (if any); then ask again.
    Report(Event),
    /// Let the answer go (unread) and ask again: the request is sent again.
    Retry,
    /// The answer is the caller's.
    Done,
}
