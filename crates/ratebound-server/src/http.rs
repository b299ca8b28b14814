//! The HTTP endpoints, as the reference server's: `POST /json` (its JSON
//! request and answer), `GET /healthcheck`, and `GET /metrics`.
//!
//! - `/json` takes the protobuf JSON mapping of a `RateLimitRequest` (field
//!   names in either spelling, `hits_addend` or `hitsAddend`; 64-bit and
//!   32-bit numbers as numbers or strings; unknown fields refused) and
//!   answers the JSON mapping of the `RateLimitResponse` (`overallCode`
//!   `"OK"` / `"OVER_LIMIT"`, `statuses`, `responseHeadersToAdd`; fields at
//!   their zero value left out). The status is 200 for OK, 429 for over the
//!   limit, 500 for UNKNOWN; 400 for a body that is not such a request or a
//!   request the engine refuses (as the reference server), 413 for a body or
//!   a part of it over the [`Bounds`].
//! - `/healthcheck`: 200 `OK`, or 500 with no body once shutting down.
//! - `/metrics`: Prometheus' text format, names beginning `ratebound_`:
//!   the wire's counters ([`Metrics`]), then the engine's
//!   ([`Engine::render_metrics`]), then [`HttpState::extra_metrics`].

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

use crate::api::Code;
use crate::engine::{Engine, RequestError};
use crate::json::{request_from_json, response_to_json};
use crate::metrics::{Metrics, Refusal, Transport};
use crate::rls::{Bounds, request_from_proto, response_to_proto};

/// More Prometheus text for `/metrics`, appended after the wire's and the
/// engine's.
pub type MetricsSource = Arc<dyn Fn(&mut String) + Send + Sync>;

/// What the HTTP endpoints share.
#[derive(Clone)]
pub struct HttpState {
    /// Decides `/json` requests.
    pub engine: Arc<Engine>,
    /// The bounds on a request.
    pub bounds: Bounds,
    /// The wire's counters.
    pub metrics: Arc<Metrics>,
    /// False once shutting down: `/healthcheck` answers 500.
    pub healthy: Arc<AtomicBool>,
    /// More text for `/metrics`.
    pub extra_metrics: Option<MetricsSource>,
}

/// The router: `/json`, `/healthcheck`, `/metrics`.
pub fn router(state: HttpState) -> Router {
    let limit = state.bounds.max_message_bytes;
    Router::new()
        // Any method, as the reference server's.
        .route("/json", any(json))
        .route("/healthcheck", get(healthcheck))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

fn refused(state: &HttpState, error: &RequestError) -> Response {
    state.metrics.refused(Transport::Json, error);
    let status = match error {
        RequestError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        RequestError::Invalid { .. } => StatusCode::BAD_REQUEST,
        RequestError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
    };
    text(status, format!("{error}\n"))
}

async fn json(State(state): State<HttpState>, body: Result<Bytes, BytesRejection>) -> Response {
    let start = std::time::Instant::now();
    let answer = answer_json(&state, body).await;
    state.metrics.answered(Transport::Json, start.elapsed());
    answer
}

async fn answer_json(state: &HttpState, body: Result<Bytes, BytesRejection>) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) => {
            let status = rejection.status();
            let reason = if status == StatusCode::PAYLOAD_TOO_LARGE {
                Refusal::TooLarge
            } else {
                Refusal::BadJson
            };
            state.metrics.refused_for(Transport::Json, reason);
            return text(status, format!("{}\n", rejection.body_text()));
        }
    };
    let request: RateLimitRequest = match request_from_json(&body) {
        Ok(request) => request,
        Err(reason) => {
            state.metrics.refused_for(Transport::Json, Refusal::BadJson);
            return text(
                StatusCode::BAD_REQUEST,
                format!("bad JSON request: {reason}\n"),
            );
        }
    };
    let request = match request_from_proto(request, &state.bounds) {
        Ok(request) => request,
        Err(error) => return refused(state, &error),
    };
    let response = match state.engine.decide(&request).await {
        Ok(response) => response,
        Err(error) => return refused(state, &error),
    };
    state
        .metrics
        .decided(Transport::Json, &request.domain, response.overall_code);
    let status = match response.overall_code {
        Code::Ok => StatusCode::OK,
        Code::OverLimit => StatusCode::TOO_MANY_REQUESTS,
        Code::Unknown => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let body = response_to_json(&response_to_proto(response));
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn healthcheck(State(state): State<HttpState>) -> Response {
    if state.healthy.load(Ordering::Acquire) {
        text(StatusCode::OK, "OK".to_string())
    } else {
        StatusCode::INTERNAL_SERVER_ERROR.into_response()
    }
}

async fn metrics(State(state): State<HttpState>) -> Response {
    let mut out = String::with_capacity(4096);
    state.metrics.render(&mut out);
    let healthy = u8::from(state.healthy.load(Ordering::Acquire));
    let _ = write!(
        out,
        "# HELP ratebound_healthy 1 while serving, 0 once shutting down.\n\
         # TYPE ratebound_healthy gauge\n\
         ratebound_healthy {healthy}\n"
    );
    state.engine.render_metrics(&mut out);
    if let Some(extra) = &state.extra_metrics {
        extra(&mut out);
    }
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
        .into_response()
}
