//! [`Table`]: the mapped file's words (the header, then slots of
//! [`SLOT_WORDS`] words) and their accessors.

use std::path::PathBuf;

use ratebound::any::Fingerprinter;
use ratebound::pause;
use ratebound::{KeyedAlgorithm, WordRule};

use crate::file::HEADER;
use crate::map::Region;
use crate::sync::AtomicU64;

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

/// A slot's words: the key's fingerprint, its state, and a token bucket's
/// two pause words (the end of the latest pause, the sum of its shifts).
const SLOT_WORDS: usize = 4;

pub(crate) fn words_for(slots: usize) -> Option<usize> {
    slots.checked_mul(SLOT_WORDS)?.checked_add(HEADER)
}
