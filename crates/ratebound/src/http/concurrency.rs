//! The concurrency cap: requests in flight, for load shedding.

use crate::Error;

/// A cap on requests in flight, for load shedding: a request either gets a
/// place at once or is refused at once (503 with `Retry-After: 1` in the
/// front doors) — it never waits, so there is no queue to grow. Lock-free:
/// one atomic count, model-checked with loom.
///
/// # Examples
/// ```
/// use ratebound::http::ConcurrencyCap;
///
/// let cap = ConcurrencyCap::new(2)?;
/// assert!(cap.try_enter());
/// assert!(cap.try_enter());
/// assert!(!cap.try_enter()); // full: shed this one
/// cap.leave();
/// assert!(cap.try_enter());
/// # Ok::<(), ratebound::Error>(())
/// ```
#[derive(Debug)]
pub struct ConcurrencyCap {
    limit: usize,
    in_use: crate::sync::AtomicUsize,
}

impl ConcurrencyCap {
    /// At most `limit` requests in flight.
    ///
    /// # Errors
    /// [`Error::InvalidLimit`] for 0.
    pub fn new(limit: usize) -> Result<ConcurrencyCap, Error> {
        if limit == 0 {
            return Err(Error::InvalidLimit {
                limit: 0,
                max: u64::try_from(usize::MAX).unwrap_or(u64::MAX),
            });
        }
        Ok(ConcurrencyCap {
            limit,
            in_use: crate::sync::AtomicUsize::new(0),
        })
    }

    /// Takes a place if one is free; `false` when the cap is reached. A
    /// `true` must be paired with one [`leave`](Self::leave).
    #[inline]
    pub fn try_enter(&self) -> bool {
        use crate::sync::Ordering;
        // Ordering: Acquire pairs with leave()'s Release: what the previous
        // holder of the place did happens before this request runs. The
        // count itself is exact (one read-modify-write at a time), so never
        // more than `limit` places are out.
        self.in_use
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .is_ok()
    }

    /// Gives back a place taken by [`try_enter`](Self::try_enter). An
    /// unpaired call is ignored rather than wrapping the count.
    #[inline]
    pub fn leave(&self) {
        use crate::sync::Ordering;
        // Ordering: Release — what the request did happens before its place
        // is seen free.
        let _ = self
            .in_use
            .fetch_update(Ordering::Release, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_use.load(crate::sync::Ordering::Relaxed)
    }

    /// The cap.
    pub fn limit(&self) -> usize {
        self.limit
    }
}
