//! The reference server's HTTP endpoints on 127.0.0.1: `POST /json`,
//! `GET /healthcheck`, `GET /metrics`, and a graceful shutdown that
//! answers the request in flight.

mod wire;

use std::time::Duration;

use ratebound_server::rls::Bounds;
use ratebound_server::serve::ServeOptions;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use wire::{config, http, read_answer, sample, start};

#[tokio::test]
async fn json_round_trip_in_either_spelling() {
    let server = start(config(&["dummy"]), ServeOptions::default()).await;
    // The reference server's own example of /json (its comment's request).
    let answer = http(
        server.http,
        "POST",
        "/json",
        br#"{"domain": "dummy", "descriptors": [{"entries": [{"key": "perday"}]}]}"#,
    )
    .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let body: Value = serde_json::from_str(&answer.body).unwrap();
    // engine: an unknown descriptor is OK with nothing else set; the lead's
    // engine fills currentLimit, limitRemaining, durationUntilReset.
    assert_eq!(
        body,
        json!({"overallCode": "OK", "statuses": [{"code": "OK"}]})
    );

    // protojson reads the camelCase names and numbers given as strings too.
    let answer = http(
        server.http,
        "POST",
        "/json",
        br#"{"domain":"dummy","hitsAddend":"2","descriptors":[
            {"entries":[{"key":"a","value":"1"}],"hits_addend":3},
            {"entries":[{"key":"b","value":"2"}],"hitsAddend":"4","isNegativeHits":false}]}"#,
    )
    .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let body: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(body["statuses"].as_array().unwrap().len(), 2);

    let metrics = http(server.http, "GET", "/metrics", b"").await;
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .header("content-type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    assert_eq!(
        sample(
            &metrics.body,
            "ratebound_requests_total{transport=\"json\",domain=\"dummy\",code=\"OK\"}"
        ),
        2
    );
    server.finish().await;
}

#[tokio::test]
async fn bad_requests_are_400_and_counted() {
    let options = ServeOptions {
        bounds: Bounds {
            max_message_bytes: 64 << 10,
            ..Bounds::default()
        },
        ..ServeOptions::default()
    };
    let server = start(config(&["d"]), options).await;
    let bad = [
        &b"{not json"[..],
        br#"["a list"]"#,
        br#"{"domain":"d","colour":"red"}"#,
        br#"{"domain":"d","hits_addend":1,"hitsAddend":2}"#,
        br#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":7}]}]}"#,
        br#"{"domain":"d","hits_addend":4294967296}"#,
    ];
    for body in bad {
        let answer = http(server.http, "POST", "/json", body).await;
        assert_eq!(
            answer.status,
            400,
            "{} -> {answer:?}",
            String::from_utf8_lossy(body)
        );
        assert!(answer.body.starts_with("bad JSON request: "), "{answer:?}");
    }
    let answer = http(
        server.http,
        "POST",
        "/json",
        br#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}],"is_negative_hits":true}]}"#,
    )
    .await;
    assert_eq!(answer.status, 400, "{answer:?}");
    assert!(answer.body.contains("is_negative_hits"), "{answer:?}");

    // A body over the bound: 413, as is a value over the text bound.
    let big = format!(r#"{{"domain":"d","pad":"{}"}}"#, "x".repeat(100 << 10));
    let answer = http(server.http, "POST", "/json", big.as_bytes()).await;
    assert_eq!(answer.status, 413, "{}", answer.body);
    let long = format!(
        r#"{{"domain":"d","descriptors":[{{"entries":[{{"key":"k","value":"{}"}}]}}]}}"#,
        "x".repeat(20 << 10)
    );
    let answer = http(server.http, "POST", "/json", long.as_bytes()).await;
    assert_eq!(answer.status, 413, "{}", answer.body);
    assert!(answer.body.contains("value: 20480"), "{}", answer.body);

    let metrics = http(server.http, "GET", "/metrics", b"").await.body;
    let errors = |reason: &str| {
        sample(
            &metrics,
            &format!("ratebound_request_errors_total{{transport=\"json\",reason=\"{reason}\"}}"),
        )
    };
    assert_eq!(errors("bad_json"), 6);
    assert_eq!(errors("invalid"), 1);
    assert_eq!(errors("too_large"), 2);
    server.finish().await;
}

#[tokio::test]
async fn healthcheck_and_unknown_paths() {
    let server = start(config(&[]), ServeOptions::default()).await;
    let answer = http(server.http, "GET", "/healthcheck", b"").await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "OK"));
    assert_eq!(http(server.http, "GET", "/nope", b"").await.status, 404);
    let metrics = http(server.http, "GET", "/metrics", b"").await.body;
    assert_eq!(sample(&metrics, "ratebound_healthy"), 1);
    server.finish().await;
}

#[tokio::test]
async fn shutdown_answers_the_request_in_flight() {
    let mut server = start(config(&["d"]), ServeOptions::default()).await;
    let body = br#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#;
    let mut stream = TcpStream::connect(server.http).await.unwrap();
    let head = format!(
        "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body[..10]).await.unwrap();
    stream.flush().await.unwrap();
    // Let the server read the head: the request is in flight.
    tokio::time::sleep(Duration::from_millis(100)).await;

    server.stop();
    // The listener closes (bounded wait) ...
    let mut closed = false;
    for _ in 0..200 {
        if TcpStream::connect(server.http).await.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(closed, "the HTTP listener closes on shutdown");
    assert!(
        !server.task.is_finished(),
        "the runner waits for the request in flight"
    );

    // ... and the request in flight is still answered.
    stream.write_all(&body[10..]).await.unwrap();
    let answer = read_answer(&mut stream).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(answer.body.contains("\"overallCode\":\"OK\""), "{answer:?}");
    server.finish().await;
}

/// The reference README's example 3 with the black-listed IP given.
fn black_list(ip: &str) -> String {
    format!(
        "domain: edge_proxy_per_ip\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n\n  # Black list IP\n  - key: remote_address\n    value: {ip}\n    rate_limit:\n      unit: second\n      requests_per_unit: 0\n"
    )
}

async fn status_of_ip(http_addr: std::net::SocketAddr, ip: &str) -> u16 {
    let body = format!(
        r#"{{"domain":"edge_proxy_per_ip","descriptors":[{{"entries":[{{"key":"remote_address","value":"{ip}"}}]}}]}}"#
    );
    http(http_addr, "POST", "/json", body.as_bytes())
        .await
        .status
}

#[tokio::test]
async fn the_runner_reloads_a_changed_file_and_keeps_the_rules_on_a_broken_one() {
    use ratebound_server::reload::Polled;
    use std::sync::{Arc, Mutex};

    let path =
        std::env::temp_dir().join(format!("ratebound-wire-reload-{}.yaml", std::process::id()));
    std::fs::write(&path, black_list("50.0.0.5")).unwrap();
    let config = ratebound_server::model::Config::load(&path).unwrap();
    let seen: Arc<Mutex<Vec<Polled>>> = Arc::default();
    let report = Arc::clone(&seen);
    let options = ServeOptions {
        config: path.clone(),
        reload_every: Some(Duration::from_millis(20)),
        on_reload: Some(Arc::new(move |p: &Polled| {
            report.lock().unwrap().push(p.clone())
        })),
        ..ServeOptions::default()
    };
    let server = start(config, options).await;
    // engine: the black-listed IP is refused, another one admitted.
    assert_eq!(status_of_ip(server.http, "50.0.0.5").await, 429);

    let wait_for = |n: usize| {
        let seen = Arc::clone(&seen);
        async move {
            for _ in 0..250 {
                if seen.lock().unwrap().len() >= n {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            panic!("no reload reported within 5 s");
        }
    };
    // Each new content is written beside the file and renamed over it, as
    // a deploy (or a ConfigMap's symlink swap) does: a watcher polling
    // every 20 ms could otherwise read a file half written.
    let replace = |text: String| {
        let tmp = path.with_extension("yaml.new");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    };
    replace(black_list("50.0.0.6"));
    wait_for(1).await;
    assert!(
        matches!(&seen.lock().unwrap()[0], Polled::Reloaded { domains } if domains == &["edge_proxy_per_ip"])
    );
    assert_eq!(status_of_ip(server.http, "50.0.0.5").await, 200);
    assert_eq!(status_of_ip(server.http, "50.0.0.6").await, 429);

    replace(black_list("50.0.0.7").replace("requests_per_unit: 0", "requests_per_unit: -1"));
    wait_for(2).await;
    match &seen.lock().unwrap()[1] {
        Polled::Refused { error } => assert!(error.contains(":13:"), "{error}"),
        other => panic!("{other:?}"),
    }
    // The rules in force stay.
    assert_eq!(status_of_ip(server.http, "50.0.0.6").await, 429);
    assert_eq!(status_of_ip(server.http, "50.0.0.7").await, 200);

    // A domain the reload adds is counted under its own label at once.
    replace(black_list("50.0.0.8").replace("domain: edge_proxy_per_ip", "domain: edge_v2"));
    wait_for(3).await;
    let body = r#"{"domain":"edge_v2","descriptors":[{"entries":[{"key":"remote_address","value":"50.0.0.8"}]}]}"#;
    let answer = http(server.http, "POST", "/json", body.as_bytes()).await;
    assert_eq!(answer.status, 429);
    let metrics = http(server.http, "GET", "/metrics", b"").await.body;
    assert!(
        metrics.contains(
            "ratebound_requests_total{transport=\"json\",domain=\"edge_v2\",code=\"OVER_LIMIT\"} 1\n"
        ),
        "{metrics}"
    );
    server.finish().await;
    let _ = std::fs::remove_file(path);
}
