//! RLS v3 over gRPC: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`
//! converted to and from [`api`], decided by the [`Engine`].
//!
//! The request's strings are moved into the [`api::Request`], not copied;
//! the answer's are moved into the protobuf. Bounds ([`Bounds`]) are applied
//! before the engine sees anything: the decoded message size (by tonic,
//! from the length prefix, before the body is buffered), the number of
//! descriptors and entries, and each string's length.

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    self, DescriptorStatus, RateLimit, rate_limit::Unit as PbUnit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use tonic::Status;

use crate::api::{self, Code};
use crate::engine::{Engine, RequestError};
use crate::metrics::{Metrics, Transport};
use crate::model::Unit;

/// How large a request the wire takes, checked before the engine sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// The largest gRPC message decoded, in bytes (tonic refuses a larger
    /// one from its length prefix with `OUT_OF_RANGE`, before buffering
    /// it); also the largest `POST /json` body. Default 1 MiB.
    pub max_message_bytes: usize,
    /// The most descriptors in one request. Default the engine's
    /// [`MAX_DESCRIPTORS`](crate::engine::MAX_DESCRIPTORS).
    pub max_descriptors: usize,
    /// The most entries in one descriptor. Default the engine's
    /// [`MAX_ENTRIES`](crate::engine::MAX_ENTRIES).
    pub max_entries: usize,
    /// The longest domain, key or value, in bytes. Default the engine's
    /// [`MAX_TEXT`](crate::engine::MAX_TEXT).
    pub max_text_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            max_message_bytes: 1 << 20,
            max_descriptors: crate::engine::MAX_DESCRIPTORS,
            max_entries: crate::engine::MAX_ENTRIES,
            max_text_bytes: crate::engine::MAX_TEXT,
        }
    }
}

impl Bounds {
    /// `Err(TooLarge)` when `size` is over `max`.
    fn within(what: &'static str, size: usize, max: usize) -> Result<(), RequestError> {
        if size > max {
            Err(RequestError::TooLarge {
                what,
                size: size as u64,
                max: max as u64,
            })
        } else {
            Ok(())
        }
    }

    /// Checks a count of descriptors.
    pub fn descriptors(&self, n: usize) -> Result<(), RequestError> {
        Bounds::within("descriptors", n, self.max_descriptors)
    }

    /// Checks a descriptor's count of entries.
    pub fn entries(&self, n: usize) -> Result<(), RequestError> {
        Bounds::within("entries", n, self.max_entries)
    }

    /// Checks a string's length (`what`: `"domain"`, `"key"`, `"value"`).
    pub fn text(&self, what: &'static str, text: &str) -> Result<(), RequestError> {
        Bounds::within(what, text.len(), self.max_text_bytes)
    }
}

/// Converts a protobuf request into an [`api::Request`], checking `bounds`:
/// the strings are moved, the request's `hits_addend` 0 becomes 1 (as RLS
/// v3 says), a descriptor's `hits_addend` wrapper is kept as given (0: look
/// without counting, as the reference server).
///
/// # Errors
/// [`RequestError::TooLarge`] past a bound; [`RequestError::Invalid`] for a
/// descriptor with `is_negative_hits` (a refund: not supported yet).
pub fn request_from_proto(
    request: RateLimitRequest,
    bounds: &Bounds,
) -> Result<api::Request, RequestError> {
    bounds.text("domain", &request.domain)?;
    bounds.descriptors(request.descriptors.len())?;
    let mut descriptors = Vec::with_capacity(request.descriptors.len());
    for (i, descriptor) in request.descriptors.into_iter().enumerate() {
        bounds.entries(descriptor.entries.len())?;
        if descriptor.is_negative_hits {
            return Err(RequestError::Invalid {
                reason: format!(
                    "descriptors[{i}].is_negative_hits: true is not supported (hits are only counted, never refunded)"
                ),
            });
        }
        let mut entries = Vec::with_capacity(descriptor.entries.len());
        for entry in descriptor.entries {
            bounds.text("key", &entry.key)?;
            bounds.text("value", &entry.value)?;
            entries.push((entry.key, entry.value));
        }
        let limit = match descriptor.limit {
            None => None,
            Some(o) => Some(api::LimitOverride {
                requests_per_unit: o.requests_per_unit,
                unit: unit_from_proto(o.unit).ok_or_else(|| RequestError::Invalid {
                    reason: format!(
                        "descriptors[{i}].limit.unit: {} is not a unit (second, minute, hour, day, week, month, year)",
                        o.unit
                    ),
                })?,
            }),
        };
        descriptors.push(api::RequestDescriptor {
            entries,
            hits_addend: descriptor.hits_addend.map(|h| h.value),
            limit,
        });
    }
    Ok(api::Request {
        domain: request.domain,
        descriptors,
        hits_addend: u64::from(request.hits_addend.max(1)),
    })
}

/// RLS v3's number for a code.
pub fn code_to_proto(code: Code) -> i32 {
    match code {
        Code::Unknown => rate_limit_response::Code::Unknown as i32,
        Code::Ok => rate_limit_response::Code::Ok as i32,
        Code::OverLimit => rate_limit_response::Code::OverLimit as i32,
    }
}

/// The unit RLS v3 numbers `unit` (`None`: UNKNOWN, or no unit).
pub fn unit_from_proto(unit: i32) -> Option<Unit> {
    Some(match PbUnit::try_from(unit).ok()? {
        PbUnit::Unknown => return None,
        PbUnit::Second => Unit::Second,
        PbUnit::Minute => Unit::Minute,
        PbUnit::Hour => Unit::Hour,
        PbUnit::Day => Unit::Day,
        PbUnit::Week => Unit::Week,
        PbUnit::Month => Unit::Month,
        PbUnit::Year => Unit::Year,
    })
}

/// RLS v3's number for a unit (the response's `Unit` and
/// `envoy.type.v3.RateLimitUnit` number them alike).
pub fn unit_to_proto(unit: Unit) -> i32 {
    let unit = match unit {
        Unit::Second => PbUnit::Second,
        Unit::Minute => PbUnit::Minute,
        Unit::Hour => PbUnit::Hour,
        Unit::Day => PbUnit::Day,
        Unit::Week => PbUnit::Week,
        Unit::Month => PbUnit::Month,
        Unit::Year => PbUnit::Year,
    };
    unit as i32
}

/// A duration as `google.protobuf.Duration` (saturating at `i64::MAX` s).
pub fn duration_to_proto(d: Duration) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        // Below 10^9, so it fits.
        nanos: d.subsec_nanos() as i32,
    }
}

/// Converts the engine's answer into the protobuf one (strings moved):
/// `overall_code`, one `DescriptorStatus` per descriptor, and
/// `response_headers_to_add` from [`api::Response::headers`].
pub fn response_to_proto(response: api::Response) -> RateLimitResponse {
    let statuses = response
        .statuses
        .into_iter()
        .map(|s| DescriptorStatus {
            code: code_to_proto(s.code),
            current_limit: s.current_limit.map(|l| RateLimit {
                name: l.name,
                requests_per_unit: l.requests_per_unit,
                unit: unit_to_proto(l.unit),
            }),
            limit_remaining: s.limit_remaining,
            duration_until_reset: s.duration_until_reset.map(duration_to_proto),
            quota: None,
        })
        .collect();
    let response_headers_to_add = response
        .headers
        .into_iter()
        .map(|(key, value)| HeaderValue {
            key,
            value,
            raw_value: Vec::new(),
        })
        .collect();
    RateLimitResponse {
        overall_code: code_to_proto(response.overall_code),
        statuses,
        response_headers_to_add,
        ..RateLimitResponse::default()
    }
}

/// The gRPC status for a refused request: `RESOURCE_EXHAUSTED` for one too
/// large, `INVALID_ARGUMENT` otherwise, with the error's message.
pub fn status_of(error: &RequestError) -> Status {
    match error {
        RequestError::TooLarge { .. } => Status::resource_exhausted(error.to_string()),
        RequestError::Invalid { .. } => Status::invalid_argument(error.to_string()),
        RequestError::Unavailable { .. } => Status::unavailable(error.to_string()),
    }
}

/// The `RateLimitService` implementation: bounds, conversion, the engine's
/// decision, conversion back, and the wire's counters.
pub struct RlsService {
    engine: Arc<Engine>,
    bounds: Bounds,
    metrics: Arc<Metrics>,
}

impl RlsService {
    /// A service deciding with `engine`, refusing requests past `bounds`,
    /// counting into `metrics`.
    pub fn new(engine: Arc<Engine>, bounds: Bounds, metrics: Arc<Metrics>) -> RlsService {
        RlsService {
            engine,
            bounds,
            metrics,
        }
    }

    /// The tonic server for this service, decoding messages up to
    /// [`Bounds::max_message_bytes`].
    pub fn into_server(self) -> RateLimitServiceServer<RlsService> {
        let max = self.bounds.max_message_bytes;
        RateLimitServiceServer::new(self).max_decoding_message_size(max)
    }

    /// Decides one protobuf request (the service's body, callable without
    /// a transport).
    ///
    /// # Errors
    /// The gRPC status of a refused request ([`status_of`]).
    pub async fn decide(&self, request: RateLimitRequest) -> Result<RateLimitResponse, Status> {
        let start = std::time::Instant::now();
        let answer = self.answer(request).await;
        self.metrics.answered(Transport::Grpc, start.elapsed());
        answer
    }

    async fn answer(&self, request: RateLimitRequest) -> Result<RateLimitResponse, Status> {
        let decided = match request_from_proto(request, &self.bounds) {
            Ok(request) => self.engine.decide(&request).await.inspect(|response| {
                self.metrics
                    .decided(Transport::Grpc, &request.domain, response.overall_code);
            }),
            Err(error) => Err(error),
        };
        match decided {
            Ok(response) => Ok(response_to_proto(response)),
            Err(error) => {
                self.metrics.refused(Transport::Grpc, &error);
                Err(status_of(&error))
            }
        }
    }
}

#[tonic::async_trait]
impl RateLimitService for RlsService {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, Status> {
        self.decide(request.into_inner())
            .await
            .map(tonic::Response::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_keep_their_nanoseconds() {
        let d = duration_to_proto(Duration::new(3, 500_000_000));
        assert_eq!((d.seconds, d.nanos), (3, 500_000_000));
        let max = duration_to_proto(Duration::MAX);
        assert_eq!(max.seconds, i64::MAX);
    }

    #[test]
    fn units_keep_rls_numbers() {
        // RLS v3 numbers WEEK 7 after YEAR 6.
        assert_eq!(unit_to_proto(Unit::Week), 7);
        assert_eq!(unit_to_proto(Unit::Year), 6);
        assert_eq!(unit_to_proto(Unit::Second), 1);
        assert_eq!(code_to_proto(Code::OverLimit), 2);
    }

    #[test]
    fn bounds_name_what_is_too_large() {
        let bounds = Bounds {
            max_text_bytes: 4,
            ..Bounds::default()
        };
        let error = bounds.text("value", "12345").unwrap_err();
        assert_eq!(
            error,
            RequestError::TooLarge {
                what: "value",
                size: 5,
                max: 4
            }
        );
        assert_eq!(status_of(&error).code(), tonic::Code::ResourceExhausted);
        assert!(bounds.text("value", "1234").is_ok());
    }
}
