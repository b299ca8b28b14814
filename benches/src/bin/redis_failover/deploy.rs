//! The deployments a failover run kills a primary in: a Redis Cluster
//! (3 masters, 1 replica each) and a Sentinel-managed pair (see main.rs).

use std::time::{Duration, Instant};

use ratebound_redis::SentinelConnection;
use redis::aio::ConnectionLike;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, RedisConnectionInfo};

use crate::node::{
    MASTER_NAME, Node, is_master, plain_node, primary_by, sentinel, six_node_cluster, text,
};

pub(crate) fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// A free port for a cluster node: at most 55535 (Redis refuses more: its
/// cluster bus listens 10000 above), with the bus port free too.
pub(crate) fn cluster_port() -> u16 {
    for _ in 0..1000 {
        let port = free_port();
        if port <= 55535 && std::net::TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
    panic!("no free port for a cluster node");
}

/// A `CLUSTER NODES` row: id, port, is master, master id, slot ranges.
type Row = (String, u16, bool, String, Vec<(u16, u16)>);

/// `CLUSTER NODES` on `port`, the nodes not failed.
pub(crate) fn nodes(port: u16) -> Vec<Row> {
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

pub(crate) struct Cluster {
    nodes: Vec<Node>,
    /// The master to kill and its replica (ports).
    target: Option<(u16, u16)>,
}

impl Cluster {
    pub(crate) fn start(node_timeout_ms: u64) -> Cluster {
        let c = Cluster {
            nodes: six_node_cluster(cluster_port, node_timeout_ms),
            target: None,
        };
        c.wait_healthy();
        c
    }

    /// Until every node says `cluster_state:ok`, there are 3 masters and
    /// every master has a replica whose link is up.
    pub(crate) fn wait_healthy(&self) {
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

    pub(crate) fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://{}/", n.addr()))
            .collect()
    }

    /// The ports of the master serving `slot` and of its replica.
    pub(crate) fn master_and_replica(&self, slot: u16) -> (u16, u16) {
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

/// A deployment whose primary can be killed: a cluster, or a
/// Sentinel-managed pair.
pub(crate) trait Setup {
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

/// A Sentinel-managed primary/replica pair: two `redis-server`s and three
/// sentinels (`redis-server --sentinel`, quorum 2), `down-after-milliseconds`
/// the node timeout.
pub(crate) struct Pair {
    data: Vec<Node>,
    sentinels: Vec<Node>,
    /// The primary to kill and the other node (ports).
    target: Option<(u16, u16)>,
}

impl Pair {
    pub(crate) fn start(down_after_ms: u64) -> Pair {
        let primary = plain_node(free_port(), None);
        let replica = plain_node(free_port(), Some(primary.port));
        let sentinels = (0..3)
            .map(|_| sentinel(free_port(), primary.port, down_after_ms))
            .collect();
        let p = Pair {
            data: vec![primary, replica],
            sentinels,
            target: None,
        };
        p.wait_healthy();
        p
    }

    /// Until every sentinel agrees on the primary, knows the replica and
    /// the other sentinels, and the replica's link is up.
    pub(crate) fn wait_healthy(&self) {
        let start = Instant::now();
        loop {
            let primaries: Vec<Option<u16>> =
                self.sentinels.iter().map(|s| primary_by(s.port)).collect();
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
        let primary = primary_by(self.sentinels[0].port).expect("primary");
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
        Box::new(move || primary_by(sentinel) == Some(replica) && is_master(replica))
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
