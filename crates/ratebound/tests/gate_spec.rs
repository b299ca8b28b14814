//! Replays `spec/gate.json` against the core's `Gate` directly (the tower
//! layer, ASGI, WSGI, Express and Fastify replay it over HTTP).

mod support;

use ratebound::ManualClock;
use ratebound::any::{AnyClock, Key};
use ratebound::gate::{Gate, GateOptions, KeySource, Loose, RemoteAnswer, Request};
use serde_json::Value;
use support::gate::{compare, compare_outcome, failing, load, load_rules, policy, remote};

/// The gate a vector's options describe, through the loose parser the
/// bindings use.
fn build(options: &Value, clock: &ManualClock) -> (Gate, Vec<RemoteAnswer>) {
    let mut o = GateOptions::default();
    let mut answers = Vec::new();
    let obj = options.as_object().expect("options object");
    for (name, value) in obj {
        match name.as_str() {
            "policies" => {}
            "remote" => {
                for p in value.as_array().expect("remote") {
                    let (name, algorithm, fails) = remote(p);
                    o.remote.push((name, algorithm));
                    answers.push(failing(&fails));
                }
            }
            "key" => {
                assert_eq!(value, "given");
                o.key = KeySource::Given;
            }
            _ => {
                let list: Vec<&str>;
                let loose = match value {
                    Value::String(s) => Loose::Text(s),
                    Value::Number(n) => Loose::Number(n.as_f64().unwrap()),
                    Value::Array(a) => {
                        list = a.iter().map(|x| x.as_str().unwrap()).collect();
                        Loose::List(&list)
                    }
                    other => panic!("option {name}: {other}"),
                };
                o.set(name, loose)
                    .unwrap_or_else(|e| panic!("option {name}: {e}"));
            }
        }
    }
    let policies = options["policies"]
        .as_array()
        .expect("policies")
        .iter()
        .map(policy)
        .collect();
    let gate = Gate::new(policies, o, AnyClock::Manual(clock.clone())).expect("gate");
    (gate, answers)
}

/// The value of the field `name` in `fields` (the first of that name).
fn field(fields: &[(&str, String)], name: &str) -> Option<String> {
    fields
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.clone())
}

#[test]
fn gate_vectors() {
    let spec = load();
    let vectors = spec["vectors"].as_array().unwrap();
    assert!(vectors.len() >= 40, "{} vectors", vectors.len());
    let rules = load_rules();
    let mut failures = Vec::new();
    for v in vectors
        .iter()
        .chain(rules["client_address"].as_array().unwrap())
    {
        let id = v["id"].as_str().unwrap();
        let clock = ManualClock::new();
        let (gate, answers) = build(&v["options"], &clock);
        for (i, r) in v["requests"].as_array().unwrap().iter().enumerate() {
            if let Some(at) = r.get("at_ns").and_then(Value::as_u64) {
                clock.set_nanos(at);
            }
            let lines: Vec<(String, String)> = r["headers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| {
                    (
                        l[0].as_str().unwrap().to_string(),
                        l[1].as_str().unwrap().to_string(),
                    )
                })
                .collect();
            let given = lines
                .iter()
                .find(|(n, _)| n == "x-given")
                .map(|(_, v)| v.as_str());
            let occupied = r.get("occupied").and_then(Value::as_u64).unwrap_or(0);
            let mut taken = 0;
            for _ in 0..occupied {
                taken += u64::from(gate.try_enter());
            }
            assert_eq!(taken, occupied, "{id} step {i}: places to occupy");
            // The middleware's order: a place first, then the decision.
            let (status, headers, body, outcome) = if gate.try_enter() {
                let request = Request {
                    key: given.map(Key::Text),
                    peer: Some(r["peer"].as_str().unwrap().parse().unwrap()),
                    headers: &lines,
                };
                let verdict = if answers.is_empty() {
                    gate.decide(&request)
                } else {
                    gate.decide_with(&request, &answers)
                };
                gate.leave();
                let status = if verdict.is_pass() {
                    200
                } else {
                    verdict.status
                };
                let outcome = verdict.outcome.as_str();
                (status, verdict.headers(), verdict.body.clone(), outcome)
            } else {
                let shed = gate.shed();
                let outcome = shed.outcome.as_str();
                (shed.status, shed.headers(), shed.body.clone(), outcome)
            };
            for _ in 0..occupied {
                gate.leave();
            }
            let header = |name: &str| {
                if name == "content-type" {
                    return body.as_ref().map(|(t, _)| t.to_string());
                }
                field(&headers, name)
            };
            compare(
                &format!("{id} step {i}"),
                status,
                header,
                body.as_ref().map(|(_, b)| b.as_str()),
                &r["expect"],
                &mut failures,
            );
            compare_outcome(
                &format!("{id} step {i}"),
                Some(outcome),
                &r["expect"],
                &mut failures,
            );
        }
    }
    assert!(failures.is_empty(), "gate.json:\n{}", failures.join("\n"));
}

/// `spec/gate_rules.json`'s `merge` vectors on the core: the site's gate
/// decides, then the route's (when the site's admitted), and the response
/// carries their fields as `ratebound::gate::merge_fields` joins them.
#[test]
fn merge_vectors() {
    let spec = load_rules();
    let mut failures = Vec::new();
    for v in spec["merge"].as_array().unwrap() {
        let id = v["id"].as_str().unwrap();
        let clock = ManualClock::new();
        let (site, _) = build(&v["site"], &clock);
        let (route, _) = build(&v["route"], &clock);
        for (i, r) in v["requests"].as_array().unwrap().iter().enumerate() {
            let peer = r["peer"].as_str().unwrap().parse().unwrap();
            let lines: [(&str, &str); 0] = [];
            let request = Request {
                key: None,
                peer: Some(peer),
                headers: &lines[..],
            };
            let outer = site.decide(&request);
            let (status, body, fields) = if outer.is_pass() {
                let inner = route.decide(&request);
                let status = if inner.is_pass() { 200 } else { inner.status };
                let body = inner.body.as_ref().map(|(_, b)| b.clone());
                let merged = ratebound::gate::merge_fields(&outer.headers(), &inner.headers());
                (status, body, merged)
            } else {
                let body = outer.body.as_ref().map(|(_, b)| b.clone());
                (outer.status, body, outer.headers())
            };
            compare(
                &format!("{id} step {i}"),
                status,
                |name| field(&fields, name),
                body.as_deref(),
                &r["expect"],
                &mut failures,
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `spec/gate_rules.json`'s `route_options`: which options a route's own
/// limit takes and which of the site's it inherits, on the core's rules.
#[test]
fn route_option_vectors() {
    let spec = load_rules();
    let rules = &spec["route_options"];
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect()
    };
    let mut failures = Vec::new();
    for t in rules["takes"].as_array().unwrap() {
        let option = t["option"].as_str().unwrap();
        let takes = ratebound::gate::route_option(option).is_ok();
        if takes != t["takes"].as_bool().unwrap() {
            failures.push(format!("{option}: takes = {takes}"));
        }
    }
    for v in rules["inherits"].as_array().unwrap() {
        let own = names(&v["own"]);
        let got: Vec<String> = names(&v["site"])
            .into_iter()
            .filter(|n| ratebound::gate::route_inherits(n, &own))
            .collect();
        if got != names(&v["inherited"]) {
            failures.push(format!("{}: inherited {got:?}", v["id"]));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
