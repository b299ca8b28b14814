//! Policies decided outside the layer ([`RemotePolicy`]): a global limit in
//! Redis (feature `redis`), a limit shared by the host's processes (feature
//! `shm`), or your own. (The response future's wait for their answers is
//! `future`'s.)

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ratebound::any::RemoteAnswer;
use ratebound::{Decision, KeyedAlgorithm};

#[cfg(doc)]
use crate::Builder;

/// A limit kept outside the layer — every instance of a service counting
/// one global limit in Redis, or every process of a host one table in
/// shared memory — added with [`Builder::remote`].
///
/// For each limited request that got a concurrency place and a key, the
/// layer asks every remote policy, in the order they were added, to take
/// one token for the request's identity — its key as every instance derives
/// it: `key:<the key>` (a key header's trimmed value, or the
/// [`RequestKey::Custom`](crate::RequestKey::Custom) closure's), `ip:<address>`
/// (IPv6 cut to its prefix) or `anonymous` — and awaits their answers
/// together, then the local policies decide (none is charged when a remote
/// one refuses) and the answer is sent. A request that a local policy
/// refuses after a remote one admitted it stays counted remotely. A request
/// whose client goes away while its checks are pending drops them (and its
/// concurrency place) unreported; a Redis check already sent may still have
/// counted.
///
/// Why this shape: a check answers one token for one key, as the core's
/// [`Gate::finish`](ratebound::any::Gate::finish) takes it; the answer is
/// [`RemoteCheck::Ready`] when it needs no I/O (shared memory, a leased
/// token), so such a policy costs no allocation and no clone of the inner
/// service, or a boxed `'static` future ([`RemoteCheck::Pending`]) that
/// owns what it needs, because the response future keeps it across
/// `await`s after the request's own borrows have ended (a Redis limiter is
/// cheap to clone: an `Arc` and the connection's handle). Errors are not a
/// case of their own: a policy answers a [`Decision`],
/// [`RemoteAnswer::Full`] (its table is full: 503, `Retry-After: 1`, as the
/// layer's own full table) or [`RemoteAnswer::Failed`] (its check failed
/// in a way its fail policy does not cover: 503 with
/// [`Builder::store_error_retry_after`], outcome `store_error`, one log
/// line per episode) — map a `Result` with [`RemoteAnswer::from_result`],
/// the rule every front door applies. Redis being down or slow is not an
/// error: its limiter's fail policy answers it.
///
/// # Examples
/// A remote policy of your own — here one that admits everyone, at once
/// (a policy that does I/O answers [`RemoteCheck::pending`] with a future):
/// ```
/// use ratebound::{Decision, KeyedAlgorithm, Quota};
/// use ratebound_http::{RateLimitLayer, RemoteCheck, RemotePolicy};
///
/// struct Everyone(Quota);
/// impl RemotePolicy for Everyone {
///     fn algorithm(&self) -> KeyedAlgorithm {
///         KeyedAlgorithm::TokenBucket(self.0)
///     }
///     fn check(&self, _scope: &str, _identity: &[u8]) -> RemoteCheck {
///         let burst = self.0.burst();
///         Decision::from_parts(true, burst, burst - 1, 0, 0).into()
///     }
/// }
/// let layer = RateLimitLayer::builder()
///     .remote("everyone", Everyone(Quota::parse("100/minute")?))
///     .build()?;
/// # Ok::<(), ratebound::Error>(())
/// ```
pub trait RemotePolicy: Send + Sync + 'static {
    /// The limit's shape: what `RateLimit-Policy` advertises for it.
    fn algorithm(&self) -> KeyedAlgorithm;

    /// One token for `identity` under the policy named `scope` (the name
    /// given to [`Builder::remote`]; a store shared by several policies
    /// keeps each one's keys apart by it).
    fn check(&self, scope: &str, identity: &[u8]) -> RemoteCheck;
}

/// A shared policy (several layers, one limiter).
impl<T: RemotePolicy + ?Sized> RemotePolicy for Arc<T> {
    fn algorithm(&self) -> KeyedAlgorithm {
        T::algorithm(self)
    }

    fn check(&self, scope: &str, identity: &[u8]) -> RemoteCheck {
        T::check(self, scope, identity)
    }
}

/// A [`RemotePolicy`]'s answer to one check: now, or once its I/O is done.
pub enum RemoteCheck {
    /// Answered at once.
    Ready(RemoteAnswer),
    /// Answered when this future completes (it is polled by the layer's
    /// response future, on the server's runtime).
    Pending(Pin<Box<dyn Future<Output = RemoteAnswer> + Send + 'static>>),
}

impl RemoteCheck {
    /// The answer of `future`, once it completes.
    pub fn pending(future: impl Future<Output = RemoteAnswer> + Send + 'static) -> RemoteCheck {
        RemoteCheck::Pending(Box::pin(future))
    }

    /// The answer, if it is known.
    fn ready(&self) -> Option<RemoteAnswer> {
        match self {
            RemoteCheck::Ready(answer) => Some(*answer),
            RemoteCheck::Pending(_) => None,
        }
    }
}

impl From<RemoteAnswer> for RemoteCheck {
    fn from(answer: RemoteAnswer) -> RemoteCheck {
        RemoteCheck::Ready(answer)
    }
}

impl From<Decision> for RemoteCheck {
    fn from(decision: Decision) -> RemoteCheck {
        RemoteCheck::Ready(decision.into())
    }
}

impl fmt::Debug for RemoteCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoteCheck::Ready(answer) => f.debug_tuple("Ready").field(answer).finish(),
            RemoteCheck::Pending(_) => f.write_str("Pending(..)"),
        }
    }
}

/// Every answer, in order, when all are known.
pub(crate) fn answers(checks: &[RemoteCheck]) -> Option<Vec<RemoteAnswer>> {
    checks.iter().map(RemoteCheck::ready).collect()
}

/// A global limit in Redis, for every instance of the service: the check
/// is one round trip in the policy's own scope
/// ([`RedisLimiter::check_in`](ratebound_redis::RedisLimiter::check_in):
/// `rb:tb@<policy>:<identity>`, so two policies on one prefix never share a
/// key), bounded by the limiter's deadline. Redis down, slow or erroring
/// is answered by the limiter's fail policy (`open`: admitted, `closed`:
/// 429 with its cool-down, `local`: the local share), never by an error —
/// as in the Python and Node middleware. An error that still escapes
/// `check_in` (a configuration error found at the first call) is
/// [`RemoteAnswer::Failed`]: 503 with `Retry-After`, never 500.
#[cfg(feature = "redis")]
impl<C> RemotePolicy for ratebound_redis::RedisLimiter<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn algorithm(&self) -> KeyedAlgorithm {
        self.engine().config().algorithm.keyed()
    }

    fn check(&self, scope: &str, identity: &[u8]) -> RemoteCheck {
        let (limiter, scope, identity) = (self.clone(), scope.to_string(), identity.to_vec());
        RemoteCheck::pending(async move {
            match limiter.check_in(&scope, &identity, 1).await {
                Ok(d) => RemoteAnswer::Decided(d.decision()),
                Err(e) => RemoteAnswer::from_result(Err(&e)),
            }
        })
    }
}

/// A limit shared by the host's processes (one file, one table; every
/// process that opens it shares each key's limit): decided at once, with
/// no I/O. The identity is the key as bytes, as the Python and Node
/// middleware check it, so their workers and this service share a table's
/// keys; the scope is not needed (the file is the policy's own). A full
/// table ([`TooManyKeys`](ratebound::Error::TooManyKeys)) answers
/// [`RemoteAnswer::Full`] — 503 with `Retry-After: 1`, never 500 — and any
/// other error of the table [`RemoteAnswer::Failed`] (none is possible for
/// one token).
#[cfg(feature = "shm")]
impl RemotePolicy for ratebound_shm::SharedKeyedLimiter {
    fn algorithm(&self) -> KeyedAlgorithm {
        ratebound_shm::SharedKeyedLimiter::algorithm(self)
    }

    fn check(&self, _scope: &str, identity: &[u8]) -> RemoteCheck {
        match ratebound_shm::SharedKeyedLimiter::check(self, ratebound::any::Key::Bytes(identity)) {
            Ok(d) => d.into(),
            Err(ratebound_shm::Error::Limit(e)) => RemoteAnswer::from_result(Err(&e)).into(),
            Err(_) => RemoteAnswer::Failed.into(),
        }
    }
}
