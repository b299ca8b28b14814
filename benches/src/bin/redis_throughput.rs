//! Decisions per second against a local Redis, in the same run as the
//! ceiling: `redis-benchmark` running the same `EVALSHA` (C client, no
//! driver, no decision). 1, 16 and 64 concurrent callers, each with its own
//! connection (an instance), keys drawn from 10 000; then all callers on one
//! hot key (a partner's limit) without leasing and with k = 100 — a lease
//! is per key, so it pays where one key is hot.
//! Reports the median of `ROUNDS` rounds and the latency of one decision
//! (p50/p99 over all rounds). Starts and stops its own `redis-server` on a
//! free 127.0.0.1 port (persistence off).
//!
//! `cargo run --release -p ratebound-benches --bin redis_throughput [seconds] [rounds]`
//! (default 2 s per row, 3 rounds: about a minute and a half).

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ratebound::Quota;
use ratebound_redis::{Algorithm, Config, RedisLimiter, script};
use redis::aio::ConnectionManager;

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

/// The `EVALSHA` ceiling from redis-benchmark: requests per second.
fn ceiling(port: u16, clients: usize, seconds: f64) -> f64 {
    // About `seconds` worth of requests at ~60 000/s per core.
    let n = ((60_000.0 * seconds) as usize).max(10_000);
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args([
            "-c",
            &clients.to_string(),
            "-n",
            &n.to_string(),
            "-r",
            "10000",
            "-q",
        ])
        .args(["EVALSHA", script::GCRA.sha(), "1", "rb:bench:__rand_int__"])
        .args(["", "1", "1000000000000", "1", "check", "1"])
        .output()
        .expect("redis-benchmark (redis-tools)");
    let text = String::from_utf8_lossy(&out.stdout);
    // "EVALSHA ...: 61349.69 requests per second, p50=0.399 msec"
    text.split("requests per second")
        .next()
        .and_then(|s| s.rsplit(':').next())
        .and_then(|s| s.split_whitespace().last())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("cannot read redis-benchmark's output: {text}"))
}

async fn row(
    url: &str,
    clients: usize,
    keys: u64,
    lease: u64,
    seconds: f64,
) -> (f64, Vec<Duration>) {
    // A huge limit: every check is a real decision that admits.
    let quota = Quota::per_second(1_000_000.0)
        .unwrap()
        .with_burst(1_000_000)
        .unwrap();
    let mut limiters = Vec::new();
    for _ in 0..clients {
        let conn = ConnectionManager::new(redis::Client::open(url).unwrap())
            .await
            .expect("connect");
        let mut c = Config::new(Algorithm::TokenBucket(quota));
        c.lease = lease;
        c.timeout = Duration::from_secs(1);
        limiters.push(RedisLimiter::new(c, conn).unwrap());
    }
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (i, limiter) in limiters.into_iter().enumerate() {
        let (done, stop) = (done.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut k = i as u64 * 7919;
            while !stop.load(Ordering::Relaxed) {
                k = (k + 1) % keys;
                let t = Instant::now();
                let d = limiter.check(format!("bench:{k}")).await.unwrap();
                if lat.len() < 20_000 {
                    lat.push(t.elapsed());
                }
                assert!(d.is_allowed());
                done.fetch_add(1, Ordering::Relaxed);
            }
            limiter.shutdown().await;
            lat
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    let count = done.load(Ordering::Relaxed) as f64;
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    (count / elapsed, lat)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seconds: f64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let rounds: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3);
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("ratebound-bench-redis-{port}"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut server = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server");
    let url = format!("redis://127.0.0.1:{port}/");
    let mut admin = loop {
        if let Ok(c) = ConnectionManager::new(redis::Client::open(url.as_str()).unwrap()).await {
            break c;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let _: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(script::GCRA.text)
        .query_async(&mut admin)
        .await
        .unwrap();
    println!("redis_throughput: {seconds} s per row, {rounds} rounds, median decisions/s");
    println!(
        "| callers | redis-benchmark EVALSHA | ratebound, 10 000 keys | share of ceiling | p50 / p99 per decision | one hot key | one hot key, lease 100 | lease speed-up |"
    );
    println!("|---:|---:|---:|---:|---|---:|---:|---:|");
    for clients in [1usize, 16, 64] {
        let (mut ceil, mut plain, mut hot, mut leased, mut lat) =
            (vec![], vec![], vec![], vec![], vec![]);
        for _ in 0..rounds {
            ceil.push(ceiling(port, clients, seconds));
            let (r, l) = row(&url, clients, 10_000, 0, seconds).await;
            plain.push(r);
            lat.extend(l);
            hot.push(row(&url, clients, 1, 0, seconds).await.0);
            leased.push(row(&url, clients, 1, 100, seconds).await.0);
        }
        lat.sort();
        let (c, p, h, l) = (median(ceil), median(plain), median(hot), median(leased));
        println!(
            "| {clients} | {c:.0} | {p:.0} | {:.0} % | {:?} / {:?} | {h:.0} | {l:.0} | {:.1} |",
            100.0 * p / c,
            percentile(&lat, 0.5),
            percentile(&lat, 0.99),
            l / h
        );
    }
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
