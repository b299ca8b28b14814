//! The other loose-option parsers the Python and Node bindings share:
//! `AnyLimiter::from_options` (a limiter chosen by name) and the Redis
//! limiter's `Config::from_options` with `Engine::new`.

use ratebound::any::{AnyClock, AnyLimiter, LimiterOptions, Rate};
use ratebound::gate::Loose;
use ratebound::{Limiter, ManualClock};
use ratebound_redis::{Algorithm, Config, Engine};

use crate::Input;

const ALGORITHMS: &[&str] = &[
    "token_bucket",
    "fixed_window",
    "sliding_window",
    "sliding_log",
    "leaky_bucket",
    "all_of",
    "gcra",
    "",
];

const REDIS_OPTIONS: &[&str] = &[
    "prefix",
    "on_error",
    "onError",
    "local_rate",
    "localRate",
    "timeout",
    "lease",
    "lease_ttl",
    "leaseTtl",
    "breaker_threshold",
    "breaker_cooldown",
    "batch",
    "nope",
];

const TEXTS: &[&str] = &["open", "closed", "local", "rb:", "10/s", "2/s burst 3", ""];

/// A double as a binding passes one: small, fractional, huge, negative,
/// NaN, infinite.
fn float(input: &mut Input<'_>) -> f64 {
    match input.byte() % 7 {
        0 => f64::from(input.byte()),
        1 => f64::from(input.u16()),
        2 => f64::from(input.byte()) / 16.0,
        3 => f64::from_bits(input.u64()),
        4 => -f64::from(input.byte()),
        5 => input.pick(&[f64::NAN, f64::INFINITY, 2f64.powi(53), 2f64.powi(60), 1e-9]),
        _ => f64::from(input.u32()),
    }
}

fn maybe(input: &mut Input<'_>) -> Option<f64> {
    input.bool().then(|| float(input))
}

/// A limiter by name from arbitrary options, checked a few times; then a
/// Redis engine from arbitrary options. Each is made or refused with a
/// typed error; a limiter's decisions keep remaining ≤ limit.
pub fn loose_options(data: &[u8]) {
    let mut input = Input::new(data);
    let name = input.pick(ALGORITHMS);
    let rate = match input.byte() % 3 {
        0 => None,
        1 => Some(Rate::PerSecond(float(&mut input))),
        _ => Some(Rate::Text(input.text(32))),
    };
    let options = LimiterOptions {
        rate,
        burst: maybe(&mut input),
        limit: maybe(&mut input),
        window: maybe(&mut input),
        max_delay: maybe(&mut input),
        members: Vec::new(),
    };
    let clock = ManualClock::new();
    match AnyLimiter::from_options(name, options, AnyClock::Manual(clock.clone())) {
        Ok(l) => {
            for _ in 0..input.below(8) {
                let n = input.number();
                let now = input.u64() % (1 << 62);
                match l.check_n_at(n, now) {
                    Ok(d) => assert!(d.remaining() <= d.limit(), "{name}: {d:?}"),
                    Err(e) => assert!(!e.to_string().is_empty()),
                }
                let _ = l.available_at(now);
            }
        }
        Err(e) => assert!(!e.to_string().is_empty() && !e.code().is_empty(), "{e:?}"),
    }
    let algorithm = Algorithm::TokenBucket(ratebound::Quota::per_second(10).expect("10/s"));
    let mut pairs = Vec::new();
    for _ in 0..input.below(6) {
        let key = input.pick(REDIS_OPTIONS);
        let value = match input.byte() % 4 {
            0 => Loose::Text(input.pick(TEXTS)),
            1 => Loose::Text(input.text(16)),
            2 => Loose::Bool(input.bool()),
            _ => Loose::Number(float(&mut input)),
        };
        pairs.push((key, value));
    }
    match Config::from_options(algorithm, &pairs) {
        Ok(config) => {
            if let Err(e) = Engine::new(config) {
                assert!(!e.to_string().is_empty(), "{e:?}");
            }
        }
        Err(e) => assert!(!e.to_string().is_empty() && !e.code().is_empty(), "{e:?}"),
    }
}
