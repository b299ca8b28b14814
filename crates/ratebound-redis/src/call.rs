//! One script run for a driver to perform ([`Call`], what it asks:
//! [`CallKind`]), what became of it ([`CallOutcome`], and whether a reply is
//! one of the scripts': `well_formed`), and the first step of a check
//! ([`Begin`]).

use crate::decision::RedisDecision;
use crate::script::Script;

/// What a [`Call`] asks of Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    /// Take `n` tokens or nothing.
    Check,
    /// Take at least `n` and up to the lease size.
    Lease,
    /// Give unspent leased tokens (or a reservation's) back.
    Return,
    /// Take `n` tokens now or ahead of time, if they are due within
    /// `max_wait_us` (a token bucket's reservation).
    Reserve {
        /// The longest wait, in µs.
        max_wait_us: u64,
    },
    /// Empty the bucket for `for_us` µs from Redis' now, moving every
    /// reserved slot past it.
    Pause {
        /// How long, in µs.
        for_us: u64,
    },
}

impl CallKind {
    /// `"check"`, `"lease"`, `"return"`, `"reserve"` or `"pause"`: the
    /// script's mode.
    pub fn as_str(self) -> &'static str {
        match self {
            CallKind::Check => "check",
            CallKind::Lease => "lease",
            CallKind::Return => "return",
            CallKind::Reserve { .. } => "reserve",
            CallKind::Pause { .. } => "pause",
        }
    }
}

/// One script run for a driver to perform: `EVALSHA sha 1 key args...`,
/// and on a `NOSCRIPT` reply `EVAL text 1 key args...` once (which also
/// loads the script). The reply is seven integers, for
/// [`Engine::finish`](crate::Engine::finish) (or
/// [`Engine::finish_reserve`](crate::Engine::finish_reserve),
/// [`Engine::finish_pause`](crate::Engine::finish_pause)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// The script.
    pub script: &'static Script,
    /// The one key (see [`Engine::redis_key`](crate::Engine::redis_key)):
    /// cluster-safe.
    pub key: Vec<u8>,
    /// The arguments, as Redis strings.
    pub args: Vec<String>,
    /// What the call asks.
    pub kind: CallKind,
    /// The tokens the caller asked for.
    pub n: u64,
}

impl Call {
    /// The same call judged at `now_us` (µs) instead of Redis' `TIME`: the
    /// explicit-time twin, for replaying test vectors.
    pub fn at(mut self, now_us: u64) -> Call {
        self.args[0] = now_us.to_string();
        self
    }
}

/// What became of a [`Call`] (the engine's `finish` steps take it; named
/// so as not to be the gate's [`ratebound::any::Outcome`], which says how
/// a request was answered).
#[derive(Clone, Copy, Debug)]
pub enum CallOutcome<'a> {
    /// The script's reply. One of another shape than the scripts' (seven
    /// integers, none negative) is a failure, as [`Malformed`](Self::Malformed).
    Reply(&'a [i64]),
    /// A reply that is not a list of integers (a string, a nested list, a
    /// number that is no integer): a server that is not running our script.
    /// A failure like any other, for the fail policy and the breaker.
    Malformed,
    /// No reply within the deadline. The call may still have run: its
    /// tokens may be spent.
    Timeout,
    /// A connection or server error (its text, for nothing but logs).
    Failed(&'a str),
}

impl<'a> CallOutcome<'a> {
    /// What a driver reports, read in one order for every binding:
    /// `timed_out` first (no reply within the deadline), then an `error`
    /// text, then the `reply` ([`Reply`](Self::Reply) or
    /// [`Malformed`](Self::Malformed), e.g. from
    /// [`of_numbers`](Self::of_numbers)); nothing at all is a failure
    /// (`"no reply"`).
    ///
    /// # Examples
    /// ```
    /// use ratebound_redis::CallOutcome;
    /// let reply = Some(CallOutcome::Reply(&[1, 0, 0, 0, 1, 0, 7]));
    /// assert!(matches!(CallOutcome::reported(reply, true, None), CallOutcome::Timeout));
    /// assert!(matches!(CallOutcome::reported(None, false, Some("down")), CallOutcome::Failed("down")));
    /// assert!(matches!(CallOutcome::reported(None, false, None), CallOutcome::Failed("no reply")));
    /// ```
    pub fn reported(
        reply: Option<CallOutcome<'a>>,
        timed_out: bool,
        error: Option<&'a str>,
    ) -> CallOutcome<'a> {
        match (timed_out, error, reply) {
            (true, _, _) => CallOutcome::Timeout,
            (false, Some(e), _) => CallOutcome::Failed(e),
            (false, None, Some(reply)) => reply,
            (false, None, None) => CallOutcome::Failed("no reply"),
        }
    }

    /// A reply of numbers as JavaScript holds them (doubles): the
    /// [`Reply`](Self::Reply) of their integers (written into `ints`) if
    /// every one is a whole number of magnitude at most 2^53 — where a
    /// double stops being exact —, else [`Malformed`](Self::Malformed).
    ///
    /// # Examples
    /// ```
    /// use ratebound_redis::CallOutcome;
    /// let mut ints = Vec::new();
    /// assert!(matches!(CallOutcome::of_numbers(&[1.0, 2.0], &mut ints), CallOutcome::Reply(&[1, 2])));
    /// assert!(matches!(CallOutcome::of_numbers(&[1.5], &mut ints), CallOutcome::Malformed));
    /// assert!(matches!(CallOutcome::of_numbers(&[f64::NAN], &mut ints), CallOutcome::Malformed));
    /// ```
    pub fn of_numbers(values: &[f64], ints: &'a mut Vec<i64>) -> CallOutcome<'a> {
        const MAX_EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
        ints.clear();
        for &v in values {
            if !(v.is_finite() && v.fract() == 0.0 && v.abs() <= MAX_EXACT) {
                return CallOutcome::Malformed;
            }
            // Whole and within 2^53: exact.
            ints.push(v as i64);
        }
        CallOutcome::Reply(ints)
    }
}

/// The first step of a check: an answer already, or a call to make.
#[derive(Clone, Debug)]
pub enum Begin {
    /// Answered without Redis (a lease, or the fail policy while the breaker
    /// is open).
    Done(RedisDecision),
    /// Run this call, then pass its outcome to [`Engine::finish`](crate::Engine::finish).
    Call(Call),
}

/// Whether `r` is a reply of the scripts: seven integers, none negative.
pub(crate) fn well_formed(r: &[i64]) -> bool {
    r.len() == 7 && r.iter().all(|v| *v >= 0)
}

#[cfg(any(feature = "tokio", feature = "blocking"))]
impl Call {
    /// The call as Redis commands: `EVALSHA sha 1 key args…`, and the
    /// `EVAL text 1 key args…` to send once if that was refused with
    /// `NOSCRIPT` (a restart, a failover, `SCRIPT FLUSH`, another cluster
    /// node: `EVAL` loads the script).
    pub fn commands(&self) -> (redis::Cmd, redis::Cmd) {
        let command = |name: &str, script: &str| {
            let mut c = redis::cmd(name);
            c.arg(script).arg(1).arg(&self.key).arg(&self.args);
            c
        };
        (
            command("EVALSHA", self.script.sha()),
            command("EVAL", self.script.text),
        )
    }

    /// Whether `e` says the server does not have the script (send the
    /// second of [`commands`](Self::commands)).
    pub fn is_noscript(e: &redis::RedisError) -> bool {
        e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
    }

    /// Runs the call on a blocking connection (feature `blocking`): the
    /// script's reply, or the error (its deadline is the connection's own
    /// read timeout).
    ///
    /// # Errors
    /// The connection's or the server's error.
    #[cfg(feature = "blocking")]
    pub fn run_blocking(
        &self,
        conn: &mut impl redis::ConnectionLike,
    ) -> redis::RedisResult<Vec<i64>> {
        let (evalsha, eval) = self.commands();
        match evalsha.query(conn) {
            Err(e) if Call::is_noscript(&e) => eval.query(conn),
            other => other,
        }
    }
}
