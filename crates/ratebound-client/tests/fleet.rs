//! The fleet on Redis: instances with their own connections sharing one
//! key in front of a strict partner (its own token bucket) on 127.0.0.1,
//! through the reqwest-middleware adapter — pacing, a throttle that stops
//! the whole fleet, a timeout — next to local buckets, which overrun it.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ratebound::{Quota, TokenBucket};
use ratebound_client::{Error, OutboundMiddleware};
use ratebound_redis::{Algorithm, Config, OnError, RedisLimiter};
use redis::aio::ConnectionManager;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use support::{Events, Hit, Partner, Redis, call_all, fresh, reply, reqwest_client, strict};

/// One instance's limiter: its own connection, listening for the other
/// instances' pauses; a 1 s deadline per Redis call (the default 50 ms is
/// for request paths; two shared cores can miss it, and a miss fails open).
async fn instance(redis: &Redis, quota: &str) -> RedisLimiter<ConnectionManager> {
    let client = redis::Client::open(redis.url()).expect("url");
    let conn = ConnectionManager::new(client.clone())
        .await
        .expect("connect");
    let mut config = Config::new(Algorithm::TokenBucket(Quota::parse(quota).expect("quota")));
    config.timeout = Duration::from_secs(1);
    let limiter = RedisLimiter::new(config, conn).expect("limiter");
    let limiter = limiter.with_pause_news(client).await;
    assert!(limiter.listening(), "subscribed to pause news");
    limiter
}

fn client(middleware: OutboundMiddleware) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest_client())
        .with(middleware)
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_instances_on_one_redis_key_never_overrun_the_partner() {
    let redis = Redis::start();
    // A partner of 25/s, bursts of 20; the fleet's limit 20/s, bursts of 5.
    // The partner judges arrival times: 15 of slack for requests a loaded
    // machine's stall bunches up (Node's twin saw a 429 with 10 after a
    // ~1 s stall); ten local limits (50 at once) still overrun it. The
    // exact schedule: spec_wait.rs, reqwest.rs (paused time).
    let partner = Partner::start(strict(25.0, 20.0)).await;
    let key = fresh("partner");
    let mut clients = Vec::new();
    for _ in 0..10 {
        let limiter = instance(&redis, "20/s burst 5").await;
        let middleware = OutboundMiddleware::builder(limiter).key(&key).build();
        clients.push(client(middleware.expect("middleware")));
    }
    let start = Instant::now();
    let statuses = call_all(&clients, 4, &partner.url("/items")).await;
    let elapsed = start.elapsed();
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        40,
        "{statuses:?}"
    );
    assert_eq!(partner.count(429), 0, "{:?}", partner.log());
    assert_eq!(partner.count(200), 40);
    // 5 at once, then one every 50 ms: the last at 1.75 s after the first
    // reservation (2 ms: µs rounding, two clocks). Above, a liveness bound
    // only (2.5 s of slack): the schedule is checked exactly at explicit
    // Redis times by ratebound-redis/tests/spec_wait.rs (spec/redis_wait.json)
    // and through this middleware in paused time by reqwest.rs
    // `thirty_concurrent_calls_wait_their_turn_and_none_is_refused`.
    assert!(
        elapsed + Duration::from_millis(2) >= Duration::from_millis(1750),
        "{elapsed:?}"
    );
    assert!(elapsed <= Duration::from_millis(1750 + 2500), "{elapsed:?}");
    println!("10 instances x 4 calls on one Redis key: 40 x 200, 0 x 429 in {elapsed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_local_buckets_overrun_the_same_partner() {
    // What the Redis limit prevents: ten local limits are ten limits.
    let partner = Partner::start(strict(25.0, 10.0)).await;
    let clients: Vec<_> = (0..10)
        .map(|_| {
            let limiter = TokenBucket::new(Quota::parse("20/s burst 5").expect("quota"));
            client(
                OutboundMiddleware::builder(limiter)
                    .retries(0)
                    .build()
                    .expect("middleware"),
            )
        })
        .collect();
    let statuses = call_all(&clients, 4, &partner.url("/items")).await;
    let refused = partner.count(429);
    assert!(refused >= 25, "{refused} x 429 ({statuses:?})");
    println!("10 local buckets x 4 calls: {refused} x 429");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttle_quiets_the_whole_fleet_until_it_is_over() {
    let redis = Redis::start();
    // The partner refuses everything for 1 s from its first request, with
    // `Retry-After: 1`, then takes 25/s in bursts of 10.
    let refusing = Duration::from_secs(1);
    let first = Arc::new(Mutex::new(None::<Duration>));
    let bucket = support::Bucket::new(25.0, 10.0);
    let partner = Partner::start(move |hit: &Hit| {
        let start = *first.lock().unwrap().get_or_insert(hit.at);
        if hit.at < start + refusing {
            reply(429, &[("retry-after", "1")], "throttled")
        } else if bucket.take() {
            reply(200, &[], "ok")
        } else {
            reply(429, &[("retry-after", "1")], "slow down")
        }
    })
    .await;
    let key = fresh("partner");
    let events = Events::default();
    let mut clients = Vec::new();
    for _ in 0..10 {
        let limiter = instance(&redis, "3/s burst 3").await;
        let middleware = OutboundMiddleware::builder(limiter)
            .key(&key)
            .on_decision(events.hook())
            // The pause shared and the rate after it, as configured (a
            // learned cut would slow the ten after the pause: learn.rs).
            .adaptive(false)
            .build();
        clients.push(client(middleware.expect("middleware")));
    }
    let start = Instant::now();
    let statuses = call_all(&clients, 1, &partner.url("/items")).await;
    let elapsed = start.elapsed();
    let log = partner.log();
    let refused: Vec<_> = log.iter().filter(|l| l.status == 429).collect();
    // At most the burst of 3, sent at once (fewer when a loaded machine
    // holds some back until the first refusal's pause is in Redis: they
    // then wait it out): the next slot is 333 ms later, time enough for the
    // pause to reach Redis (and every instance) and move it past the pause.
    // A pause not shared lets the slots at 333 and 666 ms through: `quiet`
    // below fails it.
    assert!((1..=3).contains(&refused.len()), "{log:?}");
    let (t0, first_429) = (log[0].at, refused[0].at);
    let quiet = log
        .iter()
        .filter(|l| l.at > first_429 + Duration::from_millis(100) && l.at < t0 + refusing)
        .count();
    assert_eq!(quiet, 0, "requests during the refusal: {log:?}");
    // Then everything succeeds (the refused ones retried through the limit).
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        10,
        "{statuses:?}"
    );
    assert_eq!(partner.count(200), 10);
    let paused = events.all().iter().filter(|e| e.0 == "paused").count();
    assert_eq!(paused, refused.len());
    // 1 s of pause (from the first refusal, after `start`), which leaves
    // the bucket empty, then the 10 waiting (3 of them retries) at 3/s:
    // the last 1 s + 10/3 s after it at the earliest. Above, a liveness
    // bound only (2.5 s of slack): the pause and the rate after it are
    // checked exactly at explicit Redis times by ratebound-redis/tests/
    // spec_wait.rs (spec/redis_wait.json) and through the adapters in paused
    // time by tower.rs `a_429_pauses_the_limiter_for_its_retry_after`.
    let last = Duration::from_millis(1000 + 3333);
    assert!(elapsed + Duration::from_millis(2) >= last, "{elapsed:?}");
    assert!(elapsed <= last + Duration::from_millis(2500), "{elapsed:?}");
    println!(
        "throttle: {} x 429, then 10 x 200; nothing sent in the 1 s refusal after the first 429; {elapsed:?}",
        refused.len()
    );
}

#[tokio::test]
async fn a_wait_beyond_the_timeout_on_redis_fails_and_sends_nothing() {
    let redis = Redis::start();
    let partner = Partner::start(strict(100.0, 10.0)).await;
    // The next token a minute away, the timeout 10 s: refused at once.
    let limiter = instance(&redis, "1/min burst 1").await;
    let middleware = OutboundMiddleware::builder(limiter)
        .key(&fresh("partner"))
        .timeout(Duration::from_secs(10))
        .build();
    let client = client(middleware.expect("middleware"));
    assert_eq!(
        client
            .get(partner.url("/"))
            .send()
            .await
            .expect("send")
            .status(),
        200
    );
    let start = Instant::now();
    let err = client.get(partner.url("/")).send().await.unwrap_err();
    // One Redis call (its deadline is 1 s), never the timeout's 10 s.
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    let ours = Error::from_reqwest(&err).expect("the limiter's error");
    assert_eq!(ours.code(), "deadline_exceeded");
    assert_eq!(partner.hits(), 1);
}

/// A limiter on `redis` failing as `on_error` says, with a 200 ms deadline
/// per call and no pause news (Redis is about to go).
async fn failing(redis: &Redis, on_error: OnError) -> RedisLimiter<ConnectionManager> {
    let client = redis::Client::open(redis.url()).expect("url");
    let conn = ConnectionManager::new(client).await.expect("connect");
    let mut config = Config::new(Algorithm::TokenBucket(
        Quota::parse("100/s burst 10").expect("quota"),
    ));
    config.timeout = Duration::from_millis(200);
    config.on_error = on_error;
    RedisLimiter::new(config, conn).expect("limiter")
}

/// Redis is killed, then the partner answers `429 Retry-After: 1` once:
/// the pause cannot reach Redis, so the adapter keeps it in this process
/// (and a limiter failing `local` pauses its local share): the retry, and
/// another call through the same limiter, reach the partner no sooner
/// than a second after the refusal, and the event says the pause was
/// local. Before: the retry went out at once (the fail policy admitted
/// it), within milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partners_pause_outlives_a_redis_outage() {
    for on_error in [OnError::Open, OnError::Local(50.0)] {
        let mut redis = Redis::start();
        let first = Arc::new(Mutex::new(true));
        let partner = Partner::start(move |_hit: &Hit| {
            if std::mem::replace(&mut *first.lock().unwrap(), false) {
                reply(429, &[("retry-after", "1")], "slow down")
            } else {
                reply(200, &[], "ok")
            }
        })
        .await;
        let limiter = Arc::new(failing(&redis, on_error).await);
        redis.kill();
        let events = Events::default();
        let a = client(
            OutboundMiddleware::builder(limiter.clone())
                .key("partner")
                .on_decision(events.hook())
                .build()
                .expect("middleware"),
        );
        let url = partner.url("/");
        let refused = tokio::spawn({
            let (a, url) = (a.clone(), url.clone());
            async move { a.get(url).send().await.expect("send").status() }
        });
        // Once the pause is made (Redis could not be told): another call
        // through the same client and, failing `local`, one through
        // another adapter on the same limiter (its local share is paused).
        for _ in 0..400 {
            if events.all().iter().any(|e| e.0 == "paused") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut others = vec![a.clone()];
        if matches!(on_error, OnError::Local(_)) {
            others.push(client(
                OutboundMiddleware::builder(limiter.clone())
                    .key("partner")
                    .build()
                    .expect("middleware"),
            ));
        }
        let mut calls = tokio::task::JoinSet::new();
        for c in others {
            let url = url.clone();
            calls.spawn(async move { c.get(url).send().await.expect("send").status() });
        }
        assert_eq!(refused.await.expect("join"), 200);
        for status in calls.join_all().await {
            assert_eq!(status, 200);
        }
        let log = partner.log();
        let refusal = log[0].at;
        for later in &log[1..] {
            assert!(
                later.at - refusal >= Duration::from_millis(995),
                "{on_error:?}: a request {:?} after the refusal: {log:?}",
                later.at - refusal
            );
        }
        let paused: Vec<_> = events
            .all()
            .into_iter()
            .filter(|e| e.0 == "paused")
            .collect();
        assert_eq!(paused.len(), 1, "{paused:?}");
        assert_eq!(paused[0].2, Some(Duration::from_secs(1)));
        assert!(paused[0].6, "{on_error:?}: the pause is reported local");
        println!(
            "{on_error:?}, Redis down: {} requests, the first after the refusal {:?} later",
            log.len(),
            log[1].at - refusal
        );
    }
}

/// Why a limiter calling a partner should fail `local`: with Redis killed,
/// 30 calls at once through a limiter failing open all reach the partner
/// at once; failing `local` at 5/s, at most its share (a burst of 1, then
/// 5/s) within the calls' 1 s timeout — the rest fail, sending nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_an_outage_failing_local_keeps_the_partner_within_the_share() {
    for (on_error, most) in [(OnError::Open, 30), (OnError::Local(5.0), 1 + 5 + 1)] {
        let mut redis = Redis::start();
        let partner = Partner::start(|_hit: &Hit| reply(200, &[], "ok")).await;
        let limiter = failing(&redis, on_error).await;
        redis.kill();
        let c = client(
            OutboundMiddleware::builder(limiter)
                .key("partner")
                .timeout(Duration::from_secs(1))
                .build()
                .expect("middleware"),
        );
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..30 {
            let (c, url) = (c.clone(), partner.url("/"));
            calls.spawn(async move { c.get(url).send().await.is_ok() });
        }
        let sent = calls.join_all().await.iter().filter(|ok| **ok).count();
        let hits = partner.hits();
        println!("{on_error:?}, Redis down: 30 calls, {hits} reached the partner");
        assert_eq!(sent, hits);
        match on_error {
            OnError::Open => assert_eq!(hits, most),
            _ => assert!((1..=most).contains(&hits), "{hits} > {most}"),
        }
    }
}
