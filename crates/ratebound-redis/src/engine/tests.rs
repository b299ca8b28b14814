//! The engine's unit tests (and helpers other modules' tests share).

use super::*;
use ratebound::ManualClock;

/// 10/s burst 20, a breaker that opens after 2 failures for 100 ms.
pub(crate) fn engine(on_error: OnError, lease: u64) -> (Engine, ManualClock) {
    let clock = ManualClock::new();
    let mut c = Config::new(Algorithm::TokenBucket(
        Quota::parse("10/s burst 20").unwrap(),
    ));
    c.on_error = on_error;
    c.lease = lease;
    c.breaker_threshold = 2;
    c.breaker_cooldown = Duration::from_millis(100);
    (
        Engine::with_clock(c, AnyClock::Manual(clock.clone())).unwrap(),
        clock,
    )
}

pub(crate) fn call(e: &Engine, key: &str, n: u64) -> Call {
    match e.begin(key.as_bytes(), n).unwrap() {
        Begin::Call(c) => c,
        Begin::Done(d) => panic!("expected a call, got {d:?}"),
    }
}

#[test]
fn calls_carry_the_script_key_and_arguments() {
    let (e, _) = engine(OnError::Open, 0);
    let c = call(&e, "alice", 3);
    assert_eq!(c.script.name, "gcra");
    assert_eq!(c.key, b"rb:tb:alice");
    // now (Redis TIME), T = 100 000 µs, tau = 20 T, n, mode, max.
    assert_eq!(c.args, ["", "100000", "2000000", "3", "check", "3"]);
    assert_eq!(c.clone().at(42).args[0], "42");
    let d = e.finish(&c, CallOutcome::Reply(&[1, 17, 0, 300_000, 3, 0, 7, 0, 0]));
    assert_eq!(d.source(), Source::Redis);
    assert_eq!(d.remaining(), 17);
    assert_eq!(d.reset_after(), Duration::from_millis(300));
    let d = e.finish(
        &c,
        CallOutcome::Reply(&[0, 0, 250, 2_000_000, 0, 0, 7, 0, 0]),
    );
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after(), Duration::from_micros(250));
    // The script found the key damaged and rebuilt it: a refusal of
    // Redis', which the breaker counts as a success.
    let d = e.finish(
        &c,
        CallOutcome::Reply(&[0, 0, 100_000, 2_000_000, 0, 1, 7, 0, 0]),
    );
    assert_eq!((d.is_allowed(), d.source()), (false, Source::Damaged));
}

#[test]
fn open_and_local_policies() {
    let (e, _) = engine(OnError::Open, 0);
    let d = e.finish(&call(&e, "k", 1), CallOutcome::Timeout);
    assert!(d.is_allowed());
    assert_eq!(d.source(), Source::FailOpen);
    // Local at 5/s (half of 10/s): burst 20 × 0.5 = 10 per key.
    let (e, _) = engine(OnError::Local(5.0), 0);
    let c = call(&e, "k", 1);
    let allowed = (0..12)
        .filter(|_| e.finish(&c, CallOutcome::Timeout).is_allowed())
        .count();
    assert_eq!(allowed, 10);
    assert_eq!(e.finish(&c, CallOutcome::Timeout).source(), Source::Local);
}

#[test]
fn key_spaces_are_named_by_algorithm_and_scope() {
    let (tb, _) = engine(OnError::Open, 0);
    let fw = Engine::new(Config::new(Algorithm::FixedWindow {
        limit: 5,
        window: Duration::from_secs(1),
    }))
    .unwrap();
    let sw = Engine::new(Config::new(Algorithm::SlidingWindow {
        limit: 5,
        window: Duration::from_secs(1),
    }))
    .unwrap();
    assert_eq!(tb.redis_key(None, b"alice"), b"rb:tb:alice");
    assert_eq!(fw.redis_key(None, b"alice"), b"rb:fw:alice");
    assert_eq!(sw.redis_key(None, b"alice"), b"rb:sw:alice");
    assert_eq!(tb.redis_key(Some("burst"), b"alice"), b"rb:tb@burst:alice");
    // Injective: a scope with ':' or '%' cannot mimic another pair.
    let keys = [
        tb.redis_key(Some("a:b"), b"c"),
        tb.redis_key(Some("a"), b"b:c"),
        tb.redis_key(Some("a%3Ab"), b"c"),
        tb.redis_key(None, b"a:b:c"),
        tb.redis_key(Some(""), b"a:b:c"),
    ];
    for (i, a) in keys.iter().enumerate() {
        for b in &keys[i + 1..] {
            assert_ne!(a, b, "{:?}", String::from_utf8_lossy(a));
        }
    }
    assert_eq!(keys[0], b"rb:tb@a%3Ab:c");
    // Calls carry the scoped key.
    match tb.begin_in(Some("hourly"), b"k", 1).unwrap() {
        Begin::Call(c) => assert_eq!(c.key, b"rb:tb@hourly:k"),
        Begin::Done(d) => panic!("{d:?}"),
    }
}

#[test]
fn n_zero_is_a_query_that_never_leases() {
    let (e, _) = engine(OnError::Open, 5);
    let c = call(&e, "k", 0);
    assert_eq!(
        (c.kind, &c.args[3..5]),
        (CallKind::Check, &["0".to_string(), "check".to_string()][..])
    );
    // A lease with tokens does not answer a query either.
    e.finish(
        &call(&e, "k", 1),
        CallOutcome::Reply(&[1, 15, 0, 500_000, 5, 0, 7, 0, 0]),
    );
    assert_eq!(e.leased(), 4);
    assert!(matches!(e.begin(b"k", 0).unwrap(), Begin::Call(_)));
    assert_eq!(e.leased(), 4);
}

#[test]
fn bad_settings_are_typed_errors() {
    assert_eq!(
        e_code(Config::new(Algorithm::TokenBucket(
            Quota::per_second(2e6).unwrap()
        ))),
        "rate_too_high"
    );
    let w = |window| Algorithm::FixedWindow { limit: 10, window };
    assert_eq!(
        e_code(Config::new(w(Duration::from_nanos(1500)))),
        "invalid_window"
    );
    assert_eq!(e_code(Config::new(w(Duration::ZERO))), "invalid_window");
    let mut c = Config::new(Algorithm::SlidingWindow {
        limit: 10,
        window: Duration::from_secs(1),
    });
    c.lease = 10;
    assert_eq!(e_code(c), "unsupported");
    let mut c = Config::new(w(Duration::from_secs(1)));
    c.timeout = Duration::ZERO;
    assert_eq!(e_code(c), "invalid_option");
    assert_eq!(
        OnError::parse("sometimes", None).unwrap_err().code(),
        "invalid_option"
    );
    let (e, _) = engine(OnError::Open, 0);
    assert_eq!(
        e.begin(b"k", 21).unwrap_err().code(),
        "insufficient_capacity"
    );
}

fn e_code(c: Config) -> &'static str {
    Engine::new(c).unwrap_err().code()
}

/// Once a key's reply told a learned word, its checks, leases and
/// reservations hint it (the word's T'/tau', its text, the ceiling); its
/// pauses, resumes, give-backs and adapts do not, nor another key's
/// calls. "As hinted" is the hinted word — and a malformed reply to an
/// unhinted call.
#[test]
fn calls_on_a_learned_key_hint_its_word() {
    use ratebound::outbound::{FULL, Learned};
    let (e, _) = engine(OnError::Closed, 0);
    let half = Learned::new(FULL / 2, 1_800_000_000_000).with_cut(true);
    let (hi, lo) = crate::learn::parts(half);
    let c = call(&e, "p", 1);
    assert_eq!((c.hint(), c.args.len()), (None, 6));
    let d = e.finish(
        &c,
        CallOutcome::Reply(&[1, 19, 0, 100_000, 1, 0, 7, hi as i64, lo as i64]),
    );
    assert!(d.is_allowed());
    let c = call(&e, "p", 1);
    assert_eq!(c.hint(), Some(half));
    // Half of 10/s burst 20: T' = 200 000 µs, burst 10.
    assert_eq!(
        c.args,
        [
            "",
            "200000",
            "2000000",
            "1",
            "check",
            "1",
            &format!(":{hi}:{lo}"),
            "100000:2000000"
        ]
    );
    let Ok(crate::ReserveBegin::Call(r)) = e.begin_reserve(None, b"p", 1, Duration::MAX) else {
        panic!("a reservation's call")
    };
    assert_eq!((r.hint(), &r.args[4]), (Some(half), &"reserve".to_string()));
    assert_eq!(e.give_back(&r, 7).hint(), None);
    for other in [
        e.begin_pause(None, b"p", Duration::from_secs(1)).unwrap(),
        e.begin_resume(None, b"p").unwrap(),
        e.begin_adapt(None, b"p", half, Learned::fresh()).unwrap(),
    ] {
        assert_eq!(
            (other.hint(), other.args.len()),
            (None, 6),
            "{:?}",
            other.kind
        );
    }
    assert_eq!(call(&e, "q", 1).hint(), None);
    // "As hinted": the word stays the hinted one.
    let hinted = [0, 0, 50_000, 2_000_000, 0, 0, 7, crate::HINTED, 0];
    let d = e.finish(&c, CallOutcome::Reply(&hinted));
    assert_eq!((d.is_allowed(), d.source()), (false, Source::Redis));
    assert_eq!(e.learned(None, b"p"), half);
    // The same reply to an unhinted call is not one of the scripts'.
    let q = call(&e, "q", 1);
    assert_eq!(
        e.finish(&q, CallOutcome::Reply(&hinted)).source(),
        Source::FailClosed
    );
    assert!(!q.replied(&hinted) && c.replied(&hinted));
    assert!(!c.replied(&[0, 0, 50_000, 2_000_000, 0, 0, 7, crate::HINTED, 1]));
}
