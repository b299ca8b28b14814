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

use redis::Value;
use redis::aio::ConnectionLike;
use tokio::sync::oneshot;

use crate::plan::{Answer, Batch, Enter, Group, Planner, Queued, Reply, Request, Tuning};
use crate::{Call, Engine};

/// Runs `request`: `EVALSHA`, then on `NOSCRIPT` its `EVAL` once, within
/// the engine's timeout: the reply's integers, or what went wrong. A reply
/// is news for `engine` the moment it lands (Redis is alive: see
/// [`Engine::heard_from_redis`]), before any caller reads it.
async fn query<C: ConnectionLike>(
    conn: &mut C,
    request: &Request<'_>,
    engine: &Engine,
) -> Result<Vec<i64>, Answer> {
    let attempt = async {
        match request.evalsha().query_async::<Value>(conn).await {
            Err(e) if Call::is_noscript(&e) => request.eval().query_async::<Value>(conn).await,
            other => other,
        }
    };
    match tokio::time::timeout(engine.timeout(), attempt).await {
        Ok(Ok(value)) => {
            engine.heard_from_redis();
            Reply::of_value(&value)
        }
        Ok(Err(e)) => Err(Answer::Failed(crate::driver::failure_text(&e))),
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

/// One limiter's calls on one connection (shared by the limiter's clones):
/// each alone, or — batching — in the batches [`Planner`] makes.
pub struct Pump<C> {
    conn: C,
    /// The limiter's engine: its timeout, and who hears of each reply.
    engine: Arc<Engine>,
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

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Pump<C> {
    /// Calls over `conn`, each within `engine`'s timeout: batched as
    /// `tuning` says (per hash slot in a Redis Cluster: `per_slot`), or
    /// each alone (`tuning` `None`).
    pub fn new(conn: C, engine: Arc<Engine>, tuning: Option<Tuning>, per_slot: bool) -> Arc<Self> {
        Arc::new(Pump {
            conn,
            engine,
            planner: tuning.map(|t| Mutex::new(Planner::new(t, per_slot))),
        })
    }

    /// Runs `call` within the engine's timeout: alone, or (batching, while
    /// other calls are in flight) in a batch. Still queued at its deadline,
    /// it is never sent: [`Answer::Unsent`] if Redis kept answering
    /// meanwhile (the client's own overload), [`Answer::Timeout`] if Redis
    /// answered nothing for a whole deadline (a send in flight that never
    /// landed held the queue: the server's trouble). "Redis answered" is
    /// the engine's record of replies (see [`Engine::heard_from_redis`]),
    /// not the end of a send: a send that timed out on a silent server
    /// ends too.
    pub async fn run(self: &Arc<Self>, call: &Arc<Call>) -> Answer {
        let Some(planner) = &self.planner else {
            return self.send_alone(call).await;
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
                let answer = self.send_alone(call).await;
                drop(flight);
                return answer;
            }
        };
        if let Some(batch) = batch {
            launch(self.flight(group), batch);
        }
        match tokio::time::timeout(self.engine.timeout(), &mut rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Answer::Failed("the batch was dropped".to_string()),
            Err(_) => self.give_up(&fate),
        }
    }

    /// The caller of a queued call stops waiting (its deadline passed):
    /// [`Answer::Timeout`] if the call went out (it may have been decided)
    /// or never did while Redis answered nothing for a whole deadline;
    /// [`Answer::Unsent`] if it never went out while Redis kept answering.
    /// Either way a call not yet out never will be.
    fn give_up(&self, fate: &AtomicU8) -> Answer {
        // Ordering: Relaxed — see `Waiting::claim`.
        if fate
            .compare_exchange(QUEUED, ABANDONED, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return Answer::Timeout;
        }
        if self.engine.replied_lately() {
            Answer::Unsent
        } else {
            Answer::Timeout
        }
    }

    /// Sends `call` alone within the engine's timeout.
    pub async fn send_alone(&self, call: &Call) -> Answer {
        let mut conn = self.conn.clone();
        match query(&mut conn, &Request::One(call), &self.engine).await {
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

    /// Sends `batch` and hands each call its answer.
    async fn send(&self, batch: Batch<Waiting>) {
        let mut conn = self.conn.clone();
        let reply = query(&mut conn, &batch.request(), &self.engine).await;
        for (w, answer) in batch.answers(reply) {
            let _ = w.answer.send(answer);
        }
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
