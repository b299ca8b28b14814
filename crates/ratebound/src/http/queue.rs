//! The short queue in front of a concurrency cap: a request that finds
//! every place taken may wait a little (the queue's `max_wait`, a few
//! milliseconds) for one instead of being shed at once. A place given back
//! goes straight to a waiter — the oldest while the queue is fresh, the
//! newest once its oldest has waited half the time (adaptive LIFO: under
//! overload the requests served are the ones whose clients are still
//! there, and the stale ones time out).
//!
//! The lock is only for waiters: the fast path of a cap with a queue is one
//! more relaxed load in `leave` (anyone waiting?), and a waiter that
//! registers re-tries for a place after registering, so a place given back
//! at that moment is never missed (the two sides are ordered by SeqCst:
//! `leave` decrements then looks for waiters, a waiter registers then
//! looks for a place — at least one of them sees the other).

use std::collections::VecDeque;
use std::task::{Context, Poll, Waker};

use crate::sync::{Arc, AtomicUsize, Mutex, Ordering};

const WAITING: usize = 0;
const GRANTED: usize = 1;
const GONE: usize = 2;

/// One waiter: its state and how to wake it.
#[derive(Debug)]
pub(crate) struct Slot {
    state: AtomicUsize,
    /// The clock reading when it began to wait.
    since: u64,
    waker: Mutex<Option<Waker>>,
}

impl Slot {
    pub(crate) fn state_granted(&self) -> bool {
        self.state.load(Ordering::Acquire) == GRANTED
    }
}

/// The waiters of one cap.
#[derive(Debug)]
pub(crate) struct Queue {
    /// How long a request may wait, ns.
    pub(crate) max_wait: u64,
    /// Waiters still waiting (for `leave`'s one load).
    waiting: AtomicUsize,
    list: Mutex<VecDeque<Arc<Slot>>>,
}

impl Queue {
    pub(crate) fn new(max_wait: u64) -> Queue {
        Queue {
            max_wait,
            waiting: AtomicUsize::new(0),
            list: Mutex::new(VecDeque::new()),
        }
    }

    /// Whether anyone may be waiting (after a place was given back).
    #[inline]
    pub(crate) fn anyone(&self) -> bool {
        self.waiting.load(Ordering::SeqCst) > 0
    }

    /// How many are waiting (a gauge).
    pub(crate) fn waiting(&self) -> usize {
        // Ordering: Relaxed — a reading for metrics and tests, ordering
        // nothing.
        self.waiting.load(Ordering::Relaxed)
    }

    /// Registers a waiter that began at `now`.
    pub(crate) fn register(&self, now: u64) -> Arc<Slot> {
        let slot = Arc::new(Slot {
            state: AtomicUsize::new(WAITING),
            since: now,
            waker: Mutex::new(None),
        });
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        list.push_back(slot.clone());
        self.waiting.fetch_add(1, Ordering::SeqCst);
        slot
    }

    /// Takes `slot` out of the queue if it is still waiting; `false` when a
    /// place was granted to it first (the caller then holds that place).
    pub(crate) fn withdraw(&self, slot: &Slot) -> bool {
        let gone = slot
            .state
            .compare_exchange(WAITING, GONE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if gone {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
        }
        gone
    }

    /// Gives a place (already counted as taken) to a waiter at `now`:
    /// `false` when none is waiting any more.
    pub(crate) fn grant(&self, now: u64) -> bool {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            // The stale ends first: withdrawn waiters are dropped as met.
            while list
                .front()
                .is_some_and(|s| s.state.load(Ordering::Acquire) != WAITING)
            {
                list.pop_front();
            }
            while list
                .back()
                .is_some_and(|s| s.state.load(Ordering::Acquire) != WAITING)
            {
                list.pop_back();
            }
            let Some(oldest) = list.front() else {
                return false;
            };
            let lifo = now.saturating_sub(oldest.since) > self.max_wait / 2;
            let slot = if lifo {
                list.pop_back()
            } else {
                list.pop_front()
            };
            let Some(slot) = slot else {
                return false;
            };
            if slot
                .state
                .compare_exchange(WAITING, GRANTED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                drop(list);
                let waker = slot.waker.lock().unwrap_or_else(|e| e.into_inner()).take();
                if let Some(waker) = waker {
                    waker.wake();
                }
                return true;
            }
        }
    }

    /// Ready once `slot` has been granted a place; registers `cx`'s waker.
    pub(crate) fn poll(slot: &Slot, cx: &mut Context<'_>) -> Poll<()> {
        if slot.state_granted() {
            return Poll::Ready(());
        }
        *slot.waker.lock().unwrap_or_else(|e| e.into_inner()) = Some(cx.waker().clone());
        // Granted while the waker was being stored: its grant may have
        // found no waker.
        if slot.state_granted() {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}
