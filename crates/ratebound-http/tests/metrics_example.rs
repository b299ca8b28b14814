//! The `metrics` example over real HTTP: after a scripted run, `/metrics`
//! says exactly what was sent — 8 logins (5 admitted, 3 refused), 3 API
//! calls admitted by both policies, and nothing for `/health`.

use std::collections::BTreeMap;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

mod serve;

#[allow(dead_code)] // its `main` is the example's
#[path = "../examples/metrics.rs"]
mod example;

#[tokio::test]
async fn the_metrics_example_counts_exactly_what_was_sent() {
    let app = example::app(example::recorder().unwrap()).unwrap();
    let addr = serve::serve(app).await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let send = async |method: Method, path: &str, key: Option<&str>| {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("http://{addr}{path}"));
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        let response = client
            .request(request.body(Empty::new()).unwrap())
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    };

    let mut logins = Vec::new();
    for _ in 0..8 {
        logins.push(send(Method::POST, "/login", None).await.0);
    }
    assert_eq!(logins, [200, 200, 200, 200, 200, 429, 429, 429]);
    for _ in 0..3 {
        assert_eq!(send(Method::GET, "/api/items", Some("k")).await.0, 200);
    }
    for _ in 0..4 {
        assert_eq!(send(Method::GET, "/health", None).await.0, 200);
    }

    let (status, text) = send(Method::GET, "/metrics", None).await;
    assert_eq!(status, 200);
    // Each sample line: name{labels} value.
    let samples: BTreeMap<String, String> = text
        .lines()
        .filter(|l| l.starts_with("ratebound_requests_total{"))
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(series, value)| (series.to_string(), value.to_string()))
        .collect();
    let expected: BTreeMap<String, String> = [
        (r#"outcome="allowed",policy="default",route="/login""#, "5"),
        (r#"outcome="refused",policy="default",route="/login""#, "3"),
        (
            r#"outcome="allowed",policy="burst",route="/api/items""#,
            "3",
        ),
        (
            r#"outcome="allowed",policy="hourly",route="/api/items""#,
            "3",
        ),
    ]
    .into_iter()
    .map(|(labels, n)| (labels.to_string(), n.to_string()))
    .collect();
    // Compared as label sets, whatever order the exporter writes them in.
    let normalized: BTreeMap<String, String> = samples
        .into_iter()
        .map(|(series, value)| (sorted_labels(&series), value))
        .collect();
    assert_eq!(normalized, expected, "{text}");
}

/// `name{b="1",a="2"}` → `a="2",b="1"`.
fn sorted_labels(series: &str) -> String {
    let inner = series
        .split_once('{')
        .and_then(|(_, rest)| rest.strip_suffix('}'))
        .unwrap_or("");
    let mut labels: Vec<&str> = inner.split(',').collect();
    labels.sort_unstable();
    labels.join(",")
}
