//! The whole `Gate` over arbitrary requests: options, policies (local and
//! remote), then a sequence of requests at advancing times.

use std::collections::HashMap;

use ratebound::any::{AnyClock, Key};
use ratebound::gate::{
    Gate, GateOptions, KeySource, MissingKey, Outcome, QuotaHeaders, RefusalBody, RemoteAnswer,
    Request,
};
use ratebound::{Decision, ManualClock, Overflow};

use crate::Input;
use crate::client_ip::{address, forwarding, trusted};
use crate::fields::parse_list;
use crate::options::algorithm;

/// Options from the input, set field by field (every combination, not only
/// those `GateOptions::set` spells).
fn options(input: &mut Input<'_>) -> GateOptions {
    let key = match input.byte() % 3 {
        0 => KeySource::ClientIp,
        1 => KeySource::header("x-api-key").expect("a header name"),
        _ => KeySource::Given,
    };
    let trusted = trusted(input);
    let forwarding = input.bool().then(|| forwarding(input));
    let ipv6_prefix = input.byte() % 130;
    let missing = match input.byte() % 3 {
        0 => MissingKey::FallBackToIp,
        1 => MissingKey::SharedAnonymous,
        _ => MissingKey::Reject(400 + input.u16() % 200),
    };
    let headers = input.pick(&[QuotaHeaders::Draft, QuotaHeaders::Legacy, QuotaHeaders::Off]);
    let body = input.pick(&[RefusalBody::Text, RefusalBody::ProblemJson]);
    let max_keys = (
        input.below(16) + 1,
        input.pick(&[Overflow::EvictLeastRecent, Overflow::RejectNewKeys]),
    );
    let concurrency_limit = (input.byte() < 32).then(|| input.below(4) + 1);
    let remote = (0..input.below(3))
        .map(|i| (format!("remote{i}"), algorithm(input)))
        .collect();
    GateOptions {
        key,
        trusted,
        forwarding,
        ipv6_prefix,
        missing,
        headers,
        body,
        max_keys,
        concurrency_limit,
        remote,
        ..GateOptions::default()
    }
}

/// The gate over up to 32 requests. Every verdict's status is one the
/// configuration allows (0, 429, 503 for a full table, the missing-key
/// status), a 429 carries `Retry-After` ≥ 1, a pass carries none, and the
/// quota fields parse as structured fields with `r` ≤ `q`, or, legacy,
/// remaining ≤ limit.
pub fn gate(data: &[u8]) {
    let mut input = Input::new(data);
    let options = options(&mut input);
    let policies: Vec<_> = (0..input.below(4))
        .map(|i| (format!("local{i}"), algorithm(&mut input)))
        .collect();
    let clock = ManualClock::new();
    clock.set_nanos(input.u64() % (1 << 62));
    let Ok(gate) = Gate::new(policies, options.clone(), AnyClock::Manual(clock.clone())) else {
        return;
    };
    // q of every policy, by name.
    let quotas: HashMap<String, i64> = parse_list(gate.policy_field())
        .into_iter()
        .map(|m| {
            let q = m.params.iter().find(|(k, _)| k == "q").map(|p| p.1);
            (m.name, q.expect("a q parameter"))
        })
        .collect();
    let has_policies = gate.policy_names().next().is_some();
    let reject = match options.missing {
        MissingKey::Reject(s) => Some(s),
        _ => None,
    };
    let header_names = [
        "x-api-key",
        "X-API-Key",
        "x-forwarded-for",
        "forwarded",
        "x-real-ip",
    ];
    for _ in 0..input.below(33) {
        if input.is_empty() {
            break;
        }
        clock.advance_nanos(match input.byte() % 4 {
            0 => 0,
            1 => u64::from(input.u16()) * 1_000_000,
            2 => u64::from(input.u32()),
            _ => input.u64() % (1 << 50),
        });
        let peer = input.bool().then(|| address(&mut input));
        let mut lines: Vec<(&str, &[u8])> = Vec::new();
        for _ in 0..input.below(4) {
            let name = input.pick(&header_names);
            lines.push((name, input.bytes(48)));
        }
        let key_bytes = input.bytes(16);
        let key = match input.byte() % 4 {
            0 => None,
            1 => Some(Key::Bytes(key_bytes)),
            2 => Some(Key::Int(i128::from(input.u64() as i64))),
            _ => std::str::from_utf8(key_bytes).ok().map(Key::Text),
        };
        let request = Request {
            key,
            peer,
            headers: &lines[..],
        };
        let identity = gate.identity(&request);
        let remote: Vec<RemoteAnswer> = options
            .remote
            .iter()
            .map(|(name, _)| {
                if options.max_keys.1 == Overflow::RejectNewKeys && input.byte() < 16 {
                    RemoteAnswer::Full
                } else if input.byte() < 8 {
                    // A check that failed beyond its fail policy.
                    RemoteAnswer::Failed
                } else {
                    // A remote store decides with the policy's own limit.
                    let limit = quotas.get(name).map_or(1, |q| *q as u64);
                    let (a, r, t, z) =
                        (input.bool(), input.number(), input.number(), input.number());
                    RemoteAnswer::Decided(Decision::from_parts(a, limit, r, t, z))
                }
            })
            .collect();
        let verdict = if options.remote.is_empty() {
            gate.decide(&request)
        } else {
            gate.decide_with(&request, &remote)
        };
        let status = verdict.status;
        let full_allowed = options.max_keys.1 == Overflow::RejectNewKeys;
        match status {
            // The missing-key status, whichever it is (429 and 503 too: a
            // 503 may also be a full table, below).
            s if Some(s) == reject && verdict.outcome == Outcome::Rejected && identity.is_err() => {
            }
            0 => {
                assert_eq!(verdict.outcome, Outcome::Allowed);
                assert_eq!(verdict.fields.retry_after, None, "a pass with Retry-After");
            }
            429 => {
                assert_eq!(verdict.outcome, Outcome::Refused);
                let secs = verdict
                    .fields
                    .retry_after
                    .expect("a 429 without Retry-After");
                assert!(secs >= 1, "Retry-After {secs}");
                assert!(verdict.refused_by.is_some(), "a 429 names no policy");
                assert!(verdict.body.is_some());
            }
            503 if verdict.outcome == Outcome::StoreError => {
                let retry = Some(options.store_error_retry_after);
                assert_eq!(verdict.fields.retry_after, retry);
                assert!(
                    verdict.refused_by.is_some(),
                    "a store error names no policy"
                );
                assert!(remote.contains(&RemoteAnswer::Failed));
            }
            503 if full_allowed => assert_eq!(verdict.fields.retry_after, Some(1)),
            s => panic!("status {s} from {options:?}: {verdict:?}"),
        }
        if let Err(s) = identity {
            assert_eq!(Some(s), reject);
            // A gate of no policy (a concurrency cap alone) keys nothing
            // and refuses no keyless request.
            if has_policies {
                assert_eq!(status, s, "no key ({s}) but status {status}");
            }
        }
        if let Some(value) = &verdict.fields.ratelimit {
            assert_eq!(options.headers, QuotaHeaders::Draft);
            let text = std::str::from_utf8(value).expect("RateLimit is ASCII");
            for m in parse_list(text) {
                let q = *quotas
                    .get(&m.name)
                    .unwrap_or_else(|| panic!("{text:?}: an unknown policy {:?}", m.name));
                let r = m.params.iter().find(|(k, _)| k == "r").expect("r").1;
                assert!(r <= q, "{text:?}: r = {r} above q = {q}");
            }
        }
        if let Some([limit, remaining, _]) = verdict.fields.legacy {
            assert_eq!(options.headers, QuotaHeaders::Legacy);
            assert!(
                remaining <= limit,
                "X-RateLimit-Remaining {remaining} above the limit {limit}"
            );
        }
    }
}
