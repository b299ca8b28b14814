//! What one `ShouldRateLimit` costs inside the server, without the
//! transport: the time per call of each step, on `rls_load`'s rules and
//! request mix (two descriptors: the client's address, and the address
//! with the path), one thread. Run it under `heaptrack` (or `valgrind
//! --tool=dhat`) for the allocations of each step: the crate forbids
//! `unsafe`, so it cannot count them itself.
//!
//! The steps: prost decoding the request's bytes, converting the protobuf
//! into an `api::Request` (`rls::request_from_proto`), `Engine::decide`,
//! converting the answer back (`rls::response_to_proto`), prost encoding
//! it; and `RlsService::decide` (the three middle steps, and the wire's
//! counters), as the gRPC service runs it. tonic, hyper and h2 come on top
//! (`rls_load` measures the whole).
//!
//! `cargo run --release -p ratebound-server --example rls_steps [CALLS]`

#[path = "common/mix.rs"]
mod mix;
use mix::{RULES, request};

use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use futures_util::FutureExt;
use prost::Message;
use ratebound_server::engine::Engine;
use ratebound_server::metrics::Metrics;
use ratebound_server::model::Config;
use ratebound_server::rls::{Bounds, RlsService, request_from_proto, response_to_proto};

/// Runs `step` once per input (the inputs made beforehand, untimed);
/// prints the nanoseconds per call; returns the outputs (dropped after
/// the timing, untimed too).
fn measure<I, O>(name: &str, inputs: Vec<I>, mut step: impl FnMut(I) -> O) -> Vec<O> {
    let n = inputs.len();
    let mut outputs = Vec::with_capacity(n);
    let start = Instant::now();
    for input in inputs {
        outputs.push(step(input));
    }
    let nanos = start.elapsed().as_nanos() as f64 / n as f64;
    println!("| {name} | {nanos:.0} |");
    outputs
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let calls: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(200_000);
    if calls == 0 {
        return Err("CALLS must be at least 1".into());
    }
    let config = Config::parse(RULES, "rls_steps.yaml")?;
    let engine = Arc::new(Engine::new(config)?);
    let metrics = Arc::new(Metrics::new(engine.rules().config()));
    let service = RlsService::new(Arc::clone(&engine), Bounds::default(), metrics);
    let bounds = Bounds::default();
    let mut rng = 0x5EED_u64;
    let protos = |rng: &mut u64| (0..calls).map(|_| request(rng)).collect::<Vec<_>>();

    // Warm-up: the engine's key tables and the counters, not shown.
    for r in protos(&mut rng) {
        service
            .decide(r)
            .now_or_never()
            .expect("in-process: ready")?;
    }
    println!("{calls} calls a row, rls_load's request mix, after {calls} calls of warm-up.");
    println!();
    println!("| step | ns / call |");
    println!("| --- | ---: |");
    let wire: Vec<Vec<u8>> = protos(&mut rng)
        .iter()
        .map(Message::encode_to_vec)
        .collect();
    let decoded = measure("prost: decode the request", wire, |b| {
        RateLimitRequest::decode(b.as_slice()).expect("decodes")
    });
    let requests = measure("rls::request_from_proto", decoded, |r| {
        request_from_proto(r, &bounds).expect("within bounds")
    });
    let responses = measure("Engine::decide", requests, |r| {
        engine
            .decide(&r)
            .now_or_never()
            .expect("in-process: ready")
            .expect("decided")
    });
    let protos_back = measure("rls::response_to_proto", responses, response_to_proto);
    let encoded = measure(
        "prost: encode the answer",
        protos_back,
        |r: RateLimitResponse| r.encode_to_vec(),
    );
    let inputs = protos(&mut rng);
    measure("RlsService::decide (the three middle steps)", inputs, |r| {
        service
            .decide(r)
            .now_or_never()
            .expect("in-process: ready")
            .expect("decided")
    });
    let size = encoded.iter().map(Vec::len).sum::<usize>() / calls;
    println!();
    println!("An answer is {size} bytes on the wire (mean, before gRPC's 5-byte prefix).");
    Ok(())
}
