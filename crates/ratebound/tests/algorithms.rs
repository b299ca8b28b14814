//! Property tests for the window algorithms, the leaky bucket and `AllOf`:
//! random traces against naive reference models (a map of window counts, a
//! vector of timestamps) that find `retry_after` by search rather than by
//! formula, plus each algorithm's documented bound on every interval.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use ratebound::{
    AllOf, Decision, FixedWindow, LeakyBucket, Limiter, ManualClock, Quota, SlidingLog,
    SlidingWindow, TokenBucket,
};

#[derive(Debug, PartialEq, Eq)]
struct Answer {
    allowed: bool,
    remaining: u64,
    retry_after: u64,
}

fn answer(d: Decision) -> Answer {
    Answer {
        allowed: d.is_allowed(),
        remaining: d.remaining(),
        retry_after: d.retry_after_nanos(),
    }
}

/// The smallest `t` in `[lo, hi]` with `ok(t)`, for `ok` monotone in `t`.
fn first_true(lo: u64, hi: u64, ok: impl Fn(u64) -> bool) -> u64 {
    assert!(ok(hi), "search range too short");
    let (mut lo, mut hi) = (lo, hi);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) { hi = mid } else { lo = mid + 1 }
    }
    lo
}

/// Fixed window reference: a map from window index to count.
struct FixedRef {
    limit: u64,
    window: u64,
    counts: HashMap<u64, u64>,
}

impl FixedRef {
    fn check(&mut self, now: u64, n: u64) -> Answer {
        let index = now / self.window;
        let count = self.counts.entry(index).or_default();
        let allowed = *count + n <= self.limit;
        if allowed {
            *count += n;
        }
        Answer {
            allowed,
            remaining: self.limit - *count,
            retry_after: if allowed {
                0
            } else {
                (index + 1) * self.window - now
            },
        }
    }
}

/// Sliding window counter reference: a map of window counts; the estimate
/// computed from its definition; `retry_after` found by binary search.
struct SlidingRef {
    limit: u64,
    window: u64,
    counts: HashMap<u64, u64>,
}

impl SlidingRef {
    /// `limit·W − estimate·W` at `t` if `extra` more were counted now.
    fn room(&self, t: u64, extra: u64) -> i128 {
        let index = t / self.window;
        let w = i128::from(self.window);
        let elapsed = i128::from(t - index * self.window);
        let prev = index
            .checked_sub(1)
            .map_or(0, |i| *self.counts.get(&i).unwrap_or(&0));
        let cur = *self.counts.get(&index).unwrap_or(&0) + extra;
        i128::from(self.limit) * w - (i128::from(prev) * (w - elapsed) + i128::from(cur) * w)
    }

    fn check(&mut self, now: u64, n: u64) -> Answer {
        let allowed = self.room(now, n) >= 0;
        if allowed {
            *self.counts.entry(now / self.window).or_default() += n;
        }
        let retry_after = if allowed {
            0
        } else {
            first_true(now, now + 2 * self.window, |t| self.room(t, n) >= 0) - now
        };
        Answer {
            allowed,
            remaining: (self.room(now, 0).max(0) / i128::from(self.window)) as u64,
            retry_after,
        }
    }
}

/// Sliding log reference: every admitted timestamp in a vector.
struct LogRef {
    limit: u64,
    window: u64,
    stamps: Vec<u64>,
}

impl LogRef {
    fn in_window(&self, t: u64) -> u64 {
        self.stamps
            .iter()
            .filter(|&&s| s + self.window > t && s <= t)
            .count() as u64
    }

    fn check(&mut self, now: u64, n: u64) -> Answer {
        let allowed = self.in_window(now) + n <= self.limit;
        if allowed {
            self.stamps.extend(std::iter::repeat_n(now, n as usize));
        }
        let retry_after = if allowed {
            0
        } else {
            first_true(now, now + self.window, |t| {
                self.in_window(t) + n <= self.limit
            }) - now
        };
        Answer {
            allowed,
            remaining: self.limit - self.in_window(now),
            retry_after,
        }
    }
}

/// Leaky bucket reference: the list of departure times handed out.
struct LeakyRef {
    period: u64,
    departures: Vec<u64>,
}

impl LeakyRef {
    fn check(&mut self, now: u64, n: u64) -> (bool, u64) {
        let free_at = self.departures.last().map_or(0, |&d| d + self.period);
        if free_at > now {
            return (false, free_at - now);
        }
        self.departures
            .extend((0..n).map(|k| now + k * self.period));
        (true, 0)
    }
}

fn window_params() -> impl Strategy<Value = (u64, u64)> {
    (1u64..=40, prop_oneof![1u64..100, 1_000u64..10_000_000_000])
}

fn trace() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec(
        (
            prop_oneof![Just(0u64), 0u64..1_000, 0u64..20_000_000_000],
            0u64..=100,
        ),
        1..80,
    )
}

/// Runs a trace through `limiter` and a reference step function in lock
/// step; returns the admitted (time, n) pairs.
fn lockstep(
    limiter: &dyn Limiter,
    limit: u64,
    steps: &[(u64, u64)],
    mut reference: impl FnMut(u64, u64) -> Answer,
) -> Result<Vec<(u64, u64)>, TestCaseError> {
    let mut now = 0;
    let mut admitted = Vec::new();
    for (i, &(advance, pct)) in steps.iter().enumerate() {
        now += advance;
        let n = pct * limit / 100;
        let got = answer(limiter.check_n_at(n, now).unwrap());
        if got.allowed && n > 0 {
            admitted.push((now, n));
        }
        prop_assert_eq!(
            got,
            reference(now, n),
            "step {} at {} ns, n = {}",
            i,
            now,
            n
        );
    }
    Ok(admitted)
}

/// Tokens admitted in `[t, t + span]` for every admission time `t`.
fn max_in_span(admitted: &[(u64, u64)], span: u64) -> u64 {
    (0..admitted.len())
        .map(|i| {
            admitted[i..]
                .iter()
                .take_while(|(t, _)| *t <= admitted[i].0 + span)
                .map(|(_, n)| n)
                .sum()
        })
        .max()
        .unwrap_or(0)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    #[test]
    fn fixed_window_matches_its_reference_and_bound((limit, window) in window_params(), steps in trace()) {
        let limiter = FixedWindow::with_clock(limit, Duration::from_nanos(window), ManualClock::new());
        let Ok(limiter) = limiter else { return Ok(()) }; // window too short for the limit's bits
        let mut reference = FixedRef { limit, window, counts: HashMap::new() };
        let admitted = lockstep(&limiter, limit, &steps, |t, n| reference.check(t, n))?;
        // The boundary burst: never more than 2 × limit in any span of one window.
        prop_assert!(max_in_span(&admitted, window - 1) <= 2 * limit);
    }

    #[test]
    fn sliding_window_matches_its_reference((limit, window) in window_params(), steps in trace()) {
        let limiter = SlidingWindow::with_clock(limit, Duration::from_nanos(window), ManualClock::new());
        let Ok(limiter) = limiter else { return Ok(()) };
        let mut reference = SlidingRef { limit, window, counts: HashMap::new() };
        let admitted = lockstep(&limiter, limit, &steps, |t, n| reference.check(t, n))?;
        prop_assert!(max_in_span(&admitted, window - 1) <= 2 * limit);
    }

    #[test]
    fn sliding_log_matches_its_reference_and_is_exact((limit, window) in window_params(), steps in trace()) {
        let limiter = SlidingLog::with_clock(limit, Duration::from_nanos(window), ManualClock::new()).unwrap();
        let mut reference = LogRef { limit, window, stamps: Vec::new() };
        let admitted = lockstep(&limiter, limit, &steps, |t, n| reference.check(t, n))?;
        // Exact: any window (t − W, t] holds at most `limit`.
        prop_assert!(max_in_span(&admitted, window - 1) <= limit);
    }

    #[test]
    fn leaky_bucket_matches_its_reference_and_spacing(
        period in prop_oneof![1u64..100, 1_000u64..1_000_000_000],
        slots in 1u64..5,
        steps in trace(),
    ) {
        let quota = Quota::with_period(Duration::from_nanos(period)).unwrap();
        let max_delay = Duration::from_nanos(period * (slots - 1));
        let limiter = LeakyBucket::with_clock(quota, max_delay, ManualClock::new()).unwrap();
        prop_assert_eq!(limiter.limit(), slots);
        let mut reference = LeakyRef { period, departures: Vec::new() };
        let mut now = 0;
        for (advance, pct) in steps {
            now += advance;
            let n = (pct * slots / 100).max(1);
            let got = limiter.check_n_at(n, now).unwrap();
            prop_assert_eq!((got.is_allowed(), got.retry_after_nanos()), reference.check(now, n));
        }
        // Output spacing: consecutive departures at least T apart.
        for pair in reference.departures.windows(2) {
            prop_assert!(pair[1] - pair[0] >= period);
        }
    }

    #[test]
    fn retry_after_is_exact_for_every_algorithm(
        which in 0usize..5, (limit, window) in window_params(), steps in trace()
    ) {
        let clock = ManualClock::new();
        let w = Duration::from_nanos(window);
        let limiter: Box<dyn Limiter> = match which {
            0 => Box::new(TokenBucket::with_clock(Quota::with_period(w).unwrap().with_burst(limit).unwrap(), clock)),
            1 => match FixedWindow::with_clock(limit, w, clock) { Ok(l) => Box::new(l), Err(_) => return Ok(()) },
            2 => match SlidingWindow::with_clock(limit, w, clock) { Ok(l) => Box::new(l), Err(_) => return Ok(()) },
            3 => Box::new(SlidingLog::with_clock(limit, w, clock).unwrap()),
            _ => Box::new(LeakyBucket::with_clock(Quota::with_period(w).unwrap(), w * 3, clock).unwrap()),
        };
        let mut now = 0;
        for (advance, pct) in steps {
            now += advance;
            let n = (pct * limiter.limit() / 100).max(1);
            let d = limiter.check_n_at(n, now).unwrap();
            if !d.is_allowed() {
                let wait = d.retry_after_nanos();
                prop_assert!(wait > 0);
                prop_assert!(!limiter.peek_n_at(n, now + wait - 1).unwrap().is_allowed(), "1 ns early");
                prop_assert!(!limiter.check_n_at(n, now + wait - 1).unwrap().is_allowed(), "1 ns early");
                now += wait;
                prop_assert!(limiter.peek_n_at(n, now).unwrap().is_allowed());
                prop_assert!(limiter.check_n_at(n, now).unwrap().is_allowed(), "after retry_after");
            }
        }
    }

    #[test]
    fn all_of_admits_only_what_every_member_admits_and_takes_nothing_on_refusal(
        (limit, window) in window_params(), burst in 1u64..20, steps in trace()
    ) {
        let clock = ManualClock::new();
        let w = Duration::from_nanos(window);
        let Ok(fixed) = FixedWindow::with_clock(limit, w, clock.clone()) else { return Ok(()) };
        let fixed = Arc::new(fixed);
        let bucket = Arc::new(TokenBucket::with_clock(
            Quota::with_period(w).unwrap().with_burst(burst).unwrap(), clock.clone()));
        let both = AllOf::new(vec![bucket.clone(), fixed.clone()]).unwrap();
        // Twins fed only what the composite admitted.
        let fixed_twin = FixedWindow::with_clock(limit, w, clock.clone()).unwrap();
        let bucket_twin = TokenBucket::with_clock(
            Quota::with_period(w).unwrap().with_burst(burst).unwrap(), clock.clone());
        let mut now = 0;
        for (advance, pct) in steps {
            now += advance;
            let n = (pct * burst.min(limit) / 100).max(1);
            let d = both.check_n_at(n, now).unwrap();
            let (a, b) = (bucket_twin.peek_n_at(n, now).unwrap(), fixed_twin.peek_n_at(n, now).unwrap());
            prop_assert_eq!(d.is_allowed(), a.is_allowed() && b.is_allowed());
            if d.is_allowed() {
                bucket_twin.check_n_at(n, now).unwrap();
                fixed_twin.check_n_at(n, now).unwrap();
            } else {
                prop_assert_eq!(d.retry_after_nanos(), a.retry_after_nanos().max(b.retry_after_nanos()));
            }
            prop_assert_eq!(bucket.available_at(now), bucket_twin.available_at(now));
            prop_assert_eq!(fixed.available_at(now), fixed_twin.available_at(now));
        }
    }
}

/// Each result is an error of its `code` whose message names its `needle`.
fn assert_errors<T: std::fmt::Debug>(
    cases: impl IntoIterator<Item = (Result<T, ratebound::Error>, &'static str, &'static str)>,
) {
    for (result, code, needle) in cases {
        let err = result.unwrap_err();
        assert_eq!(err.code(), code, "{err}");
        assert!(
            err.to_string().contains(needle),
            "{err:?} should name {needle}"
        );
    }
}

#[test]
fn quota_bad_input_is_a_typed_error_naming_the_value() {
    let cases: [(Result<Quota, ratebound::Error>, &str, &str); 11] = [
        (Quota::per_second(0), "invalid_rate", "0"),
        (Quota::per_second(-2.5), "invalid_rate", "-2.5"),
        (Quota::per_second(f64::NAN), "invalid_rate", "NaN"),
        (Quota::per_second(f64::INFINITY), "invalid_rate", "inf"),
        (Quota::per_second(2e9), "rate_too_high", "2000000000"),
        (Quota::per_second(1e40), "rate_too_high", "1000"),
        (
            Quota::per_second(1).and_then(|q| q.with_burst(0)),
            "invalid_burst",
            "0",
        ),
        (Quota::parse("ten/s"), "parse_error", "ten/s"),
        (
            Quota::parse("10/fortnight"),
            "parse_error",
            "unknown time unit",
        ),
        (Quota::parse("-1/s"), "invalid_rate", "-1"),
        (
            Quota::with_period(Duration::from_secs(40 * 365 * 86_400)),
            "period_too_long",
            "ns",
        ),
    ];
    assert_errors(cases);
    assert_eq!(Quota::parse("10/0s").unwrap_err().code(), "parse_error");
    assert_eq!(Quota::parse("").unwrap_err().code(), "parse_error");
    assert_eq!(
        Quota::parse("10/s burst x").unwrap_err().code(),
        "parse_error"
    );
    assert_eq!(
        Quota::per_second(1)
            .and_then(|q| q.with_burst(u64::MAX))
            .unwrap_err()
            .code(),
        "period_too_long"
    );
}

#[test]
fn window_limits_and_windows_are_validated_with_clear_errors() {
    let clock = ManualClock::new;
    let second = Duration::from_secs(1);
    let cases: Vec<(Result<(), ratebound::Error>, &str, &str)> = vec![
        (
            FixedWindow::with_clock(0, second, clock()).map(drop),
            "invalid_limit",
            "0",
        ),
        (
            FixedWindow::with_clock(1 << 40, second, clock()).map(drop),
            "invalid_limit",
            "1099511627776",
        ),
        (
            FixedWindow::with_clock(10, Duration::ZERO, clock()).map(drop),
            "invalid_window",
            "0 ns",
        ),
        (
            SlidingWindow::with_clock(1_000_000, Duration::from_secs(60), clock()).map(drop),
            "invalid_window",
            "60000000000",
        ),
        (
            SlidingLog::with_clock(2_000_000, second, clock()).map(drop),
            "invalid_limit",
            "2000000",
        ),
        (AllOf::new(vec![]).map(drop), "no_limiters", "member"),
        (
            LeakyBucket::with_clock(
                Quota::per_second(1).unwrap(),
                Duration::from_secs(u64::MAX),
                clock(),
            )
            .map(drop),
            "period_too_long",
            "ns",
        ),
    ];
    assert_errors(cases);
    // The documented trade-off: a limit of 100 accepts windows down to 16 ns.
    assert!(FixedWindow::with_clock(100, Duration::from_nanos(16), clock()).is_ok());
    assert!(SlidingWindow::with_clock(1_000, Duration::from_secs(60), clock()).is_ok());
}

/// A token bucket of `quota` on `clock`, to share in an `AllOf`.
fn bucket_on(quota: &str, clock: &ManualClock) -> Arc<TokenBucket<ManualClock>> {
    Arc::new(TokenBucket::with_clock(
        Quota::parse(quota).unwrap(),
        clock.clone(),
    ))
}

/// A fixed window of `limit` per `seconds` on `clock`, to share in an `AllOf`.
fn window_on(limit: u64, seconds: u64, clock: &ManualClock) -> Arc<FixedWindow<ManualClock>> {
    Arc::new(FixedWindow::with_clock(limit, Duration::from_secs(seconds), clock.clone()).unwrap())
}

/// A refused composite answers for the state it leaves: the members that
/// had admitted are shown after their give-back, the members not yet asked
/// as they are (issue 13: it used to show a member's remaining from before
/// its give-back).
#[test]
fn a_refused_all_of_reports_the_state_after_the_give_back() {
    let clock = ManualClock::new();
    let bucket = bucket_on("10/s burst 20", &clock);
    let hour = window_on(25, 3600, &clock);
    let day = window_on(1000, 86_400, &clock);
    let all = AllOf::new(vec![bucket.clone(), hour.clone(), day.clone()]).unwrap();
    assert!(all.check_n(20).unwrap().is_allowed());
    clock.advance(Duration::from_secs(1));
    let refused = all.check_n(10).unwrap();
    assert!(!refused.is_allowed());
    assert_eq!(bucket.available(), 10);
    // Fewest left after the refusal: the hour's 5 (the bucket has 10 again,
    // the day 980), not the bucket's 0 had it kept the 10.
    assert_eq!(refused.remaining(), 5);
    assert_eq!(refused.limit(), 25);
    // The wait is the hour's: until its window ends.
    assert_eq!(refused.retry_after(), Duration::from_secs(3599));
}

/// Issue 13: a permit is single use (not `Copy`: the compiler refuses a
/// second release) and belongs to its issuer. Given to another bucket, or
/// for another key, it is refused and grants nothing — it used to lower
/// that bucket's TAT, up to a whole extra burst.
#[test]
fn a_permit_belongs_to_the_limiter_and_key_that_issued_it() {
    use ratebound::{
        Error, KeyedAlgorithm, KeyedLimiter, Limiter, ManualClock, Quota, TokenBucket,
    };

    let clock = ManualClock::new();
    let q = Quota::parse("1/hour burst 5").unwrap();
    let a = TokenBucket::with_clock(q, clock.clone());
    let b = TokenBucket::with_clock(q, clock.clone());
    let (_, permit) = a.acquire_n_at(5, 0).unwrap();
    assert!(b.check_n(5).unwrap().is_allowed());
    assert_eq!(b.available(), 0);
    assert_eq!(b.try_release(permit.unwrap()), Err(Error::ForeignPermit));
    assert_eq!(b.available(), 0, "a foreign permit grants nothing");
    assert_eq!(a.available(), 0);
    // The issuer takes its own permit back.
    let c = TokenBucket::with_clock(q, clock.clone());
    let (_, permit) = c.acquire_n_at(3, 0).unwrap();
    assert_eq!(c.available(), 2);
    c.try_release(permit.unwrap()).unwrap();
    assert_eq!(c.available(), 5);

    let keyed = KeyedLimiter::new(KeyedAlgorithm::TokenBucket(q))
        .unwrap()
        .with_clock(clock.clone());
    let (_, permit) = keyed.acquire_n_at(&"alice", 5, 0).unwrap();
    assert!(keyed.check_n_at(&"bob", 5, 0).unwrap().is_allowed());
    let err = keyed.release(&"bob", permit.unwrap()).unwrap_err();
    assert_eq!(err.code(), "foreign_permit");
    assert_eq!(
        keyed.available(&"bob"),
        0,
        "another key's permit grants nothing"
    );
    let (_, permit) = keyed.acquire_n_at(&"carol", 2, 0).unwrap();
    assert_eq!(keyed.available(&"carol"), 3);
    keyed.release(&"carol", permit.unwrap()).unwrap();
    assert_eq!(
        keyed.available(&"carol"),
        5,
        "its own key's permit gives back"
    );
}

/// Issue 13: an `AllOf` nested in another rolls back like any member: a
/// refusal by its sibling gives the inner composite's members their tokens
/// back (it used to leave them taken).
#[test]
fn a_nested_all_of_rolls_back() {
    let clock = ManualClock::new();
    let a = bucket_on("1/hour burst 5", &clock);
    let b = bucket_on("1/hour burst 5", &clock);
    let inner = Arc::new(AllOf::new(vec![a.clone(), b.clone()]).unwrap());
    let tight = window_on(5, 3600, &clock);
    assert!(tight.check_n(5).unwrap().is_allowed()); // the sibling is full
    let outer = AllOf::new(vec![inner.clone(), tight]).unwrap();
    assert!(!outer.check_n(3).unwrap().is_allowed());
    assert_eq!(
        (a.available(), b.available()),
        (5, 5),
        "the inner composite gave back"
    );
    // Its own permit gives back too, and only to it.
    let (_, permit) = inner.acquire_n_at(2, 0).unwrap();
    assert_eq!((a.available(), b.available()), (3, 3));
    inner.try_release(permit.unwrap()).unwrap();
    assert_eq!((a.available(), b.available()), (5, 5));
    // A member cannot take the composite's permit.
    let (_, permit) = inner.acquire_n_at(1, 0).unwrap();
    assert!(a.try_release(permit.unwrap()).is_err());
    assert_eq!((a.available(), b.available()), (4, 4));
}
