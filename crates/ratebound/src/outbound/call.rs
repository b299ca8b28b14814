//! The outbound call machine: the order of the steps of one call to a
//! partner, written once for every adapter (reqwest, tower, httpx,
//! requests, fetch, axios). Sans-I/O: the adapter feeds it what happened
//! (the wait's end, the answer, the pause's result, its clock) and does
//! what it says:
//!
//! ```text
//! Hold(d)? → Acquire{n, timeout} → Report(waited)? → Send
//!   → Pause(d)? → Report(paused)? → Report(retried) → Retry (again from Hold)
//!                                 → Report(gave_up)? → Done
//! ```
//!
//! The rules it owns, the same in every language (`spec/outbound_calls.json`
//! holds each one):
//! - **The key**: a request's own key, else the adapter's, else the
//!   request's host and port — the scheme's default port (80 for `http`,
//!   443 for `https`) dropped, an IPv6 host in brackets ([`default_key`]).
//! - **The waited threshold**: a wait of [`WAITED_MIN`] (1 ms) or more is
//!   reported as `waited`.
//! - **The line horizon** (learning calls): tokens are asked for within
//!   [`LINE_HORIZON`]; a line longer than that is waited out without a
//!   slot ([`Call::beyond`]), so that a rise of the learned rate reaches
//!   the partner within the horizon.
//! - **One-shot bodies**: a request whose body can be read once (a stream,
//!   a generator, a file) is never sent again; a retry due is a give-up.
//! - **A failed pause** (the limiter's store could not be told, or the
//!   limiter could not make it: a shared table with no slot for the key)
//!   is kept in this process ([`LocalPauses`]) and reported as `paused`
//!   with `local`. Why: a partner's pause is never dropped — an outage must
//!   not make the adapter hammer a partner that asked it to wait — and the
//!   event says what did happen (a pause, here only), not what was hoped.
//! - **The events and their order**: `waited` (before the sending), then
//!   for an answer `paused` (when a pause is due), then `retried` or
//!   `gave_up` — `gave_up` for a status to retry on that may not be (retries
//!   spent, a method that is not idempotent, a one-shot body).
//! - **The limiters accepted**: token buckets only ([`Caller::new`]): a
//!   window cannot be paused, so it cannot obey a partner for everyone.
//! - **A throwing (panicking) `on_decision` hook** never fails the call:
//!   the adapter swallows it, and reports the first throw of each adapter
//!   once ([`Caller::hook_threw`] says when), as a warning.

use std::time::Duration;

pub use super::caller::{Caller, CeilingSource};
pub use super::step::{Event, EventKind, Step};
pub use super::target::{NO_HOST, Target, default_key};
use super::{Advice, Announced, Learned, Reach, Sending, read_answer};
use crate::Error;

/// A wait this long or longer is reported as `waited`.
pub const WAITED_MIN: Duration = Duration::from_millis(1);

/// How far ahead a learning call takes its slot in the limiter's line.
///
/// A fleet in line (fifty instances, each with a slot taken ahead) keeps
/// the pace of the rate in force when each slot was taken: after a cut,
/// [`Call::reserving`] makes the sendings whose wait saw it wait again,
/// but after a rise nothing can make a slot come earlier, and the fleet
/// follows the partner a queue's length late (10 s for fifty at 5/s).
/// So, while learning, a sending asks for its tokens within this horizon
/// only ([`Step::Acquire`]'s `timeout`); when they are further (the
/// limiter's deadline error, told through [`Call::beyond`]) it holds
/// without a slot and asks again. The line is then at most this long,
/// and a rise reaches the partner within it. In virtual time
/// (`crates/ratebound/tests/learn_fleet.rs`, the partner at 10/s, 5/s,
/// then 10/s), the last phase's goodput goes from 64 % to 110 %.
pub const LINE_HORIZON: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// A sending begins: hold, or acquire.
    Begin,
    /// Held: acquire next.
    Held,
    /// The tokens are asked for: the next ask means they came.
    Acquiring,
    /// The request is to be sent (after a `waited` report).
    Send,
    /// Sent: waiting for the answer.
    Sent,
    /// A pause is due: ask for it.
    Pause,
    /// The pause is asked for: waiting for its result.
    Pausing,
    /// The pause was made: tell it.
    Paused,
    /// The answer calls for a new learned word: ask for it.
    Adapt,
    /// The new word is asked for: waiting for whether it was taken.
    Adapting,
    /// The word was replaced: tell it, then pause or settle.
    Adapted,
    /// The pause step if one is due, else settle.
    AfterAdapt,
    /// The answer's last events and end.
    Settle,
    /// `retried` was told: retry.
    Retried,
    /// `gave_up` was told, or nothing to tell: done.
    Over,
}

/// One call's sequence (see the module's notes). Made by [`Caller::call`];
/// each of its methods takes the same `Caller`.
#[derive(Clone, Debug)]
pub struct Call {
    key: String,
    n: u64,
    timeout: Option<Duration>,
    idempotent: bool,
    resendable: bool,
    attempt: u32,
    state: State,
    /// The clock when this sending began to wait.
    started: Duration,
    status: u16,
    advice: Advice,
    local: bool,
    /// The learned word this sending went under ([`Call::saw`]).
    seen: Learned,
    /// The learned word when its wait began ([`Call::reserving`]).
    reserved: Option<Learned>,
    /// How far the tokens were when the limiter refused them beyond the
    /// step's timeout ([`Call::beyond`]).
    beyond: Option<Duration>,
    /// This sending joins the line however long it is: its timeout is
    /// too short to hold and ask again.
    committed: bool,
    /// The word the answer calls for, then (once replaced) the change.
    learned: Option<(Learned, Learned)>,
}

impl Call {
    /// A call's first sending, for `key`, taking `sending`'s tokens.
    pub(super) fn new(key: String, sending: Sending, idempotent: bool, resendable: bool) -> Call {
        Call {
            key,
            n: sending.n(),
            timeout: sending.timeout(),
            idempotent,
            resendable,
            attempt: 0,
            state: State::Begin,
            started: Duration::ZERO,
            status: 0,
            advice: Advice {
                pause: None,
                capped: false,
                retry: false,
                gave_up: false,
            },
            local: false,
            seen: Learned::fresh(),
            reserved: None,
            beyond: None,
            committed: false,
            learned: None,
        }
    }

    /// The limiter key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The sending under way (0: the first).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Whether the answer to this sending may be retried — an adapter that
    /// must copy a request before sending it (to send it again) copies it
    /// only then.
    pub fn may_retry(&self, caller: &Caller) -> bool {
        self.resendable && self.attempt < caller.outbound.retries()
    }

    /// The request's body turned out to be one that can be read once (an
    /// adapter that learns it only when it tries to copy the request): it
    /// is never sent again.
    pub fn one_shot(&mut self) {
        self.resendable = false;
    }

    /// The next step at `now` (a reading of the adapter's monotonic clock:
    /// time since any fixed origin, one clock for all the adapter's calls).
    ///
    /// # Errors
    /// [`Error::DeadlineExceeded`] when a pause kept in this process holds
    /// the sending longer than its timeout: it fails at once, sending
    /// nothing, as the limiter's wait would.
    pub fn next(&mut self, caller: &Caller, now: Duration) -> Result<Step, Error> {
        loop {
            match self.state {
                State::Begin => {
                    self.started = now;
                    self.committed = false;
                    self.state = State::Held;
                    if let Some(d) = caller.pauses.hold(&self.key, self.timeout, now)? {
                        return Ok(Step::Hold(d));
                    }
                }
                State::Held => {
                    // A hold ends with the time it asked, but a later pause
                    // may have come meanwhile: held again.
                    let spent = now.saturating_sub(self.started);
                    let timeout = self.left(now);
                    if spent > Duration::ZERO
                        && let Some(d) = caller.pauses.hold(&self.key, timeout, now)?
                    {
                        return Ok(Step::Hold(d));
                    }
                    self.state = State::Acquiring;
                    return Ok(self.acquire(caller, timeout));
                }
                State::Acquiring => {
                    if let Some(wait) = self.beyond.take() {
                        if let Some(d) = self.line_too_long(caller, wait, now)? {
                            self.state = State::Held;
                            return Ok(Step::Hold(d));
                        }
                        let left = self.left(now);
                        return Ok(self.acquire(caller, left));
                    }
                    // A cut came while this sending waited in line: its
                    // slot was priced at a rate found too high, and sent
                    // now it would keep the old pace (the partner would
                    // refuse it, and the fleet cut again). It waits again,
                    // at the new rate, within what is left of its timeout.
                    if let Some(reserved) = self.reserved.take()
                        && caller.learning.is_some()
                        && caller.reserves
                        && self.seen.cut_since(reserved)
                    {
                        let left = self.left(now);
                        return Ok(self.acquire(caller, left));
                    }
                    self.state = State::Send;
                    let waited = now.saturating_sub(self.started);
                    if waited >= WAITED_MIN {
                        return Ok(Step::Report(self.event(EventKind::Waited, Some(waited))));
                    }
                }
                State::Send => {
                    self.state = State::Sent;
                    return Ok(Step::Send);
                }
                // Asked again before the answer: send is still the step.
                State::Sent => return Ok(Step::Send),
                State::Adapt => {
                    self.state = State::Adapting;
                    if let Some((seen, next)) = self.learned {
                        return Ok(Step::Adapt { seen, next });
                    }
                }
                State::Adapting => {
                    // Asked again without the result: not replaced.
                    self.adapted(false);
                }
                State::Adapted => {
                    self.state = State::AfterAdapt;
                    return Ok(Step::Report(self.event(EventKind::Adapted, None)));
                }
                State::AfterAdapt => {
                    self.state = if self.advice.pause.is_some() {
                        State::Pause
                    } else {
                        State::Settle
                    };
                }
                State::Pause => {
                    self.state = State::Pausing;
                    return Ok(Step::Pause(self.advice.pause.unwrap_or_default()));
                }
                State::Pausing => {
                    // Asked again without the pause's result: it failed.
                    self.paused(caller, None, now);
                }
                State::Paused => {
                    self.state = State::Settle;
                    let pause = self.advice.pause;
                    return Ok(Step::Report(self.event(EventKind::Paused, pause)));
                }
                State::Settle => {
                    let a = self.advice;
                    if a.retry {
                        self.state = State::Retried;
                        return Ok(Step::Report(self.event(EventKind::Retried, None)));
                    }
                    self.state = State::Over;
                    if a.gave_up {
                        return Ok(Step::Report(self.event(EventKind::GaveUp, None)));
                    }
                }
                State::Retried => {
                    self.attempt += 1;
                    self.state = State::Begin;
                    return Ok(Step::Retry);
                }
                State::Over => return Ok(Step::Done),
            }
        }
    }

    /// The answer to the sending: its `status` and header fields (name,
    /// value), received at `now_unix` (seconds since the Unix epoch, for
    /// HTTP-dates). The headers give the pause asked and the quota
    /// announced ([`read_answer`]): what
    /// [`answered_announced`](Self::answered_announced) takes.
    pub fn answered<'h>(
        &mut self,
        caller: &Caller,
        status: u16,
        headers: impl IntoIterator<Item = (&'h str, &'h str)>,
        now_unix: f64,
    ) {
        let (asked, announced) = read_answer(headers, now_unix);
        self.answered_announced(caller, status, asked, announced, now_unix);
    }

    /// The learned word the limiter held for [`key`](Self::key) when this
    /// sending went (the limiter's `learned`, read after the tokens came):
    /// what the answer's evidence is about. Untold, the fresh word — a
    /// proposal from it is then dropped by the limiter wherever something
    /// is learned.
    pub fn saw(&mut self, seen: Learned) {
        self.seen = seen;
    }

    /// The learned word the limiter held for [`key`](Self::key) when this
    /// sending's wait began (read before the tokens are asked for; then
    /// [`saw`](Self::saw) after they came). When a cut came between
    /// ([`Learned::cut_since`]), the machine asks for the tokens again
    /// instead of sending: a fleet in line (fifty instances, each with a
    /// slot taken ahead) keeps no old pace after a cut. Untold, a sending
    /// goes when its tokens come.
    pub fn reserving(&mut self, seen: Learned) {
        self.reserved = Some(seen);
    }

    /// The limiter refused this sending's tokens ([`Step::Acquire`]) with
    /// its deadline error: they were `wait` away, beyond the step's
    /// `timeout` (nothing was taken). Tell it, then ask for the next step:
    /// - beyond what is left of the sending's own timeout (or not
    ///   learning: the timeout was the sending's own), the call fails with
    ///   [`Error::DeadlineExceeded`], as the limiter's wait would;
    /// - else the line is longer than [`LINE_HORIZON`]: the sending holds
    ///   ([`Step::Hold`]) until the line's end comes within the horizon
    ///   (`wait − horizon`), at least a horizon (so that a fleet holding
    ///   asks about once a horizon each, not at every slot), then asks
    ///   again — or, when its timeout would not leave that hold plus the
    ///   wait it was told, it joins the line at once (the next
    ///   [`Step::Acquire`] has the whole timeout left), as a sending that
    ///   does not learn would: a hold never fails a call that its line
    ///   would have served in time.
    pub fn beyond(&mut self, wait: Duration) {
        if self.state == State::Acquiring {
            self.beyond = Some(wait);
        }
    }

    /// What is left of the sending's timeout at `now`.
    fn left(&self, now: Duration) -> Option<Duration> {
        let spent = now.saturating_sub(self.started);
        self.timeout.map(|t| t.saturating_sub(spent))
    }

    /// The tokens asked for, with `left` of the sending's timeout: within
    /// [`LINE_HORIZON`] while learning (unless committed).
    fn acquire(&self, caller: &Caller, left: Option<Duration>) -> Step {
        let timeout = if caller.learning.is_some() && !self.committed {
            Some(left.map_or(LINE_HORIZON, |l| l.min(LINE_HORIZON)))
        } else {
            left
        };
        Step::Acquire { n: self.n, timeout }
    }

    /// After the limiter refused tokens `wait` away ([`Call::beyond`]):
    /// how long to hold before asking again, `None` to ask again at once
    /// (committed to the line).
    fn line_too_long(
        &mut self,
        caller: &Caller,
        wait: Duration,
        now: Duration,
    ) -> Result<Option<Duration>, Error> {
        let left = self.left(now);
        let lined = caller.learning.is_some() && !self.committed;
        if !lined || left.is_some_and(|l| wait > l) {
            return Err(Error::DeadlineExceeded {
                wait,
                max_wait: left.unwrap_or(Duration::ZERO),
            });
        }
        let hold = wait.saturating_sub(LINE_HORIZON).max(LINE_HORIZON);
        if left.is_some_and(|l| hold.saturating_add(wait) > l) {
            self.committed = true;
            return Ok(None);
        }
        Ok(Some(hold))
    }

    /// [`answered`](Self::answered) given the pause the answer asked for
    /// (from its headers, [`pause_asked`](super::pause_asked), or elsewhere — a gRPC
    /// `RetryInfo` — the longer of them; `None`: none), received at
    /// `now_unix` (seconds since the Unix epoch: the clock a fleet's
    /// learned word is dated by); no quota announced.
    pub fn answered_asked(
        &mut self,
        caller: &Caller,
        status: u16,
        asked: Option<Duration>,
        now_unix: f64,
    ) {
        self.answered_announced(caller, status, asked, None, now_unix);
    }

    /// [`answered_asked`](Self::answered_asked) with the quota the answer
    /// `announced` ([`announced`](super::announced); `None`: none). A
    /// learning adapter's next word: on a status to retry on (a refusal),
    /// the cut ([`Learning::refused`](super::Learning::refused)); else, on an answer that announces
    /// a quota, the fraction that spends no more than it before its reset
    /// ([`Learning::announced`](super::Learning::announced), in place of the quiet probe's step up);
    /// else, on a success, the step up ([`Learning::answered`](super::Learning::answered)).
    pub fn answered_announced(
        &mut self,
        caller: &Caller,
        status: u16,
        asked: Option<Duration>,
        announced: Option<Announced>,
        now_unix: f64,
    ) {
        let mut advice = caller
            .outbound
            .advise_for(self.idempotent, status, asked, self.attempt);
        // One-shot bodies are never sent again: a retry due is a give-up.
        if advice.retry && !self.resendable {
            advice.retry = false;
            advice.gave_up = true;
        }
        self.status = status;
        self.advice = advice;
        self.local = false;
        self.learned = caller.learning_now().and_then(|l| {
            let now_ms = unix_ms(now_unix);
            let next = if caller.outbound.statuses().contains(&status) {
                l.refused(self.seen, now_ms)
            } else if let Some(quota) = &announced {
                l.announced(self.seen, quota, now_ms)
            } else if (200..300).contains(&status) {
                l.answered(self.seen, now_ms)
            } else {
                None
            }?;
            Some((self.seen, next))
        });
        self.state = if self.learned.is_some() {
            State::Adapt
        } else if advice.pause.is_some() {
            State::Pause
        } else {
            State::Settle
        };
    }

    /// Whether the limiter replaced its learned word as
    /// [`Step::Adapt`] asked (`false` too when it failed): when it did,
    /// `adapted` is told next.
    pub fn adapted(&mut self, replaced: bool) {
        if self.state != State::Adapting {
            return;
        }
        if replaced {
            self.state = State::Adapted;
        } else {
            self.learned = None;
            self.state = State::AfterAdapt;
        }
    }

    /// Where the pause took hold: [`Reach::Shared`], [`Reach::Local`]
    /// (the store could not be told), or `None` when the limiter failed to
    /// make it. A pause that did not reach everyone is kept in this
    /// process: this adapter's sendings for the key wait it out.
    pub fn paused(&mut self, caller: &Caller, reach: Option<Reach>, now: Duration) {
        if self.state != State::Pausing {
            return;
        }
        let pause = self.advice.pause.unwrap_or_default();
        self.local = caller
            .pauses
            .paused(&self.key, pause, reach.unwrap_or(Reach::Local), now);
        // `paused` is told before the end.
        self.state = State::Paused;
    }

    fn event(&self, outcome: EventKind, duration: Option<Duration>) -> Event {
        let answered = !matches!(outcome, EventKind::Waited);
        Event {
            outcome,
            duration,
            status: answered.then_some(self.status),
            attempt: self.attempt,
            capped: outcome == EventKind::Paused && self.advice.capped,
            local: outcome == EventKind::Paused && self.local,
            learned: if outcome == EventKind::Adapted {
                self.learned
            } else {
                None
            },
        }
    }
}

/// `now_unix` seconds as whole milliseconds (0 before the epoch or for a
/// value that is not a number).
fn unix_ms(now_unix: f64) -> u64 {
    let ms = (now_unix * 1000.0).floor();
    if ms.is_nan() || ms <= 0.0 {
        return 0;
    }
    // Saturates beyond u64 (a float cast does).
    ms as u64
}
