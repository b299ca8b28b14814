//! gRPC over real HTTP/2 on 127.0.0.1: a tonic server (the standard health
//! service) behind the layer, called with tonic's client. A refused call is
//! `RESOURCE_EXHAUSTED` with the wait in a `google.rpc.RetryInfo` detail,
//! decoded here with tonic-types — not an HTTP 429, which a gRPC client
//! cannot read.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use ratebound::{ManualClock, Quota};
use ratebound_http::{RateLimitLayer, RequestKey};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Code, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::StatusExt;
use tower_service::Service;

/// A tonic server with the health service behind `layer`, on a free port.
async fn serve(layer: RateLimitLayer) -> SocketAddr {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        // The reporter must live as long as the server.
        let _reporter = reporter;
        Server::builder()
            .layer(layer)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .unwrap();
    });
    addr
}

async fn client(addr: SocketAddr) -> HealthClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

async fn check(client: &mut HealthClient<Channel>, key: Option<&str>) -> Result<(), Status> {
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: String::new(),
    });
    if let Some(key) = key {
        request
            .metadata_mut()
            .insert("x-api-key", key.parse().unwrap());
    }
    client.check(request).await.map(|_| ())
}

/// The policy `calls` of `quota` per `x-api-key`, on `clock`.
fn keyed_layer(quota: &str, clock: &ManualClock) -> RateLimitLayer {
    RateLimitLayer::builder()
        .policy("calls", Quota::parse(quota).unwrap())
        .key(RequestKey::header("x-api-key").unwrap())
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_refused_call_is_resource_exhausted_with_retry_info() {
    let clock = ManualClock::new();
    let addr = serve(keyed_layer("2/minute", &clock)).await;
    let mut c = client(addr).await;

    check(&mut c, Some("alice")).await.unwrap();
    check(&mut c, Some("alice")).await.unwrap();
    let status = check(&mut c, Some("alice")).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(status.message(), "rate limit exceeded; retry in 30 s");
    // One call every 30 s: the wait is 30 s, in the status details.
    let retry = status.get_details_retry_info().expect("a RetryInfo detail");
    assert_eq!(retry.retry_delay, Some(Duration::from_secs(30)));
    // The same numbers as metadata, for clients that read headers.
    let metadata = status.metadata();
    assert_eq!(metadata.get("retry-after").unwrap(), "30");
    assert_eq!(metadata.get("ratelimit").unwrap(), "\"calls\";r=0;t=60");
    assert_eq!(
        metadata.get("ratelimit-policy").unwrap(),
        "\"calls\";q=2;w=60"
    );

    // Another key is not affected; alice gets through once the wait is over.
    check(&mut c, Some("bob")).await.unwrap();
    clock.advance(Duration::from_secs(29));
    let early = check(&mut c, Some("alice")).await.unwrap_err();
    assert_eq!(early.code(), Code::ResourceExhausted);
    assert_eq!(
        early.get_details_retry_info().unwrap().retry_delay,
        Some(Duration::from_secs(1))
    );
    clock.advance(Duration::from_secs(1));
    check(&mut c, Some("alice")).await.unwrap();
}

#[tokio::test]
async fn admitted_calls_carry_the_quota_fields() {
    let clock = ManualClock::new();
    let addr = serve(keyed_layer("5/s", &clock)).await;
    let mut c = client(addr).await;
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: String::new(),
    });
    request
        .metadata_mut()
        .insert("x-api-key", "k".parse().unwrap());
    let response = c.check(request).await.unwrap();
    assert_eq!(
        response.metadata().get("ratelimit").unwrap(),
        "\"calls\";r=4;t=1"
    );
    assert_eq!(response.into_inner().status, 1, "SERVING");
}

/// The peer address comes from tonic's own connection info: behind a
/// trusted proxy on 127.0.0.1, each forwarded client has its own limit —
/// which needs the peer to be known (an unknown peer is not trusted, and
/// every call would share one limit).
#[cfg(feature = "tonic")]
#[tokio::test]
async fn the_peer_address_of_a_tonic_connection_is_read() {
    use ratebound::http::{Cidr, TrustedProxies};
    let outcomes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = outcomes.clone();
    let layer = RateLimitLayer::builder()
        .policy("per-ip", Quota::parse("1/minute").unwrap())
        .trusted_proxies(TrustedProxies::Cidrs(vec![
            Cidr::parse("127.0.0.1/32").unwrap(),
        ]))
        .clock(ManualClock::new())
        .on_decision(move |e| seen.lock().unwrap().push(e.outcome.as_str()))
        .build()
        .unwrap();
    let addr = serve(layer).await;
    let mut c = client(addr).await;
    let mut call = async |client_ip: &str| {
        let mut request = tonic::Request::new(HealthCheckRequest {
            service: String::new(),
        });
        request
            .metadata_mut()
            .insert("x-forwarded-for", client_ip.parse().unwrap());
        c.check(request).await.map(|_| ())
    };
    call("10.0.0.1").await.unwrap();
    call("10.0.0.2").await.unwrap();
    let status = call("10.0.0.1").await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(*outcomes.lock().unwrap(), ["allowed", "allowed", "refused"]);
}

/// Drives a future that is expected to be ready (or pending) at once.
fn poll_once<F: Future>(future: F) -> Poll<F::Output> {
    pin!(future).poll(&mut Context::from_waker(Waker::noop()))
}

/// A service that never answers: holds its concurrency place.
#[derive(Clone)]
struct Stuck;

impl Service<Request<()>> for Stuck {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = std::future::Pending<Result<Response<String>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        std::future::pending()
    }
}

#[test]
fn a_shed_grpc_call_is_unavailable_and_an_http_one_503() {
    let layer = RateLimitLayer::builder()
        .policy("calls", Quota::parse("100/s").unwrap())
        .key(RequestKey::header("x-api-key").unwrap())
        .concurrency_limit(1)
        .build()
        .unwrap();
    let mut svc = tower_layer::Layer::layer(&layer, Stuck);
    let request = |grpc: bool| {
        let mut r = Request::builder().header("x-api-key", "k");
        if grpc {
            r = r.header("content-type", "application/grpc+proto");
        }
        r.body(()).unwrap()
    };
    // The first call takes the only place and keeps it.
    let first = svc.call(request(true));
    let mut first = Box::pin(first);
    assert!(poll_once(first.as_mut()).is_pending());

    let Poll::Ready(Ok(shed)) = poll_once(svc.call(request(true))) else {
        panic!("a shed call is answered at once");
    };
    assert_eq!(shed.status(), 200, "gRPC carries its status in headers");
    assert_eq!(shed.headers()["grpc-status"], "14", "UNAVAILABLE");
    assert_eq!(shed.headers()["content-type"], "application/grpc");
    assert!(http_body::Body::is_end_stream(shed.body()), "no body");
    let status = Status::from_header_map(shed.headers()).expect("a gRPC status");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(status.message(), "server busy; try again shortly");
    assert_eq!(
        status.get_details_retry_info().unwrap().retry_delay,
        Some(Duration::from_secs(1))
    );

    let Poll::Ready(Ok(http)) = poll_once(svc.call(request(false))) else {
        panic!("a shed request is answered at once");
    };
    assert_eq!(http.status(), 503);
    assert!(http.headers().get("grpc-status").is_none());
    let mut body = pin!(http.into_body());
    let Poll::Ready(Some(Ok(frame))) = poll_once(std::future::poll_fn(|cx| {
        http_body::Body::poll_frame(body.as_mut(), cx)
    })) else {
        panic!("a body frame");
    };
    assert_eq!(
        frame.into_data().unwrap(),
        Bytes::from_static(b"server busy; try again shortly\n")
    );
}
