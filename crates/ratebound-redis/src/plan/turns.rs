//! The driver core for an event loop ([`Turns`]): when the calls of one
//! limiter go out, together, and when they are late — for a driver whose
//! callers all run on one thread, in turns (Node's event loop), where
//! [`Planner`](super::Planner)'s "alone while the group is idle" would
//! send every call of a turn alone before any reply can land.
//!
//! **The rule.** A call that [joins](crate::BatchCall::joins) others waits
//! in the queue, which goes out at the end of the turn ([`Turns::flush`])
//! as one script run per join class and hash slot (at most
//! [`BatchCall::MAX`] calls; a group of one as itself). With nothing in
//! flight, a queue of [`TurnTuning::split_at`] calls or more of one group
//! goes as two runs, so that Redis runs the second while the driver reads
//! the first's replies. A call that never joins (a pause, a give-back; any
//! call when batching is off) goes at once, alone, while there is room and
//! nothing waits before it.
//!
//! **Back-pressure.** At most [`TurnTuning::in_flight`] calls are sent and
//! not yet settled; a call sent alone counts [`TurnTuning::alone`] (it
//! costs Redis and the client about as much as that many calls of a
//! batch). Beyond, calls wait in the queue, in order, and go as calls
//! settle. A call's deadline counts from when the client has written it
//! ([`Turns::stamp`], after the client's own write of the turn), so the
//! time it waited here — the client's own load, never Redis' — is not the
//! fail policy's business. A call that waits longer than
//! [`TurnTuning::queue_wait`] never leaves ([`Out::Unsent`]: refused as
//! busy, the breaker untouched), and beyond [`TurnTuning::max_queued`]
//! waiting a call is unsent at once — but a call that must not be lost
//! (`Entry::keep`: a pause, a give-back) always waits its turn.
//!
//! **Redis slow.** Once a call got no answer within its deadline (and the
//! client did not say it is misconfigured), Redis counts as slow until a
//! send gets a reply ([`Turns::replied`]): meanwhile one call at a time
//! goes out, and a queued call that waited a whole deadline for it times
//! out ([`Out::TimedOut`]: the fail policy's — it waited for Redis, not
//! for this process).
//!
//! **The wheel.** Every call sent has a deadline; [`Turns::sweep`], run by
//! the driver's one timer (after the event loop has read the sockets: an
//! answer that arrived while the process was busy is an answer, not a
//! timeout), hands back the calls whose deadline passed ([`Out::Late`])
//! and when to look again.
//!
//! **Abort signals** (a client that withdraws a command still queued in
//! it when the command's signal is aborted: node-redis' `AbortSignal`).
//! The sends begun within [`SIGNAL_EPOCH`] of each other carry one signal
//! ([`Turns::carry`]); it is aborted once every call it carries is settled
//! and one of them was late ([`Asks::ABORT`]), so that a command still
//! queued while the client is offline is withdrawn (one already sent may
//! still run: its tokens may be spent). Not when the last of them is
//! late: while Redis is slow a call sent from the queue keeps what is left
//! of its deadline, so the calls of one signal need not time out in the
//! order they were sent. An aborted signal is never carried again (the
//! client would refuse a command with it at once).
//!
//! The driver keeps the sockets, its callers by [`Ticket`], the timer and
//! the signals by call; it tells [`Turns::settle`] when a call's caller
//! has its answer, and [`Turns::replied`] / [`Turns::failed`] when a send
//! is over.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use crate::BatchCall;

use super::turn_io::{Asks, Entry, Go, Out, SIGNAL_EPOCH, Ticket, TurnStats, TurnTuning};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Free,
    Queued,
    /// Handed back by `flush` or `sweep` before it was sent.
    Out,
    Sent,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    round: u32,
    state: State,
    entry: Entry,
    /// When it was queued (it still counts a deadline from there if sent
    /// while Redis is slow), or `None`.
    since: Option<Duration>,
    deadline: Duration,
    cost: usize,
    /// The signal its send carries, if any (see [`Turns::carry`]).
    signal: Option<u32>,
}

/// One signal's calls not yet settled, and whether one of them was late.
#[derive(Clone, Copy, Debug, Default)]
struct Carried {
    live: usize,
    late: bool,
}

/// One limiter's calls on an event loop (see the module docs): pure
/// bookkeeping, no clock and no I/O — every method is given the time.
#[derive(Debug)]
pub struct Turns {
    tuning: TurnTuning,
    deadline: Duration,
    batching: bool,
    slots: Vec<Slot>,
    free: Vec<Ticket>,
    /// The calls waiting, in order.
    queue: VecDeque<Ticket>,
    /// Sent, deadlines not yet set.
    launching: Vec<(Ticket, u32)>,
    /// Sent, in the order their deadlines were set.
    wheel: VecDeque<(Ticket, u32)>,
    /// What the calls sent and not settled count.
    load: usize,
    /// Commands sent and not yet over (a batch is one).
    commands: usize,
    slow: bool,
    flush_asked: bool,
    stamp_asked: bool,
    timer_armed: bool,
    stats: TurnStats,
    /// The signal the sends carry now: its number and when it opened.
    signal: Option<(u32, Duration)>,
    /// The signals that carry calls not yet settled, by number.
    carried: HashMap<u32, Carried>,
    next_signal: u32,
}

impl Turns {
    /// The calls of a limiter whose calls have `deadline`, batched or
    /// not, tuned by `tuning`.
    pub fn new(tuning: TurnTuning, deadline: Duration, batching: bool) -> Turns {
        Turns {
            tuning,
            deadline,
            batching,
            slots: Vec::new(),
            free: Vec::new(),
            queue: VecDeque::new(),
            launching: Vec::new(),
            wheel: VecDeque::new(),
            load: 0,
            commands: 0,
            slow: false,
            flush_asked: false,
            stamp_asked: false,
            timer_armed: false,
            stats: TurnStats::default(),
            signal: None,
            carried: HashMap::new(),
            next_signal: 0,
        }
    }

    /// The counters.
    pub fn stats(&self) -> TurnStats {
        self.stats
    }

    /// Whether Redis counts as slow (see the module docs).
    pub fn slow(&self) -> bool {
        self.slow
    }

    /// How many calls wait in the queue.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    /// A call begins at `now`: its ticket and where it goes.
    pub fn enter(&mut self, entry: Entry, now: Duration) -> (Ticket, Go, Asks) {
        let waiting = self.queue.len();
        let alone = self.tuning.alone;
        let cap = if self.slow {
            alone
        } else {
            self.tuning.in_flight
        };
        if (!self.batching || entry.join.is_none()) && waiting == 0 && self.load + alone <= cap {
            let t = self.slot(entry, None);
            self.go_alone(t);
            return (t, Go::Now, self.stamp_soon());
        }
        if self.load + waiting >= self.tuning.in_flight
            || (!self.batching && self.load + alone > self.tuning.in_flight)
        {
            self.stats.queued += 1;
        }
        if waiting >= self.tuning.max_queued && !entry.keep {
            self.stats.unsent += 1;
            return (Ticket::MAX, Go::Unsent, Asks::default());
        }
        let t = self.slot(entry, Some(now));
        self.slots[t as usize].state = State::Queued;
        self.queue.push_back(t);
        (t, Go::Queued, self.flush_soon())
    }

    /// The end of a turn: the queue goes out, as much of it as there is
    /// room in flight for (see the module docs); the calls that waited
    /// too long first.
    pub fn flush(&mut self, now: Duration) -> (Vec<Out>, Asks) {
        self.flush_asked = false;
        let mut out = Vec::new();
        let cap = if self.slow {
            self.tuning.alone
        } else {
            self.tuning.in_flight
        };
        let room = cap.saturating_sub(self.load);
        if room == 0 || self.queue.is_empty() {
            return (out, Asks::default());
        }
        if self.slow {
            self.expire_queued(now, &mut out);
        }
        let wait = self.tuning.queue_wait(self.deadline);
        while let Some(&t) = self.queue.front() {
            let s = &self.slots[t as usize];
            if s.entry.keep || s.since.is_some_and(|since| since + wait > now) {
                break;
            }
            self.queue.pop_front();
            self.slots[t as usize].state = State::Out;
            self.stats.unsent += 1;
            out.push(Out::Unsent(t));
        }
        if self.queue.is_empty() {
            return (out, Asks::default());
        }
        let n = if self.batching {
            room
        } else {
            (room / self.tuning.alone).max(1)
        };
        let taken: Vec<Ticket> = self.queue.drain(..n.min(self.queue.len())).collect();
        if !self.batching {
            for t in taken {
                self.send_one(t, &mut out);
            }
            return (out, self.stamp_soon());
        }
        let first = self.slots[taken[0] as usize].entry.join;
        let same = first.is_some()
            && taken
                .iter()
                .all(|&t| self.slots[t as usize].entry.join == first);
        if same {
            if taken.len() >= self.tuning.split_at && self.commands == 0 {
                let half = taken.len().div_ceil(2);
                self.send_group(&taken[..half], &mut out);
                self.send_group(&taken[half..], &mut out);
            } else {
                self.send_group(&taken, &mut out);
            }
            return (out, self.stamp_soon());
        }
        let mut groups: Vec<((u32, u16), Vec<Ticket>)> = Vec::new();
        for t in taken {
            match self.slots[t as usize].entry.join {
                None => self.send_one(t, &mut out),
                Some(j) => match groups.iter_mut().find(|(g, _)| *g == j) {
                    Some((_, members)) => members.push(t),
                    None => groups.push((j, vec![t])),
                },
            }
        }
        for (_, members) in groups {
            self.send_group(&members, &mut out);
        }
        (out, self.stamp_soon())
    }

    /// The client has written this turn's commands (`now`): the calls
    /// sent get their deadlines — a deadline from now, or from when the
    /// call was queued if it went while Redis was slow. `Some`: arm the
    /// timer to [`sweep`](Self::sweep) after that long.
    pub fn stamp(&mut self, now: Duration) -> Option<Duration> {
        self.stamp_asked = false;
        for (t, round) in std::mem::take(&mut self.launching) {
            let ms = self.deadline;
            let s = &mut self.slots[t as usize];
            if s.round != round || s.state != State::Sent {
                continue;
            }
            s.deadline = match s.since {
                Some(since) => (now + ms).min(since + ms),
                None => now + ms,
            };
            self.wheel.push_back((t, round));
        }
        if !self.timer_armed && !self.wheel.is_empty() {
            self.timer_armed = true;
            return Some(self.deadline);
        }
        None
    }

    /// The timer fired (`now`, once the event loop read the sockets): the
    /// calls sent whose deadline passed, in order, and — Redis slow — the
    /// queued calls that waited a whole deadline; and when to look again
    /// (`None`: nothing is sent; the timer stops). A late call makes Redis
    /// count as slow unless the client said it is `misconfigured` (then it
    /// is that error, not the fail policy's).
    pub fn sweep(
        &mut self,
        now: Duration,
        misconfigured: bool,
    ) -> (Vec<Out>, Option<Duration>, Asks) {
        self.timer_armed = false;
        let mut out = Vec::new();
        while let Some(&(t, round)) = self.wheel.front() {
            let s = &self.slots[t as usize];
            if s.round == round && s.state == State::Sent {
                if s.deadline > now {
                    break;
                }
                if !misconfigured {
                    self.stats.timeouts += 1;
                    self.slow = true;
                }
                if let Some(c) = s.signal.and_then(|n| self.carried.get_mut(&n)) {
                    c.late = true;
                }
                out.push(Out::Late(t));
            }
            self.wheel.pop_front();
        }
        let mut next = self
            .wheel
            .front()
            .map(|&(t, _)| self.slots[t as usize].deadline);
        if self.slow {
            self.expire_queued(now, &mut out);
            if let Some(since) = self
                .queue
                .front()
                .and_then(|&t| self.slots[t as usize].since)
            {
                let due = since + self.deadline;
                next = Some(next.map_or(due, |n| n.min(due)));
            }
        }
        let timer = next.map(|n| n.saturating_sub(now).max(Duration::from_millis(1)));
        self.timer_armed = timer.is_some();
        (out, timer, self.flush_soon())
    }

    /// The sends of `tickets` (calls sent: [`Go::Now`], [`Out::One`],
    /// [`Out::Many`]) carry the current abort signal, at `now` (see the
    /// module docs): `true` when a new one opens first — none yet, the
    /// current one opened more than [`SIGNAL_EPOCH`] ago, or it was
    /// aborted —, which the driver makes and gives these sends and the
    /// next ones until the next `true`.
    pub fn carry(&mut self, tickets: &[Ticket], now: Duration) -> bool {
        let open = match self.signal {
            Some((_, opened)) => now.saturating_sub(opened) > SIGNAL_EPOCH,
            None => true,
        };
        if open {
            self.next_signal = self.next_signal.wrapping_add(1);
            self.signal = Some((self.next_signal, now));
        }
        let Some((n, _)) = self.signal else {
            return open;
        };
        for &t in tickets {
            if let Some(s) = self.slots.get_mut(t as usize)
                && s.state == State::Sent
                && s.signal.is_none()
            {
                s.signal = Some(n);
                self.carried.entry(n).or_default().live += 1;
            }
        }
        open
    }

    /// The caller of `t` has its answer (from a reply, a failure or one of
    /// [`Out`]'s): the ticket is over; a call sent makes room; the last
    /// call of a signal one of whose calls was late aborts it
    /// ([`Asks::ABORT`]).
    pub fn settle(&mut self, t: Ticket) -> Asks {
        let Some(s) = self.slots.get_mut(t as usize) else {
            return Asks::default();
        };
        let was = s.state;
        if was == State::Free {
            return Asks::default();
        }
        if was == State::Queued {
            // Settled before it left the queue (its caller gave up).
            if let Some(i) = self.queue.iter().position(|&q| q == t) {
                self.queue.remove(i);
            }
        }
        let cost = s.cost;
        let signal = s.signal.take();
        s.state = State::Free;
        s.round = s.round.wrapping_add(1);
        s.cost = 0;
        self.free.push(t);
        let abort = match signal {
            Some(n) if self.left(n) => Asks(Asks::ABORT),
            _ => Asks::default(),
        };
        // The wheel's head keeps no settled calls.
        while let Some(&(h, round)) = self.wheel.front() {
            if self.slots[h as usize].round == round {
                break;
            }
            self.wheel.pop_front();
        }
        if was == State::Sent {
            self.load -= cost;
            if self.load < self.tuning.in_flight {
                return Asks(self.flush_soon().0 | abort.0);
            }
        }
        abort
    }

    /// A call of signal `n` is settled: whether that aborts it (its last
    /// call, and one of them was late).
    fn left(&mut self, n: u32) -> bool {
        let Some(c) = self.carried.get_mut(&n) else {
            return false;
        };
        c.live -= 1;
        if c.live > 0 {
            return false;
        }
        let late = c.late;
        self.carried.remove(&n);
        if late && self.signal.is_some_and(|(current, _)| current == n) {
            // Never carried again.
            self.signal = None;
        }
        late
    }

    /// A send got its reply (of any kind): Redis answers, no longer slow.
    pub fn replied(&mut self) -> Asks {
        self.commands = self.commands.saturating_sub(1);
        if self.slow {
            self.slow = false;
            return self.flush_soon();
        }
        Asks::default()
    }

    /// A send failed (after its `EVAL`, if any): it is no longer in flight.
    pub fn failed(&mut self) {
        self.commands = self.commands.saturating_sub(1);
    }

    fn slot(&mut self, entry: Entry, since: Option<Duration>) -> Ticket {
        let s = Slot {
            round: 0,
            state: State::Queued,
            entry,
            since,
            deadline: Duration::ZERO,
            cost: 0,
            signal: None,
        };
        match self.free.pop() {
            Some(t) => {
                let round = self.slots[t as usize].round;
                self.slots[t as usize] = Slot { round, ..s };
                t
            }
            None => {
                self.slots.push(s);
                (self.slots.len() - 1) as Ticket
            }
        }
    }

    /// `t` goes to the client, counting `cost` in flight.
    fn launch(&mut self, t: Ticket, cost: usize) {
        let slow = self.slow;
        let s = &mut self.slots[t as usize];
        s.state = State::Sent;
        s.cost = cost;
        // Sent while Redis is slow after waiting for it in the queue: its
        // deadline still counts from when it was queued.
        if !slow {
            s.since = None;
        }
        self.load += cost;
        self.launching.push((t, s.round));
    }

    /// `t` goes alone.
    fn go_alone(&mut self, t: Ticket) {
        self.launch(t, self.tuning.alone);
        self.commands += 1;
        self.stats.calls += 1;
    }

    fn send_one(&mut self, t: Ticket, out: &mut Vec<Out>) {
        self.go_alone(t);
        out.push(Out::One(t));
    }

    /// A group's calls (of one join class and slot), at most
    /// [`BatchCall::MAX`] a script run; a part of one alone.
    fn send_group(&mut self, members: &[Ticket], out: &mut Vec<Out>) {
        for part in members.chunks(BatchCall::MAX) {
            if let [one] = part {
                self.send_one(*one, out);
                continue;
            }
            for &t in part {
                self.launch(t, 1);
            }
            self.commands += 1;
            self.stats.calls += 1;
            self.stats.batches += 1;
            self.stats.batched += part.len() as u64;
            out.push(Out::Many(part.to_vec()));
        }
    }

    /// Redis is slow: the queued calls that waited a whole deadline for
    /// it time out, the oldest first.
    fn expire_queued(&mut self, now: Duration, out: &mut Vec<Out>) {
        while let Some(&t) = self.queue.front() {
            match self.slots[t as usize].since {
                Some(since) if since + self.deadline > now => break,
                _ => {}
            }
            self.queue.pop_front();
            self.slots[t as usize].state = State::Out;
            self.stats.timeouts += 1;
            out.push(Out::TimedOut(t));
        }
    }

    fn flush_soon(&mut self) -> Asks {
        if self.flush_asked || self.queue.is_empty() {
            return Asks::default();
        }
        self.flush_asked = true;
        Asks(Asks::FLUSH)
    }

    fn stamp_soon(&mut self) -> Asks {
        if self.stamp_asked || self.launching.is_empty() {
            return Asks::default();
        }
        self.stamp_asked = true;
        Asks(Asks::STAMP)
    }
}

#[cfg(test)]
#[path = "turns_tests.rs"]
mod tests;
