//! The only module that names atomics: a shim that swaps std's primitives for
//! loom's under `--cfg ratebound_loom`, so every CAS path can be model-checked.
//!
//! A namespaced cfg (not the bare `loom`) keeps tokio and other dependencies
//! on their normal code paths while ratebound's own atomics are modelled.

#[cfg(ratebound_loom)]
pub(crate) use loom::sync::{
    Arc, Mutex, RwLock,
    atomic::{AtomicU64, AtomicUsize, Ordering},
};

#[cfg(not(ratebound_loom))]
pub(crate) use std::sync::{
    Arc, Mutex, RwLock,
    atomic::{AtomicU64, AtomicUsize, Ordering},
};
