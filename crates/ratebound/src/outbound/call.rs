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

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{Advice, LocalPauses, Outbound, Reach, Sending, idempotent, pause_asked};
use crate::Error;
use crate::any::{seconds, whole};

/// A wait this long or longer is reported as `waited`.
pub const WAITED_MIN: Duration = Duration::from_millis(1);

/// The key of a request that names no host (a path-only URI, as tonic's
/// requests to a `Channel` are): one key for all of them.
pub const NO_HOST: &str = "default";

/// What happened, for the adapter's `on_decision` hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventKind {
    /// The limiter made the request wait [`Event::duration`] before it
    /// went out (told for waits of [`WAITED_MIN`] or more).
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
}

impl EventKind {
    /// `"waited"`, `"paused"`, `"retried"` or `"gave_up"`, as every
    /// adapter's event names them.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Waited => "waited",
            EventKind::Paused => "paused",
            EventKind::Retried => "retried",
            EventKind::GaveUp => "gave_up",
        }
    }
}

/// One event of a call (its key is [`Call::key`]).
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
}

/// What the adapter does next (see the module's notes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Sleep this long (a pause kept in this process), then ask again.
    Hold(Duration),
    /// Wait for `n` tokens of the limiter for [`Call::key`], at most
    /// `timeout` (`None`: as long as it takes); then ask again. A limiter
    /// error ends the call with it: nothing is sent.
    Acquire {
        /// The tokens.
        n: u64,
        /// The longest wait left.
        timeout: Option<Duration>,
    },
    /// Send the request; then tell [`Call::answered`] (or
    /// [`Call::answered_asked`]). A transport error ends the call with it.
    Send,
    /// Pause the limiter for [`Call::key`] this long; then tell
    /// [`Call::paused`] where it took hold.
    Pause(Duration),
    /// Tell the hook (if any); then ask again.
    Report(Event),
    /// Let the answer go (unread) and ask again: the request is sent again.
    Retry,
    /// The answer is the caller's.
    Done,
}

/// What an adapter holds for all its calls: the policy, each sending's
/// tokens and timeout, its key (if fixed), the pauses kept in this process
/// and whether its hook threw.
#[derive(Debug)]
pub struct Caller {
    outbound: Outbound,
    sending: Sending,
    key: Option<String>,
    pauses: LocalPauses,
    hook_threw: AtomicBool,
}

/// The names of the algorithms a limiter may report (for the error's
/// `&'static str`).
fn algorithm_name(algorithm: &str) -> &'static str {
    [
        "token_bucket",
        "fixed_window",
        "sliding_window",
        "sliding_log",
        "leaky_bucket",
        "gcra",
        "all_of",
        "window",
    ]
    .into_iter()
    .find(|a| *a == algorithm)
    .unwrap_or("this algorithm")
}

impl Caller {
    /// The rules of an adapter whose limiter is a `algorithm` (its name,
    /// `"token_bucket"`, ...), with the policy `outbound`, each sending's
    /// `sending`, and one key for every request (`None`: each request's
    /// host).
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a limiter that is not a token bucket: a
    /// window cannot be paused, so it cannot obey a partner for everyone.
    ///
    /// # Examples
    /// ```
    /// use ratebound::outbound::{Caller, Outbound, Sending};
    /// let e = Caller::new("fixed_window", Outbound::new(), Sending::default(), None).unwrap_err();
    /// assert_eq!(e.to_string(),
    ///            "fixed_window does not support pause (an outbound limiter must be a token bucket)");
    /// ```
    pub fn new(
        algorithm: &str,
        outbound: Outbound,
        sending: Sending,
        key: Option<String>,
    ) -> Result<Caller, Error> {
        if algorithm != "token_bucket" {
            return Err(Error::Unsupported {
                operation: "pause (an outbound limiter must be a token bucket)",
                algorithm: algorithm_name(algorithm),
            });
        }
        Ok(Caller {
            outbound,
            sending,
            key,
            pauses: LocalPauses::new(),
            hook_threw: AtomicBool::new(false),
        })
    }

    /// [`call`](Self::call) with the numbers a dynamic language passes:
    /// `n` a whole number ≥ 1, `timeout` seconds (`Some(None)`: the
    /// request says "no timeout"), read as [`Sending::from_loose`] reads
    /// them.
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] naming `n` or `timeout`.
    pub fn call_loose(
        &self,
        method: &str,
        target: Target<'_>,
        key: Option<String>,
        n: Option<f64>,
        timeout: Option<Option<f64>>,
        resendable: bool,
    ) -> Result<Call, Error> {
        let n = n.map(|n| whole("n", n, 1)).transpose()?;
        let timeout = match timeout {
            Some(t) => Some(t.map(|t| seconds("timeout", t)).transpose()?),
            None => None,
        };
        self.call(method, target, key, n, timeout, resendable)
    }

    /// The policy.
    pub fn outbound(&self) -> &Outbound {
        &self.outbound
    }

    /// Each sending's tokens and timeout, unless a request says otherwise.
    pub fn sending(&self) -> Sending {
        self.sending
    }

    /// One call of `method` to `host` (`port`: as the URL gives it, `None`
    /// for none) over `scheme`, with the request's own `key`, `n` and
    /// `timeout` when it gives them (`timeout: Some(None)`: no timeout),
    /// `resendable` when its body can be sent again.
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] naming `n` for 0.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use ratebound::outbound::{Caller, Outbound, Sending, Step, Target};
    /// let caller = Caller::new("token_bucket", Outbound::new(), Sending::default(), None)?;
    /// let target = Target { scheme: "https", host: "partner.example", port: Some(443) };
    /// let mut call = caller.call("GET", target, None, None, None, true)?;
    /// assert_eq!(call.key(), "partner.example");
    /// let t = Duration::ZERO;
    /// assert_eq!(call.next(&caller, t)?, Step::Acquire { n: 1, timeout: None });
    /// assert_eq!(call.next(&caller, t)?, Step::Send);
    /// call.answered(&caller, 200, [], 0.0);
    /// assert_eq!(call.next(&caller, t)?, Step::Done);
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    pub fn call(
        &self,
        method: &str,
        target: Target<'_>,
        key: Option<String>,
        n: Option<u64>,
        timeout: Option<Option<Duration>>,
        resendable: bool,
    ) -> Result<Call, Error> {
        let sending = if n.is_some() || timeout.is_some() {
            Sending::new(
                n.unwrap_or(self.sending.n()),
                timeout.unwrap_or(self.sending.timeout()),
            )?
        } else {
            self.sending
        };
        let key = match key {
            Some(key) => key,
            None => match &self.key {
                Some(key) => key.clone(),
                None => default_key(target),
            },
        };
        Ok(Call {
            key,
            n: sending.n(),
            timeout: sending.timeout(),
            idempotent: idempotent(method),
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
        })
    }

    /// Says that the adapter's hook threw (panicked): true the first time
    /// only — the adapter warns once, then swallows the later throws. A
    /// hook's failure never fails the call.
    pub fn hook_threw(&self) -> bool {
        !self.hook_threw.swap(true, Ordering::Relaxed)
    }
}

/// Where a request goes: its URL's scheme, host and port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target<'a> {
    /// `"http"`, `"https"`, ... (any case; a trailing `:` is ignored).
    pub scheme: &'a str,
    /// The host, as the URL spells it (an IPv6 address with or without its
    /// brackets); empty: none.
    pub host: &'a str,
    /// The port the URL gives, if any.
    pub port: Option<u16>,
}

/// The key of a request to `target`: `host:port`, or `host` when the URL
/// gives no port or the scheme's default (80 for `http`, 443 for
/// `https`); an IPv6 host in brackets; [`NO_HOST`] for no host.
///
/// # Examples
/// ```
/// use ratebound::outbound::{Target, default_key};
/// let key = |scheme, host, port| default_key(Target { scheme, host, port });
/// assert_eq!(key("https", "partner.example", Some(443)), "partner.example");
/// assert_eq!(key("http", "partner.example", Some(8080)), "partner.example:8080");
/// assert_eq!(key("https:", "::1", Some(8443)), "[::1]:8443");
/// assert_eq!(key("http", "", None), "default");
/// ```
pub fn default_key(target: Target<'_>) -> String {
    let Target { scheme, host, port } = target;
    if host.is_empty() {
        return NO_HOST.to_string();
    }
    let scheme = scheme.strip_suffix(':').unwrap_or(scheme);
    let default = if scheme.eq_ignore_ascii_case("http") {
        Some(80)
    } else if scheme.eq_ignore_ascii_case("https") {
        Some(443)
    } else {
        None
    };
    let bracket = host.contains(':') && !host.starts_with('[');
    let mut key = String::with_capacity(host.len() + 8);
    if bracket {
        key.push('[');
    }
    key.push_str(host);
    if bracket {
        key.push(']');
    }
    if let Some(port) = port.filter(|p| Some(*p) != default) {
        // Into the key's own buffer: no second allocation.
        let _ = write!(key, ":{port}");
    }
    key
}

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
}

impl Call {
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
                    self.state = State::Held;
                    if let Some(d) = caller.pauses.hold(&self.key, self.timeout, now)? {
                        return Ok(Step::Hold(d));
                    }
                }
                State::Held => {
                    // A hold ends with the time it asked, but a later pause
                    // may have come meanwhile: held again.
                    let spent = now.saturating_sub(self.started);
                    let timeout = self.timeout.map(|t| t.saturating_sub(spent));
                    if spent > Duration::ZERO
                        && let Some(d) = caller.pauses.hold(&self.key, timeout, now)?
                    {
                        return Ok(Step::Hold(d));
                    }
                    self.state = State::Acquiring;
                    return Ok(Step::Acquire { n: self.n, timeout });
                }
                State::Acquiring => {
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
    /// HTTP-dates).
    pub fn answered<'h>(
        &mut self,
        caller: &Caller,
        status: u16,
        headers: impl IntoIterator<Item = (&'h str, &'h str)>,
        now_unix: f64,
    ) {
        self.answered_asked(caller, status, pause_asked(headers, now_unix));
    }

    /// [`answered`](Self::answered) given the pause the answer asked for
    /// (from its headers, [`pause_asked`], or elsewhere — a gRPC
    /// `RetryInfo` — the longer of them; `None`: none).
    pub fn answered_asked(&mut self, caller: &Caller, status: u16, asked: Option<Duration>) {
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
        self.state = if advice.pause.is_some() {
            State::Pause
        } else {
            State::Settle
        };
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
        }
    }
}
