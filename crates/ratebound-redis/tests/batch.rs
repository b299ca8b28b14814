//! The batch scripts (`lua/many.lua`) against a real Redis: every key of a
//! batch decided exactly as separate calls in the same order decide it —
//! the spec vectors, a random sequence on a few keys, a damaged key among
//! healthy ones.

mod support;
mod vectors;

use std::time::Duration;

use ratebound::Quota;
use ratebound_redis::{
    Algorithm, BatchCall, Begin, Call, CallOutcome, Config, Engine, RedisDecision,
};
use redis::aio::ConnectionManager;
use serde_json::Value;
use support::{Server, fresh, manager};
use vectors::{config_of, observed};

/// Sends `(evalsha, eval)`: the second only on `NOSCRIPT`.
async fn send(conn: &mut ConnectionManager, (evalsha, eval): (redis::Cmd, redis::Cmd)) -> Vec<i64> {
    match evalsha.query_async(conn).await {
        Err(e) if Call::is_noscript(&e) => eval.query_async(conn).await.expect("EVAL"),
        other => other.expect("EVALSHA"),
    }
}

/// One call on its own (the one-key script).
async fn alone(conn: &mut ConnectionManager, engine: &Engine, call: &Call) -> RedisDecision {
    let reply = send(conn, call.commands()).await;
    engine.finish(call, CallOutcome::Reply(&reply))
}

/// `calls` as one batch (the many-key script), each finished on its part.
async fn together(
    conn: &mut ConnectionManager,
    engine: &Engine,
    calls: &[Call],
) -> Vec<RedisDecision> {
    let refs: Vec<&Call> = calls.iter().collect();
    let batch = BatchCall::of(&refs).expect("the calls join");
    assert_eq!(batch.keys.len(), calls.len());
    let reply = send(conn, batch.commands()).await;
    let parts = BatchCall::replies(&reply, calls.len()).expect("7 integers a call");
    calls
        .iter()
        .zip(parts)
        .map(|(c, r)| engine.finish(c, CallOutcome::Reply(r)))
        .collect()
}

fn begun(engine: &Engine, key: &[u8], n: u64, at: u64) -> Result<Call, RedisDecision> {
    match engine.begin(key, n).expect("n within the burst") {
        Begin::Call(c) => Ok(c.at(at)),
        Begin::Done(d) => Err(d),
    }
}

/// Every spec vector, its steps of one instant sent as one batch (a
/// leasing vector's steps one batch each: a lease's bookkeeping is kept
/// between calls): the same answers the vectors expect of separate calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_vectors_replay_through_the_batch_scripts() {
    let server = Server::start();
    let mut conn = manager(&server.url()).await;
    let path = format!("{}/../../spec/redis.json", env!("CARGO_MANIFEST_DIR"));
    let spec: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let (mut failures, mut steps, mut batched) = (Vec::new(), 0, 0);
    for v in spec["vectors"].as_array().unwrap() {
        let id = v["id"].as_str().unwrap();
        let key = fresh(id);
        let mut config = config_of(&v["config"]);
        let mut engine = Engine::new(config.clone()).unwrap();
        let all = v["steps"].as_array().unwrap();
        let mut i = 0;
        while i < all.len() {
            if let Some(c) = all[i].get("config") {
                config = config_of(c);
                engine = Engine::new(config.clone()).unwrap();
            }
            // This instant's steps (up to a redeploy), or one when leasing.
            let at = all[i]["at_us"].as_u64().unwrap();
            let mut j = i + 1;
            while config.lease == 0
                && j < all.len()
                && all[j]["at_us"].as_u64() == Some(at)
                && all[j].get("config").is_none()
            {
                j += 1;
            }
            let mut calls = Vec::new();
            let mut answers: Vec<Option<RedisDecision>> = Vec::new();
            for step in &all[i..j] {
                match begun(&engine, key.as_bytes(), step["n"].as_u64().unwrap(), at) {
                    Ok(c) => {
                        calls.push(c);
                        answers.push(None);
                    }
                    Err(d) => answers.push(Some(d)),
                }
            }
            if !calls.is_empty() {
                batched += calls.len();
                let mut decided = together(&mut conn, &engine, &calls).await.into_iter();
                for a in answers.iter_mut().filter(|a| a.is_none()) {
                    *a = decided.next();
                }
            }
            for (k, (step, d)) in all[i..j].iter().zip(&answers).enumerate() {
                steps += 1;
                let got = observed(d.as_ref().expect("answered"));
                for (field, want) in step["expect"].as_object().unwrap() {
                    if &got[field] != want {
                        failures.push(format!(
                            "{id} step {}: {field} = {}, want {want}",
                            i + k,
                            got[field]
                        ));
                    }
                }
            }
            i = j;
        }
    }
    assert!(
        failures.is_empty(),
        "redis.json batched:\n{}",
        failures.join("\n")
    );
    assert!(
        steps >= 40 && batched >= 30,
        "{steps} steps, {batched} batched"
    );
}

/// A tiny deterministic generator (no dependency for the test's dice).
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// 600 checks of 1–3 tokens on 4 keys, at instants that repeat, through
/// every algorithm: as separate calls under one prefix and as one batch an
/// instant under another, the two sequences give the same decisions.
///
/// Redis expires keys (`PX`) on its own clock while the calls are judged
/// at explicit instants: on the scale of seconds, a loaded machine could
/// let a key lapse between two instants that its state says are 100 ms
/// apart. So every rate and window here is on the scale of minutes (the
/// same shapes, a thousand times slower): no key lapses before 100 s of
/// real time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_decides_as_the_same_calls_in_order() {
    let server = Server::start();
    let mut conn = manager(&server.url()).await;
    let algorithms = [
        Algorithm::TokenBucket(Quota::parse("36/hour burst 5").unwrap()),
        Algorithm::FixedWindow {
            limit: 6,
            window: Duration::from_secs(600),
        },
        Algorithm::SlidingWindow {
            limit: 6,
            window: Duration::from_secs(600),
        },
    ];
    for algorithm in algorithms {
        let engine_of = |prefix: &str| {
            let mut c = Config::new(algorithm);
            c.prefix = prefix.to_string();
            Engine::new(c).unwrap()
        };
        let (one, many) = (engine_of(&fresh("one")), engine_of(&fresh("many")));
        let mut dice = Dice(7);
        // Every instant, token period and window a multiple of 100 s, and
        // the first instant a window's start: every key's expiry (PX, which
        // Redis counts on its own clock) is then at least 100 s away, far
        // more than the whole test takes, so no key lapses in Redis.
        let mut at = 1_700_000_400_000_000u64;
        let (mut allowed, mut refused) = (0, 0);
        for _ in 0..100 {
            at += dice.below(4) * 100_000_000;
            let picks: Vec<(String, u64)> = (0..6)
                .map(|_| (format!("k{}", dice.below(4)), 1 + dice.below(3)))
                .collect();
            let mut separate = Vec::new();
            for (k, n) in &picks {
                let call = begun(&one, k.as_bytes(), *n, at).expect("a call");
                separate.push(alone(&mut conn, &one, &call).await);
            }
            let calls: Vec<Call> = picks
                .iter()
                .map(|(k, n)| begun(&many, k.as_bytes(), *n, at).expect("a call"))
                .collect();
            let batched = together(&mut conn, &many, &calls).await;
            for (a, b) in separate.iter().zip(&batched) {
                assert_eq!(observed(a), observed(b), "{algorithm:?} at {at}");
                if a.is_allowed() {
                    allowed += 1;
                } else {
                    refused += 1;
                }
            }
        }
        // Both answers occur, so the comparison means something.
        assert!(
            allowed > 50 && refused > 50,
            "{allowed} allowed, {refused} refused"
        );
    }
}

/// A key of another type among healthy ones: that key alone is damaged
/// (rebuilt, refused); the others are decided as usual; a reply of the
/// wrong length is no batch reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_key_spoils_only_itself() {
    let server = Server::start();
    let mut conn = manager(&server.url()).await;
    let mut c = Config::new(Algorithm::TokenBucket(
        Quota::parse("10/s burst 3").unwrap(),
    ));
    c.prefix = fresh("dmg");
    let engine = Engine::new(c).unwrap();
    let bad = engine.redis_key(None, b"bad");
    let _: () = redis::cmd("LPUSH")
        .arg(&bad)
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();
    let calls: Vec<Call> = ["a", "bad", "b", "a"]
        .iter()
        .map(|k| match engine.begin(k.as_bytes(), 2).unwrap() {
            Begin::Call(c) => c,
            Begin::Done(d) => panic!("{d:?}"),
        })
        .collect();
    let d = together(&mut conn, &engine, &calls).await;
    let sources: Vec<&str> = d.iter().map(|d| d.source().as_str()).collect();
    assert_eq!(sources, ["redis", "damaged", "redis", "redis"]);
    let allowed: Vec<bool> = d.iter().map(RedisDecision::is_allowed).collect();
    // "a" twice: 2 of 3, then 2 more do not fit.
    assert_eq!(allowed, [true, false, true, false]);
    assert!(BatchCall::replies(&[1, 2, 3], 1).is_none());
    assert!(BatchCall::replies(&[], 0).is_none());
}
