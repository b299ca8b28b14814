//! What a user hands the builder besides quotas: the request key, the
//! predicates and hooks, and what the metrics hook is told.

use std::sync::Arc;

use http::header::HeaderName;
use http::request::Parts;
use ratebound::Error;
use ratebound::gate::Outcome;
use ratebound::http::Priority;

#[cfg(doc)]
use crate::Builder;

pub(crate) type KeyFn = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;
pub(crate) type Predicate = Arc<dyn Fn(&Parts) -> bool + Send + Sync>;
pub(crate) type OnDecision = Arc<dyn Fn(&DecisionEvent<'_>) + Send + Sync>;
pub(crate) type PriorityFn = Arc<dyn Fn(&Parts) -> Priority + Send + Sync>;

/// What [`Builder::on_decision`]'s callback is told about each limited
/// request, for metrics.
#[derive(Clone, Copy, Debug)]
pub struct DecisionEvent<'a> {
    /// Allowed, refused (429), shed (503), rejected (no valid key, a full
    /// key table) or store error (503: a remote policy's check failed).
    pub outcome: Outcome,
    /// The policy that refused, if one did; the remote policy that failed,
    /// for [`Outcome::StoreError`].
    pub policy: Option<&'a str>,
    /// A remote policy's episode of failures began or ended with this
    /// request (the layer also logs it, once per episode).
    pub notice: Option<ratebound::gate::StoreNotice<'a>>,
    /// Every policy's name, in order.
    pub policies: &'a [String],
    /// The [`Builder::label`] if set, else the route template axum matched
    /// (`/items/{id}`: known to a layer added with `Router::layer` or
    /// `route_layer`, not to one around the whole `Router` as a service).
    pub label: Option<&'a str>,
    /// The request's head (its path, method, ...).
    pub request: &'a Parts,
    /// The priority of a request [shed](Outcome::Shed) (see
    /// [`Builder::priority`]).
    pub priority: Option<Priority>,
}

/// Where a request's key comes from.
#[derive(Clone)]
pub enum RequestKey {
    /// A request header (e.g. `X-API-Key`): one line, not empty, no comma
    /// (see the crate docs); anything else is no key.
    Header(HeaderName),
    /// The client IP (see the crate docs on proxies and IPv6 grouping).
    ClientIp,
    /// A closure over the request head; `None` or `""` means no key.
    Custom(KeyFn),
}

impl RequestKey {
    /// Keys from the header `name`.
    ///
    /// # Errors
    /// [`Error::Parse`] for an invalid header name.
    pub fn header(name: &str) -> Result<RequestKey, Error> {
        HeaderName::try_from(ratebound::http::field_name(name)?)
            .map(RequestKey::Header)
            .map_err(|_| Error::Parse {
                input: name.to_string(),
                reason: "not an HTTP header name",
            })
    }

    /// Keys from a closure over the request head.
    pub fn custom(f: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static) -> RequestKey {
        RequestKey::Custom(Arc::new(f))
    }
}
