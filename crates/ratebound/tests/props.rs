//! Property tests: random traces against an independent reference model.
//!
//! The reference is the textbook token bucket, written separately from the
//! GCRA code: a mutex around (credit, last), where `credit` is the bucket's
//! content measured in nanoseconds of refill (tokens × T), capped at b·T.

use std::sync::Mutex;
use std::time::Duration;

use proptest::prelude::*;
use ratebound::{ManualClock, Quota, TokenBucket};

struct Reference {
    inner: Mutex<(u128, u64)>,
    period: u128,
    burst: u128,
}

#[derive(Debug, PartialEq, Eq)]
struct Answer {
    allowed: bool,
    remaining: u64,
    retry_after: u64,
    reset_after: u64,
}

impl Reference {
    fn new(period: u64, burst: u64) -> Reference {
        let (period, burst) = (u128::from(period), u128::from(burst));
        Reference {
            inner: Mutex::new((period * burst, 0)),
            period,
            burst,
        }
    }

    /// `now` must not go backwards.
    fn check(&self, now: u64, n: u64) -> Answer {
        let mut state = self.inner.lock().unwrap();
        let (credit, last) = *state;
        let capacity = self.period * self.burst;
        let credit = (credit + u128::from(now - last)).min(capacity);
        let need = u128::from(n) * self.period;
        let allowed = credit >= need;
        let credit = if allowed { credit - need } else { credit };
        *state = (credit, now);
        Answer {
            allowed,
            remaining: (credit / self.period) as u64,
            retry_after: if allowed { 0 } else { (need - credit) as u64 },
            reset_after: (capacity - credit) as u64,
        }
    }
}

fn quota() -> impl Strategy<Value = (u64, u64)> {
    // Periods from 1 ns to 10 s, bursts 1..=50.
    (
        prop_oneof![1u64..1_000, 1_000u64..10_000_000_000],
        1u64..=50,
    )
}

fn trace() -> impl Strategy<Value = Vec<(u64, u64)>> {
    // (advance in ns, n as a fraction of the burst later)
    prop::collection::vec(
        (
            prop_oneof![Just(0u64), 0u64..2_000, 0u64..20_000_000_000],
            0u64..=100,
        ),
        1..60,
    )
}

fn bucket(period: u64, burst: u64) -> (TokenBucket<ManualClock>, ManualClock) {
    let q = Quota::with_period(Duration::from_nanos(period))
        .unwrap()
        .with_burst(burst)
        .unwrap();
    let clock = ManualClock::new();
    (TokenBucket::with_clock(q, clock.clone()), clock)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn decisions_match_the_reference((period, burst) in quota(), steps in trace()) {
        let (bucket, _) = bucket(period, burst);
        let reference = Reference::new(period, burst);
        let mut now = 0u64;
        for (i, (advance, pct)) in steps.into_iter().enumerate() {
            now += advance;
            let n = pct * burst / 100;
            let d = bucket.check_n_at(n, now).unwrap();
            let got = Answer {
                allowed: d.is_allowed(),
                remaining: d.remaining(),
                retry_after: d.retry_after_nanos(),
                reset_after: d.reset_after_nanos(),
            };
            prop_assert_eq!(got, reference.check(now, n), "step {} at {} ns, n = {}", i, now, n);
        }
    }

    /// `check_at` takes one token on a path of its own: it answers as the
    /// reference does, and as `check_n_at(1, …)` does on a twin bucket,
    /// before and after quota changes (every generation of the state word,
    /// and its wrap back to the first).
    #[test]
    fn single_checks_match_the_reference_and_check_n(
        (period, burst) in quota(), steps in trace(), changes in prop::collection::vec(quota(), 0..7)
    ) {
        let (one, _) = bucket(period, burst);
        let (twin, _) = bucket(period, burst);
        let reference = Reference::new(period, burst);
        let mut now = 0u64;
        for (i, &(advance, _)) in steps.iter().enumerate() {
            now += advance;
            let d = one.check_at(now);
            let got = Answer {
                allowed: d.is_allowed(),
                remaining: d.remaining(),
                retry_after: d.retry_after_nanos(),
                reset_after: d.reset_after_nanos(),
            };
            prop_assert_eq!(got, reference.check(now, 1), "step {} at {} ns", i, now);
            prop_assert_eq!(d, twin.check_n_at(1, now).unwrap(), "step {} at {} ns", i, now);
        }
        for (k, &(period2, burst2)) in changes.iter().enumerate() {
            let to = Quota::with_period(Duration::from_nanos(period2)).unwrap().with_burst(burst2).unwrap();
            one.set_quota_at(to, now);
            twin.set_quota_at(to, now);
            for (i, &(advance, _)) in steps.iter().enumerate().take(8) {
                now += advance;
                let (d, t) = (one.check_at(now), twin.check_n_at(1, now).unwrap());
                prop_assert_eq!(d, t, "change {}, step {} at {} ns", k, i, now);
            }
        }
    }

    #[test]
    fn waiting_exactly_retry_after_succeeds_and_one_ns_less_does_not(
        (period, burst) in quota(), steps in trace()
    ) {
        let (bucket, _) = bucket(period, burst);
        let mut now = 0u64;
        for (advance, pct) in steps {
            now += advance;
            let n = (pct * burst / 100).max(1);
            let d = bucket.check_n_at(n, now).unwrap();
            if !d.is_allowed() {
                let wait = d.retry_after_nanos();
                prop_assert!(wait > 0);
                prop_assert!(!bucket.check_n_at(n, now + wait - 1).unwrap().is_allowed());
                now += wait;
                prop_assert!(bucket.check_n_at(n, now).unwrap().is_allowed());
            }
        }
    }

    #[test]
    fn no_interval_admits_more_than_burst_plus_rate_times_length(
        (period, burst) in quota(), steps in trace()
    ) {
        let (bucket, _) = bucket(period, burst);
        let mut now = 0u64;
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        for (advance, pct) in steps {
            now += advance;
            let n = pct * burst / 100;
            if bucket.check_n_at(n, now).unwrap().is_allowed() && n > 0 {
                admitted.push((now, n));
            }
        }
        // Every window [t_i, t_j] between two admissions: tokens ≤ b + d/T,
        // i.e. tokens·T ≤ τ + d.
        for i in 0..admitted.len() {
            let mut tokens = 0u128;
            for j in i..admitted.len() {
                tokens += u128::from(admitted[j].1);
                let d = u128::from(admitted[j].0 - admitted[i].0);
                prop_assert!(
                    tokens * u128::from(period) <= u128::from(period * burst) + d,
                    "{} tokens in {} ns", tokens, d
                );
            }
        }
    }

    #[test]
    fn a_backwards_reading_never_adds_tokens(
        (period, burst) in quota(), steps in trace(), back in 0u64..20_000_000_000, pct in 0u64..=100
    ) {
        // Two buckets with the same history; one is then asked at `now`, the
        // other at an earlier time. The earlier reading is never better off.
        let (a, _) = bucket(period, burst);
        let (b, _) = bucket(period, burst);
        let mut now = 0u64;
        for (advance, p) in steps {
            now += advance;
            let n = p * burst / 100;
            prop_assert_eq!(a.check_n_at(n, now).unwrap(), b.check_n_at(n, now).unwrap());
        }
        let earlier = now.saturating_sub(back);
        prop_assert!(b.available_at(earlier) <= a.available_at(now));
        let n = (pct * burst / 100).max(1);
        let (late, early) = (a.check_n_at(n, now).unwrap(), b.check_n_at(n, earlier).unwrap());
        prop_assert!(late.is_allowed() || !early.is_allowed(), "{:?} vs {:?}", late, early);
        if late.is_allowed() == early.is_allowed() {
            prop_assert!(early.remaining() <= late.remaining(), "{:?} vs {:?}", late, early);
        }
    }

    #[test]
    fn set_quota_keeps_whole_tokens_capped_at_the_new_burst(
        (period, burst) in quota(), steps in trace(), (period2, burst2) in quota()
    ) {
        let (bucket, _) = bucket(period, burst);
        let mut now = 0u64;
        for (advance, pct) in steps {
            now += advance;
            let _ = bucket.check_n_at(pct * burst / 100, now).unwrap();
        }
        let before = bucket.available_at(now);
        let to = Quota::with_period(Duration::from_nanos(period2)).unwrap().with_burst(burst2).unwrap();
        bucket.set_quota_at(to, now);
        prop_assert_eq!(bucket.quota(), to);
        prop_assert_eq!(bucket.available_at(now), before.min(burst2));
    }

    #[test]
    fn quota_strings_never_panic(s in "\\PC{0,24}") {
        let _ = Quota::parse(&s);
    }

    #[test]
    fn quota_display_parses_back((period, burst) in quota()) {
        let q = Quota::with_period(Duration::from_nanos(period)).unwrap().with_burst(burst).unwrap();
        prop_assert_eq!(Quota::parse(&q.to_string()).unwrap(), q);
    }

    #[test]
    fn float_rates_never_panic(rate in prop::num::f64::ANY, burst in any::<u64>()) {
        if let Ok(q) = Quota::per_second(rate) {
            prop_assert!(q.emission_interval_nanos() >= 1);
            let _ = q.with_burst(burst);
        }
    }
}

mod http_props {
    use std::net::IpAddr;
    use std::time::Duration;

    use proptest::prelude::*;
    use ratebound::http::{Cidr, Forwarding, TrustedProxies, client_ip, ip_key, retry_after_secs};

    proptest! {
        #[test]
        fn retry_after_is_never_early_and_less_than_a_second_late(nanos in any::<u64>()) {
            let wait = Duration::from_nanos(nanos);
            let secs = retry_after_secs(wait);
            prop_assert!(Duration::from_secs(secs) >= wait);
            prop_assert!(Duration::from_secs(secs) < wait + Duration::from_secs(1));
        }

        #[test]
        fn forwarding_headers_never_panic_and_untrusted_peers_are_never_overridden(
            peer in any::<[u8; 4]>(),
            xff in "\\PC{0,64}",
            fwd in "\\PC{0,64}",
            hops in 0usize..4,
        ) {
            let peer = IpAddr::from(peer);
            let lines = [("x-forwarded-for", xff.as_str()), ("forwarded", fwd.as_str()), ("x-real-ip", xff.as_str())];
            let trusted = TrustedProxies::Cidrs(vec![Cidr::parse("10.0.0.0/8").unwrap()]);
            let single = Forwarding::parse("x-real-ip").unwrap();
            for header in [Forwarding::XForwardedFor, Forwarding::Forwarded, single] {
                let got = client_ip(peer, &lines[..], &header, &trusted);
                if !Cidr::parse("10.0.0.0/8").unwrap().contains(peer) {
                    prop_assert_eq!(got, peer);
                }
                let _ = client_ip(peer, &lines[..], &header, &TrustedProxies::Hops(hops));
                prop_assert_eq!(client_ip(peer, &lines[..], &header, &TrustedProxies::None), peer);
            }
        }

        #[test]
        fn cidr_parsing_never_panics(s in "\\PC{0,40}") {
            let _ = Cidr::parse(&s);
        }

        #[test]
        fn ip_keys_are_stable(bits in any::<u128>(), prefix in 0u8..=255) {
            let ip = IpAddr::from(bits.to_be_bytes());
            let once = ip_key(ip, prefix);
            prop_assert_eq!(ip_key(once, prefix), once);
        }
    }
}
