//! Finding the rule a request descriptor falls under, as the reference
//! server finds it, and the keys its state and metrics go by.
//!
//! The walk (the reference's `GetLimit`): entry `i` of the request is
//! matched against the descriptors at depth `i`, one level at a time, with
//! no going back. At each level the most specific descriptor with the
//! entry's key is taken: the exact value first, then the wildcard values
//! in the file's order (the first that matches), then the descriptor
//! without a value. A rule applies only when the request ends at the level
//! of the descriptor holding it (README Example 4: a request longer or
//! shorter than the rule's depth matches nothing); a request that goes on
//! below a descriptor without children matches nothing, even if that
//! descriptor has a rule. A descriptor without a rule (a placeholder)
//! matches nothing either.
//!
//! ```
//! use ratebound_server::model::Config;
//!
//! let config = Config::parse(
//!     "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n",
//!     "edge.yaml",
//! )?;
//! let entries = [("remote_address".to_string(), "192.0.2.1".to_string())];
//! let found = config.find("edge", &entries).expect("a rule");
//! assert_eq!(found.limits[0].requests_per_unit, 10);
//! assert_eq!(found.metric_key, "edge.remote_address");
//! assert_eq!(found.state_key, "#4:edge|14:remote_address=9:192.0.2.1");
//! // A longer request matches nothing (the reference's Example 4).
//! let longer = [entries[0].clone(), ("path".to_string(), "/".to_string())];
//! assert!(config.find("edge", &longer).is_none());
//! # Ok::<(), ratebound_server::ConfigError>(())
//! ```

use std::collections::HashSet;

use crate::config::value_text;
use crate::model::{Config, Descriptor, Domain, Limit, Rule, Value};

mod index;

pub use index::Rules;

/// How one entry of a request matched its level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum How {
    Exact,
    Wildcard,
    KeyOnly,
}

/// The rule one request descriptor falls under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Match<'a> {
    /// The descriptor matched: its rule, `shadow_mode`, `replaces`.
    pub descriptor: &'a Descriptor,
    /// `unlimited: true`: always OK, nothing counted ([`limits`](Self::limits)
    /// is then empty).
    pub unlimited: bool,
    /// The limits in force, in the file's order (all of the rule's, until
    /// [`apply_replaces`] drops the replaced ones).
    pub limits: Vec<&'a Limit>,
    /// What identifies this descriptor's counters: the domain, then each
    /// entry's key and value, each length-prefixed (`<bytes>:<text>`), a
    /// value as `=<bytes>:<value sent>` or, for an entry matched by a
    /// `share_threshold` wildcard, `*<bytes>:<the pattern>` (every value
    /// it matches shares one counter, as the reference keys it by the
    /// pattern). Length prefixes make the key unambiguous whatever bytes a
    /// gateway sends: the reference's `domain_key_value_` join gives
    /// `("a_b", "c")` and `("a", "b_c")` one key. Each of
    /// [`limits`](Self::limits) needs its own counter: the engine adds the
    /// limit's index (or its algorithm and window) to this key.
    pub state_key: String,
    /// The reference's metric key: `domain.key_value.key2...` (see
    /// [`find`]).
    pub metric_key: String,
}

impl Match<'_> {
    /// The key of `limit`'s counter (`limit` one of [`limits`](Self::limits)):
    /// the [`state_key`](Self::state_key), then `@<position>/<algorithm>/<window
    /// in ns>`. The position is the limit's in its descriptor's rule as
    /// written (`-` for a limit not of this rule), so two limits of one
    /// descriptor never share a counter, and [`apply_replaces`] dropping
    /// one does not move the others'. The algorithm and window are in it
    /// so that a reload changing either starts a fresh counter, while one
    /// changing only `requests_per_unit` keeps counting (as the
    /// reference's keys do).
    pub fn limit_state_key(&self, limit: &Limit) -> String {
        let position = match &self.descriptor.rule {
            Some(Rule::Limits(all)) => all.iter().position(|l| std::ptr::eq(l, limit)),
            _ => None,
        };
        format!(
            "{}@{}/{}/{}",
            self.state_key,
            position.map_or_else(|| "-".to_string(), |p| p.to_string()),
            limit.algorithm.name(),
            limit.window.length.as_nanos()
        )
    }
}

/// Finds the rule `entries` (a request descriptor's `(key, value)` pairs,
/// in order) fall under in `domain`, with its state and metric keys.
/// `None`: no rule (the reference answers OK, without a limit).
///
/// The metric key is the reference's: the domain, then per entry `.key`
/// and `_value` where the value is shown: an exact value always; a
/// wildcard's pattern text (`files/*`), or the value sent when the
/// descriptor has `value_to_metric` (the pattern still, with
/// `share_threshold`); the value sent for a value-less descriptor only with
/// `value_to_metric`. When the matched descriptor has `detailed_metric`,
/// every entry shows `key_value` as sent (`key_` for an empty value),
/// except `share_threshold` entries, which show their pattern.
///
/// This scans each level; [`Rules`] answers the same from an index.
pub fn find<'a>(domain: &'a Domain, entries: &[(String, String)]) -> Option<Match<'a>> {
    walk(domain, entries, step)
}

/// The walk, with `step` choosing the position in a level an entry falls
/// under, and how.
fn walk<'a>(
    domain: &'a Domain,
    entries: &[(String, String)],
    mut step: impl FnMut(&'a [Descriptor], &str, &str) -> Option<(usize, How)>,
) -> Option<Match<'a>> {
    let mut level: &'a [Descriptor] = &domain.descriptors;
    let mut shared: Vec<Option<String>> = Vec::with_capacity(entries.len());
    let mut metric = domain.name.clone();
    for (i, (key, value)) in entries.iter().enumerate() {
        let (position, how) = step(level, key, value)?;
        let node = level.get(position)?;
        let pattern = match (&node.value, how) {
            (Some(v @ Value::Wildcard(_)), How::Wildcard) => Some(value_text(v)),
            _ => None,
        };
        let shown = match how {
            How::Exact => Some(value.as_str()),
            How::Wildcard if node.share_threshold => pattern.as_deref(),
            How::Wildcard if node.value_to_metric => Some(value.as_str()),
            How::Wildcard => pattern.as_deref(),
            How::KeyOnly if node.value_to_metric => Some(value.as_str()),
            How::KeyOnly => None,
        };
        metric.push('.');
        metric.push_str(key);
        if let Some(v) = shown.filter(|v| !v.is_empty()) {
            metric.push('_');
            metric.push_str(v);
        }
        shared.push(pattern.filter(|_| node.share_threshold));
        if i + 1 == entries.len() {
            let rule = node.rule.as_ref()?;
            if node.detailed_metric {
                metric = detailed_metric(&domain.name, entries, &shared);
            }
            let (unlimited, limits) = match rule {
                Rule::Unlimited => (true, Vec::new()),
                Rule::Limits(l) => (false, l.iter().collect()),
            };
            return Some(Match {
                descriptor: node,
                unlimited,
                limits,
                state_key: state_key(&domain.name, entries, &shared),
                metric_key: metric,
            });
        }
        if node.children.is_empty() {
            return None;
        }
        level = &node.children;
    }
    None
}

/// The position in `level` of the descriptor the entry `(key, value)`
/// falls under, by scanning.
fn step(level: &[Descriptor], key: &str, value: &str) -> Option<(usize, How)> {
    let same_key = || level.iter().enumerate().filter(move |(_, d)| d.key == key);
    if let Some((p, _)) =
        same_key().find(|(_, d)| matches!(&d.value, Some(Value::Exact(v)) if v == value))
    {
        return Some((p, How::Exact));
    }
    if let Some((p, _)) = same_key().find(|(_, d)| is_wildcard_of(d, value)) {
        return Some((p, How::Wildcard));
    }
    same_key()
        .find(|(_, d)| d.value.is_none())
        .map(|(p, _)| (p, How::KeyOnly))
}

/// Whether `d` has a wildcard value that `value` matches.
fn is_wildcard_of(d: &Descriptor, value: &str) -> bool {
    matches!(&d.value, Some(Value::Wildcard(parts)) if wildcard_match(parts, value))
}

/// Whether `value` matches the pattern whose text between `*`s is `parts`
/// (each `*` matching zero or more characters, in order).
pub fn wildcard_match(parts: &[String], value: &str) -> bool {
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
        return false;
    };
    if parts.len() == 1 {
        return first == value;
    }
    let fixed: usize = parts.iter().map(String::len).sum();
    if value.len() < fixed || !value.starts_with(first.as_str()) || !value.ends_with(last.as_str())
    {
        return false;
    }
    // The middle parts, in order, between the prefix and the suffix.
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part.as_str()) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// The state key and the metric key of a descriptor decided by the
/// gateway's own limit (RLS v3's `limit`): every entry as sent (the state
/// key as a rule's with exact values; the metric key as the reference's,
/// `domain.key_value.key2_value2`).
pub fn override_keys(domain: &str, entries: &[(String, String)]) -> (String, String) {
    let exact = vec![None; entries.len()];
    let mut metric = domain.to_string();
    for (k, v) in entries {
        metric.push('.');
        metric.push_str(k);
        if !v.is_empty() {
            metric.push('_');
            metric.push_str(v);
        }
    }
    (state_key(domain, entries, &exact), metric)
}

fn push_len(key: &mut String, tag: char, text: &str) {
    use std::fmt::Write as _;
    key.push(tag);
    let _ = write!(key, "{}:", text.len());
    key.push_str(text);
}

fn state_key(domain: &str, entries: &[(String, String)], shared: &[Option<String>]) -> String {
    // Room for every part and its length prefix: one allocation.
    let room = domain.len()
        + entries
            .iter()
            .map(|(k, v)| k.len() + v.len() + 16)
            .sum::<usize>()
        + 8;
    let mut key = String::with_capacity(room);
    push_len(&mut key, '#', domain);
    for ((k, v), share) in entries.iter().zip(shared) {
        push_len(&mut key, '|', k);
        match share {
            Some(pattern) => push_len(&mut key, '*', pattern),
            None => push_len(&mut key, '=', v),
        }
    }
    key
}

fn detailed_metric(
    domain: &str,
    entries: &[(String, String)],
    shared: &[Option<String>],
) -> String {
    let mut key = domain.to_string();
    let any_shared = shared.iter().any(Option::is_some);
    for ((k, v), share) in entries.iter().zip(shared) {
        key.push('.');
        key.push_str(k);
        match share {
            Some(pattern) => {
                key.push('_');
                key.push_str(pattern);
            }
            // The reference writes `key_` for an empty value, unless some
            // entry shares a threshold.
            None if !v.is_empty() || !any_shared => {
                key.push('_');
                key.push_str(v);
            }
            None => {}
        }
    }
    key
}

/// Drops what `replaces` names, across one request's matches (README
/// Example 7): every match's descriptor's `replaces` names (an unlimited
/// one's too) are gathered, then each limit with one of those names is
/// dropped from its match; a match left without limits becomes `None`
/// (the reference answers it OK, without a limit). Unlimited matches are
/// never dropped.
pub fn apply_replaces(matches: &mut [Option<Match<'_>>]) {
    let names: HashSet<String> = matches
        .iter()
        .flatten()
        .flat_map(|m| m.descriptor.replaces.iter().cloned())
        .collect();
    if names.is_empty() {
        return;
    }
    for slot in matches.iter_mut() {
        let Some(m) = slot else { continue };
        if m.unlimited {
            continue;
        }
        m.limits
            .retain(|l| l.name.as_ref().is_none_or(|n| !names.contains(n)));
        if m.limits.is_empty() {
            *slot = None;
        }
    }
}

impl Config {
    /// The rule `entries` fall under in `domain` ([`find`]); `None` for an
    /// unknown domain too.
    pub fn find(&self, domain: &str, entries: &[(String, String)]) -> Option<Match<'_>> {
        find(self.domains.get(domain)?, entries)
    }
}
