//! The setup shared by the no-network layer benchmark
//! (`benches/http_layer.rs`) and its instruction-counting twin
//! (`examples/http_layer_instructions.rs`), so both measure the same thing:
//! a trivial inner service, the example server's layer (two policies per
//! `X-API-Key`, a concurrency cap, quota headers on or off), and one request
//! driven to completion without a runtime.

use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::{Request, Response};
use ratebound::Quota;
use ratebound_http::{QuotaHeaders, RateLimitLayer, RequestKey};
use tower_service::Service;

/// The trivial handler: answers at once.
#[derive(Clone, Copy, Debug)]
pub struct Hello;

impl Service<Request<()>> for Hello {
    type Response = Response<Bytes>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<Bytes>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        std::future::ready(Ok(Response::new(Bytes::from_static(b"hello\n"))))
    }
}

/// The example server's layer: two policies per `X-API-Key`, a cap of 64,
/// `headers` for the quota fields.
pub fn layer(headers: QuotaHeaders) -> RateLimitLayer {
    builder(headers)
        .concurrency_limit(64)
        .build()
        .expect("layer")
}

/// [`layer`] with the adaptive concurrency limit instead of the fixed cap
/// of 64 (its default tuning: it starts at 20; one request at a time never
/// reaches it).
pub fn layer_adaptive(headers: QuotaHeaders) -> RateLimitLayer {
    builder(headers)
        .adaptive_concurrency(ratebound_http::AdaptiveConcurrency::default())
        .build()
        .expect("layer")
}

fn builder(headers: QuotaHeaders) -> ratebound_http::Builder {
    RateLimitLayer::builder()
        .policy(
            "burst",
            Quota::parse("1000000/s burst 1000000").expect("quota"),
        )
        .policy("hourly", Quota::parse("1000000000/hour").expect("quota"))
        .key(RequestKey::header("x-api-key").expect("name"))
        .quota_headers(headers)
}

/// The keys the requests cycle through.
pub fn keys() -> Vec<String> {
    (0..10_000).map(|i| format!("key-{i}")).collect()
}

/// Drives a future that completes without waiting (every service here does).
fn run<F: Future>(future: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(future).poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the services here never wait"),
    }
}

/// One request with this key through `svc` (built the same way in every
/// row, so differences are the layer's); its status.
pub fn send<S, B>(svc: &mut S, key: &str) -> u16
where
    S: Service<Request<()>, Response = Response<B>, Error = Infallible>,
{
    let request = Request::builder()
        .header("x-api-key", key)
        .body(())
        .expect("request");
    match run(svc.call(request)) {
        Ok(response) => response.status().as_u16(),
        Err(never) => match never {},
    }
}
