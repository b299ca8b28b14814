//! A tower [`Layer`] that rate-limits HTTP requests per key with ratebound:
//! refusals are `429 Too Many Requests` with an honest `Retry-After` (whole
//! seconds, rounded **up**) and the IETF `RateLimit-Policy` / `RateLimit`
//! fields; an optional concurrency cap sheds load with `503` before the inner
//! service runs. Works with axum (`Router::layer`, `Router::route_layer`),
//! hyper services and tonic (gRPC calls get a gRPC status, see below).
//!
//! The whole decision — key, proxies, policies, status, headers, body — is
//! made by the core's [`ratebound::any::Gate`], the same one the Python and
//! Node middleware call; this crate only moves a request's parts in and the
//! verdict out, and `spec/gate.json` is replayed against it over HTTP.
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
//! # gRPC
//! A request whose content type is `application/grpc…` is refused the gRPC
//! way, since a gRPC client cannot read an HTTP 429: HTTP 200 with no body,
//! `grpc-status` `RESOURCE_EXHAUSTED` (a policy refused) or `UNAVAILABLE`
//! (shed), and a `google.rpc.Status` in `grpc-status-details-bin` whose
//! `google.rpc.RetryInfo` holds the wait — the same whole seconds, rounded
//! up, as `Retry-After`, which comes along as metadata with the RateLimit
//! fields. With the `tonic` feature the peer address is read from tonic's
//! `TcpConnectInfo`. A tonic server takes the layer as it is:
//! ```
//! # #[cfg(feature = "tonic")] fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use ratebound::Quota;
//! use ratebound_http::{KeySource, RateLimitLayer};
//!
//! let layer = RateLimitLayer::builder()
//!     .policy("calls", Quota::parse("2/minute")?)
//!     .key(KeySource::header("x-api-key")?) // gRPC metadata are headers
//!     .build()?;
//! let server = tonic::transport::Server::builder().layer(layer);
//! # let _ = server; Ok(()) }
//! # #[cfg(not(feature = "tonic"))] fn main() {}
//! ```
//!
//! # Keys
//! [`KeySource`] picks the key: a header, the client IP, or a closure over
//! the request. A key header counts only when the request has exactly one
//! line of it, not empty and without a comma; otherwise the request has no
//! valid key (a client that adds a second line, hoping the first wins, gets
//! nothing from it). A request without a valid key follows [`MissingKey`]:
//! by default it falls back to the client IP — one shared bucket for every
//! keyless client would let one of them lock all the others out. Keys are
//! stored as 128-bit keyed hashes of their bytes (one pass of
//! SipHash-2-4-128 with a random key), so a 64 KiB or non-UTF-8 header costs
//! what a short key does and no key is copied.
//!
//! # Client addresses behind proxies
//! The peer address comes from axum's `ConnectInfo<SocketAddr>` or a
//! [`PeerAddr`] extension. Forwarding headers are ignored unless
//! [`trusted_proxies`](Builder::trusted_proxies) says whose to believe, and
//! then only the one header [`client_ip_header`](Builder::client_ip_header)
//! names is read (default `X-Forwarded-For`) — never a header the request
//! happens to carry, since a proxy passes on whatever else the client sent.
//! IPv6 addresses are grouped by a prefix (default /64, so one host cannot
//! rotate through its addresses).
//!
//! Behind nginx (`proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;`)
//! on the same host:
//! ```
//! # use ratebound::{Quota, http::{Cidr, TrustedProxies}};
//! # use ratebound_http::RateLimitLayer;
//! let layer = RateLimitLayer::builder()
//!     .policy("default", Quota::parse("10/s burst 20")?)
//!     .trusted_proxies(TrustedProxies::Cidrs(vec![Cidr::parse("127.0.0.1/32")?]))
//!     .build()?;
//! # Ok::<(), ratebound::Error>(())
//! ```
//! Behind Cloudflare, which overwrites `CF-Connecting-IP` (trust only
//! Cloudflare's published ranges, so that no one else can set it):
//! ```
//! # use ratebound::{Quota, http::{Cidr, Forwarding, TrustedProxies}};
//! # use ratebound_http::RateLimitLayer;
//! let cloudflare = ["173.245.48.0/20", "103.21.244.0/22", "2400:cb00::/32"]; // ...
//! let layer = RateLimitLayer::builder()
//!     .policy("default", Quota::parse("10/s burst 20")?)
//!     .trusted_proxies(TrustedProxies::Cidrs(
//!         cloudflare.iter().map(|c| Cidr::parse(c)).collect::<Result<_, _>>()?,
//!     ))
//!     .client_ip_header(Forwarding::parse("CF-Connecting-IP")?)
//!     .build()?;
//! # Ok::<(), ratebound::Error>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod grpc;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};
use http::request::Parts;
use http::{HeaderMap, Request, Response, StatusCode};
use ratebound::any::{self, AnyClock, Gate, GateOptions, Key, Verdict};
pub use ratebound::any::{MissingKey, Outcome, QuotaHeaders, RefusalBody};
use ratebound::http::{Forwarding, Headers, TrustedProxies};
use ratebound::{Clock, Error, KeyedAlgorithm, Overflow, Quota};
use tower_layer::Layer;
use tower_service::Service;

/// The peer's socket address, for servers that are not axum: insert it into
/// the request's extensions (axum's `ConnectInfo<SocketAddr>` is read too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

type KeyFn = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;
type Predicate = Arc<dyn Fn(&Parts) -> bool + Send + Sync>;
type OnDecision = Arc<dyn Fn(&DecisionEvent<'_>) + Send + Sync>;

/// What [`Builder::on_decision`]'s callback is told about each limited
/// request, for metrics.
#[derive(Clone, Copy, Debug)]
pub struct DecisionEvent<'a> {
    /// Allowed, refused (429), shed (503) or rejected (no valid key, a full
    /// key table).
    pub outcome: Outcome,
    /// The policy that refused, if one did.
    pub policy: Option<&'a str>,
    /// Every policy's name, in order.
    pub policies: &'a [String],
    /// The [`Builder::label`] if set, else the route template axum matched
    /// (`/items/{id}`: known to a layer added with `Router::layer` or
    /// `route_layer`, not to one around the whole `Router` as a service).
    pub label: Option<&'a str>,
    /// The request's head (its path, method, ...).
    pub request: &'a Parts,
}

/// Where a request's key comes from.
#[derive(Clone)]
pub enum KeySource {
    /// A request header (e.g. `X-API-Key`): one line, not empty, no comma
    /// (see the crate docs); anything else is no key.
    Header(HeaderName),
    /// The client IP (see the crate docs on proxies and IPv6 grouping).
    ClientIp,
    /// A closure over the request head; `None` or `""` means no key.
    Custom(KeyFn),
}

impl KeySource {
    /// Keys from the header `name`.
    ///
    /// # Errors
    /// [`Error::Parse`] for an invalid header name.
    pub fn header(name: &str) -> Result<KeySource, Error> {
        HeaderName::try_from(ratebound::http::field_name(name)?)
            .map(KeySource::Header)
            .map_err(|_| Error::Parse {
                input: name.to_string(),
                reason: "not an HTTP header name",
            })
    }

    /// Keys from a closure over the request head.
    pub fn custom(f: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static) -> KeySource {
        KeySource::Custom(Arc::new(f))
    }
}

/// Builds a [`RateLimitLayer`]. Every option's default is the core's
/// ([`GateOptions::default`]), the same in Python and Node.
pub struct Builder {
    quotas: Vec<(String, KeyedAlgorithm)>,
    clock: AnyClock,
    options: GateOptions,
    key: KeySource,
    exempt: Option<Predicate>,
    critical: Option<Predicate>,
    on_decision: Option<OnDecision>,
    label: Option<String>,
}

impl Builder {
    /// Calls `f` once per limited request (not for exempt ones) with what
    /// happened — for metrics. Unset, nothing is done for it.
    pub fn on_decision(mut self, f: impl Fn(&DecisionEvent<'_>) + Send + Sync + 'static) -> Self {
        self.on_decision = Some(Arc::new(f));
        self
    }

    /// The label [`DecisionEvent::label`] carries, instead of the route
    /// template axum matched.
    pub fn label(mut self, label: &str) -> Self {
        self.label = Some(label.to_string());
        self
    }

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
        self.options.key = match &key {
            KeySource::Header(name) => any::KeySource::Header(name.as_str().to_string()),
            KeySource::ClientIp => any::KeySource::ClientIp,
            KeySource::Custom(_) => any::KeySource::Given,
        };
        self.key = key;
        self
    }

    /// What a request without a valid key gets (default:
    /// [`MissingKey::FallBackToIp`]); a [`MissingKey::Reject`] status must
    /// be 400–599 ([`MissingKey::reject`] checks one).
    pub fn missing_key(mut self, missing: MissingKey) -> Self {
        self.options.missing = missing;
        self
    }

    /// Whose forwarding headers to believe (default: nobody's).
    pub fn trusted_proxies(mut self, trusted: TrustedProxies) -> Self {
        self.options.trusted = trusted;
        self
    }

    /// Which forwarding header carries the client address (default:
    /// `X-Forwarded-For`); read only from trusted proxies.
    pub fn client_ip_header(mut self, header: Forwarding) -> Self {
        self.options.forwarding = Some(header);
        self
    }

    /// How many leading bits of an IPv6 address make one client (default 64).
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.options.ipv6_prefix = bits.min(128);
        self
    }

    /// Caps the keys tracked per policy (default: 1 000 000, evicting the
    /// least recent).
    pub fn max_keys(mut self, max_keys: usize, overflow: Overflow) -> Self {
        self.options.max_keys = (max_keys, overflow);
        self
    }

    /// Requests for which `f` is true bypass limiting and shedding (health
    /// checks, internal callers).
    pub fn exempt(mut self, f: impl Fn(&Parts) -> bool + Send + Sync + 'static) -> Self {
        self.exempt = Some(Arc::new(f));
        self
    }

    /// At most `limit` requests in flight at once — from the call into the
    /// inner service until the response body has been sent (or dropped), so
    /// a streaming response counts until it ends; the rest are refused at
    /// once with 503 and `Retry-After: 1` — never queued.
    pub fn concurrency_limit(mut self, limit: usize) -> Self {
        self.options.concurrency_limit = Some(limit);
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
        self.options.headers = headers;
        self
    }

    /// The body of a 429 (default: [`RefusalBody::Text`]).
    pub fn refusal_body(mut self, body: RefusalBody) -> Self {
        self.options.body = body;
        self
    }

    /// The clock the limiters read (default: `MonotonicClock`).
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = AnyClock::Shared(Arc::new(clock));
        self
    }

    /// The layer.
    ///
    /// # Errors
    /// [`Gate::new`]'s: [`Error::NoLimiters`] without a policy (unless a
    /// concurrency limit is all you want); [`Error::InvalidLimit`] for a
    /// concurrency limit or `max_keys` of 0; [`Error::InvalidOption`] for a
    /// `client_ip_header` without trusted proxies; the policies' own errors
    /// ([`Error::Parse`] for a name that is not printable ASCII).
    pub fn build(self) -> Result<RateLimitLayer, Error> {
        let gate = Gate::new(self.quotas, self.options, self.clock)?;
        let policy_field =
            HeaderValue::from_str(gate.policy_field()).unwrap_or(HeaderValue::from_static(""));
        let names = gate
            .header_names()
            .filter_map(|n| Some((n.as_ptr() as usize, HeaderName::try_from(n).ok()?)))
            .collect();
        let policy_names = gate.policy_names().map(str::to_string).collect();
        Ok(RateLimitLayer {
            shared: Arc::new(Shared {
                gate,
                names,
                policy_field,
                key: self.key,
                exempt: self.exempt,
                critical: self.critical,
                on_decision: self.on_decision,
                label: self.label,
                policy_names,
            }),
        })
    }
}

struct Shared {
    gate: Gate,
    /// The header names the gate reads, by the address of the gate's string.
    names: Vec<(usize, HeaderName)>,
    policy_field: HeaderValue,
    key: KeySource,
    exempt: Option<Predicate>,
    critical: Option<Predicate>,
    on_decision: Option<OnDecision>,
    label: Option<String>,
    policy_names: Vec<String>,
}

impl Shared {
    /// The route template axum matched (`/items/{id}`), when there is one.
    fn route(request: &Parts) -> Option<&str> {
        #[cfg(feature = "axum")]
        if let Some(matched) = request.extensions.get::<axum::extract::MatchedPath>() {
            return Some(matched.as_str());
        }
        let _ = request;
        None
    }

    /// Tells the metrics hook, if there is one.
    #[inline]
    fn report(&self, outcome: Outcome, policy: Option<&str>, request: &Parts) {
        if let Some(f) = &self.on_decision {
            f(&DecisionEvent {
                outcome,
                policy,
                policies: &self.policy_names,
                label: self.label.as_deref().or_else(|| Self::route(request)),
                request,
            });
        }
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
            clock: AnyClock::default(),
            options: GateOptions::default(),
            key: KeySource::ClientIp,
            exempt: None,
            critical: None,
            on_decision: None,
            label: None,
        }
    }

    /// The gate making the decisions (for its key count, `cleanup`, ...).
    pub fn gate(&self) -> &Gate {
        &self.shared.gate
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

/// The request's header lines, for the gate: the names it reads are made
/// into `HeaderName`s once, when the layer is built, not parsed per request
/// (found by the address of the gate's own name string, else by text).
struct Lines<'a> {
    map: &'a HeaderMap,
    names: &'a [(usize, HeaderName)],
}

impl Headers for Lines<'_> {
    #[inline]
    fn for_each_line<F: FnMut(&[u8])>(&self, name: &str, mut f: F) {
        let known = self
            .names
            .iter()
            .find(|(at, _)| *at == name.as_ptr() as usize)
            .or_else(|| self.names.iter().find(|(_, n)| n.as_str() == name));
        match known {
            // No field has a second line (both counts are O(1)): one lookup.
            Some((_, known)) if self.map.len() == self.map.keys_len() => {
                if let Some(v) = self.map.get(known) {
                    f(v.as_bytes());
                }
            }
            Some((_, known)) => self.map.get_all(known).iter().for_each(|v| f(v.as_bytes())),
            None => self.map.get_all(name).iter().for_each(|v| f(v.as_bytes())),
        }
    }
}

/// A place in the inner service, given back on drop.
struct Slot(Arc<Shared>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.gate.leave();
    }
}

/// Up to three header fields, without a heap allocation for the list.
type QuotaFields = [Option<(HeaderName, HeaderValue)>; 3];

impl Shared {
    fn peer(parts: &Parts) -> Option<std::net::IpAddr> {
        let peer = parts.extensions.get::<PeerAddr>().map(|p| p.0);
        #[cfg(feature = "axum")]
        let peer = peer.or_else(|| {
            parts
                .extensions
                .get::<axum::extract::ConnectInfo<SocketAddr>>()
                .map(|c| c.0)
        });
        #[cfg(feature = "tonic")]
        let peer = peer.or_else(|| {
            parts
                .extensions
                .get::<tonic::transport::server::TcpConnectInfo>()
                .and_then(|c| c.remote_addr())
        });
        peer.map(|p| p.ip())
    }

    /// The gate's verdict on the request head.
    fn decide(&self, parts: &Parts) -> Verdict<'_> {
        let custom = match &self.key {
            KeySource::Custom(f) => f(parts),
            _ => None,
        };
        self.gate.decide(&any::Request {
            key: custom.as_deref().map(Key::Text),
            peer: Self::peer(parts),
            headers: &Lines {
                map: &parts.headers,
                names: &self.names,
            },
        })
    }

    /// The verdict's quota fields as header values (the `RateLimit` string's
    /// buffer becomes its value: no copy).
    fn quota_fields(&self, fields: any::Fields<'_>) -> QuotaFields {
        let mut out: QuotaFields = [None, None, None];
        if let Some(value) = fields.ratelimit
            && let Ok(v) = HeaderValue::from_maybe_shared(Bytes::from(value))
        {
            out[0] = Some((RATELIMIT.clone(), v));
        }
        if fields.policy.is_some() {
            out[1] = Some((RATELIMIT_POLICY.clone(), self.policy_field.clone()));
        }
        if let Some(values) = fields.legacy {
            for (slot, (name, value)) in out.iter_mut().zip(LEGACY.iter().zip(values)) {
                *slot = Some((name.clone(), HeaderValue::from(value)));
            }
        }
        out
    }

    /// The response to a verdict that refuses: a gRPC status for a gRPC
    /// request, else the gate's status and body.
    fn refusal(&self, verdict: Verdict<'_>, request: &Parts) -> Response<Bytes> {
        if grpc::is_grpc(request) {
            let mut response = grpc::refusal(&verdict);
            insert_all(response.headers_mut(), self.quota_fields(verdict.fields));
            return response;
        }
        let (content_type, body) = verdict
            .body
            .unwrap_or(("text/plain; charset=utf-8", String::new()));
        let mut response = Response::new(Bytes::from(body));
        *response.status_mut() =
            StatusCode::from_u16(verdict.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        if let Some(secs) = verdict.fields.retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        insert_all(headers, self.quota_fields(verdict.fields));
        response
    }
}

fn insert_all(headers: &mut HeaderMap, fields: QuotaFields) {
    for (name, value) in fields.into_iter().flatten() {
        headers.insert(name, value);
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

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
            let future = inner.call(Request::from_parts(parts, body));
            return ResponseFuture::inner(future, None, [None, None, None]);
        }
        // Shedding first: a saturated service refuses before any token is spent.
        let mut slot = None;
        if shared.gate.is_capped() {
            if shared.gate.try_enter() {
                slot = Some(Slot(self.shared.clone()));
            } else if !shared.critical.as_ref().is_some_and(|f| f(&parts)) {
                shared.report(Outcome::Shed, None, &parts);
                return ResponseFuture::ready(shared.refusal(shared.gate.shed(), &parts));
            }
        }
        let verdict = shared.decide(&parts);
        shared.report(verdict.outcome, verdict.refused_by, &parts);
        if !verdict.is_pass() {
            return ResponseFuture::ready(shared.refusal(verdict, &parts));
        }
        // Worked out now, so the response future needs nothing shared.
        let quota = shared.quota_fields(verdict.fields);
        let future = inner.call(Request::from_parts(parts, body));
        ResponseFuture::inner(future, slot, quota)
    }
}

pin_project_lite::pin_project! {
    /// The response future of [`RateLimit`]: a refusal made at once, or the
    /// inner service's response with the quota fields added (the
    /// concurrency place passes to its body, or is given back if the future
    /// is dropped or fails). Not boxed.
    pub struct ResponseFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<F> {
        Ready { response: Option<Response<Bytes>> },
        Inner {
            #[pin]
            future: F,
            slot: Option<Slot>,
            quota: QuotaFields,
        },
    }
}

impl<F> ResponseFuture<F> {
    fn ready(response: Response<Bytes>) -> Self {
        ResponseFuture {
            state: State::Ready {
                response: Some(response),
            },
        }
    }

    fn inner(future: F, slot: Option<Slot>, quota: QuotaFields) -> Self {
        ResponseFuture {
            state: State::Inner {
                future,
                slot,
                quota,
            },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            // Polled again after completion: an empty 500 rather than a panic.
            StateProj::Ready { response } => {
                let response = response.take().unwrap_or_else(|| {
                    let mut r = Response::new(Bytes::new());
                    *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                    r
                });
                Poll::Ready(Ok(response.map(ResponseBody::refusal)))
            }
            StateProj::Inner {
                future,
                slot,
                quota,
            } => {
                let result = std::task::ready!(future.poll(cx));
                // The place goes with the body: a request is in flight until
                // its response has been sent (an error gives it back now).
                let slot = slot.take();
                Poll::Ready(result.map(|mut response| {
                    insert_all(response.headers_mut(), std::mem::take(quota));
                    response.map(|body| ResponseBody::inner(body, slot))
                }))
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// The body of a [`RateLimit`] response: the inner service's body, or
    /// the layer's own refusal (empty for a gRPC refusal, which is all
    /// headers). Works with any inner body whose data is [`Bytes`] — axum's,
    /// hyper's, tonic's. Under a [concurrency
    /// limit](Builder::concurrency_limit) it holds the request's place until
    /// its last frame has been read, or it is dropped: a streaming response
    /// is in flight until it ends.
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project_lite::pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B, slot: Option<Slot> },
        Refusal { data: Option<Bytes> },
    }
}

impl<B> ResponseBody<B> {
    fn inner(body: B, slot: Option<Slot>) -> Self {
        ResponseBody {
            kind: Kind::Inner { body, slot },
        }
    }

    fn refusal(data: Bytes) -> Self {
        ResponseBody {
            kind: Kind::Refusal {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }
}

impl<B: http_body::Body<Data = Bytes>> http_body::Body for ResponseBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body, slot } => {
                let frame = std::task::ready!(body.poll_frame(cx));
                if !matches!(frame, Some(Ok(_))) {
                    // The end, or an error: the response is over.
                    drop(slot.take());
                }
                Poll::Ready(frame)
            }
            KindProj::Refusal { data } => {
                Poll::Ready(data.take().map(|d| Ok(http_body::Frame::data(d))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body, .. } => body.is_end_stream(),
            Kind::Refusal { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match &self.kind {
            Kind::Inner { body, .. } => body.size_hint(),
            Kind::Refusal { data } => {
                http_body::SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

/// The README's examples, compiled (and run where they can) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
