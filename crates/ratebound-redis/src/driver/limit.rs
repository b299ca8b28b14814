//! [`RedisLimiter`] as a [`KeyedLimit`]: the fleet's limit for the HTTP
//! layer's remote policies and the outbound adapters.

use std::borrow::Cow;
use std::time::Duration;

use ratebound::any::Key;
use ratebound::outbound::Learned;
use ratebound::pause::Reach;
use ratebound::{BoxFuture, Error, KeyedAlgorithm, KeyedLimit, LimitCheck};
use redis::aio::ConnectionLike;

use super::RedisLimiter;

/// A key's bytes in Redis: a text key and the same bytes are one key; an
/// integer is its decimal digits.
fn bytes(key: Key<'_>) -> Cow<'_, [u8]> {
    match key {
        Key::Text(s) => Cow::Borrowed(s.as_bytes()),
        Key::Bytes(b) => Cow::Borrowed(b),
        Key::Int(i) => Cow::Owned(i.to_string().into_bytes()),
    }
}

/// One limit per key for the fleet.
///
/// - A check is one round trip in the policy's own scope
///   ([`check_in`](RedisLimiter::check_in): `rb:tb@<scope>:<key>`, so two
///   policies on one prefix never share a key), bounded by the limiter's
///   deadline. Redis down, slow or erroring is answered by the limiter's
///   fail policy (`open`: admitted, `closed`: refused with its cool-down,
///   `local`: the local share), never by an error; an error that still
///   escapes (a configuration error found at the first call) is the
///   check's.
/// - A wait reserves in Redis ([`acquire_n`](RedisLimiter::acquire_n)).
/// - A pause moves every instance's reservations
///   ([`pause`](RedisLimiter::pause)). A pause Redis could not be told of
///   (Redis down) is not an error: it is [`Reach::Local`] — the local share
///   of a limiter failing `local` is paused
///   ([`Engine::pause_local`](crate::Engine::pause_local)), and the caller
///   keeps the pause in this process. Build the limiter
///   [`with_pause_news`](RedisLimiter::with_pause_news) so that its waiters
///   hear the other instances' pauses at once.
/// - A token bucket learns (windows do not): the learned word lives beside
///   the bucket in Redis, read by the script of every acquisition;
///   [`learned`](KeyedLimit::learned) answers from the last reply for the
///   key (no I/O), [`adapt`](KeyedLimit::adapt) is one script call (a
///   compare-and-swap for the whole fleet) that fails with
///   [`Error::StoreUnavailable`] while Redis cannot be told — nothing is
///   learned then, and nothing waits.
impl<C> KeyedLimit for RedisLimiter<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn algorithm(&self) -> KeyedAlgorithm {
        self.engine().config().algorithm
    }

    fn check(&self, scope: &str, key: Key<'_>, n: u64) -> LimitCheck {
        // A future of its own (a limiter is cheap to clone: an `Arc` and
        // the connection's handle), so the caller's borrows may end.
        let (limiter, scope, key) = (self.clone(), scope.to_string(), bytes(key).into_owned());
        LimitCheck::pending(async move {
            limiter
                .check_in(&scope, &key, n)
                .await
                .map(|d| d.decision())
        })
    }

    fn acquire<'a>(
        &'a self,
        key: Key<'a>,
        n: u64,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move { self.acquire_n(bytes(key), n, timeout).await.map(|_| ()) })
    }

    fn pause<'a>(&'a self, key: Key<'a>, d: Duration) -> BoxFuture<'a, Result<Reach, Error>> {
        Box::pin(async move {
            let key = bytes(key);
            match RedisLimiter::pause(self, &key, d).await? {
                Some(_) => Ok(Reach::Shared),
                None => {
                    self.engine().pause_local(None, &key, d);
                    Ok(Reach::Local)
                }
            }
        })
    }

    fn learns(&self) -> bool {
        matches!(
            self.engine().config().algorithm,
            KeyedAlgorithm::TokenBucket(_)
        )
    }

    fn learned(&self, key: Key<'_>) -> Learned {
        RedisLimiter::learned(self, bytes(key))
    }

    fn adapt<'a>(
        &'a self,
        key: Key<'a>,
        seen: Learned,
        next: Learned,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(async move { RedisLimiter::adapt(self, bytes(key), seen, next).await })
    }
}
