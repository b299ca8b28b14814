//! A table of items by number, numbers reused once freed: the slots of
//! live limiters, keyed limiters, gates and places (`fast`) and the Redis
//! path's engines, calls and waits (`redis`).

use std::rc::Rc;

pub(crate) struct Slab<T> {
    items: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Slab<T> {
    pub(crate) const fn new() -> Slab<T> {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
        }
    }

    pub(crate) fn insert(&mut self, item: T) -> u32 {
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

    #[inline]
    pub(crate) fn get(&self, slot: u32) -> Option<&T> {
        self.items.get(slot as usize)?.as_ref()
    }

    pub(crate) fn get_mut(&mut self, slot: u32) -> Option<&mut T> {
        self.items.get_mut(slot as usize)?.as_mut()
    }

    pub(crate) fn take(&mut self, slot: u32) -> Option<T> {
        let item = self.items.get_mut(slot as usize)?.take()?;
        self.free.push(slot);
        Some(item)
    }

    /// Puts `item` back at `slot`, freed by `take` (a kept call).
    pub(crate) fn restore(&mut self, slot: u32, item: T) {
        if let Some(i) = self.free.iter().rposition(|&s| s == slot) {
            self.free.swap_remove(i);
            self.items[slot as usize] = Some(item);
        }
    }
}

impl<T> Slab<Rc<T>> {
    /// The item at `slot`, held by a reference of its own (not by a borrow
    /// of the table).
    #[inline]
    pub(crate) fn get_rc(&self, slot: u32) -> Option<Rc<T>> {
        self.items.get(slot as usize)?.clone()
    }
}

/// What a class holds that the raw entry points reach by number: the shared
/// value (`Deref`) and its `handle` in this thread's table, freed by `free`
/// when the class is collected.
pub(crate) struct Registered<T> {
    value: std::sync::Arc<T>,
    pub(crate) handle: u32,
    free: fn(u32),
}

impl<T> Registered<T> {
    /// `value`, given its slot by `register`; `free` gives the slot back.
    pub(crate) fn new(
        value: std::sync::Arc<T>,
        register: impl FnOnce(std::sync::Arc<T>) -> u32,
        free: fn(u32),
    ) -> Registered<T> {
        Registered {
            handle: register(value.clone()),
            value,
            free,
        }
    }
}

impl<T> std::ops::Deref for Registered<T> {
    type Target = std::sync::Arc<T>;

    fn deref(&self) -> &std::sync::Arc<T> {
        &self.value
    }
}

impl<T> Drop for Registered<T> {
    fn drop(&mut self) {
        (self.free)(self.handle);
    }
}
