//! The Rust driver's batching (`Config::batch`) against real Redis
//! servers: calls in flight together go out as one script run over many
//! keys, with the same decisions as one call per check — a burst on one
//! key, many keys, callers that give up, a failing server, and a cluster
//! (batches per hash slot, never a `CROSSSLOT`).

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ratebound::Quota;
use ratebound_redis::{Algorithm, Config, RedisLimiter, Source};
use redis::aio::ConnectionManager;
use support::{Cluster, Server, fresh, manager, script_calls_of, slot_third};

fn config(quota: &str, batch: bool) -> Config {
    let mut c = Config::new(Algorithm::TokenBucket(Quota::parse(quota).unwrap()));
    c.batch = batch;
    // Generous: these tests are about decisions, not deadlines (but for
    // the ones that set their own), and the machine may be busy.
    c.timeout = Duration::from_secs(2);
    c
}

/// A limiter of `quota` on `server` (its own connection), batching or not.
async fn limiter_on(server: &Server, quota: &str, batch: bool) -> RedisLimiter<ConnectionManager> {
    RedisLimiter::new(config(quota, batch), manager(&server.url()).await).unwrap()
}

/// `tasks` concurrent callers, each checking `keys(task, i)` for `i` in
/// `0..per_task`, started together: every decision, in no order.
async fn concurrently<K>(
    limiter: &RedisLimiter<ConnectionManager>,
    tasks: usize,
    per_task: usize,
    keys: K,
) -> Vec<ratebound_redis::RedisDecision>
where
    K: Fn(usize, usize) -> String + Send + Sync + 'static,
{
    let keys = Arc::new(keys);
    let start = Arc::new(tokio::sync::Barrier::new(tasks));
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (limiter, keys, start) = (limiter.clone(), keys.clone(), start.clone());
        handles.push(tokio::spawn(async move {
            start.wait().await;
            let mut out = Vec::with_capacity(per_task);
            for i in 0..per_task {
                out.push(limiter.check(keys(t, i)).await.unwrap());
            }
            out
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all
}

/// 200 checks at once on one key of burst 50 (and no refill to speak of):
/// exactly 50 admitted, with batching and without — and with batching in
/// far fewer script runs than checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_200_concurrent_checks_admits_exactly_the_burst() {
    let server = Server::start();
    let mut admin = manager(&server.url()).await;
    for batch in [true, false] {
        let limiter = limiter_on(&server, "1/hour burst 50", batch).await;
        let key = fresh("burst");
        let before = script_calls_of(&mut admin).await;
        let decisions = concurrently(&limiter, 200, 1, move |_, _| key.clone()).await;
        let calls = script_calls_of(&mut admin).await - before;
        assert_eq!(decisions.len(), 200);
        assert!(decisions.iter().all(|d| d.source() == Source::Redis));
        let admitted = decisions.iter().filter(|d| d.is_allowed()).count();
        assert_eq!(admitted, 50, "batch {batch}: exactly the burst");
        // The refused were told the wait for the next token (1 hour: one
        // token's period, less what has passed since the first check).
        for d in decisions.iter().filter(|d| !d.is_allowed()) {
            let wait = d.retry_after();
            assert!(
                wait > Duration::from_secs(3590) && wait <= Duration::from_secs(3600),
                "{wait:?}"
            );
            assert_eq!(d.remaining(), 0);
        }
        println!("batch {batch}: 200 checks in {calls} script calls");
        if batch {
            assert!(calls < 100, "batched: {calls} script calls for 200 checks");
        } else {
            // One call per check, and one EVAL where the first EVALSHA met
            // NOSCRIPT.
            assert!((200..=201).contains(&calls), "unbatched: {calls} calls");
        }
    }
}

/// 64 callers in flight on one limiter, 20 checks each on keys of their
/// own (key `i % 11` of 11, a burst of 1 each): batching makes fewer
/// script calls than checks (it happens), one call per check without it;
/// the decisions are the same — each key's first check admitted, its
/// second refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_in_flight_batch_and_decide_alike() {
    let server = Server::start();
    let mut admin = manager(&server.url()).await;
    let mut seen = Vec::new();
    for batch in [true, false] {
        let limiter = limiter_on(&server, "1/hour burst 1", batch).await;
        let prefix = fresh("many");
        let before = script_calls_of(&mut admin).await;
        let decisions = concurrently(&limiter, 64, 20, move |t, i| {
            format!("{prefix}:{t}:{}", i % 11)
        })
        .await;
        let calls = script_calls_of(&mut admin).await - before;
        let checks = decisions.len() as u64;
        assert_eq!(checks, 64 * 20);
        assert!(decisions.iter().all(|d| d.source() == Source::Redis));
        let admitted = decisions.iter().filter(|d| d.is_allowed()).count();
        println!("batch {batch}: {checks} checks in {calls} script calls, {admitted} admitted");
        if batch {
            assert!(
                calls * 2 <= checks,
                "batched: {calls} script calls for {checks} checks"
            );
        } else {
            assert!((checks..=checks + 1).contains(&calls), "unbatched: {calls}");
        }
        let mut waits: Vec<u64> = decisions
            .iter()
            .map(|d| d.retry_after().as_secs().div_ceil(60))
            .collect();
        waits.sort_unstable();
        seen.push((admitted, waits));
    }
    assert_eq!(seen[0], seen[1], "batched and unbatched decide alike");
    // Checks 0..=10 take keys 0..=10 (admitted), checks 11..=19 keys
    // 0..=8 again (refused, about an hour to wait).
    assert_eq!(seen[0].0, 64 * 11);
    assert_eq!(seen[0].1.iter().filter(|w| **w == 60).count(), 64 * 9);
}

/// Callers that give up — their futures dropped while their calls wait or
/// are in flight — leave the others' batches alone: every caller that
/// waits gets Redis' answer, and the limiter goes on batching afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_that_give_up_do_not_break_the_others() {
    let server = Server::start();
    let mut admin = manager(&server.url()).await;
    let limiter = limiter_on(&server, "1000/s burst 1000", true).await;
    let prefix = fresh("quit");
    let mut handles = Vec::new();
    for t in 0..64usize {
        let (limiter, prefix) = (limiter.clone(), prefix.clone());
        handles.push(tokio::spawn(async move {
            let mut answered = 0;
            for i in 0..50usize {
                let check = limiter.check(format!("{prefix}:{t}:{i}"));
                if (t + i) % 3 == 0 {
                    // Gives up after a few µs: the call is dropped while it
                    // waits for its batch or while it is sent.
                    let _ = tokio::time::timeout(Duration::from_micros(50), check).await;
                } else {
                    let d = check.await.unwrap();
                    assert_eq!(d.source(), Source::Redis, "task {t} check {i}");
                    assert!(d.is_allowed());
                    answered += 1;
                }
            }
            answered
        }));
    }
    let mut answered = 0;
    for h in handles {
        answered += tokio::time::timeout(Duration::from_secs(20), h)
            .await
            .expect("no caller hangs")
            .unwrap();
    }
    let waited = (0..64usize)
        .flat_map(|t| (0..50usize).map(move |i| (t + i) % 3 != 0))
        .filter(|w| *w)
        .count();
    assert_eq!(answered, waited, "every caller that waited was answered");
    // Afterwards: still batching, still answering.
    let before = script_calls_of(&mut admin).await;
    let decisions = concurrently(&limiter, 64, 5, move |t, i| format!("after:{t}:{i}")).await;
    let calls = script_calls_of(&mut admin).await - before;
    assert!(decisions.iter().all(|d| d.source() == Source::Redis));
    assert!(calls < 64 * 5, "{calls} calls for {} checks", 64 * 5);
}

/// The server killed while batches are in flight: every caller gets an
/// answer — Redis' before, the fail policy's after — within its deadline
/// (generously bounded: 200 ms + 500 ms); no call is lost or left waiting,
/// and every one of the 64 tasks goes on until it has met the dead server
/// (three fail-policy answers), long before its bounds (100 000 checks,
/// 5 s). (A call that times out within one deadline of Redis' last reply
/// is refused as busy: the engine cannot yet tell a dead server from its
/// own queue, and refusing never exceeds the limit. Calls after that meet
/// the fail policy.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_under_batches_answers_every_caller() {
    let mut server = Server::start();
    let mut c = config("100000/s burst 100000", true);
    c.timeout = Duration::from_millis(200);
    let limiter = RedisLimiter::new(c, manager(&server.url()).await).unwrap();
    let prefix = fresh("killed");
    let kill_at = Instant::now() + Duration::from_millis(300);
    let mut handles = Vec::new();
    for t in 0..64usize {
        let (limiter, prefix) = (limiter.clone(), prefix.clone());
        handles.push(tokio::spawn(async move {
            let (mut redis, mut failed, mut longest) = (0u32, 0u32, Duration::ZERO);
            let mut busy = 0u32;
            for i in 0..100_000usize {
                if failed == 3 || Instant::now() > kill_at + Duration::from_secs(5) {
                    break;
                }
                let t0 = Instant::now();
                let d = limiter.check(format!("{prefix}:{t}:{i}")).await.unwrap();
                longest = longest.max(t0.elapsed());
                match d.source() {
                    Source::Redis => redis += 1,
                    Source::FailOpen => failed += 1,
                    Source::Busy => busy += 1,
                    other => panic!("{other:?}"),
                }
            }
            (redis, failed, busy, longest)
        }));
    }
    tokio::time::sleep_until(kill_at.into()).await;
    server.kill();
    let (mut redis, mut busy, mut longest) = (0, 0, Duration::ZERO);
    for (t, h) in handles.into_iter().enumerate() {
        let (r, f, b, l) = tokio::time::timeout(Duration::from_secs(10), h)
            .await
            .expect("no caller hangs")
            .unwrap();
        assert!(r >= 1, "task {t}: Redis answered before the kill");
        assert_eq!(f, 3, "task {t} met the dead server ({r} Redis, {b} busy)");
        // A liveness bound (the 200 ms deadline + 2.5 s): that each caller
        // is answered exactly at its own deadline is checked in virtual
        // time by deadlines.rs
        // `batched_callers_on_a_silent_server_answer_at_their_own_deadline`.
        assert!(l <= Duration::from_millis(200 + 2500), "task {t}: {l:?}");
        (redis, busy, longest) = (redis + r, busy + b, longest.max(l));
    }
    println!(
        "killed: {redis} answered by Redis, 64 x 3 by the fail policy, {busy} busy, longest {longest:?}"
    );
}

/// A 3-master cluster, keys on every master, many checks in flight at
/// once with batching on: each key holds its bound, batches formed (fewer
/// script calls than checks over the cluster), and no node ever replied
/// `CROSSSLOT` (`INFO errorstats`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_batches_per_slot_and_never_crosses_slots() {
    let cluster = Cluster::start();
    let (conn, mut nodes) = cluster.connect().await;
    let mut c = Config::new(Algorithm::TokenBucket(
        Quota::parse("1/hour burst 20").unwrap(),
    ));
    c.timeout = Duration::from_secs(2);
    let limiter = RedisLimiter::new(c, conn).unwrap();
    assert!(limiter.batches_per_slot(), "a cluster connection is known");
    // Keys in each third of the slots (a master each): one hot key, and a
    // hashtag group of five keys sharing its slot ({tag}:0 … {tag}:4).
    let tag = fresh("c");
    let mut groups: Vec<Option<String>> = vec![None, None, None];
    for i in 0..1000 {
        let t = format!("{tag}-{i}");
        let third = slot_third(&mut nodes[0], &t).await;
        if groups[third].is_none() {
            groups[third] = Some(t);
        }
        if groups.iter().all(Option::is_some) {
            break;
        }
    }
    let groups: Vec<String> = groups.into_iter().flatten().collect();
    assert_eq!(groups.len(), 3, "a hashtag on each master");
    let mut keys = Vec::new();
    for t in &groups {
        keys.push(format!("hot-{{{t}}}"));
        for j in 0..5 {
            keys.push(format!("{{{t}}}:{j}"));
        }
    }
    let before: Vec<u64> = {
        let mut v = Vec::new();
        for n in &mut nodes {
            v.push(script_calls_of(n).await);
        }
        v
    };
    // 96 callers, 10 checks each, over the 18 keys: 960 checks, 53 per key
    // or so, 20 of them admitted (burst 20, a token an hour).
    let start = Arc::new(tokio::sync::Barrier::new(96));
    let keys = Arc::new(keys);
    let mut handles = Vec::new();
    for t in 0..96usize {
        let (limiter, keys, start) = (limiter.clone(), keys.clone(), start.clone());
        handles.push(tokio::spawn(async move {
            start.wait().await;
            let mut out = Vec::new();
            for i in 0..10usize {
                let k = (t * 7 + i) % keys.len();
                let d = limiter.check(&keys[k]).await.unwrap();
                assert_eq!(d.source(), Source::Redis);
                out.push((k, d.is_allowed()));
            }
            out
        }));
    }
    let mut admitted = vec![0u32; keys.len()];
    let mut asked = vec![0u32; keys.len()];
    for h in handles {
        for (k, ok) in h.await.unwrap() {
            asked[k] += 1;
            admitted[k] += u32::from(ok);
        }
    }
    for (k, key) in keys.iter().enumerate() {
        assert!(asked[k] > 20, "{key}: asked {}", asked[k]);
        assert_eq!(admitted[k], 20, "{key}: exactly the burst");
    }
    let mut calls = 0;
    for (n, b) in nodes.iter_mut().zip(&before) {
        let here = script_calls_of(n).await - b;
        assert!(here > 0, "every master ran scripts");
        calls += here;
    }
    println!("cluster: 960 checks in {calls} script calls over three masters");
    assert!(
        calls < 960 / 2,
        "batches formed: {calls} calls for 960 checks"
    );
    for (i, n) in nodes.iter_mut().enumerate() {
        let errors: String = redis::cmd("INFO")
            .arg("errorstats")
            .query_async(n)
            .await
            .unwrap();
        assert!(
            !errors.contains("errorstat_CROSSSLOT"),
            "node {i} replied CROSSSLOT: {errors}"
        );
    }
    // A wrapper type is told by hand; off is off.
    assert!(!limiter.clone().per_slot(false).batches_per_slot());
}

/// The client's own overload is not an outage (issue 36): 6 000 checks at
/// once on one limiter with a 50 ms deadline — more than its batches can
/// carry in that time on a busy 2-core host — and a fail policy `open`.
/// Calls still queued at their deadline never left the client: each is
/// refused as busy, and neither the fail policy nor the circuit breaker
/// hears of it. So whatever the machine's speed, what is admitted stays
/// within burst + rate·t, and every answer is Redis' or busy. (Before: the
/// queued calls timed out as if Redis were slow, and the fail policy
/// admitted them.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_beyond_the_deadline_is_busy_never_the_fail_policy() {
    let server = Server::start();
    let mut c = config("10/s burst 10", true);
    c.timeout = Duration::from_millis(50);
    c.on_error = ratebound_redis::OnError::Open;
    let limiter = RedisLimiter::new(c, manager(&server.url()).await).unwrap();
    let key = fresh("flood");
    let started = Instant::now();
    let decisions = concurrently(&limiter, 6_000, 1, move |_, _| key.clone()).await;
    let elapsed = started.elapsed().as_secs_f64();
    let count = |s: Source| decisions.iter().filter(|d| d.source() == s).count();
    let admitted = decisions.iter().filter(|d| d.is_allowed()).count();
    let stats = limiter.stats();
    println!(
        "6000 checks in {elapsed:.2} s: redis {}, busy {}, fail_open {}, admitted {admitted}; {stats:?}",
        count(Source::Redis),
        count(Source::Busy),
        count(Source::FailOpen),
    );
    assert_eq!(count(Source::FailOpen), 0, "{stats:?}");
    assert_eq!(count(Source::Redis) + count(Source::Busy), 6_000);
    assert!(!stats.breaker_open, "{stats:?}");
    assert_eq!(stats.fail_policy(), 0, "{stats:?}");
    let bound = 10.0 + 10.0 * elapsed + 1.0;
    assert!(
        admitted as f64 <= bound,
        "{admitted} admitted, bound {bound:.0}"
    );
}
