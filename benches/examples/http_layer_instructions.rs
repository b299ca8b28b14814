//! A fixed amount of work through the ratebound-http layer, for counting
//! instructions (time on a shared 2-core machine is too noisy to see a few
//! hundred nanoseconds): the same requests as `benches/http_layer.rs`, bare
//! or wrapped, after one warm-up pass that creates every key's state.
//!
//! ```text
//! cargo build --release -p ratebound-benches --example http_layer_instructions
//! valgrind --tool=callgrind --toggle-collect='*measured*' \
//!     target/release/examples/http_layer_instructions layer 100000
//! ```
//!
//! Modes: `bare`, `layer` (draft quota headers), `layer_no_headers`. Only
//! `measured` is counted with `--toggle-collect`: the instructions per
//! request are its inclusive count divided by the number of requests.

use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::{Request, Response};
use ratebound::Quota;
use ratebound_http::{KeySource, QuotaHeaders, RateLimitLayer};
use tower_service::Service;

/// The trivial handler: answers at once.
#[derive(Clone)]
struct Hello;

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

/// Drives a future that completes without waiting (both services here do).
fn run<F: Future>(future: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(future).poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the services here never wait"),
    }
}

/// One request with this key through `svc`; its status.
fn send<S>(svc: &mut S, key: &str) -> u16
where
    S: Service<Request<()>, Response = Response<Bytes>, Error = Infallible>,
{
    let request = Request::builder()
        .header("x-api-key", key)
        .body(())
        .expect("request");
    run(svc.call(request)).unwrap().status().as_u16()
}

/// The counted part: `n` requests, cycling through `keys`.
#[inline(never)]
fn measured<S>(svc: &mut S, keys: &[String], n: usize) -> usize
where
    S: Service<Request<()>, Response = Response<Bytes>, Error = Infallible>,
{
    let mut ok = 0;
    for i in 0..n {
        ok += usize::from(send(svc, black_box(&keys[i % keys.len()])) == 200);
    }
    ok
}

fn drive<S>(mut svc: S, keys: &[String], n: usize)
where
    S: Service<Request<()>, Response = Response<Bytes>, Error = Infallible>,
{
    // Warm-up: every key's state exists before counting starts.
    for key in keys {
        assert_eq!(send(&mut svc, key), 200);
    }
    let ok = measured(&mut svc, keys, n);
    assert_eq!(ok, n, "every request is admitted");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map_or("layer", String::as_str);
    let n: usize = args.get(2).map_or(100_000, |s| s.parse().expect("count"));
    let keys: Vec<String> = (0..10_000).map(|i| format!("key-{i}")).collect();
    let layer = |headers| {
        RateLimitLayer::builder()
            .policy(
                "burst",
                Quota::parse("1000000/s burst 1000000").expect("quota"),
            )
            .policy("hourly", Quota::parse("1000000000/hour").expect("quota"))
            .key(KeySource::header("x-api-key").expect("name"))
            .concurrency_limit(64)
            .quota_headers(headers)
            .build()
            .expect("layer")
    };
    match mode {
        "bare" => drive(Hello, &keys, n),
        "layer" => drive(
            tower_layer::Layer::layer(&layer(QuotaHeaders::Draft), Hello),
            &keys,
            n,
        ),
        "layer_no_headers" => drive(
            tower_layer::Layer::layer(&layer(QuotaHeaders::Off), Hello),
            &keys,
            n,
        ),
        other => panic!("unknown mode {other}: bare, layer or layer_no_headers"),
    }
}
