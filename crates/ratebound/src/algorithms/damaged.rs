//! The window maths on a damaged word (a shared file can hold any 64 bits):
//! a count above the limit leaves none and never wraps, and an index beyond
//! any clock saturates.

use std::time::Duration;

use super::fixed_window::Fixed;
use super::sliding_window::Sliding;
use crate::Decision;
use crate::sync::word::WordMath;

const S: u64 = 1_000_000_000;

/// `math` on `word` at `now` has none available and admits nothing: the
/// refusal it answers.
fn refusal<M: WordMath>(math: M, word: u64, now: u64) -> Decision {
    let at = math.at(now);
    assert_eq!(math.available(word, at), 0, "at {now}");
    assert_eq!(math.admit(word, at, 1), None, "at {now}");
    let refused = math.decision(word, at, 1, false);
    assert_eq!(refused.remaining(), 0, "at {now}");
    refused
}

#[test]
fn a_count_above_the_limit_leaves_none_and_never_wraps() {
    // A limit of 5 takes 3 bits per count, so a word can say 7: a damaged
    // shared file can hold one. It used to report 5 − 7 = 2^64 − 2 available.
    let f = Fixed::new(5, Duration::from_secs(1), 64).unwrap();
    let word = f.pack(3, 7);
    assert_eq!(refusal(f, word, 3 * S + 10).retry_after_nanos(), S - 10);
    // The next window starts from zero as usual.
    assert_eq!(f.available(word, f.at(4 * S)), 5);

    // A sliding window's two counts, both 7.
    let s = Sliding::new(5, Duration::from_secs(1), 64).unwrap();
    let word = s.pack(3, 7, 7);
    for now in [3 * S + 10, 4 * S + 10] {
        assert!(refusal(s, word, now).retry_after_nanos() > 0, "at {now}");
    }
    // Two windows on, both counts have slid out.
    assert_eq!(s.available(word, s.at(5 * S)), 5);
}

#[test]
fn an_index_beyond_any_clock_saturates() {
    // Limit 1, 1 s windows: 63 bits of index (62 for a sliding window), far
    // more than 2^61 ns of clock; the end of the largest one overflows u64.
    let word = u64::MAX;
    let f = Fixed::new(1, Duration::from_secs(1), 64).unwrap();
    let now = 5 * S;
    assert_eq!(refusal(f, word, now).retry_after_nanos(), u64::MAX - now);
    assert_eq!(f.idle(word, now), 0);

    let s = Sliding::new(1, Duration::from_secs(1), 64).unwrap();
    let now = S / 2;
    let refused = refusal(s, word, now);
    // (u64::MAX − now) + two windows' wait: saturated.
    assert_eq!(refused.retry_after_nanos(), u64::MAX);
    assert_eq!(refused.reset_after_nanos(), u64::MAX - now);
    assert_eq!(s.idle(word, now), 0);
}
