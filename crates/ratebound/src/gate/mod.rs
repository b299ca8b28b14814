//! The whole decision of an HTTP rate-limiting middleware, once, for every
//! front door: the tower layer, the Python ASGI/WSGI middleware and the
//! Express/Fastify middleware only convert a request in and a [`Verdict`]
//! out. `spec/gate.json` holds the vectors each of them replays.
//!
//! The core's top layer: it uses the limiters (`crate::any`, `crate::keyed`)
//! and the header rules (`crate::http`), and nothing below it uses it. Its
//! names are re-exported from [`crate::any`] too. This file holds the
//! [`Gate`] itself:
//! the policies, the key of a request, the concurrency cap and the
//! decision; `keys` finds a request's key, and `admission` runs a
//! request's whole sequence around the decision.

mod admission;
mod keys;
mod merge;
mod options;
mod request;
mod spec;
mod verdict;

pub use admission::{Admission, Admit, Ask, Hooks, Place, Queued, Queueing};
pub use merge::{GATE_FIELDS, LIST_FIELDS, is_gate_field, merge_fields};
pub use options::{
    DEFAULT_MAX_KEYS, DEFAULT_STORE_ERROR_RETRY_AFTER, GateOptions, KeySource, Loose, MissingKey,
    QuotaHeaders, RefusalBody, option_name, store_error_retry_after,
};
pub use request::{Decisions, Request};
pub use spec::{
    APP_OPTIONS, DEFAULT_POLICY_NAME, GateSpec, POLICY_FIELDS, PolicySpec, RemoteKind,
    route_inherits, route_option,
};
pub use verdict::{Field, Fields, Outcome, RemoteAnswer, StoreNotice, Verdict};

use std::time::Duration;

use crate::any::{AnyClock, Fingerprinter};
use crate::fingerprint::Fingerprint;
use crate::http::{
    ConcurrencyCap, Forwarding, Headers, Policy, Priority, TrustedProxies, ratelimit_bytes,
    ratelimit_policy, retry_after_secs,
};
use crate::sync::{AtomicU64, Ordering};
use crate::{Clock, Decision, Error, KeyedAlgorithm, KeyedLimiter};

/// An HTTP middleware's decision, whole: the key (see [`KeySource`]; an IP
/// under the trusted-proxy rules, grouped by IPv6 prefix), every policy
/// all-or-nothing, and the answer — status, `Retry-After` in whole seconds
/// rounded up (at least 1), the quota fields and the body. The front doors
/// only move these values in and out of their frameworks.
///
/// # Examples
/// ```
/// use ratebound::any::AnyClock;
/// use ratebound::gate::{Gate, GateOptions, KeySource, Request};
/// use ratebound::{KeyedAlgorithm, ManualClock, Quota};
///
/// let options = GateOptions { key: KeySource::header("X-API-Key")?, ..GateOptions::default() };
/// let policy = ("default".to_string(), KeyedAlgorithm::TokenBucket(Quota::parse("1/s burst 1")?));
/// let gate = Gate::new(vec![policy], options, AnyClock::Manual(ManualClock::new()))?;
/// let lines = [("x-api-key", "alice")];
/// let request = Request { key: None, peer: None, headers: &lines[..] };
/// assert!(gate.decide(&request).is_pass());
/// let refused = gate.decide(&request);
/// assert_eq!(refused.status, 429);
/// assert_eq!(refused.fields.retry_after, Some(1));
/// # Ok::<(), ratebound::Error>(())
/// ```
pub struct Gate {
    policies: Vec<Policy>,
    /// Policies decided elsewhere (see [`Gate::decide_with`]).
    remote: Vec<Policy>,
    /// Per remote policy, its failed checks since it last answered: the
    /// episode a [`StoreNotice`] begins and ends.
    failures: Box<[AtomicU64]>,
    limiters: Vec<KeyedLimiter<Fingerprint, AnyClock>>,
    fingerprints: Fingerprinter,
    policy_field: String,
    forwarding: Forwarding,
    options: GateOptions,
    clock: AnyClock,
    cap: Option<std::sync::Arc<ConcurrencyCap>>,
}

const KEY_REQUIRED: &str = "a key is required for this endpoint\n";

impl Gate {
    /// A gate applying every `(name, algorithm)` policy to each key.
    ///
    /// # Errors
    /// [`Error::NoLimiters`] for no policy and no concurrency limit;
    /// [`Policy::for_keyed`]'s errors (a bad name); the keyed limiters'
    /// errors; [`Error::InvalidLimit`] for a concurrency limit of 0;
    /// [`Error::InvalidOption`] for a `client_ip_header` without trusted
    /// proxies, or two policies of one name.
    pub fn new(
        policies: Vec<(String, KeyedAlgorithm)>,
        options: GateOptions,
        clock: AnyClock,
    ) -> Result<Gate, Error> {
        options.check()?;
        if policies.is_empty()
            && options.remote.is_empty()
            && options.concurrency_limit.is_none()
            && options.adaptive_concurrency.is_none()
        {
            return Err(Error::NoLimiters);
        }
        let mut names = Vec::new();
        let mut limiters = Vec::new();
        for (name, algorithm) in policies {
            names.push(Policy::for_keyed(&name, algorithm)?);
            let (max, overflow) = options.max_keys;
            limiters.push(
                KeyedLimiter::new(algorithm)?
                    .with_clock(clock.clone())
                    .with_max_keys(max, overflow)?,
            );
        }
        let cap = match (options.concurrency_limit, options.adaptive_concurrency) {
            (Some(limit), _) => Some(ConcurrencyCap::new(limit)?),
            (None, Some(tuning)) => Some(ConcurrencyCap::adaptive(tuning, clock.clone())?),
            (None, None) => None,
        };
        let cap = cap
            .map(|c| c.with_background_fraction(options.background_fraction))
            .transpose()?;
        let cap = match (cap, options.concurrency_queue) {
            (Some(c), Some(wait)) => Some(c.with_queue(wait, clock.clone())?),
            (cap, _) => cap,
        }
        .map(std::sync::Arc::new);
        let remote = options
            .remote
            .iter()
            .map(|(name, algorithm)| Policy::for_keyed(name, *algorithm))
            .collect::<Result<Vec<_>, _>>()?;
        let all: Vec<Policy> = names.iter().chain(remote.iter()).cloned().collect();
        // A name is a policy's identity: its RateLimit entry and, for a
        // Redis policy, its keys (`Engine::begin_in`). Two alike would share.
        for (i, p) in all.iter().enumerate() {
            if all[..i].iter().any(|q| q.name() == p.name()) {
                return Err(Error::InvalidOption {
                    name: "policies",
                    value: p.name().to_string(),
                    reason: "two policies have this name; give each its own (it names the policy's RateLimit entry and its Redis keys)",
                });
            }
        }
        Ok(Gate {
            cap,
            policy_field: ratelimit_policy(&all),
            failures: remote.iter().map(|_| AtomicU64::new(0)).collect(),
            remote,
            policies: names,
            limiters,
            fingerprints: Fingerprinter::new(),
            forwarding: options.forwarding.clone().unwrap_or_default(),
            options,
            clock,
        })
    }

    /// The options, as checked.
    pub fn options(&self) -> &GateOptions {
        &self.options
    }

    /// The header names the gate reads (the key header, the forwarding
    /// header when proxies are trusted), lower case: a front door that
    /// cannot hand over every line may hand over these.
    pub fn header_names(&self) -> impl Iterator<Item = &str> {
        let key = match &self.options.key {
            KeySource::Header(name) => Some(name.as_str()),
            _ => None,
        };
        let forwarding =
            (self.options.trusted != TrustedProxies::None).then(|| self.forwarding.header());
        key.into_iter().chain(forwarding)
    }

    /// Load shedding, before [`decide`](Self::decide): a place among the
    /// requests in flight if the concurrency cap has one (always, without a
    /// cap). `true` must be paired with one [`leave`](Self::leave) when the
    /// response is done; on `false`, answer [`shed`](Self::shed) at once —
    /// unless the request is critical, which goes on without a place (so
    /// the number in flight can exceed the cap by the critical requests).
    #[inline]
    pub fn try_enter(&self) -> bool {
        self.cap.as_deref().is_none_or(ConcurrencyCap::try_enter)
    }

    /// Gives back a place from [`try_enter`](Self::try_enter).
    #[inline]
    pub fn leave(&self) {
        if let Some(cap) = &self.cap {
            cap.leave();
        }
    }

    /// Whether a concurrency cap is set.
    pub fn is_capped(&self) -> bool {
        self.cap.is_some()
    }

    /// The answer to a shed request: 503, `Retry-After: 1`, a short text.
    pub fn shed(&self) -> Verdict<'static> {
        self.shed_as(Priority::Normal)
    }

    /// [`shed`](Self::shed), for a request of `priority` (reported in the
    /// verdict's [`priority`](Verdict::priority)).
    pub fn shed_as(&self, priority: Priority) -> Verdict<'static> {
        Verdict {
            outcome: Outcome::Shed,
            priority: Some(priority),
            ..Verdict::plain(503, "server busy; try again shortly\n", Some(1))
        }
    }

    /// The concurrency cap, when one is set: its limit now, the requests in
    /// flight and, when adaptive, what it learned (for a metrics gauge).
    pub fn concurrency(&self) -> Option<&ConcurrencyCap> {
        self.cap.as_deref()
    }

    /// The policies' names, local then remote (for a metrics hook).
    pub fn policy_names(&self) -> impl Iterator<Item = &str> {
        self.policies
            .iter()
            .chain(self.remote.iter())
            .map(Policy::name)
    }

    /// The `RateLimit-Policy` field value.
    pub fn policy_field(&self) -> &str {
        &self.policy_field
    }

    /// The clock reading decisions are made with.
    #[inline]
    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    /// Keys tracked by the first policy.
    pub fn len(&self) -> usize {
        self.limiters.first().map_or(0, KeyedLimiter::len)
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops fresh state from every policy; how many entries went.
    pub fn cleanup(&self) -> usize {
        self.limiters.iter().map(KeyedLimiter::cleanup).sum()
    }

    /// The decision for `request`, now.
    #[inline]
    pub fn decide<H: Headers + ?Sized>(&self, request: &Request<'_, H>) -> Verdict<'_> {
        self.decide_at(request, self.clock.now())
    }

    /// The decision for `request` at `now`.
    #[inline]
    pub fn decide_at<H: Headers + ?Sized>(
        &self,
        request: &Request<'_, H>,
        now: u64,
    ) -> Verdict<'_> {
        if self.limiters.is_empty() {
            return Verdict::pass(Fields::default());
        }
        self.decide_key(self.key(request), now)
    }

    /// The local policies' decision for a resolved key (or the status a
    /// keyless request is refused with).
    #[inline]
    fn decide_key(&self, key: Result<Fingerprint, u16>, now: u64) -> Verdict<'_> {
        if self.limiters.is_empty() {
            return Verdict::pass(Fields::default());
        }
        let key = match key {
            Ok(key) => key,
            Err(status) => return Verdict::plain(status, KEY_REQUIRED, None),
        };
        let mut decisions = Decisions::default();
        let admitted = KeyedLimiter::check_all_with(&self.limiters, &key, 1, now, |i, d| {
            decisions.set(i, d);
        });
        let admitted = match admitted {
            Ok(admitted) => admitted,
            Err(Error::TooManyKeys { .. }) => return Verdict::too_many_keys(),
            Err(_) => return Verdict::plain(500, "rate limiter misconfigured\n", None),
        };
        let fields = self.quota_fields(&decisions);
        if admitted {
            return Verdict::pass(fields);
        }
        self.refused(fields, &self.policies, decisions.iter())
    }

    /// The refusal by `policies` whose `decisions` these are (in order):
    /// the longest wait, named by the first that refused.
    fn refused<'g>(
        &'g self,
        fields: Fields<'g>,
        policies: &'g [Policy],
        mut decisions: impl Iterator<Item = Decision> + Clone,
    ) -> Verdict<'g> {
        // Allowed decisions wait 0: the largest wait is the refusals' longest.
        let wait = decisions
            .clone()
            .map(|d| d.retry_after())
            .max()
            .unwrap_or(Duration::ZERO);
        let by = decisions
            .position(|d| !d.is_allowed())
            .and_then(|i| policies.get(i))
            .map(Policy::name);
        self.refusal(fields, wait, by)
    }

    /// A 429 carrying `fields`, for a wait of `wait`.
    fn refusal<'g>(
        &'g self,
        mut fields: Fields<'g>,
        wait: Duration,
        refused_by: Option<&'g str>,
    ) -> Verdict<'g> {
        let secs = retry_after_secs(wait).max(1);
        fields.retry_after = Some(secs);
        let body = match self.options.body {
            RefusalBody::Text => (
                "text/plain; charset=utf-8",
                format!("rate limit exceeded; retry in {secs} s\n"),
            ),
            RefusalBody::ProblemJson => (
                "application/problem+json",
                format!(
                    "{{\"type\":\"about:blank\",\"title\":\"Too Many Requests\",\"status\":429,\
                     \"detail\":\"rate limit exceeded; retry in {secs} s\",\"retry_after\":{secs}}}"
                ),
            ),
        };
        Verdict {
            status: 429,
            fields,
            body: Some(body),
            outcome: Outcome::Refused,
            refused_by,
            priority: None,
            notice: None,
        }
    }

    /// The decision for `request` now, with the decisions of the remote
    /// policies (limits kept elsewhere, e.g. global limits in Redis, checked
    /// by the front door for [`identity`](Self::identity)), one per
    /// [`GateOptions::remote`] policy, in order.
    /// Each answer is a [`Decision`] or a
    /// [`RemoteAnswer`] (a policy whose table is full answers as the gate's
    /// own full table does: 503; a policy whose check failed answers 503
    /// with `store_error_retry_after` — see [`RemoteAnswer`] for the rule).
    pub fn decide_with<H: Headers + ?Sized, R: Copy + Into<RemoteAnswer>>(
        &self,
        request: &Request<'_, H>,
        remote: &[R],
    ) -> Verdict<'_> {
        self.decide_with_at(request, remote, self.clock.now())
    }

    /// [`decide_with`](Self::decide_with) at `now`. A remote refusal is a
    /// 429 at once (the local policies are not charged; the `RateLimit`
    /// field lists the remote policies); otherwise the local policies decide
    /// and the remote ones join the quota fields. A request a local policy
    /// refuses after a remote one admitted it stays counted remotely — the
    /// remote store can only be told once.
    pub fn decide_with_at<H: Headers + ?Sized, R: Copy + Into<RemoteAnswer>>(
        &self,
        request: &Request<'_, H>,
        remote: &[R],
        now: u64,
    ) -> Verdict<'_> {
        self.decide_key_with(self.key(request), remote, now)
    }

    /// [`decide_with_at`](Self::decide_with_at) for a resolved key.
    fn decide_key_with<R: Copy + Into<RemoteAnswer>>(
        &self,
        key: Result<Fingerprint, u16>,
        remote: &[R],
        now: u64,
    ) -> Verdict<'_> {
        // A keyless request the options refuse is refused before anything
        // else (a front door whose `identity` was refused passes `&[]`).
        let key = match key {
            Ok(key) => key,
            Err(status) => return Verdict::plain(status, KEY_REQUIRED, None),
        };
        if remote.len() != self.remote.len() {
            return Verdict::plain(500, "rate limiter misconfigured\n", None);
        }
        let mut decided = Vec::with_capacity(remote.len());
        let mut failed = None;
        let mut full = false;
        for (i, r) in remote.iter().enumerate() {
            match (*r).into() {
                RemoteAnswer::Decided(d) => decided.push(d),
                RemoteAnswer::Full => full = true,
                RemoteAnswer::Failed => {
                    // Ordering: Relaxed — a counter read only by this
                    // policy's next answers; no other memory hangs on it.
                    let before = self.failures[i].fetch_add(1, Ordering::Relaxed);
                    if failed.is_none() {
                        failed = Some((i, before == 0));
                    }
                }
            }
        }
        if let Some((i, began)) = failed {
            let name = self.remote[i].name();
            let retry_after = self.options.store_error_retry_after;
            let mut verdict = Verdict::store_error(name, retry_after);
            if began {
                verdict.notice = Some(StoreNotice::Began {
                    policy: name,
                    retry_after,
                });
            }
            return verdict;
        }
        // Every policy answered (a full table decided): at most one
        // episode's end is told per request, the others at the next.
        let ended = self.failures.iter().enumerate().find_map(|(i, count)| {
            // Ordering: Relaxed, as above; the load keeps the common case
            // (no episode) free of writes.
            if count.load(Ordering::Relaxed) == 0 {
                return None;
            }
            let failures = count.swap(0, Ordering::Relaxed);
            (failures > 0).then(|| StoreNotice::Ended {
                policy: self.remote[i].name(),
                failures,
            })
        });
        let mut verdict = if full {
            Verdict::too_many_keys()
        } else {
            self.decide_decided(key, &decided, now)
        };
        verdict.notice = ended;
        verdict
    }

    /// [`decide_key_with`](Self::decide_key_with) once every remote policy
    /// decided.
    fn decide_decided<'g>(
        &'g self,
        key: Fingerprint,
        remote: &[Decision],
        now: u64,
    ) -> Verdict<'g> {
        let remote_pairs = || self.remote.iter().zip(remote.iter().copied());
        if remote.iter().any(|d| !d.is_allowed()) {
            let mut fields = Fields::default();
            self.add_quota_fields(&mut fields, remote_pairs());
            return self.refused(fields, &self.remote, remote.iter().copied());
        }
        let mut verdict = self.decide_key(Ok(key), now);
        if verdict.status == 0 || verdict.status == 429 {
            self.add_quota_fields(&mut verdict.fields, remote_pairs());
        }
        verdict
    }

    /// Adds the remote policies' entries to `fields`: appended to
    /// `RateLimit`, or taking the legacy fields when tighter.
    fn add_quota_fields<'a>(
        &'a self,
        fields: &mut Fields<'a>,
        entries: impl Iterator<Item = (&'a Policy, crate::Decision)> + Clone,
    ) {
        if entries.clone().next().is_none() {
            return;
        }
        match self.options.headers {
            QuotaHeaders::Off => {}
            QuotaHeaders::Draft => {
                fields.policy = Some(&self.policy_field);
                let more = ratelimit_bytes(entries);
                match &mut fields.ratelimit {
                    Some(value) if !value.is_empty() => {
                        value.extend_from_slice(b", ");
                        value.extend_from_slice(&more);
                    }
                    _ => fields.ratelimit = Some(more),
                }
            }
            QuotaHeaders::Legacy => {
                if let Some(d) = entries
                    .map(|(_, d)| d)
                    .min_by_key(crate::Decision::remaining)
                    && fields
                        .legacy
                        .is_none_or(|[_, remaining, _]| d.remaining() < remaining)
                {
                    fields.legacy =
                        Some([d.limit(), d.remaining(), retry_after_secs(d.reset_after())]);
                }
            }
        }
    }

    /// The quota fields for `decisions`.
    fn quota_fields(&self, decisions: &Decisions) -> Fields<'_> {
        let mut v = Fields::default();
        match self.options.headers {
            QuotaHeaders::Off => {}
            QuotaHeaders::Draft => {
                v.policy = Some(&self.policy_field);
                v.ratelimit = Some(ratelimit_bytes(self.policies.iter().zip(decisions.iter())));
            }
            QuotaHeaders::Legacy => {
                v.legacy = decisions
                    .iter()
                    .min_by_key(Decision::remaining)
                    .map(|d| [d.limit(), d.remaining(), retry_after_secs(d.reset_after())]);
            }
        }
        v
    }
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("policies", &self.policy_field)
            .field("key", &self.options.key)
            .field("concurrency_limit", &self.options.concurrency_limit)
            .field("adaptive_concurrency", &self.options.adaptive_concurrency)
            .field("keys", &self.len())
            .finish_non_exhaustive()
    }
}
