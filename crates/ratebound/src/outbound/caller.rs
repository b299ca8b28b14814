//! [`Caller`]: what an adapter holds for all its calls (the policy, each
//! sending's tokens and timeout, its key, the pauses kept in this process,
//! the learning rule), and where each [`Call`] begins.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{
    Call, Learned, Learning, LocalPauses, Outbound, Sending, Target, default_key, idempotent,
};
use crate::any::{seconds, whole};
use crate::{Error, Quota};

/// What an adapter holds for all its calls: the policy, each sending's
/// tokens and timeout, its key (if fixed), the pauses kept in this process
/// and whether its hook threw.
#[derive(Debug)]
pub struct Caller {
    pub(super) outbound: Outbound,
    pub(super) sending: Sending,
    pub(super) key: Option<String>,
    pub(super) pauses: LocalPauses,
    pub(super) hook_threw: AtomicBool,
    pub(super) learning: Option<Learning>,
    ceiling: Option<LiveCeiling>,
    /// Whether the limiter's waits hold a slot priced when taken (see
    /// [`Caller::taking_when_due`]).
    pub(super) reserves: bool,
}

/// Where an adapter reads its limiter's quota as it is now (a
/// `TokenBucket` whose `set_quota` may change it): see
/// [`Caller::with_live_ceiling`].
pub type CeilingSource = Arc<dyn Fn() -> Quota + Send + Sync>;

#[derive(Clone)]
struct LiveCeiling(CeilingSource);

impl std::fmt::Debug for LiveCeiling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LiveCeiling({:?})", (self.0)())
    }
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
            learning: None,
            ceiling: None,
            reserves: true,
        })
    }

    /// Learns the partner's real limit from its answers with `learning`
    /// (`None`: does not): each answer to a sending that went under a
    /// learned word ([`Call::saw`]) proposes the next word — a cut on a
    /// status to retry on (a refusal: 429, 503), a step up on a success
    /// (2xx) after a quiet probe period — as a [`Step::Adapt`](super::Step::Adapt). Its
    /// ceiling is the limiter's configured quota.
    #[must_use]
    pub fn with_learning(mut self, learning: Option<Learning>) -> Caller {
        self.learning = learning;
        self
    }

    /// Learning as an adapter's `adaptive` option asks, for a limiter that
    /// `learns` (keeps a learned word: `KeyedLimit::learns`) with the
    /// configured quota `ceiling`: `None` (the option not given) learns
    /// wherever the limiter can — on by default, a partner's refusal
    /// always means the number was too high; `Some(false)` never;
    /// `Some(true)` insists. The same rule for every adapter.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for `Some(true)` on a limiter that cannot
    /// keep what is learned: asked for, learning is never silently off.
    pub fn with_adaptive(
        self,
        adaptive: Option<bool>,
        learns: bool,
        ceiling: crate::Quota,
    ) -> Result<Caller, Error> {
        match (adaptive, learns) {
            (Some(true), false) => Err(Error::Unsupported {
                operation: "adaptive (learning a partner's limit needs a limiter that keeps it: a token bucket in this process, in shared memory or in Redis)",
                algorithm: "this limiter",
            }),
            (Some(false), _) | (None, false) => Ok(self.with_learning(None)),
            _ => Ok(self.with_learning(Some(Learning::new(ceiling)))),
        }
    }

    /// The ceiling read from `source` whenever it matters — an answer's
    /// announced quota is turned into a share of it, and an `adapted`
    /// event's words into rates — rather than the quota given to
    /// [`with_adaptive`](Self::with_adaptive) when the adapter was built:
    /// for a limiter whose quota can change (`TokenBucket::set_quota`),
    /// whose buckets then run at the learned share of the new ceiling. A
    /// share computed against the old one would spend more (or less) than
    /// the partner announced.
    #[must_use]
    pub fn with_live_ceiling(mut self, source: CeilingSource) -> Caller {
        self.ceiling = Some(LiveCeiling(source));
        self
    }

    /// For a limiter whose waits take their tokens only when they are due
    /// (an in-process keyed limiter: a waiter decides again after each
    /// sleep, and holds no slot meanwhile), so that what a sending took is
    /// always priced at the rate in force when it took it: a cut while it
    /// waited is already in its price, and [`Call::reserving`] asks for
    /// nothing more (asking again would take the tokens twice).
    #[must_use]
    pub fn taking_when_due(mut self) -> Caller {
        self.reserves = false;
        self
    }

    /// The learning rule, if this adapter learns, under the ceiling given
    /// when it was built (see [`learning_now`](Self::learning_now)).
    pub fn learning(&self) -> Option<&Learning> {
        self.learning.as_ref()
    }

    /// The learning rule under the limiter's ceiling as it is now
    /// ([`with_live_ceiling`](Self::with_live_ceiling)), if this adapter
    /// learns.
    pub fn learning_now(&self) -> Option<Learning> {
        let l = self.learning?;
        Some(match &self.ceiling {
            Some(LiveCeiling(source)) => l.with_ceiling(source()),
            None => l,
        })
    }

    /// `learned` as a rate (tokens per second) of this adapter's ceiling
    /// as it is now; `None` when it does not learn.
    pub fn rate(&self, learned: Learned) -> Option<f64> {
        self.learning_now().map(|l| l.rate(learned))
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
        Ok(Call::new(key, sending, idempotent(method), resendable))
    }

    /// Says that the adapter's hook threw (panicked): true the first time
    /// only — the adapter warns once, then swallows the later throws. A
    /// hook's failure never fails the call.
    pub fn hook_threw(&self) -> bool {
        !self.hook_threw.swap(true, Ordering::Relaxed)
    }
}
