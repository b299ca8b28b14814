//! The limiters the adapters wait on and pause.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ratebound::outbound::Reach;
use ratebound::{Clock, TokenBucket};

use crate::Error;

/// A boxed, `Send` future (the adapters hold a limiter as
/// `Arc<dyn OutboundLimiter>`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A limiter the adapters wait on before each sending and pause when a
/// partner asks: a token bucket, local or shared.
///
/// Implemented for [`TokenBucket`] (this process; the key is ignored),
/// `ratebound_shm::SharedLimiter` and `SharedKeyedLimiter` (this host's
/// processes; feature `shm`), `ratebound_redis::RedisLimiter` (the fleet;
/// feature `redis`) and `Arc` of any of them. A window cannot be paused,
/// so the adapters refuse one when they are built (see
/// [`algorithm`](Self::algorithm)).
pub trait OutboundLimiter: Send + Sync {
    /// The algorithm's name: `"token_bucket"`, `"fixed_window"`, ... Only a
    /// `"token_bucket"` is accepted by the adapters.
    fn algorithm(&self) -> &'static str;

    /// Waits until `n` tokens for `key` are the caller's, or fails at
    /// once, taking nothing, if that would take longer than `timeout`
    /// (`None`: as long as it takes). Dropped before it is over, it gives
    /// back what it holds.
    ///
    /// # Errors
    /// The limiter's: [`ratebound::Error::DeadlineExceeded`] for a wait
    /// beyond `timeout`, [`ratebound::Error::InsufficientCapacity`] for `n`
    /// above the burst.
    fn acquire<'a>(
        &'a self,
        key: &'a str,
        n: u64,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), Error>>;

    /// Empties `key`'s bucket until `d` from now, for everyone sharing it;
    /// waiters already in line move past the pause. A pause that ends no
    /// later than one already on changes nothing. Where it took hold:
    /// [`Reach::Shared`], or [`Reach::Local`] when the limiter's store
    /// could not be told (Redis unreachable; a Redis limiter failing
    /// `local` then pauses its local share) — the adapter then keeps the
    /// pause in this process too.
    ///
    /// # Errors
    /// The limiter's (a shared table with no slot left for the key): the
    /// adapter keeps the pause in this process.
    fn pause<'a>(&'a self, key: &'a str, d: Duration) -> BoxFuture<'a, Result<Reach, Error>>;
}

impl<L: OutboundLimiter + ?Sized> OutboundLimiter for Arc<L> {
    fn algorithm(&self) -> &'static str {
        (**self).algorithm()
    }

    fn acquire<'a>(
        &'a self,
        key: &'a str,
        n: u64,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        (**self).acquire(key, n, timeout)
    }

    fn pause<'a>(&'a self, key: &'a str, d: Duration) -> BoxFuture<'a, Result<Reach, Error>> {
        (**self).pause(key, d)
    }
}

/// One bucket for every key (the key is ignored): waits with
/// [`TokenBucket::wait_n`], pauses with [`TokenBucket::pause`].
impl<C: Clock> OutboundLimiter for TokenBucket<C> {
    fn algorithm(&self) -> &'static str {
        "token_bucket"
    }

    fn acquire<'a>(
        &'a self,
        _key: &'a str,
        n: u64,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            self.wait_n(n, timeout.unwrap_or(Duration::MAX))
                .await
                .map_err(Error::from)
        })
    }

    fn pause<'a>(&'a self, _key: &'a str, d: Duration) -> BoxFuture<'a, Result<Reach, Error>> {
        TokenBucket::pause(self, d);
        Box::pin(std::future::ready(Ok(Reach::Shared)))
    }
}

/// One limit for every key (the key is ignored), shared by this host's
/// processes.
#[cfg(feature = "shm")]
impl OutboundLimiter for ratebound_shm::SharedLimiter {
    fn algorithm(&self) -> &'static str {
        ratebound_shm::SharedLimiter::algorithm(self).name()
    }

    fn acquire<'a>(
        &'a self,
        _key: &'a str,
        n: u64,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            ratebound_shm::SharedLimiter::acquire(self, n, timeout)
                .await
                .map_err(Error::from)
        })
    }

    fn pause<'a>(&'a self, _key: &'a str, d: Duration) -> BoxFuture<'a, Result<Reach, Error>> {
        let paused = ratebound_shm::SharedLimiter::pause(self, d)
            .map(|()| Reach::Shared)
            .map_err(Error::from);
        Box::pin(std::future::ready(paused))
    }
}

/// One limit per key, shared by this host's processes.
#[cfg(feature = "shm")]
impl OutboundLimiter for ratebound_shm::SharedKeyedLimiter {
    fn algorithm(&self) -> &'static str {
        ratebound_shm::SharedKeyedLimiter::algorithm(self).name()
    }

    fn acquire<'a>(
        &'a self,
        key: &'a str,
        n: u64,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            let key = ratebound::any::Key::Text(key);
            ratebound_shm::SharedKeyedLimiter::acquire(self, key, n, timeout)
                .await
                .map_err(Error::from)
        })
    }

    fn pause<'a>(&'a self, key: &'a str, d: Duration) -> BoxFuture<'a, Result<Reach, Error>> {
        let key = ratebound::any::Key::Text(key);
        let paused = ratebound_shm::SharedKeyedLimiter::pause(self, key, d)
            .map(|()| Reach::Shared)
            .map_err(Error::from);
        Box::pin(std::future::ready(paused))
    }
}

/// One limit per key for the fleet: a wait reserves in Redis
/// ([`RedisLimiter::acquire_n`](ratebound_redis::RedisLimiter::acquire_n)),
/// a pause moves every instance's reservations
/// ([`RedisLimiter::pause`](ratebound_redis::RedisLimiter::pause)). A
/// pause Redis could not be told of (Redis down) is not an error: it is
/// [`Reach::Local`] — the local share of a limiter failing `local` is
/// paused ([`Engine::pause_local`](ratebound_redis::Engine::pause_local)),
/// and the adapter keeps the pause in this process. Build the limiter
/// [`with_pause_news`](ratebound_redis::RedisLimiter::with_pause_news) so
/// that its waiters hear the other instances' pauses at once.
#[cfg(feature = "redis")]
impl<C> OutboundLimiter for ratebound_redis::RedisLimiter<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn algorithm(&self) -> &'static str {
        self.engine().algorithm()
    }

    fn acquire<'a>(
        &'a self,
        key: &'a str,
        n: u64,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            self.acquire_n(key, n, timeout)
                .await
                .map(|_| ())
                .map_err(Error::from)
        })
    }

    fn pause<'a>(&'a self, key: &'a str, d: Duration) -> BoxFuture<'a, Result<Reach, Error>> {
        Box::pin(async move {
            match ratebound_redis::RedisLimiter::pause(self, key, d).await? {
                Some(_) => Ok(Reach::Shared),
                None => {
                    self.engine().pause_local(None, key.as_bytes(), d);
                    Ok(Reach::Local)
                }
            }
        })
    }
}
