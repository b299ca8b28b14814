//! The only module that names atomics: a shim that swaps std's primitives for
//! loom's under `--cfg ratebound_loom`, so every CAS path can be model-checked.
//!
//! A namespaced cfg (not the bare `loom`) keeps tokio and other dependencies
//! on their normal code paths while ratebound's own atomics are modelled.
//!
//! Beside it: `state`, the one compare-exchange loop every limiter's word
//! goes through, and `word`, the body shared by the limiters whose whole
//! state is one word (windows, leaky bucket).

pub(crate) mod state;
pub(crate) mod word;

#[cfg(ratebound_loom)]
pub(crate) use loom::sync::{
    Arc, Mutex, RwLock,
    atomic::{AtomicU64, AtomicUsize, Ordering, fence},
};

#[cfg(not(ratebound_loom))]
pub(crate) use std::sync::{
    Arc, Mutex, RwLock,
    atomic::{AtomicU64, AtomicUsize, Ordering, fence},
};

/// A process-wide id for each limiter, so that a [`Permit`](crate::Permit)
/// knows who issued it. Plain std atomics even under loom: only uniqueness
/// matters, no decision depends on how ids interleave.
pub(crate) fn next_issuer() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    // Ordering: Relaxed — a fetch_add is unique whatever the ordering.
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Lets another thread run (a pause waiting for another's move).
#[cfg(ratebound_loom)]
pub(crate) use loom::thread::yield_now;
#[cfg(not(ratebound_loom))]
pub(crate) use std::thread::yield_now;
