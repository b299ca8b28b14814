//! An axum server with per-key limits, an exemption and load shedding.
//!
//! Run: `cargo run --release -p ratebound-http --example server -- [--port 3000] [--no-limit] [--no-headers]`
//!
//! - `GET /` — limited per `X-API-Key` (or per client IP without one):
//!   10/s burst 20 and 1000/hour, both must admit.
//! - `GET /health` — exempt.
//! - `GET /slow` — takes 200 ms; at most 64 requests in flight, the rest get
//!   503 at once; requests with `X-Priority: critical` are never shed.
//!
//! `--no-limit` serves the same routes without the layer, `--no-headers`
//! with the layer but without quota headers (for measuring their cost).

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use ratebound::Quota;
use ratebound_http::{QuotaHeaders, RateLimitLayer, RequestKey};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let port: u16 = args
        .iter()
        .position(|a| a == "--port")
        .and_then(|i| args.get(i + 1))
        .map_or(Ok(3000), |p| p.parse())?;
    let limited = !args.iter().any(|a| a == "--no-limit");
    let headers = if args.iter().any(|a| a == "--no-headers") {
        QuotaHeaders::Off
    } else {
        QuotaHeaders::Draft
    };

    let routes = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .route("/health", get(|| async { "healthy\n" }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                "slow\n"
            }),
        );
    let app = if limited {
        let layer = RateLimitLayer::builder()
            .policy("burst", Quota::parse("10/s burst 20")?)
            .policy("hourly", Quota::parse("1000/hour")?)
            .key(RequestKey::header("x-api-key")?)
            .exempt(|req| req.uri.path() == "/health")
            .quota_headers(headers)
            .concurrency_limit(64)
            .critical(|req| {
                req.headers
                    .get("x-priority")
                    .is_some_and(|v| v.as_bytes() == b"critical")
            })
            .build()?;
        routes.layer(layer)
    } else {
        routes
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!(
        "listening on http://{} ({})",
        listener.local_addr()?,
        if limited { "rate limited" } else { "no limits" }
    );
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
