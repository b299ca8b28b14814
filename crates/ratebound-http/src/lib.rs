//! A tower [`Layer`] that rate-limits HTTP requests per key with ratebound:
//! refusals are `429 Too Many Requests` with an honest `Retry-After` (whole
//! seconds, rounded **up**) and the IETF `RateLimit-Policy` / `RateLimit`
//! fields; an optional concurrency cap sheds load with `503` before the inner
//! service runs. Works with axum (`Router::layer`), hyper services and tonic.
//!
//! Every decision is made by the core crate (`ratebound::KeyedLimiter`,
//! `ratebound::http`); this crate is only the tower glue.
//!
//! # Examples
//! ```
//! use axum::{Router, routing::get};
//! use ratebound::Quota;
//! use ratebound_http::{KeySource, RateLimitLayer};
//!
//! let layer = RateLimitLayer::builder()
//!     .policy("burst", Quota::parse("10/s burst 20")?)
//!     .policy("hourly", Quota::parse("1000/hour")?)
//!     .key(KeySource::header("x-api-key")?)
//!     .build()?;
//! let app: Router = Router::new().route("/", get(|| async { "hello" })).layer(layer);
//! # Ok::<(), ratebound::Error>(())
//! ```
//!
//! # Keys
//! [`KeySource`] picks the key: a header, the client IP, or a closure over
//! the request. IP keys group IPv6 addresses by a prefix (default /64, so one
//! host cannot rotate through its addresses) and read `X-Forwarded-For` /
//! `Forwarded` only from configured trusted proxies. The peer address comes
//! from axum's `ConnectInfo<SocketAddr>` or a [`PeerAddr`] extension. A
//! request without a key follows [`MissingKey`]: by default it falls back to
//! the client IP — one shared bucket for every keyless client would let one
//! of them lock all the others out. Keys are stored as 128-bit keyed hashes
//! of their bytes (one pass of SipHash-2-4-128 with a random key), so a
//! 64 KiB or non-UTF-8 header costs what a short key does and no key is
//! copied.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};
use http::request::Parts;
use http::{Request, Response, StatusCode};
use ratebound::http::{
    ConcurrencyCap, Policy, TrustedProxies, client_ip, ip_key, legacy_headers, ratelimit,
    ratelimit_policy, retry_after_secs,
};
use ratebound::{
    Clock, Decision, Error, KeyedAlgorithm, KeyedLimiter, MonotonicClock, Overflow, Quota,
};
use tokio::sync::Semaphore;
use tower_layer::Layer;
use tower_service::Service;

/// The peer's socket address, for servers that are not axum: insert it into
/// the request's extensions (axum's `ConnectInfo<SocketAddr>` is read too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

type KeyFn = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;
type Limiter = KeyedLimiter<Fingerprint, Arc<dyn Clock>>;

/// A key as the tables store it: the 128-bit output of one SipHash-2-4 pass,
/// with a random 128-bit key, over a namespace byte and the key's bytes. No
/// key is copied to the heap, a 64 KiB key costs what a short one does, and
/// distinct byte strings (UTF-8 or not) stay distinct except with
/// probability about n²/2^129 for n keys — which an outsider cannot steer,
/// not knowing the seed.
use ratebound::fingerprint::{Fingerprint, Seed};
type Predicate = Arc<dyn Fn(&Parts) -> bool + Send + Sync>;

/// Where a request's key comes from.
#[derive(Clone)]
pub enum KeySource {
    /// A request header (e.g. `X-API-Key`); absent or empty means no key.
    Header(HeaderName),
    /// The client IP (see the crate docs on proxies and IPv6 grouping).
    ClientIp,
    /// A closure over the request head; `None` means no key.
    Custom(KeyFn),
}

impl KeySource {
    /// Keys from the header `name`.
    ///
    /// # Errors
    /// [`Error::Parse`] for an invalid header name.
    pub fn header(name: &str) -> Result<KeySource, Error> {
        HeaderName::try_from(name)
            .map(KeySource::Header)
            .map_err(|_| Error::Parse {
                input: name.to_string(),
                reason: "not a valid HTTP header name",
            })
    }

    /// Keys from a closure over the request head.
    pub fn custom(f: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static) -> KeySource {
        KeySource::Custom(Arc::new(f))
    }
}

/// What to do with a request that has no key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissingKey {
    /// Limit it by client IP (the default).
    FallBackToIp,
    /// Put every keyless request in one shared bucket.
    SharedAnonymous,
    /// Refuse it with this status (e.g. 401 or 400).
    Reject(StatusCode),
}

/// Which quota headers to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaHeaders {
    /// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10), the default.
    Draft,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (of the most restrictive policy).
    Legacy,
    /// None (a 429 still carries `Retry-After`).
    Off,
}

/// The body of a refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusalBody {
    /// `text/plain`, one line (the default).
    Text,
    /// `application/problem+json` (RFC 9457).
    ProblemJson,
}

struct Shared {
    policies: Vec<(Policy, Limiter)>,
    policy_field: HeaderValue,
    key: KeySource,
    missing: MissingKey,
    trusted: TrustedProxies,
    v6_prefix: u8,
    exempt: Option<Predicate>,
    critical: Option<Predicate>,
    shed: Option<Arc<ConcurrencyCap>>,
    headers: QuotaHeaders,
    body: RefusalBody,
    seed: Seed,
}

/// Builds a [`RateLimitLayer`].
pub struct Builder {
    quotas: Vec<(String, KeyedAlgorithm)>,
    clock: Arc<dyn Clock>,
    max_keys: Option<(usize, Overflow)>,
    key: KeySource,
    missing: MissingKey,
    trusted: TrustedProxies,
    v6_prefix: u8,
    exempt: Option<Predicate>,
    critical: Option<Predicate>,
    concurrency: Option<usize>,
    headers: QuotaHeaders,
    body: RefusalBody,
}

impl Builder {
    /// Adds a token-bucket policy per key; several policies must all admit.
    pub fn policy(self, name: &str, quota: Quota) -> Self {
        self.policy_with(name, KeyedAlgorithm::TokenBucket(quota))
    }

    /// Adds a policy of any keyed algorithm — e.g. a fixed window of 1000
    /// per day, advertised as `q=1000;w=86400`.
    pub fn policy_with(mut self, name: &str, algorithm: KeyedAlgorithm) -> Self {
        self.quotas.push((name.to_string(), algorithm));
        self
    }

    /// Where keys come from (default: [`KeySource::ClientIp`]).
    pub fn key(mut self, key: KeySource) -> Self {
        self.key = key;
        self
    }

    /// What a request without a key gets (default: [`MissingKey::FallBackToIp`]).
    pub fn missing_key(mut self, missing: MissingKey) -> Self {
        self.missing = missing;
        self
    }

    /// Whose forwarding headers to believe (default: nobody's).
    pub fn trusted_proxies(mut self, trusted: TrustedProxies) -> Self {
        self.trusted = trusted;
        self
    }

    /// How many leading bits of an IPv6 address make one client (default 64).
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.v6_prefix = bits;
        self
    }

    /// Caps the keys tracked per policy (default: uncapped).
    pub fn max_keys(mut self, max_keys: usize, overflow: Overflow) -> Self {
        self.max_keys = Some((max_keys, overflow));
        self
    }

    /// Requests for which `f` is true bypass limiting and shedding (health
    /// checks, internal callers).
    pub fn exempt(mut self, f: impl Fn(&Parts) -> bool + Send + Sync + 'static) -> Self {
        self.exempt = Some(Arc::new(f));
        self
    }

    /// At most `limit` requests in the inner service at once; the rest are
    /// refused at once with 503 and `Retry-After: 1` — never queued.
    pub fn concurrency_limit(mut self, limit: usize) -> Self {
        self.concurrency = Some(limit);
        self
    }

    /// Requests for which `f` is true are never shed by the concurrency
    /// limit: below the cap they take a place like any request (so they
    /// count toward it); at the cap they go through without one, so the
    /// number in flight can exceed the cap by the critical requests.
    pub fn critical(mut self, f: impl Fn(&Parts) -> bool + Send + Sync + 'static) -> Self {
        self.critical = Some(Arc::new(f));
        self
    }

    /// Which quota headers to send (default: [`QuotaHeaders::Draft`]).
    pub fn quota_headers(mut self, headers: QuotaHeaders) -> Self {
        self.headers = headers;
        self
    }

    /// The body of a 429 (default: [`RefusalBody::Text`]).
    pub fn refusal_body(mut self, body: RefusalBody) -> Self {
        self.body = body;
        self
    }

    /// The clock the limiters read (default: `MonotonicClock`).
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The layer.
    ///
    /// # Errors
    /// [`Error::NoLimiters`] without a policy (unless a concurrency limit is
    /// all you want: then add none and set `concurrency_limit`);
    /// [`Error::InvalidLimit`] for a concurrency limit of 0 or above tokio's
    /// semaphore maximum; the
    /// policies' own errors ([`Error::Parse`] for a name that is not
    /// printable ASCII).
    pub fn build(self) -> Result<RateLimitLayer, Error> {
        if self.quotas.is_empty() && self.concurrency.is_none() {
            return Err(Error::NoLimiters);
        }
        // tokio's semaphore panics above MAX_PERMITS; 0 would shed everything.
        if let Some(limit) = self.concurrency
            && (limit == 0 || limit > Semaphore::MAX_PERMITS)
        {
            return Err(Error::InvalidLimit {
                limit: limit as u64,
                max: Semaphore::MAX_PERMITS as u64,
            });
        }
        let mut policies = Vec::new();
        for (name, algorithm) in &self.quotas {
            let policy = Policy::for_keyed(name, *algorithm)?;
            let mut limiter = KeyedLimiter::new(*algorithm)?.with_clock(self.clock.clone());
            if let Some((max, overflow)) = self.max_keys {
                limiter = limiter.with_max_keys(max, overflow)?;
            }
            policies.push((policy, limiter));
        }
        let field: Vec<Policy> = policies.iter().map(|(p, _)| p.clone()).collect();
        let policy_field = HeaderValue::from_str(&ratelimit_policy(&field))
            .unwrap_or_else(|_| HeaderValue::from_static(""));
        Ok(RateLimitLayer {
            shared: Arc::new(Shared {
                policies,
                policy_field,
                key: self.key,
                missing: self.missing,
                trusted: self.trusted,
                v6_prefix: self.v6_prefix,
                exempt: self.exempt,
                critical: self.critical,
                shed: match self.concurrency {
                    Some(limit) => Some(Arc::new(ConcurrencyCap::new(limit)?)),
                    None => None,
                },
                headers: self.headers,
                body: self.body,
                seed: Seed::random(),
            }),
        })
    }
}

/// The tower layer; see the crate docs.
#[derive(Clone)]
pub struct RateLimitLayer {
    shared: Arc<Shared>,
}

impl RateLimitLayer {
    /// A builder with no policies, client-IP keys and draft headers.
    pub fn builder() -> Builder {
        Builder {
            quotas: Vec::new(),
            clock: Arc::new(MonotonicClock::new()),
            max_keys: None,
            key: KeySource::ClientIp,
            missing: MissingKey::FallBackToIp,
            trusted: TrustedProxies::None,
            v6_prefix: 64,
            exempt: None,
            critical: None,
            concurrency: None,
            headers: QuotaHeaders::Draft,
            body: RefusalBody::Text,
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service the layer wraps around `S`.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    shared: Arc<Shared>,
}

static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
static LEGACY: [HeaderName; 3] = [
    HeaderName::from_static("x-ratelimit-limit"),
    HeaderName::from_static("x-ratelimit-remaining"),
    HeaderName::from_static("x-ratelimit-reset"),
];

/// One decision per policy, by index: on the stack for up to four policies.
#[derive(Default)]
struct Decisions {
    inline: [Option<Decision>; 4],
    spill: Vec<Option<Decision>>,
}

impl Decisions {
    fn set(&mut self, i: usize, decision: Decision) {
        match self.inline.get_mut(i) {
            Some(slot) => *slot = Some(decision),
            None => {
                let j = i - self.inline.len();
                if self.spill.len() <= j {
                    self.spill.resize(j + 1, None);
                }
                self.spill[j] = Some(decision);
            }
        }
    }

    fn iter(&self) -> impl Iterator<Item = Decision> + '_ {
        self.inline
            .iter()
            .chain(self.spill.iter())
            .map_while(|d| *d)
    }
}

/// A place in the inner service, given back on drop.
struct Slot(Arc<ConcurrencyCap>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.leave();
    }
}

impl Shared {
    fn client_ip(&self, parts: &Parts) -> Option<IpAddr> {
        let peer = parts.extensions.get::<PeerAddr>().map(|p| p.0);
        #[cfg(feature = "axum")]
        let peer = peer.or_else(|| {
            parts
                .extensions
                .get::<axum::extract::ConnectInfo<SocketAddr>>()
                .map(|c| c.0)
        });
        let peer = peer?.ip();
        let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
        let ip = client_ip(
            peer,
            header("x-forwarded-for"),
            header("forwarded"),
            &self.trusted,
        );
        Some(ip_key(ip, self.v6_prefix))
    }

    /// The request's key, or the status to refuse a keyless request with.
    fn key(&self, parts: &Parts) -> Result<Fingerprint, StatusCode> {
        const KEY: u8 = 0;
        const ANONYMOUS: u8 = 2;
        let found = match &self.key {
            KeySource::Header(name) => parts
                .headers
                .get(name)
                .filter(|v| !v.is_empty())
                .map(|v| self.fingerprint(KEY, v.as_bytes())),
            KeySource::ClientIp => self.client_ip(parts).map(|ip| self.fingerprint_ip(ip)),
            KeySource::Custom(f) => f(parts).map(|k| self.fingerprint(KEY, k.as_bytes())),
        };
        if let Some(key) = found {
            return Ok(key);
        }
        match self.missing {
            MissingKey::FallBackToIp => Ok(match self.client_ip(parts) {
                Some(ip) => self.fingerprint_ip(ip),
                None => self.fingerprint(ANONYMOUS, b""),
            }),
            MissingKey::SharedAnonymous => Ok(self.fingerprint(ANONYMOUS, b"")),
            MissingKey::Reject(status) => Err(status),
        }
    }

    fn fingerprint(&self, namespace: u8, bytes: &[u8]) -> Fingerprint {
        self.seed.fingerprint(namespace, bytes)
    }

    /// IP keys have their own namespace, so no header value can name one.
    fn fingerprint_ip(&self, ip: IpAddr) -> Fingerprint {
        const IP: u8 = 1;
        match ip {
            IpAddr::V4(v4) => self.fingerprint(IP, &v4.octets()),
            IpAddr::V6(v6) => self.fingerprint(IP, &v6.octets()),
        }
    }

    /// Every policy's decision into `decisions` (left empty without
    /// policies); the refusal to answer with, if any.
    fn decide(&self, parts: &Parts, decisions: &mut Decisions) -> Option<Response<Bytes>> {
        if self.policies.is_empty() {
            return None;
        }
        let key = match self.key(parts) {
            Ok(k) => k,
            Err(status) => {
                return Some(plain(status, "a key is required for this endpoint\n"));
            }
        };
        // Every policy is judged at the same instant (they share one clock),
        // all or nothing (the core gives back what admitting policies took).
        let now = self.policies[0].1.clock().now();
        let limiters = self.policies.iter().map(|(_, limiter)| limiter);
        let admitted = KeyedLimiter::check_all_with(limiters, &key, 1, now, |i, decision| {
            decisions.set(i, decision);
        });
        match admitted {
            Ok(true) => return None,
            Ok(false) => {}
            Err(Error::TooManyKeys { .. }) => {
                let mut r = plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too many clients are being tracked; try again shortly\n",
                );
                r.headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from_static("1"));
                return Some(r);
            }
            Err(_) => {
                return Some(plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "rate limiter misconfigured\n",
                ));
            }
        }
        // Allowed decisions wait 0: the largest wait is the refusals' longest.
        let wait = decisions
            .iter()
            .map(|d| d.retry_after())
            .max()
            .unwrap_or(Duration::ZERO);
        Some(self.refusal(wait, decisions))
    }

    fn refusal(&self, wait: Duration, decisions: &Decisions) -> Response<Bytes> {
        let secs = retry_after_secs(wait).max(1);
        let mut response = match self.body {
            RefusalBody::Text => plain(
                StatusCode::TOO_MANY_REQUESTS,
                &format!("rate limit exceeded; retry in {secs} s\n"),
            ),
            RefusalBody::ProblemJson => {
                let body = format!(
                    "{{\"type\":\"about:blank\",\"title\":\"Too Many Requests\",\"status\":429,\
                     \"detail\":\"rate limit exceeded; retry in {secs} s\",\"retry_after\":{secs}}}"
                );
                let mut r = Response::new(Bytes::from(body));
                *r.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                r.headers_mut().insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("application/problem+json"),
                );
                r
            }
        };
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(secs));
        insert_all(response.headers_mut(), self.quota_header_values(decisions));
        response
    }

    /// The quota header fields for these decisions (at most three).
    fn quota_header_values(&self, decisions: &Decisions) -> QuotaFields {
        let mut out: QuotaFields = [None, None, None];
        match self.headers {
            QuotaHeaders::Off => {}
            QuotaHeaders::Draft => {
                let entries = self.policies.iter().map(|(p, _)| p).zip(decisions.iter());
                // The string's buffer becomes the value: no copy.
                if let Ok(v) = HeaderValue::from_maybe_shared(Bytes::from(ratelimit(entries))) {
                    out[0] = Some((RATELIMIT.clone(), v));
                }
                out[1] = Some((RATELIMIT_POLICY.clone(), self.policy_field.clone()));
            }
            QuotaHeaders::Legacy => {
                if let Some(tightest) = decisions.iter().min_by_key(Decision::remaining) {
                    for (slot, (name, (_, value))) in out
                        .iter_mut()
                        .zip(LEGACY.iter().zip(legacy_headers(&tightest)))
                    {
                        *slot = HeaderValue::from_str(&value)
                            .ok()
                            .map(|v| (name.clone(), v));
                    }
                }
            }
        }
        out
    }

    /// A slot in the inner service, or `None` when the cap is reached and the
    /// request is not critical.
    fn admit_concurrency(&self, parts: &Parts) -> Result<Option<Slot>, ()> {
        let Some(shed) = &self.shed else {
            return Ok(None);
        };
        if shed.try_enter() {
            Ok(Some(Slot(shed.clone())))
        } else if self.critical.as_ref().is_some_and(|f| f(parts)) {
            Ok(None)
        } else {
            Err(())
        }
    }
}

/// Up to three header fields, without a heap allocation for the list.
type QuotaFields = [Option<(HeaderName, HeaderValue)>; 3];

fn insert_all(headers: &mut http::HeaderMap, fields: QuotaFields) {
    for (name, value) in fields.into_iter().flatten() {
        headers.insert(name, value);
    }
}

fn plain(status: StatusCode, text: &str) -> Response<Bytes> {
    let mut r = Response::new(Bytes::from(text.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn convert<B: From<Bytes>>(response: Response<Bytes>) -> Response<B> {
    response.map(B::from)
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: From<Bytes> + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ResBody>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The inner service is called here, not in the response future: the
        // service that was polled ready is the one called, with no clone.
        let inner = &mut self.inner;
        let shared = &*self.shared;
        let (parts, body) = request.into_parts();
        if shared.exempt.as_ref().is_some_and(|f| f(&parts)) {
            return Box::pin(inner.call(Request::from_parts(parts, body)));
        }
        // Shedding first: a saturated service refuses before any token is spent.
        let slot = match shared.admit_concurrency(&parts) {
            Ok(slot) => slot,
            Err(()) => {
                let mut r = plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server busy; try again shortly\n",
                );
                r.headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from_static("1"));
                return Box::pin(std::future::ready(Ok(convert(r))));
            }
        };
        let mut decisions = Decisions::default();
        if let Some(r) = shared.decide(&parts, &mut decisions) {
            return Box::pin(std::future::ready(Ok(convert(r))));
        }
        // Worked out now, so the response future needs nothing shared.
        let quota = shared.quota_header_values(&decisions);
        let future = inner.call(Request::from_parts(parts, body));
        Box::pin(async move {
            let mut response = future.await?;
            drop(slot);
            insert_all(response.headers_mut(), quota);
            Ok(response)
        })
    }
}
