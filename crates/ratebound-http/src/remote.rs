//! Policies decided outside the layer — every instance of a service
//! counting one global limit in Redis (`ratebound_redis::RedisLimiter`,
//! feature `redis`), every process of a host one table in shared memory
//! (`ratebound_shm::SharedKeyedLimiter`, feature `shm`), or any
//! [`KeyedLimit`] of your own — added with [`Builder::remote`]. (The
//! response future's wait for their answers is `future`'s.)
//!
//! For each limited request that got a concurrency place and a key, the
//! layer asks every remote policy, in the order they were added, to take
//! one token for the request's identity — its key as every instance derives
//! it, as bytes: `key:<the key>` (a key header's trimmed value, or the
//! [`RequestKey::Custom`](crate::RequestKey::Custom) closure's), `ip:<address>`
//! (IPv6 cut to its prefix) or `anonymous` — within the policy's name as
//! its scope, and awaits their answers together; then the local policies
//! decide (none is charged when a remote one refuses) and the answer is
//! sent. A request that a local policy refuses after a remote one admitted
//! it stays counted remotely. A request whose client goes away while its
//! checks are pending drops them (and its concurrency place) unreported; a
//! Redis check already sent may still have counted.
//!
//! A check answered at once ([`LimitCheck::Ready`]: shared memory, a leased
//! token) costs no allocation and no clone of the inner service; one that
//! does I/O answers a `'static` future ([`LimitCheck::Pending`]) that owns
//! what it needs, because the response future keeps it across `await`s
//! after the request's own borrows have ended. An error is mapped by the
//! rule every front door applies ([`RemoteAnswer::from_result`]): a full
//! table ([`RemoteAnswer::Full`]) is 503 with `Retry-After: 1`, as the
//! layer's own full table; any other ([`RemoteAnswer::Failed`]: a store
//! that refused this client, or whose fail policy refused) 503 with
//! [`Builder::store_error_retry_after`], outcome `store_error`, one log
//! line per episode — never 500. Redis being down or slow is not an
//! error: its limiter's fail policy answers it.

use std::task::{Context, Poll};

use ratebound::any::Key;
use ratebound::gate::RemoteAnswer;
use ratebound::{KeyedLimit, LimitCheck};

#[cfg(doc)]
use crate::Builder;

/// The check of one token for `identity` under the policy named `scope`.
pub(crate) fn check(policy: &dyn KeyedLimit, scope: &str, identity: &[u8]) -> LimitCheck {
    policy.check(scope, Key::Bytes(identity), 1)
}

/// Polls `check` if it is pending; whether it still is. An error is the
/// gate's to map (see [`answers`]).
pub(crate) fn poll(check: &mut LimitCheck, cx: &mut Context<'_>) -> bool {
    if let LimitCheck::Pending(future) = check {
        match future.as_mut().poll(cx) {
            Poll::Ready(answer) => *check = LimitCheck::Ready(answer),
            Poll::Pending => return true,
        }
    }
    false
}

/// Every answer, in order, when all are known: a decision, or an error by
/// the rule every front door applies ([`RemoteAnswer::from_result`]: a full
/// table is 503 with `Retry-After: 1`, any other error 503 with the
/// layer's store-error `Retry-After`, never 500). Redis down or slow is not
/// an error: its limiter's fail policy answers it.
pub(crate) fn answers(checks: &[LimitCheck]) -> Option<Vec<RemoteAnswer>> {
    checks
        .iter()
        .map(|check| match check {
            LimitCheck::Ready(answer) => Some(RemoteAnswer::from_result(answer.as_ref().copied())),
            LimitCheck::Pending(_) => None,
        })
        .collect()
}
