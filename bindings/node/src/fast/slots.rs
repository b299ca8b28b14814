//! The per-thread tables of live limiters, keyed limiters and gates: the
//! slot numbers the hot calls take instead of `this`.

use std::cell::RefCell;
use std::sync::Arc;

use ratebound::any::{self, AnyKeyed, AnyLimiter};

/// Slots of live limiters; a slot is freed when its class instance is
/// garbage collected.
pub(super) struct Slab<T> {
    items: Vec<Option<Arc<T>>>,
    free: Vec<u32>,
}

impl<T> Slab<T> {
    const fn new() -> Slab<T> {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
        }
    }

    fn insert(&mut self, item: Arc<T>) -> u32 {
        match self.free.pop() {
            Some(slot) => {
                self.items[slot as usize] = Some(item);
                slot
            }
            None => {
                self.items.push(Some(item));
                (self.items.len() - 1) as u32
            }
        }
    }

    fn remove(&mut self, slot: u32) {
        if let Some(item) = self.items.get_mut(slot as usize)
            && item.take().is_some()
        {
            self.free.push(slot);
        }
    }

    #[inline]
    pub(super) fn get(&self, slot: u32) -> Option<&T> {
        self.items.get(slot as usize)?.as_deref()
    }

    #[inline]
    pub(super) fn get_arc(&self, slot: u32) -> Option<Arc<T>> {
        self.items.get(slot as usize)?.clone()
    }
}

thread_local! {
    pub(super) static LIMITERS: RefCell<Slab<AnyLimiter>> = const { RefCell::new(Slab::new()) };
    pub(super) static KEYED: RefCell<Slab<AnyKeyed>> = const { RefCell::new(Slab::new()) };
    pub(super) static GATES: RefCell<Slab<any::Gate>> = const { RefCell::new(Slab::new()) };
}

/// Gives `limiter` a slot in this thread's table.
pub fn register_limiter(limiter: Arc<AnyLimiter>) -> u32 {
    LIMITERS.with(|s| s.borrow_mut().insert(limiter))
}

/// Frees a slot (from a finalizer; harmless if the thread is exiting).
pub fn unregister_limiter(slot: u32) {
    let _ = LIMITERS.try_with(|s| s.borrow_mut().remove(slot));
}

/// Gives `keyed` a slot in this thread's table.
pub fn register_keyed(keyed: Arc<AnyKeyed>) -> u32 {
    KEYED.with(|s| s.borrow_mut().insert(keyed))
}

/// Frees a keyed slot.
pub fn unregister_keyed(slot: u32) {
    let _ = KEYED.try_with(|s| s.borrow_mut().remove(slot));
}

/// Gives `gate` a slot in this thread's table.
pub fn register_gate(gate: Arc<any::Gate>) -> u32 {
    GATES.with(|s| s.borrow_mut().insert(gate))
}

/// Frees a gate's slot.
pub fn unregister_gate(slot: u32) {
    let _ = GATES.try_with(|s| s.borrow_mut().remove(slot));
}
