//! Issue 36 item 7 through the tower layer, over real HTTP on 127.0.0.1:
//! a remote policy whose check fails in a way its fail policy does not
//! cover answers 503 with the configured `Retry-After` (never 500, never a
//! decision), is told to `on_decision` as `store_error` by the failing
//! policy, and is logged once when the episode begins and once when it
//! ends. Before the fix such a policy could only answer "full" (503 with
//! the full-table text, reported `rejected`, nothing logged).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use ratebound::any::Key;
use ratebound::pause::Reach;
use ratebound::{BoxFuture, Decision, Error, KeyedAlgorithm, KeyedLimit, LimitCheck, Quota};
use ratebound_http::RateLimitLayer;

mod open_loop;
mod serve;
use open_loop::{client, get_root};
use serve::serve;

/// A policy of the application's own over a store that can be down: while
/// `down`, its check fails with an error (mapped by the core's rule).
struct Store {
    down: Arc<AtomicBool>,
}

/// What the store that is down answers.
fn down() -> Error {
    Error::Unsupported {
        operation: "check",
        algorithm: "a store that is down",
    }
}

impl KeyedLimit for Store {
    fn algorithm(&self) -> KeyedAlgorithm {
        KeyedAlgorithm::TokenBucket(Quota::parse("100/s burst 100").unwrap())
    }

    fn check(&self, _scope: &str, _key: Key<'_>, _n: u64) -> LimitCheck {
        let is_down = self.down.load(Ordering::SeqCst);
        LimitCheck::pending(async move {
            tokio::task::yield_now().await;
            if is_down {
                Err(down())
            } else {
                Ok(Decision::from_parts(true, 100, 99, 0, 0))
            }
        })
    }

    fn acquire<'a>(
        &'a self,
        _key: Key<'a>,
        _n: u64,
        _timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(std::future::ready(Err(down())))
    }

    fn pause<'a>(&'a self, _key: Key<'a>, _d: Duration) -> BoxFuture<'a, Result<Reach, Error>> {
        Box::pin(std::future::ready(Err(down())))
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
        .remote("global", Store { down: down.clone() })
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
