//! A Redis failover in the middle of the incident run, for each fail
//! policy, in a Redis Cluster and in a Sentinel-managed pair.
//!
//! The cluster: 3 masters with 1 replica each (6 `redis-server` processes
//! on free 127.0.0.1 ports, each in a temp directory of its own,
//! persistence off, `cluster-node-timeout` 1 s unless told otherwise); each
//! instance's connection a redis-rs `ClusterClient` connection (defaults).
//! The pair: a primary, its replica and three sentinels (`redis-server
//! --sentinel`, quorum 2, `down-after-milliseconds` the same 1 s); each
//! instance's connection a `ratebound_redis::SentinelConnection` (a
//! multiplexed connection to the primary the sentinels name, made again
//! after a connection error or `READONLY`).
//!
//! For each fail policy (open, closed, local at rate/50 per instance) and
//! each round: 50 instances — each its own connection and limiter, four
//! callers checking every 10 ms — share one partner key, 10/s burst 20 (or
//! the quota given). `KILL_AT` into the run the primary holding the key is
//! killed (SIGKILL, as a crash); the cluster (or the sentinels) promote its
//! replica; the run goes on to `RUN`. No limiter is rebuilt.
//!
//! Printed per round and as medians per policy:
//! - the deployment's own failover time (kill → the replica answers `ROLE`
//!   as a master; with Sentinel, and the sentinels name it);
//! - how long calls were answered by the fail policy (kill → the last such
//!   answer), how many were, and how many of those took the whole deadline
//!   (timed out) rather than failing fast (the breaker open, a refused
//!   connection);
//! - recovery: every instance answered by Redis again, and when (kill → an
//!   instance's last fail-policy answer: median and slowest instance);
//! - admissions against the global bound: the largest excess, over every
//!   interval [a, b] of the run, of the admissions in it over
//!   `burst + rate·(b − a)` — over all admissions and over Redis' own
//!   (`Source::Redis`) alone. A call's admission is placed at the middle of
//!   its call. Redis' own excess is what the failover itself let through:
//!   writes acknowledged by the old primary and lost before they reached the
//!   replica (replication is asynchronous). A lost write can only show
//!   when the outage is shorter than the bucket's refill time
//!   (burst / rate: 2 s for 10/s burst 20) — after a longer one the bucket
//!   is full whatever the replica missed;
//! - so, the net writes lost, read from the bucket itself when it never ran
//!   dry: run with a quota such as `"1/s burst 1000000"` (every check
//!   admits and writes: ~20 000 writes/s), exact to ±1 token.
//!
//! After each round the killed node is started again (it rejoins as a
//! replica) and the next round waits until the deployment is whole.
//!
//! `cargo run --release --locked -p ratebound-benches --bin redis_failover [rounds] [node_timeout_ms] [deadline_ms] [quota] [setups]`
//! (defaults 3, 1000, 50, `"10/s burst 20"`, `cluster,sentinel`: about 5
//! minutes).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ratebound::Quota;
use ratebound_redis::{Algorithm, Config, OnError, RedisLimiter, SentinelConnection, Source};
use redis::aio::ConnectionLike;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, RedisConnectionInfo};

const INSTANCES: usize = 50;
const CALLERS: usize = 4;
const RUN: Duration = Duration::from_secs(10);
const KILL_AT: Duration = Duration::from_secs(3);

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// A free port for a cluster node: at most 55535 (Redis refuses more: its
/// cluster bus listens 10000 above), with the bus port free too.
fn cluster_port() -> u16 {
    for _ in 0..1000 {
        let port = free_port();
        if port <= 55535 && std::net::TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
    panic!("no free port for a cluster node");
}

/// One cluster node: a `redis-server` child in its own directory.
struct Node {
    port: u16,
    dir: PathBuf,
    node_timeout_ms: u64,
    child: Option<Child>,
    /// More arguments (a replica's `--replicaof`, a sentinel's config).
    extra: Vec<String>,
    /// Not cluster-enabled.
    plain: bool,
}

impl Node {
    fn start(port: u16, node_timeout_ms: u64) -> Node {
        Node::launch(port, node_timeout_ms, Vec::new(), false)
    }

    /// A node in its own directory, started: `extra` arguments (a replica's
    /// `--replicaof`), `plain` for one not cluster-enabled.
    fn launch(port: u16, node_timeout_ms: u64, extra: Vec<String>, plain: bool) -> Node {
        let dir =
            std::env::temp_dir().join(format!("ratebound-failover-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut n = Node {
            port,
            dir,
            node_timeout_ms,
            child: None,
            extra,
            plain,
        };
        n.spawn();
        n
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new("redis-server");
        // A sentinel's config file comes first.
        cmd.args(self.extra.iter().filter(|a| a.ends_with(".conf")))
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(self.extra.iter().filter(|a| !a.ends_with(".conf")));
        if !self.plain {
            cmd.args(["--cluster-enabled", "yes"])
                .args(["--cluster-config-file", "nodes.conf"])
                .args(["--cluster-node-timeout", &self.node_timeout_ms.to_string()]);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (apt-get install redis-server)");
        self.child = Some(child);
        let start = Instant::now();
        while query(self.port, &["PING"]).is_none() {
            assert!(start.elapsed() < Duration::from_secs(10), "no redis-server");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One command on a fresh blocking connection (admin work, never in a
/// measured path); `None` when the node does not answer.
fn query(port: u16, args: &[&str]) -> Option<redis::Value> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_millis(300))
        .ok()?;
    conn.set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(&mut conn).ok()
}

fn text(port: u16, args: &[&str]) -> Option<String> {
    match query(port, args)? {
        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(&b).into_owned()),
        redis::Value::VerbatimString { text, .. } => Some(text),
        redis::Value::SimpleString(s) => Some(s),
        redis::Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// A `CLUSTER NODES` row: id, port, is master, master id, slot ranges.
type Row = (String, u16, bool, String, Vec<(u16, u16)>);

/// `CLUSTER NODES` on `port`, the nodes not failed.
fn nodes(port: u16) -> Vec<Row> {
    let Some(t) = text(port, &["CLUSTER", "NODES"]) else {
        return Vec::new();
    };
    t.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 || f[2].contains("fail") || f[2].contains("noaddr") {
                return None;
            }
            let p = f[1].split('@').next()?.rsplit(':').next()?.parse().ok()?;
            let ranges = f[8..]
                .iter()
                .filter(|r| !r.starts_with('['))
                .filter_map(|r| match r.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => r.parse().ok().map(|s| (s, s)),
                })
                .collect();
            Some((
                f[0].to_string(),
                p,
                f[2].contains("master"),
                f[3].to_string(),
                ranges,
            ))
        })
        .collect()
}

struct Cluster {
    nodes: Vec<Node>,
    /// The master to kill and its replica (ports).
    target: Option<(u16, u16)>,
}

impl Cluster {
    fn start(node_timeout_ms: u64) -> Cluster {
        let nodes: Vec<Node> = (0..6)
            .map(|_| Node::start(cluster_port(), node_timeout_ms))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(nodes.iter().map(Node::addr))
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli (apt-get install redis-tools)");
        assert!(
            out.status.success(),
            "cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let c = Cluster {
            nodes,
            target: None,
        };
        c.wait_healthy();
        c
    }

    /// Until every node says `cluster_state:ok`, there are 3 masters and
    /// every master has a replica whose link is up.
    fn wait_healthy(&self) {
        let start = Instant::now();
        loop {
            let ok = self.nodes.iter().all(|n| {
                text(n.port, &["CLUSTER", "INFO"]).is_some_and(|t| t.contains("cluster_state:ok"))
            });
            let view = nodes(self.nodes[0].port);
            let masters = view.iter().filter(|n| n.2).count();
            let synced = view.iter().filter(|n| !n.2).all(|n| {
                text(n.1, &["INFO", "replication"])
                    .is_some_and(|t| t.contains("master_link_status:up"))
            }) && view.iter().filter(|n| !n.2).count() == 3;
            if ok && masters == 3 && synced {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "cluster not healthy: ok {ok}, masters {masters}, synced {synced}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://{}/", n.addr()))
            .collect()
    }

    /// The ports of the master serving `slot` and of its replica.
    fn master_and_replica(&self, slot: u16) -> (u16, u16) {
        let port = self
            .nodes
            .iter()
            .find(|n| n.child.is_some())
            .expect("a live node")
            .port;
        let view = nodes(port);
        let master = view
            .iter()
            .find(|n| n.2 && n.4.iter().any(|&(a, b)| (a..=b).contains(&slot)))
            .expect("a master for the slot");
        let replica = view
            .iter()
            .find(|n| !n.2 && n.3 == master.0)
            .expect("a replica of the master");
        (master.1, replica.1)
    }
}

/// What one call did: when it started and ended (µs into the run), how it
/// was answered, whether it admitted.
#[derive(Clone, Copy)]
struct Rec {
    start_us: u64,
    end_us: u64,
    source: Source,
    allowed: bool,
    remaining: u64,
}

/// The largest excess, over every interval, of the admissions in it over
/// `burst + rate·(length)`; admissions placed at `mid` µs (any order).
fn worst_excess(mut mids: Vec<u64>, rate: f64, burst: f64) -> f64 {
    mids.sort_unstable();
    // For j ≥ i: (j − i + 1) − burst − rate·(t_j − t_i)
    //          = (j + 1 − rate·t_j) + max_i(rate·t_i − i) − burst.
    let mut best_i = f64::NEG_INFINITY;
    let mut worst = f64::NEG_INFINITY;
    for (j, &t) in mids.iter().enumerate() {
        let t = t as f64 / 1e6;
        best_i = best_i.max(rate * t - j as f64);
        worst = worst.max(j as f64 + 1.0 - rate * t + best_i - burst);
    }
    worst.max(0.0)
}

struct Round {
    failover: Duration,
    failed_for: Duration,
    failed_calls: u64,
    timed_out: u64,
    recovered: usize,
    recovery_p50: Duration,
    recovery_max: Duration,
    admitted: u64,
    by_policy: u64,
    excess_all: f64,
    excess_redis: f64,
    redis_after: u64,
    checks: u64,
    lost: Option<f64>,
}

fn policy_name(p: OnError) -> String {
    match p {
        OnError::Open => "open".to_string(),
        OnError::Closed => "closed".to_string(),
        OnError::Local(r) => format!("local {r}/s"),
    }
}

/// A deployment whose primary can be killed: a cluster, or a
/// Sentinel-managed pair.
trait Setup {
    /// The connection each instance's limiter runs on.
    type Conn: ConnectionLike + Clone + Send + Sync + 'static;
    /// What the table calls it.
    const NAME: &'static str;
    /// A new connection, as an instance would make at start.
    async fn connect(&self) -> Self::Conn;
    /// Picks the primary serving `redis_key`; the kill comes later.
    fn target(&mut self, redis_key: &[u8]);
    /// Kills the target primary (SIGKILL); a probe (blocking) that says
    /// when another node serves as primary.
    fn kill(&mut self) -> Box<dyn Fn() -> bool + Send>;
    /// Starts the killed node again (it rejoins as a replica) and waits
    /// until the deployment is whole.
    fn restore(&mut self);
}

impl Setup for Cluster {
    type Conn = ClusterConnection;
    const NAME: &'static str = "cluster (3 masters + 3 replicas)";

    async fn connect(&self) -> ClusterConnection {
        ClusterClient::new(self.urls())
            .expect("cluster client")
            .get_async_connection()
            .await
            .expect("cluster connection")
    }

    fn target(&mut self, redis_key: &[u8]) {
        let slot: u16 = text(
            self.nodes[0].port,
            &["CLUSTER", "KEYSLOT", &String::from_utf8_lossy(redis_key)],
        )
        .and_then(|s| s.parse().ok())
        .expect("keyslot");
        self.target = Some(self.master_and_replica(slot));
    }

    fn kill(&mut self) -> Box<dyn Fn() -> bool + Send> {
        let (master, replica) = self.target.expect("a target");
        let victim = self.nodes.iter_mut().find(|n| n.port == master);
        victim.expect("master node").kill();
        Box::new(move || is_master(replica))
    }

    fn restore(&mut self) {
        let (master, _) = self.target.take().expect("a target");
        let victim = self.nodes.iter_mut().find(|n| n.port == master);
        victim.expect("master node").spawn();
        self.wait_healthy();
    }
}

/// A plain (not cluster) `redis-server`: a primary, or a replica of
/// `replica_of`.
fn plain_node(port: u16, replica_of: Option<u16>) -> Node {
    let extra = replica_of
        .map(|p| {
            vec![
                "--replicaof".to_string(),
                "127.0.0.1".to_string(),
                p.to_string(),
            ]
        })
        .unwrap_or_default();
    Node::launch(port, 0, extra, true)
}

/// A Sentinel-managed primary/replica pair: two `redis-server`s and three
/// sentinels (`redis-server --sentinel`, quorum 2), `down-after-milliseconds`
/// the node timeout.
struct Pair {
    data: Vec<Node>,
    sentinels: Vec<Node>,
    /// The primary to kill and the other node (ports).
    target: Option<(u16, u16)>,
}

/// The name the sentinels monitor the pair by.
const MASTER_NAME: &str = "partner";

impl Pair {
    fn start(down_after_ms: u64) -> Pair {
        let primary = plain_node(free_port(), None);
        let replica = plain_node(free_port(), Some(primary.port));
        let sentinels = (0..3)
            .map(|_| {
                let port = free_port();
                let dir = std::env::temp_dir()
                    .join(format!("ratebound-failover-{}-{port}", std::process::id()));
                std::fs::create_dir_all(&dir).expect("temp dir");
                let conf = dir.join("sentinel.conf");
                std::fs::write(
                    &conf,
                    format!(
                        "port {port}\nbind 127.0.0.1\ndir {}\n\
                         sentinel monitor {MASTER_NAME} 127.0.0.1 {} 2\n\
                         sentinel down-after-milliseconds {MASTER_NAME} {down_after_ms}\n\
                         sentinel failover-timeout {MASTER_NAME} 10000\n\
                         sentinel parallel-syncs {MASTER_NAME} 1\n",
                        dir.display(),
                        primary.port
                    ),
                )
                .expect("sentinel.conf");
                let extra = vec![conf.display().to_string(), "--sentinel".to_string()];
                Node::launch(port, 0, extra, true)
            })
            .collect();
        let p = Pair {
            data: vec![primary, replica],
            sentinels,
            target: None,
        };
        p.wait_healthy();
        p
    }

    /// The primary's port as the sentinel on `port` sees it.
    fn primary_by(port: u16) -> Option<u16> {
        match query(port, &["SENTINEL", "get-master-addr-by-name", MASTER_NAME])? {
            redis::Value::Array(v) => match v.get(1)? {
                redis::Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
                _ => None,
            },
            _ => None,
        }
    }

    /// Until every sentinel agrees on the primary, knows the replica and
    /// the other sentinels, and the replica's link is up.
    fn wait_healthy(&self) {
        let start = Instant::now();
        loop {
            let primaries: Vec<Option<u16>> = self
                .sentinels
                .iter()
                .map(|s| Pair::primary_by(s.port))
                .collect();
            let agreed = primaries[0].filter(|p| primaries.iter().all(|q| *q == Some(*p)));
            let whole = agreed.is_some_and(|p| {
                is_master(p)
                    && self.data.iter().filter(|n| n.port != p).all(|n| {
                        text(n.port, &["INFO", "replication"]).is_some_and(|t| {
                            t.contains("master_link_status:up")
                                && t.contains(&format!("master_port:{p}"))
                        })
                    })
                    && self.sentinels.iter().all(|s| {
                        text(s.port, &["INFO", "sentinel"])
                            .is_some_and(|t| t.contains("slaves=1") && t.contains("sentinels=3"))
                    })
            });
            if whole {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "sentinel pair not healthy: primaries {primaries:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Setup for Pair {
    type Conn = SentinelConnection;
    const NAME: &'static str = "Sentinel (primary + replica, 3 sentinels)";

    async fn connect(&self) -> SentinelConnection {
        let urls = self
            .sentinels
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}/", s.port));
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(200)))
            .set_response_timeout(Some(Duration::from_millis(500)));
        let conn = SentinelConnection::new(urls, MASTER_NAME, RedisConnectionInfo::default())
            .expect("sentinel addresses")
            .with_config(config);
        conn.resolve()
            .await
            .expect("the primary, through the sentinels");
        conn
    }

    fn target(&mut self, _redis_key: &[u8]) {
        let primary = Pair::primary_by(self.sentinels[0].port).expect("primary");
        let other = self
            .data
            .iter()
            .find(|n| n.port != primary)
            .expect("replica");
        self.target = Some((primary, other.port));
    }

    fn kill(&mut self) -> Box<dyn Fn() -> bool + Send> {
        let (primary, replica) = self.target.expect("a target");
        let victim = self.data.iter_mut().find(|n| n.port == primary);
        victim.expect("primary node").kill();
        let sentinel = self.sentinels[0].port;
        Box::new(move || Pair::primary_by(sentinel) == Some(replica) && is_master(replica))
    }

    fn restore(&mut self) {
        // Started as a primary on its own; the sentinels turn it into the
        // new primary's replica.
        let (primary, _) = self.target.take().expect("a target");
        let victim = self.data.iter_mut().find(|n| n.port == primary);
        let victim = victim.expect("primary node");
        victim.extra.clear();
        victim.spawn();
        self.wait_healthy();
    }
}

/// Whether the node on `port` answers `ROLE` as a master.
fn is_master(port: u16) -> bool {
    matches!(query(port, &["ROLE"]),
        Some(redis::Value::Array(v)) if matches!(v.first(), Some(redis::Value::BulkString(b)) if b == b"master"))
}

async fn round<S: Setup>(
    setup: &mut S,
    policy: OnError,
    deadline: Duration,
    quota: Quota,
) -> Round {
    let (rate, burst) = (quota.rate_per_second(), quota.burst() as f64);
    let key = format!("partner-{}", std::process::id() ^ rand_ish());
    let mut limiters = Vec::new();
    for _ in 0..INSTANCES {
        let conn = setup.connect().await;
        let mut c = Config::new(Algorithm::TokenBucket(quota));
        c.on_error = policy;
        c.timeout = deadline;
        limiters.push(RedisLimiter::new(c, conn).expect("limiter"));
    }
    let redis_key = limiters[0].engine().redis_key(None, key.as_bytes());
    setup.target(&redis_key);

    let start = Instant::now();
    let mut tasks = Vec::new();
    for (i, limiter) in limiters.iter().enumerate() {
        for _ in 0..CALLERS {
            let (limiter, key) = (limiter.clone(), key.clone());
            tasks.push(tokio::spawn(async move {
                let mut recs = Vec::new();
                // Bounded: at most RUN / 10 ms checks per caller.
                for _ in 0..(RUN.as_millis() / 10) {
                    let s = start.elapsed();
                    if s >= RUN {
                        break;
                    }
                    let d = limiter.check(&key).await.expect("check");
                    recs.push(Rec {
                        start_us: s.as_micros() as u64,
                        end_us: start.elapsed().as_micros() as u64,
                        source: d.source(),
                        allowed: d.is_allowed(),
                        remaining: d.remaining(),
                    });
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                (i, recs)
            }));
        }
    }

    // The kill, and the deployment's own failover time, from this
    // thread's side: another node answering as the primary.
    tokio::time::sleep_until(tokio::time::Instant::from_std(start + KILL_AT)).await;
    // Timed as the signal is sent (the kill waits for the process).
    let killed = start.elapsed();
    let promoted_now = setup.kill();
    let promoted = tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(60) {
            if promoted_now() {
                return Some(t.elapsed());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    })
    .await
    .expect("join")
    .expect("no replica was promoted within 60 s");

    let mut per_instance: Vec<Vec<Rec>> = vec![Vec::new(); INSTANCES];
    for t in tasks {
        let (i, recs) = t.await.expect("caller");
        per_instance[i].extend(recs);
    }
    let killed_us = killed.as_micros() as u64;
    let all: Vec<Rec> = per_instance.iter().flatten().copied().collect();
    let failed: Vec<&Rec> = all.iter().filter(|r| r.source != Source::Redis).collect();
    let failed_for = failed
        .iter()
        .map(|r| r.end_us.saturating_sub(killed_us))
        .max()
        .map_or(Duration::ZERO, Duration::from_micros);
    let timed_out = failed
        .iter()
        .filter(|r| r.end_us - r.start_us >= deadline.as_micros() as u64)
        .count() as u64;
    // An instance recovered when its calls of the last second were all
    // answered by Redis; its recovery time is kill → its last fail-policy
    // answer.
    let tail = (RUN - Duration::from_secs(1)).as_micros() as u64;
    let mut recovered = 0;
    let mut recovery = Vec::new();
    for recs in &per_instance {
        let last_second: Vec<&Rec> = recs.iter().filter(|r| r.start_us >= tail).collect();
        if !last_second.is_empty() && last_second.iter().all(|r| r.source == Source::Redis) {
            recovered += 1;
        }
        let last_fail = recs
            .iter()
            .filter(|r| r.source != Source::Redis)
            .map(|r| r.end_us)
            .max();
        recovery.push(last_fail.map_or(0, |e| e.saturating_sub(killed_us)));
    }
    recovery.sort_unstable();
    let mid = |r: &Rec| (r.start_us + r.end_us) / 2;
    let admitted: Vec<&Rec> = all.iter().filter(|r| r.allowed).collect();
    let redis_after = all
        .iter()
        .filter(|r| r.source == Source::Redis && r.start_us > killed_us)
        .count() as u64;

    // Writes lost in the failover, net, read from the bucket itself — when
    // it never ran dry (Redis refused nothing) nor refilled: the tokens left
    // at the first admission after the kill, against those left at the
    // last admission acknowledged before it (less one: the later admission
    // took one), less what refilled in between. Acknowledged admissions the
    // new master never saw count up; calls in flight at the kill that ran
    // and replicated but were answered by the fail policy count down.
    let redis_admits = || {
        all.iter()
            .filter(|r| r.source == Source::Redis && r.allowed)
    };
    let dry = all.iter().any(|r| r.source == Source::Redis && !r.allowed);
    // Answered by the old primary: every call sent before the kill (the
    // promoted replica answers seconds later, nothing sent after).
    let before = redis_admits()
        .filter(|r| r.start_us < killed_us)
        .min_by_key(|r| r.remaining);
    let after = redis_admits()
        .filter(|r| r.start_us > killed_us)
        .max_by_key(|r| r.remaining);
    let lost = match (before, after) {
        (Some(b), Some(a)) if !dry && a.remaining + 1 < quota.burst() => {
            let refill = rate * (a.start_us.saturating_sub(b.end_us)) as f64 / 1e6;
            Some(a.remaining as f64 - b.remaining as f64 + 1.0 - refill)
        }
        _ => None,
    };

    // Whole again: the killed node rejoins as a replica.
    setup.restore();

    Round {
        failover: promoted,
        failed_for,
        failed_calls: failed.len() as u64,
        timed_out,
        recovered,
        recovery_p50: Duration::from_micros(recovery[recovery.len() / 2]),
        recovery_max: Duration::from_micros(recovery[recovery.len() - 1]),
        admitted: admitted.len() as u64,
        by_policy: admitted
            .iter()
            .filter(|r| r.source != Source::Redis)
            .count() as u64,
        excess_all: worst_excess(admitted.iter().map(|r| mid(r)).collect(), rate, burst),
        excess_redis: worst_excess(
            admitted
                .iter()
                .filter(|r| r.source == Source::Redis)
                .map(|r| mid(r))
                .collect(),
            rate,
            burst,
        ),
        redis_after,
        checks: all.len() as u64,
        lost,
    }
}

/// A per-run distinct number for the key (no `rand` dependency).
fn rand_ish() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}

fn median<T: Copy + PartialOrd>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).expect("comparable"));
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(3, |a| a.parse().expect("rounds"));
    let node_timeout_ms: u64 = args.next().map_or(1000, |a| a.parse().expect("ms"));
    let deadline = Duration::from_millis(args.next().map_or(50, |a| a.parse().expect("ms")));
    let quota_text = args.next().unwrap_or_else(|| "10/s burst 20".to_string());
    let quota = Quota::parse(&quota_text).expect("a quota such as \"10/s burst 20\"");
    println!(
        "{INSTANCES} instances × {CALLERS} callers every 10 ms, one key {quota_text}, \
         {} s run, the key's master killed at {} s; cluster-node-timeout {node_timeout_ms} ms, \
         deadline {} ms, {rounds} rounds; load average {}",
        RUN.as_secs(),
        KILL_AT.as_secs(),
        deadline.as_millis(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let setups = args
        .next()
        .unwrap_or_else(|| "cluster,sentinel".to_string());
    for name in setups.split(',') {
        match name {
            "cluster" => {
                let mut cluster = Cluster::start(node_timeout_ms);
                measure(&mut cluster, rounds, deadline, quota).await;
            }
            "sentinel" => {
                let mut pair = Pair::start(node_timeout_ms);
                measure(&mut pair, rounds, deadline, quota).await;
            }
            other => panic!("unknown setup {other:?}: cluster or sentinel"),
        }
    }
}

/// `rounds` rounds of every fail policy on `setup`, printed, then their
/// medians as a table.
async fn measure<S: Setup>(setup: &mut S, rounds: usize, deadline: Duration, quota: Quota) {
    println!("\n== {}", S::NAME);
    let policies = [
        OnError::Open,
        OnError::Closed,
        OnError::Local(quota.rate_per_second() / INSTANCES as f64),
    ];
    let mut results: Vec<Vec<Round>> = (0..policies.len()).map(|_| Vec::new()).collect();
    for r in 0..rounds {
        for (p, &policy) in policies.iter().enumerate() {
            let x = round(setup, policy, deadline, quota).await;
            println!(
                "round {r} {:>12}: failover {}, fail-policy answers for {} ({} after the promotion; {} calls, {} timed out), \
                 recovered {}/{INSTANCES} (p50 {}, max {}), admitted {} ({} by the policy), \
                 worst excess over burst + rate·t: {:.1} all, {:.1} Redis' own; {} checks, {} answered by Redis after the kill; net writes lost: {}",
                policy_name(policy),
                ms(x.failover),
                ms(x.failed_for),
                ms(x.failed_for.saturating_sub(x.failover)),
                x.failed_calls,
                x.timed_out,
                x.recovered,
                ms(x.recovery_p50),
                ms(x.recovery_max),
                x.admitted,
                x.by_policy,
                x.excess_all,
                x.excess_redis,
                x.checks,
                x.redis_after,
                x.lost.map_or(
                    "n/a (the bucket ran dry or refilled)".to_string(),
                    |l| format!("{l:.1}")
                ),
            );
            results[p].push(x);
        }
    }
    println!();
    println!(
        "| fail policy | failover | fail-policy answers for (after the promotion) | such calls (timed out) | instances recovered | recovery p50 / max | admitted (by the policy) | worst excess, all | worst excess, Redis' own | net writes lost |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (p, &policy) in policies.iter().enumerate() {
        let rs = &results[p];
        let med = |f: &dyn Fn(&Round) -> f64| median(rs.iter().map(f).collect::<Vec<f64>>());
        let d = |s: f64| ms(Duration::from_secs_f64(s));
        println!(
            "| {} | {} | {} ({}) | {:.0} ({:.0}) | {}/{INSTANCES} (all rounds: min) | {} / {} | {:.0} ({:.0}) | {:.1} | {:.1} (max of rounds {:.1}) | {} |",
            policy_name(policy),
            d(med(&|x| x.failover.as_secs_f64())),
            d(med(&|x| x.failed_for.as_secs_f64())),
            d(med(&|x| x
                .failed_for
                .saturating_sub(x.failover)
                .as_secs_f64())),
            med(&|x| x.failed_calls as f64),
            med(&|x| x.timed_out as f64),
            rs.iter().map(|x| x.recovered).min().unwrap_or(0),
            d(med(&|x| x.recovery_p50.as_secs_f64())),
            d(med(&|x| x.recovery_max.as_secs_f64())),
            med(&|x| x.admitted as f64),
            med(&|x| x.by_policy as f64),
            med(&|x| x.excess_all),
            med(&|x| x.excess_redis),
            rs.iter().map(|x| x.excess_redis).fold(0.0, f64::max),
            lost_cell(rs),
        );
    }
}

/// The median and the largest of the rounds' net writes lost, where they
/// could be read (see `round`).
fn lost_cell(rs: &[Round]) -> String {
    let lost: Vec<f64> = rs.iter().filter_map(|x| x.lost).collect();
    if lost.is_empty() {
        return "n/a (bucket ran dry or refilled)".to_string();
    }
    let max = lost.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.1} (max {max:.1})", median(lost))
}
