//! The shared limiters as [`KeyedLimit`]s (feature `tokio`: a wait sleeps
//! on tokio's timer), for the HTTP layer's remote policies and the outbound
//! adapters.

use std::time::Duration;

use ratebound::any::Key;
use ratebound::outbound::Learned;
use ratebound::pause::Reach;
use ratebound::{BoxFuture, Decision, KeyedAlgorithm, KeyedLimit, LimitCheck};

use crate::{Error, SharedKeyedLimiter, SharedLimiter};

/// The core's error for a table's: a limit's own error as it is; the
/// file's (never seen from a table that opened, in practice) as the store
/// being unavailable, named.
fn core(e: Error) -> ratebound::Error {
    match e {
        Error::Limit(e) => e,
        other => ratebound::Error::StoreUnavailable {
            cause: format!("the shared table failed: {other}"),
            retry_after: Duration::from_secs(1),
        },
    }
}

fn ready<T: Send + 'static>(
    r: Result<T, Error>,
) -> BoxFuture<'static, Result<T, ratebound::Error>> {
    Box::pin(std::future::ready(r.map_err(core)))
}

fn decided(r: Result<Decision, Error>) -> LimitCheck {
    r.map_err(core).into()
}

/// One limit for every key (the key and the scope are ignored), shared by
/// this host's processes: decided at once, with no I/O.
impl KeyedLimit for SharedLimiter {
    fn algorithm(&self) -> KeyedAlgorithm {
        SharedLimiter::algorithm(self)
    }

    fn check(&self, _scope: &str, _key: Key<'_>, n: u64) -> LimitCheck {
        decided(self.check_n(n))
    }

    fn acquire<'a>(
        &'a self,
        _key: Key<'a>,
        n: u64,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), ratebound::Error>> {
        Box::pin(async move { SharedLimiter::acquire(self, n, timeout).await.map_err(core) })
    }

    fn pause<'a>(
        &'a self,
        _key: Key<'a>,
        d: Duration,
    ) -> BoxFuture<'a, Result<Reach, ratebound::Error>> {
        ready(SharedLimiter::pause(self, d).map(|()| Reach::Shared))
    }

    /// A token bucket learns: every process's adapters share the file's
    /// learned word.
    fn learns(&self) -> bool {
        matches!(
            SharedLimiter::algorithm(self),
            KeyedAlgorithm::TokenBucket(_)
        )
    }

    fn learned(&self, _key: Key<'_>) -> Learned {
        SharedLimiter::learned(self)
    }

    fn adapt<'a>(
        &'a self,
        _key: Key<'a>,
        seen: Learned,
        next: Learned,
    ) -> BoxFuture<'a, Result<bool, ratebound::Error>> {
        ready(SharedLimiter::adapt(self, seen, next))
    }
}

/// One limit per key, shared by this host's processes: decided at once,
/// with no I/O. A key is the same key as in every binding (the HTTP layer
/// checks an identity as bytes, as the Python and Node middleware do; an
/// outbound adapter a host as text, as theirs do), so their workers and a
/// Rust service share a table's keys; the scope is not needed (the file is
/// the policy's own). A full table answers
/// [`TooManyKeys`](ratebound::Error::TooManyKeys).
impl KeyedLimit for SharedKeyedLimiter {
    fn algorithm(&self) -> KeyedAlgorithm {
        SharedKeyedLimiter::algorithm(self)
    }

    fn check(&self, _scope: &str, key: Key<'_>, n: u64) -> LimitCheck {
        decided(self.check_n(key, n))
    }

    fn acquire<'a>(
        &'a self,
        key: Key<'a>,
        n: u64,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), ratebound::Error>> {
        Box::pin(async move {
            SharedKeyedLimiter::acquire(self, key, n, timeout)
                .await
                .map_err(core)
        })
    }

    fn pause<'a>(
        &'a self,
        key: Key<'a>,
        d: Duration,
    ) -> BoxFuture<'a, Result<Reach, ratebound::Error>> {
        ready(SharedKeyedLimiter::pause(self, key, d).map(|()| Reach::Shared))
    }

    /// A token bucket learns, per key: every process's adapters share the
    /// key's learned word in its slot.
    fn learns(&self) -> bool {
        matches!(
            SharedKeyedLimiter::algorithm(self),
            KeyedAlgorithm::TokenBucket(_)
        )
    }

    fn learned(&self, key: Key<'_>) -> Learned {
        SharedKeyedLimiter::learned(self, key)
    }

    fn adapt<'a>(
        &'a self,
        key: Key<'a>,
        seen: Learned,
        next: Learned,
    ) -> BoxFuture<'a, Result<bool, ratebound::Error>> {
        ready(SharedKeyedLimiter::adapt(self, key, seen, next))
    }
}
