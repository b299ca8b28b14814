//! The tower layer over a hyper-util client and a tonic `Channel`, against
//! a partner on 127.0.0.1: a 503 retried once, a 429 pausing the limiter,
//! gRPC's trailers-only `RESOURCE_EXHAUSTED` with a `google.rpc.RetryInfo`
//! (built with tonic-types) pausing for its delay and retried.
//!
//! In tokio's paused time, as reqwest.rs: a wait is the `waited` event's
//! duration (tokio's clock), exact; the partner's log only bounds a gap
//! from below (a paused clock may jump while a request is in flight).

mod support;

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use ratebound::{Quota, TokenBucket, TokioClock};
use ratebound_client::{OutboundBuilder, OutboundLayer, OutboundService};
use support::{Events, Hit, Partner, first_then, grpc_ok, grpc_refusal, reply};
use tonic_types::{ErrorDetails, StatusExt};
use tower_layer::Layer;
use tower_service::Service;

type Hyper = Client<HttpConnector, Full<Bytes>>;

fn hyper_client() -> Hyper {
    Client::builder(TokioExecutor::new()).build_http()
}

fn bucket(quota: &str) -> TokenBucket<TokioClock> {
    TokenBucket::with_clock(Quota::parse(quota).expect("quota"), TokioClock::new())
}

/// The layer's builder over a bucket of 100/s burst 10, telling `events`.
/// A layer over a bucket of 100/s telling `events`; learning off: these
/// tests check a pause's arithmetic at the configured rate, exactly (the
/// reqwest tests and `learn.rs` cover learning, on by default, through the
/// same loop).
fn told(events: &Events) -> OutboundBuilder<http::request::Parts> {
    OutboundLayer::builder(bucket("100/s burst 10"))
        .adaptive(false)
        .on_decision(events.hook())
}

/// The last `waited` event's duration: how long the last sending waited.
fn last_wait(events: &Events) -> Option<Duration> {
    events.all().iter().rev().find(|e| e.0 == "waited")?.2
}

/// Makes `service` ready and calls it (tower's `ServiceExt::oneshot`).
async fn call<S: Service<R>, R>(service: &mut S, request: R) -> Result<S::Response, S::Error> {
    std::future::poll_fn(|cx| service.poll_ready(cx)).await?;
    service.call(request).await
}

fn get(url: &str) -> Request<Full<Bytes>> {
    Request::get(url).body(Full::default()).expect("request")
}

/// A gRPC-style unary call (a POST of one framed message).
fn grpc_call(url: &str) -> Request<Full<Bytes>> {
    Request::post(url)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from_static(&[0, 0, 0, 0, 0])))
        .expect("request")
}

/// `RESOURCE_EXHAUSTED` asking for `delay`, as tonic-types writes it.
fn exhausted(delay: Duration) -> tonic::Status {
    tonic::Status::with_error_details(
        tonic::Code::ResourceExhausted,
        "slow down",
        ErrorDetails::with_retry_info(Some(delay)),
    )
}

/// A gRPC health service whose first call is refused `RESOURCE_EXHAUSTED`
/// asking for `delay`; every later one answers SERVING.
async fn exhausted_once(delay: Duration) -> Partner {
    Partner::start(first_then(
        move || grpc_refusal(exhausted(delay)),
        || grpc_ok(&[0x08, 0x01]), // HealthCheckResponse { status: SERVING }
    ))
    .await
}

#[tokio::test(start_paused = true)]
async fn a_503_then_200_is_retried_exactly_once_over_hyper_util() {
    let partner =
        Partner::start(|hit: &Hit| reply(if hit.index == 0 { 503 } else { 200 }, &[], "")).await;
    let events = Events::default();
    let layer = told(&events)
        .backoff(Duration::from_millis(300))
        .build()
        .expect("layer");
    let mut service: OutboundService<Hyper> = layer.layer(hyper_client());
    let response = call(&mut service, get(&partner.url("/")))
        .await
        .expect("call");
    assert_eq!(response.status(), 200);
    assert_eq!(partner.hits(), 2);
    // No retry without a pause: the bare 503 paused the backoff, and the
    // retry reached the partner no sooner (a lower bound).
    assert_eq!(events.outcomes(), ["paused", "retried"]);
    let log = partner.log();
    assert!(
        log[1].at - log[0].at >= Duration::from_millis(300),
        "{log:?}"
    );
    assert_eq!(
        events.all()[0].1,
        format!("127.0.0.1:{}", partner.addr.port())
    );
}

#[tokio::test(start_paused = true)]
async fn a_429_pauses_the_limiter_for_its_retry_after() {
    let partner = Partner::start(first_then(
        || reply(429, &[("retry-after", "1")], ""),
        || reply(200, &[], ""),
    ))
    .await;
    let events = Events::default();
    let layer = told(&events).retries(0).build().expect("layer");
    let mut service = layer.layer(hyper_client());
    let response = call(&mut service, get(&partner.url("/")))
        .await
        .expect("call");
    assert_eq!(response.status(), 429);
    let response = call(&mut service, get(&partner.url("/")))
        .await
        .expect("call");
    assert_eq!(response.status(), 200);
    // The second, then one token of 100/s (the pause emptied the bucket).
    assert_eq!(last_wait(&events), Some(Duration::from_millis(1000 + 10)));
    assert_eq!(events.outcomes(), ["paused", "gave_up"]);
    assert_eq!(events.all()[0].2, Some(Duration::from_secs(1)));
}

#[tokio::test(start_paused = true)]
async fn resource_exhausted_with_retry_info_pauses_for_its_delay_and_is_retried() {
    let partner = exhausted_once(Duration::from_millis(700)).await;
    let events = Events::default();
    let layer = told(&events)
        .any_method(true) // gRPC calls are POSTs
        .build()
        .expect("layer");
    let mut service = layer.layer(hyper_client());
    let response = call(
        &mut service,
        grpc_call(&partner.url("/grpc.health.v1.Health/Check")),
    )
    .await
    .expect("call");
    assert_eq!(response.status(), 200);
    assert!(
        response.headers().get("grpc-status").is_none(),
        "the message, not the refusal"
    );
    let log = partner.log();
    assert_eq!(log.len(), 2);
    let gap = log[1].at - log[0].at;
    assert!(gap >= Duration::from_millis(700), "{gap:?}");
    let waited = last_wait(&events);
    assert_eq!(waited, Some(Duration::from_millis(700 + 10)));
    assert_eq!(events.outcomes(), ["paused", "retried"]);
    let paused = &events.all()[0];
    assert_eq!(
        (paused.2, paused.3, paused.5),
        (Some(Duration::from_millis(700)), Some(429), false)
    );
    println!("RESOURCE_EXHAUSTED, RetryInfo 700 ms: retried {gap:?} later, after {waited:?}");
}

#[tokio::test(start_paused = true)]
async fn without_any_method_resource_exhausted_pauses_but_is_not_retried() {
    // And a RetryInfo of an hour is cut to max_pause.
    let partner = exhausted_once(Duration::from_secs(3600)).await;
    let events = Events::default();
    let layer = told(&events)
        .max_pause(Duration::from_millis(500))
        .build()
        .expect("layer");
    let mut service = layer.layer(hyper_client());
    let url = partner.url("/grpc.health.v1.Health/Check");
    let response = call(&mut service, grpc_call(&url)).await.expect("call");
    assert_eq!(response.headers()["grpc-status"], "8");
    assert_eq!(partner.hits(), 1);
    assert_eq!(events.outcomes(), ["paused", "gave_up"]);
    let paused = &events.all()[0];
    assert_eq!(
        (paused.2, paused.5),
        (Some(Duration::from_millis(500)), true)
    );
    let response = call(&mut service, grpc_call(&url)).await.expect("call");
    assert!(response.headers().get("grpc-status").is_none());
    assert_eq!(last_wait(&events), Some(Duration::from_millis(500 + 10)));
}

#[tokio::test(start_paused = true)]
async fn a_tonic_channel_through_the_layer_waits_out_the_pause() {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};

    let partner = exhausted_once(Duration::from_millis(600)).await;
    let channel = tonic::transport::Channel::from_shared(partner.url(""))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let events = Events::default();
    let layer = told(&events)
        .key("partner") // tonic's requests carry only a path
        .any_method(true)
        .build()
        .expect("layer");
    let mut client = HealthClient::new(layer.layer(channel));
    let request = || {
        tonic::Request::new(HealthCheckRequest {
            service: String::new(),
        })
    };
    // tonic's body is a stream, so the call is not sent again: the caller
    // gets the status (with its RetryInfo), and the limiter is paused.
    let status = client.check(request()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    let info = status.get_details_retry_info().expect("retry info");
    assert_eq!(info.retry_delay, Some(Duration::from_millis(600)));
    assert_eq!(events.outcomes(), ["paused", "gave_up"]);
    assert_eq!(events.all()[0].1, "partner");
    let answer = client.check(request()).await.expect("check").into_inner();
    assert_eq!(answer.status(), ServingStatus::Serving);
    assert_eq!(last_wait(&events), Some(Duration::from_millis(600 + 10)));
    assert_eq!(partner.hits(), 2);
}
