//! `redis-server` processes for the failover tests (tests/failover.rs) and
//! the failover bench (benches/src/bin/redis_failover, which includes this
//! file by path): cluster nodes, plain nodes and sentinels, each in a
//! directory of its own and stopped on drop, and admin commands on a fresh
//! blocking connection.

#![allow(dead_code)] // each user takes its part

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One `redis-server` child in its own directory: a cluster node unless
/// `plain`.
pub(crate) struct Node {
    pub(crate) port: u16,
    pub(crate) dir: PathBuf,
    pub(crate) node_timeout_ms: u64,
    pub(crate) child: Option<Child>,
    /// More arguments (a replica's `--replicaof`, a sentinel's config).
    pub(crate) extra: Vec<String>,
    /// Not cluster-enabled.
    pub(crate) plain: bool,
}

impl Node {
    /// A cluster node on `port` (one Redis accepts for a cluster: see
    /// `free_cluster_port`) with `cluster-node-timeout` `node_timeout_ms`.
    pub(crate) fn start(port: u16, node_timeout_ms: u64) -> Node {
        Node::launch(port, node_timeout_ms, Vec::new(), false)
    }

    /// The directory of the node on `port`.
    pub(crate) fn dir_for(port: u16) -> PathBuf {
        std::env::temp_dir().join(format!("ratebound-failover-{}-{port}", std::process::id()))
    }

    /// A node in its own directory, started: `extra` arguments (a replica's
    /// `--replicaof`), `plain` for one not cluster-enabled.
    pub(crate) fn launch(port: u16, node_timeout_ms: u64, extra: Vec<String>, plain: bool) -> Node {
        let dir = Node::dir_for(port);
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

    /// Starts the server (again, after [`kill`](Self::kill)) and waits until
    /// it answers.
    pub(crate) fn spawn(&mut self) {
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
            .expect("redis-server (ci/test installs it: apt-get install redis-server)");
        self.child = Some(child);
        let start = Instant::now();
        while query(self.port, &["PING"]).is_none() {
            assert!(start.elapsed() < Duration::from_secs(10), "no redis-server");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server (as a crash would).
    pub(crate) fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `127.0.0.1:port`.
    pub(crate) fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Six cluster nodes (`cluster-node-timeout` `node_timeout_ms`, on ports
/// from `port()`) made one cluster of 3 masters with a replica each by
/// `redis-cli --cluster create` (not yet waited for).
pub(crate) fn six_node_cluster(port: impl Fn() -> u16, node_timeout_ms: u64) -> Vec<Node> {
    let nodes: Vec<Node> = (0..6)
        .map(|_| Node::start(port(), node_timeout_ms))
        .collect();
    create_cluster(nodes.iter().map(Node::addr), 1);
    nodes
}

/// `redis-cli --cluster create` of the nodes at `addrs` (`host:port`),
/// `replicas` replicas a master; the test fails if it fails.
pub(crate) fn create_cluster(addrs: impl IntoIterator<Item = String>, replicas: u32) {
    let out = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(addrs)
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .output()
        .expect("redis-cli (ci/test installs it: apt-get install redis-tools)");
    assert!(
        out.status.success(),
        "cluster create: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A plain (not cluster) `redis-server` on `port`: a primary, or a replica
/// of `replica_of`.
pub(crate) fn plain_node(port: u16, replica_of: Option<u16>) -> Node {
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

/// The name the sentinels monitor a primary by.
pub(crate) const MASTER_NAME: &str = "partner";

/// A sentinel on `port` (`redis-server --sentinel`) watching the primary on
/// `primary`: quorum 2, down after `down_after_ms`.
pub(crate) fn sentinel(port: u16, primary: u16, down_after_ms: u64) -> Node {
    let dir = Node::dir_for(port);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let conf = dir.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port {port}\nbind 127.0.0.1\ndir {}\n\
             sentinel monitor {MASTER_NAME} 127.0.0.1 {primary} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} {down_after_ms}\n\
             sentinel failover-timeout {MASTER_NAME} 10000\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n",
            dir.display(),
        ),
    )
    .expect("sentinel.conf");
    let extra = vec![conf.display().to_string(), "--sentinel".to_string()];
    Node::launch(port, 0, extra, true)
}

/// The primary's port as the sentinel on `port` names it.
pub(crate) fn primary_by(port: u16) -> Option<u16> {
    match query(port, &["SENTINEL", "get-master-addr-by-name", MASTER_NAME])? {
        redis::Value::Array(v) => match v.get(1)? {
            redis::Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
            _ => None,
        },
        _ => None,
    }
}

/// Whether the node on `port` answers `ROLE` as a master.
pub(crate) fn is_master(port: u16) -> bool {
    matches!(query(port, &["ROLE"]),
        Some(redis::Value::Array(v)) if matches!(v.first(), Some(redis::Value::BulkString(b)) if b == b"master"))
}

/// One command on a fresh blocking connection (admin work, never in a
/// measured path); `None` when the node does not answer.
pub(crate) fn query(port: u16, args: &[&str]) -> Option<redis::Value> {
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

/// [`query`]'s reply as text: a string or an integer (`None` for others).
pub(crate) fn text(port: u16, args: &[&str]) -> Option<String> {
    match query(port, args)? {
        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(&b).into_owned()),
        redis::Value::VerbatimString { text, .. } => Some(text),
        redis::Value::SimpleString(s) => Some(s),
        redis::Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}
