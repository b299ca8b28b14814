//! A hyper client, one GET with headers, a response header and the plain
//! app (`/` and `/health` under a layer), shared by the HTTP test files.
#![allow(dead_code)] // each user takes its part

use std::net::SocketAddr;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use ratebound_http::RateLimitLayer;

pub type HttpClient = Client<HttpConnector, Empty<Bytes>>;

pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// One GET of `path` with `headers`: status, headers, body.
pub async fn get_with(
    client: &HttpClient,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &[u8])],
) -> (StatusCode, HeaderMap, String) {
    let mut request = Request::get(format!("http://{addr}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client
        .request(request.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

/// `/` and `/health` under `layer`.
pub fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/health", get(|| async { "healthy" }))
        .layer(layer)
}

pub fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers.get(name).map_or("", |v| v.to_str().unwrap())
}
