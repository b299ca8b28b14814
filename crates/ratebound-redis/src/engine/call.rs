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
    /// Lift the pause on, if nothing was built on it.
    Resume,
    /// Replace the learned word `seen` with `next` if it is still `seen`.
    Adapt {
        /// The word the proposal was made from.
        seen: ratebound::outbound::Learned,
        /// The word proposed.
        next: ratebound::outbound::Learned,
    },
}

impl CallKind {
    /// `"check"`, `"lease"`, `"return"`, `"reserve"`, `"pause"`,
    /// `"resume"` or `"adapt"`: the script's mode.
    pub fn as_str(self) -> &'static str {
        match self {
            CallKind::Check => "check",
            CallKind::Lease => "lease",
            CallKind::Return => "return",
            CallKind::Reserve { .. } => "reserve",
            CallKind::Pause { .. } => "pause",
            CallKind::Resume => "resume",
            CallKind::Adapt { .. } => "adapt",
        }
    }
}

/// One script run for a driver to perform: `EVALSHA sha 1 key args...`,
/// and on a `NOSCRIPT` reply `EVAL text 1 key args...` once (which also
/// loads the script). The reply is [`REPLY_LEN`] (nine) integers, for
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
    /// The learned word the arguments hint (see [`Call::hint`]).
    pub(crate) hint: Option<ratebound::outbound::Learned>,
}

impl Call {
    /// The learned word this call hints to the script, if any: a check,
    /// lease or reservation on a token bucket whose key's last reply told
    /// a learned word carries that word's scaled `T'` and `tau'` (µs) in
    /// place of the ceiling's (`args[1]`, `args[2]`), then the word as it
    /// is stored (`args[6]`, `":<hi>:<lo>"`) and the ceiling's
    /// `"<T>:<tau>"` (`args[7]`). A key holding that word is read with one
    /// string comparison and no scaling, and the reply's word is then
    /// [`HINTED`] (`[.., 262144, 0]`: "the hinted one"); a key holding any
    /// other runs the full path on the ceiling and replies its word. The
    /// decisions are the same either way. (With its two more arguments, a
    /// hinted call joins a batch of hinted calls only:
    /// [`BatchCall::joins`].)
    pub fn hint(&self) -> Option<ratebound::outbound::Learned> {
        self.hint
    }

    /// Whether `r` is a reply of the scripts to this call: [`REPLY_LEN`]
    /// integers, none negative, the learned word's parts within their bits
    /// (18 and 44) — or, to a hinted call, [`HINTED`] and 0.
    pub fn replied(&self, r: &[i64]) -> bool {
        well_formed(r)
            || (self.hint.is_some()
                && r.len() == REPLY_LEN
                && r[7] == HINTED
                && r[8] == 0
                && r[..7].iter().all(|v| *v >= 0))
    }

    /// The same call judged at `now_us` (µs) instead of Redis' `TIME`: the
    /// explicit-time twin, for replaying test vectors.
    pub fn at(mut self, now_us: u64) -> Call {
        self.args[0] = now_us.to_string();
        self
    }
}

/// Several [`Call`]s of one script, judged at one clock (Redis' `TIME`, or
/// one explicit time), as **one** script run: `EVALSHA <batch sha> N key1 …
/// keyN <clock> <the first call's arguments> … <the last's>` (on
/// `NOSCRIPT`, `EVAL` with the batch text), whose reply is each call's
/// [`REPLY_LEN`] integers in order, flat ([`replies`](Self::replies) splits them).
/// The keys are decided one after another in the calls' order, exactly as
/// separate calls in that order would decide them: a key twice in one
/// batch, the second sees the first's write. In a Redis Cluster every key
/// of one batch must be in one hash slot (a driver groups by slot).
///
/// # Examples
/// ```
/// use ratebound::Quota;
/// use ratebound_redis::{Algorithm, BatchCall, Begin, Config, Engine};
/// let engine = Engine::new(Config::new(Algorithm::TokenBucket(Quota::parse("10/s")?)))?;
/// let call = |key: &str| match engine.begin(key.as_bytes(), 1) {
///     Ok(Begin::Call(c)) => c,
///     _ => unreachable!(),
/// };
/// let (a, b) = (call("alice"), call("bob"));
/// let batch = BatchCall::of(&[&a, &b]).expect("same script, same clock");
/// assert_eq!(batch.script.name, "gcra_batch");
/// assert_eq!(batch.keys, [b"rb:tb:alice".to_vec(), b"rb:tb:bob".to_vec()]);
/// assert_eq!(batch.args.len(), 1 + 2 * (a.args.len() - 1));
/// let reply = [1, 9, 0, 100_000, 1, 0, 7, 0, 0, 0, 0, 5, 9, 0, 0, 7, 0, 0];
/// let parts: Vec<&[i64]> = BatchCall::replies(&reply, 2).expect("9 × 2").collect();
/// assert_eq!(parts[1], &[0, 0, 5, 9, 0, 0, 7, 0, 0]);
/// assert!(BatchCall::replies(&reply[..17], 2).is_none());
/// # Ok::<(), ratebound::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchCall {
    /// The batch script ([`Script::batch`] of the calls' script).
    pub script: &'static Script,
    /// The calls' keys, in order.
    pub keys: Vec<Vec<u8>>,
    /// The clock argument, then every call's own arguments, in order.
    pub args: Vec<String>,
}

impl BatchCall {
    /// The most calls one batch holds (a driver's cap): a script run is
    /// atomic, so a longer one would hold every other client back.
    pub const MAX: usize = 128;

    /// Whether `next` can go in one batch with `first`: the same script,
    /// the same clock argument and as many arguments.
    pub fn joins(first: &Call, next: &Call) -> bool {
        first.script == next.script
            && first.args.len() == next.args.len()
            && first.args.first() == next.args.first()
    }

    /// `calls` as one batch; `None` for no calls or calls that do not
    /// [`join`](Self::joins) the first. (A batch of one is the same
    /// decision as the call itself, only dearer: drivers send a lone call
    /// as it is.)
    pub fn of(calls: &[&Call]) -> Option<BatchCall> {
        let first = *calls.first()?;
        if !calls.iter().all(|c| BatchCall::joins(first, c)) {
            return None;
        }
        let per = first.args.len().saturating_sub(1);
        let mut args = Vec::with_capacity(1 + per * calls.len());
        args.push(first.args.first().cloned().unwrap_or_default());
        for c in calls {
            args.extend(c.args.iter().skip(1).cloned());
        }
        Some(BatchCall {
            script: first.script.batch(),
            keys: calls.iter().map(|c| c.key.clone()).collect(),
            args,
        })
    }

    /// A batch's reply as each call's [`REPLY_LEN`] integers, in the
    /// calls' order; `None` when it is not that × `calls` long (a server not running our
    /// script: every call of the batch is then a failure,
    /// [`CallOutcome::Malformed`]).
    pub fn replies(reply: &[i64], calls: usize) -> Option<std::slice::ChunksExact<'_, i64>> {
        (calls > 0 && reply.len() == REPLY_LEN * calls).then(|| reply.chunks_exact(REPLY_LEN))
    }
}

/// What became of a [`Call`] (the engine's `finish` steps take it; named
/// so as not to be the gate's [`ratebound::gate::Outcome`], which says how
/// a request was answered).
#[derive(Clone, Copy, Debug)]
pub enum CallOutcome<'a> {
    /// The script's reply. One of another shape than the scripts'
    /// ([`REPLY_LEN`] integers, none negative, the learned word's two
    /// parts within their bounds) is a failure, as [`Malformed`](Self::Malformed).
    Reply(&'a [i64]),
    /// A reply that is not a list of integers (a string, a nested list, a
    /// number that is no integer): a server that is not running our script.
    /// A failure like any other, for the fail policy and the breaker.
    Malformed,
    /// No reply within the deadline. The call may still have run: its
    /// tokens may be spent.
    Timeout,
    /// A connection or server error (its text, for logs, notices and
    /// errors).
    Failed(&'a str),
    /// The client's own overload made the call miss its deadline: it never
    /// left this client (its own connection pool, queue or batch was full),
    /// or the client itself made it late (it was written after the client
    /// had spent its deadline, or its reply was read late by a busy event
    /// loop or thread). This is back-pressure, not an outage: the engine
    /// refuses as
    /// [`Source::Busy`](crate::Source::Busy) and neither the fail policy
    /// nor the circuit breaker hears of it. A driver whose queue was held
    /// up by a server that answered nothing for a whole deadline (a send
    /// in flight that never landed) reports [`Timeout`](Self::Timeout)
    /// instead: that is the server's trouble.
    Unsent,
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
    /// let reply = Some(CallOutcome::Reply(&[1, 0, 0, 0, 1, 0, 7, 0, 0]));
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

/// How many integers a script replies per call: allowed, remaining,
/// retry_after_us, reset_after_us, taken, damaged, now_us, then the learned
/// word's two parts (its bits 44 and up, its bits 0–43; 0 and 0 for the
/// fresh word, and always from a window's script; [`HINTED`] and 0 for the
/// word a hinted call named, [`Call::hint`]) — see `lua/gcra.lua`. A
/// batch replies this many per call, in order.
pub const REPLY_LEN: usize = 9;

/// A reply's word part (`reply[7]`, beyond the 18 bits of a word's) that
/// says "the word the call hinted" ([`Call::hint`]), with 0 after it.
pub const HINTED: i64 = 1 << 18;

/// Whether `r` is a reply of the scripts to an unhinted call: [`REPLY_LEN`]
/// integers, none negative, the learned word's parts within their bits (18
/// and 44).
pub(crate) fn well_formed(r: &[i64]) -> bool {
    r.len() == REPLY_LEN && r.iter().all(|v| *v >= 0) && r[7] < 1 << 18 && r[8] < 1 << 44
}

/// `commands`, `evalsha` and `eval` for a call whose `command(name,
/// script)` makes `name script $args` (`$args` as the docs spell them).
#[cfg(any(feature = "tokio", feature = "blocking"))]
macro_rules! script_commands {
    ($args:literal) => {
        #[doc = concat!(
            "The call as Redis commands: `EVALSHA sha ", $args, "`, and the `EVAL text ", $args,
            "` to send once if that was refused with `NOSCRIPT` (a restart, a failover, \
             `SCRIPT FLUSH`, another cluster node: `EVAL` loads the script)."
        )]
        pub fn commands(&self) -> (redis::Cmd, redis::Cmd) {
            (self.evalsha(), self.eval())
        }

        #[doc = concat!(
            "The first of [`commands`](Self::commands) alone: `EVALSHA sha ", $args,
            "` (the `EVAL` carries the script's text, kilobytes: make it only on `NOSCRIPT`)."
        )]
        pub fn evalsha(&self) -> redis::Cmd {
            self.command("EVALSHA", self.script.sha())
        }

        #[doc = concat!(
            "The second of [`commands`](Self::commands) alone: `EVAL text ", $args, "`."
        )]
        pub fn eval(&self) -> redis::Cmd {
            self.command("EVAL", self.script.text)
        }
    };
}

#[cfg(any(feature = "tokio", feature = "blocking"))]
impl Call {
    script_commands!("1 key args…");

    fn command(&self, name: &str, script: &str) -> redis::Cmd {
        let mut c = redis::cmd(name);
        c.arg(script).arg(1).arg(&self.key).arg(&self.args);
        c
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

#[cfg(any(feature = "tokio", feature = "blocking"))]
impl BatchCall {
    script_commands!("N keys… args…");

    fn command(&self, name: &str, script: &str) -> redis::Cmd {
        let mut c = redis::cmd(name);
        c.arg(script).arg(self.keys.len());
        for k in &self.keys {
            c.arg(k);
        }
        c.arg(&self.args);
        c
    }
}
