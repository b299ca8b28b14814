//! The protocol-neutral HTTP helpers of `ratebound::http`, for frameworks
//! the package has no middleware for (and the shared spec vectors).

use std::time::Duration;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratebound::http::{self, Cidr, Policy, TrustedProxies};
use ratebound::{Error as CoreError, any};

use crate::error::{OrThrow, invalid_type};
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
/// its first `prefix` bits.
#[napi(namespace = "http")]
pub fn ip_key(env: Env, address: String, prefix: f64) -> Result<String> {
    let prefix = any::whole("prefix", prefix, 0).or_throw(&env)?.min(128) as u8;
    Ok(http::ip_key(ip(&env, &address)?, prefix).to_string())
}

/// The client's address from the peer and the forwarding fields, believing
/// only `trusted` proxies (CIDR networks or a hop count; none by default).
#[napi(namespace = "http")]
pub fn client_ip(
    env: Env,
    peer: String,
    trusted: Option<Either<Vec<String>, f64>>,
    x_forwarded_for: Option<String>,
    forwarded: Option<String>,
) -> Result<String> {
    let trusted = match trusted {
        None => TrustedProxies::None,
        Some(Either::A(cidrs)) => TrustedProxies::Cidrs(
            cidrs
                .iter()
                .map(|c| Cidr::parse(c))
                .collect::<std::result::Result<Vec<_>, _>>()
                .or_throw(&env)?,
        ),
        Some(Either::B(hops)) => {
            TrustedProxies::Hops(any::whole("trusted", hops, 0).or_throw(&env)? as usize)
        }
    };
    let peer = ip(&env, &peer)?;
    Ok(http::client_ip(
        peer,
        x_forwarded_for.as_deref(),
        forwarded.as_deref(),
        &trusted,
    )
    .to_string())
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
