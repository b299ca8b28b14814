//! A tonic gRPC server behind the layer: each API key (metadata
//! `x-api-key`; the client IP for calls without one) may make 2 calls a
//! minute; a refused call gets the gRPC
//! status `RESOURCE_EXHAUSTED` with a `google.rpc.RetryInfo` detail saying
//! how long to wait — not an HTTP 429, which gRPC clients cannot read.
//!
//! Run: `cargo run -p ratebound-http --features tonic --example grpc`, then
//! call it three times, e.g. with grpcurl:
//! `grpcurl -plaintext 127.0.0.1:50051 grpc.health.v1.Health/Check`.
//! The third call prints `Code: ResourceExhausted`, the message `rate limit
//! exceeded; retry in 30 s` and the `RetryInfo` detail; a tonic client reads
//! the wait with `tonic_types::StatusExt::get_details_retry_info`.
//!
//! The layer answers the gRPC way for every request whose content type is
//! `application/grpc…`, and with HTTP statuses otherwise, so one layer can
//! sit in front of a server mixing both. The `tonic` feature lets it read
//! the client's address from tonic's connection info.

use ratebound::Quota;
use ratebound_http::{RateLimitLayer, RequestKey};
use tonic::transport::Server;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    // gRPC metadata are HTTP/2 headers: the key header is read as for HTTP.
    let layer = RateLimitLayer::builder()
        .policy("calls", Quota::parse("2/minute")?)
        .key(RequestKey::header("x-api-key")?)
        .build()?;
    let addr = "127.0.0.1:50051".parse()?;
    println!("gRPC health service on {addr}");
    Server::builder()
        .layer(layer)
        .add_service(health)
        .serve(addr)
        .await?;
    Ok(())
}
