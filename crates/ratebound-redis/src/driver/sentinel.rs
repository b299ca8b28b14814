//! A connection to the primary that Redis Sentinel names, which follows a
//! failover: [`SentinelConnection`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo,
    Pipeline, RedisConnectionInfo, RedisError, RedisFuture, RedisResult, Value,
};

/// A connection to whichever node a set of Redis Sentinels names as the
/// primary of `master_name`, for [`RedisLimiter`](crate::RedisLimiter) (or
/// any redis-rs async command): a multiplexed connection to that primary,
/// dropped after an error that says the node is gone or no longer the
/// primary (a connection error, a timeout, `READONLY`: a former primary
/// that came back as a replica) and made again, through the sentinels, by
/// the next command. So a limiter built on it follows a failover without
/// being rebuilt: while no primary answers, its fail policy decides; its
/// breaker's first probe after the promotion reaches the new primary.
///
/// Before a connection is used the node must answer `ROLE` as a master: a
/// sentinel that has not yet seen the failover (or was partitioned) may
/// name a demoted node, which is then skipped for the next sentinel's
/// answer. Sentinels are asked in order, the first that answers wins.
///
/// Cheap to clone: the clones share the connection, and one caller at a
/// time asks the sentinels while the others wait for its answer (each
/// bounded by its limiter's deadline).
///
/// ```no_run
/// # async fn run() -> redis::RedisResult<()> {
/// use ratebound::Quota;
/// use ratebound_redis::{Algorithm, Config, RedisLimiter, SentinelConnection};
///
/// let conn = SentinelConnection::connect(
///     ["redis://10.0.0.1:26379/", "redis://10.0.0.2:26379/", "redis://10.0.0.3:26379/"],
///     "partner",
///     redis::RedisConnectionInfo::default(), // the data nodes' db, user, password
/// )
/// .await?;
/// let quota = Quota::parse("10/s burst 20").expect("a quota");
/// let limiter = RedisLimiter::new(Config::new(Algorithm::TokenBucket(quota)), conn)
///     .expect("a limiter");
/// # let _ = limiter;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct SentinelConnection {
    inner: Arc<Inner>,
}

struct Inner {
    sentinels: Vec<ConnectionInfo>,
    master_name: String,
    node: RedisConnectionInfo,
    config: AsyncConnectionConfig,
    /// The connection in use and its generation (a failed command drops
    /// only the connection it ran on, not a newer one).
    current: Mutex<Option<(u64, MultiplexedConnection, String)>>,
    /// Held by the one caller asking the sentinels.
    resolving: tokio::sync::Mutex<()>,
    generation: AtomicU64,
}

impl Inner {
    fn unconnected(
        sentinels: Vec<ConnectionInfo>,
        master_name: String,
        node: RedisConnectionInfo,
        config: AsyncConnectionConfig,
    ) -> Inner {
        Inner {
            sentinels,
            master_name,
            node,
            config,
            current: Mutex::new(None),
            resolving: tokio::sync::Mutex::new(()),
            generation: AtomicU64::new(0),
        }
    }
}

impl std::fmt::Debug for SentinelConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelConnection")
            .field("master_name", &self.inner.master_name)
            .field("sentinels", &self.inner.sentinels.len())
            .field("primary", &self.primary())
            .finish()
    }
}

fn invalid(what: &'static str, detail: String) -> RedisError {
    RedisError::from((ErrorKind::InvalidClientConfig, what, detail))
}

impl SentinelConnection {
    /// A connection that asks `sentinels` for the primary of `master_name`
    /// at its first command (and after every failure), connecting to the
    /// primary with `node`'s database, user and password. Connections have
    /// redis-rs' default timeouts unless [`with_config`](Self::with_config)
    /// says otherwise.
    ///
    /// # Errors
    ///
    /// No sentinel, a sentinel address that does not parse or is not TCP,
    /// or an empty `master_name` (`InvalidClientConfig`, naming it).
    pub fn new<T: IntoConnectionInfo>(
        sentinels: impl IntoIterator<Item = T>,
        master_name: &str,
        node: RedisConnectionInfo,
    ) -> RedisResult<SentinelConnection> {
        let sentinels = sentinels
            .into_iter()
            .map(IntoConnectionInfo::into_connection_info)
            .collect::<RedisResult<Vec<_>>>()?;
        if sentinels.is_empty() {
            return Err(invalid(
                "no sentinel",
                "give at least one sentinel address".into(),
            ));
        }
        if let Some(s) = sentinels
            .iter()
            .find(|s| !matches!(s.addr(), ConnectionAddr::Tcp(..)))
        {
            return Err(invalid(
                "a sentinel that is not plain TCP",
                format!("{} (TLS and Unix sockets are not supported here)", s.addr()),
            ));
        }
        if master_name.is_empty() {
            return Err(invalid("an empty master name", String::new()));
        }
        Ok(SentinelConnection {
            inner: Arc::new(Inner::unconnected(
                sentinels,
                master_name.to_string(),
                node,
                AsyncConnectionConfig::new(),
            )),
        })
    }

    /// [`new`](Self::new), then asks the sentinels once: an error now if
    /// no sentinel names a primary that answers as one.
    ///
    /// # Errors
    ///
    /// As `new`, or the last error met asking the sentinels and connecting.
    pub async fn connect<T: IntoConnectionInfo>(
        sentinels: impl IntoIterator<Item = T>,
        master_name: &str,
        node: RedisConnectionInfo,
    ) -> RedisResult<SentinelConnection> {
        let conn = SentinelConnection::new(sentinels, master_name, node)?;
        conn.resolve().await?;
        Ok(conn)
    }

    /// Connects now, if not connected, to the primary the sentinels name,
    /// and returns it (`host:port`): to fail at start-up rather than at the
    /// first command, after [`with_config`](Self::with_config).
    ///
    /// # Errors
    ///
    /// The last error met asking the sentinels and connecting.
    pub async fn resolve(&self) -> RedisResult<String> {
        let (_, _, at) = self.current().await?;
        Ok(at)
    }

    /// The connection and response timeouts (and the rest of redis-rs'
    /// [`AsyncConnectionConfig`]) for the sentinels and the primary. Only
    /// before the first command: clones made earlier keep the old one.
    #[must_use]
    pub fn with_config(self, config: AsyncConnectionConfig) -> SentinelConnection {
        let Inner {
            sentinels,
            master_name,
            node,
            ..
        } = &*self.inner;
        let inner =
            Inner::unconnected(sentinels.clone(), master_name.clone(), node.clone(), config);
        SentinelConnection {
            inner: Arc::new(inner),
        }
    }

    /// The primary in use (`host:port`), if connected.
    pub fn primary(&self) -> Option<String> {
        self.lock().as_ref().map(|(_, _, at)| at.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(u64, MultiplexedConnection, String)>> {
        // A panic elsewhere cannot leave the slot half-written.
        self.inner
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The connection in use: its generation, itself and its primary.
    fn in_use(&self) -> Option<(u64, MultiplexedConnection, String)> {
        self.lock().clone()
    }

    /// The connection in use, or a new one to the primary the sentinels
    /// name.
    async fn current(&self) -> RedisResult<(u64, MultiplexedConnection, String)> {
        if let Some(c) = self.in_use() {
            return Ok(c);
        }
        let _one = self.inner.resolving.lock().await;
        if let Some(c) = self.in_use() {
            return Ok(c);
        }
        let mut last = None;
        for sentinel in &self.inner.sentinels {
            match self.ask(sentinel).await {
                Ok((conn, at)) => {
                    // Ordering: a unique number is all it gives.
                    let g = self.inner.generation.fetch_add(1, Ordering::Relaxed);
                    let used = (g, conn, at);
                    *self.lock() = Some(used.clone());
                    return Ok(used);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| invalid("no sentinel", String::new())))
    }

    /// The primary `sentinel` names, connected and answering as a master.
    async fn ask(&self, sentinel: &ConnectionInfo) -> RedisResult<(MultiplexedConnection, String)> {
        let config = &self.inner.config;
        let mut s = redis::Client::open(sentinel.clone())?
            .get_multiplexed_async_connection_with_config(config)
            .await?;
        let named: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.inner.master_name)
            .query_async(&mut s)
            .await?;
        let Some((host, port)) = named else {
            return Err(invalid(
                "the sentinel does not know the master",
                format!("{:?} at {}", self.inner.master_name, sentinel.addr()),
            ));
        };
        let info = (host.as_str(), port)
            .into_connection_info()?
            .set_redis_settings(self.inner.node.clone());
        let mut conn = redis::Client::open(info)?
            .get_multiplexed_async_connection_with_config(config)
            .await?;
        let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut conn).await?;
        match role.first() {
            Some(Value::BulkString(b)) if b == b"master" => Ok((conn, format!("{host}:{port}"))),
            other => Err(RedisError::from((
                ErrorKind::Client,
                "the node the sentinel names is not a master",
                format!("{host}:{port} answers ROLE with {other:?}"),
            ))),
        }
    }

    /// Drops generation `g` after `e`, if the error says the node is gone
    /// or no longer the primary.
    fn judge(&self, g: u64, e: &RedisError) {
        let gone = e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_timeout()
            || matches!(e.code(), Some("READONLY" | "MASTERDOWN" | "LOADING"));
        if gone {
            let mut cur = self.lock();
            if cur.as_ref().is_some_and(|(h, _, _)| *h == g) {
                *cur = None;
            }
        }
    }
}

impl ConnectionLike for SentinelConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (g, mut conn, _) = self.current().await?;
            let r = conn.req_packed_command(cmd).await;
            if let Err(e) = &r {
                self.judge(g, e);
            }
            r
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (g, mut conn, _) = self.current().await?;
            let r = conn.req_packed_commands(pipeline, offset, count).await;
            if let Err(e) = &r {
                self.judge(g, e);
            }
            r
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.node.db()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_configurations_are_typed_errors_naming_the_value() {
        let none: [&str; 0] = [];
        let e = SentinelConnection::new(none, "m", RedisConnectionInfo::default()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidClientConfig);
        assert!(e.to_string().contains("no sentinel"), "{e}");
        let e =
            SentinelConnection::new(["redis://127.0.0.1:1/"], "", RedisConnectionInfo::default())
                .unwrap_err();
        assert!(e.to_string().contains("empty master name"), "{e}");
        let e =
            SentinelConnection::new(["unix:///tmp/s.sock"], "m", RedisConnectionInfo::default())
                .unwrap_err();
        assert!(e.to_string().contains("/tmp/s.sock"), "{e}");
        assert!(
            SentinelConnection::new(["nope://x"], "m", RedisConnectionInfo::default()).is_err()
        );
    }

    #[tokio::test]
    async fn no_sentinel_answering_is_the_last_error_not_a_hang() {
        // A port nothing listens on: refused at once.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a port");
        let url = format!("redis://127.0.0.1:{port}/");
        let e = SentinelConnection::connect([url], "m", RedisConnectionInfo::default())
            .await
            .unwrap_err();
        assert!(e.is_connection_refusal() || e.is_io_error(), "{e}");
    }
}
