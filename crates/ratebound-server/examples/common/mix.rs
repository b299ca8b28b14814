//! What `rls_load` and `rls_steps` send: the rules served and the request
//! mix (included by both with `#[path]`).

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

/// The rules served: a coarse per-IP fixed window (the reference server's
/// YAML, unchanged) and, under it, a token bucket on the login path per IP
/// (an extension).
pub const RULES: &str = "\
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 100
    descriptors:
      - key: path
        value: /login
        rate_limit:
          algorithm: token_bucket
          unit: second
          requests_per_unit: 1
          burst: 3
";

/// A request as a gateway sends it: the client's address, and the address
/// with the path. 1 call in 50 comes from one of 8 busy addresses (which
/// pass their per-IP limit), the rest from 65 536 others; 1 in 10 is a
/// login.
pub fn request(rng: &mut u64) -> RateLimitRequest {
    // xorshift64
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    let r = *rng;
    let ip = if r.is_multiple_of(50) {
        format!("192.0.2.{}", (r >> 8) % 8)
    } else {
        format!("10.1.{}.{}", (r >> 8) & 255, (r >> 16) & 255)
    };
    let path = if (r >> 24).is_multiple_of(10) {
        "/login"
    } else {
        "/api/items"
    };
    let entry = |key: &str, value: &str| Entry {
        key: key.into(),
        value: value.into(),
    };
    RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![
            RateLimitDescriptor {
                entries: vec![entry("remote_address", &ip)],
                ..RateLimitDescriptor::default()
            },
            RateLimitDescriptor {
                entries: vec![entry("remote_address", &ip), entry("path", path)],
                ..RateLimitDescriptor::default()
            },
        ],
        hits_addend: 1,
    }
}
