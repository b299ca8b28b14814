//! [`AnyClock`]: the monotonic clock, a manual one, or any other, chosen at
//! run time (a binding's option, a test's `ManualClock`).

use std::sync::Arc;

use crate::{Clock, ManualClock, MonotonicClock};

/// The monotonic clock or a manual one, chosen at run time.
#[derive(Clone, Debug)]
pub enum AnyClock {
    /// The process's monotonic clock.
    Monotonic(MonotonicClock),
    /// A clock moved only by hand, for tests.
    Manual(ManualClock),
    /// Any other clock.
    Shared(Arc<dyn Clock>),
}

impl std::fmt::Debug for dyn Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}

impl Default for AnyClock {
    fn default() -> Self {
        AnyClock::Monotonic(MonotonicClock::new())
    }
}

impl AnyClock {
    /// The longest a [`Waiter`](super::Waiter) on this clock sleeps before
    /// looking at it again: a manual clock moves only by hand.
    pub fn max_sleep(&self) -> u64 {
        match self {
            AnyClock::Manual(_) => super::MANUAL_POLL_NANOS,
            AnyClock::Monotonic(_) | AnyClock::Shared(_) => u64::MAX,
        }
    }
}

impl Clock for AnyClock {
    #[inline]
    fn now(&self) -> u64 {
        match self {
            AnyClock::Monotonic(c) => c.now(),
            AnyClock::Manual(c) => c.now(),
            AnyClock::Shared(c) => c.now(),
        }
    }
}
