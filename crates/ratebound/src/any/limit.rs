//! `KeyedLimit`: a limit checked, waited on and paused per key, wherever
//! its state lives — this process, the host's shared memory, Redis — behind
//! one trait object.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::Key;
use crate::outbound::Learned;
use crate::pause::Reach;
use crate::{Decision, Error, KeyedAlgorithm};

/// A boxed, `Send` future: what a [`KeyedLimit`] held as
/// `Arc<dyn KeyedLimit>` answers with.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A limit per key that can be checked, waited on and paused, wherever its
/// state lives: the one interface the HTTP layer's remote policies and the
/// outbound adapters take (`ratebound-http`, `ratebound-client`), so that
/// neither writes its own adapter per store.
///
/// Implemented for [`TokenBucket`](crate::TokenBucket) (this process, one
/// bucket for every key; feature `tokio`), [`AnyKeyed`](super::AnyKeyed)
/// (this process, one limit per key; feature `tokio`),
/// `ratebound_shm::{SharedLimiter, SharedKeyedLimiter}` (the host's
/// processes), `ratebound_redis::RedisLimiter` (the fleet), and `Arc` of
/// any of them.
///
/// # Examples
/// A limit of your own — here one that admits everyone, at once:
/// ```
/// use ratebound::any::Key;
/// use ratebound::pause::Reach;
/// use ratebound::{BoxFuture, Decision, Error, KeyedAlgorithm, KeyedLimit, LimitCheck, Quota};
/// use std::time::Duration;
///
/// struct Everyone(Quota);
/// impl KeyedLimit for Everyone {
///     fn algorithm(&self) -> KeyedAlgorithm {
///         KeyedAlgorithm::TokenBucket(self.0)
///     }
///     fn check(&self, _scope: &str, _key: Key<'_>, n: u64) -> LimitCheck {
///         let burst = self.0.burst();
///         Ok(Decision::from_parts(true, burst, burst.saturating_sub(n), 0, 0)).into()
///     }
///     fn acquire<'a>(&'a self, _: Key<'a>, _: u64, _: Option<Duration>) -> BoxFuture<'a, Result<(), Error>> {
///         Box::pin(std::future::ready(Ok(())))
///     }
///     fn pause<'a>(&'a self, _: Key<'a>, _: Duration) -> BoxFuture<'a, Result<Reach, Error>> {
///         Box::pin(std::future::ready(Ok(Reach::Shared)))
///     }
/// }
/// let limit = Everyone(Quota::parse("100/minute")?);
/// assert!(limit.check("api", Key::Text("10.0.0.1"), 1).now().unwrap()?.is_allowed());
/// # Ok::<(), ratebound::Error>(())
/// ```
pub trait KeyedLimit: Send + Sync {
    /// The limit's shape (what `RateLimit-Policy` advertises for it; only a
    /// token bucket can be waited on and paused by the outbound adapters).
    fn algorithm(&self) -> KeyedAlgorithm;

    /// Takes `n` for `key` now if it has them (a text key and the same bytes
    /// are one key in Redis, two in a local or shared table, as in every
    /// binding). `scope` names the policy the
    /// check is for: a store shared by several policies keeps their keys
    /// apart by it (Redis: `rb:tb@<scope>:<key>`); a limit of its own (a
    /// table, a bucket) ignores it.
    ///
    /// Answered at once ([`LimitCheck::Ready`]) when no I/O is needed, else
    /// with a future that owns what it needs (it may outlive the call).
    /// Errors are the limit's own: a full table
    /// ([`TooManyKeys`](Error::TooManyKeys)), a store that refused this
    /// client ([`StoreMisconfigured`](Error::StoreMisconfigured)) or whose
    /// fail policy refused ([`StoreUnavailable`](Error::StoreUnavailable)).
    fn check(&self, scope: &str, key: Key<'_>, n: u64) -> LimitCheck;

    /// Waits until `n` for `key` are the caller's, or fails at once, taking
    /// nothing, if that would take longer than `timeout` (`None`: as long as
    /// it takes). Dropped before it is over, it gives back what it holds.
    ///
    /// # Errors
    /// [`Error::DeadlineExceeded`] for a wait beyond `timeout`,
    /// [`Error::InsufficientCapacity`] for `n` above the burst, and the
    /// store's errors as for [`check`](Self::check).
    fn acquire<'a>(
        &'a self,
        key: Key<'a>,
        n: u64,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), Error>>;

    /// Empties `key`'s limit until `d` from now, for everyone sharing it;
    /// waiters already in line move past the pause. A pause that ends no
    /// later than one already on changes nothing. Where it took hold:
    /// [`Reach::Shared`], or [`Reach::Local`] when the store could not be
    /// told (Redis unreachable; a Redis limiter failing `local` pauses its
    /// local share) — the caller then keeps the pause in this process too.
    ///
    /// # Errors
    /// The limit's: a shared table with no slot left for the key, an
    /// algorithm that cannot be paused ([`Error::Unsupported`]).
    fn pause<'a>(&'a self, key: Key<'a>, d: Duration) -> BoxFuture<'a, Result<Reach, Error>>;

    /// Whether this limit keeps what outbound adapters learn of a
    /// partner's real limit ([`learned`](Self::learned),
    /// [`adapt`](Self::adapt)); `false` by default: an adapter then does
    /// not learn (and refuses to be told to).
    fn learns(&self) -> bool {
        false
    }

    /// Whether a wait ([`acquire`](Self::acquire)) holds a place priced
    /// when it is taken — a slot in the line of a bucket that reserves —
    /// rather than taking its tokens only when they are due (a limit that
    /// decides again after each sleep); `true` by default. An outbound
    /// adapter asks again for tokens priced before a cut only where they
    /// were ([`Caller::taking_when_due`](crate::outbound::Caller::taking_when_due)).
    fn reserves(&self) -> bool {
        true
    }

    /// What the adapters sharing this limit have learned for `key` (the
    /// word an adapter's learning starts from when it sends), without I/O:
    /// a store across the network answers with what its last reply for
    /// the key said. The fresh word (nothing learned: the limit as
    /// configured) by default.
    fn learned(&self, key: Key<'_>) -> Learned {
        let _ = key;
        Learned::fresh()
    }

    /// Replaces `key`'s learned word `seen` with `next` for everyone
    /// sharing the limit, if it is still `seen` (a compare-and-swap: of
    /// the fifty instances proposing a change from one word, one wins);
    /// the limit then runs at `next`'s share of its configured quota
    /// ([`Learned::scale`]). `Ok(true)` when replaced.
    ///
    /// # Errors
    /// The store's; [`Error::Unsupported`] by default.
    fn adapt<'a>(
        &'a self,
        key: Key<'a>,
        seen: Learned,
        next: Learned,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        let _ = (key, seen, next);
        Box::pin(std::future::ready(Err(Error::Unsupported {
            operation: "adapt (learning a partner's limit)",
            algorithm: "this limit",
        })))
    }
}

/// A [`KeyedLimit::check`]'s answer: now, or once its I/O is done.
pub enum LimitCheck {
    /// Answered at once.
    Ready(Result<Decision, Error>),
    /// Answered when this future completes.
    Pending(BoxFuture<'static, Result<Decision, Error>>),
}

impl LimitCheck {
    /// The answer of `future`, once it completes.
    pub fn pending(
        future: impl Future<Output = Result<Decision, Error>> + Send + 'static,
    ) -> LimitCheck {
        LimitCheck::Pending(Box::pin(future))
    }

    /// The answer if it is known now (`None`: it is pending).
    pub fn now(self) -> Option<Result<Decision, Error>> {
        match self {
            LimitCheck::Ready(answer) => Some(answer),
            LimitCheck::Pending(_) => None,
        }
    }

    /// The answer, waiting for it if it is pending.
    pub async fn answer(self) -> Result<Decision, Error> {
        match self {
            LimitCheck::Ready(answer) => answer,
            LimitCheck::Pending(future) => future.await,
        }
    }
}

impl From<Result<Decision, Error>> for LimitCheck {
    fn from(answer: Result<Decision, Error>) -> LimitCheck {
        LimitCheck::Ready(answer)
    }
}

impl fmt::Debug for LimitCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitCheck::Ready(answer) => f.debug_tuple("Ready").field(answer).finish(),
            LimitCheck::Pending(_) => f.write_str("Pending(..)"),
        }
    }
}

/// A shared limit (several layers or adapters, one limiter).
impl<L: KeyedLimit + ?Sized> KeyedLimit for Arc<L> {
    fn algorithm(&self) -> KeyedAlgorithm {
        (**self).algorithm()
    }

    fn check(&self, scope: &str, key: Key<'_>, n: u64) -> LimitCheck {
        (**self).check(scope, key, n)
    }

    fn acquire<'a>(
        &'a self,
        key: Key<'a>,
        n: u64,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        (**self).acquire(key, n, timeout)
    }

    fn pause<'a>(&'a self, key: Key<'a>, d: Duration) -> BoxFuture<'a, Result<Reach, Error>> {
        (**self).pause(key, d)
    }

    fn learns(&self) -> bool {
        (**self).learns()
    }

    fn reserves(&self) -> bool {
        (**self).reserves()
    }

    fn learned(&self, key: Key<'_>) -> Learned {
        (**self).learned(key)
    }

    fn adapt<'a>(
        &'a self,
        key: Key<'a>,
        seen: Learned,
        next: Learned,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        (**self).adapt(key, seen, next)
    }
}

/// One bucket for every key (the key and the scope are ignored): checks
/// with [`TokenBucket::check_n`](crate::TokenBucket::check_n), waits with
/// [`TokenBucket::wait_n`](crate::TokenBucket::wait_n) on tokio's timer,
/// pauses with [`TokenBucket::pause`](crate::TokenBucket::pause).
#[cfg(feature = "tokio")]
impl<C: crate::Clock> KeyedLimit for crate::TokenBucket<C> {
    fn algorithm(&self) -> KeyedAlgorithm {
        // The quota set, not the share of it learned.
        KeyedAlgorithm::TokenBucket(self.ceiling())
    }

    fn check(&self, _scope: &str, _key: Key<'_>, n: u64) -> LimitCheck {
        self.check_n(n).into()
    }

    fn acquire<'a>(
        &'a self,
        _key: Key<'a>,
        n: u64,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(self.wait_n(n, timeout.unwrap_or(Duration::MAX)))
    }

    fn pause<'a>(&'a self, _key: Key<'a>, d: Duration) -> BoxFuture<'a, Result<Reach, Error>> {
        crate::TokenBucket::pause(self, d);
        Box::pin(std::future::ready(Ok(Reach::Shared)))
    }

    fn learns(&self) -> bool {
        true
    }

    fn learned(&self, _key: Key<'_>) -> Learned {
        crate::TokenBucket::learned(self)
    }

    fn adapt<'a>(
        &'a self,
        _key: Key<'a>,
        seen: Learned,
        next: Learned,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(std::future::ready(Ok(crate::TokenBucket::adapt(
            self, seen, next,
        ))))
    }
}

/// One limit per key in this process (the scope is not needed: the limiter
/// is the policy's own): checks decide at once; a wait decides again after
/// each sleep on tokio's timer, holding nothing meanwhile (a key's state may
/// be evicted); pauses and what outbound adapters learn are the key's.
#[cfg(feature = "tokio")]
impl KeyedLimit for super::AnyKeyed {
    fn algorithm(&self) -> KeyedAlgorithm {
        self.keyed_algorithm()
    }

    fn check(&self, _scope: &str, key: Key<'_>, n: u64) -> LimitCheck {
        self.check_n(key, n).into()
    }

    fn acquire<'a>(
        &'a self,
        key: Key<'a>,
        n: u64,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
            let deadline = timeout.map(|t| self.now().saturating_add(nanos(t)));
            let max_sleep = self.inner().clock().max_sleep();
            loop {
                match self.acquire_step(key, n, deadline, self.now())? {
                    crate::limiter::Acquire::Retry { wait_nanos } => {
                        let d = Duration::from_nanos(wait_nanos.min(max_sleep));
                        tokio::time::sleep(d).await;
                    }
                    _ => return Ok(()),
                }
            }
        })
    }

    fn pause<'a>(&'a self, key: Key<'a>, d: Duration) -> BoxFuture<'a, Result<Reach, Error>> {
        let fingerprint = self.fingerprint(key);
        let paused = self.inner().pause_at(&fingerprint, d, self.now());
        Box::pin(std::future::ready(paused.map(|()| Reach::Shared)))
    }

    /// A token bucket learns, per key.
    fn learns(&self) -> bool {
        matches!(self.keyed_algorithm(), KeyedAlgorithm::TokenBucket(_))
    }

    /// A wait takes its tokens only when they are due.
    fn reserves(&self) -> bool {
        false
    }

    fn learned(&self, key: Key<'_>) -> Learned {
        super::AnyKeyed::learned(self, key)
    }

    fn adapt<'a>(
        &'a self,
        key: Key<'a>,
        seen: Learned,
        next: Learned,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(std::future::ready(super::AnyKeyed::adapt(
            self, key, seen, next,
        )))
    }
}
