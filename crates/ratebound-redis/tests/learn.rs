//! What the outbound adapters learn of a partner's real limit, kept in
//! Redis beside the bucket, against a real Redis: spec/redis_learn.json
//! (the script's scaling, which must be `Learned::scale`'s, and its
//! compare-and-swap, at explicit times), fifty random ceilings and words,
//! two limiters on two connections sharing what one learned, the batch
//! script, an outage, and what a learned key keeps and forgets.

mod support;
mod vectors;

use std::sync::Arc;
use std::time::Duration;

use ratebound::any::Key;
use ratebound::outbound::{FULL, Learned};
use ratebound::{Error, KeyedLimit, Quota};
use ratebound_redis::{
    Algorithm, BatchCall, Begin, CallOutcome, Config, Engine, OnError, RedisLimiter,
};
use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use serde_json::Value;
use support::{Server, adapt, fresh, manager, run};
use vectors::{config_of, observed};

/// An instant of Redis' clock far from the test's (µs), as in the vectors.
const T0: u64 = 1_200_000_000_000_000;

fn spec() -> Value {
    let path = format!("{}/../../spec/redis_learn.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A vector's word.
fn word(v: &Value) -> Learned {
    Learned::new(
        u32::try_from(v["units"].as_u64().unwrap()).unwrap(),
        v["at_ms"].as_u64().unwrap(),
    )
    .with_cut(v["cut"].as_bool().unwrap())
}

fn json(w: Learned) -> Value {
    serde_json::json!({"units": w.fraction_units(), "at_ms": w.changed_ms(), "cut": w.was_cut()})
}

fn bucket(quota: Quota) -> Config {
    let mut c = Config::new(Algorithm::TokenBucket(quota));
    c.prefix = format!("{}:", fresh("learn"));
    c.timeout = Duration::from_secs(2);
    c
}

/// A check of `n` for `key` at `at`, as its decision and the reply's word.
async fn check(
    conn: &mut ConnectionManager,
    e: &Engine,
    key: &str,
    n: u64,
    at: u64,
) -> (ratebound_redis::RedisDecision, Learned) {
    let Begin::Call(call) = e.begin(key.as_bytes(), n).unwrap() else {
        panic!("answered without Redis")
    };
    let call = call.at(at);
    let reply = run(conn, &call).await;
    let d = e.finish(&call, CallOutcome::Reply(&reply));
    (d, e.learned(None, key.as_bytes()))
}

/// The bucket a word makes in Redis: `w` written over the fresh word at
/// `at` and a check of 1 at `at`, in one script run (a batch: no time
/// passes between them, so the key cannot expire — a learned key lives
/// τ' of Redis' own clock, which can be a few ms) — T' is the check's
/// reset_after and the burst its remaining + 1.
async fn bucket_seen(
    conn: &mut ConnectionManager,
    e: &Engine,
    key: &str,
    w: Learned,
    at: u64,
) -> (u64, u64) {
    let Begin::Call(check) = e.begin(key.as_bytes(), 1).unwrap() else {
        panic!("answered without Redis")
    };
    let calls = [
        e.begin_adapt(None, key.as_bytes(), Learned::fresh(), w)
            .unwrap()
            .at(at),
        check.at(at),
    ];
    let refs: Vec<&_> = calls.iter().collect();
    let batch = BatchCall::of(&refs).expect("an adapt joins a check");
    let reply: Vec<i64> = match batch.evalsha().query_async(conn).await {
        Ok(r) => r,
        Err(_) => batch.eval().query_async(conn).await.unwrap(),
    };
    let parts: Vec<&[i64]> = BatchCall::replies(&reply, 2).unwrap().collect();
    assert_eq!(
        e.finish_adapt(&calls[0], CallOutcome::Reply(parts[0])),
        Ok(true)
    );
    let d = e.finish(&calls[1], CallOutcome::Reply(parts[1]));
    assert!(d.is_allowed(), "{d:?}");
    assert_eq!(e.learned(None, key.as_bytes()), w);
    (d.reset_after().as_micros() as u64, d.remaining() + 1)
}

/// `ceiling` in Redis' units: its interval rounded up to whole µs (what
/// the script is given), as a quota of whole µs.
fn in_redis(ceiling: Quota) -> (u64, u64) {
    (
        ceiling.emission_interval_nanos().div_ceil(1000),
        ceiling.burst(),
    )
}

/// `Learned::scale` of the ceiling Redis keeps — its interval rounded up
/// to whole µs, as the engine gives every quota to the script — in
/// Redis' units; `None` when that rounding takes the ceiling past the
/// longest quota (within a burst of µs of 2^60 ns).
fn scaled(ceiling: Quota, w: Learned) -> Option<(u64, u64)> {
    let (t_us, burst) = in_redis(ceiling);
    let q = Quota::with_period(Duration::from_micros(t_us))
        .ok()?
        .with_burst(burst)
        .ok()?;
    let s = w.scale(q);
    Some((s.emission_interval_nanos().div_ceil(1000), s.burst()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_vectors_replay_against_real_redis() {
    let server = Server::start();
    let mut conn = manager(&server.url()).await;
    let spec = spec();
    let (mut failures, mut steps) = (Vec::new(), 0);
    for v in spec["vectors"].as_array().unwrap() {
        let id = v["id"].as_str().unwrap();
        let e = Engine::new(config_of(&v["config"])).unwrap();
        let key = fresh(id);
        let full = e.redis_key(None, key.as_bytes());
        for (i, step) in v["steps"].as_array().unwrap().iter().enumerate() {
            steps += 1;
            if let Some(value) = step.get("set") {
                let _: () = conn
                    .set_ex(&full, value.as_str().unwrap(), 600)
                    .await
                    .unwrap();
                continue;
            }
            let at = step["at_us"].as_u64().unwrap();
            let mut got = serde_json::Map::new();
            if let Some(a) = step.get("adapt") {
                let replaced =
                    adapt(&mut conn, &e, &key, word(&a["seen"]), word(&a["next"]), at).await;
                got.insert("replaced".into(), replaced.into());
            } else if let Some(d) = step.get("pause_us") {
                let call = e
                    .begin_pause(
                        None,
                        key.as_bytes(),
                        Duration::from_micros(d.as_u64().unwrap()),
                    )
                    .unwrap()
                    .at(at);
                let reply = run(&mut conn, &call).await;
                let (_, shift) = e.finish_pause(CallOutcome::Reply(&reply)).unwrap();
                got.insert("shift_us".into(), (shift.as_micros() as u64).into());
            } else {
                let (d, _) = check(&mut conn, &e, &key, step["n"].as_u64().unwrap(), at).await;
                got = observed(&d).as_object().unwrap().clone();
            }
            got.insert("learned".into(), json(e.learned(None, key.as_bytes())));
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
    assert!(
        failures.is_empty(),
        "redis_learn.json:\n{}",
        failures.join("\n")
    );
    assert!(steps >= 30, "{steps} steps");
}

/// The bucket each `scale` entry's word makes of its ceiling in Redis is
/// the one the vector says, and (but for the one band it names) the one
/// `Learned::scale` makes — the one scaling every store applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripts_scaling_is_learned_scale() {
    let server = Server::start();
    let mut conn = manager(&server.url()).await;
    let spec = spec();
    let entries = spec["scale"].as_array().unwrap();
    assert!(entries.len() >= 8);
    for s in entries {
        let doc = s["doc"].as_str().unwrap();
        let config = config_of(&s["config"]);
        let Algorithm::TokenBucket(ceiling) = config.algorithm else {
            panic!("{doc}")
        };
        let e = Engine::new(config).unwrap();
        let w = word(&s["learned"]);
        let key = fresh("scale");
        let (t, burst) = bucket_seen(&mut conn, &e, &key, w, T0).await;
        let want = (
            s["expect"]["interval_us"].as_u64().unwrap(),
            s["expect"]["burst"].as_u64().unwrap(),
        );
        assert_eq!((t, burst), want, "{doc}");
        let (st, sb) = scaled(ceiling, w).expect("a ceiling of whole µs");
        assert_eq!(st, t, "{doc}: Learned::scale's interval");
        if s["same_as_scale"].as_bool().unwrap() {
            assert_eq!(sb, burst, "{doc}: Learned::scale's burst");
        } else {
            assert!(burst < sb, "{doc}: the script's burst is the smaller");
        }
    }
}

/// A small deterministic generator (xorshift), so that a failure names
/// its case.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// 150 random ceilings (1 µs to a day between tokens, bursts 1 to 10^6)
/// under random words: the script's bucket is `Learned::scale`'s, and a
/// word of the whole ceiling (or the fresh one) changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_ceilings_scale_as_learned_scale_does() {
    let server = Server::start();
    let mut conn = manager(&server.url()).await;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut checked = 0;
    for case in 0..150 {
        let period_ns = match rng.below(3) {
            0 => 1000 + rng.below(1_000_000),
            1 => 1_000_000 + rng.below(1_000_000_000),
            _ => 1_000_000_000 + rng.below(86_400_000_000_000),
        };
        let burst = 1 + match rng.below(3) {
            0 => rng.below(10),
            1 => rng.below(1000),
            _ => rng.below(1_000_000),
        };
        let Ok(ceiling) = Quota::with_period(Duration::from_nanos(period_ns))
            .unwrap()
            .with_burst(burst)
        else {
            continue;
        };
        let units = match rng.below(4) {
            0 => FULL,
            1 => u32::try_from(rng.below(64)).unwrap(),
            _ => u32::try_from(rng.below(u64::from(FULL))).unwrap(),
        };
        let w = Learned::new(units, 1 + rng.below(1 << 40)).with_cut(rng.below(2) == 1);
        let e = Engine::new(bucket(ceiling)).unwrap();
        let key = fresh("random");
        let got = bucket_seen(&mut conn, &e, &key, w, T0).await;
        let what = format!("case {case}: {ceiling:?} under {w:?}");
        if let Some(want) = scaled(ceiling, w) {
            assert_eq!(got, want, "{what}");
            checked += 1;
        }
        if units == FULL {
            assert_eq!(got, in_redis(ceiling), "{what}");
        }
        assert!(
            got.0 >= in_redis(ceiling).0,
            "{what}: never faster than the ceiling"
        );
        assert!(got.1 <= burst, "{what}: never a larger burst");
    }
    assert!(checked >= 100, "{checked} cases compared");
}

/// Two limiters on two connections (two instances) both saw the fresh
/// word and propose two different cuts at once: one replaces it, the
/// other is told it was changed — and each then knows the word in force
/// from its own reply, without another call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_proposals_from_one_word_one_wins() {
    let server = Server::start();
    let config = bucket(Quota::parse("30/s burst 30").unwrap());
    for round in 0..20 {
        let a = RedisLimiter::new(config.clone(), manager(&server.url()).await).unwrap();
        let b = RedisLimiter::new(config.clone(), manager(&server.url()).await).unwrap();
        let key = fresh("cas");
        let (wa, wb) = (
            Learned::new(FULL * 7 / 10, 1_000 + round).with_cut(true),
            Learned::new(FULL / 2, 2_000 + round).with_cut(true),
        );
        let (ra, rb) = tokio::join!(
            a.adapt(&key, Learned::fresh(), wa),
            b.adapt(&key, Learned::fresh(), wb)
        );
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        assert!(ra ^ rb, "round {round}: exactly one replaced ({ra}, {rb})");
        let winner = if ra { wa } else { wb };
        assert_eq!(a.learned(&key), winner, "round {round}");
        assert_eq!(b.learned(&key), winner, "round {round}");
        // The loser's proposal again, from the word it saw: still refused.
        let loser = if ra { &b } else { &a };
        let lost = if ra { wb } else { wa };
        assert!(!loser.adapt(&key, Learned::fresh(), lost).await.unwrap());
    }
}

/// What one instance learned, another (its own connection and engine,
/// never told) runs at from its first acquisition, and knows from that
/// acquisition's reply: a new instance starts from what the fleet learned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_instance_runs_at_what_the_first_learned() {
    let server = Server::start();
    let config = bucket(Quota::parse("10/s burst 20").unwrap());
    let a = RedisLimiter::new(config.clone(), manager(&server.url()).await).unwrap();
    let b = RedisLimiter::new(config.clone(), manager(&server.url()).await).unwrap();
    let key = fresh("shared");
    let quarter = Learned::new(FULL / 4, 5).with_cut(true);
    assert!(
        a.adapt_at(&key, Learned::fresh(), quarter, T0)
            .await
            .unwrap()
    );
    assert_eq!(b.learned(&key), Learned::fresh(), "nothing heard yet");
    // A quarter of 10/s burst 20: 2.5/s (T' = 400 ms), burst 5.
    for i in 0..5 {
        let d = b.check_n_at(&key, 1, T0).await.unwrap();
        assert!(d.is_allowed(), "token {i}: {d:?}");
    }
    let d = b.check_n_at(&key, 1, T0).await.unwrap();
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after(), Duration::from_millis(400));
    assert_eq!(b.learned(&key), quarter);
    // b's waits (reservations, what the outbound adapters use) run at it
    // too: its next token is due 400 ms after the last.
    let b2 = RedisLimiter::new(config, manager(&server.url()).await).unwrap();
    b2.acquire_n(&key, 1, Some(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(
        b2.learned(&key),
        quarter,
        "a reservation's reply carries it"
    );
    // b cuts further from the word it heard; a hears it on its next call.
    let eighth = Learned::new(FULL / 8, 6).with_cut(true);
    assert!(b.adapt_at(&key, quarter, eighth, T0).await.unwrap());
    assert_eq!(a.learned(&key), quarter, "no I/O: what its last reply said");
    let _ = a.check_n_at(&key, 1, T0).await.unwrap();
    assert_eq!(a.learned(&key), eighth);
}

/// The limiter as a `KeyedLimit` (what the outbound adapters hold): a token
/// bucket learns, a window does not; `learned` and `adapt` go to the key
/// acquisitions use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_a_keyed_limit_a_bucket_learns_and_a_window_does_not() {
    let server = Server::start();
    let limit: Arc<dyn KeyedLimit> = Arc::new(
        RedisLimiter::new(
            bucket(Quota::parse("10/s burst 10").unwrap()),
            manager(&server.url()).await,
        )
        .unwrap(),
    );
    assert!(limit.learns());
    let key = fresh("keyed");
    let half = Learned::new(FULL / 2, 9).with_cut(true);
    assert!(
        limit
            .adapt(Key::Text(&key), Learned::fresh(), half)
            .await
            .unwrap()
    );
    assert_eq!(limit.learned(Key::Text(&key)), half);
    assert_eq!(
        limit.learned(Key::Bytes(key.as_bytes())),
        half,
        "the same key"
    );
    limit
        .acquire(Key::Text(&key), 1, Some(Duration::from_secs(2)))
        .await
        .unwrap();
    assert_eq!(limit.learned(Key::Text(&key)), half);
    let mut c = Config::new(Algorithm::FixedWindow {
        limit: 10,
        window: Duration::from_secs(1),
    });
    c.timeout = Duration::from_secs(2);
    let window: Arc<dyn KeyedLimit> =
        Arc::new(RedisLimiter::new(c, manager(&server.url()).await).unwrap());
    assert!(!window.learns());
    assert!(matches!(
        window.adapt(Key::Text("k"), Learned::fresh(), half).await,
        Err(Error::Unsupported { .. })
    ));
    assert_eq!(window.learned(Key::Text("k")), Learned::fresh());
}

/// Redis down: an adapt fails at once with `StoreUnavailable` under every
/// fail policy (nothing learned: no fail policy answers it), within the
/// deadline, and once the breaker is open without a call; what was learned
/// before is still what `learned` says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_fails_the_adapt_and_learns_nothing() {
    let mut server = Server::start();
    for on_error in [OnError::Open, OnError::Closed, OnError::Local(5.0)] {
        let mut config = bucket(Quota::parse("10/s burst 10").unwrap());
        config.on_error = on_error;
        config.timeout = Duration::from_millis(200);
        config.breaker_threshold = 2;
        config.breaker_cooldown = Duration::from_secs(30);
        let l = RedisLimiter::new(config, manager(&server.url()).await).unwrap();
        let key = fresh("outage");
        let half = Learned::new(FULL / 2, 1).with_cut(true);
        assert!(l.adapt(&key, Learned::fresh(), half).await.unwrap());
        server.kill();
        let third = Learned::new(FULL / 3, 2).with_cut(true);
        for _ in 0..3 {
            let err = l.adapt(&key, half, third).await.unwrap_err();
            assert!(
                matches!(&err, Error::StoreUnavailable { cause, .. } if cause.contains("nothing learned")),
                "{on_error:?}: {err:?}"
            );
        }
        assert!(l.engine().breaker_open(), "{on_error:?}");
        assert_eq!(l.learned(&key), half, "{on_error:?}");
        server.restart();
    }
}

/// A learned word lives beside the bucket: an adapt on a full bucket (no
/// key) writes the key for the learned tolerance (burst' × T'); the fresh
/// word writes nothing of its own (a fleet that learned nothing keeps its
/// keys exactly as before); a learned key that expires is forgotten — the
/// next reply says fresh, and the bucket is the ceiling again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learned_key_lives_its_learned_tolerance_then_is_forgotten() {
    let server = Server::start();
    let mut conn = manager(&server.url()).await;
    // 20/s burst 10: tau = 500 ms. Half: T' = 100 ms, burst 5, tau' 500 ms.
    let e = Engine::new(bucket(Quota::parse("20/s burst 10").unwrap())).unwrap();
    let key = fresh("ttl");
    let full = e.redis_key(None, key.as_bytes());
    let (d, w) = check(&mut conn, &e, &key, 1, T0).await;
    assert!(d.is_allowed());
    assert_eq!(w, Learned::fresh());
    let raw: String = conn.get(&full).await.unwrap();
    assert!(raw.bytes().all(|b| b.is_ascii_digit()), "fresh: {raw}");
    let _: () = conn.del(&full).await.unwrap();
    let half = Learned::new(FULL / 2, 3).with_cut(true);
    assert!(adapt(&mut conn, &e, &key, Learned::fresh(), half, T0).await);
    let raw: String = conn.get(&full).await.unwrap();
    let (hi, lo) = (half.to_bits() >> 44, half.to_bits() & ((1 << 44) - 1));
    assert_eq!(raw, format!("{T0}:{hi}:{lo}"));
    let ttl: i64 = conn.pttl(&full).await.unwrap();
    assert!((1..=500).contains(&ttl), "tau' = 500 ms: {ttl}");
    // A take of one at T0 (T' = 100 ms) keeps the key tau', not T'.
    let (d, w) = check(&mut conn, &e, &key, 1, T0).await;
    assert!(d.is_allowed() && w == half && d.remaining() == 4, "{d:?}");
    let ttl: i64 = conn.pttl(&full).await.unwrap();
    assert!(ttl > 100, "kept beyond T': {ttl}");
    // Past tau' (a lower bound: Redis expires the key by then).
    tokio::time::sleep(Duration::from_millis(600)).await;
    let exists: bool = conn.exists(&full).await.unwrap();
    assert!(!exists, "expired with its word");
    let (d, w) = check(&mut conn, &e, &key, 1, T0).await;
    assert_eq!(w, Learned::fresh(), "forgotten");
    assert_eq!(d.remaining(), 9, "the ceiling's burst again");
}

/// The batch script carries each key's word and decides each under it: an
/// adapt and checks of two keys in one script run, as separate calls in
/// that order would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_decides_each_key_under_its_word() {
    let server = Server::start();
    let mut conn = manager(&server.url()).await;
    let e = Engine::new(bucket(Quota::parse("10/s burst 20").unwrap())).unwrap();
    let (a, b) = (fresh("batch-a"), fresh("batch-b"));
    let half = Learned::new(FULL / 2, 4).with_cut(true);
    let begun = |key: &str| match e.begin(key.as_bytes(), 1).unwrap() {
        Begin::Call(c) => c.at(T0),
        Begin::Done(d) => panic!("{d:?}"),
    };
    let calls = [
        e.begin_adapt(None, a.as_bytes(), Learned::fresh(), half)
            .unwrap()
            .at(T0),
        begun(&a),
        begun(&b),
    ];
    let refs: Vec<&_> = calls.iter().collect();
    let batch = BatchCall::of(&refs).expect("an adapt joins checks");
    let reply: Vec<i64> = match batch.evalsha().query_async(&mut conn).await {
        Ok(r) => r,
        Err(_) => batch.eval().query_async(&mut conn).await.unwrap(),
    };
    let parts: Vec<&[i64]> = BatchCall::replies(&reply, 3).unwrap().collect();
    assert_eq!(
        e.finish_adapt(&calls[0], CallOutcome::Reply(parts[0])),
        Ok(true)
    );
    let da = e.finish(&calls[1], CallOutcome::Reply(parts[1]));
    let db = e.finish(&calls[2], CallOutcome::Reply(parts[2]));
    // a at half (burst 10, T' 200 ms), b at the ceiling (burst 20, T 100 ms).
    assert_eq!(
        (da.remaining(), da.reset_after()),
        (9, Duration::from_millis(200))
    );
    assert_eq!(
        (db.remaining(), db.reset_after()),
        (19, Duration::from_millis(100))
    );
    assert_eq!(e.learned(None, a.as_bytes()), half);
    assert_eq!(e.learned(None, b.as_bytes()), Learned::fresh());
}
