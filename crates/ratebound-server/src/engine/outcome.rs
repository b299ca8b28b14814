//! A descriptor's answer from its limits' decisions: the status, the
//! wait, the limit named, and the reference server's ways of saying them.

use std::time::Duration;

use ratebound::http::Policy;
use ratebound::{Decision, Error as CoreError};

use super::RequestError;
use crate::api::{Code, CurrentLimit, DescriptorStatus};
use crate::model::{Algorithm, Limit};

/// A descriptor with a limit of 0: refused, counting nothing (a query,
/// 0 hits, is not over it: as the reference's count, 0 + 0 ≤ 0).
pub(super) fn zero_limit(limits: &[&Limit], hits: u64, now: u64) -> Option<Outcome> {
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
pub(super) fn answers(
    all: Vec<Result<Decision, CoreError>>,
) -> Result<Vec<Option<Decision>>, RequestError> {
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
pub(super) fn short_of(
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
pub(super) fn first_refusal(decisions: &[Option<Decision>]) -> Option<usize> {
    decisions
        .iter()
        .position(|d| d.is_some_and(|d| !d.is_allowed()))
}

/// More hits than a limit ever holds: over it, nothing taken.
pub(super) fn too_many(limits: &[&Limit], now: u64) -> Outcome {
    let largest = limits.iter().max_by_key(|l| l.requests_per_unit).copied();
    Outcome::refused_by(largest.unwrap_or(limits[0]), now)
}

/// The answer of a descriptor's `limits` from their `decisions`:
/// `admitted` or refused by `refuser`. It names the limit that refused,
/// else the one with the least left.
pub(super) fn outcome(
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
pub(super) struct Outcome {
    pub(super) status: DescriptorStatus,
    pub(super) retry_after: Duration,
    pub(super) decisions: Vec<Option<Decision>>,
}

impl Outcome {
    /// Refused by `limit` with nothing counted (a limit of 0, or more hits
    /// than it holds): until its window ends.
    pub(super) fn refused_by(limit: &Limit, now: u64) -> Outcome {
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
pub(super) fn near_limit(status: &DescriptorStatus) -> bool {
    status.current_limit.as_ref().is_some_and(|l| {
        let limit = u64::from(l.requests_per_unit);
        let spent = limit.saturating_sub(u64::from(status.limit_remaining));
        spent * 5 > limit * 4
    })
}

pub(super) fn unmatched() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok,
        current_limit: None,
        limit_remaining: 0,
        duration_until_reset: None,
    }
}

pub(super) fn current(limit: &Limit) -> CurrentLimit {
    CurrentLimit {
        requests_per_unit: u32::try_from(limit.requests_per_unit).unwrap_or(u32::MAX),
        unit: limit.window.unit,
        name: limit.name.clone().unwrap_or_default(),
    }
}

/// The policy the `RateLimit-Policy` field names for `limit`.
pub(super) fn policy(limit: &Limit) -> Option<Policy> {
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
pub(super) fn window_left(limit: &Limit, now: u64) -> Duration {
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
pub(super) fn until_reset(limit: &Limit, decision: &Decision, now: u64) -> Duration {
    match limit.algorithm {
        Algorithm::FixedWindow => window_left(limit, now),
        _ => decision.reset_after(),
    }
}

/// A store that could not decide.
pub(super) fn unavailable(e: CoreError) -> RequestError {
    RequestError::Unavailable {
        reason: format!("the limit could not decide: {e}"),
    }
}
