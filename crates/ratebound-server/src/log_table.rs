//! `algorithm: sliding_log` per descriptor, in this process: one exact log
//! (the core's [`SlidingLog`], a timestamp per admitted request still in
//! the window) per key.
//!
//! Its memory is what bounds it: up to `8 × limit` bytes per key. So the
//! keys one log limit tracks are at most `max_keys` and at most
//! [`LOG_BUDGET`] ÷ `limit` (1 GiB of timestamps per limit at worst). A key
//! whose log is empty changes no decision when forgotten: when the table is
//! full, those are dropped first; if none is, a new key is refused
//! (`TooManyKeys`), never admitted unlimited. A sweep that freed nothing
//! is not repeated for 1/64 of the window, so a flood of new keys does
//! not scan the shard once each (an empty log may then wait that long to
//! be reclaimed: its new keys are refused meanwhile, never let through).

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::Duration;

use ratebound::any::{AnyClock, Fingerprint};
use ratebound::{Decision, Error, Limiter, SlidingLog};

/// The most timestamps one log limit keeps over all its keys (8 bytes
/// each: 1 GiB).
pub(crate) const LOG_BUDGET: u64 = 1 << 27;

const SHARDS: usize = 16;

/// One shard's logs, and when a sweep for empty ones may run again.
#[derive(Default)]
struct Shard {
    logs: HashMap<Fingerprint, SlidingLog<AnyClock>>,
    /// A sweep that freed nothing is not run again before this (ns): a
    /// flood of new keys into a full shard costs one scan per
    /// 1/64 window, not one per key.
    next_sweep: u64,
}

/// One sliding-log limit's keys.
pub(crate) struct LogTable {
    shards: Vec<Mutex<Shard>>,
    hasher: std::collections::hash_map::RandomState,
    limit: u64,
    window: Duration,
    clock: AnyClock,
    per_shard: usize,
}

impl LogTable {
    /// `limit` per sliding `window` per key, at most `max_keys` keys (and
    /// [`LOG_BUDGET`] ÷ `limit`).
    ///
    /// # Errors
    /// The core's, for a limit or window a log cannot hold.
    pub(crate) fn new(
        limit: u64,
        window: Duration,
        clock: AnyClock,
        max_keys: usize,
    ) -> Result<LogTable, Error> {
        // The core's checks of the numbers, once.
        SlidingLog::with_clock(limit, window, clock.clone())?;
        let keys = (max_keys as u64).min(LOG_BUDGET / limit.max(1)).max(1);
        let per_shard = usize::try_from(keys.div_ceil(SHARDS as u64)).unwrap_or(usize::MAX);
        Ok(LogTable {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
            limit,
            window,
            clock,
            per_shard,
        })
    }

    /// The most keys this table tracks.
    pub(crate) fn max_keys(&self) -> usize {
        self.per_shard.saturating_mul(SHARDS)
    }

    fn shard(&self, key: &Fingerprint) -> &Mutex<Shard> {
        &self.shards[(self.hasher.hash_one(key) as usize) % SHARDS]
    }

    /// Takes `n` for `key` at `now` if all `n` fit (`n = 0`: a look).
    ///
    /// # Errors
    /// `InsufficientCapacity` for `n` above the limit; `TooManyKeys` for
    /// a new key when every tracked key's log still holds requests.
    pub(crate) fn check_n_at(
        &self,
        key: &Fingerprint,
        n: u64,
        now: u64,
    ) -> Result<Decision, Error> {
        let mut shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        if let Some(log) = shard.logs.get(key) {
            return log.check_n_at(n, now);
        }
        if n > self.limit {
            return Err(Error::InsufficientCapacity {
                requested: n,
                burst: self.limit,
            });
        }
        if shard.logs.len() >= self.per_shard && now >= shard.next_sweep {
            // Forget the keys whose log is empty: no decision changes.
            shard
                .logs
                .retain(|_, log| log.available_at(now) < self.limit);
            if shard.logs.len() >= self.per_shard {
                let pause = u64::try_from(self.window.as_nanos() / 64).unwrap_or(u64::MAX);
                shard.next_sweep = now.saturating_add(pause);
            }
        }
        if shard.logs.len() >= self.per_shard {
            return Err(Error::TooManyKeys {
                max_keys: self.max_keys(),
            });
        }
        let log = SlidingLog::with_clock(self.limit, self.window, self.clock.clone())?;
        let decision = log.check_n_at(n, now)?;
        if n > 0 {
            shard.logs.insert(*key, log);
        }
        Ok(decision)
    }
}
