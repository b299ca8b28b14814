//! [`AnyLimiter`]: one of the five algorithms (or an [`AllOf`]) behind one
//! type, and [`Acquire`], the one step of a wait that any event loop can
//! drive.

use std::sync::Arc;
use std::time::Duration;

use super::AnyClock;
use super::Waiter;
use super::numbers::{Rate, quota, seconds, window_args};
use crate::limiter::Acquire;
use crate::wait::Step;
use crate::{
    AllOf, Decision, Error, FixedWindow, LeakyBucket, Limiter, Permit, Quota, SlidingLog,
    SlidingWindow, TokenBucket,
};

/// One of the algorithms, chosen at run time. Every call is a `match` and a
/// direct call: no dynamic dispatch on the hot path.
pub enum AnyLimiter {
    /// See [`TokenBucket`].
    TokenBucket(TokenBucket<AnyClock>),
    /// See [`FixedWindow`].
    FixedWindow(FixedWindow<AnyClock>),
    /// See [`SlidingWindow`].
    SlidingWindow(SlidingWindow<AnyClock>),
    /// See [`SlidingLog`].
    SlidingLog(SlidingLog<AnyClock>),
    /// See [`LeakyBucket`].
    LeakyBucket(LeakyBucket<AnyClock>),
    /// See [`AllOf`]; with the longest a [`Waiter`] on it sleeps (the
    /// shortest of its members': see [`AnyClock::max_sleep`]).
    AllOf(AllOf, u64),
}

macro_rules! each {
    ($self:expr, $l:ident => $e:expr) => {
        match $self {
            AnyLimiter::TokenBucket($l) => $e,
            AnyLimiter::FixedWindow($l) => $e,
            AnyLimiter::SlidingWindow($l) => $e,
            AnyLimiter::SlidingLog($l) => $e,
            AnyLimiter::LeakyBucket($l) => $e,
            AnyLimiter::AllOf($l, _) => $e,
        }
    };
}

/// The options of a limiter chosen by name ([`AnyLimiter::from_options`]),
/// as a dynamic language passes them; each algorithm reads its own.
#[derive(Default)]
pub struct LimiterOptions<'a> {
    /// Tokens per second, or a quota string (token and leaky bucket).
    pub rate: Option<Rate<'a>>,
    /// The most tokens held (token bucket; default: the rate's own).
    pub burst: Option<f64>,
    /// Requests per window (the windows and the log).
    pub limit: Option<f64>,
    /// The window in seconds (the windows and the log).
    pub window: Option<f64>,
    /// The longest wait in the queue, in seconds (leaky bucket).
    pub max_delay: Option<f64>,
    /// The members (all of).
    pub members: Vec<Arc<AnyLimiter>>,
}

impl AnyLimiter {
    /// The limiter `algorithm` names — `"token_bucket"` (the default,
    /// [`DEFAULT_ALGORITHM`](super::DEFAULT_ALGORITHM), for `None`),
    /// `"fixed_window"`, `"sliding_window"`, `"sliding_log"`,
    /// `"leaky_bucket"` or `"all_of"` — from the options it reads: the one
    /// dispatch by name for every binding.
    ///
    /// # Errors
    /// [`Error::Parse`] for an unknown name; [`Error::Missing`] for an
    /// option the algorithm needs (`rate`, `limit`, `window`, `max_delay`);
    /// [`Error::NoLimiters`] for `all_of` without members; the
    /// constructors' own errors.
    ///
    /// # Examples
    /// ```
    /// use ratebound::any::{AnyClock, AnyLimiter, LimiterOptions, Rate};
    /// use ratebound::Limiter;
    ///
    /// let options = LimiterOptions { limit: Some(5.0), window: Some(1.0), ..Default::default() };
    /// let w = AnyLimiter::from_options("fixed_window", options, AnyClock::default())?;
    /// assert_eq!((w.algorithm(), w.limit()), ("fixed_window", 5));
    /// let options = LimiterOptions { rate: Some(Rate::Text("2/s burst 3")), ..Default::default() };
    /// assert_eq!(AnyLimiter::from_options(None, options, AnyClock::default())?.algorithm(), "token_bucket");
    /// assert!(AnyLimiter::from_options("gcra", LimiterOptions::default(), AnyClock::default()).is_err());
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    pub fn from_options<'n>(
        algorithm: impl Into<Option<&'n str>>,
        options: LimiterOptions<'_>,
        clock: AnyClock,
    ) -> Result<AnyLimiter, Error> {
        let missing = |name| Error::Missing { name };
        let algorithm = algorithm.into().unwrap_or(super::DEFAULT_ALGORITHM);
        let rate = || options.rate.ok_or(missing("rate"));
        let window = || -> Result<(f64, f64), Error> {
            Ok((
                options.limit.ok_or(missing("limit"))?,
                options.window.ok_or(missing("window"))?,
            ))
        };
        match algorithm {
            "token_bucket" => AnyLimiter::token_bucket(rate()?, options.burst, clock),
            "leaky_bucket" => {
                let rate = rate()?;
                let max_delay = options.max_delay.ok_or(missing("max_delay"))?;
                AnyLimiter::leaky_bucket(rate, max_delay, clock)
            }
            "fixed_window" => window().and_then(|(l, w)| AnyLimiter::fixed_window(l, w, clock)),
            "sliding_window" => window().and_then(|(l, w)| AnyLimiter::sliding_window(l, w, clock)),
            "sliding_log" => window().and_then(|(l, w)| AnyLimiter::sliding_log(l, w, clock)),
            "all_of" => AnyLimiter::all_of(options.members),
            other => Err(Error::Parse {
                input: other.to_string(),
                reason: "an algorithm is token_bucket, fixed_window, sliding_window, sliding_log, leaky_bucket or all_of",
            }),
        }
    }

    /// A token bucket: `rate` per second (or a quota string), `burst`
    /// replacing the rate's own burst when given.
    ///
    /// # Errors
    /// As [`quota`].
    pub fn token_bucket(
        rate: Rate<'_>,
        burst: Option<f64>,
        clock: AnyClock,
    ) -> Result<AnyLimiter, Error> {
        Ok(AnyLimiter::TokenBucket(TokenBucket::with_clock(
            quota(rate, burst)?,
            clock,
        )))
    }

    /// A fixed window of `limit` per `window` seconds.
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] for a limit or window that is not a number
    /// of the right kind; [`FixedWindow::new`]'s errors.
    pub fn fixed_window(limit: f64, window: f64, clock: AnyClock) -> Result<AnyLimiter, Error> {
        let (limit, window) = window_args(limit, window)?;
        FixedWindow::with_clock(limit, window, clock).map(AnyLimiter::FixedWindow)
    }

    /// A sliding window counter of `limit` per `window` seconds.
    ///
    /// # Errors
    /// As [`fixed_window`](Self::fixed_window), with [`SlidingWindow::new`].
    pub fn sliding_window(limit: f64, window: f64, clock: AnyClock) -> Result<AnyLimiter, Error> {
        let (limit, window) = window_args(limit, window)?;
        SlidingWindow::with_clock(limit, window, clock).map(AnyLimiter::SlidingWindow)
    }

    /// A sliding log of `limit` per `window` seconds.
    ///
    /// # Errors
    /// As [`fixed_window`](Self::fixed_window), with [`SlidingLog::new`].
    pub fn sliding_log(limit: f64, window: f64, clock: AnyClock) -> Result<AnyLimiter, Error> {
        let (limit, window) = window_args(limit, window)?;
        SlidingLog::with_clock(limit, window, clock).map(AnyLimiter::SlidingLog)
    }

    /// A leaky bucket (a queue): one departure per `1/rate` s, admitting a
    /// request only if it leaves within `max_delay` seconds.
    ///
    /// # Errors
    /// As [`quota`] and [`seconds`]; [`LeakyBucket::new`]'s errors.
    pub fn leaky_bucket(
        rate: Rate<'_>,
        max_delay: f64,
        clock: AnyClock,
    ) -> Result<AnyLimiter, Error> {
        let q = quota(rate, None)?;
        LeakyBucket::with_clock(q, seconds("max_delay", max_delay)?, clock)
            .map(AnyLimiter::LeakyBucket)
    }

    /// All of `members` at once (see [`AllOf`]).
    ///
    /// # Errors
    /// [`Error::NoLimiters`] for an empty list.
    pub fn all_of(members: Vec<Arc<AnyLimiter>>) -> Result<AnyLimiter, Error> {
        let max_sleep = members
            .iter()
            .map(|m| m.max_sleep())
            .min()
            .unwrap_or(u64::MAX);
        let members = members.into_iter().map(|m| m as Arc<dyn Limiter>).collect();
        AllOf::new(members).map(|all| AnyLimiter::AllOf(all, max_sleep))
    }

    /// The longest a [`Waiter`] on this limiter sleeps before looking at its
    /// clock again (see [`AnyClock::max_sleep`]).
    pub fn max_sleep(&self) -> u64 {
        match self {
            AnyLimiter::TokenBucket(l) => l.clock().max_sleep(),
            AnyLimiter::FixedWindow(l) => l.clock().max_sleep(),
            AnyLimiter::SlidingWindow(l) => l.clock().max_sleep(),
            AnyLimiter::SlidingLog(l) => l.clock().max_sleep(),
            AnyLimiter::LeakyBucket(l) => l.clock().max_sleep(),
            AnyLimiter::AllOf(_, max_sleep) => *max_sleep,
        }
    }

    /// A wait for `n` tokens starting now, failing at once if it cannot end
    /// within `timeout` seconds; `host_max_sleep` is the longest sleep the
    /// caller's timer can hold, in nanoseconds (Node: 2^31 − 1 ms).
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] for a bad `timeout`.
    pub fn waiter(
        &self,
        n: u64,
        timeout: Option<f64>,
        host_max_sleep: u64,
    ) -> Result<Waiter, Error> {
        Waiter::new(n, timeout, self.now(), host_max_sleep.min(self.max_sleep()))
    }

    /// Advances `waiter` at the clock's time: [`Step::Done`] or how long to
    /// sleep before the next step.
    ///
    /// # Errors
    /// As [`acquire_step`](Self::acquire_step), on the first step (or a
    /// window's retries): the deadline cannot be met, or `n` never can.
    pub fn wait_step(&self, waiter: &mut Waiter) -> Result<Step, Error> {
        // Read before the step reserves (see `Waiter::step_paused`).
        let shifted = match self {
            AnyLimiter::TokenBucket(b) => b.pause_shifted(),
            _ => 0,
        };
        let now = self.now();
        waiter.step_paused(now, shifted, |n, deadline| {
            self.acquire_step(n, deadline, now)
        })
    }

    /// Ends `waiter` early (cancelled, aborted, interrupted): the tokens it
    /// held are given back if no later taker has built on them (a wait
    /// cancelled in the middle of a queue gives nothing back).
    ///
    /// # Errors
    /// [`Error::ForeignPermit`] if `waiter` was made by another limiter.
    pub fn abandon(&self, waiter: &mut Waiter) -> Result<(), Error> {
        match waiter.abandon() {
            Some(permit) => self.try_release(permit),
            None => Ok(()),
        }
    }

    /// The algorithm's name: `"token_bucket"`, `"fixed_window"`,
    /// `"sliding_window"`, `"sliding_log"`, `"leaky_bucket"` or `"all_of"`.
    pub fn algorithm(&self) -> &'static str {
        match self {
            AnyLimiter::TokenBucket(_) => "token_bucket",
            AnyLimiter::FixedWindow(_) => "fixed_window",
            AnyLimiter::SlidingWindow(_) => "sliding_window",
            AnyLimiter::SlidingLog(_) => "sliding_log",
            AnyLimiter::LeakyBucket(_) => "leaky_bucket",
            AnyLimiter::AllOf(..) => "all_of",
        }
    }

    /// One token now or not: the decision without building a [`Decision`].
    #[inline]
    pub fn try_acquire(&self) -> bool {
        each!(self, l => l.check_at(l.now()).is_allowed())
    }

    /// Takes `n` tokens at `now` even if they are not there yet, as long as
    /// they will be within `max_wait` (`None`: any wait): the wait and the
    /// permit that [`release`](Limiter::release) gives back.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for the algorithms that cannot reserve (the
    /// windows and the log); otherwise as [`TokenBucket::reserve_n_at`].
    pub fn reserve_n_at(
        &self,
        n: u64,
        max_wait: Option<Duration>,
        now: u64,
    ) -> Result<(u64, Permit), Error> {
        let max_wait = max_wait.unwrap_or(Duration::MAX);
        let r = match self {
            AnyLimiter::TokenBucket(b) => b.reserve_n_at(n, max_wait, now)?,
            AnyLimiter::LeakyBucket(b) => b.reserve_n_at(n, max_wait, now)?,
            other => {
                return Err(Error::Unsupported {
                    operation: "reservations",
                    algorithm: other.algorithm(),
                });
            }
        };
        // The tokens stay taken: the caller holds the permit now.
        Ok((r.wait, r.permit))
    }

    /// One step of waiting for `n` tokens at `now`, to be admitted no later
    /// than the clock time `deadline` (`None`: no deadline). A bucket
    /// reserves, so the caller sleeps once and goes; the windows and the log
    /// cannot, so the caller sleeps until they would admit and steps again.
    ///
    /// # Errors
    /// [`Error::DeadlineExceeded`] at once, taking nothing, when the wait
    /// would end after the deadline; [`Error::InsufficientCapacity`] /
    /// [`Error::InvalidLimit`]-style errors for an `n` that can never pass.
    pub fn acquire_step(&self, n: u64, deadline: Option<u64>, now: u64) -> Result<Acquire, Error> {
        let max_wait = deadline.map(|d| Duration::from_nanos(d.saturating_sub(now)));
        match self {
            AnyLimiter::TokenBucket(_) | AnyLimiter::LeakyBucket(_) => {
                let (wait_nanos, permit) = self.reserve_n_at(n, max_wait, now)?;
                Ok(if wait_nanos == 0 {
                    Acquire::Admitted
                } else {
                    Acquire::Reserved { wait_nanos, permit }
                })
            }
            _ => {
                let d = self.check_n_at(n, now)?;
                if d.is_allowed() {
                    return Ok(Acquire::Admitted);
                }
                let wait = d.retry_after_nanos().max(1);
                match max_wait {
                    Some(max) if u128::from(wait) > max.as_nanos() => {
                        Err(Error::DeadlineExceeded {
                            wait: Duration::from_nanos(wait),
                            max_wait: max,
                        })
                    }
                    _ => Ok(Acquire::Retry { wait_nanos: wait }),
                }
            }
        }
    }

    /// Empties a token bucket until `now + d`, refilling at its rate from
    /// then on (see [`TokenBucket::pause_at`]).
    ///
    /// # Errors
    /// [`Error::Unsupported`] for the other algorithms.
    pub fn pause_at(&self, d: Duration, now: u64) -> Result<(), Error> {
        self.bucket_for("pause")?.pause_at(d, now);
        Ok(())
    }

    /// [`pause_at`](Self::pause_at) now, for `seconds` as a dynamic
    /// language passes them.
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] for `seconds` that are not a finite number
    /// from 0 to a day ([`MAX_PAUSE`](super::MAX_PAUSE)); as
    /// [`pause_at`](Self::pause_at).
    pub fn pause(&self, seconds: f64) -> Result<(), Error> {
        let d = super::numbers::pause_seconds(seconds)?;
        self.pause_at(d, self.now())
    }

    /// Lifts a token bucket's pause at `now` if nothing was built on it
    /// (see [`TokenBucket::resume_at`]).
    ///
    /// # Errors
    /// [`Error::Unsupported`] for the other algorithms.
    pub fn resume_at(&self, now: u64) -> Result<crate::Resumed, Error> {
        Ok(self.bucket_for("resume")?.resume_at(now))
    }

    /// [`resume_at`](Self::resume_at) now.
    ///
    /// # Errors
    /// As [`resume_at`](Self::resume_at).
    pub fn resume(&self) -> Result<crate::Resumed, Error> {
        self.resume_at(self.now())
    }

    /// Replaces a token bucket's quota (see [`TokenBucket::set_quota_at`]).
    ///
    /// # Errors
    /// [`Error::Unsupported`] for the other algorithms.
    pub fn set_quota_at(&self, quota: Quota, now: u64) -> Result<(), Error> {
        self.bucket_for("changing the quota")?
            .set_quota_at(quota, now);
        Ok(())
    }

    /// The token bucket, or [`Error::Unsupported`] naming `operation` for
    /// the other algorithms.
    fn bucket_for(&self, operation: &'static str) -> Result<&TokenBucket<AnyClock>, Error> {
        match self {
            AnyLimiter::TokenBucket(b) => Ok(b),
            other => Err(Error::Unsupported {
                operation,
                algorithm: other.algorithm(),
            }),
        }
    }
}

impl Limiter for AnyLimiter {
    #[inline]
    fn now(&self) -> u64 {
        each!(self, l => l.now())
    }
    fn limit(&self) -> u64 {
        each!(self, l => l.limit())
    }
    #[inline]
    fn check_at(&self, now: u64) -> Decision {
        each!(self, l => l.check_at(now))
    }
    #[inline]
    fn check_n_at(&self, n: u64, now: u64) -> Result<Decision, Error> {
        each!(self, l => l.check_n_at(n, now))
    }
    fn peek_n_at(&self, n: u64, now: u64) -> Result<Decision, Error> {
        each!(self, l => l.peek_n_at(n, now))
    }
    fn acquire_n_at(&self, n: u64, now: u64) -> Result<(Decision, Option<Permit>), Error> {
        each!(self, l => l.acquire_n_at(n, now))
    }
    fn try_release(&self, permit: Permit) -> Result<(), Error> {
        each!(self, l => l.try_release(permit))
    }
    fn available_at(&self, now: u64) -> u64 {
        each!(self, l => l.available_at(now))
    }
}
