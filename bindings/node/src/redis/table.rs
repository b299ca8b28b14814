//! The tables of the Redis hot path, one each a thread: the engines (by
//! `handle`) with the argument lists (templates) and join classes their
//! calls were seen with, the calls in flight and the waits under way (by
//! number).

use std::cell::RefCell;
use std::sync::Arc;

use ratebound_redis::script::Script;
use ratebound_redis::{Acquisition, BatchCall, Call, Engine, Source};

use crate::slab::Slab;

/// The most templates (distinct argument lists) and join classes one
/// engine keeps; calls past them go without (slower, never wrong).
const MAX_TEMPLATES: usize = 32;
const MAX_CLASSES: usize = 64;

/// Every source, in the order of the `sources` names.
pub const SOURCES: [Source; 7] = [
    Source::Redis,
    Source::Lease,
    Source::FailOpen,
    Source::FailClosed,
    Source::Local,
    Source::Damaged,
    Source::Busy,
];

pub fn source_code(s: Source) -> f64 {
    SOURCES.iter().position(|x| *x == s).unwrap_or(0) as f64
}

/// An engine as the hot path sees it: the engine, and the argument lists
/// and join classes its calls were seen with.
pub struct Entry {
    pub engine: Arc<Engine>,
    templates: Vec<Call>,
    classes: Vec<Call>,
    /// Whether `begin` computes the key's hash slot (a cluster client).
    pub slots: bool,
    /// When its driver's calls go out (`turns`), once opened.
    pub turns: Option<ratebound_redis::plan::Turns>,
}

impl Entry {
    /// The template of `call` (a call with the same script and arguments
    /// seen before), or a new one; -1 when the table is full.
    pub fn template(&mut self, call: &Call) -> f64 {
        if let Some(i) = self
            .templates
            .iter()
            .position(|t| t.script == call.script && t.args == call.args)
        {
            return i as f64;
        }
        if self.templates.len() >= MAX_TEMPLATES {
            return -1.0;
        }
        self.templates.push(call.clone());
        (self.templates.len() - 1) as f64
    }

    /// The join class of `call`: calls of one class join in one batch
    /// ([`BatchCall::joins`]); -1 when the table is full.
    pub fn class(&mut self, call: &Call) -> f64 {
        if let Some(i) = self.classes.iter().position(|c| BatchCall::joins(c, call)) {
            return i as f64;
        }
        if self.classes.len() >= MAX_CLASSES {
            return -1.0;
        }
        self.classes.push(call.clone());
        (self.classes.len() - 1) as f64
    }
}

/// A call in flight: the call, and the wait it is for (an `acquire`'s).
pub struct Flight {
    /// The call.
    pub call: Call,
    /// The number of the acquisition waiting for it, if one is.
    pub acquisition: Option<u32>,
}

thread_local! {
    /// The engines, by their `handle`.
    pub static ENGINES: RefCell<Slab<Entry>> = const { RefCell::new(Slab::new()) };
    /// The calls begun and not yet finished, by number.
    pub static CALLS: RefCell<Slab<Flight>> = const { RefCell::new(Slab::new()) };
    /// The waits (`acquire`) under way, by number.
    pub static ACQUISITIONS: RefCell<Slab<Acquisition>> = const { RefCell::new(Slab::new()) };
}

/// Gives `engine` a number in this thread's table (its `handle`).
pub fn register(engine: Arc<Engine>) -> u32 {
    ENGINES.with(|s| {
        s.borrow_mut().insert(Entry {
            engine,
            templates: Vec::new(),
            classes: Vec::new(),
            slots: false,
            turns: None,
        })
    })
}

/// Frees an engine's number (from its finalizer).
pub fn unregister(handle: u32) {
    let _ = ENGINES.try_with(|s| s.borrow_mut().take(handle));
}

/// Takes the begun call `id` out of the table.
pub fn take_call(id: u32) -> Option<Flight> {
    CALLS.with(|c| c.borrow_mut().take(id))
}

/// The engine numbered `handle`.
pub fn engine(handle: u32) -> Option<Arc<Engine>> {
    ENGINES.with(|s| s.borrow().get(handle).map(|e| e.engine.clone()))
}

/// Engine `handle`'s template `index`: `[sha, text, args, batchSha,
/// batchText]` of its script.
pub fn template(handle: u32, index: u32) -> Option<(Call, &'static Script)> {
    ENGINES.with(|s| {
        let s = s.borrow();
        let t = s.get(handle)?.templates.get(index as usize)?.clone();
        let batch = t.script.batch();
        Some((t, batch))
    })
}

/// Makes `begin` compute hash slots for engine `handle`.
pub fn use_slots(handle: u32) -> bool {
    ENGINES.with(|s| match s.borrow_mut().get_mut(handle) {
        Some(e) => {
            e.slots = true;
            true
        }
        None => false,
    })
}
