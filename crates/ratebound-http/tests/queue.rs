//! The short queue in front of the concurrency cap, over real HTTP: a
//! burst that a cap of 4 would shed waits a few milliseconds instead, and
//! a request whose wait runs out is shed with 503 as without a queue.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use ratebound_http::RateLimitLayer;

mod serve;
use serve::serve;

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// Answers after `ms` milliseconds.
fn app(ms: u64, layer: RateLimitLayer) -> Router {
    Router::new()
        .route(
            "/",
            get(move || async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                "ok"
            }),
        )
        .layer(layer)
}

/// `n` requests at once; their statuses and latencies.
async fn burst(addr: SocketAddr, n: usize) -> Vec<(u16, Duration)> {
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let t = Instant::now();
                let request = Request::get(format!("http://{addr}/"))
                    .body(Empty::new())
                    .unwrap();
                let response = client.request(request).await.unwrap();
                let status = response.status().as_u16();
                response.into_body().collect().await.unwrap();
                (status, t.elapsed())
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_waits_for_places_instead_of_being_shed() {
    let capped = |queue: bool| {
        let b = RateLimitLayer::builder().concurrency_limit(4);
        let b = if queue {
            b.queue(Duration::from_millis(500))
        } else {
            b
        };
        b.build().unwrap()
    };
    let without = serve(app(50, capped(false))).await;
    let shed = burst(without, 8)
        .await
        .iter()
        .filter(|(s, _)| *s == 503)
        .count();
    assert_eq!(shed, 4, "without a queue, 4 of 8 are shed");

    let with = serve(app(50, capped(true))).await;
    let answers = burst(with, 8).await;
    assert!(answers.iter().all(|(s, _)| *s == 200), "{answers:?}");
    // Half of them waited for a place: about one handler's time more.
    let waited = answers
        .iter()
        .filter(|(_, l)| *l >= Duration::from_millis(95))
        .count();
    assert_eq!(waited, 4, "{answers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_runs_out_is_shed() {
    let layer = RateLimitLayer::builder()
        .concurrency_limit(1)
        .queue(Duration::from_millis(20))
        .build()
        .unwrap();
    let addr = serve(app(400, layer)).await;
    let mut answers = burst(addr, 2).await;
    answers.sort_by_key(|(s, _)| *s);
    assert_eq!(answers[0].0, 200);
    assert_eq!(answers[1].0, 503);
    // Shed after its 20 ms, long before the first is done.
    assert!(answers[1].1 >= Duration::from_millis(20), "{answers:?}");
    assert!(answers[1].1 < Duration::from_millis(300), "{answers:?}");
}

#[test]
fn a_queue_without_a_limit_is_a_configuration_error() {
    let err = RateLimitLayer::builder()
        .queue(Duration::from_millis(5))
        .policy("p", ratebound::Quota::parse("10/s").unwrap())
        .build()
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "invalid concurrency_queue \"5ms\": queues for a concurrency limit: set concurrency_limit (a number or \"auto\") as well"
    );
}
