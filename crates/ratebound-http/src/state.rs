//! What a layer holds, shared by its services and their futures: the gate,
//! the header names, the user's hooks and the remote policies — and how a
//! request head and a verdict are read and written with them.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};
use http::request::Parts;
use http::{HeaderMap, Response, StatusCode};
use ratebound::any::Key;
use ratebound::gate;
use ratebound::gate::{Gate, Hooks, Verdict};
use ratebound::http::{Headers, Priority};

use crate::options::{DecisionEvent, OnDecision, Predicate, PriorityFn, RequestKey};
use crate::{PeerAddr, grpc};

/// The builder's per-request settings, kept by the layer as given.
pub(crate) struct RequestHooks {
    pub(crate) key: RequestKey,
    pub(crate) exempt: Option<Predicate>,
    pub(crate) critical: Option<Predicate>,
    pub(crate) priority: Option<PriorityFn>,
    pub(crate) on_decision: Option<OnDecision>,
    pub(crate) label: Option<String>,
}

pub(crate) struct LayerState {
    pub(crate) gate: Gate,
    /// The header names the gate reads, by the address of the gate's string.
    pub(crate) names: Vec<(usize, HeaderName)>,
    pub(crate) policy_field: HeaderValue,
    pub(crate) hooks: RequestHooks,
    pub(crate) policy_names: Vec<String>,
    /// The remote policies by name, in the gate's `remote_names` order.
    pub(crate) remote: Vec<(String, Box<dyn ratebound::KeyedLimit>)>,
    /// Whether the concurrency cap has a queue (feature `queue`).
    #[cfg(feature = "queue")]
    pub(crate) queued: bool,
}

impl LayerState {
    /// The route template axum matched (`/items/{id}`), when there is one.
    pub(crate) fn route(request: &Parts) -> Option<&str> {
        #[cfg(feature = "axum")]
        if let Some(matched) = request.extensions.get::<axum::extract::MatchedPath>() {
            return Some(matched.as_str());
        }
        let _ = request;
        None
    }

    /// Tells the metrics hook, if there is one, and logs a remote
    /// policy's episode of failures as it begins (a warning) and ends.
    #[inline]
    pub(crate) fn report(&self, verdict: &Verdict<'_>, request: &Parts) {
        if let Some(notice) = &verdict.notice {
            log_notice(notice);
        }
        if let Some(f) = &self.hooks.on_decision {
            f(&DecisionEvent {
                outcome: verdict.outcome,
                policy: verdict.refused_by,
                notice: verdict.notice,
                priority: verdict.priority,
                policies: &self.policy_names,
                label: self.hooks.label.as_deref().or_else(|| Self::route(request)),
                request,
            });
        }
    }
}

/// One line per episode, through the `log` crate (target `ratebound_http`):
/// a warning when a remote policy's checks begin to fail, an info line when
/// it answers again.
#[cold]
fn log_notice(notice: &ratebound::gate::StoreNotice<'_>) {
    if notice.began() {
        log::warn!("{notice}");
    } else {
        log::info!("{notice}");
    }
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
pub(crate) struct HeaderMapLines<'a> {
    map: &'a HeaderMap,
    names: &'a [(usize, HeaderName)],
}

impl LayerState {
    /// The gate's view of a request head.
    #[inline]
    pub(crate) fn lines<'a>(&'a self, parts: &'a Parts) -> HeaderMapLines<'a> {
        HeaderMapLines {
            map: &parts.headers,
            names: &self.names,
        }
    }
}

impl Headers for HeaderMapLines<'_> {
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

/// What the layer's user configured around the gate's decision, for one
/// request: the exempt and critical predicates, the custom key closure and
/// the metrics hook, over the request head.
pub(crate) struct LayerHooks<'a> {
    shared: &'a LayerState,
    parts: &'a Parts,
}

impl<'a> LayerHooks<'a> {
    pub(crate) fn new(shared: &'a LayerState, parts: &'a Parts) -> Self {
        LayerHooks { shared, parts }
    }

    /// Whether the request head satisfies `predicate` (none set: no).
    #[inline]
    fn holds(&self, predicate: &Option<Predicate>) -> bool {
        predicate.as_ref().is_some_and(|f| f(self.parts))
    }
}

impl Hooks for LayerHooks<'_> {
    #[inline]
    fn exempt(&mut self) -> bool {
        self.holds(&self.shared.hooks.exempt)
    }

    #[inline]
    fn critical(&mut self) -> bool {
        self.holds(&self.shared.hooks.critical)
    }

    #[inline]
    fn priority(&mut self) -> Option<Priority> {
        Some(
            self.shared
                .hooks
                .priority
                .as_ref()
                .map_or(Priority::Normal, |f| f(self.parts)),
        )
    }

    /// The [`RequestKey::Custom`] closure's key (the gate asks only for a
    /// custom key source, after shedding).
    #[inline]
    fn with_key<R>(&mut self, f: impl FnOnce(Option<Key<'_>>) -> R) -> Option<R> {
        // A Rust key closure cannot fail: its `None` is no key.
        Some(match &self.shared.hooks.key {
            RequestKey::Custom(key) => f(key(self.parts).as_deref().map(Key::Text)),
            _ => f(None),
        })
    }

    #[inline]
    fn report(&mut self, verdict: &Verdict<'_>) {
        self.shared.report(verdict, self.parts);
    }
}

/// The answer to a sequence a hook stopped (not reached from the layer:
/// its hooks never stop it).
pub(crate) fn stopped() -> Response<Bytes> {
    let mut response = Response::new(Bytes::new());
    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    response
}

/// Up to three header fields, without a heap allocation for the list.
pub(crate) type QuotaFields = [Option<(HeaderName, HeaderValue)>; 3];

impl LayerState {
    #[inline]
    pub(crate) fn peer(parts: &Parts) -> Option<std::net::IpAddr> {
        let peer = parts.extensions.get::<PeerAddr>().map(|p| p.0);
        #[cfg(feature = "axum")]
        let peer = peer.or_else(|| {
            parts
                .extensions
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
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

    /// The verdict's quota fields as header values (the `RateLimit` string's
    /// buffer becomes its value: no copy).
    pub(crate) fn quota_fields(&self, fields: gate::Fields<'_>) -> QuotaFields {
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
    pub(crate) fn refusal(&self, verdict: Verdict<'_>, request: &Parts) -> Response<Bytes> {
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

pub(crate) fn insert_all(headers: &mut HeaderMap, mut fields: QuotaFields) {
    insert_taken(headers, &mut fields);
}

/// Moves each field out of `fields` into `headers` (in place: the three
/// slots are not copied first).
#[inline]
pub(crate) fn insert_taken(headers: &mut HeaderMap, fields: &mut QuotaFields) {
    // An inner limit (a route's own layer) set quota fields already (a
    // response without fields has none: no lookup).
    if !headers.is_empty()
        && let Some((name, _)) = &fields[0]
        && headers.contains_key(name)
    {
        return merge_taken(headers, fields);
    }
    for field in fields {
        // Looked at before it is taken: an empty slot is not copied out.
        if field.is_some()
            && let Some((name, value)) = field.take()
        {
            headers.insert(name, value);
        }
    }
}

/// [`insert_taken`] on a response an inner limit gave quota fields: the
/// core's rule ([`ratebound::gate::merge_fields`]), this layer's entries
/// first (it decided first).
#[cold]
fn merge_taken(headers: &mut HeaderMap, fields: &mut QuotaFields) {
    let text = |v: &HeaderValue| String::from_utf8_lossy(v.as_bytes()).into_owned();
    let mine: Vec<(String, String)> = fields
        .iter_mut()
        .filter_map(Option::take)
        .map(|(n, v)| (n.as_str().to_string(), text(&v)))
        .collect();
    let mut theirs = Vec::new();
    for name in ratebound::gate::GATE_FIELDS {
        if let Some(v) = headers.remove(name) {
            theirs.push((name.to_string(), text(&v)));
        }
    }
    for (name, value) in ratebound::gate::merge_fields(&mine, &theirs) {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(name, v);
        }
    }
}
