//! Clocks: nanoseconds since the clock's own epoch.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::sync::{Arc, AtomicU64, Ordering};

/// The latest time a limiter works with: 2^61 − 1 ns after the clock's epoch
/// (about 73 years). Later readings are treated as this time.
pub const MAX_TIME_NANOS: u64 = (1 << 61) - 1;

/// A source of time: nanoseconds since the clock's own epoch.
///
/// Readings should not go backwards. If one does, limiters stay safe: a
/// reading earlier than the stored state never adds tokens and never panics.
pub trait Clock: Send + Sync {
    /// Nanoseconds since this clock's epoch.
    fn now(&self) -> u64;

    /// True if no reading of this clock is ever above [`MAX_TIME_NANOS`]
    /// (a [`ManualClock`] saturates when it is set or advanced), so that a
    /// limiter reading it may skip the test for later times. The default,
    /// `false`, is always safe; answering `true` for a clock that can read
    /// later is a bug (its limiter would decide on a time it cannot hold).
    #[inline]
    fn bounded(&self) -> bool {
        false
    }
}

/// A reference or smart pointer to a clock reads that clock.
macro_rules! clock_through_pointer {
    ($($pointer:ty),*) => {$(
        impl<C: Clock + ?Sized> Clock for $pointer {
            #[inline]
            fn now(&self) -> u64 {
                (**self).now()
            }

            #[inline]
            fn bounded(&self) -> bool {
                (**self).bounded()
            }
        }
    )*};
}

clock_through_pointer!(&C, std::sync::Arc<C>, Box<C>);

/// The default clock: monotonic time since the first reading in the process.
///
/// Reading the clock is most of the cost of a check, so this clock reads the
/// CPU's time-stamp counter (through `quanta`, ~12 ns here) instead of
/// `Instant::now()` (~34 ns here) — but **only where the operating system
/// itself keeps time with the TSC**: on Linux when
/// `/sys/devices/system/clocksource/clocksource0/current_clocksource` is
/// `tsc`. The kernel uses the TSC as its clocksource only after checking that
/// it is invariant and synchronized across CPUs, and demotes it when its
/// watchdog sees it drift; a TSC that differs between cores is what made
/// other TSC-default limiters refuse requests spuriously. Everywhere else
/// (other kernels, clocksources such as `kvm-clock` or `hpet`, other
/// operating systems) it uses `std::time::Instant`. Setting
/// `RATEBOUND_CLOCK=os` forces `Instant`; [`MonotonicClock::source`] tells
/// which one is in use. The choice is made once per process.
///
/// All `MonotonicClock`s in a process share one epoch, so limiters can be
/// compared and moved between threads freely.
#[derive(Clone, Copy)]
pub struct MonotonicClock {
    // The source is resolved once, by `new`, into a static: a reading
    // loads it from a fixed address (an initialization check, a match and
    // a TSC read), not through a pointer loaded from the limiter first — one
    // dependent load less between a check's exchange and the next reading.
    _resolved: (),
}

enum Source {
    Tsc { clock: quanta::Clock, start: u64 },
    Os { start: Instant },
}

#[inline]
fn source() -> &'static Source {
    static SOURCE: OnceLock<Source> = OnceLock::new();
    SOURCE.get_or_init(|| {
        let forced_os = std::env::var("RATEBOUND_CLOCK").is_ok_and(|v| v == "os");
        if !forced_os && kernel_trusts_tsc() {
            let clock = quanta::Clock::new();
            let start = clock.raw();
            Source::Tsc { clock, start }
        } else {
            Source::Os {
                start: Instant::now(),
            }
        }
    })
}

fn kernel_trusts_tsc() -> bool {
    // Under Miri (no files, no TSC instruction) the OS clock.
    !cfg!(miri)
        && cfg!(all(
            target_os = "linux",
            any(target_arch = "x86", target_arch = "x86_64")
        ))
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|s| s.trim() == "tsc")
}

impl MonotonicClock {
    /// The process-wide monotonic clock (the time source is chosen at the
    /// first call in the process).
    pub fn new() -> MonotonicClock {
        source();
        MonotonicClock { _resolved: () }
    }

    /// `"tsc"` or `"os"`: which time source this process uses.
    pub fn source() -> &'static str {
        match source() {
            Source::Tsc { .. } => "tsc",
            Source::Os { .. } => "os",
        }
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> u64 {
        match source() {
            // Saturating: a raw reading below `start` gives 0, never a wrap.
            Source::Tsc { clock, start } => clock.delta_as_nanos(*start, clock.raw()),
            Source::Os { start } => {
                u64::try_from(start.elapsed().as_nanos()).unwrap_or(MAX_TIME_NANOS)
            }
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock::new()
    }
}

impl std::fmt::Debug for MonotonicClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MonotonicClock")
            .field("source", &MonotonicClock::source())
            .finish()
    }
}

/// A clock that only moves when told to: for tests, simulations and replay.
///
/// Clones share one time, so a test can keep a handle and advance the clock
/// that a limiter reads. Starts at 0; thread-safe.
///
/// # Examples
/// ```
/// use ratebound::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let handle = clock.clone();
/// handle.advance(Duration::from_millis(250));
/// assert_eq!(clock.now(), 250_000_000);
/// ```
#[derive(Clone, Debug)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A new clock at time 0.
    pub fn new() -> ManualClock {
        ManualClock {
            nanos: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Moves the clock forward by `by` (saturating at [`MAX_TIME_NANOS`]).
    pub fn advance(&self, by: Duration) {
        self.advance_nanos(u64::try_from(by.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Moves the clock forward by `nanos` (saturating at [`MAX_TIME_NANOS`]).
    pub fn advance_nanos(&self, nanos: u64) {
        // Ordering: Relaxed — the clock value is the only data; limiters read
        // it and then publish through their own state word.
        let _ = self
            .nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_add(nanos).min(MAX_TIME_NANOS))
            });
    }

    /// Sets the time since the epoch (it may move backwards: limiters
    /// tolerate that). Saturates at [`MAX_TIME_NANOS`].
    pub fn set(&self, since_epoch: Duration) {
        self.set_nanos(u64::try_from(since_epoch.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Sets the time in nanoseconds since the epoch.
    pub fn set_nanos(&self, nanos: u64) {
        // Ordering: Relaxed, as in `advance_nanos`.
        self.nanos
            .store(nanos.min(MAX_TIME_NANOS), Ordering::Relaxed);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> u64 {
        // Ordering: Relaxed, as in `advance_nanos`.
        self.nanos.load(Ordering::Relaxed)
    }

    /// True: `set_nanos` and `advance_nanos` saturate at
    /// [`MAX_TIME_NANOS`], the only writes there are.
    #[inline]
    fn bounded(&self) -> bool {
        true
    }
}

/// How long a waiter on a [`ManualClock`] sleeps at most before looking
/// at the clock again: the clock moves only by hand, so sleeping the
/// clock's remaining time would not notice it being moved.
pub const MANUAL_POLL_NANOS: u64 = 1_000_000;

/// The monotonic clock or a manual one, chosen at run time.
#[derive(Clone, Debug)]
pub enum AnyClock {
    /// The process's monotonic clock.
    Monotonic(MonotonicClock),
    /// A clock moved only by hand, for tests.
    Manual(ManualClock),
    /// Any other clock.
    Shared(std::sync::Arc<dyn Clock>),
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
    /// The longest a [`Waiter`](crate::any::Waiter) on this clock sleeps before
    /// looking at it again: a manual clock moves only by hand.
    pub fn max_sleep(&self) -> u64 {
        match self {
            AnyClock::Manual(_) => MANUAL_POLL_NANOS,
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

#[cfg(all(test, not(ratebound_loom)))]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_moves_forward() {
        let clock = MonotonicClock::new();
        let a = clock.now();
        std::thread::sleep(Duration::from_millis(2));
        let b = clock.now();
        assert!(b >= a + 1_000_000, "{a} then {b}");
        assert!(["tsc", "os"].contains(&MonotonicClock::source()));
    }

    #[test]
    fn manual_clock_saturates_and_goes_back() {
        let clock = ManualClock::new();
        clock.advance(Duration::MAX);
        assert_eq!(clock.now(), MAX_TIME_NANOS);
        clock.set(Duration::from_nanos(5));
        assert_eq!(clock.now(), 5);
    }
}
