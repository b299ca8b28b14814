//! Limiters chosen at run time, from loosely typed options: the one surface
//! the Python and Node bindings wrap, so that they only convert types and
//! errors and every language makes the same decisions.
//!
//! - [`AnyClock`]: the monotonic clock or a [`ManualClock`](crate::ManualClock), picked at run
//!   time.
//! - [`seconds`] and [`whole`]: numbers as a dynamic language passes them
//!   (a float), checked and named in the error.
//! - [`AnyLimiter`]: one of the five algorithms (or an [`AllOf`](crate::AllOf)) behind one
//!   type, with [`acquire_step`](AnyLimiter::acquire_step) — the one step of
//!   a wait, and [`Waiter`], the state machine that any event loop drives
//!   (deadline, next sleep, give-back when abandoned).
//! - [`AnyKeyed`]: a [`KeyedLimiter`](crate::KeyedLimiter) over [`Key`]s (text, bytes or
//!   integers) stored as 128-bit keyed fingerprints, so a key costs the same
//!   few bytes whatever its length, and none of it lives on a script
//!   engine's heap.
//! - [`KeyedLimit`]: a limit checked, waited on and paused per key,
//!   wherever it lives, behind one trait object.
//!
//! The HTTP middleware's whole decision, built on these, is the layer above:
//! [`gate`](crate::gate).
//!
//! # Examples
//! ```
//! use ratebound::any::{AnyClock, AnyLimiter, Acquire, Rate};
//! use ratebound::{Limiter, ManualClock};
//!
//! let clock = ManualClock::new();
//! let tb = AnyLimiter::token_bucket(Rate::Text("2/s"), Some(3.0), AnyClock::Manual(clock.clone()))?;
//! assert!(tb.try_acquire());
//! let d = tb.check_n(2)?;
//! assert_eq!(d.remaining(), 0);
//! // A wait of 0.5 s is within the deadline: the tokens are reserved now.
//! let step = tb.acquire_step(1, Some(1_000_000_000), tb.now())?;
//! assert!(matches!(step, Acquire::Reserved { wait_nanos: 500_000_000, .. }));
//! # Ok::<(), ratebound::Error>(())
//! ```

mod keyed;
mod limit;
mod limiter;
pub(crate) mod numbers;
mod waiter;

pub use crate::clock::{AnyClock, MANUAL_POLL_NANOS};
pub use crate::limiter::Acquire;
pub use keyed::{
    AnyKeyed, DEFAULT_ALGORITHM, Fingerprint, Fingerprinter, Key, keyed_algorithm, overflow,
};
pub use limit::{BoxFuture, KeyedLimit, LimitCheck};
pub use limiter::{AnyLimiter, LimiterOptions};
pub use numbers::{
    DEFAULT_IPV6_PREFIX, DEFAULT_N, MAX_PAUSE, Rate, check_pause, count, ipv6_prefix,
    pause_seconds, quota, seconds, whole,
};
pub use waiter::Waiter;
