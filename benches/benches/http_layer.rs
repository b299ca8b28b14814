//! The per-request cost of the ratebound-http layer without a network: the
//! same trivial inner service called directly, bare and wrapped, in one run.
//! (The end-to-end cost under wrk is `benches/http/run.sh`.)

mod common;

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use ratebound_benches::http_layer::{Hello, keys, layer, send};
use ratebound_http::QuotaHeaders;

/// One row: sends a request with this key, returns the status.
type Row = Box<dyn FnMut(&str) -> u16>;

fn bench(c: &mut Criterion) {
    let keys = keys();
    let mut group = c.benchmark_group("http_layer");
    let mut cases: Vec<(&str, Row)> = Vec::new();
    let mut bare = Hello;
    // The same request is built in every row, so the difference is the layer.
    cases.push(("bare", Box::new(move |key: &str| send(&mut bare, key))));
    for (name, headers) in [
        ("layer", QuotaHeaders::Draft),
        ("layer_no_headers", QuotaHeaders::Off),
    ] {
        let mut svc = tower_layer::Layer::layer(&layer(headers), Hello);
        cases.push((name, Box::new(move |key: &str| send(&mut svc, key))));
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

// ~2 s a row, 3 rows.
criterion_group! {
    name = benches;
    config = common::config(30, Duration::from_millis(500), Duration::from_millis(1500));
    targets = bench
}
criterion_main!(benches);
