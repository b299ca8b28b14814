//! Helpers shared by test targets.

pub mod gate;
