//! Protocol-neutral pieces of an HTTP front door, shared by the tower layer
//! and the Python and Node middleware so that every language answers alike:
//! `Retry-After` rounding, the `RateLimit-Policy` / `RateLimit` field values,
//! IP normalisation with IPv6 prefix grouping, and the client address from
//! the one configured forwarding header (`X-Forwarded-For`, `Forwarded` or a
//! single-address header) of trusted proxies. No HTTP library: strings and `IpAddr`s in,
//! strings and `IpAddr`s out.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
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
fn push_u64(out: &mut Vec<u8>, mut n: u64) {
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
/// `"burst";q=20;w=2, "hourly";q=1000;w=3600`.
pub fn ratelimit_policy(policies: &[Policy]) -> String {
    let mut out = String::new();
    for (i, p) in policies.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&p.quoted);
        let _ = write!(out, ";q={};w={}", p.quota, p.window_secs);
    }
    out
}

/// The `RateLimit` field value for each policy's decision, e.g.
/// `"burst";r=0;t=1`: `r` = remaining, `t` = seconds until the quota is
/// whole again, rounded up.
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
        push_u64(&mut out, d.remaining());
        out.extend_from_slice(b";t=");
        push_u64(&mut out, retry_after_secs(d.reset_after()));
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

/// The address a limit should be keyed on: an IPv4-mapped IPv6 address
/// (`::ffff:a.b.c.d`) becomes the IPv4 address, and an IPv6 address is cut
/// to its first `v6_prefix` bits (64 by default in the front doors), so one
/// host cannot dodge its limit by rotating through the addresses of its /64.
/// `v6_prefix` above 128 counts as 128.
///
/// # Examples
/// ```
/// use ratebound::http::ip_key;
///
/// let a = ip_key("2001:db8:1:2:aaaa::1".parse().unwrap(), 64);
/// let b = ip_key("2001:db8:1:2:bbbb::9".parse().unwrap(), 64);
/// assert_eq!(a, b);
/// assert_eq!(a.to_string(), "2001:db8:1:2::");
/// assert_eq!(ip_key("::ffff:192.0.2.7".parse().unwrap(), 64).to_string(), "192.0.2.7");
/// ```
pub fn ip_key(ip: IpAddr, v6_prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let bits = u128::from(v6);
                let keep = u32::from(v6_prefix.min(128));
                let mask = u128::MAX.checked_shl(128 - keep).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(bits & mask))
            }
        },
    }
}

/// A network in CIDR notation, e.g. `10.0.0.0/8` or `2001:db8::/32`; a bare
/// address is a /32 or /128.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `"10.0.0.0/8"`, `"::1/128"` or a bare address.
    ///
    /// # Errors
    /// [`Error::Parse`] naming the input.
    pub fn parse(input: &str) -> Result<Cidr, Error> {
        let fail = |reason| Error::Parse {
            input: input.to_string(),
            reason,
        };
        let (addr, prefix) = match input.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (input.trim(), None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| fail("not an IP address or CIDR network"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| fail("the prefix length must be 0-32 (IPv4) or 0-128 (IPv6)"))?,
        };
        Ok(Cidr {
            network: mask(addr, prefix),
            prefix,
        })
    }

    /// True if `ip` is in this network (IPv4-mapped IPv6 addresses count as
    /// their IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        ip.is_ipv4() == self.network.is_ipv4() && mask(ip, self.prefix) == self.network
    }
}

fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let m = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & m))
        }
        IpAddr::V6(v6) => {
            let m = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & m))
        }
    }
}

/// Which proxies' forwarding headers to believe. The default believes none:
/// without configuration, `X-Forwarded-For` and `Forwarded` are ignored,
/// since any client can send them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum TrustedProxies {
    /// Ignore forwarding headers: the client is the peer.
    #[default]
    None,
    /// Believe forwarding entries added by peers in these networks: walk the
    /// chain from the peer backwards and stop at the first untrusted hop.
    Cidrs(Vec<Cidr>),
    /// Exactly this many proxies sit in front of the server: the client is
    /// that many hops back from the peer.
    Hops(usize),
}

/// The header lines of a request, as a front door has them: every line of
/// one field, in the order received. Implemented for a slice of
/// `(name, value)` pairs (names compared without regard to case); the tower
/// layer implements it over `http::HeaderMap`, the Python and Node bindings
/// over their servers' header lists.
pub trait Headers {
    /// Calls `f` with the value of each line of the field `name` (given in
    /// lower case), in order.
    fn for_each_line<F: FnMut(&[u8])>(&self, name: &str, f: F);
}

impl<N: AsRef<[u8]>, V: AsRef<[u8]>> Headers for [(N, V)] {
    fn for_each_line<F: FnMut(&[u8])>(&self, name: &str, mut f: F) {
        for (n, v) in self {
            if n.as_ref().eq_ignore_ascii_case(name.as_bytes()) {
                f(v.as_ref());
            }
        }
    }
}

impl<N: AsRef<[u8]>, V: AsRef<[u8]>> Headers for Vec<(N, V)> {
    fn for_each_line<F: FnMut(&[u8])>(&self, name: &str, f: F) {
        self.as_slice().for_each_line(name, f);
    }
}

/// A request with no header lines.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHeaders;

impl Headers for NoHeaders {
    fn for_each_line<F: FnMut(&[u8])>(&self, _: &str, _: F) {}
}

/// Which forwarding header carries the client's address. It is
/// configuration, never guessed from what a request contains: the other
/// forwarding headers are ignored, since a proxy passes on whatever the
/// client sent in them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Forwarding {
    /// `X-Forwarded-For` (nginx, HAProxy, AWS ALB, most proxies): a list,
    /// each proxy appending the address it received from. The default.
    #[default]
    XForwardedFor,
    /// `Forwarded` (RFC 7239): a list of elements, read for their `for=`.
    Forwarded,
    /// One header with one address that the proxy sets and overwrites (e.g.
    /// `x-real-ip`, `cf-connecting-ip`, `fly-client-ip`), lower case.
    Single(String),
}

impl Forwarding {
    /// By header name, in any case: `x-forwarded-for`, `forwarded`, or any
    /// other field name for a single-address header.
    ///
    /// # Errors
    /// [`Error::Parse`] for a name that is not an HTTP field name (RFC 9110
    /// token characters).
    ///
    /// # Examples
    /// ```
    /// use ratebound::http::Forwarding;
    /// assert_eq!(Forwarding::parse("X-Forwarded-For")?, Forwarding::XForwardedFor);
    /// assert_eq!(Forwarding::parse("CF-Connecting-IP")?.header(), "cf-connecting-ip");
    /// assert!(Forwarding::parse("bad name").is_err());
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    pub fn parse(name: &str) -> Result<Forwarding, Error> {
        let name = field_name(name)?;
        Ok(match name.as_str() {
            "x-forwarded-for" => Forwarding::XForwardedFor,
            "forwarded" => Forwarding::Forwarded,
            _ => Forwarding::Single(name),
        })
    }

    /// The header's name, lower case.
    pub fn header(&self) -> &str {
        match self {
            Forwarding::XForwardedFor => "x-forwarded-for",
            Forwarding::Forwarded => "forwarded",
            Forwarding::Single(name) => name,
        }
    }
}

/// `name` in lower case if it is an HTTP field name (a non-empty token).
///
/// # Errors
/// [`Error::Parse`] naming the input otherwise.
pub fn field_name(name: &str) -> Result<String, Error> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) {
        return Err(Error::Parse {
            input: name.to_string(),
            reason: "not an HTTP header name",
        });
    }
    Ok(name.to_ascii_lowercase())
}

/// The client's address: the peer, or — only when `trusted` says the peer is
/// a proxy whose headers can be believed — the address that the configured
/// forwarding header reports. Only that header is read; its lines are
/// combined in order, as for any list field (RFC 9110 §5.3), so a line a
/// proxy adds after the client's is the one nearer the peer.
///
/// - `X-Forwarded-For` and `Forwarded` are walked from the peer backwards:
///   with [`TrustedProxies::Cidrs`], past every hop in a trusted network, to
///   the first address that is not; with [`TrustedProxies::Hops`]`(n)`, `n`
///   entries back. An entry that is not an address (`unknown`, an obfuscated
///   identifier, garbage) ends the walk: the last trusted hop's view is
///   kept, never a guess.
/// - A single-address header is believed when the peer is trusted (in a
///   trusted network, or `Hops(n)` with `n ≥ 1`) and it has exactly one
///   line holding one address; anything else (two lines, a list, garbage)
///   leaves the peer.
///
/// The result is not yet grouped: pass it to [`ip_key`].
///
/// # Examples
/// ```
/// use ratebound::http::{client_ip, Cidr, Forwarding, TrustedProxies};
///
/// let peer = "10.0.0.5".parse().unwrap();
/// let lines = [("x-forwarded-for", "203.0.113.9, 10.0.0.7"), ("forwarded", "for=6.6.6.6")];
/// let xff = Forwarding::XForwardedFor;
/// // By default the header is ignored: anyone can send it.
/// assert_eq!(client_ip(peer, &lines[..], &xff, &TrustedProxies::None), peer);
/// let trusted = TrustedProxies::Cidrs(vec![Cidr::parse("10.0.0.0/8")?]);
/// assert_eq!(client_ip(peer, &lines[..], &xff, &trusted).to_string(), "203.0.113.9");
/// # Ok::<(), ratebound::Error>(())
/// ```
pub fn client_ip<H: Headers + ?Sized>(
    peer: IpAddr,
    headers: &H,
    forwarding: &Forwarding,
    trusted: &TrustedProxies,
) -> IpAddr {
    if *trusted == TrustedProxies::None {
        return peer;
    }
    // The field's lines joined with commas: one list, nearest hop last.
    let mut combined: Vec<u8> = Vec::new();
    let mut lines = 0usize;
    headers.for_each_line(forwarding.header(), |line| {
        if lines > 0 {
            combined.push(b',');
        }
        combined.extend_from_slice(line);
        lines += 1;
    });
    if lines == 0 {
        return peer;
    }
    fn entry(bytes: &[u8]) -> Option<&str> {
        std::str::from_utf8(bytes).ok()
    }
    match forwarding {
        Forwarding::Single(_) => {
            let believed = match trusted {
                TrustedProxies::None => false,
                TrustedProxies::Hops(n) => *n >= 1,
                TrustedProxies::Cidrs(cidrs) => cidrs.iter().any(|c| c.contains(peer)),
            };
            if !believed || lines != 1 || combined.contains(&b',') {
                return peer;
            }
            entry(&combined).and_then(parse_hop).unwrap_or(peer)
        }
        Forwarding::XForwardedFor => walk(
            peer,
            combined
                .rsplit(|b| *b == b',')
                .map(|e| entry(e).and_then(parse_hop)),
            trusted,
        ),
        Forwarding::Forwarded => walk(
            peer,
            combined
                .rsplit(|b| *b == b',')
                .map(|e| entry(e).and_then(forwarded_for)),
            trusted,
        ),
    }
}

/// Walks `hops` (nearest first) from `peer` as `trusted` allows.
fn walk(
    peer: IpAddr,
    hops: impl Iterator<Item = Option<IpAddr>>,
    trusted: &TrustedProxies,
) -> IpAddr {
    let mut current = peer;
    match trusted {
        TrustedProxies::None => {}
        TrustedProxies::Hops(n) => {
            // `n` proxies: the client is the n-th entry counted from the end.
            for hop in hops.take(*n) {
                match hop {
                    Some(ip) => current = ip,
                    None => break,
                }
            }
        }
        TrustedProxies::Cidrs(cidrs) => {
            for hop in hops {
                if !cidrs.iter().any(|c| c.contains(current)) {
                    break;
                }
                match hop {
                    Some(ip) => current = ip,
                    None => break,
                }
            }
        }
    }
    current
}

/// The address in one `X-Forwarded-For` entry or `for=` value: `a.b.c.d`,
/// `a.b.c.d:port`, `IPv6`, `[IPv6]` or `[IPv6]:port`.
fn parse_hop(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim().trim_matches('"');
    if let Some(rest) = entry.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    if let Ok(ip) = entry.parse() {
        return Some(ip);
    }
    // IPv4 with a port.
    let (host, port) = entry.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

/// The `for=` address of one `Forwarded` element (`for=...;proto=...`).
fn forwarded_for(element: &str) -> Option<IpAddr> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        if name.trim().eq_ignore_ascii_case("for") {
            parse_hop(value)
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn decimal_digits() {
        for n in [0, 7, 10, 99, 100, 101, 999_999, 1_000_000, u64::MAX] {
            let mut out = Vec::new();
            push_u64(&mut out, n);
            assert_eq!(out, n.to_string().as_bytes(), "{n}");
        }
    }

    #[test]
    fn retry_after_rounds_up_and_never_early() {
        for (nanos, secs) in [
            (0u64, 0u64),
            (1, 1),
            (999_999_999, 1),
            (1_000_000_000, 1),
            (1_000_000_001, 2),
            (3_333_333_334, 4),
        ] {
            assert_eq!(
                retry_after_secs(Duration::from_nanos(nanos)),
                secs,
                "{nanos} ns"
            );
        }
        assert_eq!(retry_after_secs(Duration::MAX), u64::MAX);
    }

    #[test]
    fn fields_follow_the_draft_syntax() {
        let burst =
            Policy::for_quota("burst", crate::Quota::parse("10/s burst 20").unwrap()).unwrap();
        let hourly = Policy::new("hour\"ly", 1000, Duration::from_secs(3600)).unwrap();
        assert_eq!(
            ratelimit_policy(&[burst.clone(), hourly.clone()]),
            r#""burst";q=20;w=2, "hour\"ly";q=1000;w=3600"#
        );
        let d = Decision::counted(false, 20, 0, 1_500_000_000, 1_000_000_001);
        assert_eq!(ratelimit([(&burst, d)]), r#""burst";r=0;t=2"#);
        let legacy = legacy_headers(&d);
        assert_eq!(legacy[2], ("X-RateLimit-Reset", "2".to_string()));
        assert_eq!(
            Policy::new("", 1, Duration::from_secs(1))
                .unwrap_err()
                .code(),
            "parse_error"
        );
        assert_eq!(
            Policy::new("é", 1, Duration::from_secs(1))
                .unwrap_err()
                .code(),
            "parse_error"
        );
    }

    #[test]
    fn ipv6_is_grouped_and_mapped_ipv4_unwrapped() {
        assert_eq!(ip_key(ip("2001:db8::1"), 64), ip("2001:db8::"));
        assert_eq!(ip_key(ip("2001:db8::1"), 128), ip("2001:db8::1"));
        assert_eq!(ip_key(ip("2001:db8::1"), 0), ip("::"));
        assert_eq!(ip_key(ip("2001:db8::1"), 200), ip("2001:db8::1"));
        assert_eq!(ip_key(ip("::ffff:10.1.2.3"), 64), ip("10.1.2.3"));
        assert_eq!(ip_key(ip("10.1.2.3"), 64), ip("10.1.2.3"));
    }

    #[test]
    fn cidrs_parse_and_match() {
        let net = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(net.contains(ip("10.200.1.1")));
        assert!(net.contains(ip("::ffff:10.0.0.1")));
        assert!(!net.contains(ip("11.0.0.1")));
        assert!(!net.contains(ip("::1")));
        assert!(Cidr::parse("::1").unwrap().contains(ip("::1")));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
        for bad in ["10.0.0.0/33", "10.0.0.0/x", "nonsense", "", "::/129"] {
            let err = Cidr::parse(bad).unwrap_err();
            assert_eq!(err.code(), "parse_error");
            assert!(err.to_string().contains(bad), "{err}");
        }
    }

    #[test]
    fn forwarding_headers_are_believed_only_from_trusted_proxies() {
        let trusted = TrustedProxies::Cidrs(vec![Cidr::parse("10.0.0.0/8").unwrap()]);
        let proxy = ip("10.0.0.5");
        let stranger = ip("198.51.100.1");
        let xff = Forwarding::XForwardedFor;
        let one = |v: &'static str| vec![("x-forwarded-for", v)];
        let lines = one("203.0.113.9, 10.0.0.7");
        // Spoofed by an untrusted peer: ignored.
        assert_eq!(client_ip(stranger, &lines, &xff, &trusted), stranger);
        // From the trusted chain: the first untrusted hop.
        assert_eq!(client_ip(proxy, &lines, &xff, &trusted), ip("203.0.113.9"));
        // A client that prepends its own fake entry does not get past the
        // first untrusted hop.
        let spoofed = one("1.2.3.4, 203.0.113.9, 10.0.0.7");
        assert_eq!(
            client_ip(proxy, &spoofed, &xff, &trusted),
            ip("203.0.113.9")
        );
        // Garbage ends the walk at the last hop that could be read.
        let garbage = one("garbage, 10.0.0.7");
        assert_eq!(client_ip(proxy, &garbage, &xff, &trusted), ip("10.0.0.7"));
        assert_eq!(client_ip(proxy, &one(""), &xff, &trusted), proxy);
        // Hop counts.
        let hops = |n| TrustedProxies::Hops(n);
        assert_eq!(client_ip(proxy, &lines, &xff, &hops(1)), ip("10.0.0.7"));
        assert_eq!(client_ip(proxy, &lines, &xff, &hops(2)), ip("203.0.113.9"));
        assert_eq!(client_ip(proxy, &lines, &xff, &hops(9)), ip("203.0.113.9"));
        assert_eq!(client_ip(proxy, &lines, &xff, &hops(0)), proxy);
        // Two lines are one list, in order: the proxy's line (added after
        // the client's) is nearer the peer.
        let two = vec![
            ("X-Forwarded-For", "6.6.6.6"),
            ("x-forwarded-for", "203.0.113.9"),
        ];
        assert_eq!(client_ip(proxy, &two, &xff, &hops(1)), ip("203.0.113.9"));
        // Forwarded is read only when configured, and then XFF is not.
        let both = vec![
            ("x-forwarded-for", "203.0.113.9"),
            (
                "forwarded",
                r#"for="[2001:db8::1]:4711";proto=https, for=10.0.0.7:8080"#,
            ),
        ];
        assert_eq!(client_ip(proxy, &both, &xff, &trusted), ip("203.0.113.9"));
        let fwd = Forwarding::Forwarded;
        assert_eq!(client_ip(proxy, &both, &fwd, &trusted), ip("2001:db8::1"));
        let unknown = vec![("forwarded", "for=unknown, for=10.0.0.7")];
        assert_eq!(client_ip(proxy, &unknown, &fwd, &trusted), ip("10.0.0.7"));
        // A single-address header: one line, one address, trusted peer.
        let real = Forwarding::parse("X-Real-IP").unwrap();
        let r = |v: &'static str| vec![("x-real-ip", v)];
        assert_eq!(
            client_ip(proxy, &r("203.0.113.9"), &real, &trusted),
            ip("203.0.113.9")
        );
        assert_eq!(
            client_ip(stranger, &r("203.0.113.9"), &real, &trusted),
            stranger
        );
        assert_eq!(
            client_ip(proxy, &r("1.1.1.1, 2.2.2.2"), &real, &trusted),
            proxy
        );
        let twice = vec![("x-real-ip", "1.1.1.1"), ("x-real-ip", "2.2.2.2")];
        assert_eq!(client_ip(proxy, &twice, &real, &trusted), proxy);
        assert_eq!(
            client_ip(proxy, &r("203.0.113.9"), &real, &hops(1)),
            ip("203.0.113.9")
        );
        // Non-UTF-8 bytes are one unreadable entry, not a reason to drop the header.
        let bytes: Vec<(&[u8], &[u8])> = vec![(b"x-forwarded-for", b"\xff\xfe, 203.0.113.9")];
        assert_eq!(client_ip(proxy, &bytes, &xff, &trusted), ip("203.0.113.9"));
        // Never by default.
        assert_eq!(client_ip(proxy, &both, &fwd, &TrustedProxies::None), proxy);
    }
}

/// A cap on requests in flight, for load shedding: a request either gets a
/// place at once or is refused at once (503 with `Retry-After: 1` in the
/// front doors) — it never waits, so there is no queue to grow. Lock-free:
/// one atomic count, model-checked with loom.
///
/// # Examples
/// ```
/// use ratebound::http::ConcurrencyCap;
///
/// let cap = ConcurrencyCap::new(2)?;
/// assert!(cap.try_enter());
/// assert!(cap.try_enter());
/// assert!(!cap.try_enter()); // full: shed this one
/// cap.leave();
/// assert!(cap.try_enter());
/// # Ok::<(), ratebound::Error>(())
/// ```
#[derive(Debug)]
pub struct ConcurrencyCap {
    limit: usize,
    in_use: crate::sync::AtomicUsize,
}

impl ConcurrencyCap {
    /// At most `limit` requests in flight.
    ///
    /// # Errors
    /// [`Error::InvalidLimit`] for 0.
    pub fn new(limit: usize) -> Result<ConcurrencyCap, Error> {
        if limit == 0 {
            return Err(Error::InvalidLimit {
                limit: 0,
                max: u64::try_from(usize::MAX).unwrap_or(u64::MAX),
            });
        }
        Ok(ConcurrencyCap {
            limit,
            in_use: crate::sync::AtomicUsize::new(0),
        })
    }

    /// Takes a place if one is free; `false` when the cap is reached. A
    /// `true` must be paired with one [`leave`](Self::leave).
    #[inline]
    pub fn try_enter(&self) -> bool {
        use crate::sync::Ordering;
        // Ordering: Acquire pairs with leave()'s Release: what the previous
        // holder of the place did happens before this request runs. The
        // count itself is exact (one read-modify-write at a time), so never
        // more than `limit` places are out.
        self.in_use
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .is_ok()
    }

    /// Gives back a place taken by [`try_enter`](Self::try_enter). An
    /// unpaired call is ignored rather than wrapping the count.
    #[inline]
    pub fn leave(&self) {
        use crate::sync::Ordering;
        // Ordering: Release — what the request did happens before its place
        // is seen free.
        let _ = self
            .in_use
            .fetch_update(Ordering::Release, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_use.load(crate::sync::Ordering::Relaxed)
    }

    /// The cap.
    pub fn limit(&self) -> usize {
        self.limit
    }
}
