//! Failovers under running limiters: a Redis Cluster of 3 masters with a
//! replica each (6 `redis-server`s on 127.0.0.1), the master holding the
//! key's slot killed and its replica promoted by the cluster; and a
//! primary with a replica watched by 3 sentinels, the primary killed and
//! the replica promoted by the sentinels. The same limiters (one
//! `ClusterConnection` or `SentinelConnection` each, never rebuilt) answer
//! by their fail policy meanwhile, each within its deadline, and by Redis
//! again once the replica serves; the global bound holds throughout.
//! The figures across fail policies come from
//! `benches/src/bin/redis_failover/` (the 50-instance run).

mod support;

use std::time::{Duration, Instant};

use ratebound::Quota;
use ratebound_redis::{Algorithm, Config, OnError, RedisLimiter, SentinelConnection, Source};
use redis::aio::ConnectionLike;
use redis::cluster::ClusterClient;
use support::node::{
    MASTER_NAME, Node, is_master, plain_node, primary_by, sentinel, six_node_cluster, text,
};
use support::{free_cluster_port, free_port, fresh};

/// The ports of the master serving `slot` and of its replica, from
/// `CLUSTER NODES` on `port`.
fn master_and_replica(port: u16, slot: u16) -> Option<(u16, u16)> {
    let view = text(port, &["CLUSTER", "NODES"])?;
    let rows: Vec<Vec<&str>> = view
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() >= 8)
        .collect();
    let port_of =
        |f: &[&str]| -> Option<u16> { f[1].split('@').next()?.rsplit(':').next()?.parse().ok() };
    let master = rows.iter().find(|f| {
        f[2].contains("master")
            && f[8..].iter().any(|r| {
                let (a, b) = r.split_once('-').unwrap_or((r, r));
                matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if (a..=b).contains(&slot))
            })
    })?;
    let replica = rows
        .iter()
        .find(|f| f[2].contains("slave") && f[3] == master[0])?;
    Some((port_of(master)?, port_of(replica)?))
}

/// Six nodes, `--cluster-replicas 1`, until every replica's link is up.
fn cluster() -> Vec<Node> {
    let nodes = six_node_cluster(free_cluster_port, 500);
    let start = Instant::now();
    loop {
        let ok = nodes.iter().all(|n| {
            text(n.port, &["CLUSTER", "INFO"]).is_some_and(|t| t.contains("cluster_state:ok"))
        });
        let synced = nodes
            .iter()
            .filter_map(|n| text(n.port, &["INFO", "replication"]))
            .filter(|t| t.contains("master_link_status:up"))
            .count();
        if ok && synced == 3 {
            return nodes;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "cluster not ready: ok {ok}, {synced} replicas synced"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A primary, its replica and three sentinels, once every sentinel names
/// the primary and knows the replica and the others, and the replica's link
/// is up: (primary, replica, sentinels).
fn sentinel_pair() -> (Node, Node, Vec<Node>) {
    let primary = plain_node(free_port(), None);
    let replica = plain_node(free_port(), Some(primary.port));
    let sentinels: Vec<Node> = (0..3)
        .map(|_| sentinel(free_port(), primary.port, 500))
        .collect();
    let start = Instant::now();
    loop {
        let named = sentinels
            .iter()
            .all(|s| primary_by(s.port) == Some(primary.port));
        let known = sentinels.iter().all(|s| {
            text(s.port, &["INFO", "sentinel"])
                .is_some_and(|t| t.contains("slaves=1") && t.contains("sentinels=3"))
        });
        let linked = text(replica.port, &["INFO", "replication"])
            .is_some_and(|t| t.contains("master_link_status:up"));
        if named && known && linked {
            return (primary, replica, sentinels);
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "sentinels not ready: named {named}, known {known}, linked {linked}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Fail closed, 10/s burst 20, a 250 ms deadline and a 250 ms cool-down.
fn config() -> Config {
    let mut c = Config::new(Algorithm::TokenBucket(
        Quota::parse("10/s burst 20").unwrap(),
    ));
    c.on_error = OnError::Closed;
    c.timeout = DEADLINE;
    c.breaker_cooldown = Duration::from_millis(250);
    c
}

const DEADLINE: Duration = Duration::from_millis(250);

/// Runs `limiters` (each checking `key` every 10 ms for 9 s), calls `kill`
/// 1.5 s in, then waits for `promoted` to say the replica serves: each
/// limiter answers by its policy within its deadline (generously bounded
/// here, 250 + 500 ms: the exact rule is deadlines.rs') only after the
/// kill, and by Redis again — the same limiter, the same connection —
/// within 4 s of the promotion and to the end of the run; what Redis
/// admits over the whole run stays within 20 + 10·t, and after every
/// limiter is back it admits the refill (the limit is used, not stuck).
async fn through_failover<C: ConnectionLike + Clone + Send + Sync + 'static>(
    what: &str,
    limiters: Vec<RedisLimiter<C>>,
    key: String,
    kill: impl FnOnce(),
    promoted: impl Fn() -> bool + Send + 'static,
) {
    let start = Instant::now();
    let run = Duration::from_secs(9);
    let kill_at = Duration::from_millis(1500);
    let mut tasks = Vec::new();
    for limiter in &limiters {
        let (limiter, key) = (limiter.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            // Bounded: at most one check per 10 ms of the run.
            for _ in 0..run.as_millis() / 10 {
                if start.elapsed() >= run {
                    break;
                }
                let t = Instant::now();
                let d = limiter.check(&key).await.unwrap();
                seen.push((t - start, t.elapsed(), d.source(), d.is_allowed()));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            seen
        }));
    }
    tokio::time::sleep(kill_at).await;
    // Timed as the signal is sent: a client may see the connection drop
    // before the process is reaped.
    let killed = start.elapsed();
    kill();
    let promoted = tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(8) {
            if promoted() {
                return Some(t.elapsed());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    })
    .await
    .unwrap()
    .expect("the replica was promoted within 8 s");

    let mut redis_admitted = 0u64;
    let mut last_failure = Duration::ZERO;
    let mut runs = Vec::new();
    for task in tasks {
        runs.push(task.await.unwrap());
    }
    // When the last limiter was back (each one's first Redis answer after
    // the kill from which on only Redis answered).
    let mut all_back = Duration::ZERO;
    for seen in &runs {
        let mut recovered_at = None;
        for &(at, took, source, allowed) in seen {
            assert!(
                took <= DEADLINE + Duration::from_millis(500),
                "{what}: a call took {took:?} at {at:?} ({source:?})"
            );
            match source {
                Source::Redis => redis_admitted += u64::from(allowed),
                Source::FailClosed => {
                    assert!(!allowed, "{what}: fail closed admitted at {at:?}");
                    assert!(
                        at + took >= killed,
                        "{what}: a failure before the kill, at {at:?}"
                    );
                    last_failure = last_failure.max(at + took);
                    recovered_at = None;
                }
                other => panic!("{what}: {other:?} at {at:?}"),
            }
            if source == Source::Redis && at > killed && recovered_at.is_none() {
                recovered_at = Some(at);
            }
        }
        assert!(
            seen.iter().any(|s| s.2 == Source::FailClosed),
            "{what}: the kill was felt"
        );
        // Answered by Redis from some point after the kill to the end of
        // the run: recovered, on the same connection.
        let back = recovered_at.expect("answered by Redis again after the kill");
        assert!(
            seen.last().is_some_and(|s| s.2 == Source::Redis),
            "{what}: the last answer was Redis'"
        );
        assert!(
            back < killed + promoted + Duration::from_secs(4),
            "{what}: back at {back:?}: killed at {killed:?}, promoted {promoted:?} later"
        );
        all_back = all_back.max(back);
    }
    // Admitted from then on: every token refilled after it is taken by
    // one of the checks (every 10 ms) before the run ends — less 0.5 s of
    // slack for a loaded machine near the end.
    let admitted_after = runs
        .iter()
        .flatten()
        .filter(|s| s.0 >= all_back && s.2 == Source::Redis && s.3)
        .count();
    let refill = 10.0 * (run.saturating_sub(all_back).as_secs_f64() - 0.5);
    println!(
        "{what}: all back at {all_back:?}; {admitted_after} admitted since, the refill {refill:.1}"
    );
    assert!(
        admitted_after as f64 >= refill.floor(),
        "{what}: {admitted_after} admitted after the failover, the refill {refill:.1}"
    );
    let elapsed = start.elapsed().as_secs_f64();
    println!(
        "{what}: killed at {killed:?}, promoted {promoted:?} later, last fail-policy answer \
         {:?} after the kill; Redis admitted {redis_admitted} in {elapsed:.2} s",
        last_failure.saturating_sub(killed)
    );
    assert!(
        redis_admitted as f64 <= 20.0 + 10.0 * elapsed + 1.0,
        "{what}: {redis_admitted} admitted in {elapsed:.2} s"
    );
}

/// The cluster: the master of the key's slot killed, three limiters on
/// `ClusterConnection`s (redis-rs' defaults).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limiters_recover_from_a_cluster_failover_without_a_restart() {
    let mut nodes = cluster();
    let urls: Vec<String> = nodes
        .iter()
        .map(|n| format!("redis://127.0.0.1:{}/", n.port))
        .collect();
    let mut limiters = Vec::new();
    for _ in 0..3 {
        let conn = ClusterClient::new(urls.clone())
            .unwrap()
            .get_async_connection()
            .await
            .unwrap();
        limiters.push(RedisLimiter::new(config(), conn).unwrap());
    }
    let key = fresh("failover");
    let redis_key = limiters[0].engine().redis_key(None, key.as_bytes());
    let slot: u16 = text(
        nodes[0].port,
        &["CLUSTER", "KEYSLOT", &String::from_utf8_lossy(&redis_key)],
    )
    .and_then(|s| s.parse().ok())
    .expect("keyslot");
    let (master, replica) = master_and_replica(nodes[0].port, slot).expect("slot owner");
    let kill = || {
        nodes
            .iter_mut()
            .find(|n| n.port == master)
            .expect("master")
            .kill();
    };
    let promoted = move || is_master(replica);
    through_failover("cluster", limiters, key, kill, promoted).await;
}

/// Sentinel: the primary killed, three limiters on `SentinelConnection`s
/// (connection timeout 200 ms, response timeout 500 ms), which find the
/// promoted replica through the sentinels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limiters_recover_from_a_sentinel_failover_without_a_restart() {
    let (mut primary, replica, sentinels) = sentinel_pair();
    let urls: Vec<String> = sentinels
        .iter()
        .map(|s| format!("redis://127.0.0.1:{}/", s.port))
        .collect();
    let timeouts = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_millis(200)))
        .set_response_timeout(Some(Duration::from_millis(500)));
    let mut limiters = Vec::new();
    for _ in 0..3 {
        let conn = SentinelConnection::new(
            urls.clone(),
            MASTER_NAME,
            redis::RedisConnectionInfo::default(),
        )
        .unwrap()
        .with_config(timeouts.clone());
        limiters.push(RedisLimiter::new(config(), conn.clone()).unwrap());
        assert_eq!(conn.primary(), None, "connected only at the first command");
    }
    // `connect` asks the sentinels at once; `resolve` names the primary.
    let probe = SentinelConnection::connect(
        urls.clone(),
        MASTER_NAME,
        redis::RedisConnectionInfo::default(),
    )
    .await
    .unwrap();
    let named = format!("127.0.0.1:{}", primary.port);
    assert_eq!(probe.primary().as_deref(), Some(named.as_str()));
    assert_eq!(probe.resolve().await.unwrap(), named);
    let key = fresh("sentinel-failover");
    // Every limiter answers from the primary before the kill.
    for l in &limiters {
        assert_eq!(l.check(&key).await.unwrap().source(), Source::Redis);
    }
    let (dead, replica_port, watcher) = (primary.port, replica.port, sentinels[0].port);
    let promoted = move || primary_by(watcher) == Some(replica_port) && is_master(replica_port);
    through_failover("sentinel", limiters, key, || primary.kill(), promoted).await;
    assert_ne!(primary_by(watcher), Some(dead), "the sentinels moved on");
    drop(replica);
}
