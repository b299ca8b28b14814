//! Issue 36 item 7 through the tower layer, over real HTTP on 127.0.0.1:
//! a remote policy whose check fails in a way its fail policy does not
//! cover answers 503 with the configured `Retry-After` (never 500, never a
//! decision), is told to `on_decision` as `store_error` by the failing
//! policy, and is logged once when the episode begins and once when it
//! ends. Before the fix such a policy could only answer "full" (503 with
//! the full-table text, reported `rejected`, nothing logged).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::routing::get;
use ratebound::{Error, KeyedAlgorithm, Quota};
use ratebound_http::RateLimitLayer;

mod failing;
mod open_loop;
mod serve;
use failing::Failing;
use open_loop::{client, get_root};
use serve::serve;

/// What the store that is down answers.
fn down_error() -> Error {
    Error::Unsupported {
        operation: "check",
        algorithm: "a store that is down",
    }
}

/// The log lines, for this test binary's logger.
static LINES: Mutex<Vec<(log::Level, String)>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        if record.target().starts_with("ratebound") {
            LINES
                .lock()
                .unwrap()
                .push((record.level(), record.args().to_string()));
        }
    }
    fn flush(&self) {}
}

#[tokio::test]
async fn a_failing_remote_policy_is_a_503_with_retry_after_logged_once_per_episode() {
    log::set_logger(&Capture).unwrap();
    log::set_max_level(log::LevelFilter::Info);
    let down = Arc::new(AtomicBool::new(true));
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let told = outcomes.clone();
    let layer = RateLimitLayer::builder()
        .policy("local", Quota::parse("100/s burst 100").unwrap())
        .remote("global", {
            let down = down.clone();
            Failing {
                algorithm: KeyedAlgorithm::TokenBucket(Quota::parse("100/s burst 100").unwrap()),
                fault: Box::new(move || down.load(Ordering::SeqCst).then(down_error)),
            }
        })
        .store_error_retry_after(5)
        .on_decision(move |e| {
            told.lock()
                .unwrap()
                .push((e.outcome.as_str(), e.policy.map(str::to_string)));
        })
        .build()
        .unwrap();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let addr = serve(app).await;
    let client = client();
    let get = || async {
        let (head, body) = get_root(&client, addr).await;
        let retry = head
            .headers
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string());
        let body = String::from_utf8_lossy(&body).into_owned();
        (head.status.as_u16(), retry, body)
    };
    let failed = (
        503,
        Some("5".to_string()),
        "rate limit unavailable; try again shortly\n".to_string(),
    );
    for _ in 0..3 {
        assert_eq!(get().await, failed);
    }
    down.store(false, Ordering::SeqCst);
    assert_eq!(get().await.0, 200);
    assert_eq!(get().await.0, 200);
    down.store(true, Ordering::SeqCst);
    assert_eq!(get().await, failed);

    let store_error = ("store_error", Some("global".to_string()));
    let allowed = ("allowed", None);
    assert_eq!(
        *outcomes.lock().unwrap(),
        [
            store_error.clone(),
            store_error.clone(),
            store_error.clone(),
            allowed.clone(),
            allowed,
            store_error,
        ]
    );
    let lines = LINES.lock().unwrap().clone();
    let began = "ratebound: the store of remote policy \"global\" failed; its requests are \
                 answered 503 with Retry-After: 5 until it answers again";
    let ended =
        "ratebound: the store of remote policy \"global\" answers again, after 3 failed checks";
    assert_eq!(
        lines,
        [
            (log::Level::Warn, began.to_string()),
            (log::Level::Info, ended.to_string()),
            (log::Level::Warn, began.to_string()),
        ]
    );
}
