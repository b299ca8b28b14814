//! A rate limit request and its answer, as the engine takes and gives them:
//! the RLS v3 `RateLimitRequest` / `RateLimitResponse` without the wire
//! (the gRPC service and `POST /json` convert to and from these).

use std::time::Duration;

use crate::model::Unit;

/// One descriptor of a request: its entries in order, its own
/// `hits_addend` (RLS v3's per-descriptor one, `None`: the request's), and
/// the limit the gateway gives it (RLS v3's `limit`, an override).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestDescriptor {
    /// `(key, value)` pairs, in the order the gateway sent them.
    pub entries: Vec<(String, String)>,
    /// How many hits this descriptor counts (`None`: the request's
    /// `hits_addend`).
    pub hits_addend: Option<u64>,
    /// The gateway's own limit for this descriptor (`None`: the
    /// configuration's).
    pub limit: Option<LimitOverride>,
}

/// A limit the gateway sends with a descriptor (RLS v3
/// `RateLimitDescriptor.limit`, set in Envoy's route configuration): as
/// the reference server, for a domain the configuration names, the
/// descriptor is decided by a fixed window of `requests_per_unit` per
/// `unit` instead of the configuration's rule (whether a rule matches or
/// not), never in shadow mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitOverride {
    /// Requests per unit.
    pub requests_per_unit: u32,
    /// The unit.
    pub unit: Unit,
}

/// A request: a domain, its descriptors, and the hits each counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// The domain (the configuration file's `domain`).
    pub domain: String,
    /// The descriptors, each decided on its own.
    pub descriptors: Vec<RequestDescriptor>,
    /// Hits per descriptor (RLS v3: 0 means 1).
    pub hits_addend: u64,
}

/// A decision's code, as RLS v3 numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    /// 0: nothing decided.
    Unknown,
    /// 1: under the limit.
    Ok,
    /// 2: over the limit.
    OverLimit,
}

/// The limit a descriptor's answer refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CurrentLimit {
    /// Requests per `unit` (for a `window:` of several units, per window,
    /// named with the unit that divides it).
    pub requests_per_unit: u32,
    /// The unit.
    pub unit: Unit,
    /// The limit's `name` (empty when it has none).
    pub name: String,
}

/// One descriptor's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescriptorStatus {
    /// OK or over the limit (OK for a descriptor that matched nothing).
    pub code: Code,
    /// The limit decided by (`None`: nothing matched, or unlimited).
    pub current_limit: Option<CurrentLimit>,
    /// What is left (`u32::MAX` for an unlimited descriptor).
    pub limit_remaining: u32,
    /// Until the limit is whole again (a window's end; a bucket's time to
    /// fill). `None` when nothing matched.
    pub duration_until_reset: Option<Duration>,
}

/// The answer to a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// Over the limit if any descriptor is (shadow mode aside), else OK.
    pub overall_code: Code,
    /// One status per request descriptor, in order.
    pub statuses: Vec<DescriptorStatus>,
    /// Headers for the gateway to add to its answer: the IETF `RateLimit`
    /// and `RateLimit-Policy` fields, and `Retry-After` when over the limit.
    pub headers: Vec<(String, String)>,
}
