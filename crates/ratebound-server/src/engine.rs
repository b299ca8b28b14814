//! The engine: decides a [`Request`] against a [`Config`]'s rules, its
//! limits' state in this process (one keyed limiter of the core per distinct limit).
//!
//! Each request descriptor is decided on its own, as the reference server
//! decides them: the rule it matches (none: OK, nothing counted), its
//! hits (its own `hits_addend`, else the request's, 0 meaning 1), and the
//! answer — OK with what is left, or over the limit. A descriptor whose
//! rule holds several limits (`rate_limits`) is admitted only when all of
//! them admit it, and nothing is charged to any when one refuses. The
//! request is over the limit when any descriptor is (shadow mode aside).
//!
//! A fixed window decides as the reference server's counter: a request
//! that would take the count past the limit is refused and the window
//! stays refused until it ends (the reference counts refused hits too, so
//! its count is then past the limit; here what was left is taken, so the
//! count is at the limit). One difference remains: a descriptor of
//! `hits_addend: 0` (a query) in a window that refused is answered OK with
//! nothing left here, and over the limit there.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ratebound::http::{Policy, ratelimit, ratelimit_policy_of, retry_after_secs};
use ratebound::{Decision, Error as CoreError};

use crate::api::{
    Code, CurrentLimit, DescriptorStatus, LimitOverride, Request, RequestDescriptor, Response,
};
use crate::backend::Backend;
use crate::matching::{Match, Rules, apply_replaces, override_keys};
use crate::model::{Algorithm, Config, Descriptor, Limit, Place, Rule, Window};
use crate::stats::{Seen, Stats};
use crate::store::{Store, UnixClock};

/// The most descriptors one request may carry.
pub const MAX_DESCRIPTORS: usize = 256;
/// The most entries one descriptor may carry.
pub const MAX_ENTRIES: usize = 64;
/// The longest key or value of an entry, and the longest domain, in bytes.
pub const MAX_TEXT: usize = 4096;

/// A request the engine refuses to decide: too large, or malformed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestError {
    /// A part of the request is larger than the engine takes.
    TooLarge {
        /// What (`"descriptors"`, `"entries"`, `"value"`, ...).
        what: &'static str,
        /// Its size.
        size: u64,
        /// The most taken.
        max: u64,
    },
    /// A field is missing or out of range.
    Invalid {
        /// What is wrong, naming the field and the value.
        reason: String,
    },
    /// The limits' store could not decide (a full shared-memory table, a
    /// Redis that refuses this client, a fail policy `closed` that
    /// refused): the request is not answered OK, and the error is counted.
    Unavailable {
        /// The store's reason.
        reason: String,
    },
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::TooLarge { what, size, max } => {
                write!(f, "{what}: {size} is more than the {max} taken")
            }
            RequestError::Invalid { reason } | RequestError::Unavailable { reason } => {
                f.write_str(reason)
            }
        }
    }
}

impl std::error::Error for RequestError {}

/// A rule the engine cannot decide by, found when it takes the rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleError {
    /// Where the limit was written.
    pub place: Place,
    /// The core's reason.
    pub reason: String,
}

impl std::fmt::Display for RuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = &self.place;
        write!(
            f,
            "{}:{}:{}: {}",
            p.file.display(),
            p.line,
            p.column,
            self.reason
        )
    }
}

impl std::error::Error for RuleError {}

/// How the engine keeps its state.
#[derive(Clone, Debug)]
pub struct Options {
    /// The clock: Unix time in ns (default: [`UnixClock`]).
    pub clock: ratebound::any::AnyClock,
    /// The most keys each distinct limit tracks (the least recently used
    /// forgotten beyond; default 1 000 000). In shared memory, each
    /// limit's file has room for this many.
    pub max_keys: usize,
    /// Where the limits' state lives (default: in this process).
    pub backend: Backend,
    /// Whether answers carry `RateLimit`, `RateLimit-Policy` and
    /// `Retry-After` for the gateway to add (`response_headers_to_add`;
    /// default on — the reference server's `LIMIT_RESPONSE_HEADERS_ENABLED`).
    pub response_headers: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            clock: ratebound::any::AnyClock::Shared(Arc::new(UnixClock::new())),
            max_keys: 1_000_000,
            backend: Backend::Local,
            response_headers: true,
        }
    }
}

/// Decides requests against the rules in force.
pub struct Engine {
    /// Swapped whole by [`reload`](Engine::reload): a decision reads one
    /// set of rules from start to end.
    in_force: RwLock<Arc<InForce>>,
    store: Store,
    stats: Stats,
    response_headers: bool,
}

impl Engine {
    /// An engine deciding by `config`, its state in this process.
    ///
    /// # Errors
    /// [`RuleError`] for a limit the engine cannot decide by.
    pub fn new(config: Config) -> Result<Engine, RuleError> {
        Engine::with_options(config, Options::default())
    }

    /// [`new`](Self::new) with `options`.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_options(config: Config, options: Options) -> Result<Engine, RuleError> {
        let store = Store::new(options.backend, options.clock, options.max_keys);
        for domain in config.domains.values() {
            check_rules(&store, &domain.descriptors)?;
        }
        Ok(Engine {
            in_force: RwLock::new(Arc::new(InForce::new(Rules::new(config)))),
            store,
            stats: Stats::default(),
            response_headers: options.response_headers,
        })
    }

    /// The rules in force.
    pub fn rules(&self) -> Arc<Rules> {
        Arc::clone(&self.in_force().rules)
    }

    /// The rules in force and their limits' policies.
    fn in_force(&self) -> Arc<InForce> {
        Arc::clone(&self.in_force.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Puts `config` in force at once, for the next decisions (those under
    /// way finish by the rules they began with). The limits' state is
    /// kept: a descriptor whose limit (algorithm, count, window, burst) is
    /// unchanged goes on counting where it was; a changed limit counts
    /// from nothing.
    ///
    /// # Errors
    /// [`RuleError`] for a limit the engine cannot decide by: the rules in
    /// force stay.
    pub fn reload(&self, config: Config) -> Result<(), RuleError> {
        for domain in config.domains.values() {
            check_rules(&self.store, &domain.descriptors)?;
        }
        let in_force = Arc::new(InForce::new(Rules::new(config)));
        *self.in_force.write().unwrap_or_else(|e| e.into_inner()) = in_force;
        Ok(())
    }

    /// Decides `request`: one status per descriptor, the overall code, the
    /// headers. In this process the answer is ready at the first poll; in
    /// a shared backend every descriptor is asked at once (one batch to
    /// Redis).
    ///
    /// # Errors
    /// [`RequestError`] for a request too large or malformed (nothing is
    /// counted), or a store that could not decide.
    pub async fn decide(&self, request: &Request) -> Result<Response, RequestError> {
        check_request(request)?;
        let now = self.store.now();
        let in_force = self.in_force();
        let rules = &in_force.rules;
        // The gateway's own limits (RLS v3 `limit`), for a domain the
        // rules name: a fixed window each, instead of the rules'.
        let known = request.descriptors.iter().any(|d| d.limit.is_some())
            && rules.config().domains.contains_key(&request.domain);
        // Made only when there are some (none: no allocation).
        let overrides: Vec<Option<Limit>> = if known {
            request
                .descriptors
                .iter()
                .map(|d| d.limit.map(override_limit))
                .collect()
        } else {
            Vec::new()
        };
        let overridden = |i: usize| overrides.get(i).and_then(Option::as_ref);
        let mut found: Vec<Option<Match<'_>>> = request
            .descriptors
            .iter()
            .enumerate()
            .map(|(i, d)| match overridden(i) {
                None => rules.find(&request.domain, &d.entries),
                Some(_) => None,
            })
            .collect();
        // A limit named by a matched rule's `replaces` is not applied.
        apply_replaces(&mut found);
        for (i, (d, m)) in request.descriptors.iter().zip(&mut found).enumerate() {
            if let Some(limit) = overridden(i) {
                let (state_key, metric_key) = override_keys(&request.domain, &d.entries);
                *m = Some(Match {
                    descriptor: overriding(),
                    unlimited: false,
                    limits: vec![limit],
                    state_key,
                    metric_key,
                });
            }
        }
        let hits =
            |d: &RequestDescriptor| d.hits_addend.unwrap_or_else(|| request.hits_addend.max(1));
        let outcomes: Vec<Option<Outcome>> = if self.store.is_local() {
            let mut all = Vec::with_capacity(found.len());
            for (d, m) in request.descriptors.iter().zip(&found) {
                all.push(match m {
                    Some(m) if !m.unlimited => {
                        Some(self.decide_limits(&m.limits, m.state_key.as_bytes(), hits(d), now)?)
                    }
                    _ => None,
                });
            }
            all
        } else {
            let asked = request
                .descriptors
                .iter()
                .zip(&found)
                .map(|(d, m)| async move {
                    match m {
                        Some(m) if !m.unlimited => self
                            .decide_shared(&m.limits, m.state_key.as_bytes(), hits(d), now)
                            .await
                            .map(Some),
                        _ => Ok(None),
                    }
                });
            futures_util::future::join_all(asked)
                .await
                .into_iter()
                .collect::<Result<_, _>>()?
        };
        let mut statuses = Vec::with_capacity(request.descriptors.len());
        let mut shown: Vec<(Cow<'_, Policy>, Decision)> = Vec::new();
        let mut retry: Option<Duration> = None;
        for ((d, m), outcome) in request.descriptors.iter().zip(&found).zip(outcomes) {
            let status = match (m, outcome) {
                (Some(m), Some(outcome)) => {
                    // A refusal shadow mode lets through asks no wait.
                    if outcome.status.code == Code::OverLimit && !m.descriptor.shadow_mode {
                        retry = retry.max(Some(outcome.retry_after));
                    }
                    let told = m.limits.iter().zip(&outcome.decisions);
                    for (l, d) in told.filter(|_| self.response_headers) {
                        if let (Some(d), Some(p)) = (d, in_force.policy(l)) {
                            shown.push((p, *d));
                        }
                    }
                    let mut status = outcome.status;
                    let over = status.code == Code::OverLimit;
                    let shadow = m.descriptor.shadow_mode && over;
                    if shadow {
                        status.code = Code::Ok;
                    }
                    let seen = if over {
                        Seen::Over { shadow }
                    } else {
                        Seen::Within {
                            near: near_limit(&status),
                        }
                    };
                    self.stats
                        .count(&request.domain, &m.metric_key, hits(d), seen);
                    status
                }
                (Some(m), None) if m.unlimited => DescriptorStatus {
                    code: Code::Ok,
                    current_limit: None,
                    limit_remaining: u32::MAX,
                    duration_until_reset: None,
                },
                _ => unmatched(),
            };
            statuses.push(status);
        }
        let over = statuses.iter().any(|s| s.code == Code::OverLimit);
        let mut headers = Vec::new();
        if !shown.is_empty() {
            headers.push((
                "RateLimit-Policy".to_string(),
                ratelimit_policy_of(shown.iter().map(|(p, _)| p.as_ref())),
            ));
            headers.push((
                "RateLimit".to_string(),
                ratelimit(shown.iter().map(|(p, d)| (p.as_ref(), *d))),
            ));
        }
        if over
            && self.response_headers
            && let Some(wait) = retry
        {
            headers.push((
                "Retry-After".to_string(),
                retry_after_secs(wait).to_string(),
            ));
        }
        Ok(Response {
            overall_code: if over { Code::OverLimit } else { Code::Ok },
            statuses,
            headers,
        })
    }

    /// Appends what the engine decided, per domain and descriptor, in
    /// Prometheus' text format (`ratebound_descriptor_*_total`).
    pub fn render_metrics(&self, out: &mut String) {
        self.stats.render(out);
        self.store.render(out);
    }

    /// One descriptor's limits in this process (one or several, all or
    /// nothing: the core's `check_all`) for `hits` at `now`.
    fn decide_limits(
        &self,
        limits: &[&Limit],
        state_key: &[u8],
        hits: u64,
        now: u64,
    ) -> Result<Outcome, RequestError> {
        if let Some(outcome) = zero_limit(limits, hits, now) {
            return Ok(outcome);
        }
        let key = self.store.key(state_key);
        if limits.iter().any(|l| l.algorithm == Algorithm::SlidingLog) {
            return self.decide_with_logs(limits, &key, hits, now);
        }
        let limiters = limits
            .iter()
            .map(|l| self.store.limiter(l))
            .collect::<Result<Vec<_>, _>>()
            .map_err(unavailable)?;
        let mut decisions: Vec<Option<Decision>> = vec![None; limits.len()];
        let admitted = crate::store::Limiter::check_all_with(
            limiters.iter().map(AsRef::as_ref),
            &key,
            hits,
            now,
            |i, d| decisions[i] = Some(d),
        );
        let admitted = match admitted {
            Ok(a) => a,
            Err(CoreError::InsufficientCapacity { .. }) => return Ok(too_many(limits, now)),
            Err(e) => return Err(unavailable(e)),
        };
        // A refused fixed window stays refused until it ends, as the
        // reference server's counter (see the module's notes).
        if !admitted && limits.len() == 1 && limits[0].algorithm == Algorithm::FixedWindow {
            let left = limiters[0].available_at(&key, now);
            if left > 0 {
                let _ = limiters[0].check_n_at(&key, left, now);
            }
        }
        let refuser = first_refusal(&decisions);
        outcome(limits, decisions, admitted, refuser, now)
    }

    /// Limits of which one or more is a sliding log (in this process): one
    /// alone is one decision; stacked, each is asked what it has (nothing
    /// taken) and, only when each has room for `hits`, taken from — as a
    /// shared backend's, with the same bound (a thread taking between the
    /// two steps can leave a refused request charged to the limits that
    /// took it).
    fn decide_with_logs(
        &self,
        limits: &[&Limit],
        key: &ratebound::any::Fingerprint,
        hits: u64,
        now: u64,
    ) -> Result<Outcome, RequestError> {
        enum Held {
            Keyed(Arc<crate::store::Limiter>),
            Log(Arc<crate::log_table::LogTable>),
        }
        let held = limits
            .iter()
            .map(|l| match l.algorithm {
                Algorithm::SlidingLog => self.store.log(l).map(Held::Log),
                _ => self.store.limiter(l).map(Held::Keyed),
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(unavailable)?;
        let ask = |n: u64| {
            held.iter()
                .map(|h| match h {
                    Held::Keyed(k) => k.check_n_at(key, n, now),
                    Held::Log(t) => t.check_n_at(key, n, now),
                })
                .collect::<Vec<_>>()
        };
        if limits.len() > 1
            && let Some(refused) = short_of(limits, answers(ask(0))?, hits, now)
        {
            return refused;
        }
        let decisions = answers(ask(hits))?;
        if decisions.iter().any(Option::is_none) {
            return Ok(too_many(limits, now));
        }
        let refuser = first_refusal(&decisions);
        outcome(limits, decisions, refuser.is_none(), refuser, now)
    }

    /// One descriptor's limits in the shared backend for `hits` at `now`.
    ///
    /// One limit: one call. Several (`rate_limits`): every limit is first
    /// asked what it has (nothing taken), and only when each has room for
    /// `hits` are they taken from each — two calls, each batch sent
    /// together. Between the two, other servers may take: a limit that
    /// then refuses leaves the others charged (the bound: a request
    /// refused in that race still counts against the limits that took it).
    /// A refused fixed window is filled, as in this process (one more call
    /// on a refusal only), so that it stays refused until it ends.
    async fn decide_shared(
        &self,
        limits: &[&Limit],
        state_key: &[u8],
        hits: u64,
        now: u64,
    ) -> Result<Outcome, RequestError> {
        if let Some(outcome) = zero_limit(limits, hits, now) {
            return Ok(outcome);
        }
        if limits
            .iter()
            .any(|l| hits > l.burst.unwrap_or(l.requests_per_unit))
        {
            return Ok(too_many(limits, now));
        }
        let shared = limits
            .iter()
            .map(|l| self.store.shared(l))
            .collect::<Result<Vec<_>, _>>()
            .map_err(unavailable)?;
        let ask = |n: u64| {
            futures_util::future::join_all(
                shared
                    .iter()
                    .map(move |s| s.remote.check(&s.scope, state_key, n, now)),
            )
        };
        if limits.len() > 1
            && let Some(refused) = short_of(limits, answers(ask(0).await)?, hits, now)
        {
            return refused;
        }
        let decisions = answers(ask(hits).await)?;
        if decisions.iter().any(Option::is_none) {
            return Ok(too_many(limits, now));
        }
        let refuser = first_refusal(&decisions);
        if let ([limit], [Some(d)]) = (limits, decisions.as_slice())
            && !d.is_allowed()
            && limit.algorithm == Algorithm::FixedWindow
            && d.remaining() > 0
        {
            let s = &shared[0];
            // What it takes is what was left: a refusal changes nothing.
            s.remote
                .check(&s.scope, state_key, d.remaining(), now)
                .await
                .map_err(unavailable)?;
        }
        outcome(limits, decisions, refuser.is_none(), refuser, now)
    }
}

/// The limit of a gateway's override: a fixed window, as the reference.
fn override_limit(o: LimitOverride) -> Limit {
    Limit {
        name: None,
        algorithm: Algorithm::FixedWindow,
        requests_per_unit: u64::from(o.requests_per_unit),
        window: Window {
            unit: o.unit,
            length: o.unit.length(),
        },
        burst: None,
        place: Place::default(),
    }
}

/// What a descriptor decided by a gateway's override is matched to: no
/// shadow mode, no `replaces`.
fn overriding() -> &'static Descriptor {
    static NODE: std::sync::OnceLock<Descriptor> = std::sync::OnceLock::new();
    NODE.get_or_init(|| Descriptor {
        key: String::new(),
        value: None,
        rule: None,
        replaces: Vec::new(),
        shadow_mode: false,
        detailed_metric: false,
        value_to_metric: false,
        share_threshold: false,
        children: Vec::new(),
        place: Place::default(),
    })
}

/// A descriptor with a limit of 0: refused, counting nothing (a query,
/// 0 hits, is not over it: as the reference's count, 0 + 0 ≤ 0).
fn zero_limit(limits: &[&Limit], hits: u64, now: u64) -> Option<Outcome> {
    let zero = limits.iter().find(|l| l.requests_per_unit == 0)?;
    let mut outcome = Outcome::refused_by(zero, now);
    if hits == 0 {
        outcome.status.code = Code::Ok;
        outcome.retry_after = Duration::ZERO;
    }
    Some(outcome)
}

/// Each limit's answer: its decision, or `None` for more hits than it
/// ever holds.
fn answers(all: Vec<Result<Decision, CoreError>>) -> Result<Vec<Option<Decision>>, RequestError> {
    all.into_iter()
        .map(|d| match d {
            Ok(d) => Ok(Some(d)),
            Err(CoreError::InsufficientCapacity { .. }) => Ok(None),
            Err(e) => Err(unavailable(e)),
        })
        .collect()
}

/// Stacked limits asked what they have (`had`, nothing taken): refused by
/// the first without room for `hits`, else `None` (take from each).
fn short_of(
    limits: &[&Limit],
    had: Vec<Option<Decision>>,
    hits: u64,
    now: u64,
) -> Option<Result<Outcome, RequestError>> {
    let short = had
        .iter()
        .position(|d| d.is_none_or(|d| d.remaining() < hits))?;
    Some(outcome(limits, had, false, Some(short), now))
}

/// The first limit that refused.
fn first_refusal(decisions: &[Option<Decision>]) -> Option<usize> {
    decisions
        .iter()
        .position(|d| d.is_some_and(|d| !d.is_allowed()))
}

/// More hits than a limit ever holds: over it, nothing taken.
fn too_many(limits: &[&Limit], now: u64) -> Outcome {
    let largest = limits.iter().max_by_key(|l| l.requests_per_unit).copied();
    Outcome::refused_by(largest.unwrap_or(limits[0]), now)
}

/// The answer of a descriptor's `limits` from their `decisions`:
/// `admitted` or refused by `refuser`. It names the limit that refused,
/// else the one with the least left.
fn outcome(
    limits: &[&Limit],
    decisions: Vec<Option<Decision>>,
    admitted: bool,
    refuser: Option<usize>,
    now: u64,
) -> Result<Outcome, RequestError> {
    let pick = refuser.filter(|_| !admitted).or_else(|| {
        (0..limits.len())
            .filter_map(|i| decisions[i].map(|d| (i, d)))
            .min_by_key(|(_, d)| d.remaining())
            .map(|(i, _)| i)
    });
    let Some(i) = pick else {
        return Err(unavailable(CoreError::Unsupported {
            operation: "a decision of every limit",
            algorithm: "stacked limits",
        }));
    };
    let limit = limits[i];
    let decision = decisions[i];
    let until = decision.map_or_else(|| window_left(limit, now), |d| until_reset(limit, &d, now));
    let mut retry_after = decisions
        .iter()
        .flatten()
        .map(Decision::retry_after)
        .max()
        .unwrap_or_default();
    if !admitted && retry_after.is_zero() {
        // Refused before anything was taken (a shared backend's limit
        // without room): its wait is at most until it is whole again.
        retry_after = until;
    }
    Ok(Outcome {
        status: DescriptorStatus {
            code: if admitted { Code::Ok } else { Code::OverLimit },
            current_limit: Some(current(limit)),
            limit_remaining: match decision {
                Some(d) if admitted => u32::try_from(d.remaining()).unwrap_or(u32::MAX),
                _ => 0,
            },
            duration_until_reset: Some(until),
        },
        retry_after,
        decisions,
    })
}

/// One descriptor's answer, the wait before it would pass, and each of
/// its limits' decision (for the headers; none when nothing was asked).
struct Outcome {
    status: DescriptorStatus,
    retry_after: Duration,
    decisions: Vec<Option<Decision>>,
}

/// The rules in force, and the `RateLimit-Policy` of each of their limits
/// (made once, not per answer), by the limit's address in the rules.
struct InForce {
    rules: Arc<Rules>,
    policies: HashMap<usize, Policy>,
}

impl InForce {
    fn new(rules: Rules) -> InForce {
        fn gather(nodes: &[Descriptor], into: &mut HashMap<usize, Policy>) {
            for node in nodes {
                if let Some(Rule::Limits(limits)) = &node.rule {
                    for l in limits {
                        if let Some(p) = policy(l) {
                            into.insert(std::ptr::from_ref(l) as usize, p);
                        }
                    }
                }
                gather(&node.children, into);
            }
        }
        let rules = Arc::new(rules);
        let mut policies = HashMap::new();
        for domain in rules.config().domains.values() {
            gather(&domain.descriptors, &mut policies);
        }
        InForce { rules, policies }
    }

    /// `limit`'s policy: made at load for a limit of the rules (the
    /// address is one of theirs while `self` holds them), else now (a
    /// gateway's override).
    fn policy(&self, limit: &Limit) -> Option<Cow<'_, Policy>> {
        match self.policies.get(&(std::ptr::from_ref(limit) as usize)) {
            Some(p) => Some(Cow::Borrowed(p)),
            None => policy(limit).map(Cow::Owned),
        }
    }
}

impl Outcome {
    /// Refused by `limit` with nothing counted (a limit of 0, or more hits
    /// than it holds): until its window ends.
    fn refused_by(limit: &Limit, now: u64) -> Outcome {
        let reset = window_left(limit, now);
        Outcome {
            status: DescriptorStatus {
                code: Code::OverLimit,
                current_limit: Some(current(limit)),
                limit_remaining: 0,
                duration_until_reset: Some(reset),
            },
            retry_after: reset,
            decisions: Vec::new(),
        }
    }
}

/// Whether `status` (within its limit) has 80 % of the limit or more
/// spent: the reference's default near-limit ratio.
fn near_limit(status: &DescriptorStatus) -> bool {
    status.current_limit.as_ref().is_some_and(|l| {
        let limit = u64::from(l.requests_per_unit);
        let spent = limit.saturating_sub(u64::from(status.limit_remaining));
        spent * 5 > limit * 4
    })
}

fn unmatched() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok,
        current_limit: None,
        limit_remaining: 0,
        duration_until_reset: None,
    }
}

fn current(limit: &Limit) -> CurrentLimit {
    CurrentLimit {
        requests_per_unit: u32::try_from(limit.requests_per_unit).unwrap_or(u32::MAX),
        unit: limit.window.unit,
        name: limit.name.clone().unwrap_or_default(),
    }
}

/// The policy the `RateLimit-Policy` field names for `limit`.
fn policy(limit: &Limit) -> Option<Policy> {
    let name = limit.name.clone().unwrap_or_else(|| {
        format!(
            "{}-{}-per-{}ms",
            limit.algorithm.name(),
            limit.requests_per_unit,
            limit.window.length.as_millis()
        )
    });
    Policy::new(&name, limit.requests_per_unit, limit.window.length).ok()
}

/// What is left of the window `now` is in, as the reference server says
/// it for a `unit` (whole seconds: the unit's length less the Unix seconds
/// into it), exactly for a `window:`.
fn window_left(limit: &Limit, now: u64) -> Duration {
    let length = u64::try_from(limit.window.length.as_nanos())
        .unwrap_or(u64::MAX)
        .max(1);
    if length % 1_000_000_000 == 0 {
        let unit = length / 1_000_000_000;
        Duration::from_secs(unit - (now / 1_000_000_000) % unit)
    } else {
        Duration::from_nanos(length - now % length)
    }
}

/// Until `limit` is whole again after `decision`: a fixed window's end; for
/// the others, the time to refill.
fn until_reset(limit: &Limit, decision: &Decision, now: u64) -> Duration {
    match limit.algorithm {
        Algorithm::FixedWindow => window_left(limit, now),
        _ => decision.reset_after(),
    }
}

/// A store that could not decide.
fn unavailable(e: CoreError) -> RequestError {
    RequestError::Unavailable {
        reason: format!("the limit could not decide: {e}"),
    }
}

/// Refuses a request that is malformed or larger than the engine takes.
fn check_request(request: &Request) -> Result<(), RequestError> {
    let too_large = |what, size: usize, max: usize| {
        (size > max).then_some(RequestError::TooLarge {
            what,
            size: size as u64,
            max: max as u64,
        })
    };
    if request.domain.is_empty() {
        return Err(RequestError::Invalid {
            reason: "domain: a rate limit request needs a domain".to_string(),
        });
    }
    if request.descriptors.is_empty() {
        return Err(RequestError::Invalid {
            reason: "descriptors: a rate limit request needs at least one descriptor".to_string(),
        });
    }
    if let Some(e) = too_large("domain", request.domain.len(), MAX_TEXT)
        .or_else(|| too_large("descriptors", request.descriptors.len(), MAX_DESCRIPTORS))
    {
        return Err(e);
    }
    for d in &request.descriptors {
        check_descriptor(d, &too_large)?;
    }
    Ok(())
}

fn check_descriptor(
    d: &RequestDescriptor,
    too_large: &impl Fn(&'static str, usize, usize) -> Option<RequestError>,
) -> Result<(), RequestError> {
    if let Some(e) = too_large("entries", d.entries.len(), MAX_ENTRIES) {
        return Err(e);
    }
    for (k, v) in &d.entries {
        if let Some(e) =
            too_large("key", k.len(), MAX_TEXT).or_else(|| too_large("value", v.len(), MAX_TEXT))
        {
            return Err(e);
        }
    }
    Ok(())
}

/// Refuses, before any request, a limit the store cannot build.
fn check_rules(store: &Store, nodes: &[Descriptor]) -> Result<(), RuleError> {
    for node in nodes {
        if let Some(Rule::Limits(limits)) = &node.rule {
            for l in limits.iter().filter(|l| l.requests_per_unit > 0) {
                store.validate(l).map_err(|e| RuleError {
                    place: l.place.clone(),
                    reason: e.to_string(),
                })?;
            }
        }
        check_rules(store, &node.children)?;
    }
    Ok(())
}
