//! Pause news: what a driver hears on a prefix's channel when another
//! instance pauses a key (see [`Engine::hear`](crate::Engine::hear)), kept
//! in a small bounded table for the waits it may move.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::reserve::UNBOUNDED_US;

/// The most pieces of news an engine keeps, over all keys.
pub(crate) const NEWS_KEPT: usize = 10_000;
/// The longest key news is told of.
pub(crate) const NEWS_MAX_KEY: usize = 4096;

/// `<start_us>:<shift_us>:<id>:<key>`, each number within bounds.
pub(crate) fn parse_news(m: &[u8]) -> Option<(u64, u64, u64, &[u8])> {
    fn decimal(b: &[u8]) -> Option<u64> {
        if b.is_empty() || b.len() > 16 || !b.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let v = b.iter().fold(0u64, |v, d| v * 10 + u64::from(d - b'0'));
        (v <= UNBOUNDED_US).then_some(v)
    }
    if m.len() > 64 + NEWS_MAX_KEY {
        return None;
    }
    let mut parts = m.splitn(4, |b| *b == b':');
    let at_us = decimal(parts.next()?)?;
    let shift_us = decimal(parts.next()?)?;
    let id = parts.next()?;
    let key = parts.next()?;
    if id.len() != 16 || !id.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let id = u64::from_str_radix(std::str::from_utf8(id).ok()?, 16).ok()?;
    if shift_us == 0 || key.is_empty() || key.len() > NEWS_MAX_KEY {
        return None;
    }
    Some((at_us, shift_us, id, key))
}

/// One pause heard of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Heard {
    /// When it was heard (the table's count; 0: told directly).
    pub(crate) seq: u64,
    /// When its script ran, µs of Redis' clock.
    pub(crate) at_us: u64,
    pub(crate) shift_us: u64,
    /// Names the pause (its own instance hears it twice).
    pub(crate) id: u64,
}

/// The pauses an engine heard of: per key, the recent ones in the order
/// heard, at most [`NEWS_KEPT`] over all keys (the oldest dropped first).
#[derive(Debug)]
pub(crate) struct News {
    table: Mutex<Table>,
    /// The last `seq` given (a copy of `table.seq`, read without the lock).
    latest: AtomicU64,
    /// This engine's pause ids: a random start, counted up.
    origin: u64,
    next_id: AtomicU64,
}

#[derive(Debug, Default)]
pub(crate) struct Table {
    seq: u64,
    pub(crate) by_key: HashMap<Arc<[u8]>, VecDeque<Heard>>,
    /// Every entry's key, oldest first (what to drop).
    order: VecDeque<Arc<[u8]>>,
}

impl News {
    pub(crate) fn new() -> News {
        let mut h = RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.write_u32(std::process::id());
        News {
            table: Mutex::new(Table::default()),
            latest: AtomicU64::new(0),
            origin: h.finish(),
            next_id: AtomicU64::new(0),
        }
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn fresh_id(&self) -> u64 {
        // Ordering: Relaxed — only uniqueness matters, which the RMW gives.
        self.origin
            .wrapping_add(self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// The last news' `seq`. A stale (lower) answer only makes a wait look
    /// at news again, which its rule filters.
    pub(crate) fn latest(&self) -> u64 {
        // Ordering: Acquire pairs with the Release store in `record`; the
        // value is a lower bound used under the lock later, never a guard.
        self.latest.load(Ordering::Acquire)
    }

    /// Records a pause; false if it was known already (by its id).
    pub(crate) fn record(&self, key: &[u8], at_us: u64, shift_us: u64, id: u64) -> bool {
        let mut t = self.lock();
        if t.by_key
            .get(key)
            .is_some_and(|heard| heard.iter().any(|h| h.id == id))
        {
            return false;
        }
        t.seq += 1;
        let seq = t.seq;
        let key: Arc<[u8]> = match t.by_key.get_key_value(key) {
            Some((k, _)) => k.clone(),
            None => Arc::from(key),
        };
        t.by_key.entry(key.clone()).or_default().push_back(Heard {
            seq,
            at_us,
            shift_us,
            id,
        });
        t.order.push_back(key);
        while t.order.len() > NEWS_KEPT {
            let Some(old) = t.order.pop_front() else {
                break;
            };
            if let Some(heard) = t.by_key.get_mut(&old) {
                heard.pop_front();
                if heard.is_empty() {
                    t.by_key.remove(&old);
                }
            }
        }
        // Ordering: Release, under the lock: see `latest`.
        self.latest.store(seq, Ordering::Release);
        true
    }

    /// Adds to `pauses` the news of `key` heard after `seen` of pauses that
    /// ran from `reserved_us` on; `seen` moves to the latest. Whether any
    /// was added.
    pub(crate) fn collect(
        &self,
        key: &[u8],
        seen: &mut u64,
        reserved_us: u64,
        pauses: &mut Vec<Heard>,
    ) -> bool {
        if self.latest() <= *seen {
            // Nothing new (the lock below would tell the same, later).
            return false;
        }
        let t = self.lock();
        let mut added = false;
        if let Some(heard) = t.by_key.get(key) {
            for h in heard.iter().filter(|h| h.seq > *seen) {
                if h.at_us >= reserved_us && !pauses.iter().any(|p| p.id == h.id) {
                    pauses.push(*h);
                    added = true;
                }
            }
        }
        *seen = t.seq;
        added
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().order.len()
    }
}
