//! Waiting: `drive` runs a core [`Waiter`] to its end on this thread,
//! `drive_async` on tokio's timer (feature `tokio`), its `Pending` wait
//! giving back what it holds if dropped.

use std::time::Duration;

use ratebound::any::{Wait, Waiter};

use crate::error::Error;

/// Runs `waiter` to its end on this thread, sleeping what it says: `Ok`
/// once the tokens are the caller's.
pub(crate) fn drive(
    waiter: &mut Waiter,
    mut step: impl FnMut(&mut Waiter) -> Result<Wait, Error>,
) -> Result<(), Error> {
    loop {
        match step(waiter)? {
            Wait::Done => return Ok(()),
            Wait::Sleep(ns) => std::thread::sleep(Duration::from_nanos(ns)),
        }
    }
}

/// A wait in progress on tokio's timer: dropped before it is over (the
/// caller's future was dropped), it gives back what its waiter holds.
#[cfg(feature = "tokio")]
pub(crate) struct Pending<A: FnMut(&mut Waiter)> {
    pub(crate) waiter: Waiter,
    pub(crate) abandon: A,
    pub(crate) over: bool,
}

#[cfg(feature = "tokio")]
impl<A: FnMut(&mut Waiter)> Drop for Pending<A> {
    fn drop(&mut self) {
        if !self.over {
            (self.abandon)(&mut self.waiter);
        }
    }
}

/// The longest single sleep of an async wait (it steps again after it).
#[cfg(feature = "tokio")]
pub(crate) const ASYNC_MAX_SLEEP_NANOS: u64 = 3_600_000_000_000;

/// [`drive`] on tokio's timer, giving back what is held if dropped.
#[cfg(feature = "tokio")]
pub(crate) async fn drive_async<A: FnMut(&mut Waiter)>(
    mut pending: Pending<A>,
    mut step: impl FnMut(&mut Waiter) -> Result<Wait, Error>,
) -> Result<(), Error> {
    loop {
        match step(&mut pending.waiter) {
            Ok(Wait::Sleep(ns)) => tokio::time::sleep(Duration::from_nanos(ns)).await,
            done => {
                pending.over = true;
                return done.map(|_| ());
            }
        }
    }
}
