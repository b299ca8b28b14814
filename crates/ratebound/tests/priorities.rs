//! Priorities and the gate's use of a concurrency limit (fixed or
//! adaptive), its short queue and its options: exact, on a manual clock.

use std::time::Duration;

use ratebound::any::AnyClock;
use ratebound::gate::{Admit, Gate, GateOptions, Hooks, Loose, Outcome, Request};
use ratebound::http::{ConcurrencyCap, Priority};
use ratebound::{Error, ManualClock};

#[test]
fn background_requests_get_places_only_below_the_share() {
    let cap = ConcurrencyCap::new(4).unwrap();
    let bg = || Priority::Background;
    assert_eq!(cap.try_enter_as(bg), Ok(0));
    assert_eq!(cap.try_enter_as(bg), Ok(1));
    assert_eq!(cap.try_enter_as(bg), Err(Priority::Background));
    assert_eq!(cap.try_enter_as(|| Priority::Normal), Ok(2));
    assert_eq!(cap.try_enter_as(|| Priority::Critical), Ok(3));
    assert_eq!(
        cap.try_enter_as(|| Priority::Critical),
        Err(Priority::Critical)
    );
    // Below the share nobody is asked.
    let cap = ConcurrencyCap::new(4)
        .unwrap()
        .with_background_fraction(0.25)
        .unwrap();
    assert_eq!(
        cap.try_enter_as(|| unreachable!("asked below the share")),
        Ok(0)
    );
    assert_eq!(cap.try_enter_as(bg), Err(Priority::Background));
    let bad = ConcurrencyCap::new(4)
        .unwrap()
        .with_background_fraction(f64::NAN);
    assert!(matches!(
        bad,
        Err(Error::InvalidNumber {
            name: "background_fraction",
            ..
        })
    ));
}

struct Prioritised {
    /// `None`: the hook fails.
    priority: Option<Priority>,
    asked: u32,
    shed: Option<Option<Priority>>,
}

impl Hooks for Prioritised {
    fn priority(&mut self) -> Option<Priority> {
        self.asked += 1;
        self.priority
    }
    fn report(&mut self, verdict: &ratebound::gate::Verdict<'_>) {
        if verdict.outcome == Outcome::Shed {
            self.shed = Some(verdict.priority);
        }
    }
}

#[test]
fn the_gate_sheds_background_first_and_never_critical() {
    let mut options = GateOptions::default();
    options
        .set("concurrency_limit", Loose::Number(2.0))
        .unwrap();
    let gate = Gate::new(vec![], options, AnyClock::Manual(ManualClock::new())).unwrap();
    let lines: [(&str, &str); 0] = [];
    let request = Request {
        key: None,
        peer: Some([127, 0, 0, 1].into()),
        headers: &lines[..],
    };
    let sequence = |priority| {
        let mut hooks = Prioritised {
            priority,
            asked: 0,
            shed: None,
        };
        (gate.admit(&request, &mut hooks), hooks)
    };
    let admit = |priority| match sequence(Some(priority)) {
        (Admit::Decided(a), hooks) => (a, hooks),
        (other, _) => panic!("{other:?}"),
    };
    let (first, hooks) = admit(Priority::Background);
    assert!(first.place.is_some() && hooks.asked == 0);
    let (second, hooks) = admit(Priority::Background);
    assert_eq!(second.verdict.status, 503);
    assert_eq!(hooks.shed, Some(Some(Priority::Background)));
    assert_eq!(hooks.asked, 1);
    // A failing priority hook is the fail-safe answer: shed (503 with
    // Retry-After, reported), no place — never a stopped sequence (a 500).
    let (failed, hooks) = match sequence(None) {
        (Admit::Decided(a), hooks) => (a, hooks),
        (other, _) => panic!("{other:?}"),
    };
    assert_eq!(failed.verdict.status, 503);
    assert!(failed.place.is_none());
    let headers = failed.verdict.headers();
    assert!(
        headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("retry-after")),
        "{headers:?}"
    );
    assert_eq!(
        (hooks.asked, hooks.shed),
        (1, Some(Some(Priority::Background)))
    );
    assert_eq!(gate.concurrency().unwrap().in_flight(), 1);
    let (third, _) = admit(Priority::Normal);
    assert!(third.place.is_some());
    let (fourth, hooks) = admit(Priority::Critical);
    assert!(fourth.verdict.is_pass() && fourth.place.is_none());
    assert_eq!(hooks.shed, None);
    let (fifth, hooks) = admit(Priority::Normal);
    assert_eq!(fifth.verdict.status, 503);
    assert_eq!(hooks.shed, Some(Some(Priority::Normal)));
    assert_eq!(gate.concurrency().unwrap().in_flight(), 2);
    drop((first, third));
    assert_eq!(gate.concurrency().unwrap().in_flight(), 0);
}

#[test]
fn the_gate_times_admitted_requests_and_not_refused_ones() {
    let clock = ManualClock::new();
    let mut options = GateOptions::default();
    options
        .set("concurrency_limit", Loose::Text("auto"))
        .unwrap();
    let policy = (
        "p".to_string(),
        ratebound::KeyedAlgorithm::TokenBucket(ratebound::Quota::parse("1/s burst 1").unwrap()),
    );
    let gate = Gate::new(vec![policy], options, AnyClock::Manual(clock.clone())).unwrap();
    let lines: [(&str, &str); 0] = [];
    let request = Request {
        key: None,
        peer: Some([127, 0, 0, 1].into()),
        headers: &lines[..],
    };
    let Admit::Decided(mut passed) = gate.admit(&request, &mut ()) else {
        unreachable!()
    };
    let Admit::Decided(refused) = gate.admit(&request, &mut ()) else {
        unreachable!()
    };
    assert_eq!(refused.verdict.status, 429);
    assert!(refused.place.is_none());
    let cap = gate.concurrency().unwrap();
    assert_eq!(cap.state().unwrap().samples, 0, "a refusal was timed");
    clock.advance(Duration::from_millis(30));
    passed.place.as_mut().unwrap().responded();
    assert_eq!(cap.state().unwrap().samples, 1);
    assert_eq!(cap.in_flight(), 1, "responded keeps the place");
    clock.advance(Duration::from_secs(5)); // a long body: not timed again
    drop(passed);
    assert_eq!(cap.state().unwrap().samples, 1);
    assert_eq!(cap.in_flight(), 0);
}

#[test]
fn bad_adaptive_options_are_named() {
    let err = |pairs: &[(&str, Loose<'_>)]| -> String {
        let mut o = GateOptions::default();
        for (name, value) in pairs {
            if let Err(e) = o.set(name, *value) {
                return e.to_string();
            }
        }
        Gate::new(vec![], o, AnyClock::default())
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err(&[
            ("concurrency_limit", Loose::Number(8.0)),
            ("concurrency_max", Loose::Number(100.0))
        ]),
        "invalid concurrency_limit \"8\": is a fixed number, and the adaptive limit (\"auto\", or its tuning) is set too: choose one"
    );
    assert_eq!(
        err(&[("concurrencyTolerance", Loose::Number(f64::NAN))]),
        "invalid concurrencyTolerance NaN: must be a finite number of at least 1"
    );
    assert_eq!(
        err(&[("concurrency_min", Loose::Number(-3.0))]),
        "invalid concurrency_min -3: must be at least 1"
    );
    assert_eq!(
        err(&[("concurrency_limit", Loose::Text("automatic"))]),
        "invalid concurrency_limit \"automatic\": must be a whole number or \"auto\""
    );
    assert_eq!(
        err(&[
            ("concurrency_limit", Loose::Text("auto")),
            ("concurrency_min", Loose::Number(50.0))
        ]),
        "invalid concurrency initial_limit 20: must lie within min_limit..=max_limit"
    );
    assert_eq!(
        err(&[("background_fraction", Loose::Number(0.25))]),
        "invalid background_fraction \"0.25\": shares a concurrency limit: set concurrency_limit (a number or \"auto\") as well"
    );
    assert_eq!(
        err(&[("background_fraction", Loose::Number(1.5))]),
        "invalid background_fraction 1.5: must be a number from 0 to 1"
    );
}

#[test]
fn the_queue_serves_the_oldest_while_fresh_and_the_newest_once_stale() {
    use std::sync::Arc;
    let clock = ManualClock::new();
    // A cap of one, held, with a 100 ms queue: one waiter queues, another
    // `gap` later, and the holder leaves.
    let two_waiters = |gap: u64| {
        let cap = ConcurrencyCap::new(1)
            .unwrap()
            .with_queue(Duration::from_millis(100), AnyClock::Manual(clock.clone()))
            .unwrap();
        let cap = Arc::new(cap);
        assert!(cap.try_enter());
        let first = cap.wait_for_place().unwrap();
        clock.advance(Duration::from_millis(gap));
        let second = cap.wait_for_place().unwrap();
        cap.leave();
        (cap, first, second)
    };
    // Fresh: the oldest waited 10 ms of 100 — first come, first served.
    let (cap, first, second) = two_waiters(10);
    assert!(first.is_granted() && !second.is_granted());
    assert!(!second.finish(), "nothing came for it");
    assert!(first.finish());
    cap.leave();
    assert_eq!(cap.in_flight(), 0);

    // Stale: the oldest waited 60 ms, more than half the wait — the newest
    // is served (its client is likelier still there).
    let (cap, first, second) = two_waiters(60);
    assert!(second.is_granted() && !first.is_granted());
    drop(first); // gave up: leaves the queue
    drop(second); // granted but dropped: the place is passed on, not lost
    assert_eq!(cap.in_flight(), 0);

    let bad = ConcurrencyCap::new(1)
        .unwrap()
        .with_queue(Duration::ZERO, AnyClock::default());
    assert_eq!(
        bad.unwrap_err().to_string(),
        "invalid concurrency queue wait 0ns: must be more than 0 and at most 10 s"
    );
}

#[test]
fn an_adaptive_limit_alone_is_a_whole_gate_spec() {
    // `concurrency_limit="auto"` with no policy: only load shedding, as a
    // fixed limit alone (it was refused for want of a rate).
    let mut spec = ratebound::gate::GateSpec::default();
    spec.set("concurrency_limit", Loose::Text("auto")).unwrap();
    let gate = spec.build(AnyClock::default()).unwrap();
    assert!(gate.concurrency().unwrap().is_adaptive());
}
