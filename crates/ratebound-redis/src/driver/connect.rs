//! Connections made from URLs (feature `connect`): what the Python
//! binding's native connection uses when given a URL in place of a
//! redis-py client, and what a Rust program may use in place of building
//! its own. A [`Target`] is a URL (or a list of cluster nodes' URLs) read
//! into the `redis` crate's settings, every bad value a [`BadTarget`]
//! naming it (its password hidden); its [`Connection`] connects in the
//! background and reconnects by itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::{BoxFuture, Shared};
use futures_util::{FutureExt, StreamExt};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Pipeline, RedisFuture,
    TlsCertificates, Value,
};

/// How long one attempt to connect (or to read a cluster's topology) may
/// take, whatever the calls' deadline: a call never waits for it longer
/// than its own deadline, and the attempt goes on for the next call.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A target that cannot be used: its text names the bad value (passwords
/// hidden).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadTarget(pub String);

impl std::fmt::Display for BadTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadTarget {}

/// Where a connection goes: one server or a cluster.
///
/// # Examples
/// ```
/// use ratebound::Quota;
/// use ratebound_redis::connect::Target;
/// use ratebound_redis::{Algorithm, Config, RedisLimiter};
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let target = Target::parse(&["redis+cluster://10.0.0.1:7000".to_string()], false, None)?;
/// // A cluster batches per hash slot: say so for this connection type.
/// let limiter = RedisLimiter::new(
///     Config::new(Algorithm::TokenBucket(Quota::parse("10/s")?)),
///     target.connect()?,
/// )?
/// .per_slot(target.is_cluster());
/// let decision = limiter.check("partner").await?;
/// # let _ = decision;
/// # Ok(())
/// # }
/// // A bad URL is an error naming it, its password hidden.
/// let bad = Target::parse(&["http://app:pw@host:6379".to_string()], false, None);
/// assert!(bad.is_err_and(|e| e.0.contains("app:***@host")));
/// ```
pub struct Target {
    shown: String,
    id: String,
    kind: Kind,
}

// One per target, made once: the size of a variant does not matter.
#[allow(clippy::large_enum_variant)]
enum Kind {
    /// One server (`redis://`, `rediss://`, `unix://`).
    Single(redis::Client),
    /// A Redis Cluster: its client, and one client per seed node (for a
    /// pause listener, which subscribes on one node: a `PUBLISH` reaches
    /// every node of a cluster).
    Cluster {
        client: ClusterClient,
        nodes: Vec<redis::Client>,
    },
}

/// `text` with the password of its authority part hidden
/// (`redis://user:***@host`).
pub fn redacted(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_string();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) => {
            let user = user_info.split_once(':').map_or(user_info, |(u, _)| u);
            let hidden = if user_info.contains(':') { ":***" } else { "" };
            format!("{scheme}://{user}{hidden}@{host}{tail}")
        }
        None => text.to_string(),
    }
}

fn bad_url(text: &str, reason: &str) -> BadTarget {
    BadTarget(format!("invalid url {:?}: {reason}", redacted(text)))
}

const SCHEMES: &str = "redis://host:port/db, rediss:// (TLS), redis+cluster://host:port, \
                       rediss+cluster:// or unix:///path";

/// One URL: its connection settings and whether it names a cluster node.
fn parse_one(text: &str) -> Result<(ConnectionInfo, bool), BadTarget> {
    let Some((scheme, rest)) = text.split_once("://") else {
        return Err(bad_url(text, &format!("not a URL; use {SCHEMES}")));
    };
    let (url, cluster) = match scheme.to_ascii_lowercase().as_str() {
        "redis" | "rediss" | "unix" | "redis+unix" => (text.to_string(), false),
        "redis+cluster" => (format!("redis://{rest}"), true),
        "rediss+cluster" => (format!("rediss://{rest}"), true),
        other => {
            return Err(bad_url(
                text,
                &format!("the scheme {other}:// is not Redis'; use {SCHEMES}"),
            ));
        }
    };
    if let Some(reason) = bad_authority(&url) {
        return Err(bad_url(text, &reason));
    }
    let info = url
        .as_str()
        .into_connection_info()
        .map_err(|e| bad_url(text, &e.to_string()))?;
    if cluster && matches!(info.addr(), ConnectionAddr::Unix(_)) {
        return Err(bad_url(text, "a cluster node is host:port"));
    }
    Ok((info, cluster))
}

/// What is wrong with a TCP URL's host and port, said plainly (the
/// `redis` crate's own message is "did not parse").
fn bad_authority(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme.contains("unix") {
        return None;
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let host_port = rest[..end]
        .rsplit_once('@')
        .map_or(&rest[..end], |(_, h)| h);
    let (host, port) = match host_port.strip_prefix('[') {
        // An IPv6 address: [::1] or [::1]:port.
        Some(v6) => match v6.split_once(']') {
            Some((h, tail)) => (h, tail.strip_prefix(':')),
            None => return Some("an IPv6 address needs its closing ]".to_string()),
        },
        None => match host_port.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host_port, None),
        },
    };
    if host.is_empty() {
        return Some("no host: use redis://host:port/db".to_string());
    }
    match port {
        Some(p) if !matches!(p.parse::<u32>(), Ok(1..=65535)) => {
            Some(format!("port {p:?} is not a number from 1 to 65535"))
        }
        _ => None,
    }
}

fn is_tls(info: &ConnectionInfo) -> bool {
    matches!(info.addr(), ConnectionAddr::TcpTls { .. })
}

impl Target {
    /// Reads `urls`: one server's URL, or (`cluster_list`, or any
    /// `redis+cluster://` URL) a cluster's seed nodes; `ca_file`: a PEM
    /// file of the CA(s) a `rediss://` server's certificate must chain to
    /// (default: the system's roots).
    ///
    /// # Errors
    /// [`BadTarget`] naming the bad URL or file.
    pub fn parse(
        urls: &[String],
        cluster_list: bool,
        ca_file: Option<&str>,
    ) -> Result<Target, BadTarget> {
        if urls.is_empty() {
            return Err(BadTarget(
                "invalid url []: a list of cluster nodes needs at least one URL".to_string(),
            ));
        }
        let mut infos = Vec::with_capacity(urls.len());
        let mut cluster = cluster_list;
        for t in urls {
            let (info, c) = parse_one(t)?;
            cluster |= c;
            // One small command after another: no Nagle delay.
            let tcp = info.tcp_settings().clone().set_nodelay(true);
            infos.push(info.set_tcp_settings(tcp));
        }
        let shown = if let [one] = urls {
            redacted(one)
        } else {
            let each: Vec<String> = urls.iter().map(|t| format!("{:?}", redacted(t))).collect();
            format!("[{}]", each.join(", "))
        };
        let tls = infos.iter().any(is_tls);
        if tls && !infos.iter().all(is_tls) {
            return Err(BadTarget(format!(
                "invalid url {shown}: every node is rediss:// or none is"
            )));
        }
        let certs = match ca_file {
            None => None,
            Some(path) => {
                if !tls {
                    return Err(BadTarget(format!(
                        "invalid ssl_ca_certs {path:?}: a CA file is for a rediss:// URL, got {shown}"
                    )));
                }
                let pem = std::fs::read(path)
                    .map_err(|e| BadTarget(format!("invalid ssl_ca_certs {path:?}: {e}")))?;
                Some(TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem),
                })
            }
        };
        if tls {
            // The one crypto provider this build has (ring); installed once
            // for the process (an error: one is installed already).
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let bad = |e: redis::RedisError| BadTarget(format!("invalid url {shown}: {e}"));
        let client_of = |info: ConnectionInfo| -> Result<redis::Client, BadTarget> {
            match &certs {
                None => redis::Client::open(info),
                Some(c) => redis::Client::build_with_tls(info, c.clone()),
            }
            .map_err(bad)
        };
        let id = format!("{urls:?} ca={ca_file:?}");
        let kind = if cluster {
            let mut builder = ClusterClient::builder(infos.clone())
                .connection_timeout(CONNECT_TIMEOUT)
                .tcp_settings(infos[0].tcp_settings().clone())
                .retries(2);
            if let Some(c) = &certs {
                builder = builder.certs(c.clone());
            }
            let client = builder.build().map_err(bad)?;
            let nodes = infos
                .into_iter()
                .map(client_of)
                .collect::<Result<Vec<_>, _>>()?;
            Kind::Cluster { client, nodes }
        } else {
            match infos.pop() {
                Some(info) => Kind::Single(client_of(info)?),
                None => unreachable!("one URL at least (checked above)"),
            }
        };
        Ok(Target { shown, id, kind })
    }

    /// The URL(s) as given, passwords hidden: for messages.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// What tells two targets apart (the URLs as given, the CA file).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether this is a Redis Cluster (a limiter over it batches per hash
    /// slot).
    pub fn is_cluster(&self) -> bool {
        matches!(self.kind, Kind::Cluster { .. })
    }

    /// The host and port of a single server reached over TLS
    /// (`rediss://`), if this is one.
    pub fn tls_address(&self) -> Option<(String, u16)> {
        match &self.kind {
            Kind::Single(c) => match c.get_connection_info().addr() {
                ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
                _ => None,
            },
            Kind::Cluster { .. } => None,
        }
    }

    /// The clients a pause listener may subscribe with (the one server, or
    /// each seed node in turn).
    pub fn pubsub_clients(&self) -> Vec<redis::Client> {
        match &self.kind {
            Kind::Single(c) => vec![c.clone()],
            Kind::Cluster { nodes, .. } => nodes.clone(),
        }
    }

    /// A connection to the target, made in the background on the current
    /// tokio runtime (call it inside one): one server's reconnects by
    /// itself (once per failed call: no retries of its own); a cluster's
    /// topology is read again by the next call after a failed attempt.
    ///
    /// # Errors
    /// The `redis` crate's, for a server's settings it refuses.
    pub fn connect(&self) -> Result<Connection, redis::RedisError> {
        match &self.kind {
            Kind::Single(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(None)
                    .set_number_of_retries(0);
                let manager = ConnectionManager::new_lazy_with_config(client.clone(), config)?;
                // Connect now, so that the first call does not wait for it.
                let mut warm = manager.clone();
                tokio::spawn(async move {
                    let _ = redis::cmd("PING").query_async::<Value>(&mut warm).await;
                });
                Ok(Connection(Inner::Single(manager)))
            }
            Kind::Cluster { client, .. } => {
                let lazy = Arc::new(LazyCluster {
                    client: Box::new(client.clone()),
                    current: Mutex::new(None),
                });
                // Read the topology now (in the background).
                drop(lazy.connecting());
                Ok(Connection(Inner::Cluster(lazy)))
            }
        }
    }
}

type Connecting = Shared<BoxFuture<'static, Result<ClusterConnection, redis::RedisError>>>;

/// A cluster connection made in a task of its own (a call waits for it
/// within its deadline; a failed attempt is made again by the next call).
struct LazyCluster {
    client: Box<ClusterClient>,
    current: Mutex<Option<Connecting>>,
}

impl LazyCluster {
    fn connecting(&self) -> Connecting {
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = &*cur
            && !matches!(f.peek(), Some(Err(_)))
        {
            return f.clone();
        }
        let client = (*self.client).clone();
        let task = tokio::spawn(async move {
            let config = redis::cluster::ClusterConfig::new()
                .set_connection_timeout(CONNECT_TIMEOUT)
                .set_response_timeout(CONNECT_TIMEOUT);
            client.get_async_connection_with_config(config).await
        });
        let f: Connecting = async move {
            task.await.unwrap_or_else(|e| {
                Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "the connecting task failed",
                    e.to_string(),
                )))
            })
        }
        .boxed()
        .shared();
        *cur = Some(f.clone());
        f
    }
}

/// A connection made by [`Target::connect`]: cheap to clone (clones share
/// it), usable wherever the `redis` crate's async connections are (a
/// [`RedisLimiter`](crate::RedisLimiter), a [`Pump`](crate::Pump)).
#[derive(Clone)]
pub struct Connection(Inner);

#[derive(Clone)]
enum Inner {
    Single(ConnectionManager),
    Cluster(Arc<LazyCluster>),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.0 {
            Inner::Single(m) => m.req_packed_command(cmd),
            Inner::Cluster(lazy) => {
                let connecting = lazy.connecting();
                Box::pin(async move { connecting.await?.req_packed_command(cmd).await })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.0 {
            Inner::Single(m) => m.req_packed_commands(cmd, offset, count),
            Inner::Cluster(lazy) => {
                let connecting = lazy.connecting();
                Box::pin(async move {
                    connecting
                        .await?
                        .req_packed_commands(cmd, offset, count)
                        .await
                })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match &self.0 {
            Inner::Single(m) => m.get_db(),
            Inner::Cluster(_) => 0,
        }
    }
}

/// Whether the server at `host:port` answers plain RESP (a `PING` written
/// in the clear gets `+PONG` or an error reply), asked within `timeout`:
/// for a `rediss://` target, whose TLS handshake with such a server can
/// only time out (the server reads the ClientHello as an unfinished inline
/// command and waits), which the fail policy would answer forever.
pub async fn speaks_plain(host: String, port: u16, timeout: Duration) -> bool {
    let attempt = async {
        let s = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .ok()?;
        s.writable().await.ok()?;
        s.try_write(b"PING\r\n").ok()?;
        let mut b = [0u8; 16];
        loop {
            s.readable().await.ok()?;
            match s.try_read(&mut b) {
                Ok(0) => return Some(false),
                Ok(_) => return Some(b[0] == b'+' || b[0] == b'-'),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => return None,
            }
        }
    };
    matches!(tokio::time::timeout(timeout, attempt).await, Ok(Some(true)))
}

/// A pause listener (see [`Target::listen`]); it stops when dropped.
pub struct PauseListener {
    task: tokio::task::JoinHandle<()>,
    subscribed: Arc<AtomicBool>,
    first: Arc<AtomicBool>,
}

impl Drop for PauseListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PauseListener {
    /// Whether it is subscribed now.
    pub fn subscribed(&self) -> bool {
        // Ordering: Acquire pairs with the task's Release stores; the flags
        // are advice, no memory depends on them.
        self.subscribed.load(Ordering::Acquire)
    }

    /// The flag that says its first attempt to subscribe is over
    /// (subscribed or failed); a waiter may also set it, to stop waiting
    /// for a subscription that cannot be made now.
    pub fn first(&self) -> &Arc<AtomicBool> {
        &self.first
    }
}

impl Target {
    /// Listens for other instances' pauses on `engine`'s channel: a task
    /// on the current runtime that subscribes on a connection of its own
    /// (in a cluster, on one seed node, the next at each reconnection: a
    /// `PUBLISH` reaches every node) and hands every message to the
    /// engine; it reconnects 0.1 s to 2 s apart whenever its connection is
    /// lost.
    pub fn listen(&self, engine: Arc<crate::Engine>) -> PauseListener {
        let subscribed = Arc::new(AtomicBool::new(false));
        let first = Arc::new(AtomicBool::new(false));
        let clients = self.pubsub_clients();
        let channel = engine.pause_channel();
        let (sub, fst) = (subscribed.clone(), first.clone());
        let task = tokio::spawn(async move {
            let mut backoff = Duration::from_millis(100);
            for turn in 0.. {
                let client = &clients[turn % clients.len()];
                let connected = tokio::time::timeout(CONNECT_TIMEOUT, async {
                    let mut ps = client.get_async_pubsub().await.ok()?;
                    ps.subscribe(&channel).await.ok()?;
                    Some(ps)
                })
                .await;
                if let Ok(Some(mut ps)) = connected {
                    // Ordering: Release — see `PauseListener::subscribed`.
                    sub.store(true, Ordering::Release);
                    fst.store(true, Ordering::Release);
                    backoff = Duration::from_millis(100);
                    let mut messages = ps.on_message();
                    while let Some(m) = messages.next().await {
                        engine.hear(m.get_payload_bytes());
                    }
                    sub.store(false, Ordering::Release);
                }
                fst.store(true, Ordering::Release);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        });
        PauseListener {
            task,
            subscribed,
            first,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(urls: &[&str], list: bool, ca: Option<&str>) -> String {
        let urls: Vec<String> = urls.iter().map(|u| u.to_string()).collect();
        match Target::parse(&urls, list, ca) {
            Err(BadTarget(text)) => text,
            Ok(t) => panic!("{} was taken", t.shown()),
        }
    }

    #[test]
    fn bad_targets_are_named_with_their_password_hidden() {
        let e = bad(&["http://u:hunter2@host:6379"], false, None);
        assert!(e.contains("http://") && e.contains("not Redis'"), "{e}");
        assert!(!e.contains("hunter2") && e.contains("u:***@host"), "{e}");
        let e = bad(&["redis://host:99999/0"], false, None);
        assert!(e.contains("port \"99999\""), "{e}");
        assert!(bad(&["redis://:6379"], false, None).contains("no host"));
        assert!(bad(&["redis://[::1:6379"], false, None).contains("closing ]"));
        assert!(bad(&["localhost:6379"], false, None).contains("not a URL"));
        assert!(bad(&[], true, None).contains("at least one URL"));
        let e = bad(&["rediss://a:1", "redis://b:2"], true, None);
        assert!(e.contains("every node is rediss://"), "{e}");
        let e = bad(&["redis://a:1"], false, Some("/nonexistent.pem"));
        assert!(e.contains("a CA file is for a rediss:// URL"), "{e}");
        let e = bad(&["rediss://a:1"], false, Some("/nonexistent/ca.pem"));
        assert!(
            e.contains("invalid ssl_ca_certs \"/nonexistent/ca.pem\""),
            "{e}"
        );
        assert!(bad(&["redis+cluster:///tmp/x.sock"], false, None).contains("url"));
    }

    #[test]
    fn urls_name_one_server_or_a_cluster() {
        let one = |u: &str| Target::parse(&[u.to_string()], false, None).expect(u);
        assert!(!one("redis://127.0.0.1:6379/0").is_cluster());
        assert!(one("redis+cluster://127.0.0.1:7000").is_cluster());
        assert!(one("unix:///tmp/redis.sock").tls_address().is_none());
        assert_eq!(
            one("rediss://db.example:6380").tls_address(),
            Some(("db.example".to_string(), 6380))
        );
        let list = Target::parse(&["redis://a:1".to_string()], true, None).expect("a list");
        assert!(
            list.is_cluster(),
            "a list names a cluster's nodes, even a list of one"
        );
        assert_eq!(list.pubsub_clients().len(), 1);
        assert_eq!(
            redacted("redis://user:pw@h:1/0?x=1"),
            "redis://user:***@h:1/0?x=1"
        );
        assert_eq!(redacted("redis://h:1"), "redis://h:1");
    }
}
