//! The protobuf JSON mapping of RLS v3's request and answer, as the
//! reference server's `POST /json` reads and writes them.
//!
//! Read: each field under its proto name or its lowerCamelCase JSON name
//! (not both), `null` for a field's default, integers as JSON numbers or
//! decimal strings, unknown fields refused. Written: lowerCamelCase names,
//! enums by name, durations as `"1.500s"`, fields at their zero value left
//! out.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code as PbCode, rate_limit::Unit as PbUnit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::{Duration as PbDuration, UInt64Value};
use serde_json::{Map, Value};

type Fields = Map<String, Value>;

/// Takes the field named `proto` or `camel` out of `object` (`None`: absent
/// or `null`); both present is an error.
fn take(object: &mut Fields, proto: &str, camel: &str, at: &str) -> Result<Option<Value>, String> {
    let a = object.remove(proto);
    let b = if camel == proto {
        None
    } else {
        object.remove(camel)
    };
    match (a, b) {
        (Some(_), Some(_)) => Err(format!("{at}: both {proto} and {camel} given")),
        (Some(v), None) | (None, Some(v)) => Ok((!v.is_null()).then_some(v)),
        (None, None) => Ok(None),
    }
}

fn object(value: Value, at: &str) -> Result<Fields, String> {
    match value {
        Value::Object(o) => Ok(o),
        other => Err(format!("{at}: expected an object, found {}", shown(&other))),
    }
}

fn no_more(object: &Fields, at: &str) -> Result<(), String> {
    match object.keys().next() {
        Some(unknown) => Err(format!("{at}: unknown field {unknown:?}")),
        None => Ok(()),
    }
}

fn shown(value: &Value) -> String {
    let mut text = value.to_string();
    if text.len() > 40 {
        let mut end = 40;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    text
}

fn string(value: Option<Value>, at: &str) -> Result<String, String> {
    match value {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(format!("{at}: expected a string, found {}", shown(&other))),
    }
}

fn boolean(value: Option<Value>, at: &str) -> Result<bool, String> {
    match value {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(b),
        Some(other) => Err(format!(
            "{at}: expected true or false, found {}",
            shown(&other)
        )),
    }
}

fn unsigned(value: &Value, max: u64, at: &str) -> Result<u64, String> {
    let n = match value {
        Value::Number(n) => n.as_u64().or_else(|| {
            // 1.0 and 1e2 are integers too in the JSON mapping.
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u64::MAX as f64)
                .map(|f| f as u64)
        }),
        Value::String(s) => s.parse::<u64>().ok(),
        _ => None,
    };
    match n {
        Some(n) if n <= max => Ok(n),
        _ => Err(format!(
            "{at}: expected a whole number from 0 to {max}, found {}",
            shown(value)
        )),
    }
}

fn list(value: Option<Value>, at: &str) -> Result<Vec<Value>, String> {
    match value {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(format!("{at}: expected a list, found {}", shown(&other))),
    }
}

fn entry(value: Value, at: &str) -> Result<Entry, String> {
    let mut o = object(value, at)?;
    let key = string(take(&mut o, "key", "key", at)?, &format!("{at}.key"))?;
    let value = string(take(&mut o, "value", "value", at)?, &format!("{at}.value"))?;
    no_more(&o, at)?;
    Ok(Entry { key, value })
}

fn descriptor(value: Value, at: &str) -> Result<RateLimitDescriptor, String> {
    let mut o = object(value, at)?;
    let entries = list(
        take(&mut o, "entries", "entries", at)?,
        &format!("{at}.entries"),
    )?
    .into_iter()
    .enumerate()
    .map(|(i, e)| entry(e, &format!("{at}.entries[{i}]")))
    .collect::<Result<Vec<_>, _>>()?;
    let hits_addend = take(&mut o, "hits_addend", "hitsAddend", at)?
        .map(|v| unsigned(&v, u64::MAX, &format!("{at}.hits_addend")))
        .transpose()?
        .map(|value| UInt64Value { value });
    let is_negative_hits = boolean(
        take(&mut o, "is_negative_hits", "isNegativeHits", at)?,
        &format!("{at}.is_negative_hits"),
    )?;
    let limit = take(&mut o, "limit", "limit", at)?
        .map(|v| limit(v, &format!("{at}.limit")))
        .transpose()?;
    no_more(&o, at)?;
    Ok(RateLimitDescriptor {
        entries,
        limit,
        hits_addend,
        is_negative_hits,
    })
}

fn limit(value: Value, at: &str) -> Result<RateLimitOverride, String> {
    let mut o = object(value, at)?;
    let requests_per_unit = take(&mut o, "requests_per_unit", "requestsPerUnit", at)?
        .map(|v| unsigned(&v, u64::from(u32::MAX), &format!("{at}.requests_per_unit")))
        .transpose()?
        .unwrap_or(0) as u32;
    // envoy.type.v3.RateLimitUnit: the names of the response's units.
    let unit = match take(&mut o, "unit", "unit", at)? {
        None => 0,
        Some(Value::String(name)) => PbUnit::from_str_name(&name)
            .map(|u| u as i32)
            .ok_or_else(|| format!("{at}.unit: unknown unit {name:?}"))?,
        Some(v) => unsigned(&v, 7, &format!("{at}.unit"))? as i32,
    };
    no_more(&o, at)?;
    Ok(RateLimitOverride {
        requests_per_unit,
        unit,
    })
}

/// Reads a `RateLimitRequest` from its JSON mapping.
///
/// # Errors
/// What is wrong, naming the field (`descriptors[0].entries[1].value`) and
/// the value found.
pub fn request_from_json(body: &[u8]) -> Result<RateLimitRequest, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let mut o = object(value, "request")?;
    let domain = string(take(&mut o, "domain", "domain", "request")?, "domain")?;
    let descriptors = list(
        take(&mut o, "descriptors", "descriptors", "request")?,
        "descriptors",
    )?
    .into_iter()
    .enumerate()
    .map(|(i, d)| descriptor(d, &format!("descriptors[{i}]")))
    .collect::<Result<Vec<_>, _>>()?;
    let hits_addend = take(&mut o, "hits_addend", "hitsAddend", "request")?
        .map(|v| unsigned(&v, u64::from(u32::MAX), "hits_addend"))
        .transpose()?
        .unwrap_or(0) as u32;
    no_more(&o, "request")?;
    Ok(RateLimitRequest {
        domain,
        descriptors,
        hits_addend,
    })
}

fn code_name(code: i32) -> Option<&'static str> {
    match PbCode::try_from(code) {
        Ok(PbCode::Unknown) => None,
        Ok(code) => Some(code.as_str_name()),
        Err(_) => None,
    }
}

/// A duration as the JSON mapping writes it: `"3s"`, `"0.250s"`.
pub fn duration_json(d: &PbDuration) -> String {
    let (seconds, nanos) = (d.seconds, d.nanos);
    if nanos == 0 {
        format!("{seconds}s")
    } else if nanos % 1_000_000 == 0 {
        format!("{seconds}.{:03}s", nanos / 1_000_000)
    } else if nanos % 1_000 == 0 {
        format!("{seconds}.{:06}s", nanos / 1_000)
    } else {
        format!("{seconds}.{nanos:09}s")
    }
}

/// Writes a `RateLimitResponse` in its JSON mapping (the reference server's
/// `/json` answer).
pub fn response_to_json(response: &RateLimitResponse) -> String {
    let mut out = Fields::new();
    if let Some(code) = code_name(response.overall_code) {
        out.insert("overallCode".into(), code.into());
    }
    let statuses: Vec<Value> = response
        .statuses
        .iter()
        .map(|s| {
            let mut o = Fields::new();
            if let Some(code) = code_name(s.code) {
                o.insert("code".into(), code.into());
            }
            if let Some(limit) = &s.current_limit {
                let mut l = Fields::new();
                if !limit.name.is_empty() {
                    l.insert("name".into(), limit.name.clone().into());
                }
                if limit.requests_per_unit != 0 {
                    l.insert("requestsPerUnit".into(), limit.requests_per_unit.into());
                }
                if let Ok(unit) = PbUnit::try_from(limit.unit)
                    && unit != PbUnit::Unknown
                {
                    l.insert("unit".into(), unit.as_str_name().into());
                }
                o.insert("currentLimit".into(), Value::Object(l));
            }
            if s.limit_remaining != 0 {
                o.insert("limitRemaining".into(), s.limit_remaining.into());
            }
            if let Some(d) = &s.duration_until_reset {
                o.insert("durationUntilReset".into(), duration_json(d).into());
            }
            Value::Object(o)
        })
        .collect();
    if !statuses.is_empty() {
        out.insert("statuses".into(), Value::Array(statuses));
    }
    let headers: Vec<Value> = response
        .response_headers_to_add
        .iter()
        .map(|h| {
            let mut o = Fields::new();
            if !h.key.is_empty() {
                o.insert("key".into(), h.key.clone().into());
            }
            if !h.value.is_empty() {
                o.insert("value".into(), h.value.clone().into());
            }
            Value::Object(o)
        })
        .collect();
    if !headers.is_empty() {
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    Value::Object(out).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_spellings_are_read_but_not_together() {
        let r = request_from_json(
            br#"{"domain":"d","hitsAddend":"3","descriptors":[{"entries":[{"key":"k","value":"v"}],"hits_addend":7}]}"#,
        )
        .unwrap();
        assert_eq!(r.hits_addend, 3);
        assert_eq!(r.descriptors[0].hits_addend, Some(UInt64Value { value: 7 }));
        let e = request_from_json(br#"{"domain":"d","hits_addend":1,"hitsAddend":1}"#).unwrap_err();
        assert!(e.contains("both hits_addend and hitsAddend"), "{e}");
    }

    #[test]
    fn errors_name_the_field_and_value() {
        let e = request_from_json(
            br#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":5}]}]}"#,
        )
        .unwrap_err();
        assert_eq!(
            e,
            "descriptors[0].entries[0].value: expected a string, found 5"
        );
        let e = request_from_json(br#"{"domain":"d","colour":1}"#).unwrap_err();
        assert!(e.contains("unknown field \"colour\""), "{e}");
        let e = request_from_json(br#"{"hits_addend":4294967296}"#).unwrap_err();
        assert!(e.contains("4294967296"), "{e}");
    }

    #[test]
    fn durations_are_written_with_3_6_or_9_digits() {
        let d = |seconds, nanos| duration_json(&PbDuration { seconds, nanos });
        assert_eq!(d(3, 0), "3s");
        assert_eq!(d(0, 250_000_000), "0.250s");
        assert_eq!(d(1, 1_000), "1.000001s");
        assert_eq!(d(1, 1), "1.000000001s");
    }
}
