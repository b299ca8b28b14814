//! The layer over real HTTP: an axum server on 127.0.0.1 and hyper's client.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use ratebound::http::{Cidr, TrustedProxies};
use ratebound::{ManualClock, Quota};
use ratebound_http::{Builder, QuotaHeaders, RateLimitLayer, RefusalBody, RequestKey};

mod gated;
mod serve;
use gated::gated_app;
use serve::serve;

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn get_with(
    client: &HttpClient,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &[u8])],
) -> (StatusCode, HeaderMap, String) {
    let mut request = Request::get(format!("http://{addr}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client
        .request(request.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

/// The `x-api-key` header of the key `k`.
const KEY: &[(&str, &[u8])] = &[("x-api-key", b"k")];

/// Serves `builder`'s layer keyed by `x-api-key` on `clock`: its address
/// and a client.
async fn serve_keyed(builder: Builder, clock: &ManualClock) -> (SocketAddr, HttpClient) {
    let layer = builder
        .key(RequestKey::header("x-api-key").unwrap())
        .clock(clock.clone())
        .build()
        .unwrap();
    (serve(app(layer)).await, client())
}

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/health", get(|| async { "healthy" }))
        .layer(layer)
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers.get(name).map_or("", |v| v.to_str().unwrap())
}

#[tokio::test]
async fn design_scenario_2_over_http_and_retry_after_is_honest() {
    let clock = ManualClock::new();
    let (addr, c) = serve_keyed(
        RateLimitLayer::builder().policy("default", Quota::parse("1/s burst 2").unwrap()),
        &clock,
    )
    .await;
    let alice: &[(&str, &[u8])] = &[("x-api-key", b"alice")];
    let bob: &[(&str, &[u8])] = &[("x-api-key", b"bob")];

    let (s1, h1, _) = get_with(&c, addr, "/", alice).await;
    let (s2, _, _) = get_with(&c, addr, "/", alice).await;
    let (s3, h3, body) = get_with(&c, addr, "/", alice).await;
    let (s4, _, _) = get_with(&c, addr, "/", bob).await;
    assert_eq!(
        [s1, s2, s3, s4],
        [200, 200, 429, 200].map(|s| StatusCode::from_u16(s).unwrap())
    );
    assert_eq!(header(&h3, "retry-after"), "1");
    assert!(body.contains("retry in 1 s"), "{body}");
    assert_eq!(header(&h1, "ratelimit-policy"), r#""default";q=2;w=2"#);
    assert_eq!(header(&h1, "ratelimit"), r#""default";r=1;t=1"#);
    assert_eq!(header(&h3, "ratelimit"), r#""default";r=0;t=2"#);

    // Waiting exactly Retry-After seconds is enough.
    clock.advance(Duration::from_secs(1));
    let (s5, _, _) = get_with(&c, addr, "/", alice).await;
    assert_eq!(s5, StatusCode::OK);
}

#[tokio::test]
async fn retry_after_is_never_earlier_than_the_exact_wait_at_sub_second_rates() {
    for (rate, burst) in [(0.3, 1u64), (2.5, 2)] {
        let quota = Quota::per_second(rate).unwrap().with_burst(burst).unwrap();
        let clock = ManualClock::new();
        let (addr, c) = serve_keyed(RateLimitLayer::builder().policy("p", quota), &clock).await;
        for round in 0..5 {
            // Spend the burst, then read the refusal.
            let mut refusal = None;
            for _ in 0..=burst {
                let (status, headers, _) = get_with(&c, addr, "/", KEY).await;
                if status == StatusCode::TOO_MANY_REQUESTS {
                    refusal = Some(headers);
                    break;
                }
            }
            let headers = refusal.unwrap_or_else(|| panic!("{rate}/s round {round}: no refusal"));
            let secs: u64 = header(&headers, "retry-after").parse().unwrap();
            // The exact wait for one token from empty is T; the header must
            // not be earlier, and is at most a second later.
            let exact = quota.emission_interval();
            assert!(
                Duration::from_secs(secs) >= exact,
                "{rate}/s: {secs} s < {exact:?}"
            );
            assert!(Duration::from_secs(secs) < exact + Duration::from_secs(1));
            clock.advance(Duration::from_secs(secs));
            let (status, _, _) = get_with(&c, addr, "/", KEY).await;
            assert_eq!(
                status,
                StatusCode::OK,
                "{rate}/s round {round}: refused after Retry-After"
            );
            clock.advance(Duration::from_secs(60));
        }
    }
}

#[tokio::test]
async fn forwarding_headers_count_only_from_trusted_proxies() {
    let quota = Quota::parse("1/hour burst 1").unwrap();
    let spoof1: &[(&str, &[u8])] = &[("x-forwarded-for", b"203.0.113.1")];
    let spoof2: &[(&str, &[u8])] = &[("x-forwarded-for", b"203.0.113.2")];

    // Untrusted (the default): the header is ignored, both share the peer's bucket.
    let untrusted = RateLimitLayer::builder()
        .policy("p", quota)
        .build()
        .unwrap();
    let addr = serve(app(untrusted)).await;
    let c = client();
    assert_eq!(get_with(&c, addr, "/", spoof1).await.0, StatusCode::OK);
    assert_eq!(
        get_with(&c, addr, "/", spoof2).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );

    // Loopback trusted as a proxy: each forwarded client has its own bucket,
    // and IPv6 clients are grouped by /64.
    let trusted = RateLimitLayer::builder()
        .policy("p", quota)
        .trusted_proxies(TrustedProxies::Cidrs(vec![
            Cidr::parse("127.0.0.0/8").unwrap(),
        ]))
        .build()
        .unwrap();
    let addr = serve(app(trusted)).await;
    assert_eq!(get_with(&c, addr, "/", spoof1).await.0, StatusCode::OK);
    assert_eq!(get_with(&c, addr, "/", spoof2).await.0, StatusCode::OK);
    assert_eq!(
        get_with(&c, addr, "/", spoof1).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    let v6a: &[(&str, &[u8])] = &[("x-forwarded-for", b"2001:db8:1:2::a")];
    let v6b: &[(&str, &[u8])] = &[("x-forwarded-for", b"2001:db8:1:2:ffff::b")];
    let v6c: &[(&str, &[u8])] = &[("x-forwarded-for", b"2001:db8:1:3::a")];
    assert_eq!(get_with(&c, addr, "/", v6a).await.0, StatusCode::OK);
    assert_eq!(
        get_with(&c, addr, "/", v6b).await.0,
        StatusCode::TOO_MANY_REQUESTS,
        "same /64"
    );
    assert_eq!(
        get_with(&c, addr, "/", v6c).await.0,
        StatusCode::OK,
        "another /64"
    );
}

#[tokio::test]
async fn several_policies_lose_no_tokens_when_one_refuses() {
    let clock = ManualClock::new();
    let (addr, c) = serve_keyed(
        RateLimitLayer::builder()
            .policy("daily", Quota::parse("1/hour burst 5").unwrap())
            .policy("rate", Quota::parse("2/s burst 2").unwrap()),
        &clock,
    )
    .await;
    for _ in 0..2 {
        assert_eq!(get_with(&c, addr, "/", KEY).await.0, StatusCode::OK);
    }
    // "rate" refuses five times; "daily" must give each token back.
    for _ in 0..5 {
        let (status, headers, _) = get_with(&c, addr, "/", KEY).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&headers, "retry-after"), "1");
    }
    clock.advance(Duration::from_secs(1));
    let (status, _, _) = get_with(&c, addr, "/", KEY).await;
    assert_eq!(status, StatusCode::OK);
    let (status, headers, _) = get_with(&c, addr, "/", KEY).await;
    assert_eq!(status, StatusCode::OK);
    // 5 − 4 admitted = 1 left of the daily burst: nothing was lost.
    assert!(
        header(&headers, "ratelimit").starts_with(r#""daily";r=1;"#),
        "{headers:?}"
    );
    assert_eq!(
        header(&headers, "ratelimit-policy"),
        r#""daily";q=5;w=18000, "rate";q=2;w=1"#
    );
}

#[tokio::test]
async fn a_saturated_service_sheds_at_once_and_lets_critical_requests_through() {
    // The handler holds its place until the test opens the gate, so "at
    // once" is structural, not a duration: every refusal must have
    // arrived while the four admitted requests are still inside (a refusal
    // that waited for a place would wait for ever, and the test would
    // fail at the generous bound below, never on a loaded machine's timing).
    let in_flight = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (open, gate) = tokio::sync::watch::channel(false);
    let (f, p) = (in_flight.clone(), peak.clone());
    let layer = RateLimitLayer::builder()
        .concurrency_limit(4)
        .critical(|parts| parts.headers.contains_key("x-critical"))
        .build()
        .unwrap();
    let app = Router::new()
        .route(
            "/",
            get(move || {
                let (f, p, mut gate) = (f.clone(), p.clone(), gate.clone());
                async move {
                    let now = f.fetch_add(1, Ordering::SeqCst) + 1;
                    p.fetch_max(now, Ordering::SeqCst);
                    gate.wait_for(|open| *open).await.unwrap();
                    f.fetch_sub(1, Ordering::SeqCst);
                    "slow"
                }
            }),
        )
        .layer(layer);
    let addr = serve(app).await;
    let c = client();
    let (done, mut finished) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..50 {
        let (c, done) = (c.clone(), done.clone());
        tokio::spawn(async move {
            let (status, headers, _) = get_with(&c, addr, "/", &[]).await;
            let _ = done.send((status, header(&headers, "retry-after").to_string()));
        });
    }
    // Each wait below has a bound only against a hang (a refusal that
    // waited for a place would never come).
    const HANG: Duration = Duration::from_secs(30);
    let mut shed = 0;
    while shed < 46 {
        let (status, retry_after) = tokio::time::timeout(HANG, finished.recv())
            .await
            .expect("a refusal within 30 s while the handler holds its places")
            .expect("a task's answer");
        assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "only refusals end while the gate is shut"
        );
        assert_eq!(retry_after, "1");
        shed += 1;
    }
    assert_eq!(in_flight.load(Ordering::SeqCst), 4, "exactly the cap runs");
    // While the four hold their places, a critical request still enters.
    let critical = {
        let c = c.clone();
        tokio::spawn(async move { get_with(&c, addr, "/", &[("x-critical", b"1")]).await.0 })
    };
    tokio::time::timeout(HANG, async {
        while in_flight.load(Ordering::SeqCst) < 5 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the critical request inside within 30 s");
    open.send(true).unwrap();
    assert_eq!(critical.await.unwrap(), StatusCode::OK);
    for _ in 0..4 {
        let (status, _) = tokio::time::timeout(HANG, finished.recv())
            .await
            .expect("an admitted request within 30 s of the gate opening")
            .expect("a task's answer");
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!(peak.load(Ordering::SeqCst), 5, "4 + the critical one");
}

#[tokio::test]
async fn malformed_keys_get_a_defined_answer_and_exemptions_bypass() {
    let layer = RateLimitLayer::builder()
        .policy("p", Quota::parse("1/hour burst 1").unwrap())
        .key(RequestKey::header("x-api-key").unwrap())
        .exempt(|parts| parts.uri.path() == "/health")
        .refusal_body(RefusalBody::ProblemJson)
        .quota_headers(QuotaHeaders::Legacy)
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    let c = client();
    let huge = vec![b'a'; 16 * 1024];
    let binary: &[u8] = &[0xff, 0xfe, b'x'];
    for key in [&huge[..], binary, b"  spaces  "] {
        let headers: &[(&str, &[u8])] = &[("x-api-key", key)];
        assert_eq!(get_with(&c, addr, "/", headers).await.0, StatusCode::OK);
        let (status, h, body) = get_with(&c, addr, "/", headers).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&h, "content-type"), "application/problem+json");
        assert!(body.contains("\"status\":429"), "{body}");
        assert_eq!(header(&h, "x-ratelimit-limit"), "1");
        assert_eq!(header(&h, "x-ratelimit-remaining"), "0");
    }
    // Two long keys that differ only at the end are different keys.
    let mut other = huge.clone();
    *other.last_mut().unwrap() = b'b';
    assert_eq!(
        get_with(&c, addr, "/", &[("x-api-key", &other[..])])
            .await
            .0,
        StatusCode::OK
    );
    for _ in 0..5 {
        assert_eq!(
            get_with(&c, addr, "/health", &[("x-api-key", binary)])
                .await
                .0,
            StatusCode::OK
        );
    }
    assert!(
        RateLimitLayer::builder().build().is_err(),
        "no policy and no cap"
    );
    let err = RateLimitLayer::builder()
        .concurrency_limit(0)
        .build()
        .err()
        .unwrap();
    assert_eq!(err.code(), "invalid_limit");
    assert!(err.to_string().contains("invalid limit 0"), "{err}");
    assert_eq!(
        RequestKey::header("bad header").err().unwrap().code(),
        "parse_error"
    );
}

#[tokio::test]
async fn a_request_without_a_key_follows_the_policy() {
    use ratebound_http::MissingKey;
    let quota = Quota::parse("1/hour burst 1").unwrap();
    let c = client();
    let none: &[(&str, &[u8])] = &[];
    let build = |missing| {
        RateLimitLayer::builder()
            .policy("p", quota)
            .key(RequestKey::header("x-api-key").unwrap())
            .missing_key(missing)
            .build()
            .unwrap()
    };
    // Reject: 401, and nothing is counted.
    let addr = serve(app(build(MissingKey::Reject(401)))).await;
    for _ in 0..3 {
        assert_eq!(
            get_with(&c, addr, "/", none).await.0,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(get_with(&c, addr, "/", KEY).await.0, StatusCode::OK);
    // Fall back to the IP (the default): keyless requests get the peer's bucket,
    // separate from the keyed one.
    let addr = serve(app(build(MissingKey::FallBackToIp))).await;
    assert_eq!(get_with(&c, addr, "/", none).await.0, StatusCode::OK);
    assert_eq!(get_with(&c, addr, "/", KEY).await.0, StatusCode::OK);
    assert_eq!(
        get_with(&c, addr, "/", none).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    // An empty header is no key either.
    assert_eq!(
        get_with(&c, addr, "/", &[("x-api-key", b"")]).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn window_policies_work_beside_buckets() {
    use ratebound::KeyedAlgorithm;
    let clock = ManualClock::new();
    let (addr, c) = serve_keyed(
        RateLimitLayer::builder()
            .policy("burst", Quota::parse("10/s burst 10").unwrap())
            .policy_with(
                "daily",
                KeyedAlgorithm::FixedWindow {
                    limit: 3,
                    window: Duration::from_secs(86_400),
                },
            ),
        &clock,
    )
    .await;
    for _ in 0..3 {
        assert_eq!(get_with(&c, addr, "/", KEY).await.0, StatusCode::OK);
    }
    let (status, headers, _) = get_with(&c, addr, "/", KEY).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&headers, "retry-after"), "86400");
    assert_eq!(
        header(&headers, "ratelimit-policy"),
        r#""burst";q=10;w=1, "daily";q=3;w=86400"#
    );
}

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
