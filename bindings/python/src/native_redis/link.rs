//! The native connection's runtime and links: one small tokio runtime for
//! the process, one connection per target (`ratebound_redis::connect`),
//! shared by every limiter that names it (and batches alike), with the
//! crate's `Pump` over it: its batching rule (tuned for Python threads),
//! deadlines and replies; the calls of limiters sharing a link join one
//! batch when their script does.
//!
//! **Fork.** A forked child must not use its parent's sockets nor its
//! runtime (whose threads did not survive the fork): `forked` (called in
//! the child by `os.register_at_fork`) starts a new generation, and the
//! child's next call makes a new runtime and new connections. What the
//! parent's generation held is leaked in the child, never closed or dropped
//! there (closing would touch state of threads that no longer exist).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use ratebound_redis::Pump;
use ratebound_redis::connect::{Connection, Target};
use ratebound_redis::plan::Tuning;
use tokio::runtime::Handle;

/// Bumped in a forked child (see the module docs).
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The runtime of the current generation.
static RUNTIME: Mutex<Option<(u64, Handle)>> = Mutex::new(None);

/// Every target's connection, while a limiter uses it.
static LINKS: Mutex<Option<HashMap<String, Weak<Link>>>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A forked child's first step: everything of the parent's generation is
/// left alone from here on.
pub(crate) fn forked() {
    // Ordering: Release pairs with `generation`'s Acquire: a thread that
    // sees the new generation sees everything before the fork.
    GENERATION.fetch_add(1, Ordering::Release);
}

/// The current generation.
pub(crate) fn generation() -> u64 {
    // Ordering: see `forked`.
    GENERATION.load(Ordering::Acquire)
}

/// The process's runtime (made on first use): one worker thread runs every
/// connection's I/O; sync callers wait on their own threads.
fn runtime(generation: u64) -> std::io::Result<Handle> {
    let mut rt = lock(&RUNTIME);
    if let Some((g, h)) = &*rt
        && *g == generation
    {
        return Ok(h.clone());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("ratebound-redis")
        .enable_all()
        .build()?;
    let handle = runtime.handle().clone();
    // It lives as long as the process; a parent's, in a child, is never
    // dropped either (its threads are gone).
    std::mem::forget(runtime);
    if let Some(old) = rt.replace((generation, handle.clone())) {
        std::mem::forget(old);
    }
    Ok(handle)
}

/// One target's connection, of one generation.
pub(crate) struct Link {
    /// The generation it belongs to.
    pub(crate) generation: u64,
    /// Its runtime.
    pub(crate) handle: Handle,
    /// The connection.
    pub(crate) conn: Connection,
    /// The calls on it.
    pub(crate) pump: Arc<Pump<Connection>>,
}

/// The connection for `target` (with batching on or off): the one a
/// limiter of this generation already uses, or a new one.
pub(crate) fn link_for(target: &Target, batch: bool) -> std::io::Result<Arc<Link>> {
    let generation = generation();
    let id = format!("{} batch={batch}", target.id());
    let mut links = lock(&LINKS);
    let links = links.get_or_insert_with(HashMap::new);
    if let Some(l) = links.get(&id).and_then(Weak::upgrade) {
        if l.generation == generation {
            return Ok(l);
        }
        // The parent's: see the module docs.
        std::mem::forget(l);
    }
    links.retain(|_, w| w.strong_count() > 0);
    let handle = runtime(generation)?;
    let conn = {
        let _in = handle.enter();
        target
            .connect()
            .map_err(|e| std::io::Error::other(e.to_string()))?
    };
    let tuning = batch.then_some(Tuning::THREADS);
    let pump = Pump::new(conn.clone(), tuning, target.is_cluster());
    let link = Arc::new(Link {
        generation,
        handle,
        conn,
        pump,
    });
    links.insert(id, Arc::downgrade(&link));
    Ok(link)
}

impl Link {
    /// `PUBLISH channel message` within `timeout`; whether Redis took it.
    pub(crate) async fn publish(&self, channel: &[u8], message: &[u8], timeout: Duration) -> bool {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("PUBLISH");
        cmd.arg(channel).arg(message);
        let attempt = cmd.query_async::<redis::Value>(&mut conn);
        matches!(tokio::time::timeout(timeout, attempt).await, Ok(Ok(_)))
    }
}
