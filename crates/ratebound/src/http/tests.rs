//! The fields and the client address, by hand.

use std::net::IpAddr;
use std::time::Duration;

use super::fields::push_u64;
use super::*;
use crate::Decision;

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
    let burst = Policy::for_quota("burst", crate::Quota::parse("10/s burst 20").unwrap()).unwrap();
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

/// Found by the fuzzer (fuzz/regressions/ratelimit_fields): a burst or a
/// remaining count of more than 15 digits made fields that no structured-
/// field parser reads; they are written as the largest integer one holds.
#[test]
fn fields_integers_stay_within_15_digits() {
    let big = Policy::new("big", u64::MAX, Duration::MAX).unwrap();
    assert_eq!(
        ratelimit_policy(std::slice::from_ref(&big)),
        r#""big";q=999999999999999;w=999999999999999"#
    );
    let q = crate::Quota::parse("1/ns burst 1152921504606846976").unwrap();
    let bucket = Policy::for_quota("b", q).unwrap();
    assert_eq!(
        ratelimit_policy(std::slice::from_ref(&bucket)),
        r#""b";q=999999999999999;w=1152921505"#
    );
    let d = Decision::from_parts(true, u64::MAX, u64::MAX - 1, 0, u64::MAX);
    assert_eq!(
        ratelimit([(&big, d)]),
        r#""big";r=999999999999999;t=18446744074"#
    );
    // 15 digits are written as they are.
    let d = Decision::from_parts(true, 999_999_999_999_999, 999_999_999_999_998, 0, 0);
    assert_eq!(ratelimit([(&big, d)]), r#""big";r=999999999999998;t=0"#);
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
