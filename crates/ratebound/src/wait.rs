//! One step type for every wait, and the loops that run them.
//!
//! A wait for tokens is a state machine that says, at each step, what its
//! caller does next: run a call (a Redis script run, for a global limit),
//! sleep, or stop — the tokens are the caller's. Every wait of the project
//! answers with a [`Step`]: the core's [`Waiter`](crate::any::Waiter)
//! (local limiters, through [`AnyLimiter`](crate::any::AnyLimiter) and
//! [`AnyKeyed`](crate::any::AnyKeyed), and shared-memory tables), and
//! `ratebound-redis`' acquisitions. A wait that never makes a call uses
//! the default call type, [`Infallible`]: no value of it exists, so its
//! `Step::Call` can never be built and a `match` may leave it out.
//!
//! The loops that run them are written once: [`drive_blocking`] on this
//! thread, `drive` and `drive_calls` on tokio's timer (feature `tokio`). They only make the
//! calls, sleep what the steps say and step again; every rule (the
//! deadline, what is held, when the wait is over) is the step's.
//!
//! # Examples
//! ```
//! use ratebound::any::{AnyClock, AnyLimiter, Rate};
//! use ratebound::wait::{Step, drive_blocking};
//! use std::time::Duration;
//!
//! let tb = AnyLimiter::token_bucket(Rate::Text("1000/s"), Some(1.0), AnyClock::default())?;
//! let mut waiter = tb.waiter(1, Some(1.0), u64::MAX)?;
//! assert_eq!(tb.wait_step(&mut waiter)?, Step::Done(())); // the bucket starts full
//! let mut waiter = tb.waiter(1, Some(1.0), u64::MAX)?;
//! // The next token is 1 ms away: the loop sleeps, then steps again.
//! drive_blocking(&mut waiter, |w| tb.wait_step(w), |_, never| match never {})?;
//! assert!(waiter.is_over());
//! # Ok::<(), ratebound::Error>(())
//! ```

use std::convert::Infallible;
use std::time::Duration;

/// What a wait does next.
///
/// `C` is the call a wait hands out (`ratebound-redis`: its `Call`);
/// the default, [`Infallible`], has no values: a wait that makes no calls
/// (the core's [`Waiter`](crate::any::Waiter)) never says `Call`. `D` is
/// what the wait tells when it is over (`ratebound-redis`: the path that
/// answered; the default: nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step<C = Infallible, D = ()> {
    /// Run this call, hand its outcome back to the wait, then step again.
    Call(C),
    /// Sleep this long (never zero for the core's waiter), then step again.
    Sleep(Duration),
    /// The tokens are the caller's.
    Done(D),
}

/// Runs a wait to its end on this thread: `step(state)` says what to do,
/// `call(state, c)` runs a call (and hands its outcome to the wait), and a
/// sleep is `std::thread::sleep`. Returns what the last step said
/// ([`Step::Done`]'s value), or the first error of `step` or `call`.
///
/// `state` is the wait itself (a [`Waiter`](crate::any::Waiter), an
/// acquisition), which both `step` and `call` may change. For a wait
/// without calls, pass `|_, never| match never {}`.
///
/// # Errors
/// `step`'s and `call`'s.
pub fn drive_blocking<S, C, D, E>(
    state: &mut S,
    step: impl FnMut(&mut S) -> Result<Step<C, D>, E>,
    call: impl FnMut(&mut S, C) -> Result<(), E>,
) -> Result<D, E> {
    drive_blocking_with(state, step, call, |d| {
        std::thread::sleep(d);
        Ok(())
    })
}

/// [`drive_blocking`] with the sleep given: `sleep(d)` sleeps `d`, or
/// fails (a host that lets a signal interrupt a sleep: its error ends the
/// loop).
///
/// # Errors
/// `step`'s, `call`'s and `sleep`'s.
pub fn drive_blocking_with<S, C, D, E>(
    state: &mut S,
    mut step: impl FnMut(&mut S) -> Result<Step<C, D>, E>,
    mut call: impl FnMut(&mut S, C) -> Result<(), E>,
    mut sleep: impl FnMut(Duration) -> Result<(), E>,
) -> Result<D, E> {
    loop {
        match step(state)? {
            Step::Done(done) => return Ok(done),
            Step::Sleep(d) => sleep(d)?,
            Step::Call(c) => call(state, c)?,
        }
    }
}

/// [`drive_blocking`] for async code (feature `tokio`), for a wait that
/// makes no calls (the core's [`Waiter`](crate::any::Waiter)): the sleeps
/// are on tokio's timer. The future owns the wait's `state`; dropped
/// before the wait is over (the caller gave up), or ended by an error, it
/// hands the state to `abandon`, which gives back what the wait holds.
/// Once a step says [`Step::Done`], nothing is abandoned: the tokens are
/// the caller's.
///
/// # Errors
/// `step`'s.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), ratebound::Error> {
/// use ratebound::any::{AnyClock, AnyLimiter, Rate};
/// use ratebound::{Limiter, TokioClock};
/// use std::sync::Arc;
///
/// let clock = AnyClock::Shared(Arc::new(TokioClock::new()));
/// let tb = AnyLimiter::token_bucket(Rate::Text("10/s"), Some(1.0), clock)?;
/// assert!(tb.try_acquire()); // the burst
/// let start = tokio::time::Instant::now();
/// let waiter = tb.waiter(1, Some(1.0), u64::MAX)?;
/// ratebound::wait::drive(waiter, |w| tb.wait_step(w), |w| {
///     let _ = tb.abandon(w);
/// })
/// .await?;
/// assert_eq!(start.elapsed(), std::time::Duration::from_millis(100)); // virtual time
/// # Ok(()) }
/// ```
#[cfg(feature = "tokio")]
pub async fn drive<S, D, E>(
    state: S,
    step: impl FnMut(&mut S) -> Result<Step<Infallible, D>, E>,
    abandon: impl FnOnce(&mut S),
) -> Result<D, E> {
    drive_calls(
        state,
        step,
        std::future::ready,
        |_, never| match never {},
        abandon,
    )
    .await
}

/// [`drive`] for a wait that makes calls (`ratebound-redis`' acquisition):
/// a [`Step::Call`] is run by `call`, whose future must not borrow the
/// wait (the wait may be given up while it runs), and what it answers is
/// handed to the wait by `reply` before the next step.
///
/// # Errors
/// `step`'s and `reply`'s.
#[cfg(feature = "tokio")]
pub async fn drive_calls<S, C, R, D, E, F>(
    state: S,
    mut step: impl FnMut(&mut S) -> Result<Step<C, D>, E>,
    mut call: impl FnMut(C) -> F,
    mut reply: impl FnMut(&mut S, R) -> Result<(), E>,
    abandon: impl FnOnce(&mut S),
) -> Result<D, E>
where
    F: Future<Output = R>,
{
    let mut wait = Abandon {
        state,
        abandon: Some(abandon),
    };
    loop {
        match step(&mut wait.state)? {
            Step::Done(done) => {
                wait.abandon = None;
                return Ok(done);
            }
            Step::Sleep(d) => tokio::time::sleep(d).await,
            Step::Call(c) => {
                let answer = call(c).await;
                reply(&mut wait.state, answer)?;
            }
        }
    }
}

/// A wait in progress: dropped while `abandon` is still set, it hands the
/// state to it.
#[cfg(feature = "tokio")]
struct Abandon<S, A: FnOnce(&mut S)> {
    state: S,
    abandon: Option<A>,
}

#[cfg(feature = "tokio")]
impl<S, A: FnOnce(&mut S)> Drop for Abandon<S, A> {
    fn drop(&mut self) {
        if let Some(abandon) = self.abandon.take() {
            abandon(&mut self.state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scripted wait: hands out its steps in order, and records what its
    /// driver did with them.
    struct Script {
        steps: Vec<Step<u32, &'static str>>,
        log: Vec<String>,
    }

    impl Script {
        fn new(mut steps: Vec<Step<u32, &'static str>>) -> Script {
            steps.reverse();
            Script {
                steps,
                log: Vec::new(),
            }
        }

        fn step(&mut self) -> Result<Step<u32, &'static str>, String> {
            self.steps
                .pop()
                .ok_or_else(|| "stepped after done".to_string())
        }
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_blocking_loop_runs_calls_sleeps_and_ends_at_done() {
        let mut s = Script::new(vec![
            Step::Call(7),
            Step::Sleep(5 * MS),
            Step::Call(8),
            Step::Done("redis"),
        ]);
        let mut slept = Vec::new();
        let done = drive_blocking_with(
            &mut s,
            Script::step,
            |s, c| {
                s.log.push(format!("call {c}"));
                Ok(())
            },
            |d| {
                slept.push(d);
                Ok(())
            },
        );
        assert_eq!(done, Ok("redis"));
        assert_eq!(s.log, ["call 7", "call 8"]);
        assert_eq!(slept, [5 * MS]);
    }

    #[test]
    fn the_blocking_loop_stops_at_the_first_error() {
        let mut s = Script::new(vec![Step::Call(1), Step::Done("never")]);
        let done = drive_blocking(&mut s, Script::step, |_, c| Err(format!("call {c} failed")));
        assert_eq!(done, Err("call 1 failed".to_string()));
        assert_eq!(s.steps.len(), 1, "not stepped again");
        // A failed sleep ends it too.
        let mut s = Script::new(vec![Step::Sleep(MS), Step::Done("never")]);
        let done = drive_blocking_with(
            &mut s,
            Script::step,
            |_, _| Ok(()),
            |_| Err("interrupted".to_string()),
        );
        assert_eq!(done, Err("interrupted".to_string()));
    }

    #[cfg(feature = "tokio")]
    mod on_tokio {
        use std::cell::Cell;

        use super::*;

        #[tokio::test(start_paused = true)]
        async fn the_async_loop_sleeps_on_tokio_and_hands_back_each_answer() {
            let s = Script::new(vec![
                Step::Call(7),
                Step::Sleep(100 * MS),
                Step::Call(8),
                Step::Sleep(50 * MS),
                Step::Done("redis"),
            ]);
            let abandoned = Cell::new(0);
            let start = tokio::time::Instant::now();
            let done = drive_calls(
                s,
                |s| {
                    s.log.push(format!("step at {:?}", start.elapsed()));
                    s.step()
                },
                |c| async move {
                    tokio::time::sleep(10 * MS).await;
                    c * 10
                },
                |s, answer| {
                    s.log.push(format!("answer {answer}"));
                    Ok(())
                },
                |s| {
                    assert_eq!(s.steps.len(), 0);
                    abandoned.set(abandoned.get() + 1);
                },
            )
            .await;
            assert_eq!(done, Ok("redis"));
            assert_eq!(start.elapsed(), 170 * MS, "two calls of 10 ms, two sleeps");
            assert_eq!(abandoned.get(), 0, "done: nothing is given back");
        }

        #[tokio::test(start_paused = true)]
        async fn a_dropped_or_failed_wait_is_abandoned_once() {
            let abandoned = Cell::new(Vec::new());
            let note = |s: &mut Script| {
                let mut seen = abandoned.take();
                seen.push(s.steps.len());
                abandoned.set(seen);
            };
            // Dropped while it sleeps: abandoned with its state as it was.
            let s = Script::new(vec![
                Step::Sleep(Duration::from_secs(60)),
                Step::Done("late"),
            ]);
            let wait = drive_calls(s, Script::step, |c| async move { c }, |_, _| Ok(()), note);
            assert!(tokio::time::timeout(MS, wait).await.is_err());
            assert_eq!(abandoned.take(), [1]);
            // An answer the wait refuses ends it: abandoned too.
            let s = Script::new(vec![Step::Call(3), Step::Done("never")]);
            let done = drive_calls(
                s,
                Script::step,
                |c| async move { c },
                |_, c| Err(format!("answer {c} refused")),
                note,
            )
            .await;
            assert_eq!(done, Err("answer 3 refused".to_string()));
            assert_eq!(abandoned.take(), [1]);
            // Without calls: `drive`.
            let s = Script::new(vec![Step::Sleep(MS), Step::Done("ok")]);
            let mut s = Some(s);
            let done = drive(
                (),
                |_| match s.as_mut().map(Script::step) {
                    Some(Ok(Step::Sleep(d))) => Ok(Step::Sleep(d)),
                    Some(Ok(Step::Done(d))) => Ok(Step::Done(d)),
                    _ => Err("unexpected".to_string()),
                },
                |_| panic!("abandoned after done"),
            )
            .await;
            assert_eq!(done, Ok("ok"));
        }
    }
}
