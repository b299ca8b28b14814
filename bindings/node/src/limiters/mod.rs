//! The clock, the decision and the five algorithms (plus `AllOf`) as classes.

mod classes;
mod clock;
mod decision;
mod options;
mod reservation;
mod wait;

pub use classes::{
    AllOf, FixedWindow, LeakyBucket, LeakyBucketOptions, LimiterSlot, Member, SlidingLog,
    SlidingWindow, TokenBucket, TokenBucketOptions, WindowOptions,
};
pub use clock::{ManualClock, from_ms};
pub use decision::Decision;
pub use options::{
    Loose, RateOption, clock_of, loose_number, loose_rate, number, rate_of, required, tokens,
};
pub(crate) use reservation::Holder;
pub use reservation::Reservation;
pub use wait::{HOST_MAX_SLEEP, Waiter, core_step, step, step_to_js, wait_steps};
