//! The tokio pump over the driver core ([`crate::plan`]): one limiter's
//! calls on one connection, each alone or in the batches the planner
//! makes, each within its caller's deadline.
//!
//! Batches are sent by a spawned task, never by a caller's future: a caller
//! that gives up (its deadline passed, its future was dropped) leaves the
//! others' batch alone. Each caller waits for its own answer within its own
//! deadline; a call whose caller stopped waiting before its batch went out
//! is not sent.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionLike;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::plan::{Answer, Batch, Enter, Group, Planner, Queued, Reply, Request, Tuning, ran_late};
use crate::{Call, Engine};

/// Runs `request`: `EVALSHA`, then on `NOSCRIPT` its `EVAL` once, within
/// `timeout`: the reply's integers, or what went wrong (a deadline whose
/// timer [ran late](ran_late) is the client's own: [`Answer::Unsent`]). A
/// reply is news for
/// each engine of `heard` the moment it lands (Redis is alive: see
/// [`Engine::heard_from_redis`]), before any caller reads it.
async fn query<'e, C: ConnectionLike>(
    conn: &mut C,
    request: &Request<'_>,
    timeout: Duration,
    heard: impl IntoIterator<Item = &'e Engine>,
) -> Result<Vec<i64>, Answer> {
    let attempt = async {
        match request.evalsha().query_async::<Value>(conn).await {
            Err(e) if Call::is_noscript(&e) => request.eval().query_async::<Value>(conn).await,
            other => other,
        }
    };
    let deadline = Instant::now() + timeout;
    match tokio::time::timeout_at(deadline, attempt).await {
        Ok(Ok(value)) => {
            for engine in heard {
                engine.heard_from_redis();
            }
            Reply::of_value(&value)
        }
        Ok(Err(e)) => Err(Answer::Failed(crate::driver::failure_text(&e))),
        Err(_) if ran_late(Instant::now() - deadline, timeout) => Err(Answer::Unsent),
        Err(_) => Err(Answer::Timeout),
    }
}

/// A queued call's fate, decided once by whoever gets there first: the
/// sender taking it into a batch, or its caller giving up.
const QUEUED: u8 = 0;
const TAKEN: u8 = 1;
const ABANDONED: u8 = 2;

/// A call waiting for its batch, and where its answer goes.
struct Waiting {
    call: Arc<Call>,
    /// The engine of the limiter that made it.
    engine: Arc<Engine>,
    answer: oneshot::Sender<Answer>,
    fate: Arc<AtomicU8>,
}

impl Queued for Waiting {
    fn call(&self) -> &Call {
        &self.call
    }

    fn claim(&self) -> bool {
        // Invariant: a call goes out only if its caller has not given up.
        // Ordering: Relaxed — the CAS alone decides who owns the call's
        // fate; no other memory is published through it.
        !self.answer.is_closed()
            && self
                .fate
                .compare_exchange(QUEUED, TAKEN, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

/// Calls on one connection — one limiter's (a [`RedisLimiter`](crate::RedisLimiter)
/// and its clones), or every limiter's that shares the connection (the
/// Python binding's native connection) —, each within its engine's
/// timeout: each alone, or — batching — in the batches [`Planner`] makes
/// (calls of different limiters join when their script does).
pub struct Pump<C> {
    conn: C,
    /// The batching state; `None`: every call goes alone.
    planner: Option<Mutex<Planner<Waiting>>>,
}

impl<C> std::fmt::Debug for Pump<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pump")
            .field("batching", &self.planner.is_some())
            .field("per_slot", &self.per_slot())
            .finish_non_exhaustive()
    }
}

impl<C> Pump<C> {
    /// Whether calls are batched per hash slot (`false` without batching).
    pub fn per_slot(&self) -> bool {
        self.planner.as_ref().is_some_and(|p| lock(p).per_slot())
    }

    /// The batching tuning, if calls are batched.
    pub fn tuning(&self) -> Option<Tuning> {
        self.planner.as_ref().map(|p| lock(p).tuning())
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Pump<C> {
    /// Calls over `conn`: batched as `tuning` says (per hash slot in a
    /// Redis Cluster: `per_slot`), or each alone (`tuning` `None`).
    pub fn new(conn: C, tuning: Option<Tuning>, per_slot: bool) -> Arc<Self> {
        Arc::new(Pump {
            conn,
            planner: tuning.map(|t| Mutex::new(Planner::new(t, per_slot))),
        })
    }

    /// Runs `call` of `engine` within its timeout: alone, or (batching, while
    /// other calls are in flight) in a batch. Still queued at its deadline,
    /// it is never sent: [`Answer::Unsent`] if Redis kept answering
    /// meanwhile (the client's own overload), [`Answer::Timeout`] if Redis
    /// answered nothing for a whole deadline (a send in flight that never
    /// landed held the queue: the server's trouble). "Redis answered" is
    /// the engine's record of replies (see [`Engine::heard_from_redis`]),
    /// not the end of a send: a send that timed out on a silent server
    /// ends too.
    pub async fn run(self: &Arc<Self>, call: &Arc<Call>, engine: &Arc<Engine>) -> Answer {
        let Some(planner) = &self.planner else {
            return self.send_alone(call, engine).await;
        };
        // One critical section from `enter` to `queue`: a send landing in
        // between would find nothing queued and leave this call behind.
        let queued = {
            let mut plan = lock(planner);
            match plan.enter(call) {
                Enter::Alone(group) => Err(group),
                Enter::Queue(group) => {
                    let (answer, rx) = oneshot::channel();
                    let fate = Arc::new(AtomicU8::new(QUEUED));
                    let waiting = Waiting {
                        call: Arc::clone(call),
                        engine: Arc::clone(engine),
                        answer,
                        fate: Arc::clone(&fate),
                    };
                    Ok((group, plan.queue(group, waiting), rx, fate))
                }
            }
        };
        let (group, batch, mut rx, fate) = match queued {
            Ok(q) => q,
            Err(group) => {
                let flight = self.flight(group);
                let answer = self.send_alone(call, engine).await;
                drop(flight);
                return answer;
            }
        };
        if let Some(batch) = batch {
            launch(self.flight(group), batch);
        }
        let deadline = Instant::now() + engine.timeout();
        match tokio::time::timeout_at(deadline, &mut rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Answer::Failed("the batch was dropped".to_string()),
            Err(_) => give_up(&fate, engine, Instant::now() - deadline),
        }
    }

    /// Runs `calls` together at once, not queued behind the sends in
    /// flight (an event loop's turn: the calls its tasks made in one turn
    /// go out as soon as the turn ends): those that join as one batch each
    /// ([`Planner::together`]), every other call alone; each call's answer
    /// within its engine's timeout, in order.
    pub async fn run_together(
        self: &Arc<Self>,
        calls: Vec<(Arc<Call>, Arc<Engine>)>,
    ) -> Vec<Answer> {
        let start = Instant::now();
        let mut waits = Vec::with_capacity(calls.len());
        let waiting: Vec<Waiting> = calls
            .into_iter()
            .map(|(call, engine)| {
                let (answer, rx) = oneshot::channel();
                waits.push((rx, engine.timeout()));
                Waiting {
                    call,
                    engine,
                    answer,
                    fate: Arc::new(AtomicU8::new(QUEUED)),
                }
            })
            .collect();
        let batches = match &self.planner {
            Some(planner) => lock(planner).together(waiting),
            None => waiting.into_iter().map(Batch::alone).collect(),
        };
        // Every send at once, here (no task per send, no hop between a
        // reply and its callers), each caller's answer within its own
        // deadline meanwhile.
        let sends = futures_util::future::join_all(batches.into_iter().map(|b| self.send(b)));
        let answers = futures_util::future::join_all(waits.into_iter().map(|(rx, timeout)| {
            let deadline = start + timeout;
            async move {
                match tokio::time::timeout_at(deadline, rx).await {
                    Ok(Ok(answer)) => answer,
                    Ok(Err(_)) => Answer::Failed("the batch was dropped".to_string()),
                    Err(_) if ran_late(Instant::now() - deadline, timeout) => Answer::Unsent,
                    Err(_) => Answer::Timeout,
                }
            }
        }));
        futures_util::future::join(sends, answers).await.1
    }

    /// Sends `call` of `engine` alone within its timeout.
    pub async fn send_alone(&self, call: &Call, engine: &Engine) -> Answer {
        let mut conn = self.conn.clone();
        match query(&mut conn, &Request::One(call), engine.timeout(), [engine]).await {
            Ok(reply) => Answer::Reply(reply),
            Err(a) => a,
        }
    }

    /// A send of `group`, counted as in flight until dropped.
    fn flight(self: &Arc<Self>, group: Group) -> Flight<C> {
        Flight {
            pump: self.clone(),
            group,
            armed: true,
        }
    }

    /// The group's next batch, still counted as in flight; or, when
    /// nothing waits, the send no longer counted (`None`).
    fn next(&self, group: Group) -> Option<Batch<Waiting>> {
        lock(self.planner.as_ref()?).landed(group)
    }

    /// Sends `batch` (within the longest timeout of its calls' engines)
    /// and hands each call its answer.
    async fn send(&self, batch: Batch<Waiting>) {
        let mut engines: Vec<&Engine> = Vec::new();
        for w in batch.calls() {
            if !engines.iter().any(|e| std::ptr::eq(*e, &*w.engine)) {
                engines.push(&w.engine);
            }
        }
        let timeout = engines
            .iter()
            .map(|e| e.timeout())
            .max()
            .unwrap_or_default();
        let mut conn = self.conn.clone();
        let reply = query(&mut conn, &batch.request(), timeout, engines).await;
        for (w, answer) in batch.answers(reply) {
            let _ = w.answer.send(answer);
        }
    }
}

/// The caller of a queued call of `engine` stops waiting, its deadline's
/// timer `overshoot` late: [`Answer::Unsent`] — the client's own overload —
/// if that timer [ran late](ran_late), or if the call never went out while
/// Redis kept answering; otherwise [`Answer::Timeout`]: the call went out
/// (it may have been decided), or never did while Redis answered nothing
/// for a whole deadline. Either way a call not yet out never will be.
fn give_up(fate: &AtomicU8, engine: &Engine, overshoot: Duration) -> Answer {
    if ran_late(overshoot, engine.timeout()) {
        // Ordering: Relaxed — see `Waiting::claim`.
        let _ = fate.compare_exchange(QUEUED, ABANDONED, Ordering::Relaxed, Ordering::Relaxed);
        return Answer::Unsent;
    }
    // Ordering: Relaxed — see `Waiting::claim`.
    if fate
        .compare_exchange(QUEUED, ABANDONED, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return Answer::Timeout;
    }
    if engine.replied_lately() {
        Answer::Unsent
    } else {
        Answer::Timeout
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while the lock was held left consistent state (every change
    // is one statement): go on with it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One send of a group in flight. Dropped (the send landed, or the future
/// carrying it was dropped), it lets the group's queue go: a spawned task
/// sends batch after batch until nothing waits.
struct Flight<C: ConnectionLike + Clone + Send + Sync + 'static> {
    pump: Arc<Pump<C>>,
    group: Group,
    /// Still counted as in flight.
    armed: bool,
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Drop for Flight<C> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.armed = false;
        if let Some(batch) = self.pump.next(self.group) {
            launch(self.pump.flight(self.group), batch);
        }
    }
}

/// Sends `batch` (and the group's next ones) from a task of its own on the
/// current runtime. Without one (a flight dropped outside any runtime) the
/// batch's callers hear that it was dropped, and the flight's drop tries
/// the next batch.
fn launch<C: ConnectionLike + Clone + Send + Sync + 'static>(
    flight: Flight<C>,
    batch: Batch<Waiting>,
) {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn(fly(flight, batch));
        }
        Err(_) => drop((batch, flight)),
    }
}

/// A spawned task's work: `batch`, then the group's next batches while
/// calls wait. If the task is dropped (its runtime shut down), the calls
/// of the batch in hand hear that it was dropped and `flight` lets the
/// rest go.
async fn fly<C: ConnectionLike + Clone + Send + Sync + 'static>(
    mut flight: Flight<C>,
    batch: Batch<Waiting>,
) {
    let mut batch = Some(batch);
    while let Some(b) = batch.take() {
        flight.pump.send(b).await;
        batch = flight.pump.next(flight.group);
    }
    flight.armed = false;
}
