//! What the tests share: a strict partner on 127.0.0.1 — a real HTTP server
//! (HTTP/1.1 and h2c) with its own tiny token bucket, not ratebound's,
//! that logs every request it gets and what it answered — and real
//! `redis-server`s on free ports (crates/ratebound-redis/tests/support,
//! included); the learning fleet of learn.rs and learn_partners.rs in
//! `fleet`. Everything stops on drop.

#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// The partner's clock is tokio's: real time, or a test's paused time.
use tokio::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};

pub type Body = BoxBody<Bytes, Infallible>;

/// What the partner's handler sees of a request.
pub struct Hit {
    /// 0 for the partner's first request, 1 for the next, ...
    pub index: usize,
    /// Since the partner started.
    pub at: Duration,
    pub method: Method,
    pub path: String,
    pub headers: HeaderMap,
}

/// One request the partner answered: when it came and the status sent.
#[derive(Clone, Copy, Debug)]
pub struct Logged {
    pub at: Duration,
    pub status: u16,
}

/// A partner on 127.0.0.1: answers each request with its handler.
pub struct Partner {
    pub addr: SocketAddr,
    log: Arc<Mutex<Vec<Logged>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Partner {
    pub async fn start(
        handler: impl Fn(&Hit) -> Response<Body> + Send + Sync + 'static,
    ) -> Partner {
        Partner::start_delayed(Duration::ZERO, handler).await
    }

    /// [`start`](Self::start), each answer decided (and logged) when its
    /// request arrives but sent `delay` later: the way back of a network
    /// farther than loopback.
    pub async fn start_delayed(
        delay: Duration,
        handler: impl Fn(&Hit) -> Response<Body> + Send + Sync + 'static,
    ) -> Partner {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let handler = Arc::new(handler);
        let (count, start) = (Arc::new(AtomicUsize::new(0)), Instant::now());
        let logged = log.clone();
        let accept = tokio::spawn(async move {
            // Dropped with the accept task (the Partner's drop aborts it):
            // every connection task goes with it.
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (handler, count, log) = (handler.clone(), count.clone(), logged.clone());
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let hit = Hit {
                        index: count.fetch_add(1, Ordering::SeqCst),
                        at: start.elapsed(),
                        method: req.method().clone(),
                        path: req.uri().path().to_string(),
                        headers: req.headers().clone(),
                    };
                    let response = handler(&hit);
                    log.lock().unwrap().push(Logged {
                        at: hit.at,
                        status: response.status().as_u16(),
                    });
                    async move {
                        if !delay.is_zero() {
                            tokio::time::sleep(delay).await;
                        }
                        Ok::<_, Infallible>(response)
                    }
                });
                connections.spawn(async move {
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Partner { addr, log, accept }
    }

    /// `http://127.0.0.1:port{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Every request answered, in order.
    pub fn log(&self) -> Vec<Logged> {
        self.log.lock().unwrap().clone()
    }

    /// How many requests it answered with `status`.
    pub fn count(&self, status: u16) -> usize {
        self.log().iter().filter(|l| l.status == status).count()
    }

    /// How many requests it got.
    pub fn hits(&self) -> usize {
        self.log().len()
    }
}

impl Drop for Partner {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// A partner's handler: the first hit answered with `first()`, every later
/// one with `then()`.
pub fn first_then(
    first: impl Fn() -> Response<Body> + Send + Sync + 'static,
    then: impl Fn() -> Response<Body> + Send + Sync + 'static,
) -> impl Fn(&Hit) -> Response<Body> + Send + Sync + 'static {
    move |hit: &Hit| if hit.index == 0 { first() } else { then() }
}

/// An answer with `status`, `headers` and a text body.
pub fn reply(status: u16, headers: &[(&str, &str)], body: &str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = status.try_into().expect("status");
    for (name, value) in headers {
        response.headers_mut().append(
            http::HeaderName::try_from(*name).expect("name"),
            value.parse().expect("value"),
        );
    }
    response
}

/// A trailers-only gRPC answer: HTTP 200, no body, the status in headers.
pub fn grpc_refusal(status: tonic::Status) -> Response<Body> {
    status.into_http::<Body>()
}

/// A unary gRPC answer: one length-prefixed message, then `grpc-status: 0`
/// in the trailers.
pub fn grpc_ok(message: &[u8]) -> Response<Body> {
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(message);
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", "0".parse().expect("value"));
    let body = Full::new(Bytes::from(frame))
        .with_trailers(async move { Some(Ok(trailers)) })
        .boxed();
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert("content-type", "application/grpc".parse().expect("value"));
    response
}

/// An empty body (for requests).
pub fn empty() -> Empty<Bytes> {
    Empty::new()
}

/// The partner's own token bucket (floating point, one mutex: simple and
/// strict), independent of ratebound: `rate` per second, `burst` at once,
/// full at the start.
pub struct Bucket {
    /// (from, rate per second): the rate in force from each instant on,
    /// since the bucket's start, in order.
    rates: Vec<(Duration, f64)>,
    burst: f64,
    start: Instant,
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    pub fn new(rate: f64, burst: f64) -> Bucket {
        Bucket::phased(&[(Duration::ZERO, rate)], burst)
    }

    /// A bucket whose rate changes: `rates[i].1` per second from
    /// `rates[i].0` after its start (the first from 0) until the next.
    pub fn phased(rates: &[(Duration, f64)], burst: f64) -> Bucket {
        let now = Instant::now();
        Bucket {
            rates: rates.to_vec(),
            burst,
            start: now,
            state: Mutex::new((burst, now)),
        }
    }

    /// The tokens earned between `from` and `to` (since the start), each
    /// phase at its rate.
    fn earned(&self, from: Duration, to: Duration) -> f64 {
        let ends = self
            .rates
            .iter()
            .skip(1)
            .map(|r| r.0)
            .chain([Duration::MAX]);
        self.rates
            .iter()
            .zip(ends)
            .map(|(&(start, rate), end)| {
                let (a, b) = (from.max(start), to.min(end));
                if b > a {
                    (b - a).as_secs_f64() * rate
                } else {
                    0.0
                }
            })
            .sum()
    }

    /// Takes a token if there is one.
    pub fn take(&self) -> bool {
        let mut state = self.state.lock().unwrap();
        let now = Instant::now();
        let earned = self.earned(state.1 - self.start, now - self.start);
        let tokens = (state.0 + earned).min(self.burst);
        let taken = tokens >= 1.0;
        *state = (if taken { tokens - 1.0 } else { tokens }, now);
        taken
    }
}

/// A partner of `rate`/s, bursts of `burst`: 200, or 429 with
/// `Retry-After: 1` when its bucket is empty.
pub fn strict(rate: f64, burst: f64) -> impl Fn(&Hit) -> Response<Body> + Send + Sync + 'static {
    let bucket = Bucket::new(rate, burst);
    move |_hit| {
        if bucket.take() {
            reply(200, &[], "ok")
        } else {
            reply(429, &[("retry-after", "1")], "slow down")
        }
    }
}

/// A reqwest client for 127.0.0.1 (no proxies).
#[cfg(feature = "reqwest")]
pub fn reqwest_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
}

/// `per` GETs of `url` from each of `clients` at once; their statuses.
#[cfg(feature = "reqwest")]
pub async fn call_all(
    clients: &[reqwest_middleware::ClientWithMiddleware],
    per: usize,
    url: &str,
) -> Vec<u16> {
    let mut calls = tokio::task::JoinSet::new();
    for client in clients {
        for _ in 0..per {
            let (client, url) = (client.clone(), url.to_string());
            calls.spawn(async move {
                client
                    .get(url)
                    .send()
                    .await
                    .expect("send")
                    .status()
                    .as_u16()
            });
        }
    }
    calls.join_all().await
}

// ---- Redis: the servers of crates/ratebound-redis/tests/support ----

#[path = "../../../ratebound-redis/tests/support/mod.rs"]
mod redis_server;

/// One `redis-server` on a free 127.0.0.1 port, stopped on drop.
#[allow(unused_imports)]
pub use redis_server::Server as Redis;

/// A fresh key for one test (a shared server never sees it twice).
#[allow(unused_imports)]
pub use redis_server::fresh;

/// One event told to `on_decision`: (outcome, key, duration, status,
/// attempt, capped, local).
pub type Event = (
    String,
    String,
    Option<Duration>,
    Option<u16>,
    u32,
    bool,
    bool,
);

/// Events told to `on_decision`, kept for the test to read.
#[derive(Clone, Default)]
pub struct Events(Arc<Mutex<Vec<Event>>>);

impl Events {
    pub fn hook(&self) -> impl Fn(&ratebound_client::OutboundEvent<'_>) + Send + Sync + 'static {
        let events = self.0.clone();
        move |e| {
            events.lock().unwrap().push((
                e.outcome.as_str().to_string(),
                e.key.to_string(),
                e.duration,
                e.status,
                e.attempt,
                e.capped,
                e.local,
            ))
        }
    }

    /// The outcomes, in order, without "waited".
    pub fn outcomes(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.0.clone())
            .filter(|o| o != "waited")
            .collect()
    }

    /// Every event.
    pub fn all(&self) -> Vec<Event> {
        self.0.lock().unwrap().clone()
    }
}

// ---- The learning fleet of learn.rs and learn_partners.rs ----

#[cfg(all(feature = "reqwest", feature = "redis"))]
pub mod fleet;
