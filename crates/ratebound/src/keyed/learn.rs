//! What outbound adapters learn of a partner's limit, per key of a
//! `KeyedLimiter`: a learned word beside the key's state, kept in a side
//! table of its shard that stays empty until something is learned.
//!
//! A decision reads the side table's length under the shard's read lock it
//! already holds (the table is in the same cache line as the keys'): while
//! nothing is learned — every limiter that is not an outbound adapter's —
//! that is all it costs. A key with a word decides at the word's share of
//! its tier's quota ([`Learned::scale`]), its state kept as it is (a token
//! bucket's schedule: the slots already taken stay where they are). Nothing
//! reserves on a key (waiters decide again after each sleep), so a cut
//! takes hold at every waiter's next decision, and there is no queue to
//! drop.
//!
//! The side table never holds a key the main table does not: an adapt
//! creates the key (as a pause does), and a key dropped — removed, evicted,
//! idle — takes its word with it. [`cleanup`](KeyedLimiter::cleanup) keeps
//! a key whose word is below the ceiling (dropping it would change the
//! key's next decisions), so it stays decision-preserving; memory stays
//! bounded by the number of keys.

use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;

use crate::algorithms::gcra::Params;
use crate::clock::{Clock, MAX_TIME_NANOS};
use crate::outbound::{FULL, Learned};
use crate::sync::{AtomicU64, Ordering};
use crate::{Error, Quota};

use super::KeyedLimiter;
use super::math::Math;
use super::shards::Shard;

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, C> {
    /// What the outbound adapters calling through this limiter learned of
    /// `key`'s partner (see [`outbound::Learning`](crate::outbound::Learning)):
    /// the fresh word for a key with nothing learned, an untracked key and
    /// a window (which does not learn).
    pub fn learned(&self, key: &K) -> Learned {
        let (hash, shard) = self.locate(key);
        let shard = shard.read().unwrap_or_else(|e| e.into_inner());
        learned_in(&shard.learned, hash, key).unwrap_or_else(Learned::fresh)
    }

    /// Replaces `key`'s learned word `seen` with `next` if it is still
    /// `seen` (a compare-and-swap: of fifty adapters proposing a change
    /// from the same word, one wins); from then on `key` decides at
    /// `next`'s share of its tier's quota ([`Learned::scale`]). An
    /// untracked key is created (as for a check of nothing). Returns
    /// whether it replaced.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for the windows (a token bucket learns);
    /// [`Error::TooManyKeys`] / [`Error::InvalidTier`] for a new key, as
    /// for a check.
    pub fn adapt(&self, key: &K, seen: Learned, next: Learned) -> Result<bool, Error> {
        self.adapt_at(key, seen, next, self.clock.now())
    }

    /// [`adapt`](Self::adapt) at `now` (only a new key's room depends on
    /// it).
    ///
    /// # Errors
    /// As [`adapt`](Self::adapt).
    pub fn adapt_at(&self, key: &K, seen: Learned, next: Learned, now: u64) -> Result<bool, Error> {
        if !matches!(self.tiers[0], Math::Bucket(_)) {
            return Err(Error::Unsupported {
                operation: "adapt (learning a partner's limit: a token bucket learns)",
                algorithm: self.algorithm(),
            });
        }
        let now = now.min(MAX_TIME_NANOS);
        let (hash, lock) = self.locate(key);
        loop {
            {
                let shard = lock.read().unwrap_or_else(|e| e.into_inner());
                if let Some((_, word)) = shard.learned.find(hash, |(k, _)| k == key) {
                    return Ok(swap(word, seen, next));
                }
            }
            {
                let mut shard = lock.write().unwrap_or_else(|e| e.into_inner());
                if shard.table.find(hash, |(k, _)| k == key).is_some() {
                    // Another adapt may have added the word meanwhile.
                    if let Some((_, word)) = shard.learned.find(hash, |(k, _)| k == key) {
                        return Ok(swap(word, seen, next));
                    }
                    if seen != Learned::fresh() {
                        return Ok(false);
                    }
                    let word = AtomicU64::new(next.to_bits());
                    let hasher = |(k, _): &(K, AtomicU64)| self.hasher.hash_one(k);
                    shard
                        .learned
                        .insert_unique(hash, (key.clone(), word), hasher);
                    return Ok(true);
                }
            }
            // Create the key (a request for nothing), then learn; if it is
            // evicted in between, look again.
            self.check_new(key, hash, lock, 0, now)?;
        }
    }

    /// The arithmetic `key` (tracked in `shard`, of tier `tier`) decides
    /// by: its tier's, or its tier's scaled by its learned word.
    #[inline]
    pub(super) fn math_of(&self, shard: &Shard<K>, hash: u64, key: &K, tier: usize) -> Math {
        let math = self.tiers[tier];
        if shard.learned.is_empty() {
            return math;
        }
        scaled(math, learned_in(&shard.learned, hash, key))
    }

    /// Drops the learned words of keys `shard`'s table no longer holds.
    pub(super) fn prune_learned(&self, shard: &mut Shard<K>) {
        if shard.learned.is_empty() {
            return;
        }
        let Shard { table, learned, .. } = shard;
        learned.retain(|(k, _)| {
            let hash = self.hasher.hash_one(&*k);
            table.find(hash, |(t, _)| t == k).is_some()
        });
        if learned.len() < learned.capacity() / 4 {
            let len = learned.len();
            learned.shrink_to(len, |(k, _)| self.hasher.hash_one(k));
        }
    }

    /// Keeps the keys of `shard` for which `keep(word, learned)`
    /// (`learned`: the key holds a word below the ceiling, so that it
    /// decides otherwise than a fresh key would, however full), and drops
    /// the words of the keys dropped.
    pub(super) fn sweep(&self, shard: &mut Shard<K>, keep: impl Fn(u64, bool) -> bool) {
        // Ordering (here and below): Relaxed — the write lock is held, so no
        // compare-exchange runs on these words.
        if shard.learned.is_empty() {
            shard
                .table
                .retain(|(_, w)| keep(w.load(Ordering::Relaxed), false));
            return;
        }
        let Shard { table, learned, .. } = &mut *shard;
        table.retain(|(k, w)| {
            let word = learned_in(learned, self.hasher.hash_one(&*k), k);
            keep(
                w.load(Ordering::Relaxed),
                word.is_some_and(|l| l.fraction_units() < FULL),
            )
        });
        self.prune_learned(shard);
    }
}

/// `key`'s learned word in a shard's side table, if it has one.
fn learned_in<K: Eq>(learned: &HashTable<(K, AtomicU64)>, hash: u64, key: &K) -> Option<Learned> {
    learned
        .find(hash, |(k, _)| k == key)
        // Ordering: Acquire — pairs with the exchange that wrote the word
        // (a value on its own: an adapt racing a decision is seen by it or
        // by the next).
        .map(|(_, word)| Learned::from_bits(word.load(Ordering::Acquire)))
}

/// `math` at `learned`'s share: out of line, so that the path of a key
/// with nothing learned stays a length read and a compare.
#[inline(never)]
fn scaled(math: Math, learned: Option<Learned>) -> Math {
    match (math, learned) {
        (Math::Bucket(p), Some(learned)) if learned.fraction_units() < FULL => {
            let q = learned.scale(Quota::from_params(p.period, p.burst));
            Math::Bucket(Params {
                period: q.emission_interval_nanos(),
                burst: q.burst(),
            })
        }
        _ => math,
    }
}

/// Replaces `word` by `next` if it reads as `seen` (one compare-and-swap
/// from the bits it holds).
fn swap(word: &AtomicU64, seen: Learned, next: Learned) -> bool {
    // Ordering: Acquire — pairs with the exchange that wrote the word.
    let mut held = word.load(Ordering::Acquire);
    while Learned::from_bits(held) == seen {
        // Ordering: AcqRel/Acquire — one exchange from the bits read.
        match word.compare_exchange(held, next.to_bits(), Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(now) => held = now,
        }
    }
    false
}
