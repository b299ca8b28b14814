//! Replays `spec/outbound_calls.json` through both adapters —
//! `OutboundMiddleware` (reqwest-middleware) and `OutboundLayer` (tower)
//! — with a scripted partner (the last middleware of the chain; the inner
//! service) and a scripted limiter that records each wait and pause and
//! answers each pause as the vector says (shared, local, failed). In
//! tokio's paused time: a wait the vector gives (`acquire_s`) and a hold
//! are slept exactly, so `waited` events are compared too. Vectors giving
//! per-request overrides are skipped: the Rust adapters take a key
//! function, not per-request options.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::Extensions;
use http_body_util::Full;
use ratebound::any::Key;
use ratebound::outbound::{Learned, Reach};
use ratebound::{BoxFuture, KeyedAlgorithm, KeyedLimit, LimitCheck, Quota};
use ratebound_client::{
    OutboundBuilder, OutboundEvent, OutboundLayer, OutboundMiddleware, RetryBody,
};
use reqwest_middleware::{ClientBuilder, Middleware, Next};
use serde_json::{Value, json};
use tower_layer::Layer;
use tower_service::Service;

#[path = "../../ratebound/tests/support/spec.rs"]
mod spec;

fn spec() -> Value {
    spec::load("outbound_calls.json")
}

/// What a vector's run saw: acquires, sendings, pauses and events, in
/// order.
#[derive(Clone)]
struct Script {
    vector: Arc<Value>,
    sent: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<Value>>>,
    /// The learned word's reads so far for one sending: (sending, reads).
    reads: Arc<Mutex<(usize, usize)>>,
    /// The asks for tokens so far for one sending: (sending, asks).
    asks: Arc<Mutex<(usize, usize)>>,
}

impl Script {
    fn new(vector: &Value) -> Script {
        Script {
            vector: Arc::new(vector.clone()),
            sent: Arc::new(AtomicUsize::new(0)),
            seen: Arc::new(Mutex::new(Vec::new())),
            reads: Arc::new(Mutex::new((usize::MAX, 0))),
            asks: Arc::new(Mutex::new((usize::MAX, 0))),
        }
    }

    fn sending(&self, i: usize) -> &Value {
        &self.vector["sendings"][i]
    }

    fn push(&self, v: Value) {
        self.seen.lock().unwrap().push(v);
    }

    /// The next answer: status and header fields.
    fn answer(&self) -> http::Response<String> {
        self.push(json!(["send"]));
        let s = self.sending(self.sent.fetch_add(1, Ordering::SeqCst));
        let mut r = http::Response::new(String::new());
        *r.status_mut() = u16::try_from(s["status"].as_u64().expect("status"))
            .expect("u16")
            .try_into()
            .expect("status");
        for h in s["headers"].as_array().expect("headers") {
            r.headers_mut().append(
                http::HeaderName::try_from(h[0].as_str().expect("name")).expect("name"),
                h[1].as_str().expect("value").parse().expect("value"),
            );
        }
        r
    }

    fn hook(&self) -> impl Fn(&OutboundEvent<'_>) + Send + Sync + 'static {
        let s = self.clone();
        move |e| {
            s.push(json!([
                "event",
                e.outcome.as_str(),
                e.duration.map(|d| d.as_secs_f64()),
                e.status,
                e.attempt,
                e.capped,
                e.local
            ]));
            s.seen.lock().unwrap().push(json!(["key", e.key]));
        }
    }
}

impl KeyedLimit for Script {
    /// The vector's `quota` (default 30/s burst 30): a learning adapter's
    /// ceiling, which an announced quota's fraction is of.
    fn algorithm(&self) -> KeyedAlgorithm {
        let quota = self.vector["config"]
            .get("quota")
            .and_then(Value::as_str)
            .unwrap_or("30/s burst 30");
        KeyedAlgorithm::TokenBucket(Quota::parse(quota).expect("quota"))
    }

    /// The adapters never check: they wait.
    fn check(&self, _scope: &str, _key: Key<'_>, _n: u64) -> LimitCheck {
        LimitCheck::Ready(Err(ratebound::Error::Unsupported {
            operation: "check",
            algorithm: "script",
        }))
    }

    fn acquire<'a>(
        &'a self,
        _key: Key<'a>,
        n: u64,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), ratebound::Error>> {
        self.push(json!(["acquire", n, timeout.map(|t| t.as_secs_f64())]));
        let i = self.sent.load(Ordering::SeqCst);
        let s = self.sending(i);
        let ask = {
            let mut asks = self.asks.lock().unwrap();
            if asks.0 != i {
                *asks = (i, 0);
            }
            asks.1 += 1;
            asks.1 - 1
        };
        // The limiter's deadline error, as the vector says (`beyond_s`).
        let beyond = s.get("beyond_s").and_then(|b| b.get(ask));
        if let Some(w) = beyond.and_then(Value::as_f64) {
            return Box::pin(std::future::ready(Err(
                ratebound::Error::DeadlineExceeded {
                    wait: Duration::from_secs_f64(w),
                    max_wait: timeout.unwrap_or_default(),
                },
            )));
        }
        let wait = s.get("acquire_s").and_then(Value::as_f64).unwrap_or(0.0);
        Box::pin(async move {
            // tokio's timer has a grain of 1 ms: a shorter wait is none
            // here (the machine's own replay checks 0.9 ms exactly).
            if wait >= 0.001 {
                tokio::time::sleep(Duration::from_secs_f64(wait)).await;
            }
            Ok(())
        })
    }

    fn pause<'a>(
        &'a self,
        _key: Key<'a>,
        d: Duration,
    ) -> BoxFuture<'a, Result<Reach, ratebound::Error>> {
        self.push(json!(["pause", d.as_secs_f64()]));
        let s = self.sending(self.sent.load(Ordering::SeqCst) - 1);
        let reach = match s.get("pause").and_then(Value::as_str).unwrap_or("shared") {
            "shared" => Ok(Reach::Shared),
            "local" => Ok(Reach::Local),
            // A shared table with no slot for the key.
            _ => Err(ratebound::Error::TooManyKeys { max_keys: 1 }),
        };
        Box::pin(std::future::ready(reach))
    }

    fn learns(&self) -> bool {
        true
    }

    /// The vector's word for the sending under way, its instant moved from
    /// the vectors' clock (answers at Unix time 1 800 000 000 s) to now:
    /// the adapters date answers by the real clock.
    fn learned(&self, _key: Key<'_>) -> Learned {
        // The first read of a sending is when its first wait begins
        // (`learned_before`); the later ones, `learned`.
        let i = self.sent.load(Ordering::SeqCst);
        let first = {
            let mut reads = self.reads.lock().unwrap();
            if reads.0 != i {
                *reads = (i, 0);
            }
            reads.1 += 1;
            reads.1 == 1
        };
        let s = self.sending(i);
        let l = match s.get("learned_before") {
            Some(w) if first => learned_word(Some(w)),
            _ => learned(s),
        };
        if l.is_fresh() {
            return l;
        }
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_millis();
        let age = VECTOR_NOW_MS - l.changed_ms();
        let at = u64::try_from(now_ms).expect("ms") - age;
        Learned::new(l.fraction_units(), at).with_cut(l.was_cut())
    }

    fn adapt<'a>(
        &'a self,
        _key: Key<'a>,
        seen: Learned,
        next: Learned,
    ) -> BoxFuture<'a, Result<bool, ratebound::Error>> {
        self.push(json!([
            "adapt",
            seen.fraction_units(),
            next.fraction_units(),
            next.was_cut()
        ]));
        let s = self.sending(self.sent.load(Ordering::SeqCst) - 1);
        let replaced = s.get("adapt").and_then(Value::as_str) != Some("kept");
        Box::pin(std::future::ready(Ok(replaced)))
    }
}

/// The vectors' answers arrive at this Unix time (ms).
const VECTOR_NOW_MS: u64 = 1_800_000_000_000;

/// The learned word a vector's sending went under (fresh when absent).
fn learned(s: &Value) -> Learned {
    learned_word(s.get("learned"))
}

/// A vector's word (null or absent: fresh).
fn learned_word(w: Option<&Value>) -> Learned {
    w.filter(|l| !l.is_null()).map_or_else(Learned::fresh, |l| {
        let units = u32::try_from(l["units"].as_u64().expect("units")).expect("u32");
        Learned::new(units, l["at_ms"].as_u64().unwrap_or(0))
            .with_cut(l.get("cut").and_then(Value::as_bool).unwrap_or(false))
    })
}

fn configure<R>(mut b: OutboundBuilder<R>, config: &Value, script: &Script) -> OutboundBuilder<R> {
    let f = |name: &str| config.get(name).and_then(Value::as_f64);
    if let Some(k) = config.get("key").and_then(Value::as_str) {
        b = b.key(k);
    }
    if let Some(t) = f("timeout_s") {
        b = b.timeout(Duration::from_secs_f64(t));
    }
    if let Some(r) = f("retries") {
        b = b.retries(r as u32);
    }
    if let Some(m) = f("max_pause_s") {
        b = b.max_pause(Duration::from_secs_f64(m));
    }
    if let Some(x) = f("backoff_s") {
        b = b.backoff(Duration::from_secs_f64(x));
    }
    if let Some(a) = config.get("any_method").and_then(Value::as_bool) {
        b = b.any_method(a);
    }
    // Learning is off unless the vector turns it on.
    b = b.adaptive(
        config
            .get("adaptive")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    );
    b.on_decision(script.hook())
}

/// The steps an adapter shows: the expected ones but holds, retries and
/// the end; the key as told with each event.
fn want(v: &Value) -> Vec<Value> {
    let key = &v["expect"]["key"];
    let mut out = Vec::new();
    for s in v["expect"]["steps"].as_array().expect("steps") {
        match s[0].as_str().expect("kind") {
            "hold" | "retry" | "done" => {}
            "event" => {
                out.push(s.clone());
                out.push(json!(["key", key]));
            }
            _ => out.push(s.clone()),
        }
    }
    out
}

fn vectors() -> Vec<Value> {
    spec()["vectors"]
        .as_array()
        .expect("vectors")
        .iter()
        .filter(|v| {
            let r = &v["request"];
            r.get("key").is_none() && r.get("n").is_none() && r.get("timeout_s").is_none()
        })
        .cloned()
        .collect()
}

fn check(v: &Value, script: &Script, adapter: &str) {
    let got = script.seen.lock().unwrap().clone();
    let want = want(v);
    assert!(
        spec::same(
            &Value::Array(got.clone()),
            &Value::Array(want.clone()),
            1e-6
        ),
        "{adapter} {}:\n got {got:?}\nwant {want:?}",
        v["id"]
    );
}

/// The partner: the last middleware, answering from the script.
struct Partner(Script);

#[async_trait::async_trait]
impl Middleware for Partner {
    async fn handle(
        &self,
        _request: reqwest::Request,
        _extensions: &mut Extensions,
        _next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        Ok(reqwest::Response::from(self.0.answer()))
    }
}

#[tokio::test(start_paused = true)]
async fn every_vector_through_reqwest_middleware() {
    let vectors = vectors();
    assert!(vectors.len() >= 15);
    for v in &vectors {
        let script = Script::new(v);
        let builder = OutboundMiddleware::builder(script.clone());
        let middleware = configure(builder, v.get("config").unwrap_or(&json!({})), &script)
            .build()
            .expect("middleware");
        let client = ClientBuilder::new(reqwest::Client::new())
            .with(middleware)
            .with(Partner(script.clone()))
            .build();
        let r = &v["request"];
        let method = reqwest::Method::from_bytes(r["method"].as_str().expect("m").as_bytes())
            .expect("method");
        let mut request = client.request(method, r["url"].as_str().expect("url"));
        request = match r["body"].as_str().expect("body") {
            "bytes" => request.body("payload"),
            // A body that is a stream: read once.
            "stream" => request.body(reqwest::Body::wrap(Full::new(Bytes::from("payload")))),
            _ => request,
        };
        request.send().await.expect("answer");
        check(v, &script, "reqwest");
    }
}

/// A request body that is held (sent again) or a stream (read once).
enum TestBody {
    Held(Full<Bytes>),
    Stream,
}

impl RetryBody for TestBody {
    fn try_clone(&self) -> Option<Self> {
        match self {
            TestBody::Held(b) => Some(TestBody::Held(b.clone())),
            TestBody::Stream => None,
        }
    }
}

/// The partner: the inner service, answering from the script.
#[derive(Clone)]
struct Inner(Script);

impl Service<http::Request<TestBody>> for Inner {
    type Response = http::Response<String>;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: http::Request<TestBody>) -> Self::Future {
        std::future::ready(Ok(self.0.answer()))
    }
}

#[tokio::test(start_paused = true)]
async fn every_vector_through_the_tower_layer() {
    for v in &vectors() {
        let script = Script::new(v);
        let builder = OutboundLayer::builder(script.clone());
        let layer = configure(builder, v.get("config").unwrap_or(&json!({})), &script)
            .build()
            .expect("layer");
        let mut service = layer.layer(Inner(script.clone()));
        let r = &v["request"];
        let body = match r["body"].as_str().expect("body") {
            "stream" => TestBody::Stream,
            "bytes" => TestBody::Held(Full::new(Bytes::from("payload"))),
            _ => TestBody::Held(Full::default()),
        };
        let request = http::Request::builder()
            .method(r["method"].as_str().expect("method"))
            .uri(r["url"].as_str().expect("url"))
            .body(body)
            .expect("request");
        service.call(request).await.expect("answer");
        check(v, &script, "tower");
    }
}

#[tokio::test]
async fn a_path_only_request_is_keyed_by_its_host_header_else_one_key() {
    for (uri, header, key) in [
        (
            "/grpc.health.v1.Health/Check",
            Some("partner:50051"),
            "partner:50051",
        ),
        ("/grpc.health.v1.Health/Check", None, "default"),
    ] {
        let v = json!({"sendings": [{"status": 503, "headers": []}]});
        let script = Script::new(&v);
        let layer = OutboundLayer::builder(script.clone())
            .retries(0)
            .on_decision(script.hook())
            .build()
            .expect("layer");
        let mut service = layer.layer(Inner(script.clone()));
        let mut request = http::Request::builder().uri(uri);
        if let Some(h) = header {
            request = request.header("host", h);
        }
        let request = request.body(TestBody::Stream).expect("request");
        service.call(request).await.expect("answer");
        let seen = script.seen.lock().unwrap().clone();
        assert_eq!(seen.last(), Some(&json!(["key", key])), "{uri}");
    }
}

#[tokio::test]
async fn a_panicking_hook_never_fails_the_call() {
    let v = json!({"sendings": [{"status": 503, "headers": []}, {"status": 200, "headers": []}]});
    let script = Script::new(&v);
    let told = Arc::new(AtomicUsize::new(0));
    let count = told.clone();
    let layer = OutboundLayer::builder(script.clone())
        .backoff(Duration::from_millis(1))
        .on_decision(move |_| {
            count.fetch_add(1, Ordering::SeqCst);
            panic!("a broken metrics hook");
        })
        .build()
        .expect("layer");
    let mut service = layer.layer(Inner(script.clone()));
    let request = http::Request::get("http://partner.example/")
        .body(TestBody::Held(Full::default()))
        .expect("request");
    let response = service.call(request).await.expect("answer");
    // Retried after the 503 although the hook panicked at each event.
    assert_eq!(response.status(), 200);
    assert!(told.load(Ordering::SeqCst) >= 2);
}
