//! The overload scenario's parts, shared by `tests/overload.rs` (its
//! behaviour, wide bounds) and `examples/overload.rs` (its figures, run by
//! `ci/bench`): an axum server on 127.0.0.1 whose handler runs at most 4
//! requests at a time for `service_ms` each (capacity 200/s at 20 ms), an
//! open-loop hyper client on a fixed schedule.

#![allow(dead_code)] // each user takes its part

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use ratebound::http::ConcurrencyCap;
use ratebound_http::{AdaptiveConcurrency, Priority, RateLimitLayer};
use tokio::sync::Semaphore;

pub type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// The service: 4 workers, each request holding one for `service_ms`
/// (changeable while it runs).
pub fn app(service_ms: Arc<AtomicU64>, layer: Option<RateLimitLayer>) -> Router {
    let workers = Arc::new(Semaphore::new(4));
    let handler = move || {
        let (workers, service_ms) = (workers.clone(), service_ms.clone());
        async move {
            let _worker = workers.acquire().await.unwrap();
            tokio::time::sleep(Duration::from_millis(service_ms.load(Ordering::Relaxed))).await;
            "ok"
        }
    };
    let router = Router::new()
        .route("/", get(handler.clone()))
        .route("/health", get(handler));
    match layer {
        Some(layer) => router.layer(layer),
        None => router,
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Sent {
    /// Since the run began.
    pub at: Duration,
    pub status: u16,
    pub latency: Duration,
    pub class: Class,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Normal,
    Background,
    Critical,
}

/// Sends `rate` requests/s for `secs`, each at its scheduled time whatever
/// the answers (open loop); `class(i)` picks each request's class. Waits
/// for every answer (each bounded by a 30 s timeout).
pub async fn open_loop(
    client: &HttpClient,
    addr: SocketAddr,
    rate: u32,
    secs: f64,
    class: impl Fn(u64) -> Class,
) -> Vec<Sent> {
    let begin = tokio::time::Instant::now();
    let gap = Duration::from_secs_f64(1.0 / f64::from(rate));
    let total = (f64::from(rate) * secs) as u64;
    let mut tasks = Vec::with_capacity(total as usize);
    for i in 0..total {
        tokio::time::sleep_until(begin + gap * i as u32).await;
        let class = class(i);
        let (path, priority) = match class {
            Class::Normal => ("/", "normal"),
            Class::Background => ("/", "background"),
            Class::Critical => ("/health", "normal"),
        };
        let request = Request::get(format!("http://{addr}{path}"))
            .header("x-priority", priority)
            .body(Empty::new())
            .unwrap();
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let sent = Instant::now();
            let at = sent - begin.into_std();
            let answer = tokio::time::timeout(Duration::from_secs(30), async {
                let response = client.request(request).await.ok()?;
                let status = response.status().as_u16();
                response.into_body().collect().await.ok()?;
                Some(status)
            })
            .await;
            Sent {
                at,
                status: answer.ok().flatten().unwrap_or(0),
                latency: sent.elapsed(),
                class,
            }
        }));
    }
    let mut sent = Vec::with_capacity(tasks.len());
    for t in tasks {
        sent.push(t.await.unwrap());
    }
    sent
}

pub struct Summary {
    pub p50: Duration,
    pub p99: Duration,
    pub goodput: f64,
    pub shed: usize,
}

/// The admitted (200) requests sent within `from..to`.
pub fn summary(sent: &[Sent], from: f64, to: f64) -> Summary {
    let window = |s: &&Sent| (from..to).contains(&s.at.as_secs_f64());
    let mut ok: Vec<Duration> = sent
        .iter()
        .filter(window)
        .filter(|s| s.status == 200)
        .map(|s| s.latency)
        .collect();
    ok.sort_unstable();
    let q = |q: f64| ok[((ok.len() - 1) as f64 * q) as usize];
    Summary {
        p50: q(0.5),
        p99: q(0.99),
        goodput: ok.len() as f64 / (to - from),
        shed: sent
            .iter()
            .filter(window)
            .filter(|s| s.status == 503)
            .count(),
    }
}

pub fn print(name: &str, s: &Summary) {
    println!(
        "{name}: p50 {:.1} ms, p99 {:.1} ms, goodput {:.0}/s, shed {}",
        s.p50.as_secs_f64() * 1e3,
        s.p99.as_secs_f64() * 1e3,
        s.goodput,
        s.shed
    );
}

/// `GET /` on `addr`: the response's head and whole body.
pub async fn get_root(client: &HttpClient, addr: SocketAddr) -> (http::response::Parts, Bytes) {
    let request = Request::get(format!("http://{addr}/"))
        .body(Empty::new())
        .unwrap();
    let (head, body) = client.request(request).await.unwrap().into_parts();
    (head, body.collect().await.unwrap().to_bytes())
}

/// The median of 20 sequential requests to an idle server.
pub async fn unloaded(client: &HttpClient, addr: SocketAddr) -> Duration {
    let mut l = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        assert_eq!(get_root(client, addr).await.0.status, 200);
        l.push(t.elapsed());
    }
    l.sort_unstable();
    l[10]
}

pub fn adaptive_layer() -> RateLimitLayer {
    RateLimitLayer::builder()
        .adaptive_concurrency(AdaptiveConcurrency::default())
        .priority(|parts| match parts.uri.path() {
            "/health" => Priority::Critical,
            _ if parts
                .headers
                .get("x-priority")
                .is_some_and(|v| v == "background") =>
            {
                Priority::Background
            }
            _ => Priority::Normal,
        })
        .build()
        .unwrap()
}

pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(1024)
        .build_http()
}

/// The limit and baseline every 250 ms for `secs` (what a failure or a
/// figure is read with): (s since the start, limit, baseline ms).
pub async fn watch(cap: &ConcurrencyCap, secs: f64) -> Vec<(f64, usize, f64)> {
    let begin = tokio::time::Instant::now();
    let mut seen = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    while begin.elapsed().as_secs_f64() < secs {
        tick.tick().await;
        let state = cap.state().unwrap();
        seen.push((
            begin.elapsed().as_secs_f64(),
            state.limit,
            state.baseline_us / 1e3,
        ));
    }
    seen
}

/// The answers that were neither 200 nor 503 (0: none in 30 s).
pub fn odd(sent: &[Sent]) -> Vec<&Sent> {
    sent.iter()
        .filter(|s| s.status != 200 && s.status != 503)
        .collect()
}

/// The slowdown scenario: 500/s for `secs`; the handler takes 40 ms
/// instead of 20 from `slow.0` s to `slow.1` s. The answers and the limit
/// and baseline every 250 ms.
pub async fn slowdown(
    secs: f64,
    slow: (f64, f64),
) -> (Vec<Sent>, Vec<(f64, usize, f64)>, Duration) {
    let service = Arc::new(AtomicU64::new(20));
    let layer = adaptive_layer();
    let gate = layer.clone();
    let addr = crate::serve::serve(app(service.clone(), Some(layer))).await;
    let c = client();
    let base = unloaded(&c, addr).await;
    let switch = {
        let service = service.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs_f64(slow.0)).await;
            service.store(40, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_secs_f64(slow.1 - slow.0)).await;
            service.store(20, Ordering::Relaxed);
        })
    };
    let cap = gate.gate().concurrency().unwrap();
    let (sent, seen) = tokio::join!(
        open_loop(&c, addr, 500, secs, |_| Class::Normal),
        watch(cap, secs)
    );
    switch.await.unwrap();
    (sent, seen, base)
}
