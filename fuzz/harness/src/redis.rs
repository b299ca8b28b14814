//! The Redis engine's reading of script replies (`Engine::finish`,
//! `finish_reserve`, `finish_pause`, and `CallOutcome::of_numbers`, the
//! Node bindings' doubles) over arbitrary replies: a reply of the scripts'
//! shape decides as it says; anything else is a failure the fail policy
//! answers — never a panic, never "allowed" under `closed`.

use std::time::Duration;

use ratebound::any::AnyClock;
use ratebound::{KeyedAlgorithm, ManualClock};
use ratebound_redis::{
    Begin, Call, CallOutcome, Config, Engine, HINTED, OnError, REPLY_LEN, ReserveBegin, Reserved,
    Source,
};

use crate::Input;
use crate::options::algorithm;

/// A reply from the input: mostly [`REPLY_LEN`] integers (the scripts'
/// shape, the learned word's two parts last), sometimes another length or
/// negative numbers.
fn reply(input: &mut Input<'_>) -> Vec<i64> {
    let len = match input.byte() % 8 {
        0 => input.below(12),
        _ => REPLY_LEN,
    };
    let mut r: Vec<i64> = (0..len)
        .map(|_| match input.byte() % 5 {
            0 => i64::from(input.byte() % 2),
            1 => i64::from(input.u16()),
            2 => input.u64() as i64,
            3 => i64::MAX - i64::from(input.byte()),
            _ => i64::from(input.u32()),
        })
        .collect();
    // Sometimes the word "as hinted" (a hinted call's, else malformed).
    if len == REPLY_LEN && input.byte().is_multiple_of(4) {
        (r[7], r[8]) = (HINTED, 0);
    }
    r
}

/// The scripts' shape: [`REPLY_LEN`] integers, none negative, the learned
/// word's parts within their bits (18 and 44) — or, to a hinted call
/// (`Call::hint`), [`HINTED`] and 0.
fn well_formed(r: &[i64], hinted: bool) -> bool {
    r.len() == REPLY_LEN
        && r.iter().all(|v| *v >= 0)
        && ((r[7] < 1 << 18 && r[8] < 1 << 44) || (hinted && r[7] == HINTED && r[8] == 0))
}

fn is_failure(source: Source) -> bool {
    matches!(
        source,
        Source::FailOpen | Source::FailClosed | Source::Local
    )
}

/// An engine from the input, then up to 16 calls, each finished with an
/// outcome from the input.
pub fn redis_reply(data: &[u8]) {
    let mut input = Input::new(data);
    let alg = algorithm(&mut input);
    let mut config = Config::new(alg);
    config.on_error = match input.byte() % 3 {
        0 => OnError::Open,
        1 => OnError::Closed,
        _ => OnError::Local(f64::from(input.byte() % 16) + 0.5),
    };
    config.lease = input.number() % 64;
    config.breaker_threshold = u32::from(input.byte() % 4) + 1;
    let clock = ManualClock::new();
    let Ok(engine) = Engine::with_clock(config.clone(), AnyClock::Manual(clock.clone())) else {
        return;
    };
    let capacity = alg.capacity();
    let bucket = matches!(alg, KeyedAlgorithm::TokenBucket(_));
    let mut doubles = Vec::new();
    for _ in 0..input.below(17) {
        if input.is_empty() {
            break;
        }
        clock.advance_nanos(u64::from(input.u32()));
        let key = input.bytes(8);
        let n = input.number() % (capacity.saturating_add(2));
        let r = reply(&mut input);
        let as_double = input.byte() < 32;
        let values: Vec<f64> = r.iter().map(|v| *v as f64).collect();
        let outcome = match input.byte() % 8 {
            0 => CallOutcome::Malformed,
            1 => CallOutcome::Timeout,
            2 => CallOutcome::Failed("connection refused"),
            _ if as_double => CallOutcome::of_numbers(&values, &mut doubles),
            _ => CallOutcome::Reply(&r),
        };
        // The reply as the call it answers reads it (None: a failure).
        let replied = |call: Option<&Call>| match outcome {
            CallOutcome::Reply(ints) => {
                well_formed(ints, call.and_then(Call::hint).is_some()).then(|| ints.to_vec())
            }
            _ => None,
        };
        match input.byte() % 4 {
            0 if bucket => {
                let max_wait = Duration::from_micros(input.number());
                match engine.begin_reserve(None, key, n, max_wait) {
                    Ok(ReserveBegin::Call(call)) => {
                        let replied = replied(Some(&call));
                        let got = engine.finish_reserve(&call, outcome);
                        if let Some(r) = &replied {
                            let granted = matches!(got, Reserved::Granted { .. });
                            assert_eq!(granted, r[0] == 1, "{r:?} gave {got:?}");
                        }
                        if replied.is_none() && matches!(config.on_error, OnError::Closed) {
                            assert!(
                                !matches!(got, Reserved::Granted { .. }),
                                "closed, a failed call granted: {got:?}"
                            );
                        }
                    }
                    Ok(ReserveBegin::Done(_)) => {}
                    // A reservation is for at least 1 token.
                    Err(e) => assert!(n == 0 || n > capacity, "{n} of {capacity}: {e}"),
                }
            }
            1 if bucket => {
                if let Ok(call) =
                    engine.begin_pause(None, key, Duration::from_millis(u64::from(input.u16()) + 1))
                {
                    // A pause is never hinted.
                    assert_eq!(call.hint(), None);
                    let replied = replied(None);
                    let got = engine.finish_pause(outcome);
                    assert_eq!(got.is_some(), replied.is_some(), "{got:?} for {replied:?}");
                    let _ = call;
                }
            }
            _ => match engine.begin(key, n) {
                Ok(Begin::Call(call)) => {
                    let replied = replied(Some(&call));
                    let d = engine.finish(&call, outcome);
                    assert!(d.remaining() <= d.limit(), "{d:?}");
                    // The local share's bucket has its own burst (which the
                    // engine takes as given, even above the global one).
                    if d.source() != Source::Local {
                        assert_eq!(d.limit(), capacity, "{d:?}");
                    }
                    match &replied {
                        Some(r) => {
                            assert_eq!(d.is_allowed(), r[0] == 1, "{r:?} gave {d:?}");
                            assert!(!is_failure(d.source()), "{r:?} gave {d:?}");
                            // "As hinted": the word the call hinted.
                            if r[7] == HINTED {
                                assert_eq!(Some(engine.learned(None, key)), call.hint());
                            }
                        }
                        // The client's own overload (a call timed out
                        // while Redis answered others) is busy, never the
                        // fail policy: refused, whatever the policy.
                        None if d.source() == Source::Busy => {
                            assert!(!d.is_allowed(), "busy admitted {d:?}");
                        }
                        None => {
                            assert!(is_failure(d.source()), "{outcome:?} gave {d:?}");
                            match config.on_error {
                                OnError::Open => assert!(d.is_allowed()),
                                OnError::Closed => {
                                    assert!(!d.is_allowed(), "closed admitted {d:?}")
                                }
                                _ => {}
                            }
                        }
                    }
                }
                Ok(Begin::Done(d)) => {
                    assert!(d.remaining() <= d.limit(), "{d:?}");
                    if matches!(config.on_error, OnError::Closed) && d.source() != Source::Lease {
                        assert!(!d.is_allowed(), "closed admitted {d:?}");
                    }
                }
                Err(e) => assert!(n > capacity, "{n} of {capacity}: {e}"),
            },
        }
    }
}
