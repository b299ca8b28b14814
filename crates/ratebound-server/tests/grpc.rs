//! RLS v3 over gRPC with a real tonic client on 127.0.0.1: the conversions
//! field by field, the bounds, health, graceful shutdown.

mod common;
mod wire;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code as PbCode;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer, SERVICE_NAME,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use ratebound_server::api::{self, Code, CurrentLimit, DescriptorStatus};
use ratebound_server::model::Unit;
use ratebound_server::rls::{Bounds, request_from_proto, response_to_proto};
use ratebound_server::serve::ServeOptions;
use tokio::net::TcpListener;
use tonic::transport::Channel;
use tonic::transport::server::TcpIncoming;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use wire::{config, http, start};

fn entry(key: &str, value: &str) -> Entry {
    Entry {
        key: key.into(),
        value: value.into(),
    }
}

fn descriptor(entries: Vec<Entry>, hits: Option<u64>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries,
        limit: None,
        hits_addend: hits.map(|value| UInt64Value { value }),
        is_negative_hits: false,
    }
}

async fn client(addr: std::net::SocketAddr) -> RateLimitServiceClient<Channel> {
    RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connects")
        .max_encoding_message_size(16 << 20)
}

/// A service that records the converted request and answers a fixed
/// [`api::Response`], to see both conversions across a real gRPC hop.
struct Recording {
    seen: Arc<Mutex<Vec<api::Request>>>,
    answer: api::Response,
}

#[tonic::async_trait]
impl RateLimitService for Recording {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let request = request_from_proto(request.into_inner(), &Bounds::default())
            .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
        self.seen.lock().unwrap().push(request);
        Ok(tonic::Response::new(response_to_proto(self.answer.clone())))
    }
}

#[tokio::test]
async fn every_field_crosses_the_wire_both_ways() {
    let answer = api::Response {
        overall_code: Code::OverLimit,
        statuses: vec![
            DescriptorStatus {
                code: Code::OverLimit,
                current_limit: Some(CurrentLimit {
                    requests_per_unit: 30,
                    unit: Unit::Week,
                    name: "weekly".into(),
                }),
                limit_remaining: 0,
                duration_until_reset: Some(Duration::new(12, 500_000_000)),
            },
            DescriptorStatus {
                code: Code::Ok,
                current_limit: None,
                limit_remaining: u32::MAX,
                duration_until_reset: None,
            },
        ],
        headers: vec![
            ("RateLimit".into(), "\"weekly\";r=0;t=13".into()),
            ("Retry-After".into(), "13".into()),
        ],
    };
    let seen = Arc::new(Mutex::new(Vec::new()));
    let service = Recording {
        seen: Arc::clone(&seen),
        answer,
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RateLimitServiceServer::new(service))
            .serve_with_incoming(TcpIncoming::from(listener)),
    );

    let request = RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![
            descriptor(
                vec![entry("remote_address", "10.0.0.1"), entry("path", "/a")],
                Some(5),
            ),
            descriptor(vec![entry("user", "")], Some(0)),
            descriptor(vec![entry("k", "v")], None),
        ],
        hits_addend: 3,
    };
    let response = client(addr)
        .await
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner();

    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![api::Request {
            domain: "edge".into(),
            descriptors: vec![
                api::RequestDescriptor {
                    entries: vec![
                        ("remote_address".into(), "10.0.0.1".into()),
                        ("path".into(), "/a".into())
                    ],
                    hits_addend: Some(5),
                    limit: None,
                },
                api::RequestDescriptor {
                    entries: vec![("user".into(), String::new())],
                    // 0 per descriptor: look without counting.
                    hits_addend: Some(0),
                    limit: None,
                },
                api::RequestDescriptor {
                    entries: vec![("k".into(), "v".into())],
                    hits_addend: None,
                    limit: None,
                },
            ],
            hits_addend: 3,
        }]
    );

    assert_eq!(response.overall_code, PbCode::OverLimit as i32);
    assert_eq!(response.statuses.len(), 2);
    let first = &response.statuses[0];
    assert_eq!(first.code, PbCode::OverLimit as i32);
    let limit = first.current_limit.as_ref().unwrap();
    assert_eq!(limit.name, "weekly");
    assert_eq!(limit.requests_per_unit, 30);
    assert_eq!(limit.unit, PbUnit::Week as i32);
    assert_eq!(first.limit_remaining, 0);
    let reset = first.duration_until_reset.unwrap();
    assert_eq!((reset.seconds, reset.nanos), (12, 500_000_000));
    let second = &response.statuses[1];
    assert_eq!(second.code, PbCode::Ok as i32);
    assert_eq!(second.current_limit, None);
    assert_eq!(second.limit_remaining, u32::MAX);
    assert_eq!(second.duration_until_reset, None);
    let headers: Vec<(&str, &str)> = response
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.as_str(), h.value.as_str()))
        .collect();
    assert_eq!(
        headers,
        vec![("RateLimit", "\"weekly\";r=0;t=13"), ("Retry-After", "13")]
    );
    server.abort();
}

#[test]
fn a_request_hits_addend_of_zero_counts_one() {
    let request = RateLimitRequest {
        domain: "d".into(),
        descriptors: vec![descriptor(vec![entry("k", "v")], None)],
        hits_addend: 0,
    };
    let converted = request_from_proto(request, &Bounds::default()).unwrap();
    assert_eq!(converted.hits_addend, 1);
    // 2^32 per descriptor (a u64 wrapper) reaches the engine as sent.
    let request = RateLimitRequest {
        domain: "d".into(),
        descriptors: vec![descriptor(vec![entry("k", "v")], Some(1 << 32))],
        hits_addend: 0,
    };
    let converted = request_from_proto(request, &Bounds::default()).unwrap();
    assert_eq!(converted.descriptors[0].hits_addend, Some(1 << 32));
}

#[tokio::test]
async fn the_server_answers_each_descriptor() {
    let server = start(config(&["edge"]), ServeOptions::default()).await;
    let mut client = client(server.grpc).await;
    let request = RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![
            descriptor(vec![entry("a", "1")], None),
            descriptor(vec![entry("b", "2")], Some(2)),
        ],
        hits_addend: 0,
    };
    let response = client
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner();
    // engine: an unknown descriptor is OK (as the reference server); the
    // lead's engine may add limits and headers here.
    assert_eq!(response.overall_code, PbCode::Ok as i32);
    assert_eq!(response.statuses.len(), 2);
    assert!(
        response
            .statuses
            .iter()
            .all(|s| s.code == PbCode::Ok as i32)
    );
    server.finish().await;
}

#[tokio::test]
async fn oversized_requests_are_refused_and_the_server_keeps_serving() {
    let server = start(config(&["edge"]), ServeOptions::default()).await;
    let mut client = client(server.grpc).await;
    let small = || RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![descriptor(vec![entry("k", "v")], None)],
        hits_addend: 1,
    };

    // 10 000 descriptors: well under 1 MiB, over the descriptor bound.
    let many = RateLimitRequest {
        descriptors: (0..10_000)
            .map(|i| descriptor(vec![entry("k", &i.to_string())], None))
            .collect(),
        ..small()
    };
    let status = client.should_rate_limit(many).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("descriptors: 10000"),
        "{}",
        status.message()
    );

    // 10 000 entries in one descriptor.
    let wide = RateLimitRequest {
        descriptors: vec![descriptor(
            (0..10_000).map(|i| entry("k", &i.to_string())).collect(),
            None,
        )],
        ..small()
    };
    let status = client.should_rate_limit(wide).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("entries: 10000"),
        "{}",
        status.message()
    );

    // A 1 MB value: under the message bound, over the text bound.
    let long = RateLimitRequest {
        descriptors: vec![descriptor(vec![entry("k", &"x".repeat(1_000_000))], None)],
        ..small()
    };
    let status = client.should_rate_limit(long).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("value: 1000000"),
        "{}",
        status.message()
    );

    // 2 MB: refused by the decoder from the length prefix.
    let huge = RateLimitRequest {
        descriptors: vec![descriptor(vec![entry("k", &"x".repeat(2_000_000))], None)],
        ..small()
    };
    let status = client.should_rate_limit(huge).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    assert!(status.message().contains("1048576"), "{}", status.message());

    // A refund is not something the engine can do: refused, not charged.
    let mut refund = small();
    refund.descriptors[0].is_negative_hits = true;
    let status = client.should_rate_limit(refund).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("descriptors[0].is_negative_hits"));

    // Still serving, on the same connection and on a new one.
    let ok = client
        .should_rate_limit(small())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ok.overall_code, PbCode::Ok as i32);
    let ok = self::client(server.grpc)
        .await
        .should_rate_limit(small())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ok.overall_code, PbCode::Ok as i32);

    let metrics = http(server.http, "GET", "/metrics", b"").await.body;
    assert_eq!(
        wire::sample(
            &metrics,
            "ratebound_request_errors_total{transport=\"grpc\",reason=\"too_large\"}"
        ),
        3
    );
    assert_eq!(
        wire::sample(
            &metrics,
            "ratebound_request_errors_total{transport=\"grpc\",reason=\"invalid\"}"
        ),
        1
    );
    assert_eq!(
        wire::sample(
            &metrics,
            "ratebound_requests_total{transport=\"grpc\",domain=\"edge\",code=\"OK\"}"
        ),
        2
    );
    server.finish().await;
}

async fn health(channel: Channel, service: &str) -> Result<i32, tonic::Status> {
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .map(|r| r.into_inner().status)
}

#[tokio::test]
async fn health_serves_then_not_while_draining() {
    let options = ServeOptions {
        drain: Duration::from_secs(2),
        ..ServeOptions::default()
    };
    let mut server = start(config(&[]), options).await;
    let channel = Channel::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    for name in ["", SERVICE_NAME, "ratelimit"] {
        assert_eq!(
            health(channel.clone(), name).await.unwrap(),
            ServingStatus::Serving as i32,
            "{name:?}"
        );
    }
    let unknown = health(channel.clone(), "nope").await.unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
    assert_eq!(
        http(server.http, "GET", "/healthcheck", b"").await.status,
        200
    );

    server.stop();
    // Draining: NOT_SERVING until the listeners close (bounded wait).
    let mut seen = false;
    for _ in 0..100 {
        if health(channel.clone(), SERVICE_NAME).await.unwrap() == ServingStatus::NotServing as i32
        {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(seen, "NOT_SERVING while draining");
    let answer = http(server.http, "GET", "/healthcheck", b"").await;
    assert_eq!((answer.status, answer.body.as_str()), (500, ""));
    server.finish().await;
}

/// A request body sent as the test says, part by part.
struct Parts(tokio::sync::mpsc::Receiver<bytes::Bytes>);

impl http_body::Body for Parts {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|part| part.map(|b| Ok(http_body::Frame::data(b))))
    }
}

#[tokio::test]
async fn shutdown_answers_the_call_in_flight() {
    use http_body_util::BodyExt;
    use prost::Message;

    let mut server = start(config(&["edge"]), ServeOptions::default()).await;
    let tcp = tokio::net::TcpStream::connect(server.grpc).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(connection);

    let message = RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![descriptor(vec![entry("k", "v")], None)],
        hits_addend: 1,
    }
    .encode_to_vec();
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(&message);
    let (parts, body) = tokio::sync::mpsc::channel(2);
    let request = hyper::Request::post(format!(
        "http://{}/{SERVICE_NAME}/ShouldRateLimit",
        server.grpc
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(Parts(body))
    .unwrap();
    let call = tokio::spawn(sender.send_request(request));
    parts
        .send(bytes::Bytes::copy_from_slice(&framed[..3]))
        .await
        .unwrap();
    // Let the stream open on the server: the call is in flight.
    tokio::time::sleep(Duration::from_millis(100)).await;

    server.stop();
    let mut closed = false;
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(server.grpc).await.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(closed, "the gRPC listener closes on shutdown");
    assert!(
        !server.task.is_finished(),
        "the runner waits for the call in flight"
    );

    parts
        .send(bytes::Bytes::copy_from_slice(&framed[3..]))
        .await
        .unwrap();
    drop(parts);
    let response = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("an answer within 5 s")
        .unwrap()
        .expect("the call is answered");
    assert_eq!(response.status(), 200);
    let collected = response.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned().expect("gRPC trailers");
    assert_eq!(
        trailers.get("grpc-status").map(|v| v.as_bytes()),
        Some(&b"0"[..])
    );
    let bytes = collected.to_bytes();
    let answer = RateLimitResponse::decode(&bytes[5..]).unwrap();
    assert_eq!(answer.overall_code, PbCode::Ok as i32);
    assert_eq!(answer.statuses.len(), 1);
    server.finish().await;
}

#[tokio::test]
async fn a_real_decision_crosses_the_wire() {
    // engine: the lead's decisions, seen through the wire (the black-listed
    // IP is over the limit whatever the clock says).
    let config =
        ratebound_server::model::Config::parse(common::EXAMPLE3, "black_list.yaml").unwrap();
    let server = start(config, ServeOptions::default()).await;
    let request = RateLimitRequest {
        domain: "edge_proxy_per_ip".into(),
        descriptors: vec![descriptor(vec![entry("remote_address", "50.0.0.5")], None)],
        hits_addend: 0,
    };
    let response = client(server.grpc)
        .await
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        response.overall_code,
        PbCode::OverLimit as i32,
        "{response:?}"
    );
    let status = &response.statuses[0];
    assert_eq!(status.code, PbCode::OverLimit as i32);
    let limit = status.current_limit.as_ref().expect("the limit decided by");
    assert_eq!(
        (limit.requests_per_unit, limit.unit),
        (0, PbUnit::Second as i32)
    );
    assert!(
        response
            .response_headers_to_add
            .iter()
            .any(|h| h.key.eq_ignore_ascii_case("retry-after")),
        "{response:?}"
    );

    let answer = http(
        server.http,
        "POST",
        "/json",
        br#"{"domain":"edge_proxy_per_ip","descriptors":[{"entries":[{"key":"remote_address","value":"50.0.0.5"}]}]}"#,
    )
    .await;
    assert_eq!(answer.status, 429, "{answer:?}");
    let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(body["overallCode"], "OVER_LIMIT");
    assert_eq!(body["statuses"][0]["currentLimit"]["unit"], "SECOND");
    let metrics = http(server.http, "GET", "/metrics", b"").await.body;
    let over = |transport: &str| {
        wire::sample(
            &metrics,
            &format!(
                "ratebound_requests_total{{transport=\"{transport}\",domain=\"edge_proxy_per_ip\",code=\"OVER_LIMIT\"}}"
            ),
        )
    };
    assert_eq!((over("grpc"), over("json")), (1, 1));
    // wire: each answer's time in the latency histogram.
    let answered = |transport: &str| {
        let series =
            format!("ratebound_request_duration_seconds_count{{transport=\"{transport}\"}}");
        wire::sample(&metrics, &series)
    };
    assert_eq!((answered("grpc"), answered("json")), (1, 1));
    // engine: its own counters follow the wire's.
    assert!(
        metrics.contains("ratebound_descriptor_over_limit_total{"),
        "{metrics}"
    );
    server.finish().await;
}
