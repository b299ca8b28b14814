//! `GateOptions::set` from arbitrary loose values, and `Gate::new` over
//! what they set.

use std::time::Duration;

use ratebound::any::AnyClock;
use ratebound::gate::{Gate, GateOptions, Loose};
use ratebound::{KeyedAlgorithm, ManualClock, Quota};

use crate::Input;

/// Every option name in both spellings, and a few that are not options.
const NAMES: &[&str] = &[
    "key_header",
    "keyHeader",
    "trusted_proxies",
    "trustedProxies",
    "client_ip_header",
    "clientIpHeader",
    "ipv6_prefix",
    "ipv6Prefix",
    "missing_key",
    "missingKey",
    "headers",
    "body",
    "max_keys",
    "maxKeys",
    "overflow",
    "concurrency_limit",
    "concurrencyLimit",
    "concurrency_initial",
    "concurrency_min",
    "concurrency_max",
    "concurrency_tolerance",
    "concurrencyTolerance",
    "background_fraction",
    "backgroundFraction",
    "store_error_retry_after",
    "storeErrorRetryAfter",
    "",
    "keyheader",
    "key-header",
];

/// Texts the options take, and some they do not.
const TEXTS: &[&str] = &[
    "x-api-key",
    "X-Forwarded-For",
    "forwarded",
    "cf-connecting-ip",
    "10.0.0.0/8",
    "::1/128",
    "2001:db8::/200",
    "ip",
    "shared",
    "draft",
    "legacy",
    "off",
    "text",
    "problem+json",
    "evict",
    "reject",
    "auto",
    "bad name",
    "",
];

/// A number that a dynamic language might pass: small, whole, fractional,
/// huge, negative, NaN or infinite.
fn float(input: &mut Input<'_>) -> f64 {
    match input.byte() % 8 {
        0 => f64::from(input.byte()),
        1 => f64::from(input.u16()),
        2 => f64::from(input.u32()),
        3 => f64::from_bits(input.u64()),
        4 => -f64::from(input.byte()),
        5 => f64::from(input.byte()) / 256.0,
        6 => input.pick(&[
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            2f64.powi(53),
            2f64.powi(64),
        ]),
        _ => 400.0 + f64::from(input.u16() % 300),
    }
}

/// Applies up to eight options from `input` to `options`; each `set` is a
/// success or a typed error with a message, and a failed `set` leaves the
/// options as they were.
pub(crate) fn set_some(input: &mut Input<'_>, options: &mut GateOptions) {
    for _ in 0..input.below(9) {
        let name = if input.byte() < 240 {
            input.pick(NAMES)
        } else {
            input.text(24)
        };
        let kind = input.byte() % 6;
        let list: Vec<&str> = (0..input.below(4))
            .map(|_| {
                if input.bool() {
                    input.pick(TEXTS)
                } else {
                    input.text(40)
                }
            })
            .collect();
        let value = match kind {
            0 => Loose::Text(input.pick(TEXTS)),
            1 => Loose::Text(input.text(40)),
            2 | 3 => Loose::Number(float(input)),
            4 => Loose::List(&list),
            _ => Loose::Bool(input.bool()),
        };
        let before = format!("{options:?}");
        if let Err(e) = options.set(name, value) {
            assert!(
                !e.to_string().is_empty() && !e.code().is_empty(),
                "{name} {value:?}: {e:?}"
            );
            assert_eq!(
                format!("{options:?}"),
                before,
                "a failed set({name}, {value:?}) changed the options"
            );
        }
    }
}

/// A small algorithm from `input` (at most a few thousand per window, a
/// window of up to a minute), so that a gate's keys do not vanish at once.
pub(crate) fn algorithm(input: &mut Input<'_>) -> KeyedAlgorithm {
    let limit = u64::from(input.byte() % 8) + 1;
    let window = Duration::from_millis(u64::from(input.u16()) + 1);
    match input.byte() % 4 {
        0 => KeyedAlgorithm::FixedWindow { limit, window },
        1 => KeyedAlgorithm::SlidingWindow { limit, window },
        2 => {
            // Any quota the parser takes, e.g. a burst near 2^60.
            let text = input.text(32);
            let q = Quota::parse(text).unwrap_or_else(|_| Quota::per_second(1).expect("1/s"));
            KeyedAlgorithm::TokenBucket(q)
        }
        _ => KeyedAlgorithm::TokenBucket(
            Quota::with_period(window)
                .and_then(|q| q.with_burst(limit))
                .expect("a period of 1 ms to 65 s and a burst of 1-8"),
        ),
    }
}

/// `GateOptions::set` over arbitrary names and values, then `Gate::new`
/// with them: a gate or a typed error, never a panic.
pub fn gate_options(data: &[u8]) {
    let mut input = Input::new(data);
    let mut options = GateOptions::default();
    set_some(&mut input, &mut options);
    assert!(options.ipv6_prefix <= 128, "{options:?}");
    let policies = (0..input.below(3))
        .map(|i| (format!("p{i}"), algorithm(&mut input)))
        .collect();
    match Gate::new(policies, options, AnyClock::Manual(ManualClock::new())) {
        Ok(gate) => {
            // Its policy field is a structured-field list.
            crate::fields::parse_list(gate.policy_field());
        }
        Err(e) => assert!(!e.to_string().is_empty(), "{e:?}"),
    }
}
