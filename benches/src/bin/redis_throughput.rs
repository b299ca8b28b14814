//! Decisions per second against a local Redis, in the same run as the
//! ceiling: `redis-benchmark` running the same one-key `EVALSHA` (C client,
//! no driver, no decision) over as many connections as there are callers,
//! with the CPU each of its calls cost Redis.
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
//! latency of one decision (p50/p99 over all rounds) and the CPU time one
//! decision cost Redis (`INFO cpu`) and this process (the driver and its
//! callers; Linux) — steadier than rates on a shared machine. Starts and
//! stops its own `redis-server` on a free 127.0.0.1 port (persistence off).
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

/// The `EVALSHA` ceiling from redis-benchmark: requests per second, and
/// Redis' CPU µs per request.
async fn ceiling(
    admin: &mut ConnectionManager,
    port: u16,
    clients: usize,
    seconds: f64,
) -> (f64, f64) {
    let before = redis_cpu(admin).await;
    let n = requests(seconds);
    let rate = redis_benchmark(port, clients, n);
    let cpu = redis_cpu(admin).await - before;
    (rate, cpu / n as f64 * 1e6)
}

/// About `seconds` worth of requests at ~60 000/s per core.
fn requests(seconds: f64) -> usize {
    ((60_000.0 * seconds) as usize).max(10_000)
}

/// redis-benchmark's rate for `n` one-key `EVALSHA`s over `clients`
/// connections.
fn redis_benchmark(port: u16, clients: usize, n: usize) -> f64 {
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
/// for keys from `keys`: decisions per second, the latencies and the
/// number of decisions.
async fn drive(
    limiters: Vec<RedisLimiter<ConnectionManager>>,
    callers: usize,
    keys: u64,
    verb: Verb,
    seconds: f64,
) -> (f64, Vec<Duration>, f64) {
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
    (count / elapsed, lat, count)
}

/// Redis' CPU time so far (`used_cpu_user` + `used_cpu_sys`), in seconds.
async fn redis_cpu(admin: &mut ConnectionManager) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(admin)
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| {
            l.strip_prefix("used_cpu_user:")
                .or_else(|| l.strip_prefix("used_cpu_sys:"))
        })
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .sum()
}

/// This process's CPU time so far (every thread), in seconds.
#[cfg(target_os = "linux")]
fn own_cpu() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

#[cfg(not(target_os = "linux"))]
fn own_cpu() -> f64 {
    f64::NAN
}

/// One row's round: its rate, latencies, and the CPU µs per decision of
/// Redis and of this process (the driver and the callers).
struct Sample {
    rate: f64,
    lat: Vec<Duration>,
    redis_us: f64,
    driver_us: f64,
}

/// One limiter shared by `callers` tasks.
async fn shared(
    url: &str,
    admin: &mut ConnectionManager,
    callers: usize,
    batch: bool,
    verb: Verb,
    seconds: f64,
) -> Sample {
    let limiter = RedisLimiter::new(config(0, batch), connect(url).await).unwrap();
    let (redis0, own0) = (redis_cpu(admin).await, own_cpu());
    let (rate, lat, count) = drive(vec![limiter], callers, KEYS, verb, seconds).await;
    let (redis1, own1) = (redis_cpu(admin).await, own_cpu());
    Sample {
        rate,
        lat,
        redis_us: (redis1 - redis0) / count * 1e6,
        driver_us: (own1 - own0) / count * 1e6,
    }
}

/// `callers` instances, each its own connection, on one hot key.
async fn instances(url: &str, callers: usize, lease: u64, seconds: f64) -> f64 {
    let mut limiters = Vec::new();
    for _ in 0..callers {
        limiters.push(RedisLimiter::new(config(lease, true), connect(url).await).unwrap());
    }
    drive(limiters, callers, 1, Verb::Check, seconds).await.0
}

/// A row's rounds.
#[derive(Default)]
struct Row {
    rates: Vec<f64>,
    lat: Vec<Duration>,
    redis_us: Vec<f64>,
    driver_us: Vec<f64>,
}

impl Row {
    fn add(&mut self, s: Sample) {
        self.rates.push(s.rate);
        self.lat.extend(s.lat);
        self.redis_us.push(s.redis_us);
        self.driver_us.push(s.driver_us);
    }

    /// The median rate; p50 / p99; the median CPU µs per decision of
    /// Redis + of the driver.
    fn summary(mut self) -> (f64, String, String) {
        self.lat.sort();
        (
            median(self.rates),
            format!(
                "{} / {}",
                show(percentile(&self.lat, 0.5)),
                show(percentile(&self.lat, 0.99))
            ),
            format!(
                "{:.1} + {:.1}",
                median(self.redis_us),
                median(self.driver_us)
            ),
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
    println!("(CPU: µs per decision of Redis + of this process, the driver and its callers)");
    println!();
    println!("One limiter (one connection), callers in flight, {KEYS} keys:");
    println!();
    println!(
        "| in flight | redis-benchmark EVALSHA | its Redis CPU | batch = false | of ceiling | p50 / p99 | CPU | batching | of ceiling | p50 / p99 | CPU |"
    );
    println!("|---:|---:|---:|---:|---:|---|---|---:|---:|---|---|");
    for callers in [1usize, 16, 64] {
        let (mut ceil, mut ceil_cpu) = (vec![], vec![]);
        let (mut off, mut on) = (Row::default(), Row::default());
        for _ in 0..rounds {
            let (rate, cpu) = ceiling(&mut admin, port, callers, seconds).await;
            ceil.push(rate);
            ceil_cpu.push(cpu);
            off.add(shared(&url, &mut admin, callers, false, Verb::Check, seconds).await);
            on.add(shared(&url, &mut admin, callers, true, Verb::Check, seconds).await);
        }
        let (c, ccpu) = (median(ceil), median(ceil_cpu));
        let ((o, olat, ocpu), (b, blat, bcpu)) = (off.summary(), on.summary());
        println!(
            "| {callers} | {c:.0} | {ccpu:.1} | {o:.0} | {:.0} % | {olat} | {ocpu} | {b:.0} | {:.0} % | {blat} | {bcpu} |",
            100.0 * o / c,
            100.0 * b / c,
        );
    }

    println!();
    println!(
        "Reserve (a global wait's call) beside check, one limiter, 16 in flight, {KEYS} keys:"
    );
    println!();
    println!("| mode | check | p50 / p99 | CPU | reserve | p50 / p99 | CPU | reserve / check |");
    println!("|---|---:|---|---|---:|---|---|---:|");
    for batch in [false, true] {
        let (mut check, mut reserve) = (Row::default(), Row::default());
        for _ in 0..rounds {
            check.add(shared(&url, &mut admin, 16, batch, Verb::Check, seconds).await);
            reserve.add(shared(&url, &mut admin, 16, batch, Verb::Reserve, seconds).await);
        }
        let ((c, clat, ccpu), (r, rlat, rcpu)) = (check.summary(), reserve.summary());
        println!(
            "| {} | {c:.0} | {clat} | {ccpu} | {r:.0} | {rlat} | {rcpu} | {:.2} |",
            if batch { "batching" } else { "batch = false" },
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
