//! The hinted call (`Call::hint`), against a real Redis: a check, lease or
//! reservation on a key whose last reply told a learned word hands the
//! script the word's text and its scaled T'/tau', computed by the engine —
//! they must be the script's own scaling bit for bit, or decisions change.
//! Random ceilings, words and bucket states, each judged hinted and by
//! the full path at one explicit time on two keys holding one value; a
//! batch of hinted calls; and the scripts before the hint (those of
//! commit 6da8a406, kept in `tests/fixtures/before_hint/`) sharing keys
//! with these, as during a rolling deploy.

mod support;

use std::time::Duration;

use ratebound::Quota;
use ratebound::outbound::{FULL, Learned};
use ratebound_redis::{
    Algorithm, BatchCall, Begin, Call, CallOutcome, Config, Engine, HINTED, ReserveBegin, Reserved,
};
use redis::aio::ConnectionManager;
use support::{Server, fresh, manager};

/// An instant of Redis' clock far from the test's (µs), as in the vectors.
const T0: u64 = 1_200_000_000_000_000;

fn config(ceiling: Quota, lease: u64) -> Config {
    let mut c = Config::new(Algorithm::TokenBucket(ceiling));
    c.prefix = format!("{}:", fresh("hint"));
    c.timeout = Duration::from_secs(2);
    c.lease = lease;
    c
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
        self.next() % n.max(1)
    }
}

/// A key's stored value with a learned word beside the TAT (lua/gcra.lua).
fn value(tat: u64, w: Learned) -> String {
    let bits = w.to_bits();
    format!("{tat}:{}:{}", bits >> 44, bits & ((1 << 44) - 1))
}

/// What a key's call did, as one atomic transaction saw it: the reply,
/// then the key's value and its PTTL right after.
type Seen = (Vec<i64>, Option<String>, i64);

/// `key` set to `v`, then `call` run (by `sha`) and the key read back —
/// for each pair, in one MULTI/EXEC (no key expires inside it, so the
/// two keys' runs see the same state whatever their expiry).
async fn run_set(conn: &mut ConnectionManager, runs: &[(&Call, &str, Option<&str>)]) -> Vec<Seen> {
    let mut p = redis::pipe();
    p.atomic();
    for (call, sha, set) in runs {
        if let Some(v) = set {
            p.cmd("SET")
                .arg(&call.key)
                .arg(*v)
                .arg("EX")
                .arg(600)
                .ignore();
        }
        p.cmd("EVALSHA")
            .arg(*sha)
            .arg(1)
            .arg(&call.key)
            .arg(&call.args);
        p.cmd("GET").arg(&call.key);
        p.cmd("PTTL").arg(&call.key);
    }
    let got: Vec<redis::Value> = p.query_async(conn).await.unwrap();
    got.chunks(3)
        .map(|c| {
            (
                redis::from_redis_value(c[0].clone()).unwrap(),
                redis::from_redis_value(c[1].clone()).unwrap(),
                redis::from_redis_value(c[2].clone()).unwrap(),
            )
        })
        .collect()
}

async fn load(conn: &mut ConnectionManager, text: &str) -> String {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(text)
        .query_async(conn)
        .await
        .unwrap()
}

/// A call of `kind` (0 check, 1 lease, 2 reservation) of `n` on `key`.
fn begin(e: &Engine, key: &str, kind: u64, n: u64, max_wait_us: u64) -> Call {
    if kind == 2 {
        let max_wait = Duration::from_micros(max_wait_us);
        match e.begin_reserve(None, key.as_bytes(), n, max_wait).unwrap() {
            ReserveBegin::Call(c) => c,
            ReserveBegin::Done(d) => panic!("answered without Redis: {d:?}"),
        }
    } else {
        match e.begin(key.as_bytes(), n).unwrap() {
            Begin::Call(c) => c,
            Begin::Done(d) => panic!("answered without Redis: {d:?}"),
        }
    }
}

/// 400 random ceilings (1 µs to 36 years between tokens, bursts 1 to 10^6)
/// under random words (cuts from none to all of it), each bucket in four
/// states (full, part full, empty, beyond empty), by a check, a lease and
/// a reservation: the hinted call on one key and the full path on another
/// holding the same value, at one explicit time, reply alike (but for the
/// word's "as hinted"), write the same value with the same expiry, and
/// the two engines decide alike and know the same word after. The hinted
/// path is proved taken (its reply says so) on every case but the fresh
/// word's (which is never hinted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hinted_calls_decide_as_the_full_path() {
    let server = Server::start();
    let mut conn = manager(&server.url()).await;
    let sha = ratebound_redis::script::GCRA.sha().to_string();
    assert_eq!(
        load(&mut conn, ratebound_redis::script::GCRA.text).await,
        sha
    );
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (mut hinted, mut compared, mut long) = (0, 0, 0);
    for case in 0..400 {
        let class = rng.below(4);
        let period_ns = match class {
            0 => 1000 + rng.below(1_000_000),
            1 => 1_000_000 + rng.below(1_000_000_000),
            2 => 1_000_000_000 + rng.below(86_400_000_000_000),
            // Two days to 36 years: T · 65536 past 2^53, T' at its bound.
            _ => 172_800_000_000_000 + rng.below(1 << 60),
        };
        let burst = 1 + match if class == 3 { 0 } else { rng.below(3) } {
            // (A quota spans at most 2^60 ns: the longest take small bursts.)
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
        let units = match rng.below(5) {
            0 => FULL,
            1 => u32::try_from(rng.below(64)).unwrap(),
            2 => FULL - u32::try_from(rng.below(64)).unwrap(),
            _ => u32::try_from(rng.below(u64::from(FULL))).unwrap(),
        };
        let w = Learned::new(units, 1 + rng.below(1 << 40)).with_cut(rng.below(2) == 1);
        let t_us = ceiling.emission_interval_nanos().div_ceil(1000);
        let tau_us = t_us * burst;
        if t_us >= (1 << 53) / 65_536 {
            long += 12;
        }
        for state in 0..4 {
            let tat = match state {
                0 => T0 - rng.below(1000),
                1 => T0 + rng.below(tau_us),
                2 => T0 + tau_us,
                _ => T0 + tau_us + 1 + rng.below(4 * t_us),
            };
            let v = value(tat, w);
            for kind in 0..3 {
                let what =
                    format!("case {case} state {state} kind {kind}: {ceiling:?} under {w:?}, {v}");
                let c = config(ceiling, if kind == 1 { 3 } else { 0 });
                let h = Engine::new(c.clone()).unwrap();
                let (a, b) = (fresh("a"), fresh("b"));
                // The hinting engine hears the word from a query's reply.
                let q = begin(&h, &a, 0, 0, 0).at(T0);
                let seen = run_set(&mut conn, &[(&q, &sha, Some(&v))]).await;
                let _ = h.finish(&q, CallOutcome::Reply(&seen[0].0));
                assert_eq!(h.learned(None, a.as_bytes()), w, "{what}");
                let n = 1 + rng.below(burst);
                let max_wait = rng.below(2 * tau_us);
                let ch = begin(&h, &a, kind, n, max_wait).at(T0);
                // A new engine has heard nothing: the full path.
                let u = Engine::new(c).unwrap();
                let cu = begin(&u, &b, kind, n, max_wait).at(T0);
                assert_eq!(cu.hint(), None, "{what}");
                assert_eq!(cu.args.len(), 6, "{what}");
                let got = run_set(&mut conn, &[(&ch, &sha, Some(&v)), (&cu, &sha, Some(&v))]).await;
                let ((rh, vh, th), (ru, vu, tu)) = (&got[0], &got[1]);
                assert_eq!(rh[..7], ru[..7], "{what}");
                // A tau a double does not hold exactly is never hinted.
                if w.is_fresh() || tau_us >= 1 << 53 {
                    assert_eq!(ch.hint(), None, "{what}");
                } else {
                    assert_eq!(ch.hint(), Some(w), "{what}");
                    assert_eq!((rh[7], rh[8]), (HINTED, 0), "{what}: the hinted path");
                    hinted += 1;
                }
                assert_eq!(vh, vu, "{what}: the value written");
                assert!((th - tu).abs() <= 5, "{what}: PTTL {th} and {tu}");
                if kind == 2 {
                    let (dh, du) = (
                        h.finish_reserve(&ch, CallOutcome::Reply(rh)),
                        u.finish_reserve(&cu, CallOutcome::Reply(ru)),
                    );
                    assert_eq!(format!("{dh:?}"), format!("{du:?}"), "{what}");
                    assert!(!matches!(dh, Reserved::Retry { .. }), "{what}: {dh:?}");
                } else {
                    let (dh, du) = (
                        h.finish(&ch, CallOutcome::Reply(rh)),
                        u.finish(&cu, CallOutcome::Reply(ru)),
                    );
                    assert_eq!(
                        (
                            dh.is_allowed(),
                            dh.remaining(),
                            dh.retry_after(),
                            dh.reset_after()
                        ),
                        (
                            du.is_allowed(),
                            du.remaining(),
                            du.retry_after(),
                            du.reset_after()
                        ),
                        "{what}"
                    );
                }
                assert_eq!(h.learned(None, a.as_bytes()), w, "{what}");
                assert_eq!(u.learned(None, b.as_bytes()), w, "{what}");
                compared += 1;
            }
        }
    }
    println!(
        "{compared} calls compared, {hinted} of them hinted, {long} on ceilings of T · 65536 ≥ 2^53 µs"
    );
    assert!(long >= 200, "{long} calls on the longest ceilings");
    assert!(hinted >= 2400, "{hinted} hinted calls");
}

/// The batch script (lua/many.lua) reads each call's hint: twelve keys
/// under twelve words, one of them twice, one whose word changed since
/// its engine heard it (its hint is stale: the full path, on the
/// ceiling), as one batch of hinted checks — each replies and writes as
/// the full path does on a twin key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_hinted_calls_decides_as_the_full_path() {
    let server = Server::start();
    let mut conn = manager(&server.url()).await;
    let single = ratebound_redis::script::GCRA.sha().to_string();
    load(&mut conn, ratebound_redis::script::GCRA.text).await;
    let batch_sha = load(&mut conn, ratebound_redis::script::GCRA_BATCH.text).await;
    let c = config(Quota::parse("10/s burst 20").unwrap(), 0);
    let h = Engine::new(c.clone()).unwrap();
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let mut keys = Vec::new();
    for i in 0..12u64 {
        let (a, b) = (fresh("batch-a"), fresh("batch-b"));
        let w = Learned::new(
            u32::try_from(1 + rng.below(u64::from(FULL))).unwrap(),
            1_000 + i,
        )
        .with_cut(true);
        let v = value(T0 - 5_000_000 + rng.below(5_000_000), w);
        let q = begin(&h, &a, 0, 0, 0).at(T0);
        let seen = run_set(&mut conn, &[(&q, &single, Some(&v))]).await;
        let _ = h.finish(&q, CallOutcome::Reply(&seen[0].0));
        assert_eq!(h.learned(None, a.as_bytes()), w);
        keys.push((a, b, v, w));
    }
    // The last key's word changes after its engine heard it.
    let newer = Learned::new(FULL / 5, 9_999).with_cut(true);
    keys[11].2 = value(T0 - 1_000_000, newer);
    let mut order: Vec<usize> = (0..12).collect();
    order.insert(4, 2);
    let hinted: Vec<Call> = order
        .iter()
        .map(|&i| begin(&h, &keys[i].0, 0, 1 + rng.below(3), 0).at(T0))
        .collect();
    assert!(
        hinted
            .iter()
            .all(|c| c.hint().is_some() && c.args.len() == 8)
    );
    let refs: Vec<&Call> = hinted.iter().collect();
    let batch = BatchCall::of(&refs).expect("hinted calls join");
    let mut p = redis::pipe();
    p.atomic();
    for (a, b, v, _) in &keys {
        for k in [a, b] {
            let full = h.redis_key(None, k.as_bytes());
            p.cmd("SET").arg(full).arg(v).arg("EX").arg(600).ignore();
        }
    }
    p.cmd("EVALSHA")
        .arg(&batch_sha)
        .arg(batch.keys.len())
        .arg(&batch.keys)
        .arg(&batch.args);
    // The twins, one call each, in the same order, by the full path.
    for (j, &i) in order.iter().enumerate() {
        let u = Engine::new(c.clone()).unwrap();
        let cu = begin(&u, &keys[i].1, 0, hinted[j].n, 0).at(T0);
        assert_eq!(cu.hint(), None);
        p.cmd("EVALSHA")
            .arg(&single)
            .arg(1)
            .arg(&cu.key)
            .arg(&cu.args);
    }
    for (a, b, _, _) in &keys {
        p.cmd("GET").arg(h.redis_key(None, a.as_bytes()));
        p.cmd("GET").arg(h.redis_key(None, b.as_bytes()));
    }
    let got: Vec<redis::Value> = p.query_async(&mut conn).await.unwrap();
    let batch_reply: Vec<i64> = redis::from_redis_value(got[0].clone()).unwrap();
    let parts: Vec<&[i64]> = BatchCall::replies(&batch_reply, hinted.len())
        .expect("nine a call")
        .collect();
    for (j, &i) in order.iter().enumerate() {
        let twin: Vec<i64> = redis::from_redis_value(got[1 + j].clone()).unwrap();
        assert_eq!(parts[j][..7], twin[..7], "call {j} (key {i})");
        if i == 11 {
            assert_eq!(parts[j][7..], twin[7..], "a stale hint: the full path");
        } else {
            assert_eq!(parts[j][7..], [HINTED, 0], "call {j} (key {i})");
        }
        let d = h.finish(&hinted[j], CallOutcome::Reply(parts[j]));
        assert_eq!(d.is_allowed(), twin[0] == 1);
    }
    assert_eq!(h.learned(None, keys[11].0.as_bytes()), newer);
    assert_eq!(h.learned(None, keys[2].0.as_bytes()), keys[2].3);
    let values = &got[1 + order.len()..];
    for (i, pair) in values.chunks(2).enumerate() {
        let (va, vb): (Option<String>, Option<String>) = (
            redis::from_redis_value(pair[0].clone()).unwrap(),
            redis::from_redis_value(pair[1].clone()).unwrap(),
        );
        assert_eq!(va, vb, "key {i}");
        assert!(va.is_some(), "key {i} written");
    }
}

/// The script text before the hint (prelude, gcra, one of commit
/// 6da8a406, kept in `tests/fixtures/before_hint/`: a clone without that
/// history still runs this), as the engine of that commit built it:
/// what an instance not yet redeployed runs.
fn old_text() -> String {
    [
        include_str!("fixtures/before_hint/prelude.lua"),
        include_str!("fixtures/before_hint/gcra.lua"),
        include_str!("fixtures/before_hint/one.lua"),
    ]
    .concat()
}

/// A rolling deploy: one key driven by old and new instances in turn —
/// the old script (the arguments an old engine sends), the new one
/// hinted and not, adapts and pauses by either — and a twin key driven by
/// the old script alone through the same steps at the same times: every
/// reply and every value written is the same. The stored format is one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_and_new_scripts_share_keys() {
    let server = Server::start();
    let mut conn = manager(&server.url()).await;
    let new_sha = load(&mut conn, ratebound_redis::script::GCRA.text).await;
    let old_sha = load(&mut conn, &old_text()).await;
    assert_ne!(old_sha, new_sha);
    let c = config(Quota::parse("10/s burst 20").unwrap(), 0);
    let h = Engine::new(c.clone()).unwrap();
    let (m, r) = (fresh("mixed"), fresh("old"));
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    let (mut at, mut counts) = (T0, [0u32; 6]);
    let mut hits = 0;
    for step in 0..400 {
        at += rng.below(120_000);
        let op = if step < 2 { 4 } else { rng.below(6) as usize };
        counts[op] += 1;
        let u = Engine::new(c.clone()).unwrap();
        let o = Engine::new(c.clone()).unwrap();
        let n = 1 + rng.below(3);
        let seen = h.learned(None, m.as_bytes());
        let next = Learned::new(
            u32::try_from(rng.below(u64::from(FULL) + 1)).unwrap(),
            at / 1000 + step,
        )
        .with_cut(rng.below(3) > 0);
        let pause = Duration::from_micros(1 + rng.below(400_000));
        // (the mixed key's call and script; the twin's call, always old)
        let (cm, sm, cr) = match op {
            0 => (begin(&h, &m, 0, n, 0), &new_sha, begin(&o, &r, 0, n, 0)),
            1 => (begin(&u, &m, 0, n, 0), &old_sha, begin(&o, &r, 0, n, 0)),
            2 => (begin(&u, &m, 0, n, 0), &new_sha, begin(&o, &r, 0, n, 0)),
            3 => (
                begin(&h, &m, 2, n, 300_000),
                &new_sha,
                begin(&o, &r, 2, n, 300_000),
            ),
            4 => (
                h.begin_adapt(None, m.as_bytes(), seen, next).unwrap(),
                if step % 2 == 0 { &new_sha } else { &old_sha },
                o.begin_adapt(None, r.as_bytes(), seen, next).unwrap(),
            ),
            _ => (
                h.begin_pause(None, m.as_bytes(), pause).unwrap(),
                if step % 2 == 0 { &new_sha } else { &old_sha },
                o.begin_pause(None, r.as_bytes(), pause).unwrap(),
            ),
        };
        let (cm, cr) = (cm.at(at), cr.at(at));
        if sm == &old_sha {
            assert_eq!(cm.hint(), None);
        }
        let got = run_set(&mut conn, &[(&cm, sm, None), (&cr, &old_sha, None)]).await;
        let ((rm, vm, tm), (rr, vr, tr)) = (&got[0], &got[1]);
        let what = format!("step {step} op {op}: {:?} / {:?}", cm.args, cr.args);
        assert_eq!(rm[..7], rr[..7], "{what}");
        if rm[7] == HINTED {
            let hint = cm.hint().expect("only a hinted call hears HINTED");
            let bits = hint.to_bits();
            assert_eq!(
                [(bits >> 44) as i64, (bits & ((1 << 44) - 1)) as i64],
                rr[7..],
                "{what}"
            );
            hits += 1;
        } else {
            assert_eq!(rm[7..], rr[7..], "{what}");
        }
        assert_eq!(vm, vr, "{what}");
        assert!((tm - tr).abs() <= 5, "{what}: PTTL {tm} and {tr}");
        // The hinting engine hears every reply on its key.
        match op {
            4 => {
                let _ = h.finish_adapt(&cm, CallOutcome::Reply(rm));
            }
            5 => {
                let _ = h.finish_pause(CallOutcome::Reply(rm));
                let _ = h.finish(&begin(&u, &m, 0, 0, 0), CallOutcome::Reply(rm));
            }
            3 => {
                let _ = h.finish_reserve(&cm, CallOutcome::Reply(rm));
            }
            _ => {
                let _ = h.finish(&cm, CallOutcome::Reply(rm));
            }
        }
    }
    println!(
        "steps by op (hinted check, old check, new unhinted check, hinted reservation, adapt, pause): {counts:?}; {hits} hinted hits"
    );
    assert!(counts.iter().all(|c| *c >= 40), "{counts:?}");
    assert!(hits >= 30, "{hits} hinted hits");
}
