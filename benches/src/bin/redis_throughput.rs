//! Decisions per second against a local Redis, in the same run as the
//! ceiling: `redis-benchmark` running the same one-key `EVALSHA` (C client,
//! no driver, no decision) over as many connections as there are callers.
//!
//! 1. One limiter (one multiplexed connection) with 1, 16 and 64 callers in
//!    flight over 10 000 keys, with `batch = false` (one call per check)
//!    and with batching (the default: the calls in flight together go out
//!    as one script run over many keys).
//! 2. The reserve mode (`reserve_n`, what a global wait costs) beside the
//!    check, 16 callers in flight, both ways.
//! 3. Callers each with their own connection (an instance) on one hot key
//!    (a partner's limit), without leasing and with k = 100 — a lease is
//!    per key, so it pays where one key is hot.
//!
//! Each row is the median of `ROUNDS` rounds (rounds interleave the rows,
//! so that a busy moment of the machine touches them alike), with the
//! latency of one decision (p50/p99 over all rounds). Starts and stops its
//! own `redis-server` on a free 127.0.0.1 port (persistence off).
//!
//! `cargo run --release --locked -p ratebound-benches --bin redis_throughput [seconds] [rounds]`
//! (default 2 s per row, 3 rounds: about two minutes).

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ratebound::Quota;
use ratebound_redis::{Algorithm, Config, RedisLimiter, Source, script};
use redis::aio::ConnectionManager;

const KEYS: u64 = 10_000;

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

/// `d` in µs, or ms from 10 ms on, for the table.
fn show(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 10_000.0 {
        format!("{us:.0} µs")
    } else {
        format!("{:.1} ms", us / 1000.0)
    }
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
            &KEYS.to_string(),
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

async fn connect(url: &str) -> ConnectionManager {
    ConnectionManager::new(redis::Client::open(url).unwrap())
        .await
        .expect("connect")
}

/// A huge limit: every check is a real decision that admits.
fn config(lease: u64, batch: bool) -> Config {
    let quota = Quota::per_second(1_000_000.0)
        .unwrap()
        .with_burst(1_000_000)
        .unwrap();
    let mut c = Config::new(Algorithm::TokenBucket(quota));
    c.lease = lease;
    c.batch = batch;
    c.timeout = Duration::from_secs(1);
    c
}

/// What each caller asks.
#[derive(Clone, Copy, PartialEq)]
enum Verb {
    Check,
    Reserve,
}

/// `callers` tasks on `limiters` (round robin) for `seconds`, each asking
/// for keys from `keys`: decisions per second and the latencies.
async fn drive(
    limiters: Vec<RedisLimiter<ConnectionManager>>,
    callers: usize,
    keys: u64,
    verb: Verb,
    seconds: f64,
) -> (f64, Vec<Duration>) {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..callers {
        let limiter = limiters[i % limiters.len()].clone();
        let (done, stop) = (done.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut k = i as u64 * 7919;
            while !stop.load(Ordering::Relaxed) {
                k = (k + 1) % keys;
                let key = format!("bench:{k}");
                let t = Instant::now();
                match verb {
                    Verb::Check => {
                        let d = limiter.check(key).await.unwrap();
                        assert!(d.is_allowed() && d.source() != Source::FailOpen);
                    }
                    Verb::Reserve => {
                        let r = limiter
                            .reserve_n(key, 1, Duration::from_secs(1))
                            .await
                            .unwrap();
                        assert_eq!(r.source(), Source::Redis);
                        r.consume();
                    }
                }
                if lat.len() < 20_000 {
                    lat.push(t.elapsed());
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
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
    for l in &limiters {
        l.shutdown().await;
    }
    (count / elapsed, lat)
}

/// One limiter shared by `callers` tasks.
async fn shared(
    url: &str,
    callers: usize,
    batch: bool,
    verb: Verb,
    seconds: f64,
) -> (f64, Vec<Duration>) {
    let limiter = RedisLimiter::new(config(0, batch), connect(url).await).unwrap();
    drive(vec![limiter], callers, KEYS, verb, seconds).await
}

/// `callers` instances, each its own connection, on one hot key.
async fn instances(url: &str, callers: usize, lease: u64, seconds: f64) -> f64 {
    let mut limiters = Vec::new();
    for _ in 0..callers {
        limiters.push(RedisLimiter::new(config(lease, true), connect(url).await).unwrap());
    }
    drive(limiters, callers, 1, Verb::Check, seconds).await.0
}

/// A row's rounds: rates and latencies.
#[derive(Default)]
struct Row {
    rates: Vec<f64>,
    lat: Vec<Duration>,
}

impl Row {
    fn add(&mut self, (rate, lat): (f64, Vec<Duration>)) {
        self.rates.push(rate);
        self.lat.extend(lat);
    }

    /// The median rate, p50 and p99.
    fn summary(mut self) -> (f64, Duration, Duration) {
        self.lat.sort();
        (
            median(self.rates),
            percentile(&self.lat, 0.5),
            percentile(&self.lat, 0.99),
        )
    }
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
    println!();
    println!("One limiter (one connection), callers in flight, {KEYS} keys:");
    println!();
    println!(
        "| in flight | redis-benchmark EVALSHA | batch = false | of ceiling | p50 / p99 | batching | of ceiling | p50 / p99 |"
    );
    println!("|---:|---:|---:|---:|---|---:|---:|---|");
    for callers in [1usize, 16, 64] {
        let (mut ceil, mut off, mut on) = (vec![], Row::default(), Row::default());
        for _ in 0..rounds {
            ceil.push(ceiling(port, callers, seconds));
            off.add(shared(&url, callers, false, Verb::Check, seconds).await);
            on.add(shared(&url, callers, true, Verb::Check, seconds).await);
        }
        let c = median(ceil);
        let ((o, o50, o99), (b, b50, b99)) = (off.summary(), on.summary());
        println!(
            "| {callers} | {c:.0} | {o:.0} | {:.0} % | {} / {} | {b:.0} | {:.0} % | {} / {} |",
            100.0 * o / c,
            show(o50),
            show(o99),
            100.0 * b / c,
            show(b50),
            show(b99),
        );
    }

    println!();
    println!(
        "Reserve (a global wait's call) beside check, one limiter, 16 in flight, {KEYS} keys:"
    );
    println!();
    println!("| mode | check | p50 / p99 | reserve | p50 / p99 | reserve / check |");
    println!("|---|---:|---|---:|---|---:|");
    for batch in [false, true] {
        let (mut check, mut reserve) = (Row::default(), Row::default());
        for _ in 0..rounds {
            check.add(shared(&url, 16, batch, Verb::Check, seconds).await);
            reserve.add(shared(&url, 16, batch, Verb::Reserve, seconds).await);
        }
        let ((c, c50, c99), (r, r50, r99)) = (check.summary(), reserve.summary());
        println!(
            "| {} | {c:.0} | {} / {} | {r:.0} | {} / {} | {:.2} |",
            if batch { "batching" } else { "batch = false" },
            show(c50),
            show(c99),
            show(r50),
            show(r99),
            r / c
        );
    }

    println!();
    println!("Callers each with their own connection (instances), one hot key:");
    println!();
    println!("| instances | no lease | lease 100 | lease speed-up |");
    println!("|---:|---:|---:|---:|");
    for callers in [1usize, 16, 64] {
        let (mut hot, mut leased) = (vec![], vec![]);
        for _ in 0..rounds {
            hot.push(instances(&url, callers, 0, seconds).await);
            leased.push(instances(&url, callers, 100, seconds).await);
        }
        let (h, l) = (median(hot), median(leased));
        println!("| {callers} | {h:.0} | {l:.0} | {:.1} |", l / h);
    }
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
