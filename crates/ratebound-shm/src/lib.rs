//! Cross-process rate limits on one host: ratebound's one-word limiter
//! state in a file-backed shared memory map.
//!
//! Every process that opens the same file — gunicorn or uWSGI workers, a
//! Node cluster, several Rust services — updates the same 64-bit words with
//! compare-exchange, which is as atomic across processes as across threads.
//! So the processes share one limit at the speed of an in-process check, and
//! there is no lock anywhere: a process killed at any instant leaves every
//! word a valid state (at worst, an admission it made stays counted).
//!
//! - [`SharedLimiter`]: one limit (token bucket, fixed window or sliding
//!   window counter) for all processes.
//! - [`SharedKeyedLimiter`]: one limit per key, in a table whose size is
//!   fixed when the file is made; a full table reuses only slots whose state
//!   is fresh again, else refuses the new key with
//!   [`ratebound::Error::TooManyKeys`].
//! - [`SystemClock`]: `CLOCK_MONOTONIC`, which is one clock for every
//!   process on a Linux host (the core's default clock reads the TSC with a
//!   per-process calibration, so it is not shared).
//!
//! # The file
//! A header of 16 words — magic, layout version, mode (single or keyed),
//! algorithm and its two parameters, clock, capacity, the secret seed that
//! fingerprints keys, the boot it was made in — then slots of eight words,
//! one cache line each: `(fingerprint, state, pause end, pause shifts,
//! learned, 0, 0, 0)` (layout version 3; a token bucket's pause words let a
//! pause move the reservations already made, see [`ratebound::pause`]; the
//! learned word is what the outbound adapters learned of a partner's limit,
//! see [`SharedLimiter::adapt`]). It is created with mode 0600 under a temporary name and linked
//! into place whole, so no process ever sees a half-written header. Opening
//! checks the owner and mode, the magic, the version, every parameter and
//! the size: a mismatch is an [`Error`], never a silently different limit.
//! A path that is a symbolic link opens its target (whose owner and mode
//! are checked); a dangling one is an [`Error::Io`].
//!
//! Every block of the file is allocated when it is made (`fallocate`), so
//! a table too large for its filesystem — a small `/dev/shm` — is an
//! [`Error::Io`] (`shm_io`: "cannot allocate the table's N bytes: No space
//! left on device") and leaves no temporary file behind, rather than a
//! process killed by `SIGBUS` when it first touches a page the filesystem
//! has no room for. An existing file with unallocated blocks gets them on
//! open.
//!
//! What no check can catch: a process of the same user that truncates the
//! file while others have it mapped makes them die of `SIGBUS` at their
//! next decision on a word past the new end. Only the file's owner can do
//! that (mode 0600); never truncate or rewrite a table in use, and remove
//! one only when no process has it open.
//!
//! # Examples
//! ```
//! use ratebound::{KeyedAlgorithm, Quota};
//! use ratebound_shm::SharedLimiter;
//!
//! let dir = std::env::temp_dir().join(format!("rb-shm-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let path = dir.join("api.limit");
//! let algorithm = KeyedAlgorithm::TokenBucket(Quota::parse("10/s burst 2")?);
//! let a = SharedLimiter::open(&path, algorithm)?;
//! let b = SharedLimiter::open(&path, algorithm)?; // another process, in real life
//! assert!(a.check()?.is_allowed());
//! assert!(b.check()?.is_allowed());
//! assert!(!a.check()?.is_allowed()); // the two share one burst of 2
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod clock;
mod error;
mod file;
#[cfg(all(test, not(ratebound_loom)))]
mod heap_tests;
mod keyed;
#[cfg(feature = "tokio")]
mod limit;
mod map;
#[cfg(all(test, ratebound_loom))]
mod model;
mod single;
mod sync;
mod table;

pub use clock::SystemClock;
pub use error::Error;
pub use keyed::{DEFAULT_SHARED_MAX_KEYS, SharedKeyedLimiter};
pub use single::{SharedLimiter, SharedReservation};

/// The README's examples, compiled as doctests (`no_run`: they open files
/// under /dev/shm).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
