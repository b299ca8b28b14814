//! The pause listener of a native connection: a task on the runtime that
//! subscribes to the prefix's pause channel on a connection of its own (in
//! a cluster, on one seed node, the next at each reconnection: a `PUBLISH`
//! reaches every node) and hands every message to the engine; it
//! reconnects 0.1 s to 2 s apart whenever its connection is lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use pyo3::prelude::*;
use tokio::task::JoinHandle;

use super::link::Link;
use super::target::CONNECT_TIMEOUT;
use crate::redis::RedisEngine;

/// A running listener; it stops when dropped.
pub(crate) struct Listener {
    task: JoinHandle<()>,
    /// Subscribed now.
    pub(crate) subscribed: Arc<AtomicBool>,
    /// Its first attempt is over (subscribed or failed).
    pub(crate) first: Arc<AtomicBool>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Listener {
    /// Starts listening on `channel` for `engine`.
    pub(crate) fn start(link: &Link, channel: Vec<u8>, engine: Py<RedisEngine>) -> Listener {
        let subscribed = Arc::new(AtomicBool::new(false));
        let first = Arc::new(AtomicBool::new(false));
        let clients = link.target.pubsub_clients();
        let (sub, fst) = (subscribed.clone(), first.clone());
        let task = link.handle.spawn(async move {
            let mut backoff = Duration::from_millis(100);
            let mut turn = 0usize;
            loop {
                let client = &clients[turn % clients.len()];
                turn += 1;
                let connected = tokio::time::timeout(CONNECT_TIMEOUT, async {
                    let mut ps = client.get_async_pubsub().await.ok()?;
                    ps.subscribe(&channel).await.ok()?;
                    Some(ps)
                })
                .await;
                if let Ok(Some(mut ps)) = connected {
                    // Ordering: Release pairs with the getters' Acquire; the
                    // flags are advice, no memory depends on them.
                    sub.store(true, Ordering::Release);
                    fst.store(true, Ordering::Release);
                    backoff = Duration::from_millis(100);
                    let mut messages = ps.on_message();
                    while let Some(m) = messages.next().await {
                        engine.get().inner.hear(m.get_payload_bytes());
                    }
                    sub.store(false, Ordering::Release);
                }
                fst.store(true, Ordering::Release);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        });
        Listener {
            task,
            subscribed,
            first,
        }
    }
}
