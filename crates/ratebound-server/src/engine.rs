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

mod checks;
mod in_force;
mod outcome;
mod types;

use std::borrow::Cow;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ratebound::http::{Policy, ratelimit, ratelimit_policy_of, retry_after_secs};
use ratebound::{Decision, Error as CoreError};

use crate::api::{Code, DescriptorStatus, Request, RequestDescriptor, Response};
use crate::matching::{Match, Rules, apply_replaces, override_keys};
use crate::model::{Algorithm, Config, Limit};
use crate::stats::{Seen, Stats};
use crate::store::Store;

use checks::{check_request, check_rules};
use in_force::{InForce, override_limit, overriding};
use outcome::{
    Outcome, answers, first_refusal, near_limit, outcome, short_of, too_many, unavailable,
    unmatched, zero_limit,
};
pub use types::{MAX_DESCRIPTORS, MAX_ENTRIES, MAX_TEXT, Options, RequestError, RuleError};

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
