//! The pause-news listener: a thread subscribed to the engine's pause
//! channel (see [`RedisLimiter::with_pause_news`](super::RedisLimiter::with_pause_news)).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::Engine;

/// A thread listening for pauses (see [`RedisLimiter::with_pause_news`](super::RedisLimiter::with_pause_news));
/// it stops when this is dropped.
pub(super) struct Listener {
    pub(super) stop: Arc<AtomicBool>,
    pub(super) subscribed: Arc<AtomicBool>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Ordering: Relaxed — the thread polls the flag; nothing else is
        // published through it.
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// How long the listener blocks on its connection before it looks at its
/// stop flag.
const POLL: Duration = Duration::from_millis(200);

/// The listener's thread: subscribe, hand every message to the engine,
/// reconnect when the connection is lost, until told to stop. A blocking
/// connection on a thread of its own: the `redis` crate's async pub/sub is
/// a `Stream`, which this crate does not depend on.
pub(super) fn listen(
    client: &redis::Client,
    engine: &Engine,
    stop: &AtomicBool,
    subscribed: &AtomicBool,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    let channel = engine.pause_channel();
    let connect = engine.timeout().max(Duration::from_secs(1));
    let mut ready = Some(ready);
    let mut backoff = Duration::from_millis(100);
    // Ordering: Relaxed loads of `stop` — see Listener::drop.
    while !stop.load(Ordering::Relaxed) {
        if let Ok(mut con) = client.get_connection_with_timeout(connect) {
            let mut ps = con.as_pubsub();
            // The PING's answer comes after the subscription's (RESP3 does
            // not answer SUBSCRIBE itself): subscribed from here on.
            let set = ps.set_read_timeout(Some(connect)).is_ok()
                && ps.subscribe(&channel).is_ok()
                && ps.ping::<redis::Value>().is_ok()
                && ps.set_read_timeout(Some(POLL)).is_ok();
            if set {
                // Ordering: Release pairs with `listening`'s Acquire.
                subscribed.store(true, Ordering::Release);
                if let Some(r) = ready.take() {
                    let _ = r.send(());
                }
                backoff = Duration::from_millis(100);
                while !stop.load(Ordering::Relaxed) {
                    match ps.get_message() {
                        Ok(msg) => {
                            engine.hear(msg.get_payload_bytes());
                        }
                        Err(e) if e.is_timeout() => {}
                        Err(_) => break,
                    }
                }
                subscribed.store(false, Ordering::Release);
            }
        }
        let until = std::time::Instant::now() + backoff;
        while !stop.load(Ordering::Relaxed) && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}
