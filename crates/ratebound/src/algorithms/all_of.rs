//! Several limiters checked as one, all or nothing.

use std::sync::Arc;

use crate::limiter::{Limiter, Permit};
use crate::{Decision, Error};

/// Permits held inline for this many members before spilling to the heap.
const INLINE: usize = 8;

/// Several limiters as one: a request is admitted only if **every** member
/// admits it — e.g. 10/s burst 20 *and* 1000/hour, or requests per minute
/// *and* tokens per minute for an LLM API.
///
/// Members are asked in order with [`Limiter::acquire_n_at`]; if one refuses,
/// the members that had admitted give their share back with
/// [`Limiter::release`], so nothing is taken (for a token bucket, give-back
/// follows [`Reservation::cancel`](crate::Reservation::cancel)'s rule). The
/// decision reports the most restrictive member: on a refusal the largest
/// `retry_after` among the members that would refuse (so waiting that long
/// satisfies all of them, if no one else takes meanwhile), and always the
/// smallest `remaining` (with that member's `limit`) and the largest
/// `reset_after` — on a refusal, of the state it leaves, after the give-back. Every member is judged at the same instant: the first
/// member's clock reading.
///
/// Members are shared (`Arc`), so one limiter can sit in several composites,
/// e.g. a per-route limit and a global one. An `AllOf` nested in another
/// rolls back like any member: its permit holds its members' permits.
///
/// # Examples
/// ```
/// use ratebound::{AllOf, FixedWindow, Limiter, ManualClock, Quota, TokenBucket};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let burst = Arc::new(TokenBucket::with_clock(Quota::parse("10/s burst 20")?, clock.clone()));
/// let hourly = Arc::new(FixedWindow::with_clock(25, Duration::from_secs(3600), clock.clone())?);
/// let both = AllOf::new(vec![burst.clone(), hourly.clone()])?;
///
/// assert!(both.check_n(20)?.is_allowed());
/// clock.advance(Duration::from_secs(1)); // the bucket has 10 again
/// let refused = both.check_n(10)?; // the hour has only 5 left
/// assert!(!refused.is_allowed());
/// assert_eq!(burst.available(), 10); // the bucket's share was given back
/// // The refusal describes the state it leaves: the hour's 5 are the fewest.
/// assert_eq!(refused.remaining(), 5);
/// # Ok::<(), ratebound::Error>(())
/// ```
pub struct AllOf {
    /// This composite's id (see [`Permit`]).
    id: u64,
    members: Vec<Arc<dyn Limiter>>,
}

impl AllOf {
    /// A composite of `members`, checked in this order.
    ///
    /// # Errors
    /// [`Error::NoLimiters`] for an empty list.
    pub fn new(members: Vec<Arc<dyn Limiter>>) -> Result<AllOf, Error> {
        if members.is_empty() {
            return Err(Error::NoLimiters);
        }
        Ok(AllOf {
            id: crate::sync::next_issuer(),
            members,
        })
    }

    /// The members, in the order they are checked.
    pub fn members(&self) -> &[Arc<dyn Limiter>] {
        &self.members
    }

    /// Gives back what members `..upto` took.
    fn roll_back(&self, held: &mut [Option<Permit>]) {
        for (member, permit) in self.members.iter().zip(held).rev() {
            if let Some(permit) = permit.take() {
                member.release(permit);
            }
        }
    }

    fn acquire_with(
        &self,
        n: u64,
        now: u64,
        held: &mut [Option<Permit>],
    ) -> Result<Decision, Error> {
        let mut combined: Option<Decision> = None;
        for (i, member) in self.members.iter().enumerate() {
            match member.acquire_n_at(n, now) {
                Ok((decision, permit)) if decision.is_allowed() => {
                    held[i] = permit;
                    combined = Some(merge(combined, decision));
                }
                Ok((refusal, _)) => {
                    self.roll_back(&mut held[..i]);
                    // The answer describes the state the refusal leaves: the
                    // members that had admitted as they are after giving
                    // back (a request for nothing takes nothing and reports
                    // it), the refusing one as it is (a refusal writes
                    // nothing), and the members not yet asked as they are,
                    // with the wait they would impose.
                    let mut combined = refusal;
                    for earlier in &self.members[..i] {
                        combined = merge(Some(combined), earlier.peek_n_at(0, now)?);
                    }
                    for later in &self.members[i + 1..] {
                        let state = later.peek_n_at(0, now)?;
                        let would = later.peek_n_at(n, now)?;
                        combined =
                            merge(Some(combined), state.with_retry(would.retry_after_nanos()));
                    }
                    return Ok(combined.refused());
                }
                Err(e) => {
                    self.roll_back(&mut held[..i]);
                    return Err(e);
                }
            }
        }
        // `members` is never empty.
        Ok(combined.unwrap_or(REFUSED))
    }
}

/// Only reachable if `members` were empty, which `new` rules out.
const REFUSED: Decision = Decision::counted(false, 0, 0, u64::MAX, 0);

/// The more restrictive combination of two members' decisions.
fn merge(acc: Option<Decision>, d: Decision) -> Decision {
    let Some(acc) = acc else { return d };
    let tighter = if fewer_remaining(d, acc) { d } else { acc };
    Decision::new(
        acc.is_allowed() && d.is_allowed(),
        tighter.limit,
        tighter.slack(),
        tighter.unit,
        acc.retry_after_nanos().max(d.retry_after_nanos()),
        acc.reset_after_nanos().max(d.reset_after_nanos()),
    )
}

/// `a.remaining() < b.remaining()` without dividing: remaining is
/// `min(slack, limit·unit) / unit`, compared by cross-multiplying.
fn fewer_remaining(a: Decision, b: Decision) -> bool {
    let capped = |d: Decision| u128::from(d.slack()).min(u128::from(d.limit) * u128::from(d.unit));
    capped(a) * u128::from(b.unit) < capped(b) * u128::from(a.unit)
}

impl Limiter for AllOf {
    fn now(&self) -> u64 {
        self.members[0].now()
    }

    /// The smallest member limit.
    fn limit(&self) -> u64 {
        self.members.iter().map(|m| m.limit()).min().unwrap_or(0)
    }

    fn check_at(&self, now: u64) -> Decision {
        // Every member's limit is at least 1 for ratebound's limiters; a
        // custom member that errors on n = 1 makes the composite refuse.
        self.check_n_at(1, now).unwrap_or(REFUSED)
    }

    fn peek_n_at(&self, n: u64, now: u64) -> Result<Decision, Error> {
        let mut combined = None;
        for member in &self.members {
            combined = Some(merge(combined, member.peek_n_at(n, now)?));
        }
        Ok(combined.unwrap_or(REFUSED))
    }

    fn check_n_at(&self, n: u64, now: u64) -> Result<Decision, Error> {
        // No permit to hand out: the members' permits stay on the stack.
        if self.members.len() <= INLINE {
            self.acquire_with(n, now, &mut [const { None }; INLINE])
        } else {
            self.acquire_n_at(n, now).map(|(d, _)| d)
        }
    }

    fn acquire_n_at(&self, n: u64, now: u64) -> Result<(Decision, Option<Permit>), Error> {
        let mut held: Vec<Option<Permit>> = std::iter::repeat_with(|| None)
            .take(self.members.len())
            .collect();
        let decision = self.acquire_with(n, now, &mut held)?;
        // An admission's permit holds every member's: giving it back gives
        // each back, so an `AllOf` nested in another rolls back too.
        let permit = decision.is_allowed().then(|| Permit {
            n,
            issuer: self.id,
            key: 0,
            members: Some(held.into_boxed_slice()),
            mark: 0,
            aux: 0,
        });
        Ok((decision, permit))
    }

    /// Gives every member's share back, last member first.
    fn try_release(&self, permit: Permit) -> Result<(), Error> {
        if permit.issuer != self.id {
            return Err(Error::ForeignPermit);
        }
        let mut held = permit.members.map(Vec::from).unwrap_or_default();
        self.roll_back(&mut held);
        Ok(())
    }

    fn available_at(&self, now: u64) -> u64 {
        self.members
            .iter()
            .map(|m| m.available_at(now))
            .min()
            .unwrap_or(0)
    }
}

impl std::fmt::Debug for AllOf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllOf")
            .field("members", &self.members.len())
            .finish()
    }
}
