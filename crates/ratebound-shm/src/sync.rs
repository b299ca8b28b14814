//! The atomics of the table, as in the core crate's shim: std's, or loom's
//! under `--cfg ratebound_loom` (the core's `WordRule` then takes loom's
//! too, so the two always agree).

#[cfg(ratebound_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

#[cfg(not(ratebound_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
