//! The layer's own behaviour over real HTTP and without it: a response
//! future that is ready at once, a streaming response in flight until its
//! body ends, per-route layers, and the metrics hook.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use ratebound::{ManualClock, Quota};
use ratebound_http::{RateLimitLayer, RequestKey};

mod gated;
mod over_http;
mod serve;
use gated::gated_app;
use over_http::{app, client, get_with, header};
use serve::serve;

/// The response future is not boxed: a refusal is ready at once, and one
/// polled again after it finished answers an empty 500 instead of panicking.
#[test]
fn the_response_future_is_ready_at_once_and_never_panics() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    use tower_layer::Layer;
    use tower_service::Service;

    let layer = RateLimitLayer::builder()
        .policy("p", Quota::parse("1/hour burst 1").unwrap())
        .key(RequestKey::header("x-api-key").unwrap())
        .missing_key(ratebound_http::MissingKey::Reject(401))
        .build()
        .unwrap();
    let inner = tower_service_fn(|_req: Request<()>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(Bytes::from_static(b"ok")))
    });
    let mut svc = layer.layer(inner);
    let mut future = std::pin::pin!(svc.call(Request::new(())));
    let mut cx = Context::from_waker(Waker::noop());
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(Ok(r)) => assert_eq!(r.status(), StatusCode::UNAUTHORIZED),
        other => panic!("a refusal is ready at once: {:?}", other.is_ready()),
    }
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(Ok(r)) => assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR),
        other => panic!("polled again: {:?}", other.is_ready()),
    }
}

/// A `Service` from an async closure, for the test above.
fn tower_service_fn<F, Fut>(f: F) -> ServiceFn<F>
where
    F: FnMut(Request<()>) -> Fut,
{
    ServiceFn(f)
}

#[derive(Clone)]
struct ServiceFn<F>(F);

impl<F, Fut, T, E> tower_service::Service<Request<()>> for ServiceFn<F>
where
    F: FnMut(Request<()>) -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    type Response = T;
    type Error = E;
    type Future = Fut;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), E>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<()>) -> Fut {
        (self.0)(req)
    }
}

/// A streaming response holds its concurrency place until its body has
/// been sent, as in the Python and Node middleware — not only until the
/// handler has returned the response head.
#[tokio::test]
async fn a_streaming_response_is_in_flight_until_its_body_ends() {
    let layer = RateLimitLayer::builder()
        .concurrency_limit(1)
        .build()
        .unwrap();
    let (app, gates) = gated_app("/stream", layer);
    let addr = serve(app).await;
    let c = client();
    let uri = || format!("http://{addr}/stream");
    // The first response's head arrives; its body waits for the gate.
    let first = c
        .request(Request::get(uri()).body(Empty::new()).unwrap())
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    // Still streaming: the one place is taken (only the head is read, and
    // within a bound: an admitted request's body would wait forever).
    let second = tokio::time::timeout(
        Duration::from_secs(10),
        c.request(Request::get(uri()).body(Empty::new()).unwrap()),
    )
    .await
    .expect("an answer")
    .unwrap();
    assert_eq!(second.status(), StatusCode::SERVICE_UNAVAILABLE);
    // The body ends; the place is free again.
    gates.lock().unwrap().pop().unwrap().send(()).unwrap();
    let body = tokio::time::timeout(Duration::from_secs(10), first.into_body().collect())
        .await
        .expect("the body ends")
        .unwrap()
        .to_bytes();
    assert_eq!(&body[..], b"done");
    let third = tokio::spawn({
        let c = c.clone();
        async move { get_with(&c, addr, "/stream", &[]).await.0 }
    });
    // Let the third request's body finish too.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(tx) = gates.lock().unwrap().pop() {
            tx.send(()).unwrap();
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the third request never reached the handler"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let third = tokio::time::timeout(Duration::from_secs(10), third)
        .await
        .expect("an answer");
    assert_eq!(third.unwrap(), StatusCode::OK);
}

/// Per-route limits the axum way: `route_layer` on a router of the limited
/// routes, merged with unlimited ones; one layer on two routes is one
/// shared limit.
#[tokio::test]
async fn route_layers_limit_each_route_and_share_one_limit_between_two() {
    use axum::routing::post;
    let clock = ManualClock::new();
    let per_route = |quota: &str, key: Option<&str>| {
        let mut b = RateLimitLayer::builder()
            .policy("default", Quota::parse(quota).unwrap())
            .clock(clock.clone());
        if let Some(h) = key {
            b = b.key(RequestKey::header(h).unwrap());
        }
        b.build().unwrap()
    };
    let shared = per_route("1/s burst 2", None);
    let app = Router::new()
        .merge(
            Router::new()
                .route("/login", post(|| async { "ok" }))
                .route_layer(per_route("5/minute", None)),
        )
        .merge(
            Router::new()
                .route("/api", get(|| async { "ok" }))
                .route_layer(per_route("3/s", Some("x-api-key"))),
        )
        .merge(
            Router::new()
                .route("/a", get(|| async { "a" }))
                .route("/b", get(|| async { "b" }))
                .route_layer(shared),
        )
        .route("/health", get(|| async { "healthy" }));
    let addr = serve(app).await;
    let client = client();
    let post_login = || async {
        let request = Request::post(format!("http://{addr}/login"))
            .body(Empty::<Bytes>::new())
            .unwrap();
        let response = client.request(request).await.unwrap();
        (response.status(), response.headers().clone())
    };
    for i in 0..5u64 {
        let (status, headers) = post_login().await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            header(&headers, "ratelimit"),
            format!("\"default\";r={};t={}", 4 - i, 12 * (i + 1))
        );
    }
    let (status, headers) = post_login().await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&headers, "retry-after"), "12");
    for _ in 0..3 {
        let (s, ..) = get_with(&client, addr, "/api", &[("x-api-key", b"alice")]).await;
        assert_eq!(s, StatusCode::OK);
    }
    let (s, ..) = get_with(&client, addr, "/api", &[("x-api-key", b"alice")]).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    let (s, ..) = get_with(&client, addr, "/api", &[("x-api-key", b"bob")]).await;
    assert_eq!(s, StatusCode::OK);
    for _ in 0..20 {
        let (s, h, _) = get_with(&client, addr, "/health", &[]).await;
        assert_eq!(s, StatusCode::OK);
        assert!(h.get("ratelimit").is_none());
    }
    let mut shared_statuses = Vec::new();
    for path in ["/a", "/b", "/a", "/b"] {
        shared_statuses.push(get_with(&client, addr, path, &[]).await.0.as_u16());
    }
    assert_eq!(shared_statuses, [200, 200, 429, 429]);
    clock.advance(Duration::from_secs(12));
    assert_eq!(post_login().await.0, StatusCode::OK);
}

/// Without a label, the hook is told the route template axum matched —
/// the same default as the Python and Node front doors.
#[tokio::test]
async fn on_decision_labels_requests_with_the_matched_route() {
    use std::sync::Mutex;
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let sink = seen.clone();
    let layer = RateLimitLayer::builder()
        .policy("default", Quota::parse("100/s").unwrap())
        .on_decision(move |e| sink.lock().unwrap().push(e.label.map(str::to_string)))
        .build()
        .unwrap();
    let app = Router::new()
        .route("/items/{id}", get(|| async { "item" }))
        .route("/", get(|| async { "home" }))
        .layer(layer);
    let addr = serve(app).await;
    let client = client();
    for path in ["/items/7", "/items/8", "/"] {
        assert_eq!(get_with(&client, addr, path, &[]).await.0, StatusCode::OK);
    }
    assert_eq!(
        *seen.lock().unwrap(),
        [Some("/items/{id}"), Some("/items/{id}"), Some("/")].map(|l| l.map(str::to_string))
    );
}

/// The metrics hook: told of each limited request (not of exempt ones) with
/// the outcome, the refusing policy, every policy and the label.
#[tokio::test]
async fn on_decision_reports_each_limited_request() {
    use ratebound::KeyedAlgorithm;
    use ratebound_http::Outcome;
    use std::sync::Mutex;
    type Seen = Vec<(Outcome, Option<String>, Vec<String>, Option<String>, String)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let sink = seen.clone();
    let layer = RateLimitLayer::builder()
        .policy("burst", Quota::parse("100/s").unwrap())
        .policy_with(
            "tiny",
            KeyedAlgorithm::FixedWindow {
                limit: 1,
                window: Duration::from_secs(60),
            },
        )
        .key(RequestKey::header("x-api-key").unwrap())
        .exempt(|p| p.uri.path() == "/health")
        .label("api")
        .on_decision(move |e| {
            sink.lock().unwrap().push((
                e.outcome,
                e.policy.map(str::to_string),
                e.policies.to_vec(),
                e.label.map(str::to_string),
                e.request.uri.path().to_string(),
            ));
        })
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    let client = client();
    assert_eq!(
        get_with(&client, addr, "/", &[("x-api-key", b"a")]).await.0,
        StatusCode::OK
    );
    assert_eq!(
        get_with(&client, addr, "/", &[("x-api-key", b"a")]).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        get_with(&client, addr, "/health", &[]).await.0,
        StatusCode::OK
    );
    let names = vec!["burst".to_string(), "tiny".to_string()];
    let label = Some("api".to_string());
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            (
                Outcome::Allowed,
                None,
                names.clone(),
                label.clone(),
                "/".to_string()
            ),
            (
                Outcome::Refused,
                Some("tiny".to_string()),
                names,
                label,
                "/".to_string()
            ),
        ]
    );
}
