//! Issue 39's changing and hostile partners through the reqwest-middleware
//! adapter, on real sockets (partners written here, on 127.0.0.1; a real
//! `redis-server`): a fleet configured at 30/s burst 30 — each instance
//! its own reqwest client and adapter, `retries(0)`, learning on by
//! default — calls as fast as its adapter lets it, and the partner's
//! answers are counted per whole second since its start. The learned word
//! is sampled every 100 ms while the fleet runs (over Redis, by an instance
//! of its own that queries the key: the word in Redis, not a reader's
//! memory of it).
//!
//! - A partner that **changes its limit** (bare 429 beyond it): 10/s, 5/s
//!   from 10 s, 10/s again from 20 s, burst 20 — over Redis (fifty
//!   instances, each its own connection) and over one local bucket.
//! - A partner that answers 200 or 429 **at random**, and one that sends
//!   **hostile quota headers** on every answer (one local bucket).
//! - A partner that is **down** — 503 to everything for 30 s — then
//!   admits 10/s burst 20 (bare 429 beyond), over Redis.
//!
//! Every test prints its partner's per-second 200s and refusals and the
//! learned rate at each second's end (`--nocapture`); the rule itself is
//! checked in virtual time by `ratebound/tests/learn_fleet.rs`, whose
//! shapes these runs follow.

mod support;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ratebound::outbound::{DEFAULT_STATUSES, Learned};
use ratebound::{KeyedLimit, TokenBucket};
use ratebound_redis::RedisLimiter;
use support::fleet::{
    Calls, INSTANCES, call_until, ceiling, keyed, learning, per_second_of, rate, redis_fleet,
    sample, stored_fractions,
};
use support::{Bucket, Partner, Redis, fresh, reply};

/// The learned word is read this often.
const EVERY: Duration = Duration::from_millis(100);

/// The hostile partners' smaller fleet (one process, one bucket).
const SMALL_FLEET: usize = 10;

/// A run: what the partner answered per whole second (200s, refusals),
/// the learned word sampled every [`EVERY`], what the calls returned.
struct Record {
    label: String,
    seconds: Vec<(usize, usize)>,
    samples: Vec<(Duration, Learned)>,
    calls: Calls,
    hits: usize,
}

impl Record {
    /// The learned rate last sampled at or before `t` (the ceiling before
    /// the first sample).
    fn rate_by(&self, t: Duration) -> f64 {
        self.samples
            .iter()
            .rev()
            .find(|s| s.0 <= t)
            .map_or(ceiling().rate_per_second(), |s| rate(s.1))
    }

    /// When the learned rate was first sampled at `at_least` after `from`.
    fn reached(&self, from: Duration, at_least: f64) -> Option<Duration> {
        self.samples
            .iter()
            .find(|s| s.0 > from && rate(s.1) >= at_least)
            .map(|s| s.0)
    }

    /// 200s and refusals over seconds `from..to`.
    fn counts(&self, from: usize, to: usize) -> (usize, usize) {
        self.seconds[from..to]
            .iter()
            .fold((0, 0), |a, s| (a.0 + s.0, a.1 + s.1))
    }

    /// The refused share of what reached the partner over `from..to`, and
    /// its 200s over its capacity there (`rate`/s).
    fn share_and_goodput(&self, from: usize, to: usize, rate: usize) -> (f64, f64) {
        let (ok, refused) = self.counts(from, to);
        (
            refused as f64 / (ok + refused).max(1) as f64,
            ok as f64 / (rate * (to - from)) as f64,
        )
    }

    /// Prints the per-second counts, the learned rate at each second's
    /// end, the learned word's range and what the calls returned.
    fn print(&self) {
        println!("{}: second, 200s, refusals, learned rate", self.label);
        let last = self.seconds.len() - 1;
        for (s, (ok, refused)) in self.seconds[..last].iter().enumerate() {
            let rate = self.rate_by(Duration::from_secs(s as u64 + 1));
            println!("  {s:>2}s {ok:>3} {refused:>3} {rate:>5.2}");
        }
        let (low, high) = stored_fractions(&self.samples);
        let (ok, refused) = self.seconds[last];
        println!(
            "{}: after the run {ok} × 200, {refused} refused; learned rate within \
             [{:.2}, {:.2}]/s over {} samples; calls {:?}, {} errors, partner hits {}",
            self.label,
            low * ceiling().rate_per_second(),
            high * ceiling().rate_per_second(),
            self.samples.len(),
            self.calls.answers,
            self.calls.errors.len(),
            self.hits
        );
    }

    /// Every sampled word within [floor, ceiling] as stored (the rule never
    /// writes one below its floor), every learned rate finite and within
    /// [floor, ceiling] per second.
    fn check_bounds(&self, until: Duration) {
        let floor = learning().floor();
        let sampled: Vec<_> = self
            .samples
            .iter()
            .filter(|s| s.0 <= until)
            .copied()
            .collect();
        assert!(!sampled.is_empty(), "{}: no samples", self.label);
        let (low, high) = stored_fractions(&sampled);
        assert!(
            low >= floor - 1e-4 && high <= 1.0,
            "{}: learned fraction within [{low}, {high}]",
            self.label
        );
        let ceiling = ceiling().rate_per_second();
        for (at, word) in &sampled {
            let r = rate(*word);
            assert!(
                r.is_finite() && r >= ceiling * floor - 1e-3 && r <= ceiling + 1e-9,
                "{}: learned rate {r} at {at:?}",
                self.label
            );
        }
    }
}

/// Runs `limiters` (one instance each) against `partner` for `run`,
/// reading the learned word with `read` every [`EVERY`]; the waiters
/// still in line at the end are dropped.
async fn run_fleet<F>(
    label: &str,
    limiters: Vec<Arc<dyn KeyedLimit>>,
    partner: &Partner,
    run: Duration,
    read: impl FnMut() -> F,
) -> Record
where
    F: Future<Output = Learned>,
{
    let (calls, samples) = tokio::join!(
        call_until(limiters, true, partner.url("/items"), run, true),
        sample(EVERY, run, read)
    );
    let record = Record {
        label: label.to_string(),
        seconds: per_second_of(partner, run),
        samples,
        calls,
        hits: partner.hits(),
    };
    record.print();
    record
}

/// A partner admitting `bucket`'s tokens, a bare 429 beyond.
async fn bare_429s(bucket: Bucket) -> Partner {
    Partner::start(move |_hit| {
        if bucket.take() {
            reply(200, &[], "ok")
        } else {
            reply(429, &[], "")
        }
    })
    .await
}

/// The fifty instances of the Redis fleet (each its own connection and
/// limiter), and one more that only reads the learned word from Redis: a
/// query (0 tokens, nothing taken) for the adapters' key, whose reply
/// carries the word.
async fn over_redis(
    redis: &Redis,
    name: &str,
) -> (
    Vec<Arc<dyn KeyedLimit>>,
    impl FnMut() -> std::pin::Pin<Box<dyn Future<Output = Learned> + Send>>,
) {
    let prefix = format!("{}:", fresh(name));
    let fleet = redis_fleet(redis, &prefix, INSTANCES).await;
    let reader = redis_fleet(redis, &prefix, 1).await.remove(0);
    let read = move || {
        let reader = reader.clone();
        Box::pin(async move {
            reader.check_n("partner", 0).await.expect("query");
            RedisLimiter::learned(&reader, "partner")
        }) as std::pin::Pin<Box<dyn Future<Output = Learned> + Send>>
    };
    (keyed(&fleet), read)
}

/// `instances` instances on one local bucket, and its learned word.
fn one_bucket(
    instances: usize,
) -> (
    Vec<Arc<dyn KeyedLimit>>,
    impl FnMut() -> std::future::Ready<Learned>,
) {
    let shared = Arc::new(TokenBucket::new(ceiling()));
    let limiters = (0..instances)
        .map(|_| shared.clone() as Arc<dyn KeyedLimit>)
        .collect();
    (limiters, move || {
        std::future::ready(TokenBucket::learned(&shared))
    })
}

// ---- partners.md 1: the partner changes its limit ----

const CHANGING_RUN: Duration = Duration::from_secs(30);

/// 10/s, 5/s from 10 s, 10/s again from 20 s; burst 20, a bare 429 beyond.
fn changing_limit() -> Bucket {
    let s = Duration::from_secs;
    Bucket::phased(&[(s(0), 10.0), (s(10), 5.0), (s(20), 10.0)], 20.0)
}

/// The issue's bars for the changing partner, per phase's second half
/// (5–10, 15–20, 25–30 s): at most 10 % of what reached the partner
/// refused, and at least 80 % of that phase's capacity (rate × 5 s)
/// served; the learned rate back at 8/s within 10 s of the rise (by
/// 30 s). `bars[i]`: the refused share and goodput asserted in phase `i`
/// (the issue's, unless a run fell short of them: see the callers).
fn followed_the_changes(record: &Record, bars: [(f64, f64); 3]) {
    let mut failed = Vec::new();
    for ((from, rate), (refused_bar, goodput_bar)) in
        [(5, 10), (15, 5), (25, 10)].into_iter().zip(bars)
    {
        let (share, goodput) = record.share_and_goodput(from, from + 5, rate);
        println!(
            "{}: {from}-{} s at {rate}/s: {:.1} % refused, goodput {:.0} %",
            record.label,
            from + 5,
            share * 100.0,
            goodput * 100.0
        );
        if share > refused_bar || goodput < goodput_bar {
            failed.push((from, share, goodput));
        }
    }
    let back = record.reached(Duration::from_secs(20), 8.0);
    println!("{}: learned rate back at 8/s at {back:?}", record.label);
    assert!(failed.is_empty(), "{}: phases {failed:?}", record.label);
    assert!(
        back.is_some_and(|t| t <= CHANGING_RUN),
        "{}: back at {back:?}",
        record.label
    );
    assert!(record.calls.errors.is_empty(), "{:?}", record.calls.errors);
}

/// The issue's bars: 10 % refused and 80 % served in every phase's second
/// half.
const ISSUE_BARS: [(f64, f64); 3] = [(0.10, 0.80); 3];

/// Fifty instances over Redis: the issue's bars. On 2026-12-05, with the
/// line horizon (a learning call takes no slot further than 1 s ahead):
/// three runs refused 1.9 % and served 104–106 % in 5–10 s, refused
/// 7.4–8.7 % and served 84–100 % in 15–20 s, refused 0 and served 110 %
/// in 25–30 s, and were back at 8/s at 23.1–23.5 s. Before it, four runs
/// fell short in the rise (25–30 s served 46–82 %: the fifty waiters in
/// line were priced at the 5/s phase's rate and could not go earlier) and
/// in 15–20 s (8.3–14.8 % refused: 3–4 × 429 of 25–27).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_instances_over_redis_follow_a_partner_that_changes_its_limit() {
    let redis = Redis::start();
    let (limiters, read) = over_redis(&redis, "changing").await;
    let partner = bare_429s(changing_limit()).await;
    let record = run_fleet("redis, changing", limiters, &partner, CHANGING_RUN, read).await;
    followed_the_changes(&record, ISSUE_BARS);
}

/// Fifty instances on one local bucket: the issue's bars (2026-12-05,
/// with the line horizon, three runs: 1.8–1.9 % refused, 106–108 %
/// served in 5–10 s; 7.4–8.3 % refused, 88–100 % served in 15–20 s; 0 %
/// refused, 110–114 % served in 25–30 s; back at 8/s at 22.9–23.4 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_instances_on_one_bucket_follow_a_partner_that_changes_its_limit() {
    let (limiters, read) = one_bucket(INSTANCES);
    let partner = bare_429s(changing_limit()).await;
    let record = run_fleet("bucket, changing", limiters, &partner, CHANGING_RUN, read).await;
    followed_the_changes(&record, ISSUE_BARS);
}

// ---- partners.md 3a, 3b: hostile partners ----

const HOSTILE_RUN: Duration = Duration::from_secs(20);

/// A deterministic coin per request (xorshift64 of its index).
fn coin(index: usize) -> bool {
    let mut x = index as u64 ^ 0x9e37_79b9_7f4a_7c15;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x & 1 == 1
}

/// 3a: a partner that answers 200 or 429 at random (a coin per request)
/// for 20 s: the learned rate stays within [floor, ceiling] (1.5/s, 30/s),
/// never NaN, and the fleet keeps calling — some 200s and some 429s in the
/// last 10 s (2026-12-05, three runs: the learned rate within [1.50,
/// 21.00]/s, at the floor or a step above from 5 s on; 8 × 200 and 7 ×
/// 429 in 10–20 s, the floor's trickle).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partner_answering_at_random_keeps_the_rate_within_bounds() {
    let (limiters, read) = one_bucket(SMALL_FLEET);
    let partner = Partner::start(|hit| {
        if coin(hit.index) {
            reply(200, &[], "ok")
        } else {
            reply(429, &[], "")
        }
    })
    .await;
    let record = run_fleet("random", limiters, &partner, HOSTILE_RUN, read).await;
    record.check_bounds(HOSTILE_RUN);
    let (ok, refused) = record.counts(10, 20);
    println!("random, 10-20 s: {ok} × 200, {refused} × 429");
    assert!(
        ok > 0 && refused > 0,
        "the fleet kept calling: {ok}, {refused}"
    );
    assert!(record.calls.errors.is_empty(), "{:?}", record.calls.errors);
}

/// The hostile quota headers, one set per answer in turn.
fn hostile_headers(index: usize) -> Vec<(String, String)> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let year = 31_536_000;
    let pair = |remaining: &str, reset: String| {
        vec![
            ("RateLimit-Remaining".to_string(), remaining.to_string()),
            ("RateLimit-Reset".to_string(), reset),
        ]
    };
    let x_pair = |reset: u64| {
        vec![
            ("X-RateLimit-Remaining".to_string(), "3".to_string()),
            ("X-RateLimit-Reset".to_string(), reset.to_string()),
        ]
    };
    match index % 11 {
        0 => pair("-1", "5".into()),
        1 => pair("999999999999", "5".into()),
        2 => pair("3", "-5".into()),
        3 => pair("3", "0".into()),
        4 => pair("3", year.to_string()),
        5 => x_pair(now + year),
        6 => x_pair(now - year),
        7 => pair("abc", "abc".into()),
        8 => pair("", String::new()),
        9 => pair("1e309", "1e309".into()),
        _ => vec![("RateLimit".to_string(), r#""default";r=-1;t=0"#.to_string())],
    }
}

/// 3b: hostile quota headers on every answer, 200s and 429s alike (the
/// partner admits 10/s burst 20, a 429 beyond), cycling through
/// `RateLimit-Remaining: -1` and `999999999999`, a `RateLimit-Reset` in
/// the past (`-5`, `0`) and a year away, `X-RateLimit-Reset` as a Unix
/// time a year away and a year ago, garbage (`abc`, empty, `1e309`) and
/// the IETF field's `r=-1;t=0`: no error from the adapter (every call
/// returns the partner's answer), the learned rate within [floor,
/// ceiling] and finite (2026-12-05, three runs: 0 errors of 459, 503 and
/// 508 calls; the learned rate within [10.29, 30.00]/s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_quota_headers_fail_no_call_and_keep_the_rate_within_bounds() {
    let (limiters, read) = one_bucket(SMALL_FLEET);
    let bucket = Bucket::new(10.0, 20.0);
    let partner = Partner::start(move |hit| {
        let headers = hostile_headers(hit.index);
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        if bucket.take() {
            reply(200, &headers, "ok")
        } else {
            reply(429, &headers, "")
        }
    })
    .await;
    let record = run_fleet("hostile headers", limiters, &partner, HOSTILE_RUN, read).await;
    record.check_bounds(HOSTILE_RUN);
    assert!(record.calls.errors.is_empty(), "{:?}", record.calls.errors);
    // Every answer the partner's: 200 or 429; the calls cut off in flight
    // at the end (at most one per instance) are the only ones unanswered.
    assert!(
        record
            .calls
            .answers
            .iter()
            .all(|a| a.0 == 200 || a.0 == 429),
        "{:?}",
        record.calls.answers
    );
    let answered = record.calls.answered();
    assert!(
        answered <= record.hits && record.hits - answered <= SMALL_FLEET,
        "answered {answered} of {} sent",
        record.hits
    );
    assert!(answered >= 20, "the fleet called: {answered}");
}

// ---- partners.md 3c: a partner that is down ----

const DOWN: Duration = Duration::from_secs(30);
const DOWN_RUN: Duration = Duration::from_secs(45);
/// The share of the partner's capacity served in the last 5 s once it is
/// back.
const RECOVERED: f64 = 0.80;

/// 3c: a partner down — a 503 to everything for 30 s — then admitting
/// 10/s burst 20 (a bare 429 beyond) for 15 s, over Redis. 503 is among
/// the adapter's default refusal statuses (none passed). During the storm
/// the learned rate stays within [floor, ceiling] (and the storm did cut
/// it); after the partner is back, the learned rate reaches 8/s within
/// 10 s (by 40 s) and the partner serves at least 80 % of its capacity in
/// the last 5 s (40–45 s).
///
/// On 2026-12-05, with the line horizon, three runs: the storm cut the
/// learned rate to the floor (1.50/s) and no further; back at 8/s at
/// 38.2–38.8 s; 108–116 % served in 40–45 s. Before it, the last bar
/// fell short (16 % served in 40–45 s in four runs, 8 × 200 of 50):
/// the storm had cut the fleet to the floor (1.5/s) and its fifty waiters
/// were in line at that pace, up to 33 s ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_instances_over_redis_recover_when_a_partner_is_back() {
    assert!(DEFAULT_STATUSES.contains(&503), "{DEFAULT_STATUSES:?}");
    let redis = Redis::start();
    let (limiters, read) = over_redis(&redis, "down").await;
    // Full (20) when the partner is back: nothing takes from it before.
    let bucket = Bucket::new(10.0, 20.0);
    let partner = Partner::start(move |hit| {
        if hit.at < DOWN {
            reply(503, &[], "down")
        } else if bucket.take() {
            reply(200, &[], "ok")
        } else {
            reply(429, &[], "")
        }
    })
    .await;
    let record = run_fleet("redis, down 0-30 s", limiters, &partner, DOWN_RUN, read).await;
    record.check_bounds(DOWN_RUN);
    let storm_low = record.samples[..DOWN.as_millis() as usize / EVERY.as_millis() as usize]
        .iter()
        .map(|s| rate(s.1))
        .fold(f64::INFINITY, f64::min);
    println!("redis, down: lowest learned rate during the storm {storm_low:.2}/s");
    assert!(storm_low < 10.0, "the 503s cut nothing: {storm_low}");
    let back = record.reached(DOWN, 8.0);
    let (_, goodput) = record.share_and_goodput(40, 45, 10);
    println!(
        "redis, down: learned rate back at 8/s at {back:?}; 40-45 s goodput {:.0} %",
        goodput * 100.0
    );
    assert!(
        back.is_some_and(|t| t <= DOWN + Duration::from_secs(10)),
        "back at {back:?}"
    );
    assert!(goodput >= RECOVERED, "goodput {goodput}");
    assert!(record.calls.errors.is_empty(), "{:?}", record.calls.errors);
}
