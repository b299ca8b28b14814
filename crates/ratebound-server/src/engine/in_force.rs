//! The rules in force with what is made once per configuration (each
//! limit's `RateLimit-Policy`), and the limit a gateway's override gives.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use ratebound::http::Policy;

use super::outcome::policy;
use crate::api::LimitOverride;
use crate::matching::Rules;
use crate::model::{Algorithm, Descriptor, Limit, Place, Rule, Window};

/// The rules in force, and the `RateLimit-Policy` of each of their limits
/// (made once, not per answer), by the limit's address in the rules.
pub(super) struct InForce {
    pub(super) rules: Arc<Rules>,
    policies: HashMap<usize, Policy>,
}

impl InForce {
    pub(super) fn new(rules: Rules) -> InForce {
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
    pub(super) fn policy(&self, limit: &Limit) -> Option<Cow<'_, Policy>> {
        match self.policies.get(&(std::ptr::from_ref(limit) as usize)) {
            Some(p) => Some(Cow::Borrowed(p)),
            None => policy(limit).map(Cow::Owned),
        }
    }
}

/// The limit of a gateway's override: a fixed window, as the reference.
pub(super) fn override_limit(o: LimitOverride) -> Limit {
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
pub(super) fn overriding() -> &'static Descriptor {
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
