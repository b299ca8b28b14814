//! [`Waiter`]: one caller's wait for tokens, as a state machine that any
//! event loop drives — the deadline, how long to sleep next (never more than
//! the host's timer can hold), when the wait is over, and what to give back
//! when the caller gives up. Python's asyncio and blocking waits and Node's
//! Promises each only sleep what it says and ask again.

use std::time::Duration;

use super::numbers::seconds;
use crate::limiter::Acquire;
use crate::wait::Step;
use crate::{Error, Permit};

/// One caller's wait for `n` tokens, made by
/// [`AnyLimiter::waiter`](super::AnyLimiter::waiter) or
/// [`AnyKeyed::waiter`](super::AnyKeyed::waiter) and advanced by their
/// `wait_step`.
///
/// A bucket reserves on the first step, and the waiter then holds the
/// tokens until the limiter's clock reaches the time they are due — it says
/// [`Step::Done`] only then, however early a host timer fires or however
/// long the wait (a wait of 30 days is slept in pieces the host's timer can
/// hold). The windows cannot reserve: the waiter sleeps until they would
/// admit and asks again. The deadline (`timeout` after the waiter was made)
/// is kept here: a wait that cannot end before it fails at once, taking
/// nothing. A caller that gives up calls `abandon`, which gives held tokens
/// back.
///
/// Its steps are [`Step`]s without calls: sleep (at least 1 ns, at most
/// the `max_sleep` it was made with) or done.
///
/// # Examples
/// ```
/// use ratebound::any::{AnyClock, AnyLimiter, Rate};
/// use ratebound::wait::Step;
/// use ratebound::{Limiter, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let tb = AnyLimiter::token_bucket(Rate::Text("1/s"), None, AnyClock::Manual(clock.clone()))?;
/// assert!(tb.try_acquire());
/// let mut waiter = tb.waiter(1, None, u64::MAX)?;
/// // Reserved; the clock is manual, so the waiter looks again every 1 ms.
/// assert_eq!(tb.wait_step(&mut waiter)?, Step::Sleep(Duration::from_millis(1)));
/// clock.advance_nanos(999_999_999);
/// assert_eq!(tb.wait_step(&mut waiter)?, Step::Sleep(Duration::from_nanos(1)));
/// clock.advance_nanos(1);
/// assert_eq!(tb.wait_step(&mut waiter)?, Step::Done(()));
/// # Ok::<(), ratebound::Error>(())
/// ```
#[derive(Debug)]
pub struct Waiter {
    n: u64,
    deadline: Option<u64>,
    /// Tokens taken ahead of time: the clock time they are due, and the
    /// permit to give back if the caller gives up first.
    held: Option<(u64, Permit)>,
    /// The pause words' sum of shifts when the tokens were taken (see
    /// [`step_paused`](Self::step_paused)).
    shifted: u64,
    /// Where the tokens were taken (see [`step_at`](Self::step_at)).
    place: u64,
    max_sleep: u64,
    done: bool,
}

impl Waiter {
    /// A wait for `n` starting at `now`, failing if it cannot end within
    /// `timeout` seconds, sleeping at most `max_sleep` nanoseconds at a time.
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] for a `timeout` that is not a finite number
    /// of seconds ≥ 0.
    pub fn new(n: u64, timeout: Option<f64>, now: u64, max_sleep: u64) -> Result<Waiter, Error> {
        let timeout = match timeout {
            None => None,
            Some(t) => Some(seconds("timeout", t)?),
        };
        Ok(Waiter::start(n, timeout, now, max_sleep))
    }

    /// [`new`](Self::new) with the timeout as a [`Duration`] (`None`: no
    /// deadline).
    pub fn start(n: u64, timeout: Option<Duration>, now: u64, max_sleep: u64) -> Waiter {
        Waiter {
            n,
            deadline: timeout.map(|t| now.saturating_add(nanos(t))),
            held: None,
            shifted: 0,
            place: 0,
            max_sleep: max_sleep.max(1),
            done: false,
        }
    }

    /// One step at `now`; `take(n, deadline)` is the limiter's
    /// `acquire_step` at `now` (for a limiter outside this crate, such as
    /// a shared-memory table, its own). A limiter without pause words (or
    /// whose pauses do not move reservations) steps so.
    ///
    /// # Errors
    /// `take`'s.
    pub fn step(
        &mut self,
        now: u64,
        take: impl FnOnce(u64, Option<u64>) -> Result<Acquire, Error>,
    ) -> Result<Step, Error> {
        self.step_paused(now, 0, take)
    }

    /// [`step`](Self::step) for a token bucket whose pauses move the
    /// reservations already made (see [`pause`](crate::pause)): `shifted`
    /// is its pause words' sum of shifts, read (with
    /// [`Words::shifted`](crate::pause::Words::shifted)) *before* this
    /// step, so before `take` reserves. Held tokens whose bucket was paused
    /// since are due that much later, and the waiter sleeps on: it says
    /// [`Step::Done`] only at the moved time.
    ///
    /// # Errors
    /// `take`'s.
    pub fn step_paused(
        &mut self,
        now: u64,
        shifted: u64,
        take: impl FnOnce(u64, Option<u64>) -> Result<Acquire, Error>,
    ) -> Result<Step, Error> {
        self.step_at(now, 0, shifted, take)
    }

    /// [`step_paused`](Self::step_paused) for a limiter of many states
    /// (a shared-memory table's slots), each with its own pause words:
    /// `place` names the state `take` uses and `shifted` is read from.
    /// Held tokens move only by what the words of the place they were
    /// taken at say (a key found elsewhere later lost that state long
    /// after its tokens were due).
    ///
    /// # Errors
    /// `take`'s.
    pub fn step_at(
        &mut self,
        now: u64,
        place: u64,
        shifted: u64,
        take: impl FnOnce(u64, Option<u64>) -> Result<Acquire, Error>,
    ) -> Result<Step, Error> {
        if self.done {
            return Ok(Step::Done(()));
        }
        if let Some((due, permit)) = &mut self.held {
            let moved = if place == self.place {
                shifted.saturating_sub(self.shifted)
            } else {
                0
            };
            if moved > 0 {
                // The slot moved with the state: so does the permit's mark,
                // for a give-back to find it.
                self.shifted = shifted;
                *due = due.saturating_add(moved);
                permit.mark = permit.mark.saturating_add(moved);
            }
            let due = *due;
            if now >= due {
                // The permit is used: nothing is given back any more.
                self.held = None;
                self.done = true;
                return Ok(Step::Done(()));
            }
            return Ok(self.sleep(due - now));
        }
        Ok(match take(self.n, self.deadline)? {
            Acquire::Admitted => {
                self.done = true;
                Step::Done(())
            }
            Acquire::Reserved { wait_nanos, permit } => {
                self.held = Some((now.saturating_add(wait_nanos), permit));
                self.shifted = shifted;
                self.place = place;
                self.sleep(wait_nanos)
            }
            Acquire::Retry { wait_nanos } => self.sleep(wait_nanos),
        })
    }

    /// A sleep of `nanos`, at least 1 ns and at most `max_sleep`.
    fn sleep(&self, nanos: u64) -> Step {
        Step::Sleep(Duration::from_nanos(nanos.clamp(1, self.max_sleep)))
    }

    /// Ends the wait; the tokens to give back, if any were held.
    pub fn abandon(&mut self) -> Option<Permit> {
        self.done = true;
        self.held.take().map(|(_, permit)| permit)
    }

    /// True once the wait is over (done or abandoned).
    pub fn is_over(&self) -> bool {
        self.done
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
