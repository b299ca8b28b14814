//! A shared-memory keyed limiter through the reqwest-middleware adapter:
//! one limit per partner (the default key is the host and port), and a
//! partner's pause stops only its own key.
//!
//! Real time (the table's clock is the host's `CLOCK_MONOTONIC`, shared by
//! processes): each wait is bounded exactly from below and, from above, by
//! a liveness bound only (2.5 s of slack), still below the next rule it
//! could be confused with (A's 1 s token against B's 5 s pause). The exact
//! instants are checked in virtual time through the adapters (tower.rs,
//! reqwest.rs: paused tokio time) and at explicit instants for the table
//! itself (ratebound-shm/tests/waiting.rs).

mod support;

use std::time::{Duration, Instant};

use ratebound::{KeyedAlgorithm, Quota};
use ratebound_client::OutboundMiddleware;
use ratebound_shm::SharedKeyedLimiter;
use reqwest_middleware::ClientBuilder;
use support::{Events, Partner, first_then, reply, reqwest_client, strict};

#[tokio::test]
async fn each_partner_host_has_its_own_limit_and_its_own_pause() {
    let dir = std::env::temp_dir().join(format!("ratebound-client-shm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir); // a failed run's
    std::fs::create_dir_all(&dir).expect("dir");
    let algorithm = KeyedAlgorithm::TokenBucket(Quota::parse("1/s burst 1").expect("quota"));
    let limiter =
        SharedKeyedLimiter::open(dir.join("partners.limit"), algorithm, 16).expect("open");
    let events = Events::default();
    let client = ClientBuilder::new(reqwest_client())
        .with(
            OutboundMiddleware::builder(limiter)
                .retries(0)
                .on_decision(events.hook())
                .build()
                .expect("middleware"),
        )
        .build();
    let a = Partner::start(strict(100.0, 10.0)).await;
    // B asks for a 5 s pause on its first answer.
    let b = Partner::start(first_then(
        || reply(429, &[("retry-after", "5")], ""),
        || reply(200, &[], ""),
    ))
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
    // Each host's burst of 1 was free: no wait so far (a wait would be
    // A's 1 s or B's pause; a loaded machine may take some ms).
    let waits = |events: &Events| -> Vec<Duration> {
        let all = events.all();
        all.iter()
            .filter(|e| e.0 == "waited")
            .filter_map(|e| e.2)
            .collect()
    };
    assert!(
        waits(&events)
            .iter()
            .all(|w| *w < Duration::from_millis(500)),
        "{:?}",
        events.all()
    );
    // A's next token is 1 s after its first (taken after `start`), not
    // held by B's pause; B's only after its pause of 5 s (from its 429,
    // after `start`), which leaves B's bucket empty: 1 s more.
    assert_eq!(
        client.get(a.url("/")).send().await.expect("a").status(),
        200
    );
    let a_done = start.elapsed();
    assert!(a_done >= Duration::from_millis(1000), "{a_done:?}");
    assert!(a_done <= Duration::from_millis(1000 + 2500), "{a_done:?}");
    assert_eq!(
        client.get(b.url("/")).send().await.expect("b").status(),
        200
    );
    let b_done = start.elapsed();
    assert!(b_done >= Duration::from_millis(5000 + 1000), "{b_done:?}");
    assert!(
        b_done <= Duration::from_millis(5000 + 1000 + 2500),
        "{b_done:?}"
    );
    assert_eq!((a.hits(), b.hits()), (2, 2));
    std::fs::remove_dir_all(&dir).expect("clean up");
}
