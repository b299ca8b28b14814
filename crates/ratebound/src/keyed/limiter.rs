//! `KeyedLimiter`: construction, decisions on tracked and new keys, room at
//! the cap, give-backs, pauses and what a key has left.

use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;
use hashbrown::DefaultHashBuilder;

use crate::clock::{Clock, MAX_TIME_NANOS, MonotonicClock};
use crate::limiter::Permit;
use crate::sync::state::update;
use crate::sync::{AtomicU64, Ordering, RwLock};
use crate::{Decision, Error};

use super::math::Math;
use super::shards::{Shard, new_shards, shards_for};
use super::{KeyedAlgorithm, MAX_TIERS, Overflow, SAMPLE, STATE_MASK, TIER_SHIFT};

pub(super) type Assign<K> = Arc<dyn Fn(&K) -> usize + Send + Sync>;

/// A limit per key — API key, user, tenant, IP — with memory that stays
/// bounded under a flood of new keys.
///
/// Each key gets its own state, created on first use: one `AtomicU64` beside
/// the key in a sharded hash table (about 16 bytes plus the table's overhead
/// per `u64` key). A decision on a tracked key takes a shard's *read* lock
/// and then the same lock-free compare-exchange as the direct limiters; only
/// a new key takes a shard's write lock. Keys are hashed with a randomly
/// seeded hasher.
///
/// Memory is bounded three ways:
/// - [`cleanup`](Self::cleanup) drops exactly the keys whose state is
///   indistinguishable from a fresh one (a full bucket, an expired window),
///   so it never changes a future decision. [`cleanup_idle`](Self::cleanup_idle)
///   drops keys idle longer than a given time: safe (decision-preserving)
///   only when that time is at least the refill time (burst/rate for a
///   bucket, one window for a fixed window, two for a sliding one); a
///   shorter time is allowed and forgets partly used keys' debt. Both give
///   the tables' memory back when most keys are gone.
/// - [`with_max_keys`](Self::with_max_keys) caps the number of keys: `len()`
///   never exceeds `max_keys`, even under concurrency (each shard enforces
///   its share under its write lock, so the cap may bite a little before the
///   whole table holds `max_keys`). A new key at the cap first sweeps its
///   shard for fresh keys (at most once per refill time), then applies the
///   [`Overflow`] policy.
/// - Nothing needs a background task; with feature `tokio`,
///   `spawn_cleanup` runs `cleanup` on an interval if you want one.
///
/// Keys can carry their own quota: [`with_tiers`](Self::with_tiers) adds up
/// to three more tiers (free vs paid) of the same algorithm (and, for
/// windows, the same window), chosen per key by a callback at first use and
/// changed later with [`set_tier`](Self::set_tier).
///
/// # Examples
/// ```
/// use ratebound::{KeyedAlgorithm, KeyedLimiter, ManualClock, Quota};
///
/// let limiter = KeyedLimiter::new(KeyedAlgorithm::TokenBucket(Quota::parse("1/s burst 2")?))?
///     .with_clock(ManualClock::new());
/// assert!(limiter.check(&"alice")?.is_allowed());
/// assert!(limiter.check(&"alice")?.is_allowed());
/// assert!(!limiter.check(&"alice")?.is_allowed()); // alice's burst is spent
/// assert!(limiter.check(&"bob")?.is_allowed()); // bob has his own
/// assert_eq!(limiter.len(), 2);
/// # Ok::<(), ratebound::Error>(())
/// ```
pub struct KeyedLimiter<K, C: Clock = MonotonicClock> {
    /// This limiter's id (see [`Permit`]).
    pub(super) id: u64,
    pub(super) shards: Box<[CachePadded<RwLock<Shard<K>>>]>,
    pub(super) hasher: DefaultHashBuilder,
    pub(super) tiers: Vec<Math>,
    pub(super) assign: Option<Assign<K>>,
    pub(super) max_keys: usize,
    pub(super) overflow: Overflow,
    /// The shortest time in which any tier's state becomes fresh.
    pub(super) sweep_every: u64,
    pub(super) clock: C,
}

impl<K: Hash + Eq + Clone> KeyedLimiter<K, MonotonicClock> {
    /// A keyed limiter applying `algorithm` to every key, with no cap on the
    /// number of keys, on the default clock.
    ///
    /// # Errors
    /// The constructors' errors of the algorithm: [`Error::InvalidLimit`],
    /// [`Error::InvalidWindow`] (a keyed window keeps two bits fewer for its
    /// index than a direct one).
    pub fn new(algorithm: KeyedAlgorithm) -> Result<Self, Error> {
        let math = Math::new(algorithm)?;
        Ok(KeyedLimiter {
            id: crate::sync::next_issuer(),
            shards: new_shards(shards_for(usize::MAX), usize::MAX),
            hasher: DefaultHashBuilder::default(),
            tiers: vec![math],
            assign: None,
            max_keys: usize::MAX,
            overflow: Overflow::RejectNewKeys,
            sweep_every: math.span(),
            clock: MonotonicClock::new(),
        })
    }
}

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, C> {
    /// The same limiter reading time from `clock`.
    pub fn with_clock<D: Clock>(self, clock: D) -> KeyedLimiter<K, D> {
        KeyedLimiter {
            id: self.id,
            shards: self.shards,
            hasher: self.hasher,
            tiers: self.tiers,
            assign: self.assign,
            max_keys: self.max_keys,
            overflow: self.overflow,
            sweep_every: self.sweep_every,
            clock,
        }
    }

    /// Caps the number of tracked keys at `max_keys`, with `overflow` for a
    /// new key at the cap. Call it before the limiter is used: it starts
    /// from an empty table.
    ///
    /// # Errors
    /// [`Error::InvalidLimit`] for 0.
    pub fn with_max_keys(mut self, max_keys: usize, overflow: Overflow) -> Result<Self, Error> {
        if max_keys == 0 {
            return Err(Error::InvalidLimit {
                limit: 0,
                max: u64::MAX,
            });
        }
        self.shards = new_shards(shards_for(max_keys), max_keys);
        self.max_keys = max_keys;
        self.overflow = overflow;
        Ok(self)
    }

    /// Adds up to three tiers (tier 0 is the constructor's algorithm) and a
    /// callback that picks each new key's tier at its first use.
    ///
    /// # Errors
    /// [`Error::InvalidTier`] for more than four tiers in all, or a tier of
    /// another algorithm or window length; the algorithms' own errors.
    pub fn with_tiers(
        mut self,
        tiers: Vec<KeyedAlgorithm>,
        assign: impl Fn(&K) -> usize + Send + Sync + 'static,
    ) -> Result<Self, Error> {
        if tiers.len() + 1 > MAX_TIERS {
            return Err(Error::InvalidTier {
                tier: tiers.len() + 1,
                reason: "at most 4 tiers",
            });
        }
        for (i, algorithm) in tiers.into_iter().enumerate() {
            let math = Math::new(algorithm)?;
            if !self.tiers[0].compatible(math) {
                return Err(Error::InvalidTier {
                    tier: i + 1,
                    reason: "every tier must use tier 0's algorithm and window",
                });
            }
            self.sweep_every = self.sweep_every.min(math.span());
            self.tiers.push(math);
        }
        self.assign = Some(Arc::new(assign));
        Ok(self)
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The cap set by [`with_max_keys`](Self::with_max_keys) (`usize::MAX`
    /// when none).
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// The algorithm's name (`"token_bucket"`, `"fixed_window"` or
    /// `"sliding_window"`); every tier has the same one.
    pub fn algorithm(&self) -> &'static str {
        match self.tiers[0] {
            Math::Bucket(_) => "token_bucket",
            Math::Fixed(_) => "fixed_window",
            Math::Sliding(_) => "sliding_window",
        }
    }

    #[inline]
    pub(super) fn locate(&self, key: &K) -> (u64, &RwLock<Shard<K>>) {
        let hash = self.hasher.hash_one(key);
        // Bits 32.. pick the shard: the table inside uses the low bits for
        // the bucket and the top 7 for its tags.
        let shard = (hash >> 32) as usize & (self.shards.len() - 1);
        (hash, &self.shards[shard])
    }

    pub(super) fn tier_of_new(&self, key: &K) -> Result<usize, Error> {
        let tier = self.assign.as_ref().map_or(0, |assign| assign(key));
        if tier < self.tiers.len() {
            Ok(tier)
        } else {
            Err(Error::InvalidTier {
                tier,
                reason: "the tier callback returned a tier that was not configured",
            })
        }
    }

    /// Decides on one key's word (`key`'s, in `shard`); a permit to give
    /// the admission back.
    #[inline]
    pub(super) fn decide(
        &self,
        shard: &Shard<K>,
        (key, word): (&K, &AtomicU64),
        hash: u64,
        n: u64,
        now: u64,
    ) -> Result<(Decision, Option<Permit>), Error> {
        // The tier never changes under a read lock (set_tier writes it under
        // the shard's write lock), so it can be read once.
        // Ordering: Relaxed — only the tier bits are used from this load.
        let tier = (word.load(Ordering::Relaxed) >> TIER_SHIFT) as usize;
        let math = self.math_of(shard, hash, key, tier);
        self.decide_by((math, tier), word, hash, n, now)
    }

    /// Decides on one key's word, of tier `tier`, by `math` (its tier's,
    /// maybe learned).
    #[inline]
    fn decide_by(
        &self,
        (math, tier): (Math, usize),
        word: &AtomicU64,
        hash: u64,
        n: u64,
        now: u64,
    ) -> Result<(Decision, Option<Permit>), Error> {
        if n > math.limit() {
            return Err(Error::InsufficientCapacity {
                requested: n,
                burst: math.limit(),
            });
        }
        let tag = (tier as u64) << TIER_SHIFT;
        let (seen, allowed) = update(word, |w| {
            math.admit(w & STATE_MASK, now, n).map(|next| next | tag)
        });
        let state = seen & STATE_MASK;
        let permit = allowed.then(|| Permit {
            n,
            issuer: self.id,
            key: hash,
            members: None,
            mark: math.mark(state, now, n),
            aux: tier as u64,
        });
        Ok((math.decision(state, now, n, allowed), permit))
    }

    /// Takes one for `key` now. See [`check_n_at`](Self::check_n_at).
    ///
    /// # Errors
    /// As [`check_n_at`](Self::check_n_at).
    #[inline]
    pub fn check(&self, key: &K) -> Result<Decision, Error> {
        self.check_n_at(key, 1, self.clock.now())
    }

    /// Takes one for `key` at `now`. See [`check_n_at`](Self::check_n_at).
    ///
    /// # Errors
    /// As [`check_n_at`](Self::check_n_at).
    #[inline]
    pub fn check_at(&self, key: &K, now: u64) -> Result<Decision, Error> {
        self.check_n_at(key, 1, now)
    }

    /// Takes `n` for `key` now. See [`check_n_at`](Self::check_n_at).
    ///
    /// # Errors
    /// As [`check_n_at`](Self::check_n_at).
    #[inline]
    pub fn check_n(&self, key: &K, n: u64) -> Result<Decision, Error> {
        self.check_n_at(key, n, self.clock.now())
    }

    /// Takes `n` for `key` at `now` if the key's limit allows all `n`,
    /// creating the key's state on first use.
    ///
    /// # Errors
    /// [`Error::InsufficientCapacity`] when `n` exceeds the key's limit;
    /// [`Error::TooManyKeys`] for a new key at the cap under
    /// [`Overflow::RejectNewKeys`]; [`Error::InvalidTier`] when the tier
    /// callback names a tier that does not exist.
    #[inline]
    pub fn check_n_at(&self, key: &K, n: u64, now: u64) -> Result<Decision, Error> {
        self.acquire_n_at(key, n, now).map(|(decision, _)| decision)
    }

    /// Like [`check_n_at`](Self::check_n_at), and when allowed also returns a
    /// [`Permit`] with which [`release`](Self::release) gives the admission
    /// back — to check several policies all-or-nothing.
    ///
    /// # Errors
    /// As [`check_n_at`](Self::check_n_at).
    #[inline]
    pub fn acquire_n_at(
        &self,
        key: &K,
        n: u64,
        now: u64,
    ) -> Result<(Decision, Option<Permit>), Error> {
        let now = now.min(MAX_TIME_NANOS);
        let (hash, shard) = self.locate(key);
        {
            let shard = shard.read().unwrap_or_else(|e| e.into_inner());
            if let Some((_, word)) = shard.table.find(hash, |(k, _)| k == key) {
                return self.decide(&shard, (key, word), hash, n, now);
            }
        }
        self.check_new(key, hash, shard, n, now)
    }

    #[cold]
    pub(super) fn check_new(
        &self,
        key: &K,
        hash: u64,
        shard: &RwLock<Shard<K>>,
        n: u64,
        now: u64,
    ) -> Result<(Decision, Option<Permit>), Error> {
        let tier = self.tier_of_new(key)?;
        let limit = self.tiers[tier].limit();
        if n > limit {
            // Misuse creates no state.
            return Err(Error::InsufficientCapacity {
                requested: n,
                burst: limit,
            });
        }
        let mut shard = shard.write().unwrap_or_else(|e| e.into_inner());
        // Another thread may have created it since the read lock was dropped.
        if let Some((_, word)) = shard.table.find(hash, |(k, _)| k == key) {
            return self.decide(&shard, (key, word), hash, n, now);
        }
        if !self.make_room(&mut shard, now) {
            return Err(Error::TooManyKeys {
                max_keys: self.max_keys,
            });
        }
        let fresh = AtomicU64::new((tier as u64) << TIER_SHIFT);
        let hasher = |(k, _): &(K, AtomicU64)| self.hasher.hash_one(k);
        let entry = shard
            .table
            .insert_unique(hash, (key.clone(), fresh), hasher);
        // A new key has learned nothing (a dropped key's word went with it).
        self.decide_by((self.tiers[tier], tier), &entry.get().1, hash, n, now)
    }

    /// True if the word's state is fresh at `now`.
    pub(super) fn fresh(&self, word: u64, now: u64) -> bool {
        self.tiers[(word >> TIER_SHIFT) as usize].is_fresh(word & STATE_MASK, now)
    }

    /// Makes room for one more key in a shard at its cap; false if the
    /// policy refuses.
    pub(super) fn make_room(&self, shard: &mut Shard<K>, now: u64) -> bool {
        if shard.table.len() < shard.cap {
            return true;
        }
        // Fresh keys go for free — but a sweep is O(shard), so at most once
        // per refill time: a key admitted since cannot be fresh sooner.
        if now >= shard.next_sweep {
            // Ordering (here and below): Relaxed — the write lock is held, so
            // no compare-exchange runs on these words.
            self.sweep(shard, |w, learned| !self.fresh(w, now) || learned);
            shard.next_sweep = now.saturating_add(self.sweep_every.max(1));
            if shard.table.len() < shard.cap {
                return true;
            }
        }
        if self.overflow == Overflow::RejectNewKeys {
            return false;
        }
        // The sample's key closest to fresh: for a bucket the smallest TAT,
        // for a window the oldest index (the high bits of its state).
        let victim = shard
            .table
            .iter()
            .take(SAMPLE)
            .min_by_key(|(_, w)| w.load(Ordering::Relaxed) & STATE_MASK)
            .map(|(k, _)| k.clone());
        if let Some(victim) = victim {
            let hash = self.hasher.hash_one(&victim);
            if let Ok(entry) = shard.table.find_entry(hash, |(k, _)| *k == victim) {
                entry.remove();
            }
            if let Ok(entry) = shard.learned.find_entry(hash, |(k, _)| *k == victim) {
                entry.remove();
            }
        }
        shard.table.len() < shard.cap
    }

    /// Gives back what an [`acquire_n_at`](Self::acquire_n_at) for `key`
    /// took, as the key's algorithm allows (a token bucket keeps what later
    /// takers depend on; a window gives back while the window still counts).
    /// Nothing if the key was dropped or changed tier meanwhile.
    ///
    /// # Errors
    /// [`Error::ForeignPermit`] for a permit another limiter issued, or
    /// this one for another key: nothing is given back.
    pub fn release(&self, key: &K, permit: Permit) -> Result<(), Error> {
        let (hash, shard) = self.locate(key);
        if permit.issuer != self.id || permit.key != hash {
            return Err(Error::ForeignPermit);
        }
        let shard = shard.read().unwrap_or_else(|e| e.into_inner());
        if let Some((_, word)) = shard.table.find(hash, |(k, _)| k == key) {
            update(word, |w| {
                let tier = w >> TIER_SHIFT;
                if tier != permit.aux {
                    return None;
                }
                let math = self.math_of(&shard, hash, key, tier as usize);
                math.release(w & STATE_MASK, permit.mark, permit.n)
                    .map(|state| state | (tier << TIER_SHIFT))
            });
        }
        Ok(())
    }

    /// Empties `key`'s bucket until `d` from now. See
    /// [`pause_at`](Self::pause_at).
    ///
    /// # Errors
    /// As [`pause_at`](Self::pause_at).
    pub fn pause(&self, key: &K, d: Duration) -> Result<(), Error> {
        self.pause_at(key, d, self.clock.now())
    }

    /// Empties `key`'s bucket until `now + d`, refilling at its tier's rate
    /// from then on (see [`TokenBucket::pause_at`](crate::TokenBucket::pause_at):
    /// a pause ending no later than one already on changes nothing) — but
    /// as `max(TAT, now + d + τ)`: a key has no pause words, and needs
    /// none, since nothing reserves on it (waiters through
    /// [`AnyKeyed`](crate::any::AnyKeyed) decide again after each sleep and
    /// find the pause). An untracked key is created, paused.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for the windows (a window's count cannot be
    /// told to wait); [`Error::TooManyKeys`] / [`Error::InvalidTier`] for a
    /// new key, as for a check.
    pub fn pause_at(&self, key: &K, d: Duration, now: u64) -> Result<(), Error> {
        if let Some(algorithm) = self.window_name() {
            return Err(Error::Unsupported {
                operation: "pause",
                algorithm,
            });
        }
        let now = now.min(MAX_TIME_NANOS);
        let d = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let (hash, shard) = self.locate(key);
        loop {
            {
                let shard = shard.read().unwrap_or_else(|e| e.into_inner());
                if let Some((_, word)) = shard.table.find(hash, |(k, _)| k == key) {
                    // Invariant: as a check's, on the same word — the state
                    // only grows, the tier bits are kept.
                    let tier = |w: u64| (w >> TIER_SHIFT) as usize;
                    update(word, |w| match self.math_of(&shard, hash, key, tier(w)) {
                        Math::Bucket(p) => {
                            Some((w & !STATE_MASK) | p.pause(w & STATE_MASK, now, d))
                        }
                        _ => None,
                    });
                    return Ok(());
                }
            }
            // Create the key (a request for nothing), then pause it; if it
            // is evicted in between, look again.
            self.check_new(key, hash, shard, 0, now)?;
        }
    }

    /// Lifts `key`'s pause now. See [`resume_at`](Self::resume_at).
    ///
    /// # Errors
    /// As [`resume_at`](Self::resume_at).
    pub fn resume(&self, key: &K) -> Result<crate::Resumed, Error> {
        self.lift(key, || self.clock.now())
    }

    /// Lifts `key`'s pause at `now`: the bucket is empty at `now` and
    /// refills at its tier's rate from then on, as if the pause had ended
    /// now ([`Resumed::Lifted`](crate::Resumed::Lifted)). Nothing reserves
    /// on a key (see [`pause_at`](Self::pause_at)), so a key whose bucket
    /// is empty beyond `now` — `TAT − τ > now`, which only a pause leaves —
    /// is paused, and nothing stands behind its pause: the answer is never
    /// `Queued`. An untracked key, or one whose bucket is not empty beyond
    /// `now`, is [`Resumed::NotPaused`](crate::Resumed::NotPaused), and
    /// nothing changes. One CAS on the key's word, like a check. Without
    /// an end word the lift cannot tell a pause from a check admitted at a
    /// later clock reading than `now` (one that came in just as the pause
    /// ended): given such a `now`, that admission is forgotten.
    /// [`resume`](Self::resume) cannot be: it reads the clock after each
    /// load of the word, so a check whose exchange it saw read the clock
    /// before it did (a monotonic clock), and its bucket is not empty
    /// beyond the resume's reading.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for the windows.
    pub fn resume_at(&self, key: &K, now: u64) -> Result<crate::Resumed, Error> {
        self.lift(key, || now)
    }

    /// [`resume_at`](Self::resume_at) at `now()`, read after each load of
    /// the key's word.
    fn lift(&self, key: &K, now: impl Fn() -> u64) -> Result<crate::Resumed, Error> {
        if let Some(algorithm) = self.window_name() {
            return Err(Error::Unsupported {
                operation: "resume",
                algorithm,
            });
        }
        let (hash, shard) = self.locate(key);
        let shard = shard.read().unwrap_or_else(|e| e.into_inner());
        let Some((_, word)) = shard.table.find(hash, |(k, _)| k == key) else {
            return Ok(crate::Resumed::NotPaused);
        };
        // Invariant: as a check's, on the same word — the tier bits are
        // kept; the state is lowered only from a pause's.
        let tier = |w: u64| (w >> TIER_SHIFT) as usize;
        let (_, lifted) = update(word, |w| match self.math_of(&shard, hash, key, tier(w)) {
            Math::Bucket(p) => {
                let now = now().min(MAX_TIME_NANOS);
                let tau = p.tau();
                ((w & STATE_MASK).saturating_sub(tau) > now)
                    .then(|| (w & !STATE_MASK) | (now + tau))
            }
            _ => None,
        });
        Ok(if lifted {
            crate::Resumed::Lifted
        } else {
            crate::Resumed::NotPaused
        })
    }

    /// The name of the windows' algorithm, which cannot be paused.
    fn window_name(&self) -> Option<&'static str> {
        match self.tiers[0] {
            Math::Bucket(_) => None,
            Math::Fixed(_) => Some("fixed_window"),
            Math::Sliding(_) => Some("sliding_window"),
        }
    }

    /// How many `key` could take now (its full limit if untracked).
    pub fn available(&self, key: &K) -> u64 {
        self.available_at(key, self.clock.now())
    }

    /// How many `key` could take at `now`.
    pub fn available_at(&self, key: &K, now: u64) -> u64 {
        let now = now.min(MAX_TIME_NANOS);
        let (hash, shard) = self.locate(key);
        let shard = shard.read().unwrap_or_else(|e| e.into_inner());
        match shard.table.find(hash, |(k, _)| k == key) {
            Some((_, word)) => {
                // Ordering: Acquire, as for a check.
                let word = word.load(Ordering::Acquire);
                let math = self.math_of(&shard, hash, key, (word >> TIER_SHIFT) as usize);
                math.available(word & STATE_MASK, now)
            }
            None => self.tier_of_new(key).map_or(0, |t| self.tiers[t].limit()),
        }
    }
}
