//! One key decided by several keyed limiters (a middleware's policies) all
//! or nothing: what the others took is given back when one refuses.

use std::hash::Hash;

use crate::clock::Clock;
use crate::{Decision, Error};

use super::KeyedLimiter;

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, C> {
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
        Self::check_rest(
            &mut limiters.into_iter(),
            (0, false),
            key,
            n,
            now,
            &mut each,
        )
    }

    /// The rest of a [`check_all_with`](Self::check_all_with) from limiter
    /// `index` on (`refused`: an earlier limiter refused): each level of
    /// the recursion holds its limiter's permit on the stack until the
    /// later limiters have decided, and gives it back if any limiter,
    /// earlier or later, refused or failed — in reverse order, as a list
    /// of permits would, without one.
    pub(super) fn check_rest<'a, F: FnMut(usize, Decision)>(
        limiters: &mut impl Iterator<Item = &'a Self>,
        (index, refused): (usize, bool),
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
        let refused = refused || !decision.is_allowed();
        let rest = Self::check_rest(limiters, (index + 1, refused), key, n, now, each);
        let admitted = !refused && matches!(rest, Ok(true));
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
}
