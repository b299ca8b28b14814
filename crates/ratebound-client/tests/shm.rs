//! A shared-memory keyed limiter through the reqwest-middleware adapter:
//! one limit per partner (the default key is the host and port), and a
//! partner's pause stops only its own key.

mod support;

use std::time::{Duration, Instant};

use ratebound::{KeyedAlgorithm, Quota};
use ratebound_client::RateLimitMiddleware;
use ratebound_shm::SharedKeyedLimiter;
use reqwest_middleware::ClientBuilder;
use support::{Hit, Partner, reply, reqwest_client, strict};

#[tokio::test]
async fn each_partner_host_has_its_own_limit_and_its_own_pause() {
    let dir = std::env::temp_dir().join(format!("ratebound-client-shm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir); // a failed run's
    std::fs::create_dir_all(&dir).expect("dir");
    let algorithm = KeyedAlgorithm::TokenBucket(Quota::parse("5/s burst 1").expect("quota"));
    let limiter =
        SharedKeyedLimiter::open(dir.join("partners.limit"), algorithm, 16).expect("open");
    let client = ClientBuilder::new(reqwest_client())
        .with(
            RateLimitMiddleware::builder(limiter)
                .retries(0)
                .build()
                .expect("middleware"),
        )
        .build();
    let a = Partner::start(strict(100.0, 10.0)).await;
    // B asks for a 1 s pause on its first answer.
    let b = Partner::start(|hit: &Hit| {
        if hit.index == 0 {
            reply(429, &[("retry-after", "1")], "")
        } else {
            reply(200, &[], "")
        }
    })
    .await;
    let start = Instant::now();
    assert_eq!(
        client.get(a.url("/")).send().await.expect("a").status(),
        200
    );
    assert_eq!(
        client.get(b.url("/")).send().await.expect("b").status(),
        429
    );
    // Each host's burst of 1 was free: no wait so far.
    assert!(
        start.elapsed() < Duration::from_millis(150),
        "{:?}",
        start.elapsed()
    );
    // A's next token is 200 ms after its first; B's only after its pause.
    assert_eq!(
        client.get(a.url("/")).send().await.expect("a").status(),
        200
    );
    let a_done = start.elapsed();
    assert!(a_done >= Duration::from_millis(180), "{a_done:?}");
    assert!(a_done <= Duration::from_millis(200 + 150), "{a_done:?}");
    assert_eq!(
        client.get(b.url("/")).send().await.expect("b").status(),
        200
    );
    let b_done = start.elapsed();
    assert!(b_done >= Duration::from_millis(950), "{b_done:?}");
    assert!(
        b_done <= Duration::from_millis(1000 + 150 + 100),
        "{b_done:?}"
    );
    assert_eq!((a.hits(), b.hits()), (2, 2));
    std::fs::remove_dir_all(&dir).expect("clean up");
}
