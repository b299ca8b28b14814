//! What the engine refuses before deciding: a request too large or
//! malformed, a rule its store cannot hold.

use super::{MAX_DESCRIPTORS, MAX_ENTRIES, MAX_TEXT, RequestError, RuleError};
use crate::api::{Request, RequestDescriptor};
use crate::model::{Descriptor, Rule};
use crate::store::Store;

/// Refuses a request that is malformed or larger than the engine takes.
pub(super) fn check_request(request: &Request) -> Result<(), RequestError> {
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

pub(super) fn check_descriptor(
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
pub(super) fn check_rules(store: &Store, nodes: &[Descriptor]) -> Result<(), RuleError> {
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
