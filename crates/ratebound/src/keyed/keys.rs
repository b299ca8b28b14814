//! The upkeep of a `KeyedLimiter`'s tracked keys: how many, removing and
//! resetting one, changing its tier, and cleaning up those that are fresh
//! or idle.

use std::hash::{BuildHasher, Hash};
use std::time::Duration;

use crate::Error;
use crate::algorithms::gcra::MAX_TAT;
use crate::clock::{Clock, MAX_TIME_NANOS};
use crate::sync::{AtomicU64, Ordering};

use super::KeyedLimiter;
use super::{STATE_MASK, TIER_SHIFT};

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, C> {
    /// Keys tracked now.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.read().unwrap_or_else(|e| e.into_inner()).table.len())
            .sum()
    }

    /// True if no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets `key` (its next request starts fresh); true if it was tracked.
    pub fn remove(&self, key: &K) -> bool {
        let (hash, shard) = self.locate(key);
        let mut shard = shard.write().unwrap_or_else(|e| e.into_inner());
        if let Ok(entry) = shard.learned.find_entry(hash, |(k, _)| k == key) {
            entry.remove();
        }
        match shard.table.find_entry(hash, |(k, _)| k == key) {
            Ok(entry) => {
                entry.remove();
                true
            }
            Err(_) => false,
        }
    }

    /// Gives `key` its full limit back, keeping its tier.
    pub fn reset(&self, key: &K) {
        let (hash, shard) = self.locate(key);
        let shard = shard.read().unwrap_or_else(|e| e.into_inner());
        if let Some((_, word)) = shard.table.find(hash, |(k, _)| k == key) {
            // Ordering: AcqRel/Relaxed, as for a check's exchange — a replacement
            // of the state;
            // the fetch_update keeps the tier bits of whatever it replaces.
            let _ = word.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |w| {
                Some(w & !STATE_MASK)
            });
        }
    }

    /// Moves `key` to `tier` now, keeping its count of tokens or requests
    /// (capped at the new tier's limit); an untracked key is created in it.
    ///
    /// # Errors
    /// [`Error::InvalidTier`] for a tier that does not exist;
    /// [`Error::TooManyKeys`] for a new key at the cap under `RejectNewKeys`.
    pub fn set_tier(&self, key: &K, tier: usize) -> Result<(), Error> {
        if tier >= self.tiers.len() {
            return Err(Error::InvalidTier {
                tier,
                reason: "no such tier",
            });
        }
        let now = self.clock.now().min(MAX_TIME_NANOS);
        let (hash, shard) = self.locate(key);
        let mut shard = shard.write().unwrap_or_else(|e| e.into_inner());
        if let Some((_, word)) = shard.table.find(hash, |(k, _)| k == key) {
            // Ordering: Relaxed — the write lock excludes every check.
            let old = word.load(Ordering::Relaxed);
            let from = self.tiers[(old >> TIER_SHIFT) as usize];
            let state = from.convert(old & STATE_MASK, now, self.tiers[tier]);
            word.store(
                ((tier as u64) << TIER_SHIFT) | state.min(MAX_TAT),
                Ordering::Relaxed,
            );
            return Ok(());
        }
        if !self.make_room(&mut shard, now) {
            return Err(Error::TooManyKeys {
                max_keys: self.max_keys,
            });
        }
        let fresh = AtomicU64::new((tier as u64) << TIER_SHIFT);
        let hasher = |(k, _): &(K, AtomicU64)| self.hasher.hash_one(k);
        shard
            .table
            .insert_unique(hash, (key.clone(), fresh), hasher);
        Ok(())
    }

    /// Drops every key whose state is indistinguishable from a fresh one
    /// now (see [`cleanup_at`](Self::cleanup_at)); returns how many.
    pub fn cleanup(&self) -> usize {
        self.cleanup_at(self.clock.now())
    }

    /// Drops every key whose state at `now` is indistinguishable from a fresh
    /// one: no later decision (at a time ≥ `now`) can tell the difference.
    /// A key holding a learned rate below its quota ([`adapt`](Self::adapt))
    /// is kept: dropped, it would decide at its whole quota again.
    /// Returns how many were dropped; gives memory back when most are gone.
    pub fn cleanup_at(&self, now: u64) -> usize {
        let now = now.min(MAX_TIME_NANOS);
        self.retain(|word, learned| !self.fresh(word, now) || learned)
    }

    /// Drops every key idle for longer than `idle` now; see
    /// [`cleanup_idle_at`](Self::cleanup_idle_at).
    pub fn cleanup_idle(&self, idle: Duration) -> usize {
        self.cleanup_idle_at(idle, self.clock.now())
    }

    /// Drops every key whose last admission was more than `idle` before
    /// `now` (judged from its state, conservatively: a key is kept unless
    /// it certainly is that idle). Decision-preserving only when `idle` is
    /// at least the refill time (burst/rate, or one window for a fixed
    /// window, two for a sliding one); a shorter `idle` also drops keys that
    /// still carry debt, whose next request then starts fresh. A key
    /// dropped forgets what outbound adapters learned for it (as a Redis
    /// key expiring does).
    pub fn cleanup_idle_at(&self, idle: Duration, now: u64) -> usize {
        let now = now.min(MAX_TIME_NANOS);
        let idle = u64::try_from(idle.as_nanos()).unwrap_or(u64::MAX);
        self.retain(|word, _| {
            self.tiers[(word >> TIER_SHIFT) as usize].idle(word & STATE_MASK, now) <= idle
        })
    }

    /// Keeps the keys for which `keep(word, learned)` (`learned`: the key
    /// holds a learned rate below its quota), in every shard.
    pub(super) fn retain(&self, keep: impl Fn(u64, bool) -> bool) -> usize {
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.write().unwrap_or_else(|e| e.into_inner());
            let before = shard.table.len();
            self.sweep(&mut shard, &keep);
            removed += before - shard.table.len();
            // Give memory back once the table is mostly empty.
            if shard.table.len() < shard.table.capacity() / 4 {
                let len = shard.table.len();
                shard.table.shrink_to(len, |(k, _)| self.hasher.hash_one(k));
            }
        }
        removed
    }
}

impl<K, C: Clock> std::fmt::Debug for KeyedLimiter<K, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("shards", &self.shards.len())
            .field("tiers", &self.tiers)
            .field("max_keys", &self.max_keys)
            .field("overflow", &self.overflow)
            .finish()
    }
}
