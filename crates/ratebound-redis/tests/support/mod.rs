//! Real Redis servers for the tests: `redis-server` on free 127.0.0.1
//! ports, persistence off, in a directory of their own, stopped on drop.
//! `ci/test` installs Debian's `redis-server` when it is missing; without it
//! these tests fail (they do not skip).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

// The nodes of the failover tests (tests/failover.rs), and `redis-cli
// --cluster create`.
#[path = "node.rs"]
pub mod node;

/// A free port on 127.0.0.1 (bound and released: another process could
/// take it in between, which only makes a test fail loudly).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// A free port for a cluster node: its bus port (+10 000) must exist and be
/// free too — redis-server refuses a cluster port above 55 535, and about a
/// fifth of the ephemeral range is.
pub fn free_cluster_port() -> u16 {
    for _ in 0..200 {
        let port = free_port();
        if port <= 55_535 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
    panic!("no free cluster port on 127.0.0.1");
}

fn scratch(port: u16) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ratebound-redis-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Sends one inline command and returns the raw reply (for readiness checks).
pub fn raw(port: u16, command: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(
        &format!("127.0.0.1:{port}").parse().expect("addr"),
        Duration::from_millis(200),
    )
    .ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(format!("{command}\r\n").as_bytes()).ok()?;
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// One `redis-server`.
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    cluster: bool,
}

impl Server {
    /// A standalone server.
    pub fn start() -> Server {
        Server::start_on(free_port(), false)
    }

    /// A server on `port`, cluster-enabled or not; waits until it answers.
    pub fn start_on(port: u16, cluster: bool) -> Server {
        let mut s = Server {
            child: None,
            port,
            cluster,
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let dir = scratch(self.port);
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if self.cluster {
            let conf = format!("nodes-{}.conf", self.port);
            let _ = std::fs::remove_file(dir.join(&conf));
            cmd.args(["--cluster-enabled", "yes", "--cluster-config-file", &conf]);
        }
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start redis-server ({e}): install it (ci/test does: apt-get install redis-server)"
            )
        });
        self.child = Some(child);
        let start = Instant::now();
        while raw(self.port, "PING").is_none_or(|r| !r.starts_with("+PONG")) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "redis-server on port {} did not start",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis://127.0.0.1:port/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server (as a crash would).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port (an empty server: no scripts, no keys).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(scratch(self.port));
    }
}

/// A cluster of three masters, no replicas.
pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    pub fn start() -> Cluster {
        let nodes: Vec<Server> = (0..3)
            .map(|_| Server::start_on(free_cluster_port(), true))
            .collect();
        node::create_cluster(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)), 0);
        let start = Instant::now();
        for n in &nodes {
            while raw(n.port, "CLUSTER INFO").is_none_or(|r| !r.contains("cluster_state:ok")) {
                assert!(start.elapsed() < Duration::from_secs(20), "cluster not ok");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Cluster { nodes }
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }

    /// A cluster connection, and a connection manager to each master (in
    /// the order of `nodes`).
    pub async fn connect(
        &self,
    ) -> (
        redis::cluster_async::ClusterConnection,
        Vec<redis::aio::ConnectionManager>,
    ) {
        let client = redis::cluster::ClusterClient::new(self.urls()).unwrap();
        let conn = client.get_async_connection().await.unwrap();
        let mut nodes = Vec::new();
        for url in self.urls() {
            nodes.push(manager(&url).await);
        }
        (conn, nodes)
    }
}

/// A fresh key for one test (a shared server never sees it twice).
pub fn fresh(name: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{name}-{nanos}-{}", N.fetch_add(1, Ordering::Relaxed))
}

/// A connection manager to the server at `url`.
pub async fn manager(url: &str) -> redis::aio::ConnectionManager {
    let client = redis::Client::open(url).expect("url");
    redis::aio::ConnectionManager::new(client)
        .await
        .expect("connect")
}

/// Which third of the 16 384 hash slots `key` is in: which master holds it
/// in a [`Cluster`] (redis-cli gives each one third), asked of `node`.
pub async fn slot_third(
    node: &mut redis::aio::ConnectionManager,
    key: impl redis::ToRedisArgs,
) -> usize {
    let slot: u64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(node)
        .await
        .unwrap();
    (slot * 3 / 16384) as usize
}

/// The script calls (`EVALSHA` and `EVAL`) the server of `conn` has run so
/// far (`INFO commandstats`).
pub async fn script_calls_of(conn: &mut redis::aio::ConnectionManager) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    script_calls(&info)
}

/// The script calls (`EVALSHA` and `EVAL`) an `INFO commandstats` reply
/// counts.
pub fn script_calls(info: &str) -> u64 {
    ["cmdstat_evalsha:calls=", "cmdstat_eval:calls="]
        .iter()
        .filter_map(|p| info.find(p).map(|i| &info[i + p.len()..]))
        .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
        .sum()
}

/// Runs one engine call as a driver would: `EVALSHA`, and `EVAL` when it
/// fails (`NOSCRIPT`); the reply's integers.
pub async fn run(
    conn: &mut redis::aio::ConnectionManager,
    call: &ratebound_redis::Call,
) -> Vec<i64> {
    let sent: Result<Vec<i64>, redis::RedisError> = redis::cmd("EVALSHA")
        .arg(call.script.sha())
        .arg(1)
        .arg(&call.key)
        .arg(&call.args)
        .query_async(conn)
        .await;
    match sent {
        Ok(reply) => reply,
        Err(_) => redis::cmd("EVAL")
            .arg(call.script.text)
            .arg(1)
            .arg(&call.key)
            .arg(&call.args)
            .query_async(conn)
            .await
            .expect("EVAL"),
    }
}

/// An adapt of `key`'s learned word `seen` → `next` at Redis time `at`
/// (µs): whether it replaced.
pub async fn adapt(
    conn: &mut redis::aio::ConnectionManager,
    e: &ratebound_redis::Engine,
    key: &str,
    seen: ratebound::outbound::Learned,
    next: ratebound::outbound::Learned,
    at: u64,
) -> bool {
    let call = e
        .begin_adapt(None, key.as_bytes(), seen, next)
        .unwrap()
        .at(at);
    let reply = run(conn, &call).await;
    e.finish_adapt(&call, ratebound_redis::CallOutcome::Reply(&reply))
        .unwrap()
}
