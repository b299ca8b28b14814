//! What the fleet tests share (learn.rs, learn_partners.rs): fifty
//! instances configured at 30/s burst 30 — each its own reqwest client and
//! adapter, on one local bucket or each its own Redis connection and
//! limiter — calling a partner as fast as their adapters let them; the
//! partner's counts per whole second; the learned word sampled while they
//! run.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ratebound::outbound::{FULL, Learned, Learning};
use ratebound::{KeyedLimit, Quota};
use ratebound_client::OutboundMiddleware;
use ratebound_redis::{Algorithm, Config, RedisLimiter};
use redis::aio::ConnectionManager;
use reqwest_middleware::ClientBuilder;

use super::{Partner, Redis, reqwest_client};

/// The fleet's size.
pub const INSTANCES: usize = 50;

/// The fleet's ceiling: three times the partner's 10/s.
pub const CEILING: &str = "30/s burst 30";

/// [`CEILING`], parsed.
pub fn ceiling() -> Quota {
    Quota::parse(CEILING).expect("quota")
}

/// The learning rule the adapters run under [`CEILING`] (default floor:
/// 1/20 of it, 1.5/s).
pub fn learning() -> Learning {
    Learning::new(ceiling())
}

/// The partner's 200s and everything else (429s, 503s) in each whole
/// second of a run of `run` (the last entry: what came after it).
pub fn per_second_of(partner: &Partner, run: Duration) -> Vec<(usize, usize)> {
    let mut seconds = vec![(0, 0); run.as_secs() as usize + 1];
    for hit in partner.log() {
        let s = (hit.at.as_secs() as usize).min(seconds.len() - 1);
        match hit.status {
            200 => seconds[s].0 += 1,
            _ => seconds[s].1 += 1,
        }
    }
    seconds
}

/// What the fleet's calls returned: the partner's answers by status, and
/// every error an adapter returned instead of an answer.
#[derive(Clone, Debug, Default)]
pub struct Calls {
    pub answers: Vec<(u16, usize)>,
    pub errors: Vec<String>,
}

impl Calls {
    /// How many calls returned an answer.
    pub fn answered(&self) -> usize {
        self.answers.iter().map(|a| a.1).sum()
    }

    fn answer(&mut self, status: u16) {
        match self.answers.iter_mut().find(|a| a.0 == status) {
            Some(a) => a.1 += 1,
            None => self.answers.push((status, 1)),
        }
    }
}

/// One instance on each of `limiters` (its own reqwest client and
/// adapter, key "partner", no retries: every sending is the fleet's own
/// decision, not a backoff's) calls `url` as fast as its adapter lets it
/// until `run` is over; with `cut_off`, the waiters still in line then are
/// dropped (the queue would otherwise drain for seconds after it). What
/// the calls returned.
pub async fn call_until(
    limiters: Vec<Arc<dyn KeyedLimit>>,
    adaptive: bool,
    url: String,
    run: Duration,
    cut_off: bool,
) -> Calls {
    let end = Instant::now() + run;
    let calls = Arc::new(Mutex::new(Calls::default()));
    let mut instances = tokio::task::JoinSet::new();
    for limiter in limiters {
        let middleware = OutboundMiddleware::builder(limiter)
            .key("partner")
            .retries(0)
            .adaptive(adaptive)
            .build()
            .expect("middleware");
        let client = ClientBuilder::new(reqwest_client())
            .with(middleware)
            .build();
        let (url, calls) = (url.clone(), calls.clone());
        instances.spawn(async move {
            // Bounded: at most the run's length of the fleet's ceiling.
            for _ in 0..30 * run.as_secs() {
                if Instant::now() >= end {
                    break;
                }
                let result = client.get(&url).send().await;
                let mut calls = calls.lock().unwrap();
                match result {
                    Ok(response) => calls.answer(response.status().as_u16()),
                    Err(e) => calls.errors.push(e.to_string()),
                }
            }
        });
    }
    if cut_off {
        tokio::time::sleep_until(end.into()).await;
        instances.shutdown().await;
    }
    while instances.join_next().await.is_some() {}
    calls.lock().unwrap().clone()
}

/// The learned word read every `period` for `run` (the first read one
/// period in): (since the start, the word).
pub async fn sample<F, R>(period: Duration, run: Duration, mut read: R) -> Vec<(Duration, Learned)>
where
    R: FnMut() -> F,
    F: Future<Output = Learned>,
{
    let start = tokio::time::Instant::now();
    let mut samples = Vec::new();
    // Bounded: one read per period of the run.
    for k in 1..=(run.as_millis() / period.as_millis().max(1)) {
        let at = period * u32::try_from(k).expect("samples");
        tokio::time::sleep_until(start + at).await;
        samples.push((at, read().await));
    }
    samples
}

/// The learned rate (per second) of a sampled word under [`CEILING`].
pub fn rate(word: Learned) -> f64 {
    learning().rate(word)
}

/// The sampled words' fractions of the ceiling as stored (before the
/// floor a reader applies), lowest and highest.
pub fn stored_fractions(samples: &[(Duration, Learned)]) -> (f64, f64) {
    let fraction = |w: Learned| f64::from(w.fraction_units()) / f64::from(FULL);
    samples
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |a, s| {
            (a.0.min(fraction(s.1)), a.1.max(fraction(s.1)))
        })
}

/// `instances` limiters over `redis` sharing the keys under `prefix`, as
/// fleet.rs builds them: each its own connection and `RedisLimiter` (a
/// 1 s deadline per call — the default 50 ms is for request paths),
/// listening to the prefix's channel so a word another instance learned
/// reaches its waiters before they send (a fall: they wait again).
pub async fn redis_fleet(
    redis: &Redis,
    prefix: &str,
    instances: usize,
) -> Vec<Arc<RedisLimiter<ConnectionManager>>> {
    let mut limiters = Vec::new();
    for _ in 0..instances {
        let client = redis::Client::open(redis.url()).expect("url");
        let conn = ConnectionManager::new(client.clone())
            .await
            .expect("connect");
        let mut config = Config::new(Algorithm::TokenBucket(ceiling()));
        config.prefix = prefix.to_string();
        config.timeout = Duration::from_secs(1);
        let limiter = RedisLimiter::new(config, conn).expect("limiter");
        let limiter = Arc::new(limiter.with_pause_news(client).await);
        assert!(limiter.listening(), "subscribed");
        limiters.push(limiter);
    }
    limiters
}

/// The fleet's limiters as the adapters take them.
pub fn keyed(limiters: &[Arc<RedisLimiter<ConnectionManager>>]) -> Vec<Arc<dyn KeyedLimit>> {
    limiters
        .iter()
        .map(|l| l.clone() as Arc<dyn KeyedLimit>)
        .collect()
}
