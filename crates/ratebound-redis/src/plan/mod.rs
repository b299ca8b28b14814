//! The driver core, sans-I/O: how one limiter's calls go to Redis, for
//! every driver — the Rust one on tokio, Python's native connection, and
//! (through their bindings) the others. A driver is a pump: it asks the
//! [`Planner`] where each call goes, sends what the planner hands it (a
//! [`Batch`]: one call as itself, or many as one [`BatchCall`] script run)
//! and gives the reply back to the batch, which answers every call of it.
//!
//! **The rule.** A call is sent alone, by its caller, when nothing of its
//! group is in flight; otherwise it waits in its group's queue, and the
//! queue goes out as one batch (the oldest call and up to
//! [`BatchCall::MAX`] − 1 later ones that [join](BatchCall::joins) it) as
//! soon as a send of the group lands — or at once, as a further send in
//! flight, when [`Tuning::second_at`] calls wait (never more than
//! [`Tuning::sends`] at a time). So one caller in flight never waits for a
//! batch, and many form batches ([`Tuning::alone`] lets a second caller
//! go alone too, where a runtime gains by it). A group is the whole connection, or in a
//! Redis Cluster one hash slot ([`hash_slot`]: the keys of one script run
//! must share a slot). A call whose caller stopped waiting before its batch
//! went out is not sent ([`Queued::claim`]).
//!
//! **Two rules, one per kind of runtime.** [`Planner`] is for callers on
//! tasks or threads (the Rust driver, Python's native connection), where a
//! caller alone should never wait for a batch. [`Turns`] is for callers on
//! one event loop (Node), where every call of a turn is begun before any
//! reply can land: the turn's calls go out together at its end, with the
//! event loop's back-pressure, Redis-slow mode and deadline wheel.
//!
//! **Replies** ([`Reply`], [`Batch::answers`]): a script's reply is a list
//! of integers; a batch's is nine a call ([`REPLY_LEN`](crate::REPLY_LEN)),
//! in order. Anything else is
//! [`Answer::Malformed`] for every call of the send. A `NOSCRIPT` refusal
//! of the `EVALSHA` is answered by one `EVAL` of the same run within the
//! same deadline ([`Resend::after_evalsha`] says what a failed `EVALSHA`
//! calls for; [`Reply::is_noscript`] tells `NOSCRIPT` from other errors).

mod batch;
mod slot;
mod turn_io;
mod turns;

pub use batch::{Answer, Batch, Reply, Request, Resend};
pub use slot::hash_slot;
pub use turn_io::{Asks, Entry, Go, Out, SIGNAL_EPOCH, Ticket, TurnStats, TurnTuning};
pub use turns::Turns;

use std::collections::{HashMap, VecDeque};

use crate::{BatchCall, Call};

/// Whether a deadline's timer that fired `overshoot` past the deadline of
/// a call with `timeout` says the client itself was late — its runtime,
/// thread or event loop too busy (or its process not scheduled) to run
/// the timer, and so to read a reply, in time: more than a quarter of the
/// timeout, and at least 5 ms (a timer's own jitter). A call timed out
/// that way is the client's own overload ([`Answer::Unsent`]: refused as
/// busy), not Redis' silence, whatever became of its send.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use ratebound_redis::plan::ran_late;
/// let ms = Duration::from_millis;
/// assert!(!ran_late(ms(2), ms(50)));
/// assert!(!ran_late(ms(12), ms(50)));
/// assert!(ran_late(ms(13), ms(50)));
/// assert!(!ran_late(ms(4), ms(4)), "at least 5 ms");
/// assert!(ran_late(ms(6), ms(4)));
/// ```
pub fn ran_late(overshoot: std::time::Duration, timeout: std::time::Duration) -> bool {
    overshoot > (timeout / 4).max(std::time::Duration::from_millis(5))
}

/// How many sends a group may have in flight, and when a further one goes:
/// the planner's one rule, tuned per runtime by measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// Sends of one group in flight at most.
    pub sends: usize,
    /// A call goes alone, sent by its own caller, while fewer sends than
    /// this are in flight and nothing waits (at most `sends`).
    pub alone: usize,
    /// How many calls must wait for a send beyond the first to go before
    /// the first lands.
    pub second_at: usize,
}

impl Tuning {
    /// For tokio tasks (the Rust driver). One send at a time leaves Redis
    /// idle while a reply travels and the next batch is made; two keep it
    /// busy, but a second send for a few calls makes small batches, and
    /// Redis spends more per decision. Measured with
    /// `benches/src/bin/redis_throughput.rs` on a busy 2-core machine (one
    /// limiter; Redis' CPU per decision from `INFO cpu`), medians of 3: at
    /// 64 in flight a second send at 16 waiting gave 87 k decisions/s
    /// (6.4–7.6 µs of Redis CPU each), one send 85 k/s (6.2–6.4 µs), a
    /// second send for any call 41 k/s (6.9–7.1 µs); at 16 in flight a
    /// second send for any call cost 9.8–10.6 µs of Redis CPU per decision
    /// against 8.0–9.0 µs.
    pub const TASKS: Tuning = Tuning {
        sends: 2,
        alone: 1,
        second_at: 16,
    };

    /// For Python threads (the native connection). A Python caller takes
    /// longer to come back with its next call, and a second send in flight
    /// keeps Redis busy while the next batch forms: measured (2 cores,
    /// median of 3 one-second rounds, 10 000 keys) one send in flight gave
    /// 28.7 k/27.1 k decisions/s at 16 threads and 38.6 k/35.1 k with 64
    /// asyncio tasks, two sends with a second one for any call 44.6 k/42.6 k
    /// and 47.5 k/55.7 k. The second goes alone, by its caller, as the
    /// first does (no hop through a task of the driver's).
    pub const THREADS: Tuning = Tuning {
        sends: 2,
        alone: 2,
        second_at: 1,
    };
}

/// A queued call, as the planner holds it: the call and whatever the
/// driver needs to hand its caller the answer.
pub trait Queued {
    /// The call.
    fn call(&self) -> &Call;

    /// The call is going out: `true` if its caller still waits (from now
    /// on it gets the send's answer), `false` if it gave up (the call is
    /// dropped, never sent). Asked once, when the call is taken into a
    /// batch.
    fn claim(&self) -> bool;
}

/// A group of calls: the whole connection (`None`), or one hash slot of a
/// Redis Cluster.
pub type Group = Option<u16>;

/// Where a call goes (see [`Planner::enter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enter {
    /// Send it now, alone; tell [`Planner::landed`] when the send is over.
    Alone(Group),
    /// Hand it to [`Planner::queue`].
    Queue(Group),
}

/// One group's state: the calls waiting, the sends in flight.
struct Lane<Q> {
    waiting: VecDeque<Q>,
    sending: usize,
}

impl<Q> Default for Lane<Q> {
    fn default() -> Self {
        Lane {
            waiting: VecDeque::new(),
            sending: 0,
        }
    }
}

impl<Q: Queued> Lane<Q> {
    /// The oldest waiting call and up to [`BatchCall::MAX`] − 1 later ones
    /// that join it, in order, each [claimed](Queued::claim); calls whose
    /// caller gave up are dropped. Empty when nothing waits.
    fn take(&mut self) -> Vec<Q> {
        let mut batch: Vec<Q> = Vec::new();
        let mut rest = VecDeque::new();
        while let Some(q) = self.waiting.pop_front() {
            if batch.len() == BatchCall::MAX {
                rest.push_back(q);
                rest.append(&mut self.waiting);
                break;
            }
            match batch.first() {
                Some(first) if !BatchCall::joins(first.call(), q.call()) => rest.push_back(q),
                _ if q.claim() => batch.push(q),
                _ => {}
            }
        }
        self.waiting = rest;
        batch
    }
}

/// The batching state of one limiter's connection (see the module docs):
/// pure bookkeeping, no clock and no I/O; the driver keeps it behind its
/// lock.
pub struct Planner<Q> {
    tuning: Tuning,
    per_slot: bool,
    lanes: HashMap<Group, Lane<Q>>,
}

impl<Q: Queued> Planner<Q> {
    /// Batching tuned by `tuning`, per hash slot (a Redis Cluster) or over
    /// the whole connection.
    pub fn new(tuning: Tuning, per_slot: bool) -> Planner<Q> {
        Planner {
            tuning,
            per_slot,
            lanes: HashMap::new(),
        }
    }

    /// Whether calls are grouped by hash slot.
    pub fn per_slot(&self) -> bool {
        self.per_slot
    }

    /// The tuning.
    pub fn tuning(&self) -> Tuning {
        self.tuning
    }

    /// The group of `call`.
    pub fn group_of(&self, call: &Call) -> Group {
        self.per_slot.then(|| hash_slot(&call.key))
    }

    /// Where `call` goes: alone (nothing of its group queued and fewer than
    /// [`Tuning::alone`] sends in flight: the send counts as in flight from
    /// here), or into the queue — with
    /// [`queue`](Self::queue) under the same lock, or a send landing in
    /// between finds nothing queued (`queue` then sends the call at once:
    /// a queue with nothing in flight never waits).
    pub fn enter(&mut self, call: &Call) -> Enter {
        let group = self.group_of(call);
        let lane = self.lanes.entry(group).or_default();
        if lane.sending < self.tuning.alone.min(self.tuning.sends) && lane.waiting.is_empty() {
            lane.sending += 1;
            Enter::Alone(group)
        } else {
            Enter::Queue(group)
        }
    }

    /// Queues `queued` in `group` (as [`enter`](Self::enter) said): a batch
    /// to send now when nothing of the group is in flight, or when
    /// [`Tuning::second_at`] calls wait and a send is free (it counts as in flight: tell [`landed`](Self::landed) when
    /// it is over), else `None` (the call goes with a later batch).
    pub fn queue(&mut self, group: Group, queued: Q) -> Option<Batch<Q>> {
        let lane = self.lanes.entry(group).or_default();
        lane.waiting.push_back(queued);
        let free = lane.sending < self.tuning.sends;
        if lane.sending == 0 || (free && lane.waiting.len() >= self.tuning.second_at) {
            let calls = lane.take();
            if !calls.is_empty() {
                lane.sending += 1;
                return Some(Batch::new(group, calls));
            }
        }
        None
    }

    /// A send of `group` is over: the group's next batch (still counted as
    /// in flight), or `None` when nothing waits (the send no longer counts).
    pub fn landed(&mut self, group: Group) -> Option<Batch<Q>> {
        let lane = self.lanes.get_mut(&group)?;
        let calls = lane.take();
        if !calls.is_empty() {
            return Some(Batch::new(group, calls));
        }
        lane.sending = lane.sending.saturating_sub(1);
        // A cluster's groups come and go with their slots; the one group of
        // a whole connection stays.
        if self.per_slot && lane.sending == 0 && lane.waiting.is_empty() {
            self.lanes.remove(&group);
        }
        None
    }

    /// Takes out of `group`'s queue the first call that `is` picks (its
    /// caller stops waiting): `Some` if it was still queued — never sent —,
    /// `None` if it went out (or was dropped) already.
    pub fn unqueue(&mut self, group: Group, is: impl Fn(&Q) -> bool) -> Option<Q> {
        let lane = self.lanes.get_mut(&group)?;
        let i = lane.waiting.iter().position(is)?;
        lane.waiting.remove(i)
    }

    /// Calls sent together at once, not queued (an event loop's turn):
    /// those of a group that join go as one batch each (at most
    /// [`BatchCall::MAX`] calls), in their order; not counted as in flight.
    pub fn together(&self, calls: Vec<Q>) -> Vec<Batch<Q>> {
        let mut lanes: Vec<(Group, Lane<Q>)> = Vec::new();
        for q in calls {
            let group = self.group_of(q.call());
            match lanes.iter_mut().find(|(g, _)| *g == group) {
                Some((_, lane)) => lane.waiting.push_back(q),
                None => {
                    let mut lane = Lane::default();
                    lane.waiting.push_back(q);
                    lanes.push((group, lane));
                }
            }
        }
        let mut batches = Vec::new();
        for (group, mut lane) in lanes {
            loop {
                let calls = lane.take();
                if calls.is_empty() {
                    break;
                }
                batches.push(Batch::new(group, calls));
            }
        }
        batches
    }
}

#[cfg(test)]
mod tests;
