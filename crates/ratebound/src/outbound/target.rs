//! Where a request goes, and the limiter key that follows from it.

use std::fmt::Write as _;

/// The key of a request that names no host (a path-only URI, as tonic's
/// requests to a `Channel` are): one key for all of them.
pub const NO_HOST: &str = "default";

/// Where a request goes: its URL's scheme, host and port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target<'a> {
    /// `"http"`, `"https"`, ... (any case; a trailing `:` is ignored).
    pub scheme: &'a str,
    /// The host, as the URL spells it (an IPv6 address with or without its
    /// brackets); empty: none.
    pub host: &'a str,
    /// The port the URL gives, if any.
    pub port: Option<u16>,
}

/// The key of a request to `target`: `host:port`, or `host` when the URL
/// gives no port or the scheme's default (80 for `http`, 443 for
/// `https`); an IPv6 host in brackets; [`NO_HOST`] for no host.
///
/// # Examples
/// ```
/// use ratebound::outbound::{Target, default_key};
/// let key = |scheme, host, port| default_key(Target { scheme, host, port });
/// assert_eq!(key("https", "partner.example", Some(443)), "partner.example");
/// assert_eq!(key("http", "partner.example", Some(8080)), "partner.example:8080");
/// assert_eq!(key("https:", "::1", Some(8443)), "[::1]:8443");
/// assert_eq!(key("http", "", None), "default");
/// ```
pub fn default_key(target: Target<'_>) -> String {
    let Target { scheme, host, port } = target;
    if host.is_empty() {
        return NO_HOST.to_string();
    }
    let scheme = scheme.strip_suffix(':').unwrap_or(scheme);
    let default = if scheme.eq_ignore_ascii_case("http") {
        Some(80)
    } else if scheme.eq_ignore_ascii_case("https") {
        Some(443)
    } else {
        None
    };
    let bracket = host.contains(':') && !host.starts_with('[');
    let mut key = String::with_capacity(host.len() + 8);
    if bracket {
        key.push('[');
    }
    key.push_str(host);
    if bracket {
        key.push(']');
    }
    if let Some(port) = port.filter(|p| Some(*p) != default) {
        // Into the key's own buffer: no second allocation.
        let _ = write!(key, ":{port}");
    }
    key
}
