//! `Gate::admit` / `Gate::finish`: the request sequence every front door
//! runs — exempt, a concurrency place, critical, shed, the key, decide
//! (remote policies first), report — and the place's guard.

use ratebound::any::{AnyClock, Key};
use ratebound::gate::{Admission, Admit, Gate, GateOptions, Hooks, KeySource};
use ratebound::gate::{MissingKey, Outcome, RemoteAnswer, Request, StoreNotice, Verdict};
use ratebound::http::NoHeaders;
use ratebound::{Decision, KeyedAlgorithm, ManualClock, Quota};

/// Hooks that record what the sequence asked, in order.
#[derive(Default)]
struct Log {
    exempt: bool,
    critical: bool,
    key: Option<&'static str>,
    /// The key function fails.
    key_fails: bool,
    asked: Vec<&'static str>,
    reported: Vec<(Outcome, Option<String>, u16)>,
}

impl Hooks for Log {
    fn exempt(&mut self) -> bool {
        self.asked.push("exempt");
        self.exempt
    }
    fn critical(&mut self) -> bool {
        self.asked.push("critical");
        self.critical
    }
    fn with_key<R>(&mut self, f: impl FnOnce(Option<Key<'_>>) -> R) -> Option<R> {
        self.asked.push("key");
        if self.key_fails {
            return None;
        }
        Some(f(self.key.map(Key::Text)))
    }
    fn report(&mut self, v: &Verdict<'_>) {
        self.asked.push("report");
        self.reported
            .push((v.outcome, v.refused_by.map(str::to_string), v.status));
    }
}

fn gate(options: GateOptions) -> Gate {
    let policy = (
        "local".to_string(),
        KeyedAlgorithm::TokenBucket(Quota::parse("1/s burst 2").unwrap()),
    );
    Gate::new(vec![policy], options, AnyClock::Manual(ManualClock::new())).unwrap()
}

const PEER: Request<'static, NoHeaders> = Request {
    key: None,
    peer: Some(std::net::IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1))),
    headers: &NoHeaders,
};

/// A request from `PEER` with alice's API key in `x-api-key`.
const ALICE: Request<'static, [(&str, &str)]> = Request {
    key: None,
    peer: PEER.peer,
    headers: &[("x-api-key", "alice")],
};

/// The remote policy "global", a token bucket of `quota`.
fn global(quota: &str) -> (String, KeyedAlgorithm) {
    let algorithm = KeyedAlgorithm::TokenBucket(Quota::parse(quota).unwrap());
    ("global".to_string(), algorithm)
}

fn decided(a: Admit<'_>) -> Admission<'_> {
    match a {
        Admit::Decided(a) => a,
        other => panic!("expected a decision, got {other:?}"),
    }
}

#[test]
fn an_exempt_request_is_asked_nothing_more_and_not_reported() {
    let g = gate(GateOptions {
        concurrency_limit: Some(1),
        ..GateOptions::default()
    });
    let mut log = Log {
        exempt: true,
        ..Log::default()
    };
    for _ in 0..5 {
        assert!(matches!(g.admit(&PEER, &mut log), Admit::Exempt));
    }
    assert_eq!(log.asked, ["exempt"; 5]);
    assert!(log.reported.is_empty());
    // Nothing was spent, no place taken: a limited request passes.
    let a = decided(g.admit(&PEER, &mut ()));
    assert!(a.verdict.is_pass() && a.place.is_some());
}

#[test]
fn a_full_cap_sheds_before_the_key_unless_critical_and_the_place_is_a_guard() {
    let g = gate(GateOptions {
        concurrency_limit: Some(1),
        key: KeySource::Given,
        ..GateOptions::default()
    });
    let mut log = Log {
        key: Some("alice"),
        ..Log::default()
    };
    let first = decided(g.admit(&PEER, &mut log));
    assert!(first.verdict.is_pass());
    let place = first.place.expect("a place under the cap");
    assert_eq!(log.asked, ["exempt", "key", "report"]);
    log.asked.clear();

    let shed = decided(g.admit(&PEER, &mut log));
    assert_eq!(
        (shed.verdict.status, shed.verdict.outcome),
        (503, Outcome::Shed)
    );
    assert_eq!(shed.verdict.fields.retry_after, Some(1));
    assert!(shed.place.is_none());
    // Shed before the key was looked for, and reported once.
    assert_eq!(log.asked, ["exempt", "critical", "report"]);
    log.asked.clear();

    log.critical = true;
    let critical = decided(g.admit(&PEER, &mut log));
    assert!(critical.verdict.is_pass(), "{:?}", critical.verdict);
    assert!(
        critical.place.is_none(),
        "a critical request holds no place"
    );
    assert_eq!(log.asked, ["exempt", "critical", "key", "report"]);

    // The critical request spent alice's second token; the guard gives the
    // one place back when dropped.
    drop(place);
    log.critical = false;
    let refused = decided(g.admit(&PEER, &mut log));
    assert_eq!(refused.verdict.status, 429);
    assert!(
        refused.place.is_none(),
        "a refusal gives its place back at once"
    );
    let again = decided(g.admit(
        &Request {
            key: Some(Key::Text("bob")),
            ..PEER
        },
        &mut (),
    ));
    assert!(again.verdict.is_pass() && again.place.is_some());
    assert_eq!(
        log.reported
            .iter()
            .map(|(o, _, s)| (*o, *s))
            .collect::<Vec<_>>(),
        [
            (Outcome::Allowed, 0),
            (Outcome::Shed, 503),
            (Outcome::Allowed, 0),
            (Outcome::Refused, 429)
        ]
    );
    assert_eq!(log.reported[3].1.as_deref(), Some("local"));
}

#[test]
fn a_key_in_the_request_wins_and_the_hook_is_not_asked() {
    let g = gate(GateOptions {
        key: KeySource::Given,
        missing: MissingKey::Reject(401),
        ..GateOptions::default()
    });
    let mut log = Log::default();
    let request = Request {
        key: Some(Key::Text("carol")),
        ..PEER
    };
    assert!(decided(g.admit(&request, &mut log)).verdict.is_pass());
    assert_eq!(log.asked, ["exempt", "report"]);
    // No key anywhere: the missing-key rule, reported as rejected.
    let none = decided(g.admit(&PEER, &mut log));
    assert_eq!(
        (none.verdict.status, none.verdict.outcome),
        (401, Outcome::Rejected)
    );
}

fn remote_gate() -> Gate {
    gate(GateOptions {
        key: KeySource::header("x-api-key").unwrap(),
        missing: MissingKey::Reject(401),
        concurrency_limit: Some(2),
        remote: vec![global("10/s burst 20")],
        ..GateOptions::default()
    })
}

fn remote(allowed: bool) -> Decision {
    Decision::from_parts(
        allowed,
        20,
        if allowed { 19 } else { 0 },
        if allowed { 0 } else { 3_200_000_000 },
        100_000_000,
    )
}

#[test]
fn remote_policies_are_asked_with_the_identity_and_finish_decides() {
    let g = remote_gate();
    assert_eq!(g.remote_names().collect::<Vec<_>>(), ["global"]);
    let request = ALICE;
    let mut log = Log::default();
    let Admit::Ask(ask) = g.admit(&request, &mut log) else {
        panic!("remote policies are asked first")
    };
    assert_eq!(ask.identity(), b"key:alice");
    assert_eq!(log.asked, ["exempt"], "not reported before it is decided");
    let a = g.finish(ask, &[remote(true)], &mut log);
    assert!(a.verdict.is_pass());
    assert!(a.place.is_some());
    let ratelimit = String::from_utf8(a.verdict.fields.ratelimit.clone().unwrap()).unwrap();
    assert!(ratelimit.contains("\"global\""), "{ratelimit}");

    // A remote refusal: 429 with the remote wait rounded up, by "global";
    // the place goes back at once.
    let Admit::Ask(ask) = g.admit(&request, &mut log) else {
        panic!()
    };
    let a = g.finish(ask, &[remote(false)], &mut log);
    assert_eq!(a.verdict.status, 429);
    assert_eq!(a.verdict.fields.retry_after, Some(4));
    assert_eq!(a.verdict.refused_by, Some("global"));
    assert!(a.place.is_none());

    // A full remote table: 503, never 500.
    let Admit::Ask(ask) = g.admit(&request, &mut log) else {
        panic!()
    };
    let a = g.finish(ask, &[RemoteAnswer::Full], &mut log);
    assert_eq!(a.verdict.status, 503);

    // Too few answers is the gate's misconfiguration, not a pass.
    let Admit::Ask(ask) = g.admit(&request, &mut log) else {
        panic!()
    };
    let a = g.finish::<RemoteAnswer, _>(ask, &[], &mut log);
    assert_eq!(a.verdict.status, 500);

    // A keyless request is refused without asking anyone.
    let a = decided(g.admit(&PEER, &mut log));
    assert_eq!(a.verdict.status, 401);
    assert!(a.place.is_none());
    assert_eq!(
        log.reported.iter().map(|r| r.2).collect::<Vec<_>>(),
        [0, 429, 503, 500, 401]
    );
}

/// Issue 36 item 7: a remote policy whose check failed (an error its fail
/// policy did not cover) is a 503 with the configured Retry-After,
/// reported as `store_error` by the failing policy, with one notice when
/// the episode begins and one when it ends — never a 500, and no local
/// token is spent.
#[test]
fn a_failed_remote_check_is_a_503_told_once_per_episode() {
    let g = gate(GateOptions {
        key: KeySource::header("x-api-key").unwrap(),
        remote: vec![global("10/s burst 20")],
        store_error_retry_after: 7,
        ..GateOptions::default()
    });
    let request = ALICE;
    let mut log = Log::default();
    let mut finish = |answer: RemoteAnswer| {
        let Admit::Ask(ask) = g.admit(&request, &mut log) else {
            panic!("remote policies are asked first")
        };
        let v = g.finish(ask, &[answer], &mut log).verdict;
        (
            v.status,
            v.fields.retry_after,
            v.outcome,
            v.refused_by,
            v.notice,
        )
    };
    let began = StoreNotice::Began {
        policy: "global",
        retry_after: 7,
    };
    let failed = |notice| (503, Some(7), Outcome::StoreError, Some("global"), notice);
    assert_eq!(finish(RemoteAnswer::Failed), failed(Some(began)));
    assert_eq!(finish(RemoteAnswer::Failed), failed(None));
    assert_eq!(finish(RemoteAnswer::Failed), failed(None));
    // It answers again: the episode's end, told once, with its count; the
    // local policy (burst 2) was not charged by the failed requests.
    let ended = StoreNotice::Ended {
        policy: "global",
        failures: 3,
    };
    assert_eq!(
        finish(remote(true).into()),
        (0, None, Outcome::Allowed, None, Some(ended))
    );
    assert_eq!(
        finish(remote(true).into()),
        (0, None, Outcome::Allowed, None, None)
    );
    // A new episode begins with a new notice.
    assert_eq!(finish(RemoteAnswer::Failed), failed(Some(began)));
    // The mapping every front door calls: a full table is not a failure.
    assert_eq!(
        RemoteAnswer::from_error(Some("too_many_keys")),
        RemoteAnswer::Full
    );
    assert_eq!(
        RemoteAnswer::from_error(Some("invalid_number")),
        RemoteAnswer::Failed
    );
    assert_eq!(RemoteAnswer::from_error(None), RemoteAnswer::Failed);
    assert_eq!(
        began.to_string(),
        "ratebound: the store of remote policy \"global\" failed; its requests are answered \
         503 with Retry-After: 7 until it answers again"
    );
}

/// A failed check outranks another policy's refusal and a full table (a
/// request one policy cannot decide is not served), and the option is
/// checked: whole seconds, 1 to 3600.
#[test]
fn a_failed_remote_check_outranks_the_other_answers() {
    let shape = KeyedAlgorithm::TokenBucket(Quota::parse("10/s burst 20").unwrap());
    let g = gate(GateOptions {
        key: KeySource::header("x-api-key").unwrap(),
        remote: vec![("a".to_string(), shape), ("b".to_string(), shape)],
        ..GateOptions::default()
    });
    let request = ALICE;
    let refused = RemoteAnswer::from(remote(false));
    let v = g.decide_with(&request, &[refused, RemoteAnswer::Failed]);
    assert_eq!(
        (v.status, v.fields.retry_after, v.refused_by),
        (503, Some(1), Some("b"))
    );
    let v = g.decide_with(&request, &[RemoteAnswer::Full, RemoteAnswer::Failed]);
    assert_eq!((v.status, v.outcome), (503, Outcome::StoreError));
    // "b" still failing while "a" answers: no end is told for "b".
    let v = g.decide_with(&request, &[refused, RemoteAnswer::Failed]);
    assert_eq!(v.notice, None);
    let mut o = GateOptions::default();
    for bad in [0.0, 1.5, 3601.0, -1.0] {
        let e = o
            .set(
                "store_error_retry_after",
                ratebound::gate::Loose::Number(bad),
            )
            .unwrap_err();
        assert!(e.to_string().contains("store_error_retry_after"), "{e}");
    }
    o.set(
        "storeErrorRetryAfter",
        ratebound::gate::Loose::Number(3600.0),
    )
    .unwrap();
    assert_eq!(o.store_error_retry_after, 3600);
    let bad = GateOptions {
        store_error_retry_after: 0,
        ..GateOptions::default()
    };
    let policy = ("p".to_string(), shape);
    assert!(Gate::new(vec![policy], bad, AnyClock::default()).is_err());
}

#[test]
fn an_ask_dropped_gives_its_place_back() {
    let g = remote_gate();
    let request = ALICE;
    for _ in 0..10 {
        // Two places: both taken by pending asks, then both given back.
        let (Admit::Ask(a), Admit::Ask(b)) =
            (g.admit(&request, &mut ()), g.admit(&request, &mut ()))
        else {
            panic!()
        };
        assert_eq!(decided(g.admit(&request, &mut ())).verdict.status, 503);
        drop((a, b));
    }
}

#[test]
fn a_failing_key_function_stops_the_sequence_and_charges_no_one() {
    for remote in [false, true] {
        let g = gate(GateOptions {
            key: KeySource::Given,
            concurrency_limit: Some(1),
            remote: if remote { vec![global("10/s")] } else { vec![] },
            ..GateOptions::default()
        });
        let mut log = Log {
            key_fails: true,
            ..Log::default()
        };
        for _ in 0..3 {
            assert!(matches!(g.admit(&PEER, &mut log), Admit::Stopped));
        }
        assert!(log.reported.is_empty(), "nothing reported");
        assert_eq!(g.len(), 0, "no bucket charged (not even the IP fallback's)");
        // The place went back each time: a request with a key passes.
        log.key_fails = false;
        log.key = Some("dave");
        match g.admit(&PEER, &mut log) {
            Admit::Decided(a) => assert!(a.verdict.is_pass() && a.place.is_some()),
            Admit::Ask(ask) => assert_eq!(ask.identity(), b"key:dave"),
            other => panic!("{other:?}"),
        }
    }
}
