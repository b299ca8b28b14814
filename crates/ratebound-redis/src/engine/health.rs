//! What a global limit has been doing, for people: a count of its answers
//! by the path that gave them ([`Stats`]) and one line per episode worth a
//! warning ([`Notice`]) — the breaker opening (every answer until it closes
//! is the fail policy's), the breaker closing, and the client's own
//! overload. A fail-policy answer is never silent: it is counted here, and
//! the episode it belongs to is logged once by every driver (Rust: the
//! `log` crate; Python: `logging`; Node: `process.emitWarning`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::decision::Source;

/// How many answers a global limiter gave, by the path that gave them
/// (see [`Engine::stats`](crate::Engine::stats)). Counted since the
/// limiter was made; each count only grows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Redis decided.
    pub redis: u64,
    /// Leased tokens answered.
    pub lease: u64,
    /// Redis decided on a key that held a value no script wrote.
    pub damaged: u64,
    /// Redis could not decide; the fail policy `open` admitted.
    pub fail_open: u64,
    /// Redis could not decide; the fail policy `closed` refused.
    pub fail_closed: u64,
    /// Redis could not decide; the local share decided.
    pub fail_local: u64,
    /// The call never left this client before its deadline (a full pool,
    /// a long queue): refused as busy, not the fail policy's.
    pub busy: u64,
    /// Whether the circuit breaker is open now.
    pub breaker_open: bool,
}

impl Stats {
    /// Every fail-policy answer: `fail_open + fail_closed + fail_local`.
    pub fn fail_policy(&self) -> u64 {
        self.fail_open + self.fail_closed + self.fail_local
    }
}

/// One episode in a global limit's health, worth one warning line
/// ([`message`](Self::message)); drivers take them with
/// [`Engine::take_notices`](crate::Engine::take_notices).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Notice {
    /// The circuit breaker opened: until Redis answers again, the fail
    /// policy answers.
    BreakerOpened {
        /// The last failure (`"connection refused"`, `"timed out after
        /// 50ms"`).
        cause: String,
        /// The fail policy that answers now: `"open"`, `"closed"` or
        /// `"local"`.
        policy: &'static str,
        /// How long the breaker stays open before one probe.
        cooldown: Duration,
    },
    /// The breaker closed: Redis answered a probe.
    BreakerClosed {
        /// How many answers the fail policy gave during the episode.
        answered: u64,
        /// The fail policy that gave them.
        policy: &'static str,
    },
    /// Calls could not leave this client before their deadline (its own
    /// pool or queue was full): refused as busy. At most one such notice
    /// per breaker cool-down.
    Busy {
        /// Every call's deadline.
        timeout: Duration,
    },
}

impl Notice {
    /// The one warning line, the same in every language.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use ratebound_redis::Notice;
    /// let n = Notice::Busy { timeout: Duration::from_millis(50) };
    /// assert!(n.message().starts_with("ratebound: the redis client is overloaded"));
    /// ```
    pub fn message(&self) -> String {
        match self {
            Notice::BreakerOpened {
                cause,
                policy,
                cooldown,
            } => format!(
                "ratebound: redis unavailable ({cause}): the circuit breaker opened; \
                 the fail policy '{policy}' answers until redis answers a probe (one every {cooldown:?})"
            ),
            Notice::BreakerClosed { answered, policy } => format!(
                "ratebound: redis answers again: the circuit breaker closed after {answered} \
                 answers by the fail policy '{policy}'"
            ),
            Notice::Busy { timeout } => format!(
                "ratebound: the redis client is overloaded: calls waited past their {timeout:?} \
                 deadline in the client's own pool or queue while redis answered others, and \
                 were refused as busy; this is not the fail policy — give the client more \
                 connections or send fewer calls at once"
            ),
        }
    }
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

/// The counters and the pending notices of one engine.
#[derive(Debug, Default)]
pub(crate) struct Health {
    counts: [AtomicU64; 7],
    /// Fail-policy answers when the current episode began.
    episode_start: AtomicU64,
    pending: AtomicBool,
    notices: Mutex<Vec<Notice>>,
    /// The last failure's words, for notices and errors.
    cause: Mutex<String>,
    /// Clock time before which no other busy notice is given.
    quiet_until: AtomicU64,
    /// Clock time of the last reply from Redis, plus 1 ns (0: none yet).
    last_reply: AtomicU64,
}

const REDIS: usize = 0;
const LEASE: usize = 1;
const DAMAGED: usize = 2;
const FAIL_OPEN: usize = 3;
const FAIL_CLOSED: usize = 4;
const FAIL_LOCAL: usize = 5;
const BUSY: usize = 6;

impl Health {
    pub(crate) fn count(&self, source: Source) {
        let i = match source {
            Source::Redis => REDIS,
            Source::Lease => LEASE,
            Source::Damaged => DAMAGED,
            Source::FailOpen => FAIL_OPEN,
            Source::FailClosed => FAIL_CLOSED,
            Source::Local => FAIL_LOCAL,
            Source::Busy => BUSY,
        };
        // Ordering: Relaxed — independent counters for people to read; no
        // other memory is published through them.
        self.counts[i].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn stats(&self, breaker_open: bool) -> Stats {
        // Ordering: Relaxed — see `count`; a snapshot may be a few answers
        // behind a concurrent caller.
        let c = |i: usize| self.counts[i].load(Ordering::Relaxed);
        Stats {
            redis: c(REDIS),
            lease: c(LEASE),
            damaged: c(DAMAGED),
            fail_open: c(FAIL_OPEN),
            fail_closed: c(FAIL_CLOSED),
            fail_local: c(FAIL_LOCAL),
            busy: c(BUSY),
            breaker_open,
        }
    }

    fn fail_answers(&self) -> u64 {
        let s = self.stats(false);
        s.fail_policy()
    }

    pub(crate) fn set_cause(&self, cause: String) {
        *self.cause.lock().unwrap_or_else(|e| e.into_inner()) = cause;
    }

    pub(crate) fn cause(&self) -> String {
        let c = self.cause.lock().unwrap_or_else(|e| e.into_inner());
        if c.is_empty() {
            "no answer".to_string()
        } else {
            c.clone()
        }
    }

    fn push(&self, notice: Notice) {
        self.notices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(notice);
        // Ordering: Release pairs with `has_notices`' Acquire, so a driver
        // that sees the flag finds the notice under the lock anyway (the
        // lock orders it too; the flag is only a cheap hint).
        self.pending.store(true, Ordering::Release);
    }

    pub(crate) fn opened(&self, policy: &'static str, cooldown: Duration) {
        // Ordering: Relaxed — a mark for the closing notice's count only.
        self.episode_start
            .store(self.fail_answers(), Ordering::Relaxed);
        self.push(Notice::BreakerOpened {
            cause: self.cause(),
            policy,
            cooldown,
        });
    }

    pub(crate) fn closed(&self, policy: &'static str) {
        // Ordering: Relaxed — see `opened`.
        let start = self.episode_start.load(Ordering::Relaxed);
        self.push(Notice::BreakerClosed {
            answered: self.fail_answers().saturating_sub(start),
            policy,
        });
    }

    pub(crate) fn busy(&self, now: u64, quiet: u64, timeout: Duration) {
        // Ordering: Relaxed — at most one notice per quiet span is advice;
        // the CAS makes exactly one caller of a span give it.
        let until = self.quiet_until.load(Ordering::Relaxed);
        if now < until {
            return;
        }
        if self
            .quiet_until
            .compare_exchange(
                until,
                now.saturating_add(quiet).max(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            self.push(Notice::Busy { timeout });
        }
    }

    pub(crate) fn replied(&self, now: u64) {
        // Ordering: Relaxed — a hint about the server's liveness, read
        // only by `replied_within`; written at most once per millisecond
        // so that a busy engine's replies do not all write one line.
        // Kept as `now + 1`, so that 0 means "never".
        let last = self.last_reply.load(Ordering::Relaxed);
        let stamp = now.saturating_add(1);
        if last == 0 || stamp > last.saturating_add(1_000_000) {
            self.last_reply.store(stamp, Ordering::Relaxed);
        }
    }

    /// Whether Redis replied to some call within `span` before `now`
    /// (give or take the millisecond `replied` rounds to).
    pub(crate) fn replied_within(&self, now: u64, span: u64) -> bool {
        // Ordering: Relaxed — see `replied`.
        let last = self.last_reply.load(Ordering::Relaxed);
        last != 0 && now.saturating_add(1).saturating_sub(last) < span
    }

    pub(crate) fn has_notices(&self) -> bool {
        // Ordering: Acquire pairs with `push`' Release.
        self.pending.load(Ordering::Acquire)
    }

    pub(crate) fn take_notices(&self) -> Vec<Notice> {
        let mut n = self.notices.lock().unwrap_or_else(|e| e.into_inner());
        // Ordering: Relaxed — cleared under the lock that `push` takes
        // before it sets the flag, so no notice is left unflagged.
        self.pending.store(false, Ordering::Relaxed);
        std::mem::take(&mut *n)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ratebound::ManualClock;

    use super::Notice;
    use crate::Engine;
    use crate::call::{Begin, CallOutcome};
    use crate::config::OnError;
    use crate::decision::Source;
    use crate::engine::tests::{call, engine};

    const REPLY: [i64; 9] = [1, 19, 0, 100_000, 1, 0, 7, 0, 0];

    /// A wait for `k` of at most `timeout` whose first step, a call, has
    /// been handed out.
    fn calling(e: &Engine, timeout: Duration) -> crate::Acquisition {
        let mut a = e.acquire(None, b"k", 1, Some(timeout)).unwrap();
        let crate::Step::Call(_) = e.acquire_step(&mut a).unwrap() else {
            panic!("a call first")
        };
        a
    }

    /// A test engine failing by `policy` whose Redis answered a call on
    /// `k` `ago` ago.
    fn answered(policy: OnError, ago: Duration) -> (Engine, ManualClock) {
        let (e, clock) = engine(policy, 0);
        e.finish(&call(&e, "k", 1), CallOutcome::Reply(&REPLY));
        clock.advance(ago);
        (e, clock)
    }

    #[test]
    fn a_call_that_never_left_the_client_is_busy_not_the_fail_policy() {
        // The test engine fails open and opens its breaker after 2 failures.
        // Redis answers this engine's calls...
        let (e, _) = answered(OnError::Open, Duration::from_millis(20));
        // ...while others wait in the client's own queue past the deadline.
        for _ in 0..5 {
            let d = e.finish(&call(&e, "k", 1), CallOutcome::Unsent);
            assert_eq!(d.source(), Source::Busy);
            assert!(!d.is_allowed(), "an unsent call is never admitted");
            assert_eq!(d.retry_after(), e.timeout());
        }
        assert!(!e.breaker_open(), "the client's overload is not Redis'");
        let s = e.stats();
        assert_eq!((s.busy, s.fail_open, s.redis), (5, 0, 1));
        // One notice for the episode, not five.
        let notices = e.take_notices();
        assert_eq!(
            notices,
            [Notice::Busy {
                timeout: e.timeout()
            }]
        );
        assert!(!e.has_notices());
    }

    #[test]
    fn a_timeout_while_redis_answers_others_is_the_clients_overload() {
        // Redis answered 49 ms ago: a call that timed out now waited in
        // the client's own queue.
        let (e, clock) = answered(OnError::Open, Duration::from_millis(49));
        for _ in 0..3 {
            let d = e.finish(&call(&e, "k", 1), CallOutcome::Timeout);
            assert_eq!((d.source(), d.is_allowed()), (Source::Busy, false));
        }
        assert!(!e.breaker_open());
        // Silent for a whole deadline: the server's trouble.
        clock.advance(Duration::from_millis(1));
        let d = e.finish(&call(&e, "k", 1), CallOutcome::Timeout);
        assert_eq!((d.source(), d.is_allowed()), (Source::FailOpen, true));
        let s = e.stats();
        assert_eq!((s.redis, s.busy, s.fail_open), (1, 3, 1));
        // A refused connection is never the client's overload.
        let d = e.finish(&call(&e, "k", 1), CallOutcome::Failed("connection refused"));
        assert_eq!(d.source(), Source::FailOpen);
    }

    #[test]
    fn every_answer_is_counted_by_its_source() {
        for (policy, field) in [
            (OnError::Open, "fail_open"),
            (OnError::Closed, "fail_closed"),
            (OnError::Local(5.0), "fail_local"),
        ] {
            // A deadline (50 ms) with no reply from Redis: a timeout is
            // the server's.
            let (e, _) = answered(policy, Duration::from_millis(50));
            e.finish(&call(&e, "k", 1), CallOutcome::Timeout);
            e.finish(&call(&e, "k", 1), CallOutcome::Failed("connection refused"));
            // Open now: answered by the fail policy without a call.
            assert!(matches!(e.begin(b"k", 1).unwrap(), Begin::Done(_)));
            let s = e.stats();
            let got = match field {
                "fail_open" => (s.fail_open, s.fail_closed + s.fail_local),
                "fail_closed" => (s.fail_closed, s.fail_open + s.fail_local),
                _ => (s.fail_local, s.fail_open + s.fail_closed),
            };
            assert_eq!(got, (3, 0), "{field}: {s:?}");
            assert_eq!((s.redis, s.busy, s.fail_policy()), (1, 0, 3), "{field}");
            assert!(s.breaker_open, "{field}");
        }
    }

    #[test]
    fn one_notice_when_the_breaker_opens_and_one_when_it_closes() {
        let (e, clock) = engine(OnError::Open, 0);
        e.finish(&call(&e, "k", 1), CallOutcome::Failed("connection refused"));
        assert!(!e.has_notices(), "one failure is not an episode");
        e.finish(&call(&e, "k", 1), CallOutcome::Failed("connection refused"));
        for _ in 0..3 {
            assert!(matches!(e.begin(b"k", 1).unwrap(), Begin::Done(_)));
        }
        // A failed probe re-opens the breaker: the same episode.
        clock.advance(Duration::from_millis(100));
        e.finish(&call(&e, "k", 1), CallOutcome::Timeout);
        assert!(e.has_notices());
        let opened = e.take_notices();
        assert_eq!(opened.len(), 1, "{opened:?}");
        let text = opened[0].message();
        assert!(
            text.contains("redis unavailable (connection refused)")
                && text.contains("the fail policy 'open' answers"),
            "{text}"
        );
        clock.advance(Duration::from_millis(100));
        let probe = call(&e, "k", 1);
        e.finish(&probe, CallOutcome::Reply(&REPLY));
        e.finish(&call(&e, "k", 1), CallOutcome::Reply(&REPLY));
        let closed = e.take_notices();
        // Five fail-policy answers in the episode: the failure that opened
        // it, three while open, the failed probe (the first failure's came
        // before it began).
        assert_eq!(
            closed,
            [Notice::BreakerClosed {
                answered: 5,
                policy: "open"
            }]
        );
        assert!(closed[0].message().contains("closed after 5 answers"));
    }

    #[test]
    fn a_wait_refused_by_the_closed_policy_says_redis_is_unavailable() {
        let (e, _) = engine(OnError::Closed, 0);
        let mut a = calling(&e, Duration::from_secs(30));
        e.acquire_reply(&mut a, CallOutcome::Failed("connection refused"));
        let err = e.acquire_step(&mut a).unwrap_err();
        assert_eq!(err.code(), "store_unavailable");
        let text = err.to_string();
        assert!(
            text.contains("redis unavailable (connection refused)")
                && text.contains("the fail policy 'closed' refused")
                && !text.contains("maximum wait"),
            "{text}"
        );
    }

    #[test]
    fn an_unsent_reservation_asks_again_within_its_deadline() {
        let (e, clock) = engine(OnError::Open, 0);
        let mut a = calling(&e, Duration::from_millis(10));
        // Redis answers others (a reply just now), this one never left.
        e.finish(&call(&e, "other", 1), CallOutcome::Reply(&REPLY));
        e.acquire_reply(&mut a, CallOutcome::Unsent);
        assert!(matches!(
            e.acquire_step(&mut a).unwrap(),
            crate::Step::Sleep(_)
        ));
        clock.advance(Duration::from_millis(1));
        assert!(matches!(
            e.acquire_step(&mut a).unwrap(),
            crate::Step::Call(_)
        ));
        // Past the deadline: an error that names the client, not Redis.
        clock.advance(Duration::from_millis(9));
        e.acquire_reply(&mut a, CallOutcome::Unsent);
        let err = e.acquire_step(&mut a).unwrap_err();
        assert_eq!(err.code(), "store_unavailable");
        assert!(err.to_string().contains("client is overloaded"), "{err}");
        assert_eq!(e.stats().fail_open, 0);
        assert!(!e.breaker_open());
    }
}
