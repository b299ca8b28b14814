//! The `RateLimit-Policy` and `RateLimit` fields, read back with an
//! independent structured-field parser (the `sfv` crate, RFC 9651).

use std::time::Duration;

use ratebound::Decision;
use ratebound::http::{Policy, ratelimit, ratelimit_policy, retry_after_secs};
use sfv::{BareItem, ListEntry, Parser};

use crate::Input;

/// The largest integer a structured field holds (15 digits).
pub const SF_MAX: u64 = 999_999_999_999_999;

/// One member of a parsed list: its string and its parameters by name.
#[derive(Debug)]
pub struct Member {
    /// The bare item, a string.
    pub name: String,
    /// The integer parameters, in order.
    pub params: Vec<(String, i64)>,
}

/// Parses `value` as a structured-field list of strings with integer
/// parameters, panicking (a finding) with the value if it is not one.
pub fn parse_list(value: &str) -> Vec<Member> {
    if value.is_empty() {
        return Vec::new();
    }
    let list = Parser::new(value)
        .parse_list()
        .unwrap_or_else(|e| panic!("{value:?} is not a structured-field list: {e}"));
    list.into_iter()
        .map(|entry| {
            let ListEntry::Item(item) = entry else {
                panic!("{value:?}: an inner list");
            };
            let BareItem::String(name) = &item.bare_item else {
                panic!("{value:?}: a member that is not a string");
            };
            let params = item
                .params
                .iter()
                .map(|(k, v)| {
                    let n = v.as_integer().unwrap_or_else(|| {
                        panic!("{value:?}: parameter {} is not an integer", k.as_str())
                    });
                    (k.as_str().to_string(), i64::from(n))
                })
                .collect();
            Member {
                name: name.as_str().to_string(),
                params,
            }
        })
        .collect()
}

fn expect(members: &[Member], i: usize, name: &str, params: [(&str, u64); 2], value: &str) {
    let m = &members[i];
    assert_eq!(m.name, name, "{value:?}: member {i}");
    let want: Vec<(String, i64)> = params
        .iter()
        .map(|(k, v)| (k.to_string(), v.min(&SF_MAX).to_owned() as i64))
        .collect();
    assert_eq!(m.params, want, "{value:?}: member {i}");
}

/// Policies and decisions from the input, their fields written by the
/// core and parsed by `sfv`: one member per policy, its name, and `q`/`w`
/// or `r`/`t` as the values (an integer past 15 digits written as the
/// largest that fits).
pub fn ratelimit_fields(data: &[u8]) {
    let mut input = Input::new(data);
    let mut policies = Vec::new();
    for _ in 0..input.below(5) {
        let name = input.text(24);
        let quota = input.number();
        let window = Duration::new(input.number(), input.u32() % 1_000_000_000);
        match Policy::new(name, quota, window) {
            Ok(p) => policies.push((p, name.to_string(), quota, window)),
            Err(e) => assert!(
                name.is_empty() || name.bytes().any(|b| !(0x20..0x7f).contains(&b)),
                "{name:?} refused: {e}"
            ),
        }
    }
    let field = ratelimit_policy(&policies.iter().map(|p| p.0.clone()).collect::<Vec<_>>());
    let members = parse_list(&field);
    assert_eq!(members.len(), policies.len(), "{field:?}");
    for (i, (_, name, quota, window)) in policies.iter().enumerate() {
        let w = retry_after_secs(*window).max(1);
        expect(&members, i, name, [("q", *quota), ("w", w)], &field);
    }
    let decisions: Vec<Decision> = policies
        .iter()
        .map(|(_, _, quota, _)| {
            Decision::from_parts(
                input.bool(),
                *quota,
                input.number(),
                input.number(),
                input.number(),
            )
        })
        .collect();
    let field = ratelimit(policies.iter().map(|p| &p.0).zip(decisions.iter().copied()));
    let members = parse_list(&field);
    assert_eq!(members.len(), policies.len(), "{field:?}");
    for (i, ((_, name, _, _), d)) in policies.iter().zip(&decisions).enumerate() {
        let t = retry_after_secs(d.reset_after());
        expect(&members, i, name, [("r", d.remaining()), ("t", t)], &field);
    }
}
