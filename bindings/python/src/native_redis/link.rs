//! The native connection: one small tokio runtime for the process, one
//! multiplexed connection per target (shared by every limiter that names
//! it), each call within its deadline, and batching: while script runs of
//! a group (the connection, or a cluster's hash slot) are in flight, a sync
//! caller's new call queues, and the queue goes out as one batch script run
//! as soon as a run lands (`run`); an asyncio loop's calls of one turn go
//! out together at once (`send_now`, see `aio`). The calls on the wire
//! (`RunResult`, `Conn`) are `conn`'s.
//!
//! **Fork.** A forked child must not use its parent's sockets nor its
//! runtime (whose threads did not survive the fork): `forked` (called in
//! the child by `os.register_at_fork`) starts a new generation, and the
//! child's next call makes a new runtime and new connections. What the
//! parent's generation held is leaked in the child, never closed or dropped
//! there (closing would touch state of threads that no longer exist).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared, join_all};
use ratebound_redis::{BatchCall, Call};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::Slot;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::conn::{Conn, RunResult, failure_text};
use super::target::{CONNECT_TIMEOUT, Kind, Target};

/// How many script runs of one group (the connection, or a cluster's hash
/// slot) are in flight before new calls queue for the next batch.
///
/// Two, not the Rust driver's one: measured here (2 cores, median of 3
/// one-second rounds of 1/16/64 threads and asyncio tasks, 10 000 keys),
/// one in flight gave 28.7k/27.1k decisions/s at 16 threads and 38.6k/35.1k
/// with 64 asyncio tasks, two gave 44.6k/42.6k and 47.5k/55.7k: a Python
/// caller takes longer to come back with its next call, and a second run in
/// flight keeps Redis busy while the next batch forms.
const IN_FLIGHT: usize = 2;

// ------------------------------------------------------------- runtime

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

/// The connection for `target` (with batching on or off): the one a
/// limiter of this generation already uses, or a new one.
pub(crate) fn link_for(target: &Arc<Target>, batch: bool) -> std::io::Result<Arc<Link>> {
    let generation = generation();
    let id = format!("{} batch={batch}", target.id);
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
    let link = Arc::new(Link::new(generation, handle, target.clone(), batch)?);
    links.insert(id, Arc::downgrade(&link));
    Ok(link)
}

type Connecting = Shared<BoxFuture<'static, Result<ClusterConnection, String>>>;

/// How a link gets its connection.
enum Connector {
    /// The `redis` crate's manager: connects on first use and reconnects
    /// (once per failed call: no retries of its own) when the connection is
    /// lost.
    Single(ConnectionManager),
    /// A cluster connection, made in a task of its own (a call waits for
    /// it within its deadline; a failed attempt is made again by the next
    /// call).
    Cluster {
        client: Box<redis::cluster::ClusterClient>,
        current: Mutex<Option<Connecting>>,
    },
}

/// A call waiting for the next batch.
struct Pending {
    /// Tells it apart in its queue (0: a call of an asyncio turn, never
    /// looked for).
    id: u64,
    call: Call,
    slot: Option<Slot>,
    deadline: Instant,
    done: oneshot::Sender<RunResult>,
}

#[derive(Default)]
struct Queue {
    in_flight: usize,
    pending: VecDeque<Pending>,
}

/// One target's connection (see the module docs).
pub(crate) struct Link {
    /// The generation it belongs to.
    pub(crate) generation: u64,
    /// Its runtime.
    pub(crate) handle: Handle,
    /// Where it goes.
    pub(crate) target: Arc<Target>,
    connector: Connector,
    batch: bool,
    /// Each group's queue: the whole connection (`None`), or in a cluster
    /// each hash slot (a batch's keys share one slot).
    queues: Mutex<HashMap<Option<Slot>, Queue>>,
    /// The last id given to a queued call.
    ids: AtomicU64,
    /// When it was made, and when a reply last landed on it (ns after
    /// `born`; 0: never): a queue held up by a server that answered
    /// nothing for a whole deadline is the server's trouble, not the
    /// client's overload (see `unqueue`).
    born: Instant,
    landed: AtomicU64,
}

impl Link {
    fn new(
        generation: u64,
        handle: Handle,
        target: Arc<Target>,
        batch: bool,
    ) -> std::io::Result<Link> {
        let connector = match &target.kind {
            Kind::Single(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(None)
                    .set_number_of_retries(0);
                let _in = handle.enter();
                let manager = ConnectionManager::new_lazy_with_config(client.clone(), config)
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                // Connect now, so that the first call does not wait for it.
                let mut warm = manager.clone();
                handle.spawn(async move {
                    let _ = redis::cmd("PING")
                        .query_async::<redis::Value>(&mut warm)
                        .await;
                });
                Connector::Single(manager)
            }
            Kind::Cluster { client, .. } => Connector::Cluster {
                client: Box::new(client.clone()),
                current: Mutex::new(None),
            },
        };
        let link = Link {
            generation,
            handle,
            target,
            connector,
            batch,
            queues: Mutex::new(HashMap::new()),
            ids: AtomicU64::new(0),
            born: Instant::now(),
            landed: AtomicU64::new(0),
        };
        if let Connector::Cluster { .. } = link.connector {
            // Read the topology now (in the background).
            let _ = link.connecting();
        }
        Ok(link)
    }

    fn connecting(&self) -> Option<Connecting> {
        let Connector::Cluster { client, current } = &self.connector else {
            return None;
        };
        let mut cur = lock(current);
        if let Some(f) = &*cur
            && !matches!(f.peek(), Some(Err(_)))
        {
            return Some(f.clone());
        }
        let client = (**client).clone();
        let task = self.handle.spawn(async move {
            let config = redis::cluster::ClusterConfig::new()
                .set_connection_timeout(CONNECT_TIMEOUT)
                .set_response_timeout(CONNECT_TIMEOUT);
            client
                .get_async_connection_with_config(config)
                .await
                .map_err(|e| failure_text(&e))
        });
        let f: Connecting = async move { task.await.unwrap_or_else(|e| Err(e.to_string())) }
            .boxed()
            .shared();
        *cur = Some(f.clone());
        Some(f)
    }

    async fn conn(&self) -> Result<Conn, String> {
        match &self.connector {
            Connector::Single(m) => Ok(Conn::Single(m.clone())),
            Connector::Cluster { .. } => match self.connecting() {
                Some(f) => f.await.map(Conn::Cluster),
                None => Err("no cluster connection".to_string()),
            },
        }
    }

    async fn send_one(&self, call: &Call) -> RunResult {
        let mut conn = match self.conn().await {
            Ok(c) => c,
            Err(e) => return RunResult::Failed(e),
        };
        let key: &[u8] = &call.key;
        match conn
            .script(call.script, &[key], &call.args, || call.commands())
            .await
        {
            Ok(v) => {
                self.heard();
                RunResult::Reply(v)
            }
            Err(e) => RunResult::Failed(failure_text(&e)),
        }
    }

    /// `PUBLISH channel message` within `timeout`; whether Redis took it.
    pub(crate) async fn publish(&self, channel: &[u8], message: &[u8], timeout: Duration) -> bool {
        let attempt = async {
            let mut conn = self.conn().await.ok()?;
            let mut cmd = redis::cmd("PUBLISH");
            cmd.arg(channel).arg(message);
            conn.unit(&cmd).await.ok()
        };
        matches!(tokio::time::timeout(timeout, attempt).await, Ok(Some(_)))
    }

    /// Runs `call` within `timeout`: alone, or in the next batch while
    /// others are in flight (see the module docs).
    pub(crate) async fn run(self: &Arc<Self>, call: &Call, timeout: Duration) -> RunResult {
        let deadline = Instant::now() + timeout;
        if !self.batch {
            return tokio::time::timeout_at(deadline, self.send_one(call))
                .await
                .unwrap_or(RunResult::Timeout);
        }
        let slot =
            matches!(self.connector, Connector::Cluster { .. }).then(|| Slot::for_key(&call.key));
        let waiting = {
            let mut queues = lock(&self.queues);
            let q = queues.entry(slot).or_default();
            if q.pending.is_empty() && q.in_flight < IN_FLIGHT {
                q.in_flight += 1;
                None
            } else {
                let (done, rx) = oneshot::channel();
                // Ordering: Relaxed — only uniqueness matters.
                let id = self.ids.fetch_add(1, Ordering::Relaxed) + 1;
                q.pending.push_back(Pending {
                    id,
                    call: call.clone(),
                    slot,
                    deadline,
                    done,
                });
                Some((id, rx))
            }
        };
        match waiting {
            None => {
                let _slot = InFlight(self.clone(), slot);
                tokio::time::timeout_at(deadline, self.send_one(call))
                    .await
                    .unwrap_or(RunResult::Timeout)
            }
            Some((id, mut rx)) => match tokio::time::timeout_at(deadline, &mut rx).await {
                Ok(Ok(r)) => r,
                Ok(Err(_)) => RunResult::Timeout,
                Err(_) => self.unqueue(slot, id, timeout),
            },
        }
    }

    /// What became of the queued call `id` of group `slot` at its deadline
    /// (`timeout` after it began): still queued, it is taken out and was
    /// never sent — `Unsent` (the client's own back-pressure) if replies
    /// kept landing meanwhile, `Timeout` if the runs ahead of it were held
    /// up by a server that answered nothing for a whole deadline (the
    /// server's trouble, as the Rust driver's batcher reads it); otherwise
    /// it went out in a batch that did not answer in time.
    fn unqueue(&self, slot: Option<Slot>, id: u64, timeout: Duration) -> RunResult {
        let mut queues = lock(&self.queues);
        if let Some(q) = queues.get_mut(&slot)
            && let Some(i) = q.pending.iter().position(|p| p.id == id)
        {
            q.pending.remove(i);
            // Ordering: Relaxed — a timestamp read for a heuristic; no
            // other memory is published through it.
            let landed = self.landed.load(Ordering::Relaxed);
            let now = self.born.elapsed().as_nanos() as u64;
            let recent = landed > 0 && now.saturating_sub(landed) < timeout.as_nanos() as u64;
            return if recent {
                RunResult::Unsent
            } else {
                RunResult::Timeout
            };
        }
        RunResult::Timeout
    }

    /// Notes that Redis replied just now.
    fn heard(&self) {
        let now = (self.born.elapsed().as_nanos() as u64).max(1);
        // Ordering: Relaxed — see `unqueue`.
        self.landed.store(now, Ordering::Relaxed);
    }

    /// Sends `calls` (each with its deadline) at once, those that join as
    /// one batch script run (per hash slot in a cluster; one run per call
    /// without batching): what became of each, in order. For the calls an
    /// asyncio loop made in one turn (see `aio`): the turn is the batch.
    pub(crate) async fn send_now(&self, calls: Vec<(Call, Instant)>) -> Vec<RunResult> {
        let cluster = matches!(self.connector, Connector::Cluster { .. });
        let mut answers = Vec::with_capacity(calls.len());
        let pending = calls
            .into_iter()
            .map(|(call, deadline)| {
                let (done, rx) = oneshot::channel();
                answers.push((rx, deadline));
                let slot = cluster.then(|| Slot::for_key(&call.key));
                Pending {
                    id: 0,
                    call,
                    slot,
                    deadline,
                    done,
                }
            })
            .collect();
        let waits = answers.into_iter().map(|(rx, deadline)| async move {
            match tokio::time::timeout_at(deadline, rx).await {
                Ok(Ok(r)) => r,
                // No answer by the call's own deadline (or none at all).
                _ => RunResult::Timeout,
            }
        });
        futures_util::future::join(self.send_batch(pending), join_all(waits))
            .await
            .1
    }

    /// The next batch, if calls wait and a run may start (it counts as in
    /// flight from here). A call whose caller gave up meanwhile is not sent.
    fn next_batch(q: &mut Queue) -> Option<Vec<Pending>> {
        q.pending.retain(|p| !p.done.is_closed());
        if q.pending.is_empty() || q.in_flight >= IN_FLIGHT {
            return None;
        }
        q.in_flight += 1;
        let n = q.pending.len().min(BatchCall::MAX);
        Some(q.pending.drain(..n).collect())
    }

    fn released(self: &Arc<Self>, slot: Option<Slot>) {
        let next = {
            let mut queues = lock(&self.queues);
            let Some(q) = queues.get_mut(&slot) else {
                return;
            };
            q.in_flight -= 1;
            let next = Link::next_batch(q);
            if q.in_flight == 0 && q.pending.is_empty() {
                queues.remove(&slot);
            }
            next
        };
        if let Some(batch) = next {
            let link = self.clone();
            self.handle.spawn(async move {
                let _slot = InFlight(link.clone(), slot);
                link.send_batch(batch).await;
            });
        }
    }

    /// Sends queued calls: those of one script, clock and hash slot as one
    /// batch script run each, in their order; the runs go out one after
    /// another on the connection.
    async fn send_batch(&self, pending: Vec<Pending>) {
        let until = pending
            .iter()
            .map(|p| p.deadline)
            .max()
            .unwrap_or_else(Instant::now);
        // Grouped by what joins one batch (and, in a cluster, by hash slot:
        // no CROSSSLOT), each group in its calls' order; calls of different
        // groups never share a key (another script, another slot) but for
        // explicit clocks, which only test vectors use.
        let mut groups: Vec<Vec<Pending>> = Vec::new();
        let mut index: HashMap<(usize, String, usize, Option<Slot>), usize> = HashMap::new();
        for p in pending {
            if !self.batch {
                groups.push(vec![p]);
                continue;
            }
            let k = (
                std::ptr::from_ref(p.call.script) as usize,
                p.call.args.first().cloned().unwrap_or_default(),
                p.call.args.len(),
                p.slot,
            );
            match index.get(&k) {
                Some(&i) if groups[i].len() < BatchCall::MAX => groups[i].push(p),
                _ => {
                    index.insert(k, groups.len());
                    groups.push(vec![p]);
                }
            }
        }
        let runs = groups.into_iter().map(|g| self.send_group(g));
        let _ = tokio::time::timeout_at(until, join_all(runs)).await;
    }

    async fn send_group(&self, group: Vec<Pending>) {
        if group.len() == 1 {
            let p = group.into_iter().next().expect("one");
            let r = self.send_one(&p.call).await;
            let _ = p.done.send(r);
            return;
        }
        let calls: Vec<&Call> = group.iter().map(|p| &p.call).collect();
        let Some(batch) = BatchCall::of(&calls) else {
            // Not one batch after all (cannot happen: grouped by what joins).
            for p in group {
                let r = self.send_one(&p.call).await;
                let _ = p.done.send(r);
            }
            return;
        };
        let keys: Vec<&[u8]> = batch.keys.iter().map(Vec::as_slice).collect();
        let reply = match self.conn().await {
            Ok(mut c) => c
                .script(batch.script, &keys, &batch.args, || batch.commands())
                .await
                .map_err(|e| failure_text(&e)),
            Err(e) => Err(e),
        };
        if reply.is_ok() {
            self.heard();
        }
        match reply {
            Ok(reply) => match BatchCall::replies(&reply, group.len()) {
                Some(parts) => {
                    for (p, part) in group.into_iter().zip(parts) {
                        let _ = p.done.send(RunResult::Reply(part.to_vec()));
                    }
                }
                None => {
                    for p in group {
                        let _ = p.done.send(RunResult::Malformed);
                    }
                }
            },
            Err(e) => {
                for p in group {
                    let _ = p.done.send(RunResult::Failed(e.clone()));
                }
            }
        }
    }
}

/// A script run in flight; when it is over (or its caller gave up), the
/// next batch may go.
struct InFlight(Arc<Link>, Option<Slot>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.released(self.1);
    }
}
