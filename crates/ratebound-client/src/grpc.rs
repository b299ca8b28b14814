//! gRPC answers (feature `tower`): a trailers-only response — HTTP 200,
//! no body, `grpc-status` in the headers, as a server or proxy refusing a
//! call sends it — counts as the HTTP status it stands for, and the
//! `google.rpc.RetryInfo` in its `grpc-status-details-bin` is the pause
//! the partner asks for.
//!
//! The few protobuf fields are read here by hand (no protobuf or base64
//! dependency), as `ratebound-http` writes them; the tests build them with
//! tonic-types.

use std::time::Duration;

use http::HeaderMap;
use http::header::HeaderName;

static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
static GRPC_DETAILS: HeaderName = HeaderName::from_static("grpc-status-details-bin");

/// `RESOURCE_EXHAUSTED`: counts as a 429.
const RESOURCE_EXHAUSTED: u32 = 8;
/// `UNAVAILABLE`: counts as a 503.
const UNAVAILABLE: u32 = 14;

/// The longest `grpc-status-details-bin` read (longer ones are ignored).
const MAX_DETAILS: usize = 16 * 1024;

/// The `Any.type_url` of a `google.rpc.RetryInfo`.
const RETRY_INFO: &[u8] = b"type.googleapis.com/google.rpc.RetryInfo";

/// The status an answer counts as, and the pause its `RetryInfo` asks for:
/// a trailers-only gRPC answer with `RESOURCE_EXHAUSTED` is a 429 and one
/// with `UNAVAILABLE` a 503; any other answer is its own status, no pause.
pub(crate) fn status_of(status: u16, headers: &HeaderMap) -> (u16, Option<Duration>) {
    if status != 200 {
        return (status, None);
    }
    let code = headers
        .get(&GRPC_STATUS)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u32>().ok());
    let counts_as = match code {
        Some(RESOURCE_EXHAUSTED) => 429,
        Some(UNAVAILABLE) => 503,
        _ => return (status, None),
    };
    let delay = headers
        .get(&GRPC_DETAILS)
        .and_then(|v| retry_delay(v.as_bytes()));
    (counts_as, delay)
}

/// The `retry_delay` of the first `google.rpc.RetryInfo` among the details
/// of a base64 `google.rpc.Status`; `None` for anything malformed, a
/// negative delay or none.
pub(crate) fn retry_delay(base64: &[u8]) -> Option<Duration> {
    if base64.len() > MAX_DETAILS {
        return None;
    }
    // gRPC's binary header encoding, padded or not.
    let status = ratebound::http::base64::decode(base64)?;
    // google.rpc.Status { code = 1, message = 2, repeated Any details = 3 }
    let any = Fields(&status).find_map(|(field, value)| match (field, value) {
        (3, Value::Bytes(any)) if type_url(any) == Some(RETRY_INFO) => Some(any),
        _ => None,
    })?;
    // google.protobuf.Any { type_url = 1, value = 2 }
    let info = Fields(any).find_map(|f| match f {
        (2, Value::Bytes(v)) => Some(v),
        _ => None,
    })?;
    // google.rpc.RetryInfo { Duration retry_delay = 1 }
    let duration = Fields(info).find_map(|f| match f {
        (1, Value::Bytes(v)) => Some(v),
        _ => None,
    })?;
    // google.protobuf.Duration { int64 seconds = 1, int32 nanos = 2 }
    let (mut seconds, mut nanos) = (0i64, 0i64);
    for (field, value) in Fields(duration) {
        match (field, value) {
            (1, Value::Varint(v)) => seconds = v as i64,
            (2, Value::Varint(v)) => nanos = i64::from(v as i32),
            _ => {}
        }
    }
    if seconds < 0 || !(0..1_000_000_000).contains(&nanos) {
        return None;
    }
    Some(Duration::new(seconds as u64, nanos as u32))
}

fn type_url(any: &[u8]) -> Option<&[u8]> {
    Fields(any).find_map(|f| match f {
        (1, Value::Bytes(url)) => Some(url),
        _ => None,
    })
}

/// A protobuf field's value, by wire type.
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// A fixed 32- or 64-bit value (not read here).
    Fixed,
}

/// The fields of a protobuf message, in order; it ends early at anything
/// malformed (a truncated value, a group, an unknown wire type).
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = (u64, Value<'a>);

    fn next(&mut self) -> Option<(u64, Value<'a>)> {
        let item = self.read();
        if item.is_none() {
            self.0 = &[];
        }
        item
    }
}

impl<'a> Fields<'a> {
    fn read(&mut self) -> Option<(u64, Value<'a>)> {
        let tag = self.varint()?;
        let value = match tag & 7 {
            0 => Value::Varint(self.varint()?),
            1 => {
                self.skip(8)?;
                Value::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?).ok()?;
                Value::Bytes(self.skip(len)?)
            }
            5 => {
                self.skip(4)?;
                Value::Fixed
            }
            _ => return None,
        };
        Some((tag >> 3, value))
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for (i, &b) in self.0.iter().enumerate().take(10) {
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                self.0 = &self.0[i + 1..];
                return Some(v);
            }
        }
        None
    }

    fn skip(&mut self, len: usize) -> Option<&'a [u8]> {
        if self.0.len() < len {
            return None;
        }
        let (head, rest) = self.0.split_at(len);
        self.0 = rest;
        Some(head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_or_negative_details_ask_for_no_pause() {
        // A truncated Status, a Status without details, a RetryInfo of
        // another type URL, a negative delay.
        assert_eq!(retry_delay(b"CAgSA"), None);
        assert_eq!(retry_delay(b"CAg"), None);
        let encode = |type_url: &[u8], seconds: i64| {
            let mut duration = vec![0x08];
            let mut v = seconds as u64;
            while v >= 0x80 {
                duration.push((v as u8) | 0x80);
                v >>= 7;
            }
            duration.push(v as u8);
            let info = [&[0x0a, duration.len() as u8][..], &duration].concat();
            let any = [
                &[0x0a, type_url.len() as u8][..],
                type_url,
                &[0x12, info.len() as u8],
                &info,
            ]
            .concat();
            let status = [&[0x08, 0x08, 0x1a, any.len() as u8][..], &any].concat();
            ratebound::http::base64::encode(&status)
        };
        assert_eq!(
            retry_delay(encode(RETRY_INFO, 3).as_bytes()),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            retry_delay(encode(b"type.googleapis.com/google.rpc.Help", 3).as_bytes()),
            None
        );
        assert_eq!(retry_delay(encode(RETRY_INFO, -3).as_bytes()), None);
        assert_eq!(retry_delay(&vec![b'A'; MAX_DETAILS + 4]), None);
    }

    #[test]
    fn only_trailers_only_refusals_count_as_429_or_503() {
        let mut headers = HeaderMap::new();
        assert_eq!(status_of(200, &headers), (200, None));
        headers.insert(&GRPC_STATUS, "8".parse().unwrap());
        assert_eq!(status_of(200, &headers), (429, None));
        assert_eq!(status_of(502, &headers), (502, None));
        headers.insert(&GRPC_STATUS, "14".parse().unwrap());
        assert_eq!(status_of(200, &headers), (503, None));
        headers.insert(&GRPC_STATUS, "13".parse().unwrap());
        assert_eq!(status_of(200, &headers), (200, None));
        headers.insert(&GRPC_STATUS, "0".parse().unwrap());
        assert_eq!(status_of(200, &headers), (200, None));
    }
}
