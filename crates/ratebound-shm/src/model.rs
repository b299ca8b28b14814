//! Model checks with loom of the keyed table's slot claim and reuse
//! (`SharedKeyedLimiter::locate`, `still_home` and the give-back in
//! `check_n_at`): the real code, on a table of two slots whose words are
//! loom's atomics on the heap (`Region::heap`), so every interleaving of
//! two "processes" (threads) on the same words is explored.
//!
//! Run: `RUSTFLAGS="--cfg ratebound_loom" cargo test -p ratebound-shm --release --lib`
//! (ci/test, with `LOOM_MAX_PREEMPTIONS=3`).
//!
//! Two slots make the probe window the whole table (`WINDOW.min(slots)`),
//! so a full table and a reused slot take one or two threads' few steps.
//! Every limit is one token an hour on a frozen clock: a state is fresh
//! only until a key is admitted on it.

use loom::sync::Arc;
use loom::thread;
use ratebound::any::Key;
use ratebound::{KeyedAlgorithm, Quota};

use crate::sync::Ordering;
use crate::{Error, SharedKeyedLimiter};

/// The frozen time of every model (ns).
const NOW: u64 = 10_000_000_000;

/// What one check returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    Admitted,
    Refused,
    NoSlot,
}

/// A keyed limiter on a table of two slots in memory, one token an hour
/// per key; `held` are (slot, key, spent) that the table starts with.
fn table(held: &[(usize, i128, bool)]) -> SharedKeyedLimiter {
    let algorithm = KeyedAlgorithm::TokenBucket(Quota::parse("1/h burst 1").unwrap());
    let slots = 2;
    let l = SharedKeyedLimiter::on_heap(algorithm, slots, "(loom)", (7, 11));
    for &(slot, key, spent) in held {
        let fp = l.fingerprint_of(Key::Int(key));
        // Ordering: Relaxed — before any thread is spawned.
        l.table.fingerprint(slot).store(fp, Ordering::Relaxed);
        if spent {
            // Ordering: as above; the decision writes the state.
            let (d, _) = l
                .table
                .rule
                .check_n_at(l.table.state(slot), 1, NOW)
                .unwrap();
            assert!(d.is_allowed());
        }
    }
    l
}

fn check(l: &SharedKeyedLimiter, key: i128) -> Seen {
    match l.check_n_at(Key::Int(key), 1, NOW) {
        Ok(d) if d.is_allowed() => Seen::Admitted,
        Ok(_) => Seen::Refused,
        Err(Error::Limit(ratebound::Error::TooManyKeys { .. })) => Seen::NoSlot,
        Err(e) => panic!("{e}"),
    }
}

/// Where `key` lives once every thread is done (the first slot of its
/// window that holds it) and what it has left at `NOW`.
fn at_rest(l: &SharedKeyedLimiter, key: i128) -> Option<(usize, u64)> {
    let fp = l.fingerprint_of(Key::Int(key));
    let t = &l.table;
    (0..l.window()).find_map(|place| {
        let slot = l.slot_at(fp, place);
        // Ordering: Relaxed — every thread has been joined.
        (t.fingerprint(slot).load(Ordering::Relaxed) == fp).then(|| {
            let state = t.state(slot).load(Ordering::Relaxed);
            (slot, t.rule.available(state, NOW))
        })
    })
}

/// Runs `a` and `b` as two threads on one table and returns what each saw.
fn race(l: &Arc<SharedKeyedLimiter>, a: i128, b: i128) -> [(i128, Seen); 2] {
    let other = {
        let l = l.clone();
        thread::spawn(move || check(&l, b))
    };
    let mine = check(l, a);
    [(a, mine), (b, other.join().unwrap())]
}

/// What must hold however the two raced, once both are done: every
/// admitted key is in a slot of its own with its token taken — an
/// admission is never forgotten, so no later check could get a second
/// token; a key in the race that was not admitted holds no token (what
/// was decided on a slot meanwhile reused was given back); the keys in
/// `untouched` (key, slot, spent) are as they were. Returns the admitted
/// keys.
///
/// What need not hold: that a key is admitted in the race (`then_alone`
/// checks that a check after it is). A new key that decides on
/// a slot while another key's admission there is being given back is
/// refused, and a reuse cancelled by the slot's old key finds no slot
/// (both conservative; a later check decides normally).
fn safe(
    l: &SharedKeyedLimiter,
    seen: [(i128, Seen); 2],
    untouched: &[(i128, usize, bool)],
) -> Vec<i128> {
    let mut admitted: Vec<i128> = seen
        .iter()
        .filter(|(_, s)| *s == Seen::Admitted)
        .map(|(k, _)| *k)
        .collect();
    admitted.dedup();
    let mut homes = Vec::new();
    for &key in &admitted {
        let (slot, left) =
            at_rest(l, key).unwrap_or_else(|| panic!("admitted key {key} has no slot: {seen:?}"));
        assert_eq!(left, 0, "admitted key {key} has its token back: {seen:?}");
        homes.push(slot);
    }
    homes.sort();
    homes.dedup();
    assert_eq!(
        homes.len(),
        admitted.len(),
        "two keys in one slot: {seen:?}"
    );
    for (key, _) in seen {
        if !admitted.contains(&key)
            && let Some((slot, left)) = at_rest(l, key)
        {
            assert_eq!(
                left, 1,
                "key {key} in slot {slot} holds a token it never took: {seen:?}"
            );
        }
    }
    for &(key, slot, spent) in untouched {
        let want = Some((slot, u64::from(!spent)));
        assert_eq!(at_rest(l, key), want, "key {key}: {seen:?}");
    }
    admitted
}

/// Progress once the race is over: a check alone decides normally (the
/// conservative answers of `safe` last only while the race does). An
/// admitted key is refused (its token is spent) and the other key finds
/// both slots spent; with no key admitted, `lone` alone is admitted (the
/// contested slot is fresh or empty). An implementation that never finds
/// a slot, or never admits, fails here.
fn then_alone(l: &SharedKeyedLimiter, seen: [(i128, Seen); 2], admitted: &[i128], lone: i128) {
    match admitted {
        [] => assert_eq!(check(l, lone), Seen::Admitted, "{lone} alone: {seen:?}"),
        [key] => {
            assert_eq!(check(l, *key), Seen::Refused, "{key} again: {seen:?}");
            for (other, _) in seen.iter().filter(|(k, _)| k != key) {
                assert_eq!(check(l, *other), Seen::NoSlot, "{other} after: {seen:?}");
            }
        }
        _ => panic!("two admitted for one slot: {seen:?}"),
    }
}

#[test]
fn two_processes_claim_a_new_key_once() {
    // An empty table; both take from the same new key: one slot is claimed
    // for it, and exactly one of them is admitted.
    loom::model(|| {
        let l = Arc::new(table(&[]));
        let seen = race(&l, 1, 1);
        let admitted = seen.iter().filter(|(_, s)| *s == Seen::Admitted).count();
        assert_eq!(admitted, 1, "{seen:?}");
        safe(&l, seen, &[]);
        assert_eq!(l.len(), 1, "{seen:?}");
    });
}

#[test]
fn the_last_empty_slot_goes_to_one_key() {
    // One slot is held by a spent key (never reusable here), the other is
    // empty; two new keys race for it, claiming it and reusing it from each
    // other while it is fresh. At most one is admitted, in that slot.
    loom::model(|| {
        let l = Arc::new(table(&[(0, 100, true)]));
        let seen = race(&l, 1, 2);
        let admitted = safe(&l, seen, &[(100, 0, true)]);
        assert!(admitted.len() <= 1, "{seen:?}");
        then_alone(&l, seen, &admitted, 1);
    });
}

#[test]
fn an_old_key_and_a_new_key_race_for_its_fresh_slot() {
    // Slot 0 holds key 100 with a fresh (full) state, slot 1 a spent key.
    // Key 100 and a new key take at once: only slot 0 can serve. Whoever is
    // admitted keeps its token in slot 0 — in particular key 100's
    // admission survives the new key's reuse of its slot (a process that
    // decided on a slot as it was reused gives its admission back).
    loom::model(|| {
        let l = Arc::new(table(&[(0, 100, false), (1, 200, true)]));
        let seen = race(&l, 100, 1);
        let admitted = safe(&l, seen, &[(200, 1, true)]);
        assert!(admitted.len() <= 1, "{seen:?}");
        then_alone(&l, seen, &admitted, 100);
    });
}

#[test]
fn two_new_keys_reuse_two_fresh_slots() {
    // Both slots hold old keys whose states are fresh; two new keys take at
    // once, each reusing a slot, possibly the same one first.
    loom::model(|| {
        let l = Arc::new(table(&[(0, 100, false), (1, 200, false)]));
        let seen = race(&l, 1, 2);
        let admitted = safe(&l, seen, &[]);
        assert!(
            !admitted.is_empty(),
            "two fresh slots and neither key admitted: {seen:?}"
        );
    });
}
