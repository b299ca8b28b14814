//! Remote policies over real HTTP: two axum apps ("instances") on
//! 127.0.0.1 sharing a global limit in a real `redis-server`, or a limit
//! in one shared-memory file, called with hyper's client.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use ratebound::{KeyedAlgorithm, Quota};
use ratebound_http::{Outcome, RateLimitLayer, RequestKey};
use ratebound_redis::{Algorithm, Config, OnError, RedisLimiter};
use ratebound_shm::SharedKeyedLimiter;
use redis::aio::ConnectionManager;

mod gated;
mod over_http;
mod serve;
use gated::gated_app;
use over_http::{HttpClient, client, header};
use serve::serve;

#[path = "../../ratebound-redis/tests/support/mod.rs"]
mod redis_server;
use redis_server::Server as Redis;

/// Awaits `f` for at most 10 s: a test that goes wrong fails, never hangs
/// (an admitted request to a streaming handler would wait for its gate).
async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("an answer within 10 s")
}

/// One GET with an API key: status, headers, body.
async fn fetch(c: &HttpClient, addr: SocketAddr, key: &str) -> (StatusCode, HeaderMap, String) {
    let request = Request::get(format!("http://{addr}/"))
        .header("x-api-key", key)
        .body(Empty::new())
        .unwrap();
    let (parts, body) = within(c.request(request)).await.unwrap().into_parts();
    let body = within(body.collect()).await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

/// A prefix no other test (or earlier run) uses on the shared server.
fn fresh_prefix(name: &str) -> String {
    format!("{}:", redis_server::fresh(name))
}

/// One instance's Redis limiter: its own connection, one shared prefix.
async fn redis_limiter(
    server: &Redis,
    prefix: &str,
    quota: &str,
    on_error: OnError,
) -> RedisLimiter<ConnectionManager> {
    let client = redis::Client::open(server.url()).unwrap();
    let conn = ConnectionManager::new(client).await.unwrap();
    let mut config = Config::new(Algorithm::TokenBucket(Quota::parse(quota).unwrap()));
    config.prefix = prefix.to_string();
    config.on_error = on_error;
    config.timeout = Duration::from_millis(500);
    RedisLimiter::new(config, conn).unwrap()
}

/// A directory of its own for shared-memory files, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("ratebound-http-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The outcomes and refusing policies `on_decision` was told, in order.
type Events = Arc<Mutex<Vec<(Outcome, Option<String>)>>>;

/// Ten requests for one key, alternating between the two instances: which
/// passed, and the refusals' headers.
async fn alternate(a: SocketAddr, b: SocketAddr, key: &str) -> (Vec<StatusCode>, Vec<HeaderMap>) {
    let c = client();
    let (mut statuses, mut refusals) = (Vec::new(), Vec::new());
    for i in 0..10 {
        let (status, headers, body) = fetch(&c, if i % 2 == 0 { a } else { b }, key).await;
        if status == StatusCode::TOO_MANY_REQUESTS {
            assert!(body.contains("rate limit exceeded"), "{body}");
            refusals.push(headers);
        }
        statuses.push(status);
    }
    (statuses, refusals)
}

/// Every refusal came from the remote policy `name`, with an honest wait.
fn refused_by(name: &str, refusals: &[HeaderMap]) {
    for h in refusals {
        let secs: u64 = header(h, "retry-after").parse().unwrap();
        // One token of 5/minute comes back in 12 s.
        assert!((1..=12).contains(&secs), "retry-after {secs}");
        assert!(
            header(h, "ratelimit").contains(&format!("\"{name}\";r=0;")),
            "{h:?}"
        );
        assert!(
            header(h, "ratelimit-policy").contains(&format!("\"{name}\";q=5;w=60")),
            "{h:?}"
        );
    }
}

#[tokio::test]
async fn a_global_limit_in_redis_is_shared_by_two_instances() {
    let server = Redis::start();
    let prefix = fresh_prefix("global");
    let events: Events = Arc::default();
    let mut addrs = Vec::new();
    for _ in 0..2 {
        let sink = events.clone();
        let layer = RateLimitLayer::builder()
            // A generous local policy: the global one is the limit.
            .policy("local", Quota::parse("100/s").unwrap())
            .remote(
                "global",
                redis_limiter(&server, &prefix, "5/minute burst 5", OnError::Closed).await,
            )
            .key(RequestKey::header("x-api-key").unwrap())
            .on_decision(move |e| {
                sink.lock()
                    .unwrap()
                    .push((e.outcome, e.policy.map(str::to_string)));
            })
            .build()
            .unwrap();
        addrs.push(serve(app(layer)).await);
    }
    let (statuses, refusals) = alternate(addrs[0], addrs[1], "alice").await;
    let passed = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    assert_eq!(passed, 5, "{statuses:?}");
    assert_eq!(refusals.len(), 5, "{statuses:?}");
    assert_eq!(&statuses[..5], &[StatusCode::OK; 5]);
    refused_by("global", &refusals);
    let events = events.lock().unwrap().clone();
    assert_eq!(events.len(), 10);
    assert!(events[..5].iter().all(|e| *e == (Outcome::Allowed, None)));
    assert!(
        events[5..]
            .iter()
            .all(|e| *e == (Outcome::Refused, Some("global".to_string()))),
        "{events:?}"
    );
    // The key in Redis is the identity in the policy's scope, as the Python
    // and Node middleware write it.
    let exists = |key: &str| redis_server::raw(server.port, &format!("EXISTS {key}"));
    assert_eq!(
        exists(&format!("{prefix}tb@global:key:alice")).as_deref(),
        Some(":1\r\n")
    );
    assert_eq!(
        exists(&format!("{prefix}tb:key:alice")).as_deref(),
        Some(":0\r\n")
    );
    // Another key has its own global limit; the admitted answers carry both
    // policies' fields.
    let (status, headers, _) = fetch(&client(), addrs[1], "bob").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        header(&headers, "ratelimit").contains("\"global\";r=4;"),
        "{headers:?}"
    );
    assert!(header(&headers, "ratelimit").contains("\"local\";"));
}

#[tokio::test]
async fn a_limit_in_shared_memory_is_shared_by_two_instances() {
    let dir = Scratch::new("shared");
    let path = dir.0.join("host.limit");
    let algorithm = KeyedAlgorithm::TokenBucket(Quota::parse("5/minute burst 5").unwrap());
    let mut addrs = Vec::new();
    for _ in 0..2 {
        // Each instance opens the file itself, as another process would.
        let table = SharedKeyedLimiter::open(&path, algorithm, 100).unwrap();
        let layer = RateLimitLayer::builder()
            .remote("host", table)
            .key(RequestKey::header("x-api-key").unwrap())
            .build()
            .unwrap();
        addrs.push(serve(app(layer)).await);
    }
    let (statuses, refusals) = alternate(addrs[0], addrs[1], "alice").await;
    assert_eq!(
        statuses.iter().filter(|s| **s == StatusCode::OK).count(),
        5,
        "{statuses:?}"
    );
    assert_eq!(&statuses[..5], &[StatusCode::OK; 5]);
    assert_eq!(refusals.len(), 5);
    refused_by("host", &refusals);
    // The table is keyed by the identity's bytes, as the Python and Node
    // middleware key it: the key header's value as `key:<value>`.
    let table = SharedKeyedLimiter::open(&path, algorithm, 100).unwrap();
    assert_eq!(table.available(ratebound::any::Key::Bytes(b"key:alice")), 0);
    assert_eq!(table.available(ratebound::any::Key::Bytes(b"key:bob")), 5);
}

#[tokio::test]
async fn a_full_shared_memory_table_answers_503_not_500() {
    let dir = Scratch::new("full");
    let algorithm = KeyedAlgorithm::TokenBucket(Quota::parse("1/hour burst 1").unwrap());
    // One key asked for: the smallest table, 64 slots.
    let table = SharedKeyedLimiter::open(dir.0.join("small.limit"), algorithm, 1).unwrap();
    let slots = table.slots();
    assert_eq!(slots, 64);
    let layer = RateLimitLayer::builder()
        .remote("host", table)
        .key(RequestKey::header("x-api-key").unwrap())
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    let c = client();
    for i in 0..slots {
        let (status, _, _) = fetch(&c, addr, &format!("k{i}")).await;
        assert_eq!(status, StatusCode::OK, "key {i} of {slots}");
    }
    // Every slot holds a key that is not fresh again for an hour.
    let (status, headers, body) = fetch(&c, addr, "one-too-many").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(header(&headers, "retry-after"), "1");
    assert!(body.contains("too many clients"), "{body}");
    // A key the table holds is still decided: refused, 429.
    assert_eq!(fetch(&c, addr, "k0").await.0, StatusCode::TOO_MANY_REQUESTS);
}

/// Under a concurrency cap of one, with a remote policy that waits for
/// Redis (the response future's own state) or answers at once (shared
/// memory): an admitted streaming response holds the place until its body
/// ends, and a remote refusal gives it back at once.
#[tokio::test]
async fn a_remote_refusal_gives_the_concurrency_place_back() {
    let server = Redis::start();
    let dir = Scratch::new("place");
    for remote in ["redis", "shm"] {
        let builder = RateLimitLayer::builder()
            .concurrency_limit(1)
            .key(RequestKey::header("x-api-key").unwrap());
        let layer = match remote {
            "redis" => builder.remote(
                "global",
                redis_limiter(
                    &server,
                    &fresh_prefix("place"),
                    "1/hour burst 1",
                    OnError::Closed,
                )
                .await,
            ),
            _ => {
                let algorithm = KeyedAlgorithm::TokenBucket(Quota::parse("1/hour").unwrap());
                let table = SharedKeyedLimiter::open(dir.0.join("place.limit"), algorithm, 10);
                builder.remote("host", table.unwrap())
            }
        }
        .build()
        .unwrap();
        let (app, gates) = gated_app("/", layer);
        let addr = serve(app).await;
        let c = client();
        let request = |key: &str| {
            Request::get(format!("http://{addr}/"))
                .header("x-api-key", key)
                .body(Empty::new())
                .unwrap()
        };
        // Admitted by the remote policy: its body streams, holding the place.
        let first = within(c.request(request("alice"))).await.unwrap();
        assert_eq!(first.status(), StatusCode::OK, "{remote}");
        assert_eq!(
            fetch(&c, addr, "bob").await.0,
            StatusCode::SERVICE_UNAVAILABLE,
            "{remote}: the one place is held by the stream"
        );
        gates.lock().unwrap().pop().unwrap().send(()).unwrap();
        let body = within(first.into_body().collect())
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(&body[..], b"done");
        // Refused by the remote policy, many times: each gives the place back.
        for _ in 0..5 {
            let (status, headers, _) = fetch(&c, addr, "alice").await;
            assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{remote}");
            assert!(header(&headers, "retry-after").parse::<u64>().unwrap() >= 1);
        }
        // So the place is free for another key.
        let second = within(c.request(request("carol"))).await.unwrap();
        assert_eq!(
            second.status(),
            StatusCode::OK,
            "{remote}: a refusal kept the place"
        );
        gates.lock().unwrap().pop().unwrap().send(()).unwrap();
        within(second.into_body().collect()).await.unwrap();
    }
}

/// Redis down: the limiter's own fail policy answers (`closed`: 429 with
/// the breaker's cool-down; `open`: admitted), never a 500.
#[tokio::test]
async fn redis_trouble_is_answered_by_the_limiters_fail_policy() {
    let mut server = Redis::start();
    let prefix = fresh_prefix("down");
    // A server per fail policy, its limiter the layer's one remote policy.
    let serve_with = |on_error| {
        let (server, prefix) = (&server, &prefix);
        async move {
            let limiter = redis_limiter(server, prefix, "5/minute burst 5", on_error).await;
            serve(app(RateLimitLayer::builder()
                .remote("global", limiter)
                .key(RequestKey::header("x-api-key").unwrap())
                .build()
                .unwrap()))
            .await
        }
    };
    let closed = serve_with(OnError::Closed).await;
    let open = serve_with(OnError::Open).await;
    let c = client();
    assert_eq!(fetch(&c, closed, "dave").await.0, StatusCode::OK);
    server.kill();
    for _ in 0..3 {
        let (status, headers, _) = fetch(&c, closed, "dave").await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&headers, "retry-after"), "1");
        assert_eq!(fetch(&c, open, "dave").await.0, StatusCode::OK);
    }
}

/// Two policies of one name — local and remote — are refused when the
/// layer is built (the name is the policy's identity: its RateLimit entry
/// and its Redis keys).
#[test]
fn a_remote_policy_needs_a_name_of_its_own() {
    let dir = Scratch::new("names");
    let algorithm = KeyedAlgorithm::TokenBucket(Quota::parse("5/minute").unwrap());
    let table = SharedKeyedLimiter::open(dir.0.join("names.limit"), algorithm, 10).unwrap();
    let err = RateLimitLayer::builder()
        .policy("global", Quota::parse("1/s").unwrap())
        .remote("global", table)
        .build()
        .err()
        .expect("two policies named global");
    assert!(
        err.to_string().contains("two policies have this name"),
        "{err}"
    );
}
