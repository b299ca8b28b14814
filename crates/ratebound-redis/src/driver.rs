//! The Rust driver: the engine's calls run with the `redis` crate on tokio,
//! over any async connection the user already configured —
//! `redis::aio::ConnectionManager` (reconnects in the background) or
//! `redis::cluster_async::ClusterConnection` (follows `MOVED`).

use std::sync::Arc;

use ratebound::{Error, Quota};
use redis::aio::ConnectionLike;
use redis::{ErrorKind, ServerErrorKind};

use crate::engine::{Algorithm, Begin, Call, Config, Decision, Engine, Outcome};

/// A global limit in Redis: every instance that checks the same key with
/// the same settings shares one limit.
///
/// Each check is one `EVALSHA` round trip (a `NOSCRIPT` reply loads the
/// script with `EVAL` and counts as the same call), bounded by the
/// configured deadline (default 50 ms): the `redis` crate has no per-call
/// timeout, so the driver enforces it. **A call that timed out may still
/// have run in Redis and spent its tokens**: the fail policy answers it,
/// and the tokens may be counted anyway.
///
/// # Examples
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use ratebound::Quota;
/// use ratebound_redis::RedisLimiter;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let conn = redis::aio::ConnectionManager::new(client).await?;
/// let limiter = RedisLimiter::token_bucket(Quota::parse("10/s burst 20")?, conn)?;
/// let d = limiter.check("partner-api").await?;
/// if !d.is_allowed() {
///     println!("retry in {:?} ({})", d.retry_after(), d.source().as_str());
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisLimiter<C> {
    engine: Arc<Engine>,
    conn: C,
}

impl<C> std::fmt::Debug for RedisLimiter<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> RedisLimiter<C> {
    /// A limiter from a full [`Config`].
    ///
    /// # Errors
    /// [`Engine::new`]'s.
    pub fn new(config: Config, conn: C) -> Result<Self, Error> {
        Ok(RedisLimiter {
            engine: Arc::new(Engine::new(config)?),
            conn,
        })
    }

    /// A token bucket with the defaults (prefix `rb:`, fail open, 50 ms).
    ///
    /// # Errors
    /// [`Engine::new`]'s.
    pub fn token_bucket(quota: Quota, conn: C) -> Result<Self, Error> {
        RedisLimiter::new(Config::new(Algorithm::TokenBucket(quota)), conn)
    }

    /// The engine (configuration, breaker state, leases).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// One token for `key`.
    ///
    /// # Errors
    /// As [`check_n`](Self::check_n).
    pub async fn check(&self, key: impl AsRef<[u8]>) -> Result<Decision, Error> {
        self.check_n(key, 1).await
    }

    /// `n` tokens for `key`: Redis' answer, or the fail policy's when Redis
    /// is down, slow or erroring (see [`Decision::source`]).
    ///
    /// # Errors
    /// [`Error::InsufficientCapacity`] for an `n` above the burst (never
    /// possible). `n = 0` is a query (admitted, nothing taken). Redis
    /// failures are not errors: the fail policy answers them; nor is a key
    /// whose state is beyond the limit (refused) or damaged
    /// ([`Source::Damaged`](crate::Source::Damaged)).
    pub async fn check_n(&self, key: impl AsRef<[u8]>, n: u64) -> Result<Decision, Error> {
        self.check_n_with(None, key.as_ref(), n, None).await
    }

    /// [`check_n`](Self::check_n) for `key` within `scope` (see
    /// [`Engine::redis_key`]): a middleware's check for its policy named
    /// `scope`, which never shares a key with another policy.
    ///
    /// # Errors
    /// As [`check_n`](Self::check_n).
    pub async fn check_in(
        &self,
        scope: &str,
        key: impl AsRef<[u8]>,
        n: u64,
    ) -> Result<Decision, Error> {
        self.check_n_with(Some(scope), key.as_ref(), n, None).await
    }

    /// [`check_n`](Self::check_n) judged at `now_us` (µs) instead of
    /// Redis' `TIME`: the explicit-time twin, for test vectors.
    ///
    /// # Errors
    /// As [`check_n`](Self::check_n).
    pub async fn check_n_at(
        &self,
        key: impl AsRef<[u8]>,
        n: u64,
        now_us: u64,
    ) -> Result<Decision, Error> {
        self.check_n_with(None, key.as_ref(), n, Some(now_us)).await
    }

    async fn check_n_with(
        &self,
        scope: Option<&str>,
        key: &[u8],
        n: u64,
        now_us: Option<u64>,
    ) -> Result<Decision, Error> {
        match self.engine.begin_in(scope, key, n)? {
            Begin::Done(d) => Ok(d),
            Begin::Call(call) => {
                let call = match now_us {
                    Some(now) => call.at(now),
                    None => call,
                };
                let result = self.run(&call).await;
                Ok(match &result {
                    Ok(reply) => self.engine.finish(&call, Outcome::Reply(reply)),
                    Err(None) => self.engine.finish(&call, Outcome::Timeout),
                    Err(Some(e)) => self.engine.finish(&call, Outcome::Failed(e)),
                })
            }
        }
    }

    /// Gives every unspent leased token back to Redis (call it on
    /// shutdown); how many calls succeeded.
    pub async fn shutdown(&self) -> usize {
        let mut done = 0;
        for call in self.engine.drain() {
            done += usize::from(self.run(&call).await.is_ok());
        }
        done
    }

    /// Runs `call` within the deadline: `Err(None)` on timeout,
    /// `Err(Some(text))` on any other failure.
    async fn run(&self, call: &Call) -> Result<Vec<i64>, Option<String>> {
        let mut conn = self.conn.clone();
        let attempt = async {
            let evalsha = redis::cmd("EVALSHA")
                .arg(call.script.sha())
                .arg(1)
                .arg(&call.key)
                .arg(&call.args)
                .query_async::<Vec<i64>>(&mut conn)
                .await;
            match evalsha {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    // Not loaded on this server (a restart, a failover,
                    // SCRIPT FLUSH, another cluster node): EVAL loads it.
                    redis::cmd("EVAL")
                        .arg(call.script.text)
                        .arg(1)
                        .arg(&call.key)
                        .arg(&call.args)
                        .query_async::<Vec<i64>>(&mut conn)
                        .await
                }
                other => other,
            }
        };
        match tokio::time::timeout(self.engine.timeout(), attempt).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(Some(e.to_string())),
            Err(_) => Err(None),
        }
    }
}
