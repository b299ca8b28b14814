//! A descriptor's own limit (RLS v3 `RateLimitDescriptor.limit`, which
//! Envoy sends when a route sets one): as the reference server, for a
//! domain the configuration names, the descriptor is decided by a fixed
//! window of that many per unit — whether a rule matches or not, never in
//! shadow mode; an unknown domain is still OK. The distinct limits a
//! gateway can make a server hold are bounded.

mod common;
mod wire;

use std::time::Duration;

use common::DecideNow;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code as PbCode;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use ratebound::ManualClock;
use ratebound::any::AnyClock;
use ratebound_server::api::{Code, LimitOverride, Request, RequestDescriptor};
use ratebound_server::engine::{Engine, Options, RequestError};
use ratebound_server::model::{Config, Unit};
use ratebound_server::serve::ServeOptions;

/// 2026-12-06 00:00:00 UTC, in ns, plus 15 s.
const AT: u64 = 1_796_515_215 * 1_000_000_000;

/// The reference README's example 3, and a descriptor in shadow mode.
const RULES: &str = "\
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
  - key: canary
    shadow_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 100
";

fn engine() -> Engine {
    let clock = ManualClock::new();
    clock.set_nanos(AT);
    let options = Options {
        clock: AnyClock::Manual(clock),
        max_keys: 100,
        ..Options::default()
    };
    Engine::with_options(Config::parse(RULES, "edge.yaml").unwrap(), options).unwrap()
}

fn ask(e: &Engine, domain: &str, entry: (&str, &str), limit: Option<(u32, Unit)>) -> (Code, u32) {
    let request = Request {
        domain: domain.to_string(),
        descriptors: vec![RequestDescriptor {
            entries: vec![(entry.0.to_string(), entry.1.to_string())],
            hits_addend: None,
            limit: limit.map(|(requests_per_unit, unit)| LimitOverride {
                requests_per_unit,
                unit,
            }),
        }],
        hits_addend: 1,
    };
    let r = e.decide_now(&request).expect("decided");
    let s = &r.statuses[0];
    if let Some((n, unit)) = limit.filter(|_| domain == "edge_proxy_per_ip") {
        let current = s.current_limit.as_ref().expect("the override is named");
        assert_eq!((current.requests_per_unit, current.unit), (n, unit));
        if unit == Unit::Minute {
            // A fixed window aligned to the epoch: 45 s of this minute left.
            assert_eq!(s.duration_until_reset, Some(Duration::from_secs(45)));
        }
    }
    (r.overall_code, s.limit_remaining)
}

#[test]
fn an_override_decides_the_descriptor_whether_a_rule_matches_or_not() {
    let e = engine();
    let two = Some((2, Unit::Minute));
    // No rule for `user`: the override limits it.
    let seen: Vec<_> = (0..3)
        .map(|_| ask(&e, "edge_proxy_per_ip", ("user", "ann"), two))
        .collect();
    assert_eq!(
        seen,
        vec![(Code::Ok, 1), (Code::Ok, 0), (Code::OverLimit, 0)]
    );
    // A rule of 10/s matches this address; the override (1/hour) decides.
    let one = Some((1, Unit::Hour));
    assert_eq!(
        ask(
            &e,
            "edge_proxy_per_ip",
            ("remote_address", "192.0.2.1"),
            one
        ),
        (Code::Ok, 0)
    );
    assert_eq!(
        ask(
            &e,
            "edge_proxy_per_ip",
            ("remote_address", "192.0.2.1"),
            one
        ),
        (Code::OverLimit, 0)
    );
    // Without it, the rule: 10 a second.
    assert_eq!(
        ask(
            &e,
            "edge_proxy_per_ip",
            ("remote_address", "192.0.2.1"),
            None
        ),
        (Code::Ok, 9)
    );
    // Never in shadow mode: the descriptor's rule would let it through.
    let zero = Some((0, Unit::Second));
    assert_eq!(
        ask(&e, "edge_proxy_per_ip", ("canary", "x"), zero),
        (Code::OverLimit, 0)
    );
    // An unknown domain: OK, nothing counted, as the reference.
    for _ in 0..3 {
        assert_eq!(ask(&e, "other", ("user", "ann"), two), (Code::Ok, 0));
    }
    // Counted under the reference's metric key.
    let mut metrics = String::new();
    e.render_metrics(&mut metrics);
    assert!(
        metrics.contains("descriptor=\"edge_proxy_per_ip.user_ann\""),
        "{metrics}"
    );
}

#[test]
fn the_distinct_limits_a_gateway_can_make_are_bounded() {
    let e = engine();
    let mut refused = None;
    for n in 1..=5000u32 {
        let request = Request {
            domain: "edge_proxy_per_ip".to_string(),
            descriptors: vec![RequestDescriptor {
                entries: vec![("user".to_string(), "ann".to_string())],
                hits_addend: None,
                limit: Some(LimitOverride {
                    requests_per_unit: n,
                    unit: Unit::Day,
                }),
            }],
            hits_addend: 1,
        };
        if let Err(e) = e.decide_now(&request) {
            refused = Some((n, e));
            break;
        }
    }
    let (n, error) = refused.expect("a bound");
    // The rules' own limits count too (10/s, 0/s, 100/h: the limit of 0
    // needs none).
    assert!((4090..=4096).contains(&n), "{n}");
    assert!(
        matches!(&error, RequestError::Unavailable { reason } if reason.contains("4096")),
        "{error:?}"
    );
    // Limits already held still decide.
    assert_eq!(
        ask(
            &e,
            "edge_proxy_per_ip",
            ("user", "bob"),
            Some((7, Unit::Day))
        ),
        (Code::Ok, 6)
    );
}

#[tokio::test]
async fn an_override_crosses_the_wire_and_a_unit_of_unknown_is_refused() {
    let config = Config::parse(RULES, "edge.yaml").unwrap();
    let server = wire::start(config, ServeOptions::default()).await;
    let mut client = RateLimitServiceClient::connect(format!("http://{}", server.grpc))
        .await
        .expect("connects");
    let request = |unit: i32| RateLimitRequest {
        domain: "edge_proxy_per_ip".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: "ann".into(),
            }],
            limit: Some(RateLimitOverride {
                requests_per_unit: 1,
                unit,
            }),
            hits_addend: None,
            is_negative_hits: false,
        }],
        hits_addend: 0,
    };
    let answer = client
        .should_rate_limit(request(PbUnit::Day as i32))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.overall_code, PbCode::Ok as i32);
    let limit = answer.statuses[0].current_limit.as_ref().unwrap();
    assert_eq!(
        (limit.requests_per_unit, limit.unit),
        (1, PbUnit::Day as i32)
    );
    let answer = client
        .should_rate_limit(request(PbUnit::Day as i32))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.overall_code, PbCode::OverLimit as i32);

    let refused = client
        .should_rate_limit(request(PbUnit::Unknown as i32))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().contains("descriptors[0].limit.unit: 0"),
        "{}",
        refused.message()
    );

    // The JSON mapping: the same descriptor, over the limit already.
    let body = br#"{"domain":"edge_proxy_per_ip","descriptors":[{"entries":[{"key":"user","value":"ann"}],"limit":{"requestsPerUnit":1,"unit":"DAY"}}]}"#;
    let answer = wire::http(server.http, "POST", "/json", body).await;
    assert_eq!(answer.status, 429, "{answer:?}");
    server.finish().await;
}
