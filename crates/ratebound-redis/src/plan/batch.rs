//! One send ([`Batch`]): what goes on the wire ([`Request`]), how the
//! reply is read ([`Reply`]) and what each call of it gets ([`Answer`]).

use std::time::Duration;

use super::{Group, Queued};
use crate::script::Script;
use crate::{BatchCall, Call, CallOutcome};

/// What became of one call, owned (it crosses from whoever sent it to its
/// caller); [`outcome`](Self::outcome) is how the engine reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The script's reply (for a batch, this call's nine integers).
    Reply(Vec<i64>),
    /// A reply that is not a list of integers, or a batch's of the wrong
    /// length.
    Malformed,
    /// No answer within the deadline.
    Timeout,
    /// A connection or server error.
    Failed(String),
    /// The call never went out: its caller's deadline passed while it
    /// still waited in the queue (the client's own overload).
    Unsent,
}

impl Answer {
    /// As the engine reads it.
    pub fn outcome(&self) -> CallOutcome<'_> {
        match self {
            Answer::Reply(r) => CallOutcome::Reply(r),
            Answer::Malformed => CallOutcome::Malformed,
            Answer::Timeout => CallOutcome::Timeout,
            Answer::Failed(e) => CallOutcome::Failed(e),
            Answer::Unsent => CallOutcome::Unsent,
        }
    }

    /// Whether Redis answered (with anything).
    pub fn replied(&self) -> bool {
        matches!(self, Answer::Reply(_))
    }
}

/// Reading a reply, whatever the client library made of it.
pub struct Reply;

impl Reply {
    /// A reply's items, each an integer (`Some`) or anything else
    /// (`None`): the integers, or [`Answer::Malformed`] if any is not one.
    pub fn ints(items: impl IntoIterator<Item = Option<i64>>) -> Result<Vec<i64>, Answer> {
        items
            .into_iter()
            .collect::<Option<Vec<i64>>>()
            .ok_or(Answer::Malformed)
    }

    /// Whether a server error's text says the server has not got the
    /// script (`NOSCRIPT …`: a restart, a failover, `SCRIPT FLUSH`, another
    /// cluster node) — with its code, or as the server's words alone (`No
    /// matching script…`: a client that drops the code, as redis-py did
    /// before its `status_code`): send the run's `EVAL` once, within the
    /// same deadline ([`Resend::after_evalsha`]).
    pub fn is_noscript(error: &str) -> bool {
        let error = error.trim_start_matches('-');
        error.starts_with("NOSCRIPT") || error.starts_with("No matching script")
    }

    /// A reply as the `redis` crate reads it.
    #[cfg(any(feature = "tokio", feature = "blocking"))]
    pub fn of_value(value: &redis::Value) -> Result<Vec<i64>, Answer> {
        match value {
            redis::Value::Array(items) => Reply::ints(items.iter().map(|v| match v {
                redis::Value::Int(i) => Some(*i),
                _ => None,
            })),
            _ => Err(Answer::Malformed),
        }
    }
}

/// What a driver does once the `EVALSHA` of a script run failed
/// ([`Resend::after_evalsha`]). The `EVAL` goes at most once: its own
/// failure, whatever it is, is the call's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resend {
    /// The server has not got the script: send the run's `EVAL` (which
    /// loads it) in what is left of the same deadline.
    Eval,
    /// The server has not got the script, but the deadline has passed:
    /// no `EVAL` — the call timed out.
    TimedOut,
    /// Any other failure: the call's, as it is.
    Failed,
}

impl Resend {
    /// After the `EVALSHA` of a run failed with the server error `error`
    /// (its text, with Redis' code if the client keeps it), `left` before
    /// the call's deadline: the `EVAL` on `NOSCRIPT` ([`Reply::is_noscript`])
    /// while time is left, a timeout on `NOSCRIPT` past the deadline, the
    /// failure as it is otherwise.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use ratebound_redis::plan::Resend;
    /// let ms = Duration::from_millis;
    /// let noscript = "NOSCRIPT No matching script. Please use EVAL.";
    /// assert_eq!(Resend::after_evalsha(noscript, ms(20)), Resend::Eval);
    /// assert_eq!(Resend::after_evalsha(noscript, Duration::ZERO), Resend::TimedOut);
    /// assert_eq!(Resend::after_evalsha("NOPERM no permissions", ms(20)), Resend::Failed);
    /// ```
    pub fn after_evalsha(error: &str, left: Duration) -> Resend {
        if !Reply::is_noscript(error) {
            Resend::Failed
        } else if left.is_zero() {
            Resend::TimedOut
        } else {
            Resend::Eval
        }
    }
}

/// What one send puts on the wire: one call as itself, or many as one
/// batch script run. Either is `EVALSHA sha N keys… args…`, and on a
/// `NOSCRIPT` refusal `EVAL text N keys… args…` once.
#[derive(Debug)]
pub enum Request<'a> {
    /// One call.
    One(&'a Call),
    /// Several, as one run.
    Many(BatchCall),
}

impl Request<'_> {
    /// The script run.
    pub fn script(&self) -> &'static Script {
        match self {
            Request::One(c) => c.script,
            Request::Many(b) => b.script,
        }
    }

    /// Its keys, in order.
    pub fn keys(&self) -> Vec<&[u8]> {
        match self {
            Request::One(c) => vec![c.key.as_slice()],
            Request::Many(b) => b.keys.iter().map(Vec::as_slice).collect(),
        }
    }

    /// Its arguments, in order.
    pub fn args(&self) -> &[String] {
        match self {
            Request::One(c) => &c.args,
            Request::Many(b) => &b.args,
        }
    }

    /// `EVALSHA sha N keys… args…`.
    #[cfg(any(feature = "tokio", feature = "blocking"))]
    pub fn evalsha(&self) -> redis::Cmd {
        self.command("EVALSHA", self.script().sha())
    }

    /// `EVAL text N keys… args…` (the script's text, kilobytes: made only
    /// on `NOSCRIPT`).
    #[cfg(any(feature = "tokio", feature = "blocking"))]
    pub fn eval(&self) -> redis::Cmd {
        self.command("EVAL", self.script().text)
    }

    #[cfg(any(feature = "tokio", feature = "blocking"))]
    fn command(&self, name: &str, script: &str) -> redis::Cmd {
        let keys = self.keys();
        let mut c = redis::cmd(name);
        c.arg(script).arg(keys.len());
        for k in keys {
            c.arg(k);
        }
        c.arg(self.args());
        c
    }
}

/// One send of a group: the calls it answers, in order.
pub struct Batch<Q> {
    group: Group,
    calls: Vec<Q>,
}

impl<Q: Queued> Batch<Q> {
    pub(super) fn new(group: Group, calls: Vec<Q>) -> Batch<Q> {
        Batch { group, calls }
    }

    /// One call as a send of its own, outside any group's bookkeeping
    /// (a driver that does not batch).
    pub fn alone(call: Q) -> Batch<Q> {
        Batch {
            group: None,
            calls: vec![call],
        }
    }

    /// Its group (for [`Planner::landed`](super::Planner::landed)).
    pub fn group(&self) -> Group {
        self.group
    }

    /// How many calls it answers.
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// Whether it answers none.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The calls, in order.
    pub fn calls(&self) -> impl Iterator<Item = &Q> {
        self.calls.iter()
    }

    /// What goes on the wire: a lone call as itself (a batch of one is the
    /// same decision, only dearer), several as one [`BatchCall`].
    pub fn request(&self) -> Request<'_> {
        if let [one] = &self.calls[..] {
            return Request::One(one.call());
        }
        let calls: Vec<&Call> = self.calls.iter().map(Queued::call).collect();
        match BatchCall::of(&calls) {
            Some(many) => Request::Many(many),
            // A batch holds calls that join (see `Lane::take`).
            None => unreachable!("a batch's calls join"),
        }
    }

    /// Each call with its answer, given the send's `reply` (its integers,
    /// or what went wrong): a lone call gets the reply; a batch's calls
    /// [`REPLY_LEN`](crate::REPLY_LEN) integers each, in order, or all
    /// [`Answer::Malformed`] if the reply is not that many a call; a
    /// failure is every call's.
    pub fn answers(self, reply: Result<Vec<i64>, Answer>) -> Vec<(Q, Answer)> {
        let n = self.calls.len();
        match reply {
            Ok(ints) if n == 1 => {
                let mut calls = self.calls;
                calls
                    .pop()
                    .map(|q| vec![(q, Answer::Reply(ints))])
                    .unwrap_or_default()
            }
            Ok(ints) => match BatchCall::replies(&ints, n) {
                Some(parts) => self
                    .calls
                    .into_iter()
                    .zip(parts)
                    .map(|(q, part)| (q, Answer::Reply(part.to_vec())))
                    .collect(),
                None => self
                    .calls
                    .into_iter()
                    .map(|q| (q, Answer::Malformed))
                    .collect(),
            },
            Err(failure) => self
                .calls
                .into_iter()
                .map(|q| (q, failure.clone()))
                .collect(),
        }
    }
}
