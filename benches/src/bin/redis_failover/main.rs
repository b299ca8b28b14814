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

use std::time::{Duration, Instant};

use ratebound::Quota;
use ratebound_redis::{Algorithm, Config, OnError, RedisLimiter, Source};

const INSTANCES: usize = 50;
const CALLERS: usize = 4;
const RUN: Duration = Duration::from_secs(10);
const KILL_AT: Duration = Duration::from_secs(3);

mod deploy;
#[path = "../../../../crates/ratebound-redis/tests/support/node.rs"]
mod node;
use deploy::{Cluster, Pair, Setup};

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
