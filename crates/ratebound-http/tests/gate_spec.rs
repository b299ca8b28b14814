//! Replays `spec/gate.json` — the whole middleware decision — through the
//! tower layer over real HTTP on 127.0.0.1 (axum server, hyper client, each
//! vector's header lines sent in order). The core, ASGI, WSGI, Express and
//! Fastify replay the same file.

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
use ratebound::http::{Cidr, Forwarding, TrustedProxies};
use ratebound::{ManualClock, Overflow};
use ratebound_http::{
    Builder, KeySource, MissingKey, PeerAddr, QuotaHeaders, RateLimitLayer, RefusalBody,
};
use serde_json::Value;

#[path = "../../ratebound/tests/support/gate.rs"]
mod support;
use support::{compare, load, policy};

/// The layer a vector's options describe, through the builder's typed
/// options (the core's parsers for the strings).
fn build(options: &Value, clock: &ManualClock) -> RateLimitLayer {
    let mut b: Builder = RateLimitLayer::builder().clock(clock.clone());
    for p in options["policies"].as_array().unwrap() {
        let (name, algorithm) = policy(p);
        b = b.policy_with(&name, algorithm);
    }
    let text = |k: &str| options.get(k).and_then(Value::as_str);
    if let Some(h) = text("key_header") {
        b = b.key(KeySource::header(h).unwrap());
    }
    if text("key") == Some("given") {
        b = b.key(KeySource::custom(|parts| {
            parts
                .headers
                .get("x-given")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        }));
    }
    match options.get("trusted_proxies") {
        Some(Value::Number(n)) => {
            b = b.trusted_proxies(TrustedProxies::Hops(n.as_u64().unwrap() as usize));
        }
        Some(Value::Array(a)) => {
            let cidrs = a
                .iter()
                .map(|c| Cidr::parse(c.as_str().unwrap()).unwrap())
                .collect();
            b = b.trusted_proxies(TrustedProxies::Cidrs(cidrs));
        }
        _ => {}
    }
    if let Some(h) = text("client_ip_header") {
        b = b.client_ip_header(Forwarding::parse(h).unwrap());
    }
    if let Some(bits) = options.get("ipv6_prefix").and_then(Value::as_u64) {
        b = b.ipv6_prefix(bits as u8);
    }
    match options.get("missing_key") {
        Some(Value::String(s)) => b = b.missing_key(MissingKey::parse(s).unwrap()),
        Some(Value::Number(n)) => {
            b = b.missing_key(MissingKey::reject(n.as_f64().unwrap()).unwrap());
        }
        _ => {}
    }
    if let Some(h) = text("headers") {
        b = b.quota_headers(QuotaHeaders::parse(h).unwrap());
    }
    if let Some(body) = text("body") {
        b = b.refusal_body(RefusalBody::parse(body).unwrap());
    }
    if let Some(max) = options.get("max_keys").and_then(Value::as_u64) {
        let overflow = match text("overflow") {
            Some(o) => ratebound::any::overflow(o).unwrap(),
            None => Overflow::EvictLeastRecent,
        };
        b = b.max_keys(max as usize, overflow);
    }
    if let Some(limit) = options.get("concurrency_limit").and_then(Value::as_u64) {
        b = b.concurrency_limit(limit as usize);
    }
    b.build().unwrap()
}

/// The app, with test scaffolding in front of the layer: the client
/// address the vector names, as a server without proxies would see it.
fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
        .layer(axum::middleware::map_request(
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
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let mut failures = Vec::new();
    for v in vectors {
        let id = v["id"].as_str().unwrap();
        let clock = ManualClock::new();
        let layer = build(&v["options"], &clock);
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
