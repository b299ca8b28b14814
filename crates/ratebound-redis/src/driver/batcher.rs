//! Batching for the Rust driver: the calls in flight together on one
//! connection go out as one script run over many keys ([`BatchCall`]).
//!
//! The rule (every driver's): a call is sent alone, by its caller, when
//! nothing of its group is in flight; otherwise it waits in its group's
//! queue, and the queue goes out as one batch (at most [`BatchCall::MAX`]
//! calls that [join](BatchCall::joins)) as soon as the send in flight
//! lands — or at once, as a second send in flight, when [`SECOND`] calls
//! wait (never more than [`SENDS`] at a time). So one caller in flight
//! never waits for a batch, and many form batches. A group is the whole
//! connection, or in a Redis Cluster one hash slot (the keys of one script
//! run must share a slot).
//!
//! Batches are sent by a spawned task, never by a caller's future: a caller
//! that gives up (its deadline passed, its future was dropped) leaves the
//! others' batch alone. Each caller waits for its own answer within its own
//! deadline; a call whose caller stopped waiting before its batch went out
//! is not sent.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use redis::Value;
use redis::aio::ConnectionLike;
use redis::cluster_routing::Slot;
use tokio::sync::oneshot;

use crate::{BatchCall, Call, CallOutcome, Engine};

/// Sends of one group in flight at most.
pub(crate) const SENDS: usize = 2;

/// How many calls must wait for a second send to go before the first
/// lands. One send at a time leaves Redis idle while a reply travels and
/// the next batch is made; two keep it busy, but a second send for a few
/// calls makes small batches, and Redis spends more per decision. Measured
/// with `benches/src/bin/redis_throughput.rs` on a busy 2-core machine
/// (one limiter; Redis' CPU per decision from `INFO cpu`), medians of 3: at
/// 64 in flight a second send at 16 waiting gave 87 k decisions/s (6.4–7.6
/// µs of Redis CPU each), one send 85 k/s (6.2–6.4 µs), a second send for
/// any call 41 k/s (6.9–7.1 µs); at 16 in flight (where 16 never wait
/// behind one send) a second send for any call cost 9.8–10.6 µs of Redis
/// CPU per decision against 8.0–9.0 µs.
pub(crate) const SECOND: usize = 16;

/// What became of one call, owned: it crosses from the sending task to the
/// caller.
#[derive(Debug)]
pub(crate) enum Answer {
    /// The script's reply (for a batch, this call's seven integers).
    Reply(Vec<i64>),
    /// A reply that is not a list of integers, or a batch's of the wrong
    /// length.
    Malformed,
    /// No answer within the deadline.
    Timeout,
    /// A connection or server error.
    Failed(String),
    /// The call never went out: its caller's deadline passed while it
    /// still waited in the queue (the client's own overload).
    Unsent,
}

impl Answer {
    /// As the engine reads it.
    pub(crate) fn outcome(&self) -> CallOutcome<'_> {
        match self {
            Answer::Reply(r) => CallOutcome::Reply(r),
            Answer::Malformed => CallOutcome::Malformed,
            Answer::Timeout => CallOutcome::Timeout,
            Answer::Failed(e) => CallOutcome::Failed(e),
            Answer::Unsent => CallOutcome::Unsent,
        }
    }

    /// Whether Redis answered (with anything).
    pub(crate) fn replied(&self) -> bool {
        matches!(self, Answer::Reply(_))
    }
}

/// Runs `evalsha`, then on `NOSCRIPT` the `EVAL` that `eval` makes (it
/// carries the script's text: made only when needed), within the engine's
/// timeout: the reply's integers, or what went wrong. A reply is news for
/// `engine` the moment it lands (Redis is alive: see
/// [`Engine::heard_from_redis`]), before any caller reads it.
async fn query<C: ConnectionLike>(
    conn: &mut C,
    evalsha: redis::Cmd,
    eval: impl FnOnce() -> redis::Cmd,
    engine: &Engine,
) -> Result<Vec<i64>, Answer> {
    let timeout = engine.timeout();
    let attempt = async {
        match evalsha.query_async::<Value>(conn).await {
            Err(e) if Call::is_noscript(&e) => eval().query_async::<Value>(conn).await,
            other => other,
        }
    };
    let result = tokio::time::timeout(timeout, attempt).await;
    if let Ok(Ok(_)) = &result {
        engine.heard_from_redis();
    }
    match result {
        Ok(Ok(Value::Array(items))) => items
            .iter()
            .map(|v| match v {
                Value::Int(i) => Some(*i),
                _ => None,
            })
            .collect::<Option<Vec<i64>>>()
            .ok_or(Answer::Malformed),
        Ok(Ok(_)) => Err(Answer::Malformed),
        Ok(Err(e)) => Err(Answer::Failed(e.to_string())),
        Err(_) => Err(Answer::Timeout),
    }
}

/// Sends `call` alone within the engine's timeout.
pub(crate) async fn send_one<C: ConnectionLike + Clone>(
    conn: &C,
    call: &Call,
    engine: &Engine,
) -> Answer {
    let mut conn = conn.clone();
    match query(&mut conn, call.evalsha(), || call.eval(), engine).await {
        Ok(reply) => Answer::Reply(reply),
        Err(a) => a,
    }
}

/// A queued call's fate, decided once by whoever gets there first: the
/// sender taking it into a batch, or its caller giving up.
const QUEUED: u8 = 0;
const TAKEN: u8 = 1;
const ABANDONED: u8 = 2;

/// A queued call's handle for its caller (see [`Entry::Queued`]).
pub(crate) struct Ticket {
    pub(crate) answer: oneshot::Receiver<Answer>,
    fate: Arc<AtomicU8>,
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Batcher<C> {
    /// The caller of `ticket` stops waiting (its deadline passed):
    /// [`Answer::Timeout`] if the call went out (it may have been decided),
    /// or if it never did while Redis answered nothing for a whole
    /// deadline — its group's sends were held up by a silent server, the
    /// server's trouble; [`Answer::Unsent`] if it never went out while
    /// Redis kept answering — the client's own queue was too long. Either
    /// way a call not yet out never will be.
    ///
    /// "Redis answered" is the engine's record of replies (see
    /// [`Engine::heard_from_redis`]), not the end of a send: a send that
    /// timed out on a silent server ends too, and once made a caller that
    /// gave up beside it (or that it left queued behind a full batch) look
    /// like the client's own overload — `busy` rather than the fail policy.
    pub(crate) fn give_up(&self, ticket: &Ticket) -> Answer {
        // Ordering: Relaxed — the CAS alone decides who owns the call's
        // fate; no other memory is published through it.
        if ticket
            .fate
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
}

/// A call waiting for its batch, and where its answer goes.
struct Waiter {
    call: Arc<Call>,
    answer: oneshot::Sender<Answer>,
    fate: Arc<AtomicU8>,
}

/// One group's state: the calls waiting, the sends in flight.
#[derive(Default)]
struct Group {
    waiting: VecDeque<Waiter>,
    sending: usize,
}

impl Group {
    /// The next batch: the oldest waiting call and up to
    /// [`BatchCall::MAX`] − 1 later ones that join it, in order; calls
    /// whose caller stopped waiting are dropped. Empty when nothing waits.
    fn take(&mut self) -> Vec<Waiter> {
        let mut batch: Vec<Waiter> = Vec::new();
        let mut rest = VecDeque::new();
        while let Some(w) = self.waiting.pop_front() {
            // Ordering: Relaxed — see `Ticket::give_up`.
            if w.answer.is_closed() || w.fate.load(Ordering::Relaxed) == ABANDONED {
                continue;
            }
            if batch.len() == BatchCall::MAX {
                rest.push_back(w);
                rest.append(&mut self.waiting);
                break;
            }
            match batch.first() {
                Some(first) if !BatchCall::joins(&first.call, &w.call) => rest.push_back(w),
                // Invariant: a call goes out only if its caller has not
                // given up; one that gave up is dropped from the queue.
                _ if w
                    .fate
                    .compare_exchange(QUEUED, TAKEN, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok() =>
                {
                    batch.push(w)
                }
                _ => {}
            }
        }
        self.waiting = rest;
        batch
    }
}

/// How a caller's call goes (see [`Batcher::enter`]).
pub(crate) enum Entry<C: ConnectionLike + Clone + Send + Sync + 'static> {
    /// Send it yourself; dropping the [`Flight`] lets the group's queue go.
    Alone(Flight<C>),
    /// Wait for its answer (or [give up](Ticket::give_up)).
    Queued(Ticket),
}

/// The batching state of one limiter (shared by its clones).
pub(crate) struct Batcher<C> {
    conn: C,
    /// The limiter's engine: its timeout, and who hears of each reply.
    engine: Arc<Engine>,
    /// Group by hash slot (a Redis Cluster), or all calls in one group.
    per_slot: bool,
    groups: Mutex<HashMap<Option<Slot>, Group>>,
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Batcher<C> {
    /// Batching over `conn`, each send within `engine`'s timeout.
    pub(crate) fn new(conn: C, engine: Arc<Engine>, per_slot: bool) -> Arc<Batcher<C>> {
        Arc::new(Batcher {
            conn,
            engine,
            per_slot,
            groups: Mutex::new(HashMap::new()),
        })
    }

    /// Whether calls are grouped by hash slot.
    pub(crate) fn per_slot(&self) -> bool {
        self.per_slot
    }

    fn groups(&self) -> std::sync::MutexGuard<'_, HashMap<Option<Slot>, Group>> {
        // A panic while the lock was held left a consistent map (every
        // change is one statement): go on with it.
        self.groups.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where `call` goes: alone (nothing of its group in flight) or into
    /// its group's queue — which goes at once, from a spawned task, when
    /// [`SECOND`] calls wait and a send is free.
    pub(crate) fn enter(self: &Arc<Self>, call: &Arc<Call>) -> Entry<C> {
        let slot = self.per_slot.then(|| Slot::for_key(&call.key));
        let mut groups = self.groups();
        let group = groups.entry(slot).or_default();
        if group.sending == 0 && group.waiting.is_empty() {
            group.sending += 1;
            return Entry::Alone(self.flight(slot));
        }
        let (answer, rx) = oneshot::channel();
        let fate = Arc::new(AtomicU8::new(QUEUED));
        group.waiting.push_back(Waiter {
            call: Arc::clone(call),
            answer,
            fate: Arc::clone(&fate),
        });
        if group.sending < SENDS && group.waiting.len() >= SECOND {
            let batch = group.take();
            if !batch.is_empty() {
                group.sending += 1;
                drop(groups);
                launch(self.flight(slot), batch);
            }
        }
        Entry::Queued(Ticket { answer: rx, fate })
    }

    /// A send of `slot`'s group, counted in its `sending`.
    fn flight(self: &Arc<Self>, slot: Option<Slot>) -> Flight<C> {
        Flight {
            batcher: self.clone(),
            slot,
            armed: true,
        }
    }

    /// The group's next batch, still counted as in flight; or, when
    /// nothing waits, the send no longer counted (`None`).
    fn next(&self, slot: Option<Slot>) -> Option<Vec<Waiter>> {
        let mut groups = self.groups();
        let group = groups.get_mut(&slot)?;
        let batch = group.take();
        if !batch.is_empty() {
            return Some(batch);
        }
        group.sending = group.sending.saturating_sub(1);
        // A cluster's groups come and go with their slots; the one group
        // of a standalone connection stays.
        if self.per_slot && group.sending == 0 && group.waiting.is_empty() {
            groups.remove(&slot);
        }
        None
    }

    /// Sends `batch` and hands each call its answer.
    async fn send(&self, batch: Vec<Waiter>) {
        if let [one] = &batch[..] {
            let answer = send_one(&self.conn, &one.call, &self.engine).await;
            if let Some(w) = batch.into_iter().next() {
                let _ = w.answer.send(answer);
            }
            return;
        }
        let calls: Vec<&Call> = batch.iter().map(|w| &*w.call).collect();
        let Some(many) = BatchCall::of(&calls) else {
            // Cannot happen (a batch holds calls that join); answer each
            // alone rather than fail them.
            for w in batch {
                let answer = send_one(&self.conn, &w.call, &self.engine).await;
                let _ = w.answer.send(answer);
            }
            return;
        };
        let mut conn = self.conn.clone();
        match query(&mut conn, many.evalsha(), || many.eval(), &self.engine).await {
            Ok(reply) => match BatchCall::replies(&reply, batch.len()) {
                Some(parts) => {
                    for (w, part) in batch.into_iter().zip(parts) {
                        let _ = w.answer.send(Answer::Reply(part.to_vec()));
                    }
                }
                None => {
                    for w in batch {
                        let _ = w.answer.send(Answer::Malformed);
                    }
                }
            },
            Err(failure) => {
                for w in batch {
                    let _ = w.answer.send(match &failure {
                        Answer::Failed(e) => Answer::Failed(e.clone()),
                        Answer::Timeout => Answer::Timeout,
                        _ => Answer::Malformed,
                    });
                }
            }
        }
    }
}

/// One send of a group in flight. Dropped (the send landed, or the future
/// carrying it was dropped), it lets the group's queue go: a spawned task
/// sends batch after batch until nothing waits.
pub(crate) struct Flight<C: ConnectionLike + Clone + Send + Sync + 'static> {
    batcher: Arc<Batcher<C>>,
    slot: Option<Slot>,
    /// Still counted in the group's `sending`.
    armed: bool,
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Drop for Flight<C> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.armed = false;
        if let Some(batch) = self.batcher.next(self.slot) {
            launch(self.batcher.flight(self.slot), batch);
        }
    }
}

/// Sends `batch` (and the group's next ones) from a task of its own on the
/// current runtime. Without one (a flight dropped outside any runtime) the
/// batch's callers hear that it was dropped, and the flight's drop tries
/// the next batch.
fn launch<C: ConnectionLike + Clone + Send + Sync + 'static>(
    flight: Flight<C>,
    batch: Vec<Waiter>,
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
    mut batch: Vec<Waiter>,
) {
    loop {
        flight.batcher.send(std::mem::take(&mut batch)).await;
        match flight.batcher.next(flight.slot) {
            Some(next) => batch = next,
            None => {
                flight.armed = false;
                return;
            }
        }
    }
}
