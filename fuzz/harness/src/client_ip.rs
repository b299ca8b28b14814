//! `http::client_ip` over a peer and arbitrary header lines, under every
//! `Forwarding` mode and trusted-proxy set; and `Forwarded` (RFC 7239)
//! elements in particular.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ratebound::http::{Cidr, Forwarding, TrustedProxies, client_ip as resolve};

use crate::Input;

/// A peer address: IPv4, IPv6 or IPv4-mapped IPv6, from a few fixed ones
/// (so that trusted networks match) or from the input.
pub(crate) fn address(input: &mut Input<'_>) -> IpAddr {
    match input.byte() % 6 {
        0 => IpAddr::V4(Ipv4Addr::new(10, 0, 0, input.byte())),
        1 => IpAddr::V4(Ipv4Addr::from(input.u32())),
        2 => IpAddr::V6(Ipv6Addr::from(input.u128())),
        3 => IpAddr::V6(Ipv4Addr::new(10, 0, 0, input.byte()).to_ipv6_mapped()),
        4 => IpAddr::V6(Ipv6Addr::new(
            0x2001,
            0xdb8,
            0,
            0,
            0,
            0,
            0,
            u16::from(input.byte()),
        )),
        _ => IpAddr::V4(Ipv4Addr::LOCALHOST),
    }
}

/// Trusted proxies: none, a number of hops, or networks (some that hold the
/// fixed peers, some from the input's text).
pub(crate) fn trusted(input: &mut Input<'_>) -> TrustedProxies {
    match input.byte() % 4 {
        0 => TrustedProxies::None,
        1 => TrustedProxies::Hops(input.below(6)),
        _ => {
            let mut cidrs = Vec::new();
            for _ in 0..input.below(4) {
                let fixed = [
                    "10.0.0.0/8",
                    "2001:db8::/32",
                    "127.0.0.1",
                    "0.0.0.0/0",
                    "::/0",
                ];
                let cidr = if input.bool() {
                    Cidr::parse(fixed[input.below(fixed.len())])
                } else {
                    Cidr::parse(input.text(48))
                };
                if let Ok(c) = cidr {
                    cidrs.push(c);
                }
            }
            TrustedProxies::Cidrs(cidrs)
        }
    }
}

pub(crate) fn forwarding(input: &mut Input<'_>) -> Forwarding {
    match input.byte() % 3 {
        0 => Forwarding::XForwardedFor,
        1 => Forwarding::Forwarded,
        _ => Forwarding::Single("x-real-ip".to_string()),
    }
}

/// Checks what `client_ip` must do whatever the headers say.
fn check(peer: IpAddr, lines: &[(&str, &[u8])], forwarding: &Forwarding, trusted: &TrustedProxies) {
    let got = resolve(peer, lines, forwarding, trusted);
    let header = forwarding.header();
    let read: Vec<&[u8]> = lines
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(header))
        .map(|(_, v)| *v)
        .collect();
    let peer_trusted = match trusted {
        TrustedProxies::None => false,
        TrustedProxies::Hops(n) => *n >= 1,
        TrustedProxies::Cidrs(cidrs) => cidrs.iter().any(|c| c.contains(peer)),
    };
    if !peer_trusted || read.is_empty() {
        assert_eq!(
            got, peer,
            "an untrusted peer, or no {header} line: {lines:?} {trusted:?}"
        );
        return;
    }
    if matches!(forwarding, Forwarding::Single(_)) && read.len() != 1 {
        assert_eq!(got, peer, "two lines of a single-address header: {lines:?}");
        return;
    }
    if got == peer {
        return;
    }
    // Anything else is an address that the header's text holds: an IPv4
    // address in its only spelling (no leading zeros), an IPv6 address in
    // some spelling whose hex digits all appear.
    let text = String::from_utf8_lossy(&read.concat()).to_ascii_lowercase();
    match got {
        IpAddr::V4(v4) => assert!(
            text.contains(&v4.to_string()),
            "{got} is not the peer and not in {text:?} ({forwarding:?}, {trusted:?})"
        ),
        IpAddr::V6(_) => assert!(
            text.contains(':'),
            "{got} is not the peer and {text:?} has no IPv6 address"
        ),
    }
    // A client address reported by a walk is never one of the trusted
    // networks' own, except where the walk ran out of entries or hit one it
    // could not read: not asserted (both are legitimate).
}

/// `client_ip` over arbitrary header lines of the three forwarding fields
/// (and one other), for each mode and trusted set from the input.
pub fn client_ip(data: &[u8]) {
    let mut input = Input::new(data);
    let peer = address(&mut input);
    let trusted = trusted(&mut input);
    let names = [
        "x-forwarded-for",
        "X-Forwarded-For",
        "forwarded",
        "x-real-ip",
        "x-other",
    ];
    let mut lines: Vec<(&str, &[u8])> = Vec::new();
    for _ in 0..input.below(5) {
        let name = input.pick(&names);
        lines.push((name, input.bytes(96)));
    }
    for forwarding in [
        Forwarding::XForwardedFor,
        Forwarding::Forwarded,
        Forwarding::Single("x-real-ip".to_string()),
    ] {
        check(peer, &lines, &forwarding, &trusted);
    }
}

/// `client_ip` with `Forwarded`: the input after a few bytes of set-up is
/// the field's value, split into lines at newlines.
pub fn forwarded(data: &[u8]) {
    let mut input = Input::new(data);
    let peer = address(&mut input);
    let trusted = trusted(&mut input);
    let forwarding = forwarding(&mut input);
    let rest = input.rest();
    let lines: Vec<(&str, &[u8])> = rest
        .split(|b| *b == b'\n')
        .take(8)
        .map(|l| ("forwarded", l))
        .collect();
    check(peer, &lines, &Forwarding::Forwarded, &trusted);
    // The same lines under the mode from the input, renamed to its header.
    let renamed: Vec<(&str, &[u8])> = lines
        .iter()
        .map(|(_, v)| (forwarding.header(), *v))
        .collect();
    check(peer, &renamed, &forwarding, &trusted);
}
