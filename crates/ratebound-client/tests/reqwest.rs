//! The reqwest-middleware adapter against a strict partner on 127.0.0.1
//! with its own token bucket: pacing, retries, pauses, timeouts, keys.

mod support;

use std::time::{Duration, Instant};

use ratebound::{Quota, TokenBucket};
use ratebound_client::{Error, RateLimitMiddleware};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use support::{Events, Partner, reply, reqwest_client, strict};

fn client(middleware: RateLimitMiddleware) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest_client())
        .with(middleware)
        .build()
}

fn bucket(quota: &str) -> TokenBucket {
    TokenBucket::new(Quota::parse(quota).expect("quota"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_concurrent_calls_wait_their_turn_and_none_is_refused() {
    // A partner of 25/s, bursts of 10; our limit 20/s, bursts of 5.
    let partner = Partner::start(strict(25.0, 10.0)).await;
    let events = Events::default();
    let client = client(
        RateLimitMiddleware::builder(bucket("20/s burst 5"))
            .on_decision(events.hook())
            .build()
            .expect("middleware"),
    );
    let start = Instant::now();
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..30 {
        let (client, url) = (client.clone(), partner.url("/items"));
        calls.spawn(async move {
            client
                .get(url)
                .send()
                .await
                .expect("send")
                .status()
                .as_u16()
        });
    }
    let statuses = calls.join_all().await;
    let elapsed = start.elapsed();
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        30,
        "{statuses:?}"
    );
    assert_eq!(partner.count(429), 0);
    assert_eq!(partner.count(200), 30);
    // 5 at once, then one every 50 ms: the last goes at 1.25 s.
    assert!(elapsed >= Duration::from_millis(1200), "{elapsed:?}");
    assert!(elapsed <= Duration::from_millis(1250 + 400), "{elapsed:?}");
    let waited = events.all().iter().filter(|e| e.0 == "waited").count();
    assert!((24..=25).contains(&waited), "{waited} waited");
    println!("30 calls: 30 x 200, 0 x 429 in {elapsed:?}; {waited} waited");
}

/// A partner answering with `statuses` in turn (the last one from then
/// on), counting what it got.
fn scripted(
    statuses: &'static [(u16, &'static str)],
) -> impl Fn(&support::Hit) -> http::Response<support::Body> + Send + Sync {
    move |hit| {
        let (status, retry_after) = statuses[hit.index.min(statuses.len() - 1)];
        let body = format!("answer {}", hit.index + 1);
        if retry_after.is_empty() {
            reply(status, &[], &body)
        } else {
            reply(status, &[("retry-after", retry_after)], &body)
        }
    }
}

#[tokio::test]
async fn a_503_then_200_is_retried_exactly_once() {
    let partner = Partner::start(scripted(&[(503, ""), (200, "")])).await;
    let events = Events::default();
    let client = client(
        RateLimitMiddleware::builder(bucket("100/s burst 10"))
            .on_decision(events.hook())
            .build()
            .expect("middleware"),
    );
    let response = client.get(partner.url("/")).send().await.expect("send");
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.expect("body"), "answer 2");
    assert_eq!(partner.hits(), 2);
    assert_eq!(events.outcomes(), ["retried"]);
    let port = partner.addr.port();
    assert_eq!(
        events.all()[0],
        (
            "retried".into(),
            format!("127.0.0.1:{port}"),
            None,
            Some(503),
            0,
            false
        )
    );
}

#[tokio::test]
async fn a_post_is_not_retried_unless_any_method() {
    let partner = Partner::start(scripted(&[(503, ""), (200, "")])).await;
    let events = Events::default();
    let once = client(
        RateLimitMiddleware::builder(bucket("100/s burst 10"))
            .on_decision(events.hook())
            .build()
            .expect("middleware"),
    );
    let response = once
        .post(partner.url("/orders"))
        .body("{}")
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 503);
    assert_eq!(partner.hits(), 1);
    assert_eq!(events.outcomes(), ["gave_up"]);

    let partner = Partner::start(scripted(&[(503, ""), (200, "")])).await;
    let any = client(
        RateLimitMiddleware::builder(bucket("100/s burst 10"))
            .any_method(true)
            .build()
            .expect("middleware"),
    );
    let response = any
        .post(partner.url("/orders"))
        .body("{}")
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 200);
    assert_eq!(partner.hits(), 2);
}

#[tokio::test]
async fn a_year_long_retry_after_pauses_for_max_pause_only() {
    let partner = Partner::start(scripted(&[(429, "31536000"), (200, "")])).await;
    let events = Events::default();
    let client = client(
        RateLimitMiddleware::builder(bucket("100/s burst 10"))
            .max_pause(Duration::from_secs(1))
            .retries(0)
            .on_decision(events.hook())
            .build()
            .expect("middleware"),
    );
    let response = client.get(partner.url("/")).send().await.expect("send");
    assert_eq!(response.status(), 429);
    let paused = events.all()[0].clone();
    assert_eq!(paused.0, "paused");
    assert_eq!(paused.2, Some(Duration::from_secs(1)));
    assert!(paused.5, "capped");
    // The next call waits out the second, not a year.
    let start = Instant::now();
    let response = client.get(partner.url("/")).send().await.expect("send");
    let waited = start.elapsed();
    assert_eq!(response.status(), 200);
    assert!(waited >= Duration::from_millis(900), "{waited:?}");
    assert!(waited <= Duration::from_millis(1000 + 150), "{waited:?}");
    assert_eq!(partner.hits(), 2);
    assert_eq!(events.outcomes(), ["paused", "gave_up"]);
    println!("Retry-After: 31536000 with max_pause 1 s: the next call waited {waited:?}");
}

#[tokio::test]
async fn when_retries_are_spent_the_caller_gets_the_last_429() {
    let partner = Partner::start(scripted(&[(429, "")])).await;
    let events = Events::default();
    let client = client(
        RateLimitMiddleware::builder(bucket("100/s burst 10"))
            .on_decision(events.hook())
            .build()
            .expect("middleware"),
    );
    let response = client.get(partner.url("/")).send().await.expect("send");
    assert_eq!(response.status(), 429);
    assert_eq!(response.text().await.expect("body"), "answer 3");
    assert_eq!(partner.hits(), 3);
    assert_eq!(events.outcomes(), ["retried", "retried", "gave_up"]);
    let attempts: Vec<u32> = events
        .all()
        .iter()
        .filter(|e| e.0 != "waited")
        .map(|e| e.4)
        .collect();
    assert_eq!(attempts, [0, 1, 2]);
}

#[tokio::test]
async fn a_wait_beyond_the_timeout_fails_at_once_and_sends_nothing() {
    let partner = Partner::start(strict(100.0, 10.0)).await;
    let client = client(
        RateLimitMiddleware::builder(bucket("1/s burst 1"))
            .timeout(Duration::from_millis(100))
            .build()
            .expect("middleware"),
    );
    let first = client.get(partner.url("/")).send().await.expect("send");
    assert_eq!(first.status(), 200);
    let start = Instant::now();
    let err = client.get(partner.url("/")).send().await.unwrap_err();
    assert!(
        start.elapsed() < Duration::from_millis(100),
        "{:?}",
        start.elapsed()
    );
    let ours = Error::from_reqwest(&err).expect("the limiter's error");
    assert_eq!(ours.code(), "deadline_exceeded");
    assert!(matches!(
        ours,
        Error::Limit(ratebound::Error::DeadlineExceeded { .. })
    ));
    assert_eq!(partner.hits(), 1, "the partner got nothing more");
}

#[tokio::test]
async fn keys_come_from_the_host_a_string_or_a_function() {
    for case in 0..3 {
        // A 503 first: the retry's event names the key.
        let partner = Partner::start(scripted(&[(503, ""), (200, "")])).await;
        let events = Events::default();
        let builder =
            RateLimitMiddleware::builder(bucket("100/s burst 10")).on_decision(events.hook());
        let (builder, want) = match case {
            0 => (builder, format!("127.0.0.1:{}", partner.addr.port())),
            1 => (builder.key("partner"), "partner".to_string()),
            _ => (
                builder.key_fn(|r: &reqwest::Request| r.url().path().to_string()),
                "/a".to_string(),
            ),
        };
        let client = client(builder.build().expect("middleware"));
        let response = client.get(partner.url("/a")).send().await.expect("send");
        assert_eq!(response.status(), 200);
        assert_eq!(events.all()[0].0, "retried");
        assert_eq!(events.all()[0].1, want, "case {case}");
    }
}
