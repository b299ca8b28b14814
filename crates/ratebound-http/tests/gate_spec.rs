//! Replays `spec/gate.json` — the whole middleware decision — through the
//! tower layer over real HTTP on 127.0.0.1 (axum server, hyper client, each
//! vector's header lines sent in order). The core, ASGI, WSGI, Django,
//! Express and Fastify replay the same file.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::Request as AxumRequest;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

use ratebound::http::{Cidr, Forwarding, TrustedProxies};
use ratebound::{ManualClock, Overflow};
use ratebound_http::{
    Builder, MissingKey, PeerAddr, QuotaHeaders, RateLimitLayer, RefusalBody, RequestKey,
};
use serde_json::Value;
use std::sync::{Arc, Mutex};

mod failing;
use failing::Failing;
#[path = "../../ratebound/tests/support/gate.rs"]
mod support;
use support::{compare, compare_outcome, load, load_rules, policy, remote};

/// The error a vector's `fails` names.
fn error_named(fails: &str) -> ratebound::Error {
    match fails {
        "too_many_keys" => ratebound::Error::TooManyKeys { max_keys: 1 },
        "store_misconfigured" => ratebound::Error::StoreMisconfigured {
            cause: "WRONGPASS".to_string(),
        },
        _ => ratebound::Error::StoreUnavailable {
            cause: "the vector's store failed".to_string(),
            retry_after: Duration::from_secs(1),
        },
    }
}

/// The outcomes told to `on_decision`, in order.
type Outcomes = Arc<Mutex<Vec<&'static str>>>;

/// The layer a vector's options describe, through the builder's typed
/// options (the core's parsers for the strings). An option name this
/// replay does not know, or a value of a type it does not read, fails the
/// vector: ignored, it would replay some other gate than the file says.
fn build(id: &str, options: &Value, clock: &ManualClock, outcomes: &Outcomes) -> RateLimitLayer {
    let told = outcomes.clone();
    let mut b: Builder = RateLimitLayer::builder()
        .clock(clock.clone())
        .on_decision(move |e| told.lock().unwrap().push(e.outcome.as_str()));
    let options = options
        .as_object()
        .unwrap_or_else(|| panic!("{id}: options is not an object"));
    let bad = |name: &str, value: &Value| -> ! { panic!("{id}: option {name} = {value}") };
    let text = |name: &str, value: &Value| -> String {
        value
            .as_str()
            .map_or_else(|| bad(name, value), str::to_string)
    };
    let number = |name: &str, value: &Value| value.as_u64().unwrap_or_else(|| bad(name, value));
    for (name, value) in options {
        match name.as_str() {
            "policies" => {
                for p in value.as_array().unwrap_or_else(|| bad(name, value)) {
                    for field in p.as_object().unwrap_or_else(|| bad(name, p)).keys() {
                        assert!(
                            ["name", "algorithm", "rate", "burst", "limit", "window"]
                                .contains(&field.as_str()),
                            "{id}: unknown policy field {field}"
                        );
                    }
                    let (policy_name, algorithm) = policy(p);
                    b = b.policy_with(&policy_name, algorithm);
                }
            }
            "key_header" => b = b.key(RequestKey::header(&text(name, value)).unwrap()),
            "key" => {
                assert_eq!(value, "given", "{id}: option key");
                b = b.key(RequestKey::custom(|parts| {
                    parts
                        .headers
                        .get("x-given")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string)
                }));
            }
            "trusted_proxies" => match value {
                Value::Number(_) => {
                    b = b.trusted_proxies(TrustedProxies::Hops(number(name, value) as usize));
                }
                Value::Array(a) => {
                    let cidrs = a
                        .iter()
                        .map(|c| Cidr::parse(&text(name, c)).unwrap())
                        .collect();
                    b = b.trusted_proxies(TrustedProxies::Cidrs(cidrs));
                }
                _ => bad(name, value),
            },
            "client_ip_header" => {
                b = b.client_ip_header(Forwarding::parse(&text(name, value)).unwrap());
            }
            "ipv6_prefix" => b = b.ipv6_prefix(number(name, value) as u8),
            "missing_key" => match value {
                Value::String(s) => b = b.missing_key(MissingKey::parse(s).unwrap()),
                Value::Number(n) => {
                    b = b.missing_key(MissingKey::reject(n.as_f64().unwrap()).unwrap());
                }
                _ => bad(name, value),
            },
            "headers" => b = b.quota_headers(QuotaHeaders::parse(&text(name, value)).unwrap()),
            "body" => b = b.refusal_body(RefusalBody::parse(&text(name, value)).unwrap()),
            "max_keys" => {
                let overflow = match options.get("overflow") {
                    Some(o) => ratebound::any::overflow(text("overflow", o).as_str()).unwrap(),
                    None => Overflow::EvictLeastRecent,
                };
                b = b.max_keys(number(name, value) as usize, overflow);
            }
            "overflow" => assert!(
                options.contains_key("max_keys"),
                "{id}: overflow without max_keys"
            ),
            "concurrency_limit" => b = b.concurrency_limit(number(name, value) as usize),
            "store_error_retry_after" => b = b.store_error_retry_after(number(name, value)),
            "remote" => {
                for p in value.as_array().unwrap_or_else(|| bad(name, value)) {
                    let (policy_name, algorithm, fails) = remote(p);
                    // The error stands for the vector's failure: the core's
                    // rule answers it as the vector says.
                    assert_eq!(
                        ratebound::gate::RemoteAnswer::from_result(Err(&error_named(&fails))),
                        support::failing(&fails),
                        "{id}: {fails}"
                    );
                    // Every check ends in that error.
                    let fault = Box::new(move || Some(error_named(&fails)));
                    b = b.remote(&policy_name, Failing { algorithm, fault });
                }
            }
            other => panic!("{id}: unknown option {other}"),
        }
    }
    b.build().unwrap()
}

/// The app, with test scaffolding in front of the layer: the client
/// address the vector names, as a server without proxies would see it.
fn app(layer: RateLimitLayer) -> Router {
    peered(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer),
    )
}

/// `router` behind the test scaffolding of [`app`].
fn peered(router: Router) -> Router {
    router.layer(axum::middleware::map_request(
        |mut req: AxumRequest| async {
            let peer = req
                .headers()
                .get("x-test-peer")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .map(|ip| SocketAddr::new(ip, 4711));
            if let Some(peer) = peer {
                req.extensions_mut().insert(PeerAddr(peer));
            }
            req
        },
    ))
}

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

#[tokio::test]
async fn the_tower_layer_replays_every_gate_vector_over_http() {
    let spec = load();
    let vectors = spec["vectors"].as_array().unwrap();
    assert!(vectors.len() >= 40);
    // And gate_rules.json's client addresses: the peer unless the layer
    // trusts proxies.
    let rules = load_rules();
    let vectors = vectors
        .iter()
        .chain(rules["client_address"].as_array().unwrap());
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let mut failures = Vec::new();
    for v in vectors {
        let id = v["id"].as_str().unwrap();
        let clock = ManualClock::new();
        let outcomes = Outcomes::default();
        let layer = build(id, &v["options"], &clock, &outcomes);
        let addr = serve(app(layer.clone())).await;
        for (i, r) in v["requests"].as_array().unwrap().iter().enumerate() {
            if let Some(at) = r.get("at_ns").and_then(Value::as_u64) {
                clock.set_nanos(at);
            }
            let occupied = r.get("occupied").and_then(Value::as_u64).unwrap_or(0);
            for _ in 0..occupied {
                assert!(layer.gate().try_enter(), "{id} step {i}: a free place");
            }
            let mut request = Request::get(format!("http://{addr}/"))
                .header("x-test-peer", r["peer"].as_str().unwrap());
            for line in r["headers"].as_array().unwrap() {
                request = request.header(line[0].as_str().unwrap(), line[1].as_str().unwrap());
            }
            let response = client
                .request(request.body(Empty::new()).unwrap())
                .await
                .unwrap();
            for _ in 0..occupied {
                layer.gate().leave();
            }
            let (parts, body) = response.into_parts();
            let body = body.collect().await.unwrap().to_bytes();
            let body = String::from_utf8_lossy(&body).into_owned();
            let header = |name: &str| {
                parts
                    .headers
                    .get(name)
                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            };
            compare(
                &format!("{id} step {i}"),
                parts.status.as_u16(),
                header,
                Some(&body),
                &r["expect"],
                &mut failures,
            );
            let outcome = outcomes.lock().unwrap().pop();
            compare_outcome(
                &format!("{id} step {i}"),
                outcome,
                &r["expect"],
                &mut failures,
            );
        }
    }
    assert!(failures.is_empty(), "gate.json:\n{}", failures.join("\n"));
}

/// Issue 11 through the tower layer: behind a proxy that writes
/// X-Forwarded-For, a client's own `Forwarded` header no longer picks its
/// key (before the fix the layer read `Forwarded` first: 5 × 200).
#[tokio::test]
async fn a_forged_forwarded_header_does_not_evade_the_limit() {
    for trusted in [
        TrustedProxies::Hops(1),
        TrustedProxies::Cidrs(vec![Cidr::parse("127.0.0.0/8").unwrap()]),
    ] {
        let layer = RateLimitLayer::builder()
            .policy("p", ratebound::Quota::parse("1/s burst 1").unwrap())
            .trusted_proxies(trusted)
            .build()
            .unwrap();
        let addr = serve(app(layer)).await;
        let client: Client<HttpConnector, Empty<Bytes>> =
            Client::builder(TokioExecutor::new()).build_http();
        let mut statuses = Vec::new();
        for i in 0..5 {
            let request = Request::get(format!("http://{addr}/"))
                .header("x-test-peer", "127.0.0.1")
                .header("x-forwarded-for", "5.5.5.5")
                .header("forwarded", format!("for=9.9.{i}.1"))
                .body(Empty::new())
                .unwrap();
            statuses.push(client.request(request).await.unwrap().status());
        }
        let refused = StatusCode::TOO_MANY_REQUESTS;
        assert_eq!(
            statuses,
            [StatusCode::OK, refused, refused, refused, refused]
        );
    }
}

/// `spec/gate_rules.json`'s `merge` vectors: a route's own layer under the
/// site-wide one; the response carries both layers' entries, by the
/// core's rule (before: the site's layer overwrote the route's fields).
#[tokio::test]
async fn a_route_layer_under_the_site_layer_merges_their_fields() {
    let spec = load_rules();
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let mut failures = Vec::new();
    for v in spec["merge"].as_array().unwrap() {
        let id = v["id"].as_str().unwrap();
        let clock = ManualClock::new();
        let outcomes = Outcomes::default();
        let route = build(id, &v["route"], &clock, &outcomes);
        let site = build(id, &v["site"], &clock, &outcomes);
        let router = Router::new()
            .route("/", get(|| async { "ok" }).layer(route))
            .layer(site);
        let addr = serve(peered(router)).await;
        for (i, r) in v["requests"].as_array().unwrap().iter().enumerate() {
            let request = Request::get(format!("http://{addr}/"))
                .header("x-test-peer", r["peer"].as_str().unwrap())
                .body(Empty::new())
                .unwrap();
            let (parts, _) = client.request(request).await.unwrap().into_parts();
            let header = |name: &str| {
                let lines: Vec<_> = parts.headers.get_all(name).iter().collect();
                (!lines.is_empty()).then(|| {
                    let text = lines.iter().map(|v| String::from_utf8_lossy(v.as_bytes()));
                    text.collect::<Vec<_>>().join(", ")
                })
            };
            let at = format!("{id} step {i}");
            compare(
                &at,
                parts.status.as_u16(),
                header,
                None,
                &r["expect"],
                &mut failures,
            );
        }
    }
    assert!(
        failures.is_empty(),
        "gate_rules.json:\n{}",
        failures.join("\n")
    );
}
