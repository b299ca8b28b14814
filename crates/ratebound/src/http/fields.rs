//! The response fields: `Retry-After` rounding, `RateLimit-Policy` and
//! `RateLimit` (the IETF structured fields) and the legacy `X-RateLimit-*`.

use std::fmt::Write as _;
use std::time::Duration;

use crate::{Decision, Error};

/// Whole seconds for a `Retry-After` (or a `RateLimit` `t=`), rounded **up**:
/// a client that waits that long is never refused for lack of tokens that
/// should have been there (RFC 9110 allows only whole seconds). Zero stays
/// zero; 1 ns becomes 1 s.
///
/// # Examples
/// ```
/// use ratebound::http::retry_after_secs;
/// use std::time::Duration;
///
/// assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
/// assert_eq!(retry_after_secs(Duration::from_secs(2)), 2);
/// assert_eq!(retry_after_secs(Duration::from_nanos(2_000_000_001)), 3);
/// ```
pub fn retry_after_secs(wait: Duration) -> u64 {
    wait.as_secs()
        .saturating_add(u64::from(wait.subsec_nanos() > 0))
}

/// One quota policy as the `RateLimit-Policy` field advertises it
/// (draft-ietf-httpapi-ratelimit-headers-10): a name, a quota `q` and a
/// window `w` in seconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    name: String,
    /// `name` as a structured-field string, quoted once here rather than for
    /// every response.
    quoted: String,
    quota: u64,
    window_secs: u64,
}

impl Policy {
    /// A policy named `name` allowing `quota` per `window` (rounded up to
    /// whole seconds, at least 1).
    ///
    /// # Errors
    /// [`Error::Parse`] when `name` is empty or holds anything but printable
    /// ASCII (a structured-field string cannot carry it).
    pub fn new(name: &str, quota: u64, window: Duration) -> Result<Policy, Error> {
        if name.is_empty() || !name.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(Error::Parse {
                input: name.to_string(),
                reason: "a policy name must be non-empty printable ASCII",
            });
        }
        let mut quoted = String::with_capacity(name.len() + 2);
        sf_string(&mut quoted, name);
        Ok(Policy {
            name: name.to_string(),
            quoted,
            quota,
            window_secs: retry_after_secs(window).max(1),
        })
    }

    /// The policy of a token bucket: `q` = burst, `w` = the time to refill
    /// the whole burst (b·T).
    ///
    /// # Errors
    /// As [`Policy::new`].
    pub fn for_quota(name: &str, quota: crate::Quota) -> Result<Policy, Error> {
        Policy::new(
            name,
            quota.burst(),
            Duration::from_nanos(quota.tolerance_nanos()),
        )
    }

    /// The policy of a keyed limiter's algorithm: a bucket as in
    /// [`for_quota`](Policy::for_quota), a window as `q` = limit, `w` = the
    /// window.
    ///
    /// # Errors
    /// As [`Policy::new`].
    pub fn for_keyed(name: &str, algorithm: crate::KeyedAlgorithm) -> Result<Policy, Error> {
        match algorithm {
            crate::KeyedAlgorithm::TokenBucket(quota) => Policy::for_quota(name, quota),
            crate::KeyedAlgorithm::FixedWindow { limit, window }
            | crate::KeyedAlgorithm::SlidingWindow { limit, window } => {
                Policy::new(name, limit, window)
            }
        }
    }

    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The largest integer a structured field holds (RFC 9651 §3.3.1: at most
/// 15 digits). A larger `q`, `w`, `r` or `t` (a burst near 2^60, say) is
/// written as this: fewer than there are, so a client reading it is never
/// told of more than it has, and the field still parses.
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// Writes `s` as a structured-field string: quoted, `"` and `\` escaped.
fn sf_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

/// Appends `n` in decimal, two digits per step.
pub(super) fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
                                2021222324252627282930313233343536373839\
                                4041424344454647484950515253545556575859\
                                6061626364656667686970717273747576777879\
                                8081828384858687888990919293949596979899";
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    while n >= 100 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        digits[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = n as usize * 2;
        i -= 2;
        digits[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        i -= 1;
        digits[i] = b'0' + n as u8;
    }
    out.extend_from_slice(&digits[i..]);
}

/// The `RateLimit-Policy` field value for `policies`, e.g.
/// `"burst";q=20;w=2, "hourly";q=1000;w=3600` (an integer of more than
/// 15 digits, which a structured field cannot hold, as 999999999999999).
pub fn ratelimit_policy(policies: &[Policy]) -> String {
    ratelimit_policy_of(policies)
}

/// [`ratelimit_policy`] of policies held anywhere (borrowed from a table
/// built once, not gathered into a slice per response).
pub fn ratelimit_policy_of<'a>(policies: impl IntoIterator<Item = &'a Policy>) -> String {
    let mut out = String::new();
    for (i, p) in policies.into_iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&p.quoted);
        let _ = write!(
            out,
            ";q={};w={}",
            p.quota.min(SF_INTEGER_MAX),
            p.window_secs.min(SF_INTEGER_MAX)
        );
    }
    out
}

/// The `RateLimit` field value for each policy's decision, e.g.
/// `"burst";r=0;t=1`: `r` = remaining, `t` = seconds until the quota is
/// whole again, rounded up (either, past 15 digits, as 999999999999999).
pub fn ratelimit<'a>(entries: impl IntoIterator<Item = (&'a Policy, Decision)>) -> String {
    String::from_utf8(ratelimit_bytes(entries)).unwrap_or_default()
}

/// [`ratelimit`] as bytes (ASCII: quoted printable names and digits), for a
/// front door whose header values are bytes: no UTF-8 check.
pub fn ratelimit_bytes<'a>(entries: impl IntoIterator<Item = (&'a Policy, Decision)>) -> Vec<u8> {
    // Called for every response: no formatting machinery.
    let mut out = Vec::with_capacity(64);
    for (i, (p, d)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(p.quoted.as_bytes());
        out.extend_from_slice(b";r=");
        push_u64(&mut out, d.remaining().min(SF_INTEGER_MAX));
        out.extend_from_slice(b";t=");
        push_u64(
            &mut out,
            retry_after_secs(d.reset_after()).min(SF_INTEGER_MAX),
        );
    }
    out
}

/// The legacy trio `X-RateLimit-Limit`, `X-RateLimit-Remaining`,
/// `X-RateLimit-Reset` (seconds until full, rounded up), as name–value pairs.
pub fn legacy_headers(decision: &Decision) -> [(&'static str, String); 3] {
    [
        ("X-RateLimit-Limit", decision.limit().to_string()),
        ("X-RateLimit-Remaining", decision.remaining().to_string()),
        (
            "X-RateLimit-Reset",
            retry_after_secs(decision.reset_after()).to_string(),
        ),
    ]
}
