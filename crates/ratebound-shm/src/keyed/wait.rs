//! Waiting for a key of a shared table: the steps a binding's event loop
//! drives, and the blocking and async loops over them.

use std::time::Duration;

use ratebound::Clock;
use ratebound::any::{Acquire, Key, Waiter};
use ratebound::wait::{Step, drive_blocking};

use super::SharedKeyedLimiter;
// For the docs' links to the single limiter's methods.
#[cfg(doc)]
use crate::SharedLimiter;
#[cfg(feature = "tokio")]
use crate::clock::ASYNC_MAX_SLEEP_NANOS;
use crate::error::Error;

impl SharedKeyedLimiter {
    /// Advances `waiter` for `key` now (see [`SharedLimiter::wait_step`]):
    /// a token bucket reserves in the key's slot (a reserved state is not
    /// fresh, so the slot stays the key's), a window sleeps its exact
    /// `retry_after` and decides again.
    ///
    /// # Errors
    /// As [`SharedLimiter::wait_step`]; `TooManyKeys` when the key has no
    /// slot.
    pub fn wait_step(&self, waiter: &mut Waiter, key: Key<'_>) -> Result<Step, Error> {
        let fp = self.fingerprint_of(key);
        let now = self.clock.now();
        let t = &self.table;
        // As `check_n_at`: if the slot went to another key meanwhile, what
        // was taken there is given back and the step made again.
        for _ in 0..8 {
            let found = self.locate(fp, now)?;
            // Read before the step reserves (see `Waiter::step_at`).
            let shifted = t.pause(found.slot).shifted();
            let mut moved = false;
            let step = waiter.step_at(now, found.slot as u64, shifted, |n, deadline| {
                let rule = t.rule_at(found.slot);
                let (step, mark) = rule.acquire_step(t.state(found.slot), n, deadline, now, fp)?;
                if self.still_home(fp, found) {
                    return Ok(step);
                }
                if let Some(mark) = mark {
                    rule.release(t.state(found.slot), mark, n);
                }
                moved = true;
                // Nothing held: the waiter is as it was.
                Ok(Acquire::Retry { wait_nanos: 1 })
            })?;
            if !moved {
                return Ok(step);
            }
        }
        Err(Error::Limit(ratebound::Error::TooManyKeys {
            max_keys: t.slots,
        }))
    }

    /// Ends `key`'s `waiter` early: the tokens it holds go back to the
    /// key's slot if no later taker has built on them (nothing if the
    /// key no longer has a slot).
    ///
    /// # Errors
    /// [`Error::Limit`] with `ForeignPermit` for a waiter of another key.
    pub fn abandon(&self, waiter: &mut Waiter, key: Key<'_>) -> Result<(), Error> {
        let Some(permit) = waiter.abandon() else {
            return Ok(());
        };
        let fp = self.fingerprint_of(key);
        let t = &self.table;
        let Some(slot) = self.find(fp) else {
            return Ok(());
        };
        Ok(t.rule_at(slot).release_permit_paused(
            t.state(slot),
            t.pause(slot),
            permit,
            fp,
            self.clock.now(),
        )?)
    }

    /// Waits on this thread until `n` are the caller's for `key`, or fails
    /// at once, taking nothing, if that would take longer than `timeout`
    /// (see [`SharedLimiter::acquire_n`]).
    ///
    /// # Errors
    /// As [`wait_step`](Self::wait_step).
    pub fn acquire_n(&self, key: Key<'_>, n: u64, timeout: Option<Duration>) -> Result<(), Error> {
        let mut waiter = Waiter::start(n, timeout, self.clock.now(), u64::MAX);
        drive_blocking(
            &mut waiter,
            |w| self.wait_step(w, key),
            |_, never| match never {},
        )
    }

    /// [`acquire_n`](Self::acquire_n) without blocking the thread (feature
    /// `tokio`). Dropped before it is over, the future gives back the
    /// tokens it holds.
    ///
    /// # Errors
    /// As [`acquire_n`](Self::acquire_n).
    #[cfg(feature = "tokio")]
    pub async fn acquire(
        &self,
        key: Key<'_>,
        n: u64,
        timeout: Option<Duration>,
    ) -> Result<(), Error> {
        let waiter = Waiter::start(n, timeout, self.clock.now(), ASYNC_MAX_SLEEP_NANOS);
        ratebound::wait::drive(
            waiter,
            |w| self.wait_step(w, key),
            |w| {
                let _ = self.abandon(w, key);
            },
        )
        .await
    }
}
