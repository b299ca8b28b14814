//! The [`Builder`] of a [`RateLimitLayer`] (what it is handed besides
//! quotas is `options.rs`').

use std::sync::Arc;

use http::header::{HeaderName, HeaderValue};
use http::request::Parts;
use ratebound::any::AnyClock;
use ratebound::gate;
use ratebound::gate::{Gate, GateOptions};
use ratebound::gate::{MissingKey, QuotaHeaders, RefusalBody};
use ratebound::http::{AdaptiveConcurrency, Forwarding, Priority, TrustedProxies};
use ratebound::{Clock, Error, KeyedAlgorithm, Overflow, Quota};

use ratebound::KeyedLimit;

use crate::options::RequestKey;
use crate::state::{LayerState, RequestHooks};
use crate::{DecisionEvent, RateLimitLayer};

impl RateLimitLayer {
    /// A builder with no policies, client-IP keys and draft headers.
    pub fn builder() -> Builder {
        Builder {
            quotas: Vec::new(),
            clock: AnyClock::default(),
            options: GateOptions::default(),
            hooks: RequestHooks {
                key: RequestKey::ClientIp,
                exempt: None,
                critical: None,
                priority: None,
                on_decision: None,
                label: None,
            },
            remote: Vec::new(),
        }
    }
}

/// Builds a [`RateLimitLayer`]. Every option's default is the core's
/// ([`GateOptions::default`]), the same in Python and Node.
pub struct Builder {
    pub(crate) quotas: Vec<(String, KeyedAlgorithm)>,
    pub(crate) clock: AnyClock,
    pub(crate) options: GateOptions,
    pub(crate) hooks: RequestHooks,
    pub(crate) remote: Vec<(String, Box<dyn KeyedLimit>)>,
}

impl Builder {
    /// Calls `f` once per limited request (not for exempt ones) with what
    /// happened — for metrics. Unset, nothing is done for it.
    pub fn on_decision(mut self, f: impl Fn(&DecisionEvent<'_>) + Send + Sync + 'static) -> Self {
        self.hooks.on_decision = Some(Arc::new(f));
        self
    }

    /// The label [`DecisionEvent::label`] carries, instead of the route
    /// template axum matched.
    pub fn label(mut self, label: &str) -> Self {
        self.hooks.label = Some(label.to_string());
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

    /// Adds a policy decided outside the layer, named `name` (its
    /// `RateLimit` entry, and its scope in a store shared by several
    /// policies): a global limit in Redis (`ratebound_redis::RedisLimiter`,
    /// feature `redis`), a limit shared by the host's processes
    /// (`ratebound_shm::SharedKeyedLimiter`, feature `shm`), or any
    /// [`KeyedLimit`]. Every policy must admit; the remote ones are asked
    /// first, all at once, with the request's key as every instance
    /// derives it, as bytes, within `name` as its scope (see the crate's
    /// "Remote policies").
    ///
    /// # Examples
    /// One limit per API key for the whole fleet, and a local one per
    /// instance:
    /// ```no_run
    /// # #[cfg(feature = "redis")]
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use ratebound::Quota;
    /// use ratebound_http::{RequestKey, RateLimitLayer};
    /// use ratebound_redis::RedisLimiter;
    ///
    /// let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let conn = redis::aio::ConnectionManager::new(client).await?;
    /// let global = RedisLimiter::token_bucket(Quota::parse("100/minute")?, conn)?;
    /// let layer = RateLimitLayer::builder()
    ///     .policy("local", Quota::parse("10/s burst 20")?)
    ///     .remote("global", global)
    ///     .key(RequestKey::header("x-api-key")?)
    ///     .build()?;
    /// # let _ = layer; Ok(()) }
    /// ```
    pub fn remote(mut self, name: &str, policy: impl KeyedLimit + 'static) -> Self {
        self.options
            .remote
            .push((name.to_string(), policy.algorithm()));
        self.remote.push((name.to_string(), Box::new(policy)));
        self
    }

    /// Where keys come from (default: [`RequestKey::ClientIp`]).
    pub fn key(mut self, key: RequestKey) -> Self {
        self.options.key = match &key {
            RequestKey::Header(name) => gate::KeySource::Header(name.as_str().to_string()),
            RequestKey::ClientIp => gate::KeySource::ClientIp,
            RequestKey::Custom(_) => gate::KeySource::Given,
        };
        self.hooks.key = key;
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
        self.hooks.exempt = Some(Arc::new(f));
        self
    }

    /// At most `limit` requests in flight at once — from the call into the
    /// inner service until the response body has been sent (or dropped), so
    /// a streaming response counts until it ends; the rest are refused at
    /// once with 503 and `Retry-After: 1` — never queued, unless a
    /// [`queue`](Self::queue) lets them wait a little.
    pub fn concurrency_limit(mut self, limit: usize) -> Self {
        self.options.concurrency_limit = Some(limit);
        self
    }

    /// Requests for which `f` is true are never shed by the concurrency
    /// limit: below the cap they take a place like any request (so they
    /// count toward it); at the cap they go through without one, so the
    /// number in flight can exceed the cap by the critical requests. (A
    /// shortcut for a [`priority`](Self::priority) of
    /// [`Priority::Critical`].)
    pub fn critical(mut self, f: impl Fn(&Parts) -> bool + Send + Sync + 'static) -> Self {
        self.hooks.critical = Some(Arc::new(f));
        self
    }

    /// A concurrency limit learned from latency instead of a fixed number
    /// (not with [`concurrency_limit`](Self::concurrency_limit)): it starts
    /// at [`initial_limit`](AdaptiveConcurrency::initial_limit), falls when
    /// admitted requests get slower than their baseline (the latency of
    /// requests that entered alone) by more than the tolerance, and rises
    /// while they do not — so a service sheds with 503 under overload while
    /// the requests it admits stay fast, without knowing its capacity.
    /// [`AdaptiveConcurrency::default()`] needs no tuning. A request's
    /// latency is taken when its response head is ready.
    ///
    /// ```
    /// use ratebound_http::{AdaptiveConcurrency, Priority, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::builder()
    ///     .adaptive_concurrency(AdaptiveConcurrency::default())
    ///     .priority(|parts| match parts.uri.path() {
    ///         "/healthz" => Priority::Critical,
    ///         p if p.starts_with("/reports/") => Priority::Background,
    ///         _ => Priority::Normal,
    ///     })
    ///     .build()?;
    /// assert_eq!(layer.gate().concurrency().unwrap().limit(), 20);
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    pub fn adaptive_concurrency(mut self, tuning: AdaptiveConcurrency) -> Self {
        self.options.adaptive_concurrency = Some(tuning);
        self
    }

    /// The priority of each request under the concurrency limit (fixed or
    /// adaptive): [`Priority::Background`] requests get a place only while
    /// fewer than the [background fraction](Self::background_fraction) of
    /// the limit are in flight, so they are shed first;
    /// [`Priority::Critical`] ones are never shed. `f` is called only once
    /// the requests in flight reach that fraction.
    pub fn priority(mut self, f: impl Fn(&Parts) -> Priority + Send + Sync + 'static) -> Self {
        self.hooks.priority = Some(Arc::new(f));
        self
    }

    /// A short queue in front of the concurrency limit (fixed or adaptive;
    /// feature `queue`, on by default, which times the wait on tokio's
    /// timer): a normal request that finds every place taken waits up to
    /// `max_wait` for one instead of 503 at once — a few milliseconds
    /// (CoDel's target is 5 ms) absorb a burst without holding stale
    /// requests. A place given back goes straight to a waiter: the oldest
    /// while the queue is fresh, the newest once the oldest has waited half
    /// of `max_wait` (adaptive LIFO). Background requests never queue;
    /// critical ones never need to. Unset (the default), nothing waits.
    #[cfg(feature = "queue")]
    pub fn queue(mut self, max_wait: std::time::Duration) -> Self {
        self.options.concurrency_queue = Some(max_wait);
        self
    }

    /// The share of the concurrency limit background requests may fill
    /// (default ½; 0 sheds them whenever anything is in flight).
    pub fn background_fraction(mut self, fraction: f64) -> Self {
        self.options.background_fraction = fraction;
        self
    }

    /// The `Retry-After` of the 503 answering a request whose
    /// remote policy ([`Builder::remote`]) failed
    /// ([`RemoteAnswer::Failed`](ratebound::gate::RemoteAnswer::Failed)):
    /// whole seconds, 1 to 3600 (default 1; [`build`](Self::build) refuses
    /// others).
    pub fn store_error_retry_after(mut self, secs: u64) -> Self {
        self.options.store_error_retry_after = secs;
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
    /// concurrency limit or `max_keys` of 0; [`Error::InvalidNumber`] for
    /// bad [`AdaptiveConcurrency`] tuning or a background fraction outside
    /// 0–1; [`Error::InvalidOption`] for a fixed and an adaptive
    /// concurrency limit together, a background fraction without either, a
    /// `client_ip_header` without trusted proxies, or two policies (local
    /// or [remote](Self::remote)) of one name; the policies' own errors
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
        #[cfg(feature = "queue")]
        let queued = gate.concurrency().is_some_and(|c| c.queue_wait().is_some());
        Ok(RateLimitLayer {
            shared: Arc::new(LayerState {
                gate,
                names,
                policy_field,
                hooks: self.hooks,
                policy_names,
                remote: self.remote,
                #[cfg(feature = "queue")]
                queued,
            }),
        })
    }
}
