//! Counting what the limits decide with the `metrics` crate, exported for
//! Prometheus: admitted, refused and shed requests per policy and route.
//!
//! Run: `cargo run -p ratebound-http --example metrics` (127.0.0.1:3000),
//! then `curl -X POST localhost:3000/login` a few times and
//! `curl localhost:3000/metrics`.
//!
//! Every layer takes an [`on_decision`](ratebound_http::Builder::on_decision)
//! callback, called once per limited request; without one, nothing is done.
//! Here `/login` is limited to 5 per minute per client IP, `/api/items` to
//! two policies per `X-API-Key`, and `/health` is not limited.

use std::net::SocketAddr;

use axum::Router;
use axum::routing::{get, post};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use ratebound::Quota;
use ratebound_http::{DecisionEvent, Outcome, RateLimitLayer, RequestKey};

/// One count per policy that saw the request (the route is the one axum
/// matched, the label's default): a refusal is counted against
/// the policy that refused; an admitted (or shed, or rejected) request
/// against every policy of the limit.
fn count(event: &DecisionEvent<'_>) {
    let route = event.label.unwrap_or("").to_string();
    let outcome = event.outcome.as_str();
    match (event.outcome, event.policy) {
        (Outcome::Refused, Some(policy)) => {
            metrics::counter!("ratebound_requests_total",
                "policy" => policy.to_string(), "route" => route, "outcome" => outcome)
            .increment(1);
        }
        _ => {
            for policy in event.policies {
                metrics::counter!("ratebound_requests_total",
                    "policy" => policy.clone(), "route" => route.clone(), "outcome" => outcome)
                .increment(1);
            }
        }
    }
}

/// Installs the Prometheus recorder (once per process).
pub fn recorder() -> Result<PrometheusHandle, Box<dyn std::error::Error>> {
    Ok(PrometheusBuilder::new().install_recorder()?)
}

/// The app: two limited routes, an unlimited one, and `/metrics`.
pub fn app(metrics: PrometheusHandle) -> Result<Router, ratebound::Error> {
    let login = RateLimitLayer::builder()
        .policy("default", Quota::parse("5/minute")?)
        .on_decision(count)
        .build()?;
    let api = RateLimitLayer::builder()
        .policy("burst", Quota::parse("10/s burst 20")?)
        .policy("hourly", Quota::parse("1000/hour")?)
        .key(RequestKey::header("x-api-key")?)
        .on_decision(count)
        .build()?;
    Ok(Router::new()
        .merge(
            Router::new()
                .route("/login", post(|| async { "ok\n" }))
                .route_layer(login),
        )
        .merge(
            Router::new()
                .route("/api/items", get(|| async { "[]\n" }))
                .route_layer(api),
        )
        .route("/health", get(|| async { "healthy\n" }))
        .route("/metrics", get(move || async move { metrics.render() })))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let app = app(recorder()?)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    // The client IP comes from axum's ConnectInfo.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
