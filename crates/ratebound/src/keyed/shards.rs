//! The sharded table of a `KeyedLimiter`: each shard a hash table of `(key,
//! state word)` under a read-write lock, with its share of `max_keys`.

use crossbeam_utils::CachePadded;
use hashbrown::HashTable;

use crate::sync::{AtomicU64, RwLock};

pub(super) struct Shard<K> {
    pub(super) table: HashTable<(K, AtomicU64)>,
    /// What outbound adapters learned of a partner's limit for some of the
    /// shard's keys (`Learned`'s bits): empty — one length read by a
    /// decision — until something is learned, and never holding a key the
    /// table does not (see `keyed/learn.rs`).
    pub(super) learned: HashTable<(K, AtomicU64)>,
    /// This shard's share of `max_keys`.
    pub(super) cap: usize,
    /// No sweep for fresh keys before this time (see `make_room`).
    pub(super) next_sweep: u64,
}

/// Shards: 4 per CPU (at most 64), but at least 64 keys of cap per shard, so
/// that a small cap is one exact table rather than many tiny ones.
pub(super) fn shards_for(max_keys: usize) -> usize {
    let cpus = std::thread::available_parallelism().map_or(4, |n| n.get());
    (4 * cpus)
        .next_power_of_two()
        .clamp(1, 64)
        .min(prev_power_of_two(max_keys / 64))
}

pub(super) fn prev_power_of_two(n: usize) -> usize {
    if n == 0 {
        1
    } else {
        1 << (usize::BITS - 1 - n.leading_zeros())
    }
}

pub(super) fn new_shards<K>(count: usize, max_keys: usize) -> Box<[CachePadded<RwLock<Shard<K>>>]> {
    (0..count)
        .map(|i| {
            // The caps add up to exactly max_keys.
            let cap = max_keys / count + usize::from(i < max_keys % count);
            CachePadded::new(RwLock::new(Shard {
                table: HashTable::new(),
                learned: HashTable::new(),
                cap,
                next_sweep: 0,
            }))
        })
        .collect()
}
