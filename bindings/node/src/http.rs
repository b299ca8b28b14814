//! The protocol-neutral HTTP helpers of `ratebound::http`, for frameworks
//! the package has no middleware for (and the shared spec vectors).

use std::time::Duration;

use napi::JsValue;
use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratebound::gate::GateOptions;
use ratebound::http::{self, Policy};
use ratebound::{Error as CoreError, any};

use crate::error::{OrThrow, invalid_type};
use crate::fast::{Lines, RAW_HEADERS_TYPE};
use crate::gate::set_option;
use crate::limiters::{RateOption, rate_of};

fn ip(env: &Env, s: &str) -> Result<std::net::IpAddr> {
    s.parse().map_err(|_| {
        crate::error::throw(
            env,
            &CoreError::Parse {
                input: s.to_string(),
                reason: "not an IP address",
            },
        )
    })
}

/// Whole seconds for a `Retry-After`, rounded up, from a wait in
/// nanoseconds: a client that waits that long is never refused for lack of
/// tokens that should have been there.
#[napi(namespace = "http")]
pub fn retry_after_secs(env: Env, wait_nanos: f64) -> Result<f64> {
    let nanos = any::whole("waitNanos", wait_nanos, 0).or_throw(&env)?;
    Ok(http::retry_after_secs(Duration::from_nanos(nanos)) as f64)
}

/// The address a limit is keyed on: IPv4-mapped IPv6 unwrapped, IPv6 cut to
/// its first `prefix` bits (default 64; above 128 counts as 128).
#[napi(namespace = "http")]
pub fn ip_key(env: Env, address: String, prefix: Option<f64>) -> Result<String> {
    let prefix = match prefix {
        Some(p) => any::ipv6_prefix("prefix", p).or_throw(&env)?,
        None => any::DEFAULT_IPV6_PREFIX,
    };
    Ok(http::ip_key(ip(&env, &address)?, prefix).to_string())
}

/// The client's address: the peer, or — only when `trustedProxies` says
/// the peer is a proxy (CIDR networks, one CIDR string, or a number of
/// hops; none by default) — the address the `clientIpHeader` reports
/// (`'x-forwarded-for'` by default, `'forwarded'`, or a single-address
/// header such as `'cf-connecting-ip'`), as the core's `client_ip` finds
/// it. `rawHeaders` are the request's header lines as `req.rawHeaders`
/// gives them (`[name, value, ...]`, in order, repeated lines kept): only
/// the lines of that one header are read, combined in order.
#[napi(
    namespace = "http",
    ts_args_type = "peer: string, rawHeaders?: string[] | null, trustedProxies?: string | string[] | number | null, clientIpHeader?: string | null"
)]
pub fn client_ip(
    env: Env,
    peer: String,
    raw_headers: Option<Unknown<'_>>,
    trusted_proxies: Option<Unknown<'_>>,
    client_ip_header: Option<Unknown<'_>>,
) -> Result<String> {
    let mut o = GateOptions::default();
    set_option(&env, &mut o, "trustedProxies", &trusted_proxies)?;
    set_option(&env, &mut o, "clientIpHeader", &client_ip_header)?;
    let forwarding = o.forwarding.unwrap_or_default();
    let peer = ip(&env, &peer)?;
    let lines = raw_headers.map_or(std::ptr::null_mut(), |h| h.raw());
    // SAFETY: the env and an argument of the current call.
    #[allow(unsafe_code)]
    let lines = unsafe { Lines::read(env.raw(), lines, [forwarding.header()]) }
        .map_err(|_| invalid_type(&env, RAW_HEADERS_TYPE))?;
    Ok(http::client_ip(peer, &lines, &forwarding, &o.trusted).to_string())
}

/// A token-bucket policy for `rateLimitPolicy`.
#[napi(object, object_to_js = false)]
pub struct QuotaPolicy {
    /// The policy's name.
    pub name: String,
    /// Tokens per second, or a quota string.
    #[napi(ts_type = "number | string")]
    pub rate: RateOption,
    /// The burst (default: the quota string's).
    pub burst: Option<f64>,
}

/// The `RateLimit-Policy` field value for token-bucket policies.
#[napi(namespace = "http")]
pub fn rate_limit_policy(env: Env, policies: Vec<QuotaPolicy>) -> Result<String> {
    if policies.is_empty() {
        return Err(invalid_type(&env, "at least one policy is required"));
    }
    let mut out = Vec::new();
    for p in policies {
        let rate = Some(p.rate);
        let q = any::quota(rate_of(&rate).or_throw(&env)?, p.burst).or_throw(&env)?;
        out.push(Policy::for_quota(&p.name, q).or_throw(&env)?);
    }
    Ok(http::ratelimit_policy(&out))
}

/// The quota fields of a response two limits decided, by the core's one
/// rule (`ratebound::gate::merge_fields`): `first` the fields of the limit
/// that decided first (the site-wide middleware), `second` the next's (a
/// route's own limit), each `[name, value, ...]`; the answer likewise, in
/// lower case. `RateLimit` and `RateLimit-Policy` lists are joined (the
/// first's entries first), the legacy fields are the tighter limit's, the
/// longer `Retry-After` stays.
#[napi(namespace = "http")]
pub fn merge_fields(first: Vec<String>, second: Vec<String>) -> Vec<String> {
    let pairs = |flat: &[String]| -> Vec<(String, String)> {
        flat.chunks_exact(2)
            .map(|p| (p[0].clone(), p[1].clone()))
            .collect()
    };
    ratebound::gate::merge_fields(&pairs(&first), &pairs(&second))
        .into_iter()
        .flat_map(|(n, v)| [n.to_string(), v])
        .collect()
}

/// Every field a gate sets on a response, in lower case: those
/// [`merge_fields`] merges.
#[napi(namespace = "http")]
pub fn gate_fields() -> Vec<&'static str> {
    ratebound::gate::GATE_FIELDS.to_vec()
}
