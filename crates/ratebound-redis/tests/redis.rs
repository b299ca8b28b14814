//! The Rust driver against real Redis servers (started by the tests):
//! the spec vectors, the source material's incident, faults, a cluster,
//! leasing and bad input.

mod support;
mod vectors;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ratebound::{Quota, TokenBucket};
use ratebound_redis::{Algorithm, Config, OnError, RedisLimiter, Source};
use redis::aio::ConnectionManager;
use serde_json::Value;
use support::{Cluster, Server, fresh, manager, script_calls_of, slot_third};
use vectors::{config_of, observed};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_vectors_replay_against_real_redis() {
    let server = Server::start();
    let conn = manager(&server.url()).await;
    let path = format!("{}/../../spec/redis.json", env!("CARGO_MANIFEST_DIR"));
    let spec: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let vectors = spec["vectors"].as_array().unwrap();
    assert!(vectors.len() >= 8);
    let mut failures = Vec::new();
    let mut steps = 0;
    for v in vectors {
        let id = v["id"].as_str().unwrap();
        let mut limiter = RedisLimiter::new(config_of(&v["config"]), conn.clone()).unwrap();
        let key = fresh(id);
        for (i, step) in v["steps"].as_array().unwrap().iter().enumerate() {
            // A redeploy: the same key under new settings from this step on.
            if let Some(config) = step.get("config") {
                limiter = RedisLimiter::new(config_of(config), conn.clone()).unwrap();
            }
            steps += 1;
            let n = step["n"].as_u64().unwrap();
            let at = step["at_us"].as_u64().unwrap();
            let d = limiter.check_n_at(&key, n, at).await.unwrap();
            let got = observed(&d);
            for (field, want) in step["expect"].as_object().unwrap() {
                if &got[field] != want {
                    failures.push(format!(
                        "{id} step {i}: {field} = {}, want {want}",
                        got[field]
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "redis.json:\n{}", failures.join("\n"));
    let want: usize = vectors
        .iter()
        .map(|v| v["steps"].as_array().unwrap().len())
        .sum();
    assert_eq!(steps, want, "every step was replayed");
}

/// The source material's incident: fifty instances, each with its own
/// connection and four callers in flight, share a partner's 10/s burst 20
/// for 3 s — batched (the default: an instance's callers in flight share
/// script runs) and unbatched. Together they stay within 20 + 10·t (+1 for
/// the token that may fall due while the last call is in flight) and use
/// at least 90 % of it, both ways; batched, in fewer script calls than
/// checks. Fifty local buckets, the contrast, let through about fifty
/// times the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_instances_share_one_limit() {
    let server = Server::start();
    let mut admin = manager(&server.url()).await;
    let quota = Quota::parse("10/s burst 20").unwrap();
    for batch in [true, false] {
        let key = fresh("partner");
        let mut instances = Vec::new();
        for _ in 0..50 {
            // A generous deadline: this test is about sharing one limit,
            // not about deadlines (tests/faults.rs), and the machine may be
            // busy.
            let mut c = Config::new(Algorithm::TokenBucket(quota));
            c.timeout = Duration::from_secs(1);
            c.batch = batch;
            instances.push(RedisLimiter::new(c, manager(&server.url()).await).unwrap());
        }
        let admitted = Arc::new(AtomicU64::new(0));
        let run = Duration::from_secs(3);
        let before = script_calls_of(&mut admin).await;
        let start = Instant::now();
        let mut tasks = Vec::new();
        for limiter in &instances {
            for _ in 0..4 {
                let (limiter, admitted, key) = (limiter.clone(), admitted.clone(), key.clone());
                tasks.push(tokio::spawn(async move {
                    let mut sources = Vec::new();
                    // Bounded: at most 3 000 checks per caller.
                    for _ in 0..3_000 {
                        if start.elapsed() >= run {
                            break;
                        }
                        let d = limiter.check(&key).await.unwrap();
                        sources.push(d.source());
                        if d.is_allowed() {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    sources
                }));
            }
        }
        let mut checks = 0;
        for t in tasks {
            let sources = t.await.unwrap();
            assert!(sources.iter().all(|s| *s == Source::Redis), "{sources:?}");
            checks += sources.len() as u64;
        }
        let elapsed = start.elapsed().as_secs_f64();
        let calls = script_calls_of(&mut admin).await - before;
        let admitted = admitted.load(Ordering::Relaxed) as f64;
        let bound = 20.0 + 10.0 * elapsed;
        println!(
            "incident, batch {batch}: {checks} checks in {calls} script calls, \
             {admitted} admitted in {elapsed:.2} s, bound {bound:.1}"
        );
        assert!(
            admitted <= bound + 1.0,
            "batch {batch}: {admitted} > {bound}"
        );
        assert!(
            admitted >= 0.9 * bound,
            "batch {batch}: {admitted} < 90 % of {bound}"
        );
        if batch {
            assert!(calls < checks, "batched: {calls} calls for {checks} checks");
        } else {
            // One call per check, and one EVAL per connection whose first
            // EVALSHA met NOSCRIPT at most.
            assert!(
                (checks..=checks + 50).contains(&calls),
                "unbatched: {calls}"
            );
        }
    }

    // The contrast: a local bucket per instance.
    let locals: Vec<TokenBucket> = (0..50).map(|_| TokenBucket::new(quota)).collect();
    let start = Instant::now();
    let mut local_admitted = 0u64;
    while start.elapsed() < Duration::from_millis(500) {
        for b in &locals {
            local_admitted += u64::from(b.check().is_allowed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let bound = 20.0 + 10.0 * start.elapsed().as_secs_f64();
    println!(
        "contrast: 50 local buckets admitted {local_admitted} in 0.5 s (global bound {bound:.0})"
    );
    assert!(local_admitted as f64 > 10.0 * bound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_holds_the_bound_per_key_on_every_master() {
    let cluster = Cluster::start();
    let (conn, mut nodes) = cluster.connect().await;
    let mut c = Config::new(Algorithm::TokenBucket(Quota::parse("5/s burst 5").unwrap()));
    c.timeout = Duration::from_secs(1);
    let limiter = RedisLimiter::new(c, conn).unwrap();
    // One key in each third of the slots (redis-cli gives each master
    // one), by the slot of the Redis key the limiter will write.
    let mut keys: Vec<Option<(String, Vec<u8>)>> = vec![None, None, None];
    for i in 0..1000 {
        let key = format!("cluster-{i}");
        let redis_key = limiter.engine().redis_key(None, key.as_bytes());
        let third = slot_third(&mut nodes[0], &redis_key).await;
        if keys[third].is_none() {
            keys[third] = Some((key, redis_key));
        }
        if keys.iter().all(Option::is_some) {
            break;
        }
    }
    let keys: Vec<(String, Vec<u8>)> = keys.into_iter().flatten().collect();
    assert_eq!(keys.len(), 3, "one key for each master");
    let start = Instant::now();
    let mut holders = Vec::new();
    for (key, redis_key) in &keys {
        let mut admitted = 0;
        for _ in 0..20 {
            let d = limiter.check(key).await.unwrap();
            assert_eq!(d.source(), Source::Redis);
            admitted += u64::from(d.is_allowed());
        }
        let bound = 5.0 + 5.0 * start.elapsed().as_secs_f64();
        assert!(
            admitted >= 5 && admitted as f64 <= bound + 1.0,
            "{key}: {admitted}"
        );
        // Exactly one master holds the key's state.
        let mut on = Vec::new();
        for (i, node) in nodes.iter_mut().enumerate() {
            let here: Vec<Vec<u8>> = redis::cmd("KEYS")
                .arg("rb:tb:cluster-*")
                .query_async(node)
                .await
                .unwrap();
            if here.contains(redis_key) {
                on.push(i);
            }
        }
        assert_eq!(on.len(), 1, "{key} is held by nodes {on:?}");
        holders.push(on[0]);
    }
    holders.sort_unstable();
    assert_eq!(
        holders,
        [0, 1, 2],
        "the three keys live on the three masters"
    );
}

/// Leasing, for k = 1, 10, 100 with four instances of two tasks each:
/// under the limit (800 requests, burst 1000) every request passes and the
/// round trips drop by about k; then overloaded for 0.5 s, the global bound
/// still holds over the whole run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leasing_keeps_the_bound_and_saves_round_trips() {
    let server = Server::start();
    let mut admin = manager(&server.url()).await;
    let quota = Quota::parse("1000/s burst 1000").unwrap();
    let mut trips = Vec::new();
    for k in [1u64, 10, 100] {
        let key = fresh("lease");
        let mut instances = Vec::new();
        for _ in 0..4 {
            let mut c = Config::new(Algorithm::TokenBucket(quota));
            c.lease = k;
            c.timeout = Duration::from_secs(1);
            instances.push(Arc::new(
                RedisLimiter::new(c, manager(&server.url()).await).unwrap(),
            ));
        }
        let admitted = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let run = |checks: usize, until: Duration| {
            let mut tasks = Vec::new();
            for limiter in &instances {
                for _ in 0..2 {
                    let (limiter, admitted, key) = (limiter.clone(), admitted.clone(), key.clone());
                    tasks.push(tokio::spawn(async move {
                        for _ in 0..checks {
                            if start.elapsed() >= until {
                                break;
                            }
                            if limiter.check(&key).await.unwrap().is_allowed() {
                                admitted.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }));
                }
            }
            tasks
        };
        // Under the limit: 8 × 100 requests.
        let before = script_calls_of(&mut admin).await;
        for t in run(100, Duration::from_secs(30)) {
            t.await.unwrap();
        }
        let calls = script_calls_of(&mut admin).await - before;
        let under = admitted.load(Ordering::Relaxed);
        assert_eq!(under, 800, "lease {k}: all pass under the limit");
        // Overloaded for half a second.
        let until = start.elapsed() + Duration::from_millis(500);
        for t in run(20_000, until) {
            t.await.unwrap();
        }
        let elapsed = start.elapsed().as_secs_f64();
        let total = admitted.load(Ordering::Relaxed);
        let mut returned = 0;
        for limiter in &instances {
            returned += limiter.shutdown().await;
        }
        let bound = 1000.0 + 1000.0 * elapsed;
        println!(
            "lease {k}: 800 admitted in {calls} round trips under the limit; \
             {total} admitted in {elapsed:.2} s overloaded (bound {bound:.0}); {returned} returns"
        );
        assert!(total as f64 <= bound + 1.0, "lease {k}: {total} > {bound}");
        trips.push(calls);
    }
    // k = 1: one round trip per request (plus one EVAL per connection whose
    // first EVALSHA met NOSCRIPT); k: about 800 / k (an instance's two
    // tasks may both miss its lease at once: a few more).
    assert!(
        (800..=808).contains(&trips[0]),
        "k=1: {} round trips",
        trips[0]
    );
    assert!(trips[1] <= 800 / 10 + 16, "k=10: {} round trips", trips[1]);
    assert!(
        trips[2] <= 800 / 100 + 16,
        "k=100: {} round trips",
        trips[2]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_keys_bad_numbers_and_an_unreachable_server() {
    let server = Server::start();
    let limiter = RedisLimiter::token_bucket(
        Quota::parse("1/hour burst 1").unwrap(),
        manager(&server.url()).await,
    )
    .unwrap();
    let big = "k".repeat(10 * 1024);
    let mut bigger = big.clone();
    bigger.push('x');
    for key in ["with spaces", "ключ 🔑", big.as_str(), bigger.as_str()] {
        let key = format!("{}-{key}", fresh("odd"));
        assert!(limiter.check(&key).await.unwrap().is_allowed(), "{key:.40}");
        assert!(
            !limiter.check(&key).await.unwrap().is_allowed(),
            "{key:.40}"
        );
    }
    assert!(
        limiter
            .check_n(b"\xff\x00binary", 1)
            .await
            .unwrap()
            .is_allowed()
    );
    // n = 0 is a query, as in the core (spec/redis.json replays it too).
    let q = limiter.check_n("k", 0).await.unwrap();
    assert!(q.is_allowed() && q.remaining() == 1, "{q:?}");
    let err = limiter.check_n("k", 2).await.unwrap_err();
    assert_eq!(err.code(), "insufficient_capacity");
    assert!(err.to_string().contains("requested 2"), "{err}");
    // Bad settings are typed errors naming the value.
    let fast = Quota::per_second(2_000_000.0).unwrap();
    let err = RedisLimiter::token_bucket(fast, manager(&server.url()).await).unwrap_err();
    assert_eq!(err.code(), "rate_too_high");
    let mut c = Config::new(Algorithm::SlidingWindow {
        limit: 1_000_000_000,
        window: Duration::from_secs(86_400),
    });
    c.timeout = Duration::from_millis(50);
    assert_eq!(
        RedisLimiter::new(c, manager(&server.url()).await)
            .unwrap_err()
            .code(),
        "invalid_window"
    );
    assert_eq!(
        OnError::parse("local", None).unwrap_err().code(),
        "invalid_option"
    );

    // A closed port: a ConnectionManager told not to retry fails at once
    // with the client's error (its defaults retry with backoff for
    // seconds: the README says so); no hang.
    let port = support::free_port();
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let quick = redis::aio::ConnectionManagerConfig::new()
        .set_number_of_retries(0)
        .set_connection_timeout(Some(Duration::from_millis(200)));
    let t = Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(5),
        ConnectionManager::new_with_config(client, quick),
    )
    .await;
    assert!(
        matches!(result, Ok(Err(_))),
        "connecting to a closed port fails"
    );
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
}
