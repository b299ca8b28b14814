//! The run-time surface the bindings wrap: number checks, acquisition steps,
//! keys and waits (the HTTP gate's tests are `gate.rs`).

use std::sync::Arc;
use std::time::Duration;

use ratebound::any::{
    Acquire, AnyClock, AnyKeyed, AnyLimiter, Key, MANUAL_POLL_NANOS, Rate, keyed_algorithm,
    seconds, whole,
};
use ratebound::wait::{Step, drive_blocking_with};
use ratebound::{Error, Limiter, ManualClock, Overflow, Quota};

const SECOND: u64 = 1_000_000_000;

fn manual() -> (ManualClock, AnyClock) {
    let c = ManualClock::new();
    (c.clone(), AnyClock::Manual(c))
}

#[test]
fn numbers_are_checked_and_named() {
    for bad in [f64::NAN, f64::INFINITY, -1.0, 1e30] {
        let e = seconds("window", bad).unwrap_err();
        assert_eq!(e.code(), "invalid_number", "{bad}");
        assert!(e.to_string().starts_with("invalid window "), "{e}");
    }
    assert_eq!(seconds("window", 1.5).unwrap(), Duration::from_millis(1500));
    for bad in [0.0, -1.0, 1.5, f64::NAN, f64::INFINITY, 2f64.powi(60)] {
        let e = whole("limit", bad, 1).unwrap_err();
        assert_eq!(e.code(), "invalid_number", "{bad}");
        assert!(e.to_string().contains("limit"), "{e}");
    }
    assert_eq!(whole("limit", 7.0, 1).unwrap(), 7);
    assert_eq!(
        whole("limit", 1e300, 1).unwrap_err().to_string(),
        "invalid limit 1e300: must be at most 2^53"
    );
    assert_eq!(
        whole("burst", -1.0, 1).unwrap_err().to_string(),
        "invalid burst -1: must be at least 1"
    );
    let (_, c) = manual();
    for (rate, burst, code) in [
        (Rate::PerSecond(0.0), None, "invalid_rate"),
        (Rate::PerSecond(f64::NAN), None, "invalid_rate"),
        (Rate::PerSecond(-1.0), None, "invalid_rate"),
        (Rate::Text("abc"), None, "parse_error"),
        (Rate::PerSecond(1.0), Some(0.0), "invalid_number"),
        (Rate::PerSecond(1.0), Some(-1.0), "invalid_number"),
        (Rate::PerSecond(1.0), Some(2.5), "invalid_number"),
    ] {
        let e = AnyLimiter::token_bucket(rate, burst, c.clone())
            .err()
            .unwrap();
        assert_eq!(e.code(), code, "{rate:?} {burst:?}");
    }
}

#[test]
fn bucket_reserves_and_windows_retry() {
    let (clock, c) = manual();
    let tb = AnyLimiter::token_bucket(Rate::PerSecond(2.0), Some(1.0), c.clone()).unwrap();
    assert_eq!(tb.acquire_step(1, None, 0).unwrap(), Acquire::Admitted);
    let Acquire::Reserved { wait_nanos, permit } = tb.acquire_step(1, None, 0).unwrap() else {
        panic!("a bucket reserves");
    };
    assert_eq!(wait_nanos, SECOND / 2);
    // A deadline the next wait (1 s) cannot meet fails at once, taking nothing.
    let e = tb.acquire_step(1, Some(SECOND / 2), 0).unwrap_err();
    assert_eq!(e.code(), "deadline_exceeded");
    // Giving the reservation back makes its slot available again.
    tb.release(permit);
    clock.advance(Duration::from_millis(500));
    assert!(tb.try_acquire());
    assert!(!tb.try_acquire());

    let fw = AnyLimiter::fixed_window(1.0, 1.0, c).unwrap();
    assert_eq!(fw.acquire_step(1, None, 0).unwrap(), Acquire::Admitted);
    assert_eq!(
        fw.acquire_step(1, None, SECOND / 4).unwrap(),
        Acquire::Retry {
            wait_nanos: 3 * SECOND / 4
        }
    );
    let e = fw
        .acquire_step(1, Some(SECOND / 2), SECOND / 4)
        .unwrap_err();
    assert_eq!(e.code(), "deadline_exceeded");
    assert_eq!(
        fw.reserve_n_at(1, None, 0).unwrap_err().code(),
        "unsupported"
    );
    assert_eq!(
        fw.acquire_step(2, None, 0).unwrap_err().code(),
        "insufficient_capacity"
    );
}

#[test]
fn all_of_members_are_shared() {
    let (_, c) = manual();
    let a = Arc::new(AnyLimiter::token_bucket(Rate::Text("1/s burst 2"), None, c.clone()).unwrap());
    let b = Arc::new(AnyLimiter::sliding_log(1.0, 1.0, c).unwrap());
    let both = AnyLimiter::all_of(vec![a.clone(), b.clone()]).unwrap();
    assert!(both.try_acquire());
    assert!(!both.try_acquire());
    // The refusal by the log gave the bucket's token back.
    assert_eq!(a.available_at(0), 1);
    assert_eq!(AnyLimiter::all_of(vec![]).err().unwrap(), Error::NoLimiters);
}

#[test]
fn key_kinds_are_distinct() {
    let (_, c) = manual();
    let k = AnyKeyed::new(
        keyed_algorithm("token_bucket", Some(Rate::PerSecond(1.0)), None, None, None).unwrap(),
        Some(100),
        Overflow::RejectNewKeys,
        c,
    )
    .unwrap();
    assert!(k.try_acquire(Key::Text("1")).unwrap());
    assert!(k.try_acquire(Key::Bytes(b"1")).unwrap());
    assert!(k.try_acquire(Key::Int(1)).unwrap());
    assert!(!k.try_acquire(Key::Text("1")).unwrap());
    assert_eq!(k.len(), 3);
    let big = vec![0xffu8; 64 * 1024];
    assert!(k.try_acquire(Key::Bytes(&big)).unwrap());
    // A missing value is its own typed kind (issue 13): bindings pick their
    // TypeError by `kind()`, and the message names no language's "nothing".
    let missing = keyed_algorithm("fixed_window", None, None, Some(10.0), None).unwrap_err();
    assert_eq!(missing.code(), "missing");
    assert_eq!(missing.kind(), ratebound::ErrorKind::Type);
    assert_eq!(missing.to_string(), "missing window: a value is required");
    assert_eq!(
        keyed_algorithm("nope", None, None, None, None)
            .unwrap_err()
            .code(),
        "parse_error"
    );
}

/// The one dispatch by name (issue 25): every algorithm, the default, the
/// missing options named, an unknown name a parse error.
#[test]
fn limiters_by_name() {
    use ratebound::any::LimiterOptions;
    let (_, c) = manual();
    let made = |name: Option<&str>, o: LimiterOptions<'_>| {
        AnyLimiter::from_options(name, o, c.clone()).map(|l| (l.algorithm(), l.limit()))
    };
    let rate = Some(Rate::PerSecond(2.0));
    let o = || LimiterOptions {
        rate,
        burst: Some(3.0),
        limit: Some(5.0),
        window: Some(1.0),
        max_delay: Some(1.0),
        ..Default::default()
    };
    assert_eq!(made(None, o()).unwrap(), ("token_bucket", 3));
    for name in [
        "token_bucket",
        "fixed_window",
        "sliding_window",
        "sliding_log",
        "leaky_bucket",
    ] {
        assert_eq!(made(Some(name), o()).unwrap().0, name);
    }
    let member = Arc::new(AnyLimiter::from_options(None, o(), c.clone()).unwrap());
    let all = LimiterOptions {
        members: vec![member],
        ..Default::default()
    };
    assert_eq!(made(Some("all_of"), all).unwrap().0, "all_of");
    assert_eq!(
        made(Some("all_of"), LimiterOptions::default()).unwrap_err(),
        Error::NoLimiters
    );
    for (name, needs) in [
        ("token_bucket", "rate"),
        ("leaky_bucket", "rate"),
        ("fixed_window", "limit"),
        ("sliding_log", "limit"),
    ] {
        assert_eq!(
            made(Some(name), LimiterOptions::default()).unwrap_err(),
            Error::Missing { name: needs }
        );
    }
    let no_delay = LimiterOptions {
        rate,
        ..Default::default()
    };
    assert_eq!(
        made(Some("leaky_bucket"), no_delay).unwrap_err(),
        Error::Missing { name: "max_delay" }
    );
    let no_window = LimiterOptions {
        limit: Some(1.0),
        ..Default::default()
    };
    assert_eq!(
        made(Some("sliding_window"), no_window).unwrap_err(),
        Error::Missing { name: "window" }
    );
    assert_eq!(made(Some("gcra"), o()).unwrap_err().code(), "parse_error");
}

/// Counts and integer keys as a double gives them: one rule, 2^53.
#[test]
fn counts_and_number_keys() {
    use ratebound::any::{DEFAULT_N, count};
    assert_eq!(count(None).unwrap(), DEFAULT_N);
    assert_eq!(count(Some(9_007_199_254_740_992.0)).unwrap(), 1 << 53);
    assert!(count(Some(-1.0)).is_err());
    assert_eq!(
        Key::from_f64(9_007_199_254_740_992.0).unwrap(),
        Key::Int(1 << 53)
    );
    assert_eq!(
        Key::from_f64(-9_007_199_254_740_992.0).unwrap(),
        Key::Int(-(1 << 53))
    );
    assert_eq!(Key::from_f64(-0.0).unwrap(), Key::Int(0));
    for bad in [f64::NAN, f64::INFINITY, 0.5, 18_014_398_509_481_984.0] {
        let e = Key::from_f64(bad).unwrap_err();
        assert_eq!(e.code(), "invalid_number", "{bad}");
        assert!(e.to_string().starts_with("invalid key "), "{e}");
    }
}

const DAY: u64 = 86_400 * SECOND;
/// Node's timer limit, 2^31 − 1 ms, in nanoseconds.
const NODE_TIMER: u64 = ((1 << 31) - 1) * 1_000_000;

/// Drives `waiter` with the core's loop the way a binding does, except that
/// each sleep moves the manual clock instead of waiting: the clock time at
/// which it says done.
fn drive_on(clock: &ManualClock, mut step: impl FnMut() -> Result<Step, Error>) -> u64 {
    let mut sleeps = 0;
    drive_blocking_with(
        &mut (),
        |_| step(),
        |_, never| match never {},
        |d| {
            assert!(
                d >= Duration::from_nanos(1) && d <= Duration::from_nanos(NODE_TIMER),
                "sleep {d:?}"
            );
            sleeps += 1;
            assert!(sleeps <= 100_000, "no end after 100000 sleeps");
            clock.advance(d);
            Ok(())
        },
    )
    .expect("step");
    ratebound::Clock::now(clock)
}

#[test]
fn a_thirty_day_wait_is_never_done_early() {
    // One token per 30 days: the second waits 30 days, in sleeps a Node
    // timer can hold, and is done exactly when the clock says so.
    let (clock, any_clock) = manual();
    let tb = AnyLimiter::token_bucket(Rate::Text("1/s"), None, AnyClock::default()).unwrap();
    assert_eq!(tb.max_sleep(), u64::MAX);
    let tb = AnyLimiter::TokenBucket(ratebound::TokenBucket::with_clock(
        Quota::with_period(Duration::from_nanos(30 * DAY)).unwrap(),
        any_clock,
    ));
    assert!(tb.try_acquire());
    let mut waiter = tb.waiter(1, None, NODE_TIMER).unwrap();
    // On a manual clock the waiter looks again every millisecond.
    assert_eq!(
        tb.wait_step(&mut waiter).unwrap(),
        Step::Sleep(Duration::from_nanos(MANUAL_POLL_NANOS))
    );
    clock.advance_nanos(30 * DAY - 2 * MANUAL_POLL_NANOS);
    assert_eq!(
        tb.wait_step(&mut waiter).unwrap(),
        Step::Sleep(Duration::from_nanos(MANUAL_POLL_NANOS))
    );
    let done_at = drive_on(&clock, || tb.wait_step(&mut waiter));
    assert_eq!(done_at, 30 * DAY, "done exactly when due");
    assert!(waiter.is_over());
    // The reservation was used: abandoning now gives nothing back.
    tb.abandon(&mut waiter).unwrap();
    assert!(!tb.try_acquire());
}

#[test]
fn a_waiter_on_the_real_clock_sleeps_in_host_timer_pieces() {
    let (clock, any_clock) = manual();
    let tb = AnyLimiter::token_bucket(Rate::Text("1/s"), None, AnyClock::default()).unwrap();
    assert!(tb.try_acquire());
    let mut waiter = tb.waiter(1, None, NODE_TIMER).unwrap();
    match tb.wait_step(&mut waiter).unwrap() {
        Step::Sleep(d) => assert!(
            d > Duration::from_millis(900) && d <= Duration::from_nanos(SECOND),
            "{d:?}"
        ),
        Step::Done(()) => panic!("done before its token"),
    }
    tb.abandon(&mut waiter).unwrap();
    assert!(waiter.is_over());
    // A 40-day wait on a clock that is not manual is cut at the host's limit.
    drop(any_clock);
    let shared: Arc<dyn ratebound::Clock> = Arc::new(clock.clone());
    let slow_any = AnyLimiter::TokenBucket(ratebound::TokenBucket::with_clock(
        Quota::with_period(Duration::from_nanos(40 * DAY)).unwrap(),
        AnyClock::Shared(shared),
    ));
    assert!(slow_any.try_acquire());
    let mut waiter = slow_any.waiter(1, None, NODE_TIMER).unwrap();
    assert_eq!(
        slow_any.wait_step(&mut waiter).unwrap(),
        Step::Sleep(Duration::from_nanos(NODE_TIMER))
    );
    assert_eq!(
        drive_on(&clock, || slow_any.wait_step(&mut waiter)),
        40 * DAY
    );
}

#[test]
fn an_abandoned_wait_gives_its_tokens_back_once() {
    let (clock, any_clock) = manual();
    let tb = AnyLimiter::token_bucket(Rate::Text("1/s"), None, any_clock).unwrap();
    assert!(tb.try_acquire());
    let mut waiter = tb.waiter(1, None, u64::MAX).unwrap();
    assert!(matches!(tb.wait_step(&mut waiter).unwrap(), Step::Sleep(_)));
    assert_eq!(
        tb.peek_n_at(1, tb.now()).unwrap().retry_after(),
        Duration::from_secs(2)
    );
    tb.abandon(&mut waiter).unwrap();
    assert_eq!(
        tb.peek_n_at(1, tb.now()).unwrap().retry_after(),
        Duration::from_secs(1)
    );
    // Twice, or stepping after abandoning, changes nothing.
    tb.abandon(&mut waiter).unwrap();
    assert_eq!(tb.wait_step(&mut waiter).unwrap(), Step::Done(()));
    assert_eq!(
        tb.peek_n_at(1, tb.now()).unwrap().retry_after(),
        Duration::from_secs(1)
    );
    clock.advance(Duration::from_secs(1));
    assert!(tb.try_acquire());
    // Another limiter's waiter is refused, not applied.
    let other = AnyLimiter::token_bucket(Rate::Text("1/s"), None, AnyClock::default()).unwrap();
    assert!(other.try_acquire());
    let mut theirs = other.waiter(1, None, u64::MAX).unwrap();
    assert!(matches!(
        other.wait_step(&mut theirs).unwrap(),
        Step::Sleep(_)
    ));
    assert!(matches!(tb.abandon(&mut theirs), Err(Error::ForeignPermit)));
}

#[test]
fn a_timeout_that_cannot_be_met_fails_at_once_and_windows_retry() {
    let (clock, any_clock) = manual();
    let tb = AnyLimiter::token_bucket(Rate::Text("1/s"), None, any_clock.clone()).unwrap();
    assert!(tb.try_acquire());
    let mut waiter = tb.waiter(1, Some(0.5), u64::MAX).unwrap();
    assert!(matches!(
        tb.wait_step(&mut waiter),
        Err(Error::DeadlineExceeded { .. })
    ));
    assert_eq!(tb.available(), 0);
    assert!(matches!(
        tb.waiter(1, Some(-1.0), u64::MAX),
        Err(Error::InvalidNumber {
            name: "timeout",
            ..
        })
    ));
    // A window retries until it admits; its deadline counts from the start.
    let fw = AnyLimiter::fixed_window(1.0, 10.0, any_clock.clone()).unwrap();
    assert!(fw.try_acquire());
    let mut waiter = fw.waiter(1, Some(10.0), u64::MAX).unwrap();
    assert_eq!(drive_on(&clock, || fw.wait_step(&mut waiter)), 10 * SECOND);
    // Keyed: the same, per key.
    let k = AnyKeyed::new(
        keyed_algorithm("fixed_window", None, None, Some(1.0), Some(5.0)).unwrap(),
        None,
        ratebound::Overflow::EvictLeastRecent,
        any_clock,
    )
    .unwrap();
    assert!(k.check_n(Key::Text("a"), 1).unwrap().is_allowed());
    let mut waiter = k.waiter(1, Some(1.0), u64::MAX).unwrap();
    assert!(matches!(
        k.wait_step(&mut waiter, Key::Text("a")),
        Err(Error::DeadlineExceeded { .. })
    ));
    let mut waiter = k.waiter(1, None, u64::MAX).unwrap();
    let start = ratebound::Clock::now(&clock);
    let end = drive_on(&clock, || k.wait_step(&mut waiter, Key::Text("a")));
    assert_eq!(end - start, 5 * SECOND);
}
