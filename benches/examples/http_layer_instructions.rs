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
//! Modes: `bare`, `layer` (draft quota headers, a fixed concurrency cap),
//! `layer_no_headers`, `layer_adaptive` (as `layer`, with the adaptive
//! concurrency limit instead of the fixed cap). Only
//! `measured` is counted with `--toggle-collect`: the instructions per
//! request are its inclusive count divided by the number of requests.

use std::convert::Infallible;
use std::hint::black_box;

use http::{Request, Response};
use ratebound_benches::http_layer::{Hello, keys, layer, layer_adaptive, send};
use ratebound_http::QuotaHeaders;
use tower_service::Service;

/// The counted part: `n` requests, cycling through `keys`.
#[inline(never)]
fn measured<S, B>(svc: &mut S, keys: &[String], n: usize) -> usize
where
    S: Service<Request<()>, Response = Response<B>, Error = Infallible>,
{
    let mut ok = 0;
    for i in 0..n {
        ok += usize::from(send(svc, black_box(&keys[i % keys.len()])) == 200);
    }
    ok
}

fn drive<S, B>(mut svc: S, keys: &[String], n: usize)
where
    S: Service<Request<()>, Response = Response<B>, Error = Infallible>,
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
    let keys = keys();
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
        "layer_adaptive" => drive(
            tower_layer::Layer::layer(&layer_adaptive(QuotaHeaders::Draft), Hello),
            &keys,
            n,
        ),
        other => panic!("unknown mode {other}: bare, layer, layer_no_headers or layer_adaptive"),
    }
}
