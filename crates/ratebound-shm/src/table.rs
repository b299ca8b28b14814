//! [`Table`]: the mapped file's words (the header, then slots of
//! [`SLOT_WORDS`] words) and their accessors.

use std::path::PathBuf;

use ratebound::any::Fingerprinter;
use ratebound::outbound::{FULL, Learned};
use ratebound::pause;
use ratebound::{KeyedAlgorithm, Quota, WordRule};

use crate::file::HEADER;
use crate::map::Region;
use crate::sync::{AtomicU64, Ordering};

/// The methods a limiter over a [`Table`] (its fields `table` and `clock`)
/// shares: `path`, `limit`, `algorithm` and `waiter`.
macro_rules! table_methods {
    () => {
        /// The file.
        pub fn path(&self) -> &std::path::Path {
            &self.table.path
        }

        /// The most one check can take.
        pub fn limit(&self) -> u64 {
            self.table.rule.limit()
        }

        /// The algorithm and its parameters.
        pub fn algorithm(&self) -> ratebound::KeyedAlgorithm {
            self.table.algorithm
        }

        /// A wait for `n` (of any one key, on a keyed table) starting now,
        /// failing at once (taking nothing) if it cannot end within
        /// `timeout` seconds (`None`: no deadline), sleeping at most
        /// `host_max_sleep` ns at a time: the core's [`Waiter`], for a
        /// binding's event loop to drive with [`wait_step`](Self::wait_step).
        ///
        /// # Errors
        /// [`Error::Limit`](crate::Error::Limit) with `InvalidNumber` for a
        /// bad `timeout`.
        pub fn waiter(
            &self,
            n: u64,
            timeout: Option<f64>,
            host_max_sleep: u64,
        ) -> Result<Waiter, crate::Error> {
            Ok(Waiter::new(n, timeout, self.clock.now(), host_max_sleep)?)
        }
    };
}
pub(crate) use table_methods;

/// The mapped file: header and slots.
// Made by `Table::open` (file.rs), which makes or checks the file.
pub(crate) struct Table {
    pub(crate) region: Region,
    pub(crate) path: PathBuf,
    /// The rule of the configured algorithm (a token bucket's ceiling).
    pub(crate) rule: WordRule,
    pub(crate) algorithm: KeyedAlgorithm,
    /// Slots (of [`SLOT_WORDS`] words) after the header.
    pub(crate) slots: usize,
    pub(crate) fingerprints: Fingerprinter,
}

impl Table {
    #[inline]
    fn words(&self) -> &[AtomicU64] {
        self.region.words()
    }

    #[inline]
    pub(crate) fn fingerprint(&self, i: usize) -> &AtomicU64 {
        &self.words()[HEADER + SLOT_WORDS * i]
    }

    #[inline]
    pub(crate) fn state(&self, i: usize) -> &AtomicU64 {
        &self.words()[HEADER + SLOT_WORDS * i + 1]
    }

    /// Slot `i`'s learned word: what the outbound adapters learned of a
    /// partner's limit ([`Learned`], as bits; 0, fresh, in a new slot).
    #[inline]
    pub(crate) fn learned(&self, i: usize) -> &AtomicU64 {
        &self.words()[HEADER + SLOT_WORDS * i + 4]
    }

    /// The configured quota of a token bucket (the ceiling of what is
    /// learned); `None` for a window, which does not learn.
    #[inline]
    pub(crate) fn ceiling(&self) -> Option<Quota> {
        match self.algorithm {
            KeyedAlgorithm::TokenBucket(q) => Some(q),
            _ => None,
        }
    }

    /// The rule slot `i` decides by: a token bucket's at the share of its
    /// ceiling that the slot's learned word holds
    /// ([`Learned::scale`]). A word at the full fraction — fresh, the hot
    /// path — is the configured rule as it is: one more load of a word in
    /// the slot's cache line. Any other word (a damaged one too) is read
    /// into bounds by [`Learned::from_bits`] and scaled: never above the
    /// ceiling.
    #[inline]
    pub(crate) fn rule_at(&self, i: usize) -> WordRule {
        let Some(ceiling) = self.ceiling() else {
            return self.rule;
        };
        // Ordering: Relaxed — the word is a value on its own (a quota to
        // decide at), published with nothing else; an adapt racing a
        // decision is seen by it or by the next one.
        let learned = Learned::from_bits(self.learned(i).load(Ordering::Relaxed));
        if learned.fraction_units() >= FULL {
            return self.rule;
        }
        scaled_rule(learned, ceiling, self.rule)
    }
}

/// What a window says when told to learn: only a token bucket does.
pub(crate) fn cannot_learn(algorithm: KeyedAlgorithm) -> ratebound::Error {
    ratebound::Error::Unsupported {
        operation: "adapt (learning a partner's limit: a token bucket learns)",
        algorithm: algorithm.name(),
    }
}

/// Replaces the learned `word` by `next` if it reads as `seen` (one
/// compare-and-swap from the bits it holds): a word a damaged file holds
/// out of bounds reads as what [`Learned::from_bits`] makes of it, so the
/// adapters that saw that can still replace it.
pub(crate) fn swap_learned(word: &AtomicU64, seen: Learned, next: Learned) -> bool {
    // Ordering: Acquire — pairs with the exchange that wrote the word.
    let mut held = word.load(Ordering::Acquire);
    loop {
        if Learned::from_bits(held) != seen {
            return false;
        }
        // Ordering: AcqRel/Acquire — one exchange from the bits read.
        match word.compare_exchange(held, next.to_bits(), Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            // Changed meanwhile: compared again (another adapter's word
            // differs from `seen`, so this ends).
            Err(now) => held = now,
        }
    }
}

/// The rule of `ceiling` scaled by `learned`: out of line, so that the
/// fresh path inlined into every decision stays a load and a compare.
#[inline(never)]
fn scaled_rule(learned: Learned, ceiling: Quota, configured: WordRule) -> WordRule {
    // A token bucket's rule is always valid; the configured one (the
    // ceiling) would be the answer to a quota the core refused, never a
    // rate above it.
    WordRule::new(KeyedAlgorithm::TokenBucket(learned.scale(ceiling))).unwrap_or(configured)
}

impl Table {
    /// Slot `i`'s pause words: written by a pause, read by waiters when
    /// they wake (see [`ratebound::pause`]); checks never touch them.
    #[inline]
    pub(crate) fn pause(&self, i: usize) -> pause::Words<'_> {
        let w = &self.words()[HEADER + SLOT_WORDS * i + 2..HEADER + SLOT_WORDS * i + 4];
        pause::Words {
            end: &w[0],
            shifted: &w[1],
        }
    }
}

/// A slot's words: the key's fingerprint, its state, a token bucket's two
/// pause words (the end of the latest pause, the sum of its shifts), its
/// learned word, and three words unused (zero): a slot is one 64-byte
/// cache line (the header is two), so a decision touches one line and two
/// keys never share one (layout version 3).
pub(crate) const SLOT_WORDS: usize = 8;

pub(crate) fn words_for(slots: usize) -> Option<usize> {
    slots.checked_mul(SLOT_WORDS)?.checked_add(HEADER)
}
