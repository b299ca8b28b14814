//! spec/redis_wait.json against a real Redis, through the sans-I/O engine:
//! each step's call (reserve, return, pause, resume, check) judged at its explicit
//! Redis time, its outcome turned into the engine's answer (a return's:
//! whether Redis took the tokens back). The Python and
//! Node suites replay the same file.

mod support;

use std::time::Duration;

use ratebound::Quota;
use ratebound_redis::{
    Algorithm, Begin, Call, CallOutcome, Config, Engine, ReserveBegin, Reserved, Source, given_back,
};
use redis::aio::ConnectionManager;
use serde_json::{Value, json};
use support::{Server, fresh, run};

fn engine(config: &Value, prefix: &str) -> Engine {
    let num = |k: &str| config[k].as_f64().expect(k);
    assert_eq!(config["algorithm"], "token_bucket", "{config}");
    let q = Quota::per_second(num("rate"))
        .unwrap()
        .with_burst(num("burst") as u64)
        .unwrap();
    let mut c = Config::new(Algorithm::TokenBucket(q));
    c.prefix = prefix.to_string();
    c.timeout = Duration::from_secs(2);
    Engine::new(c).unwrap()
}

fn micros(d: Duration) -> u64 {
    d.as_micros() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_wait_vectors_replay_against_real_redis() {
    let server = Server::start();
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = ConnectionManager::new(client).await.unwrap();
    let path = format!("{}/../../spec/redis_wait.json", env!("CARGO_MANIFEST_DIR"));
    let spec: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let vectors = spec["vectors"].as_array().unwrap();
    assert!(vectors.len() >= 6);
    let (mut failures, mut steps) = (Vec::new(), 0);
    for v in vectors {
        let id = v["id"].as_str().unwrap();
        let e = engine(&v["config"], &format!("{}:", fresh(id)));
        // The reservations granted, by step: the call and its slot's end.
        let mut granted: Vec<Option<(Call, u64)>> = Vec::new();
        for (i, step) in v["steps"].as_array().unwrap().iter().enumerate() {
            steps += 1;
            let at = step["at_us"].as_u64().unwrap();
            let n = step["n"].as_u64().unwrap_or(1);
            granted.push(None);
            let got = match step["call"].as_str().unwrap() {
                "reserve" => {
                    let max = Duration::from_micros(step["max_wait_us"].as_u64().unwrap());
                    let ReserveBegin::Call(call) =
                        e.begin_reserve(None, id.as_bytes(), n, max).unwrap()
                    else {
                        panic!("{id} step {i}: answered without Redis")
                    };
                    let call = call.at(at);
                    let reply = run(&mut conn, &call).await;
                    match e.finish_reserve(&call, CallOutcome::Reply(&reply)) {
                        Reserved::Granted {
                            wait,
                            source,
                            end_us,
                            ..
                        } => {
                            granted[i] = Some((call.clone(), end_us.expect("Redis answered")));
                            json!({"granted": true, "wait_us": micros(wait), "source": source.as_str()})
                        }
                        Reserved::Refused { wait, source } | Reserved::Retry { wait, source } => {
                            json!({"granted": false, "wait_us": micros(wait), "source": source.as_str()})
                        }
                    }
                }
                "return" => {
                    let held = match step["of"].as_u64() {
                        Some(k) => granted.get(k as usize).and_then(Option::as_ref),
                        None => granted.iter().rev().find_map(Option::as_ref),
                    };
                    let (call, end_us) = held.expect("a granted reservation");
                    let back = e.give_back(call, *end_us).at(at);
                    let reply = run(&mut conn, &back).await;
                    json!({"given_back": given_back(CallOutcome::Reply(&reply))})
                }
                "pause" => {
                    let d = Duration::from_micros(step["for_us"].as_u64().unwrap());
                    let call = e.begin_pause(None, id.as_bytes(), d).unwrap().at(at);
                    let reply = run(&mut conn, &call).await;
                    let (_, shift) = e.finish_pause(CallOutcome::Reply(&reply)).expect("paused");
                    json!({"shift_us": micros(shift)})
                }
                "resume" => {
                    let call = e.begin_resume(None, id.as_bytes()).unwrap().at(at);
                    let reply = run(&mut conn, &call).await;
                    let resumed = e.finish_resume(CallOutcome::Reply(&reply)).expect("told");
                    json!({"resumed": resumed.as_str()})
                }
                "check" => {
                    let Begin::Call(call) = e.begin(id.as_bytes(), n).unwrap() else {
                        panic!("{id} step {i}: answered without Redis")
                    };
                    let call = call.at(at);
                    let reply = run(&mut conn, &call).await;
                    let d = e.finish(&call, CallOutcome::Reply(&reply));
                    assert_eq!(d.source(), Source::Redis, "{id} step {i}");
                    json!({
                        "allowed": d.is_allowed(),
                        "remaining": d.remaining(),
                        "retry_after_us": micros(d.retry_after()),
                    })
                }
                other => panic!("{id} step {i}: unknown call {other}"),
            };
            for (field, want) in step["expect"].as_object().unwrap() {
                if &got[field] != want {
                    failures.push(format!(
                        "{id} step {i}: {field} = {}, want {want}",
                        got[field]
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "redis_wait.json:\n{}",
        failures.join("\n")
    );
    let want: usize = vectors
        .iter()
        .map(|v| v["steps"].as_array().unwrap().len())
        .sum();
    assert_eq!(steps, want);
    assert!(steps >= 20, "{steps} steps");
}
