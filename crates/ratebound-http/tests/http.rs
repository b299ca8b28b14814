//! The layer over real HTTP: an axum server on 127.0.0.1 and hyper's client
//! (the response future, streaming bodies, route layers and the metrics
//! hook are `layer.rs`'s).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use ratebound::http::{Cidr, TrustedProxies};
use ratebound::{ManualClock, Quota};
use ratebound_http::{Builder, QuotaHeaders, RateLimitLayer, RefusalBody, RequestKey};

mod over_http;
mod serve;
use over_http::{HttpClient, app, client, get_with, header};
use serve::serve;

/// The `x-api-key` header of the key `k`.
const KEY: &[(&str, &[u8])] = &[("x-api-key", b"k")];

/// Serves `builder`'s layer keyed by `x-api-key` on a fresh manual clock:
/// its address, a client and the clock.
async fn serve_keyed(builder: Builder) -> (SocketAddr, HttpClient, ManualClock) {
    let clock = ManualClock::new();
    let layer = builder
        .key(RequestKey::header("x-api-key").unwrap())
        .clock(clock.clone())
        .build()
        .unwrap();
    (serve(app(layer)).await, client(), clock)
}

#[tokio::test]
async fn design_scenario_2_over_http_and_retry_after_is_honest() {
    let (addr, c, clock) = serve_keyed(
        RateLimitLayer::builder().policy("default", Quota::parse("1/s burst 2").unwrap()),
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
        let (addr, c, clock) = serve_keyed(RateLimitLayer::builder().policy("p", quota)).await;
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
    let (addr, c, clock) = serve_keyed(
        RateLimitLayer::builder()
            .policy("daily", Quota::parse("1/hour burst 5").unwrap())
            .policy("rate", Quota::parse("2/s burst 2").unwrap()),
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
    let (addr, c, _clock) = serve_keyed(
        RateLimitLayer::builder()
            .policy("burst", Quota::parse("10/s burst 10").unwrap())
            .policy_with(
                "daily",
                KeyedAlgorithm::FixedWindow {
                    limit: 3,
                    window: Duration::from_secs(86_400),
                },
            ),
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
