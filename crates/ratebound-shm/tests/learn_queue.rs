//! A lower learned rate drops the queue in the shared file as the
//! in-process bucket does (`TokenBucket::adapt`): slots taken beyond an
//! empty bucket at the new rate are dropped (the adapters' waiters holding
//! them wait again), a raise keeps the schedule, a pause on stays — at
//! explicit instants.

mod common;

use std::time::Duration;

use common::{bucket, dir};
use ratebound::outbound::{FULL, Learned};
use ratebound_shm::SharedLimiter;

const T0: u64 = 1_000_000_000_000;

#[test]
fn a_drop_empties_the_queue_a_raise_keeps_it_a_pause_stays() {
    let path = dir("learn-queue", "one").join("limit");
    let one = SharedLimiter::open(&path, bucket("10/s burst 2")).unwrap();
    let reserve = |at: u64| -> Duration {
        let r = one.reserve_n_at(1, Duration::from_secs(60), at).unwrap();
        let d = r.delay();
        r.consume();
        d
    };
    // Two at once, then eight in line: the last 800 ms out.
    for i in 0..10u64 {
        let want = Duration::from_millis(i.saturating_sub(1) * 100);
        assert_eq!(reserve(T0), want, "slot {i}");
    }
    let half = Learned::new(FULL / 2, 1).with_cut(true);
    assert!(one.adapt_at(Learned::fresh(), half, T0).unwrap());
    // 5/s burst 1 from an empty bucket now: 200 ms, not behind the 800 ms
    // of dropped slots (1 s without the drop).
    assert_eq!(reserve(T0), Duration::from_millis(200));
    // A raise keeps the schedule: the next slot follows that one.
    let up = Learned::new(FULL, 2);
    assert!(one.adapt_at(half, up, T0).unwrap());
    assert_eq!(reserve(T0), Duration::from_millis(300));
    // A pause on stays through a drop.
    one.pause_at(Duration::from_secs(5), T0).unwrap();
    let cut = Learned::new(FULL / 2, 3).with_cut(true);
    assert!(one.adapt_at(up, cut, T0).unwrap());
    assert!(reserve(T0) >= Duration::from_secs(5));
}
