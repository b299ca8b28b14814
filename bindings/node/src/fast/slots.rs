//! The per-thread tables of live limiters, keyed limiters and gates (the
//! slot numbers the hot calls take instead of `this`), and of the
//! concurrency places that passing requests hold.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use ratebound::any::{AnyKeyed, AnyLimiter};
use ratebound::gate;

use super::hooks::HookRefs;
use crate::slab::Slab;

/// A gate of the table: the core's gate and the JavaScript hooks its
/// sequence calls (references of this thread's env: not `Send`).
pub(super) struct GateEntry {
    pub(super) gate: Arc<gate::Gate>,
    pub(super) hooks: HookRefs,
}

thread_local! {
    pub(super) static LIMITERS: RefCell<Slab<Arc<AnyLimiter>>> = const { RefCell::new(Slab::new()) };
    pub(super) static KEYED: RefCell<Slab<Arc<AnyKeyed>>> = const { RefCell::new(Slab::new()) };
    pub(super) static GATES: RefCell<Slab<Rc<GateEntry>>> = const { RefCell::new(Slab::new()) };
    /// The places of passing requests, until their `Place` is released.
    static PLACES: RefCell<Slab<gate::Place>> = const { RefCell::new(Slab::new()) };
}

/// Gives `limiter` a slot in this thread's table.
pub fn register_limiter(limiter: Arc<AnyLimiter>) -> u32 {
    LIMITERS.with(|s| s.borrow_mut().insert(limiter))
}

/// Frees a slot (from a finalizer; harmless if the thread is exiting).
pub fn unregister_limiter(slot: u32) {
    let _ = LIMITERS.try_with(|s| s.borrow_mut().take(slot));
}

/// Gives `keyed` a slot in this thread's table.
pub fn register_keyed(keyed: Arc<AnyKeyed>) -> u32 {
    KEYED.with(|s| s.borrow_mut().insert(keyed))
}

/// Frees a keyed slot.
pub fn unregister_keyed(slot: u32) {
    let _ = KEYED.try_with(|s| s.borrow_mut().take(slot));
}

/// Gives `gate` and its hooks a slot in this thread's table.
pub fn register_gate(gate: Arc<gate::Gate>, hooks: HookRefs) -> u32 {
    let entry = Rc::new(GateEntry { gate, hooks });
    GATES.with(|s| s.borrow_mut().insert(entry))
}

/// Frees a gate's slot and its hooks' references (from the gate's
/// finalizer, in the thread and env that made them).
pub fn unregister_gate(slot: u32) {
    let entry = GATES.try_with(|s| s.borrow_mut().take(slot)).ok().flatten();
    if let Some(entry) = entry {
        // SAFETY: called from the gate's finalizer, on the thread whose env
        // made the references; no call of the gate is running (it would
        // hold the gate's object alive).
        unsafe { entry.hooks.delete() };
    }
}

/// Keeps `place` until [`release_place`]; its slot.
pub(super) fn hold_place(place: gate::Place) -> u32 {
    PLACES.with(|s| s.borrow_mut().insert(place))
}

/// Gives back the place in `slot` (nothing if it was given back already).
pub(super) fn release_place(slot: u32) {
    let place = PLACES
        .try_with(|s| s.borrow_mut().take(slot))
        .ok()
        .flatten();
    drop(place);
}

/// The response's head is written for the place in `slot` (see
/// `Place::responded`); nothing if it was given back already.
pub(super) fn responded_place(slot: u32) {
    let _ = PLACES.try_with(|s| s.borrow_mut().get_mut(slot).map(gate::Place::responded));
}
