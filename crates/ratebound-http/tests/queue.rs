//! The short queue in front of the concurrency cap, over real HTTP: a
//! burst that a cap of 4 would shed waits for places instead, and a request
//! whose wait runs out is shed with 503 as without a queue. The handler is
//! gated (it answers when the test lets it), so which requests hold the
//! places, and which wait or are shed, is exact — not a matter of their
//! arriving within one handler's time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

mod serve;
use serve::serve;

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// A handler that counts the requests it has begun and answers one per
/// permit the test adds to `release`.
#[derive(Clone)]
struct Gated {
    entered: Arc<AtomicUsize>,
    release: Arc<Semaphore>,
}

impl Default for Gated {
    fn default() -> Self {
        Gated {
            entered: Arc::default(),
            release: Arc::new(Semaphore::new(0)),
        }
    }
}

impl Gated {
    fn app(&self, layer: RateLimitLayer) -> Router {
        let gate = self.clone();
        Router::new()
            .route(
                "/",
                get(move || async move {
                    // Ordering: SeqCst — test bookkeeping, read by the test task.
                    gate.entered.fetch_add(1, Ordering::SeqCst);
                    gate.release.acquire().await.unwrap().forget();
                    "ok"
                }),
            )
            .layer(layer)
    }

    fn entered(&self) -> usize {
        // Ordering: SeqCst — see the handler.
        self.entered.load(Ordering::SeqCst)
    }
}

/// Polls `done` every millisecond, for at most 10 s.
async fn until(what: &str, done: impl Fn() -> bool) {
    for _ in 0..10_000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("not within 10 s: {what}");
}

/// `n` requests at once; each task answers (status, latency).
fn send(client: &HttpClient, addr: SocketAddr, n: usize) -> Vec<JoinHandle<(u16, Duration)>> {
    (0..n)
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
        .collect()
}

async fn statuses(tasks: Vec<JoinHandle<(u16, Duration)>>) -> Vec<u16> {
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap().0);
    }
    out
}

fn capped(queue: Option<Duration>) -> RateLimitLayer {
    let b = RateLimitLayer::builder().concurrency_limit(4);
    match queue {
        Some(wait) => b.queue(wait),
        None => b,
    }
    .build()
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_waits_for_places_instead_of_being_shed() {
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    // Without a queue: 4 hold the places, the next 4 are shed at once.
    let handler = Gated::default();
    let addr = serve(handler.app(capped(None))).await;
    let holding = send(&client, addr, 4);
    until("4 in the handler", || handler.entered() == 4).await;
    assert_eq!(statuses(send(&client, addr, 4)).await, [503; 4]);
    handler.release.add_permits(4);
    assert_eq!(statuses(holding).await, [200; 4]);
    assert_eq!(handler.entered(), 4);

    // With a queue: the next 4 wait (none enters the handler) and each
    // takes a place as one is given back.
    let handler = Gated::default();
    let layer = capped(Some(Duration::from_secs(10)));
    let cap = layer.clone();
    let addr = serve(handler.app(layer)).await;
    let cap = cap.gate().concurrency().unwrap();
    let holding = send(&client, addr, 4);
    until("4 in the handler", || handler.entered() == 4).await;
    let waiting = send(&client, addr, 4);
    until("4 in the queue", || cap.queued() == 4).await;
    assert_eq!((handler.entered(), cap.in_flight()), (4, 4));
    handler.release.add_permits(4);
    assert_eq!(statuses(holding).await, [200; 4]);
    until("the 4 waiting in the handler", || handler.entered() == 8).await;
    assert_eq!(cap.queued(), 0);
    handler.release.add_permits(4);
    assert_eq!(statuses(waiting).await, [200; 4]);
    assert_eq!(cap.in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_runs_out_is_shed() {
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let handler = Gated::default();
    let layer = RateLimitLayer::builder()
        .concurrency_limit(1)
        .queue(Duration::from_millis(20))
        .build()
        .unwrap();
    let addr = serve(handler.app(layer)).await;
    let holding = send(&client, addr, 1);
    until("1 in the handler", || handler.entered() == 1).await;
    // The place is held until the second request has its answer: it is
    // shed once its 20 ms have passed (never sooner), not served.
    let (status, waited) = send(&client, addr, 1).pop().unwrap().await.unwrap();
    assert_eq!(status, 503);
    assert!(waited >= Duration::from_millis(20), "shed after {waited:?}");
    handler.release.add_permits(1);
    assert_eq!(statuses(holding).await, [200]);
    assert_eq!(handler.entered(), 1);
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
