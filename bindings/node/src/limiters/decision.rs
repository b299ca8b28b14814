//! `Decision`: the answer to one check, as a plain object.

use napi_derive::napi;

/// The answer to one check. A refusal is a decision with `allowed: false`,
/// never an exception.
#[napi(object)]
pub struct Decision {
    /// Whether the request was admitted (and its tokens taken).
    pub allowed: bool,
    /// The most the limiter admits at once (the burst, or the window's limit).
    pub limit: f64,
    /// Whole tokens left after this decision.
    pub remaining: f64,
    /// Seconds until the same request would be admitted (exact to the
    /// nanosecond); 0 when allowed.
    pub retry_after: f64,
    /// Seconds until the limiter is full again.
    pub reset_after: f64,
}

impl From<ratebound::Decision> for Decision {
    fn from(d: ratebound::Decision) -> Decision {
        Decision {
            allowed: d.is_allowed(),
            limit: d.limit() as f64,
            remaining: d.remaining() as f64,
            retry_after: d.retry_after_nanos() as f64 / 1e9,
            reset_after: d.reset_after_nanos() as f64 / 1e9,
        }
    }
}
