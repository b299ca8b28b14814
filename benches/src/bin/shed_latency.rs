//! How fast the ratebound-http concurrency cap refuses: an axum server on
//! 127.0.0.1 with a cap of 4 in front of an 800 ms handler, and 50 requests
//! sent at once over connections opened beforehand (so connection setup is
//! not measured). Reports how many ran, how many were shed, and the latency
//! percentiles of the 503s, over 5 rounds.
//!
//! Run: `cargo run --release -p ratebound-benches --bin shed_latency`

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratebound_http::RateLimitLayer;

const CAP: usize = 4;
const BURST: usize = 50;

#[tokio::main]
async fn main() {
    let layer = RateLimitLayer::builder()
        .concurrency_limit(CAP)
        .exempt(|parts| parts.uri.path() == "/warm")
        .build()
        .expect("a concurrency cap alone is a valid layer");
    let app = Router::new()
        .route(
            "/",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(800)).await;
                "slow"
            }),
        )
        .route("/warm", get(|| async { "warm" }))
        .layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .expect("serve");
    });
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(BURST)
        .build_http();
    let send = |path: &'static str| {
        let client = client.clone();
        async move {
            let request = Request::get(format!("http://{addr}{path}"))
                .body(Empty::new())
                .expect("request");
            let start = Instant::now();
            let response = client.request(request).await.expect("response");
            let status = response.status();
            let _ = response.into_body().collect().await;
            (status, start.elapsed())
        }
    };
    let mut shed_latencies = Vec::new();
    println!("| round | ran | shed (503) | 503 p50 | 503 p99 | 503 max |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    for round in 1..=5 {
        // Open BURST keep-alive connections first.
        let warm: Vec<_> = (0..BURST).map(|_| tokio::spawn(send("/warm"))).collect();
        for w in warm {
            w.await.expect("warm-up");
        }
        let burst: Vec<_> = (0..BURST).map(|_| tokio::spawn(send("/"))).collect();
        let mut ran = 0;
        let mut shed = Vec::new();
        for b in burst {
            let (status, took) = b.await.expect("request");
            match status {
                StatusCode::OK => ran += 1,
                StatusCode::SERVICE_UNAVAILABLE => shed.push(took),
                other => panic!("unexpected {other}"),
            }
        }
        shed.sort();
        let pct = |p: usize| shed[(shed.len() * p).div_ceil(100).max(1) - 1];
        println!(
            "| {round} | {ran} | {} | {:.2} ms | {:.2} ms | {:.2} ms |",
            shed.len(),
            pct(50).as_secs_f64() * 1e3,
            pct(99).as_secs_f64() * 1e3,
            shed.last().expect("some were shed").as_secs_f64() * 1e3
        );
        assert_eq!(ran, CAP, "exactly the cap ran");
        shed_latencies.extend(shed);
    }
    shed_latencies.sort();
    let p99 = shed_latencies[(shed_latencies.len() * 99).div_ceil(100) - 1];
    println!(
        "\nall rounds: {} refusals, p99 {:.2} ms",
        shed_latencies.len(),
        p99.as_secs_f64() * 1e3
    );
}
