//! Per-key limiters with bounded memory.

use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;
use hashbrown::{DefaultHashBuilder, HashTable};

use crate::algorithms::gcra::{MAX_TAT, Params};
use crate::algorithms::sliding_window::Sliding;
use crate::algorithms::{Fixed, validate};
use crate::clock::{Clock, MAX_TIME_NANOS, MonotonicClock};
use crate::limiter::Permit;
use crate::sync::state::update;
use crate::sync::word::WordMath;
use crate::sync::{AtomicU64, Ordering, RwLock};
use crate::{Decision, Error, Quota};

/// The algorithm (and its parameters) a [`KeyedLimiter`] applies to each key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyedAlgorithm {
    /// A token bucket (GCRA) per key.
    TokenBucket(Quota),
    /// A fixed window per key.
    FixedWindow {
        /// Requests per window.
        limit: u64,
        /// The window length.
        window: Duration,
    },
    /// A sliding window counter per key.
    SlidingWindow {
        /// Requests per sliding window.
        limit: u64,
        /// The window length.
        window: Duration,
    },
}

impl KeyedAlgorithm {
    /// The algorithm's name: `"token_bucket"`, `"fixed_window"` or
    /// `"sliding_window"` (as [`AnyLimiter::algorithm`](crate::any::AnyLimiter::algorithm)
    /// names them).
    pub fn name(&self) -> &'static str {
        match self {
            KeyedAlgorithm::TokenBucket(_) => "token_bucket",
            KeyedAlgorithm::FixedWindow { .. } => "fixed_window",
            KeyedAlgorithm::SlidingWindow { .. } => "sliding_window",
        }
    }
}

/// What a [`KeyedLimiter`] at its `max_keys` cap does with a new key once no
/// tracked key is fresh enough to drop for free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// Forget one tracked key to make room: among a sample of 8 keys of the
    /// new key's shard, the one whose state is closest to fresh (for a token
    /// bucket, the earliest to refill; for a window, the oldest window) —
    /// approximately the least recently used. Evicting a partly used key
    /// forgets its debt: its next request starts from a full bucket.
    EvictLeastRecent,
    /// Refuse the new key's request with [`Error::TooManyKeys`] (a distinct
    /// reason, which an HTTP front door can answer with 503) and change
    /// nothing: tracked keys keep exactly their limits.
    RejectNewKeys,
}

// The top two bits of every key's word name its tier; the algorithms keep
// their state in the low 62.
const TIER_SHIFT: u32 = 62;
const STATE_MASK: u64 = (1 << TIER_SHIFT) - 1;
const MAX_TIERS: usize = 4;
const SAMPLE: usize = 8;

#[derive(Clone, Copy, Debug)]
enum Math {
    Bucket(Params),
    Fixed(Fixed),
    Sliding(Sliding),
}

impl Math {
    fn new(algorithm: KeyedAlgorithm) -> Result<Math, Error> {
        Ok(match algorithm {
            KeyedAlgorithm::TokenBucket(q) => Math::Bucket(Params {
                period: q.emission_interval_nanos(),
                burst: q.burst(),
            }),
            KeyedAlgorithm::FixedWindow { limit, window } => {
                let (window, bits) = validate(limit, window, 1, TIER_SHIFT)?;
                Math::Fixed(Fixed {
                    limit,
                    window,
                    bits,
                })
            }
            KeyedAlgorithm::SlidingWindow { limit, window } => {
                let (window, bits) = validate(limit, window, 2, TIER_SHIFT)?;
                Math::Sliding(Sliding {
                    limit,
                    window,
                    bits,
                })
            }
        })
    }

    /// True if a key may switch between the two (same algorithm and window).
    fn compatible(self, other: Math) -> bool {
        match (self, other) {
            (Math::Bucket(_), Math::Bucket(_)) => true,
            (Math::Fixed(a), Math::Fixed(b)) => a.window == b.window,
            (Math::Sliding(a), Math::Sliding(b)) => a.window == b.window,
            _ => false,
        }
    }

    fn limit(self) -> u64 {
        match self {
            Math::Bucket(p) => p.burst,
            Math::Fixed(f) => f.limit,
            Math::Sliding(s) => s.limit,
        }
    }

    #[inline]
    fn admit(self, state: u64, now: u64, n: u64) -> Option<u64> {
        match self {
            Math::Bucket(p) => p.admit(state, now, n),
            Math::Fixed(f) => f.admit(state, f.at(now), n),
            Math::Sliding(s) => s.admit(state, s.at(now), n),
        }
    }

    #[inline]
    fn decision(self, state: u64, now: u64, n: u64, allowed: bool) -> Decision {
        match self {
            Math::Bucket(p) => p.decision(state, now, n, allowed),
            Math::Fixed(f) => f.decision(state, f.at(now), n, allowed),
            Math::Sliding(s) => s.decision(state, s.at(now), n, allowed),
        }
    }

    fn available(self, state: u64, now: u64) -> u64 {
        match self {
            Math::Bucket(p) => p.available(state, now),
            Math::Fixed(f) => f.available(state, f.at(now)),
            Math::Sliding(s) => s.available(state, s.at(now)),
        }
    }

    /// True if `state` decides exactly like a fresh state from `now` on.
    fn is_fresh(self, state: u64, now: u64) -> bool {
        match self {
            // Full: max(TAT, t) = t for every t ≥ now, as for TAT = 0.
            Math::Bucket(_) => state <= now,
            Math::Fixed(f) => f.is_fresh(state, now),
            Math::Sliding(s) => s.is_fresh(state, now),
        }
    }

    /// A lower bound on the time since the key's last admission.
    fn idle(self, state: u64, now: u64) -> u64 {
        match self {
            // The last admission, of n ≥ 1, left TAT at least T after it.
            Math::Bucket(p) => (now + p.period).saturating_sub(state),
            Math::Fixed(f) => f.idle(state, now),
            Math::Sliding(s) => s.idle(state, now),
        }
    }

    /// The longest a state can take to become fresh with no more traffic.
    fn span(self) -> u64 {
        match self {
            Math::Bucket(p) => p.tau(),
            Math::Fixed(f) => f.window,
            Math::Sliding(s) => 2 * s.window,
        }
    }

    /// Where an admission of `n` at `now` on `state` landed.
    fn mark(self, state: u64, now: u64, n: u64) -> u64 {
        match self {
            Math::Bucket(p) => p.admit(state, now, n).unwrap_or(state),
            Math::Fixed(f) => f.mark(state, f.at(now), n),
            Math::Sliding(s) => s.mark(state, s.at(now), n),
        }
    }

    /// `state` after giving back `n` admitted at `mark`.
    fn release(self, state: u64, mark: u64, n: u64) -> Option<u64> {
        match self {
            Math::Bucket(p) => Some(p.cancel(state, mark, n)),
            Math::Fixed(f) => WordMath::release(f, state, mark, n),
            Math::Sliding(s) => WordMath::release(s, state, mark, n),
        }
    }

    /// `state` re-expressed for `to` at `now`, keeping the count (capped).
    fn convert(self, state: u64, now: u64, to: Math) -> u64 {
        match (self, to) {
            (Math::Bucket(a), Math::Bucket(b)) => a.convert(state, now, b),
            (Math::Fixed(a), Math::Fixed(b)) => a.convert(state, b),
            (Math::Sliding(a), Math::Sliding(b)) => a.convert(state, b),
            // `compatible` rules the rest out; start fresh rather than guess.
            _ => 0,
        }
    }
}

struct Shard<K> {
    table: HashTable<(K, AtomicU64)>,
    /// This shard's share of `max_keys`.
    cap: usize,
    /// No sweep for fresh keys before this time (see `make_room`).
    next_sweep: u64,
}

type Assign<K> = Arc<dyn Fn(&K) -> usize + Send + Sync>;

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
    id: u64,
    shards: Box<[CachePadded<RwLock<Shard<K>>>]>,
    hasher: DefaultHashBuilder,
    tiers: Vec<Math>,
    assign: Option<Assign<K>>,
    max_keys: usize,
    overflow: Overflow,
    /// The shortest time in which any tier's state becomes fresh.
    sweep_every: u64,
    clock: C,
}

/// Shards: 4 per CPU (at most 64), but at least 64 keys of cap per shard, so
/// that a small cap is one exact table rather than many tiny ones.
fn shards_for(max_keys: usize) -> usize {
    let cpus = std::thread::available_parallelism().map_or(4, |n| n.get());
    (4 * cpus)
        .next_power_of_two()
        .clamp(1, 64)
        .min(prev_power_of_two(max_keys / 64))
}

fn prev_power_of_two(n: usize) -> usize {
    if n == 0 {
        1
    } else {
        1 << (usize::BITS - 1 - n.leading_zeros())
    }
}

fn new_shards<K>(count: usize, max_keys: usize) -> Box<[CachePadded<RwLock<Shard<K>>>]> {
    (0..count)
        .map(|i| {
            // The caps add up to exactly max_keys.
            let cap = max_keys / count + usize::from(i < max_keys % count);
            CachePadded::new(RwLock::new(Shard {
                table: HashTable::new(),
                cap,
                next_sweep: 0,
            }))
        })
        .collect()
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
    fn locate(&self, key: &K) -> (u64, &RwLock<Shard<K>>) {
        let hash = self.hasher.hash_one(key);
        // Bits 32.. pick the shard: the table inside uses the low bits for
        // the bucket and the top 7 for its tags.
        let shard = (hash >> 32) as usize & (self.shards.len() - 1);
        (hash, &self.shards[shard])
    }

    fn tier_of_new(&self, key: &K) -> Result<usize, Error> {
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

    /// Decides on one key's word; a permit to give the admission back.
    #[inline]
    fn decide(
        &self,
        word: &AtomicU64,
        hash: u64,
        n: u64,
        now: u64,
    ) -> Result<(Decision, Option<Permit>), Error> {
        // The tier never changes under a read lock (set_tier writes it under
        // the shard's write lock), so it can be read once.
        // Ordering: Relaxed — only the tier bits are used from this load.
        let tier = (word.load(Ordering::Relaxed) >> TIER_SHIFT) as usize;
        let math = self.tiers[tier];
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
                return self.decide(word, hash, n, now);
            }
        }
        self.check_new(key, hash, shard, n, now)
    }

    #[cold]
    fn check_new(
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
            return self.decide(word, hash, n, now);
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
        self.decide(&entry.get().1, hash, n, now)
    }

    /// True if the word's state is fresh at `now`.
    fn fresh(&self, word: u64, now: u64) -> bool {
        self.tiers[(word >> TIER_SHIFT) as usize].is_fresh(word & STATE_MASK, now)
    }

    /// Makes room for one more key in a shard at its cap; false if the
    /// policy refuses.
    fn make_room(&self, shard: &mut Shard<K>, now: u64) -> bool {
        if shard.table.len() < shard.cap {
            return true;
        }
        // Fresh keys go for free — but a sweep is O(shard), so at most once
        // per refill time: a key admitted since cannot be fresh sooner.
        if now >= shard.next_sweep {
            // Ordering (here and below): Relaxed — the write lock is held, so
            // no compare-exchange runs on these words.
            shard
                .table
                .retain(|(_, w)| !self.fresh(w.load(Ordering::Relaxed), now));
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
        }
        shard.table.len() < shard.cap
    }

    /// Checks `key` against several keyed limiters (policies) all or nothing
    /// at `now`: returns one decision per limiter, in order. The request is
    /// admitted iff every decision is allowed; if any refuses, what the
    /// others took is given back (see [`release`](Self::release)), and the
    /// largest `retry_after` among the decisions is the wait after which all
    /// of them would admit it. The limiters' clocks are not read: every
    /// policy is judged at the same `now`.
    ///
    /// [`check_all_with`](Self::check_all_with) does the same without
    /// collecting the decisions into a `Vec`.
    ///
    /// # Errors
    /// The first limiter's error (e.g. [`Error::TooManyKeys`]), after giving
    /// back what the earlier ones took.
    pub fn check_all_at<'a>(
        limiters: impl IntoIterator<Item = &'a Self>,
        key: &K,
        n: u64,
        now: u64,
    ) -> Result<Vec<Decision>, Error>
    where
        Self: 'a,
    {
        let mut decisions: Vec<Option<Decision>> = Vec::new();
        Self::check_all_with(limiters, key, n, now, |i, decision| {
            if decisions.len() <= i {
                decisions.resize(i + 1, None);
            }
            decisions[i] = Some(decision);
        })
        .map(|_| decisions.into_iter().flatten().collect())
    }

    /// [`check_all_at`](Self::check_all_at) without an allocation: hands
    /// each limiter's decision to `each` with the limiter's index, and
    /// returns whether the request was admitted (every decision allowed).
    /// All or nothing as there: if any refuses, what the others took is
    /// given back, and the decisions of those others describe their state
    /// after the give-back (what a quota header should report: nothing was
    /// counted). Decisions arrive last limiter first.
    ///
    /// # Errors
    /// The first limiter's error (e.g. [`Error::TooManyKeys`]), after giving
    /// back what the earlier ones took; the decisions already handed to
    /// `each` then count for nothing.
    ///
    /// # Examples
    /// ```
    /// use ratebound::{KeyedAlgorithm, KeyedLimiter, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let burst = KeyedLimiter::new(KeyedAlgorithm::TokenBucket(Quota::parse("1/s burst 2")?))?
    ///     .with_clock(clock.clone());
    /// let daily = KeyedLimiter::new(KeyedAlgorithm::TokenBucket(Quota::parse("1/day")?))?
    ///     .with_clock(clock);
    /// let mut remaining = [0; 2];
    /// let admitted = KeyedLimiter::check_all_with([&burst, &daily], &"alice", 1, 0, |i, d| {
    ///     remaining[i] = d.remaining();
    /// })?;
    /// assert!(admitted);
    /// assert_eq!(remaining, [1, 0]);
    /// // The daily quota refuses, so the burst's token is given back, and
    /// // its decision says so.
    /// let admitted = KeyedLimiter::check_all_with([&burst, &daily], &"alice", 1, 0, |i, d| {
    ///     remaining[i] = d.remaining();
    /// })?;
    /// assert!(!admitted);
    /// assert_eq!(remaining, [1, 0]);
    /// assert_eq!(burst.available_at(&"alice", 0), 1);
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    pub fn check_all_with<'a>(
        limiters: impl IntoIterator<Item = &'a Self>,
        key: &K,
        n: u64,
        now: u64,
        mut each: impl FnMut(usize, Decision),
    ) -> Result<bool, Error>
    where
        Self: 'a,
    {
        Self::check_rest(&mut limiters.into_iter(), 0, key, n, now, &mut each)
    }

    /// The rest of a [`check_all_with`](Self::check_all_with) from limiter
    /// `index` on: each level of the recursion holds its limiter's permit on
    /// the stack until the later limiters have decided, and gives it back if
    /// any of them refused or failed — in reverse order, as a list of
    /// permits would, without one.
    fn check_rest<'a, F: FnMut(usize, Decision)>(
        limiters: &mut impl Iterator<Item = &'a Self>,
        index: usize,
        key: &K,
        n: u64,
        now: u64,
        each: &mut F,
    ) -> Result<bool, Error>
    where
        Self: 'a,
    {
        let Some(limiter) = limiters.next() else {
            return Ok(true);
        };
        let (decision, permit) = limiter.acquire_n_at(key, n, now)?;
        let rest = Self::check_rest(limiters, index + 1, key, n, now, each);
        let admitted = decision.is_allowed() && matches!(rest, Ok(true));
        let mut shown = decision;
        if !admitted && let Some(permit) = permit {
            // Issued just above, for this key: it is this limiter's own.
            let _ = limiter.release(key, permit);
            // The state after the give-back: a request for nothing takes
            // nothing and reports it.
            if let Ok((now_state, _)) = limiter.acquire_n_at(key, 0, now) {
                shown = now_state;
            }
        }
        each(index, shown);
        rest.map(|_| admitted)
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
                let math = self.tiers[tier as usize];
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
        let algorithm = match self.tiers[0] {
            Math::Bucket(_) => None,
            Math::Fixed(_) => Some("fixed_window"),
            Math::Sliding(_) => Some("sliding_window"),
        };
        if let Some(algorithm) = algorithm {
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
                    update(word, |w| match self.tiers[(w >> TIER_SHIFT) as usize] {
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
                self.tiers[(word >> TIER_SHIFT) as usize].available(word & STATE_MASK, now)
            }
            None => self.tier_of_new(key).map_or(0, |t| self.tiers[t].limit()),
        }
    }

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
    /// Returns how many were dropped; gives memory back when most are gone.
    pub fn cleanup_at(&self, now: u64) -> usize {
        let now = now.min(MAX_TIME_NANOS);
        self.retain(|word| !self.fresh(word, now))
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
    /// still carry debt, whose next request then starts fresh.
    pub fn cleanup_idle_at(&self, idle: Duration, now: u64) -> usize {
        let now = now.min(MAX_TIME_NANOS);
        let idle = u64::try_from(idle.as_nanos()).unwrap_or(u64::MAX);
        self.retain(|word| {
            self.tiers[(word >> TIER_SHIFT) as usize].idle(word & STATE_MASK, now) <= idle
        })
    }

    fn retain(&self, keep: impl Fn(u64) -> bool) -> usize {
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.write().unwrap_or_else(|e| e.into_inner());
            let before = shard.table.len();
            // Ordering: Relaxed — the write lock excludes every check.
            shard.table.retain(|(_, w)| keep(w.load(Ordering::Relaxed)));
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

/// One key's algorithm on a state word the caller keeps: the arithmetic and
/// the compare-exchange loop of [`KeyedLimiter`], for state that lives
/// elsewhere — in a table in shared memory, for instance, where every
/// process that maps it updates the same words (a compare-exchange is as
/// atomic across processes as across threads).
///
/// A word starts at [`WordRule::FRESH`]; the rule uses its low 62 bits and
/// keeps the top two at 0.
///
/// # Examples
/// ```
/// use std::sync::atomic::AtomicU64;
/// use ratebound::{KeyedAlgorithm, Quota, WordRule};
///
/// let rule = WordRule::new(KeyedAlgorithm::TokenBucket(Quota::parse("1/s burst 2")?))?;
/// let word = AtomicU64::new(WordRule::FRESH);
/// let now = 5_000_000_000;
/// assert!(rule.check_n_at(&word, 1, now)?.0.is_allowed());
/// assert!(rule.check_n_at(&word, 1, now)?.0.is_allowed());
/// assert!(!rule.check_n_at(&word, 1, now)?.0.is_allowed());
/// assert!(!rule.is_fresh(word.load(std::sync::atomic::Ordering::Relaxed), now));
/// # Ok::<(), ratebound::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct WordRule {
    math: Math,
}

impl WordRule {
    /// The state of a key never seen (or fresh again).
    pub const FRESH: u64 = 0;

    /// The rule of `algorithm`.
    ///
    /// # Errors
    /// As [`KeyedLimiter::new`].
    pub fn new(algorithm: KeyedAlgorithm) -> Result<WordRule, Error> {
        Ok(WordRule {
            math: Math::new(algorithm)?,
        })
    }

    /// The most one check can take.
    pub fn limit(&self) -> u64 {
        self.math.limit()
    }

    /// Takes `n` at `now` from `word` if all `n` are there; a refusal
    /// writes nothing. Also where the admission landed (for
    /// [`release`](Self::release)), when admitted.
    ///
    /// # Errors
    /// [`Error::InsufficientCapacity`] when `n` exceeds the limit.
    #[inline]
    pub fn check_n_at(
        &self,
        word: &AtomicU64,
        n: u64,
        now: u64,
    ) -> Result<(Decision, Option<u64>), Error> {
        let math = self.math;
        if n > math.limit() {
            return Err(Error::InsufficientCapacity {
                requested: n,
                burst: math.limit(),
            });
        }
        let now = now.min(crate::MAX_TIME_NANOS);
        let (seen, allowed) = update(word, |w| math.admit(w & STATE_MASK, now, n));
        let state = seen & STATE_MASK;
        let mark = allowed.then(|| math.mark(state, now, n));
        Ok((math.decision(state, now, n, allowed), mark))
    }

    /// Gives back `n` admitted at `mark` (see
    /// [`KeyedLimiter::release`]): as far as no later admission depends on
    /// them.
    pub fn release(&self, word: &AtomicU64, mark: u64, n: u64) {
        let math = self.math;
        update(word, |w| math.release(w & STATE_MASK, mark, n));
    }

    /// The algorithm's name, as [`Error::Unsupported`] gives it.
    fn algorithm(&self) -> &'static str {
        match self.math {
            Math::Bucket(_) => "token_bucket",
            Math::Fixed(_) => "fixed_window",
            Math::Sliding(_) => "sliding_window",
        }
    }

    /// Takes `n` at `now` from a token bucket's `word` even if they are
    /// not there yet, as long as they will be within `max_wait` ns: the
    /// wait and where the reservation landed (for [`release`](Self::release)),
    /// as [`TokenBucket::reserve_n_at`](crate::TokenBucket::reserve_n_at).
    ///
    /// # Errors
    /// [`Error::InsufficientCapacity`] when `n` exceeds the burst;
    /// [`Error::DeadlineExceeded`], taking nothing, when the wait would be
    /// longer than `max_wait`; [`Error::Unsupported`] for the windows.
    pub fn reserve_n_at(
        &self,
        word: &AtomicU64,
        n: u64,
        max_wait: u64,
        now: u64,
    ) -> Result<(u64, u64), Error> {
        let Math::Bucket(p) = self.math else {
            return Err(Error::Unsupported {
                operation: "reservations",
                algorithm: self.algorithm(),
            });
        };
        if n > p.burst {
            return Err(Error::InsufficientCapacity {
                requested: n,
                burst: p.burst,
            });
        }
        let now = now.min(crate::MAX_TIME_NANOS);
        let (seen, _) = update(word, |w| {
            p.reserve(w & STATE_MASK, now, n, max_wait)
                .ok()
                .map(|(_, next)| next)
        });
        p.reserve(seen & STATE_MASK, now, n, max_wait)
            .map_err(|wait| Error::DeadlineExceeded {
                wait: Duration::from_nanos(wait),
                max_wait: Duration::from_nanos(max_wait),
            })
    }

    /// One step of waiting for `n` at `now` on `word`, to be admitted no
    /// later than the clock time `deadline`: a token bucket reserves (the
    /// caller sleeps once and goes), a window says how long to sleep before
    /// deciding again — as [`AnyLimiter::acquire_step`](crate::any::AnyLimiter::acquire_step).
    /// Also where what was taken landed (for [`release`](Self::release)).
    /// A permit held by a reservation carries `tag` (the caller's name for
    /// the word) and is given back with [`release_permit`](Self::release_permit).
    ///
    /// # Errors
    /// [`Error::DeadlineExceeded`] at once, taking nothing, when the wait
    /// would end after the deadline; [`Error::InsufficientCapacity`] when
    /// `n` exceeds the limit.
    pub fn acquire_step(
        &self,
        word: &AtomicU64,
        n: u64,
        deadline: Option<u64>,
        now: u64,
        tag: u64,
    ) -> Result<(crate::any::Acquire, Option<u64>), Error> {
        use crate::any::Acquire;
        let now = now.min(crate::MAX_TIME_NANOS);
        let max_wait = deadline.map_or(u64::MAX, |d| d.saturating_sub(now));
        if let Math::Bucket(_) = self.math {
            let (wait_nanos, mark) = self.reserve_n_at(word, n, max_wait, now)?;
            let step = if wait_nanos == 0 {
                Acquire::Admitted
            } else {
                Acquire::Reserved {
                    wait_nanos,
                    permit: self.permit(n, mark, tag),
                }
            };
            return Ok((step, Some(mark)));
        }
        let (d, mark) = self.check_n_at(word, n, now)?;
        if d.is_allowed() {
            return Ok((Acquire::Admitted, mark));
        }
        let wait = d.retry_after_nanos().max(1);
        if wait > max_wait {
            return Err(Error::DeadlineExceeded {
                wait: Duration::from_nanos(wait),
                max_wait: Duration::from_nanos(max_wait),
            });
        }
        Ok((Acquire::Retry { wait_nanos: wait }, None))
    }

    /// A permit for `n` reserved up to `mark`, carrying `tag` (see
    /// [`acquire_step`](Self::acquire_step)).
    pub fn permit(&self, n: u64, mark: u64, tag: u64) -> Permit {
        Permit {
            n,
            issuer: 0,
            key: tag,
            members: None,
            mark,
            aux: 0,
        }
    }

    /// Gives back a permit's tokens (one of [`permit`](Self::permit) or
    /// [`acquire_step`](Self::acquire_step)) to `word`, as far as no later
    /// taker depends on them.
    ///
    /// # Errors
    /// [`Error::ForeignPermit`], giving nothing back, unless the permit
    /// carries `tag` and was made by a rule.
    pub fn release_permit(&self, word: &AtomicU64, permit: Permit, tag: u64) -> Result<(), Error> {
        if permit.issuer != 0 || permit.key != tag {
            return Err(Error::ForeignPermit);
        }
        self.release(word, permit.mark, permit.n);
        Ok(())
    }

    /// [`release_permit`](Self::release_permit) for a token bucket with
    /// pause words: never into a pause that is on at `now`.
    ///
    /// # Errors
    /// As [`release_permit`](Self::release_permit).
    pub fn release_permit_paused(
        &self,
        word: &AtomicU64,
        pause: crate::pause::Words<'_>,
        permit: Permit,
        tag: u64,
        now: u64,
    ) -> Result<(), Error> {
        if permit.issuer != 0 || permit.key != tag {
            return Err(Error::ForeignPermit);
        }
        self.release_paused(word, pause, permit.mark, permit.n, now);
        Ok(())
    }

    /// Empties a token bucket's `word` until `now + d` ns, refilling at the
    /// rate from then on, and moves every reservation already made past the
    /// pause, in its order (see [`pause`](crate::pause) for the rule and
    /// why a waiter reading `pause` is never early): `pause` are the
    /// word's two pause words. A pause ending no later than one already on
    /// changes nothing. What it moved by, if anything, is returned.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for the windows.
    pub fn pause_at(
        &self,
        word: &AtomicU64,
        pause: crate::pause::Words<'_>,
        d: u64,
        now: u64,
    ) -> Result<Option<u64>, Error> {
        let Math::Bucket(p) = self.math else {
            return Err(Error::Unsupported {
                operation: "pause",
                algorithm: self.algorithm(),
            });
        };
        // Invariant: the state only grows here, so a pause racing a check
        // or a reservation is applied after it or before it, never half.
        Ok(pause.pause(now, d, |start, shift| {
            update(word, |w| Some(p.shift(w & STATE_MASK, start, shift)));
        }))
    }

    /// [`release`](Self::release) for a token bucket with pause words:
    /// never into a pause that is on at `now`.
    pub fn release_paused(
        &self,
        word: &AtomicU64,
        pause: crate::pause::Words<'_>,
        mark: u64,
        n: u64,
        now: u64,
    ) {
        let Math::Bucket(p) = self.math else {
            return self.release(word, mark, n);
        };
        let end = pause.ends(now);
        update(word, |w| {
            Some(p.cancel_paused(w & STATE_MASK, mark, n, end))
        });
    }

    /// How many `state` could take at `now`.
    pub fn available(&self, state: u64, now: u64) -> u64 {
        self.math
            .available(state & STATE_MASK, now.min(crate::MAX_TIME_NANOS))
    }

    /// True if `state` decides exactly like [`FRESH`](Self::FRESH) from
    /// `now` on: the key may be forgotten, its word reused.
    pub fn is_fresh(&self, state: u64, now: u64) -> bool {
        self.math
            .is_fresh(state & STATE_MASK, now.min(crate::MAX_TIME_NANOS))
    }
}
