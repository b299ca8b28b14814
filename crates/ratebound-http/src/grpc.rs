//! Refusals for gRPC requests: a gRPC client does not read an HTTP 429, so a
//! request whose content type is `application/grpc…` is answered the gRPC
//! way — HTTP 200 with no body ("trailers-only"), `grpc-status` and
//! `grpc-message` in the headers, and a `google.rpc.Status` in
//! `grpc-status-details-bin` carrying a `google.rpc.RetryInfo` with the wait
//! (whole seconds, rounded up: the same number as `Retry-After`).
//!
//! The few protobuf fields are written here by hand (no protobuf or base64
//! dependency: the base64 is the core's [`ratebound::http::base64`]); the
//! tests decode them with tonic-types.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};
use http::request::Parts;
use http::{Response, StatusCode};
use ratebound::gate::Verdict;

static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
static GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
static GRPC_DETAILS: HeaderName = HeaderName::from_static("grpc-status-details-bin");

/// gRPC status codes the layer answers with.
mod code {
    pub const UNKNOWN: u32 = 2;
    pub const INVALID_ARGUMENT: u32 = 3;
    pub const PERMISSION_DENIED: u32 = 7;
    pub const RESOURCE_EXHAUSTED: u32 = 8;
    pub const INTERNAL: u32 = 13;
    pub const UNAVAILABLE: u32 = 14;
    pub const UNAUTHENTICATED: u32 = 16;
}

/// Whether the request is a gRPC call (`application/grpc`, `+proto`,
/// `-web`, ...).
pub(crate) fn is_grpc(request: &Parts) -> bool {
    request
        .headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// The gRPC code for the HTTP status the gate chose: 429 is
/// `RESOURCE_EXHAUSTED` (a policy refused, or the key table is full), 503
/// `UNAVAILABLE` (shed: retryable elsewhere), and a rejected key's status
/// its nearest code.
pub(crate) fn code_for(status: u16) -> u32 {
    match status {
        429 => code::RESOURCE_EXHAUSTED,
        503 => code::UNAVAILABLE,
        400 => code::INVALID_ARGUMENT,
        401 => code::UNAUTHENTICATED,
        403 => code::PERMISSION_DENIED,
        500 => code::INTERNAL,
        _ => code::UNKNOWN,
    }
}

/// The trailers-only response for a refusing verdict (the caller adds the
/// quota fields, which reach the client as metadata).
pub(crate) fn refusal(verdict: &Verdict<'_>) -> Response<Bytes> {
    let code = code_for(verdict.status);
    let message = match &verdict.body {
        Some((ctype, text)) if ctype.starts_with("text/plain") => text.trim(),
        _ => StatusCode::from_u16(verdict.status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("refused"),
    };
    let mut response = Response::new(Bytes::new());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS.clone(), HeaderValue::from(code));
    if let Ok(v) = HeaderValue::from_str(&percent_encode(message)) {
        headers.insert(GRPC_MESSAGE.clone(), v);
    }
    let details = status_proto(code, message, verdict.fields.retry_after);
    if let Ok(v) = HeaderValue::from_str(&ratebound::http::base64::encode(&details)) {
        headers.insert(GRPC_DETAILS.clone(), v);
    }
    if let Some(secs) = verdict.fields.retry_after {
        headers.insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// `grpc-message` encoding: printable ASCII except `%` as is, every other
/// byte as `%XX`.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Protobuf wire format: a varint.
fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A length-delimited field (wire type 2).
fn bytes_field(out: &mut Vec<u8>, field: u64, data: &[u8]) {
    varint(out, field << 3 | 2);
    varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

/// `google.rpc.Status { code = 1, message = 2, details = 3 }`, with a
/// `google.rpc.RetryInfo { retry_delay: google.protobuf.Duration { seconds = 1 } }`
/// detail when there is a wait.
fn status_proto(code: u32, message: &str, retry_after: Option<u64>) -> Vec<u8> {
    let mut status = Vec::with_capacity(96);
    varint(&mut status, 1 << 3);
    varint(&mut status, u64::from(code));
    bytes_field(&mut status, 2, message.as_bytes());
    if let Some(secs) = retry_after {
        let mut duration = Vec::new();
        if secs > 0 {
            varint(&mut duration, 1 << 3);
            varint(&mut duration, secs);
        }
        let mut retry_info = Vec::new();
        bytes_field(&mut retry_info, 1, &duration);
        let mut any = Vec::new();
        bytes_field(&mut any, 1, b"type.googleapis.com/google.rpc.RetryInfo");
        bytes_field(&mut any, 2, &retry_info);
        bytes_field(&mut status, 3, &any);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_percent_encoded_as_grpc_asks() {
        assert_eq!(percent_encode("retry in 2 s"), "retry in 2 s");
        assert_eq!(percent_encode("100% busy\n"), "100%25 busy%0A");
        assert_eq!(percent_encode("é"), "%C3%A9");
    }

    #[test]
    fn varints_use_seven_bits_a_byte() {
        for (v, bytes) in [
            (0u64, &[0u8][..]),
            (1, &[1]),
            (127, &[0x7f]),
            (128, &[0x80, 0x01]),
            (300, &[0xac, 0x02]),
        ] {
            let mut out = Vec::new();
            varint(&mut out, v);
            assert_eq!(out, bytes, "{v}");
        }
    }

    #[test]
    fn statuses_map_to_the_nearest_grpc_code() {
        assert_eq!(code_for(429), code::RESOURCE_EXHAUSTED);
        assert_eq!(code_for(503), code::UNAVAILABLE);
        assert_eq!(code_for(400), code::INVALID_ARGUMENT);
        assert_eq!(code_for(401), code::UNAUTHENTICATED);
        assert_eq!(code_for(403), code::PERMISSION_DENIED);
        assert_eq!(code_for(500), code::INTERNAL);
        assert_eq!(code_for(418), code::UNKNOWN);
    }
}
