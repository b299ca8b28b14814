//! The keyed table's code on words in memory instead of a mapped file
//! (`Region::heap`): the same slot claim, eviction, refusal and give-back,
//! and the same pointer-to-slice code as a mapping. It exists for Miri,
//! which cannot map files (`cargo +nightly miri test -p ratebound-shm
//! --lib heap_tests`, in ci/miri), and runs as an ordinary test too.

use ratebound::any::Key;
use ratebound::{KeyedAlgorithm, Quota};

use crate::{Error, SharedKeyedLimiter};

const S: u64 = 1_000_000_000;

fn keyed(quota: &str, slots: usize) -> SharedKeyedLimiter {
    let algorithm = KeyedAlgorithm::TokenBucket(Quota::parse(quota).unwrap());
    SharedKeyedLimiter::on_heap(algorithm, slots, "(heap)", (3, 5))
}

#[test]
fn keys_claim_slots_and_are_limited_apart() {
    let l = keyed("1/s burst 2", 8);
    let now = 100 * S;
    for key in 0..4 {
        let seen: Vec<bool> = (0..3)
            .map(|_| l.check_n_at(Key::Int(key), 1, now).unwrap().is_allowed())
            .collect();
        assert_eq!(seen, [true, true, false], "key {key}");
    }
    // A second later each key has one token again.
    for key in 0..4 {
        assert!(
            l.check_n_at(Key::Int(key), 1, now + S)
                .unwrap()
                .is_allowed()
        );
    }
}

#[test]
fn a_full_table_refuses_new_keys_and_reuses_fresh_slots() {
    let l = keyed("1/s burst 1", 2);
    let now = 100 * S;
    let mut admitted = 0;
    let mut full = 0;
    for key in 0..6 {
        match l.check_n_at(Key::Int(key), 1, now) {
            Ok(d) => admitted += usize::from(d.is_allowed()),
            Err(Error::Limit(ratebound::Error::TooManyKeys { .. })) => full += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        admitted >= 2 && full >= 1,
        "admitted {admitted}, full {full}"
    );
    // Once their state is fresh again (a second later), slots are reused:
    // every new key, ten seconds after the last, finds one.
    for (i, key) in (10..16).enumerate() {
        let at = now + 10 * S * (i as u64 + 1);
        assert!(
            l.check_n_at(Key::Int(key), 1, at).unwrap().is_allowed(),
            "key {key}"
        );
    }
}
