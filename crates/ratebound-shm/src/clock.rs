//! The clock every process shares, [`SystemClock`], and durations in its
//! nanoseconds.

use std::time::Duration;

use ratebound::Clock;

/// `CLOCK_MONOTONIC` in nanoseconds: the same clock in every process on the
/// host (it counts from boot, so a file made before a reboot is refused).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> u64 {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        (t.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(t.tv_nsec as u64)
    }
}

/// The longest single sleep of an async wait (it steps again after it).
#[cfg(feature = "tokio")]
pub(crate) const ASYNC_MAX_SLEEP_NANOS: u64 = 3_600_000_000_000;

pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
