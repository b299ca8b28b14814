//! The per-request cost of the ratebound-http layer without a network: the
//! same trivial inner service called directly, bare and wrapped, in one run.
//! (The end-to-end cost under wrk is `benches/http/run.sh`.)

use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use http::{Request, Response};
use ratebound::Quota;
use ratebound_http::{KeySource, QuotaHeaders, RateLimitLayer};
use tower_service::Service;

/// One row: sends a request with this key, returns the status.
type Row = Box<dyn FnMut(&str) -> u16>;

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

fn layer(headers: QuotaHeaders) -> RateLimitLayer {
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
}

fn bench(c: &mut Criterion) {
    let keys: Vec<String> = (0..10_000).map(|i| format!("key-{i}")).collect();
    let mut group = c.benchmark_group("http_layer");
    let mut cases: Vec<(&str, Row)> = Vec::new();
    let mut bare = Hello;
    // The same request is built in every row, so the difference is the layer.
    cases.push((
        "bare",
        Box::new(move |key: &str| {
            let request = Request::builder()
                .header("x-api-key", key)
                .body(())
                .expect("request");
            run(bare.call(request)).unwrap().status().as_u16()
        }),
    ));
    for (name, headers) in [
        ("layer", QuotaHeaders::Draft),
        ("layer_no_headers", QuotaHeaders::Off),
    ] {
        let mut svc = tower_layer::Layer::layer(&layer(headers), Hello);
        cases.push((
            name,
            Box::new(move |key: &str| {
                let request = Request::builder()
                    .header("x-api-key", key)
                    .body(())
                    .expect("request");
                run(svc.call(request)).unwrap().status().as_u16()
            }),
        ));
    }
    for (name, mut call) in cases {
        let mut i = 0usize;
        group.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % keys.len();
                let status = call(black_box(&keys[i]));
                assert_eq!(status, 200);
                status
            })
        });
    }
    group.finish();
}

fn config() -> Criterion {
    // ~2 s a row, 3 rows.
    Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_millis(1500))
        .without_plots()
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench
}
criterion_main!(benches);
