//! A sanity number, not a benchmark: the latency of `ShouldRateLimit`
//! round trips on loopback, one tonic client, one call at a time, against
//! the in-process server, one fixed-window rule matched and counted.
//!
//! `cargo run --release -p ratebound-server --example rls_p50 [CALLS]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use ratebound_server::engine::Engine;
use ratebound_server::model::Config;
use ratebound_server::serve::{ServeOptions, bind};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let calls: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(20_000);
    let options = ServeOptions {
        grpc: "127.0.0.1:0".parse()?,
        http: "127.0.0.1:0".parse()?,
        ..ServeOptions::default()
    };
    let rules = "domain: edge\ndescriptors:\n  - key: remote_address\n    descriptors:\n      - key: path\n        rate_limit:\n          unit: second\n          requests_per_unit: 1000000\n";
    let config = Config::parse(rules, "rls_p50.yaml")?;
    let bound = bind(Arc::new(Engine::new(config)?), options).await?;
    let grpc = bound.grpc_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(bound.run(async move {
        let _ = stopped.await;
    }));
    let mut client = RateLimitServiceClient::connect(format!("http://{grpc}")).await?;
    let request = RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![
                Entry {
                    key: "remote_address".into(),
                    value: "10.0.0.1".into(),
                },
                Entry {
                    key: "path".into(),
                    value: "/api".into(),
                },
            ],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 1,
    };
    let mut times: Vec<Duration> = Vec::with_capacity(calls);
    for i in 0..calls + 1000 {
        let start = Instant::now();
        let answer = client
            .should_rate_limit(request.clone())
            .await?
            .into_inner();
        assert!(
            answer.statuses[0].current_limit.is_some(),
            "the rule matched"
        );
        if i >= 1000 {
            times.push(start.elapsed());
        }
    }
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    println!(
        "{calls} ShouldRateLimit round trips on loopback, one at a time: p50 {:?}, p99 {:?}, p99.9 {:?}",
        at(0.5),
        at(0.99),
        at(0.999)
    );
    let _ = stop.send(());
    server.await??;
    Ok(())
}
