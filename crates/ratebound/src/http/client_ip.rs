//! The client's address: IP normalisation with IPv6 prefix grouping, trusted
//! proxies, and the one configured forwarding header (`X-Forwarded-For`,
//! `Forwarded` or a single-address header).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::Error;

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
        Forwarding::XForwardedFor => walk(peer, hops(&combined, parse_hop), trusted),
        Forwarding::Forwarded => walk(peer, hops(&combined, forwarded_for), trusted),
    }
}

/// The entries of the comma-separated `combined` lines, nearest (last)
/// first, each read by `parse` (`None`: not text, or no address).
fn hops<'a>(
    combined: &'a [u8],
    parse: impl Fn(&str) -> Option<IpAddr> + 'a,
) -> impl Iterator<Item = Option<IpAddr>> + 'a {
    combined
        .rsplit(|b| *b == b',')
        .map(move |e| std::str::from_utf8(e).ok().and_then(&parse))
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
