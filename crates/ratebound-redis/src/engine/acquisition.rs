//! Waiting for a global token, sans-I/O: [`Acquisition`] — one caller's
//! wait as a state machine the drivers run: make the call it hands out,
//! sleep what it says, give back what it holds if the caller gives up.
//! Every rule (the deadline, the fail policy while waiting, leases first,
//! what a window does) is decided here; a driver only performs the I/O
//! and sleeps. A wait reserves (`reserve.rs`) and is moved by the pauses
//! heard of (`pause.rs`).

use std::time::Duration;

use ratebound::{Clock, Error};

use crate::call::{Call, CallOutcome};
use crate::decision::Source;
use crate::engine::Engine;
use crate::news::Heard;
use crate::reserve::{ReserveBegin, Reserved, micros, nanos};

impl Engine {
    /// A wait for `n` tokens for `key` (within `scope`), failing if it
    /// cannot end within `timeout` (none: wait as long as it takes).
    ///
    /// # Errors
    /// As [`begin_reserve`](Self::begin_reserve).
    pub fn acquire(
        &self,
        scope: Option<&str>,
        key: &[u8],
        n: u64,
        timeout: Option<Duration>,
    ) -> Result<Acquisition, Error> {
        self.capacity_check(n)?;
        // n = 0 is a query, as in the core: admitted at once, nothing taken.
        let state = if n == 0 {
            State::Done(Source::Redis)
        } else {
            State::Start
        };
        let now = self.clock.now();
        Ok(Acquisition {
            scope: scope.map(str::to_string),
            key: key.to_vec(),
            n,
            deadline: timeout.map(|t| now.saturating_add(nanos(t))),
            state,
            seen: 0,
        })
    }

    /// What `a` does next at the engine's clock: make a call (then pass
    /// its outcome to [`acquire_reply`](Self::acquire_reply)), sleep, or
    /// stop — the tokens are the caller's.
    ///
    /// # Errors
    /// [`Error::DeadlineExceeded`] when the wait cannot end within the
    /// timeout (nothing is taken: a reservation beyond it is never made),
    /// also when the fail policy `closed` refuses.
    ///
    /// A wait that holds a reservation first applies every pause heard of
    /// since its last step (see [`hear`](Self::hear) for the rule): a
    /// sleeper that wakes at its old time is told to sleep on.
    pub fn acquire_step(&self, a: &mut Acquisition) -> Result<Step, Error> {
        self.catch_up(&mut a.seen, &mut a.state);
        let now = self.clock.now();
        loop {
            match &a.state {
                State::Done(source) => return Ok(Step::Done(*source)),
                State::Failed(wait, source) => {
                    return Err(self.wait_failed(*wait, *source, a.max_wait(now)));
                }
                State::Pending(call) => return Ok(Step::Call(call.clone())),
                State::Held { due, source, .. } => {
                    if now >= *due {
                        a.state = State::Done(*source);
                        continue;
                    }
                    return Ok(Step::Sleep(Duration::from_nanos(*due - now)));
                }
                State::RetryAt(at) if now < *at => {
                    return Ok(Step::Sleep(Duration::from_nanos(*at - now)));
                }
                State::Start | State::RetryAt(_) => {
                    let max_wait = a.max_wait(now);
                    match self.begin_take(
                        self.redis_key(a.scope.as_deref(), &a.key),
                        a.n,
                        max_wait,
                    )? {
                        ReserveBegin::Done(r) => self.apply(a, r, None, now),
                        ReserveBegin::Call(call) => {
                            // News heard before the call is sent is of a
                            // pause that ran before the reservation: the
                            // script's answer includes it.
                            a.seen = self.news.latest();
                            a.state = State::Pending(call);
                        }
                    }
                }
            }
        }
    }

    /// Hands `a` the outcome of the call its last step made.
    pub fn acquire_reply(&self, a: &mut Acquisition, outcome: CallOutcome<'_>) {
        let State::Pending(call) = std::mem::replace(&mut a.state, State::Start) else {
            return;
        };
        let r = self.finish_reserve(&call, outcome);
        self.apply(a, r, Some(call), self.clock.now());
    }

    fn apply(&self, a: &mut Acquisition, r: Reserved, call: Option<Call>, now: u64) {
        a.state = match r {
            Reserved::Granted { wait, source, .. } if wait.is_zero() => State::Done(source),
            Reserved::Granted {
                wait,
                source,
                due_us,
                end_us,
            } => {
                let due = now.saturating_add(nanos(wait));
                State::Held {
                    due,
                    source,
                    slot: due_us.map(|due_us| Slot {
                        reserved_us: due_us.saturating_sub(micros(wait)),
                        due_us,
                        end_us: end_us.unwrap_or(0),
                        due,
                        pauses: Vec::new(),
                    }),
                    call,
                }
            }
            Reserved::Refused { wait, source } => State::Failed(wait, source),
            Reserved::Retry { wait, source } => {
                let at = now.saturating_add(nanos(wait));
                match a.deadline {
                    Some(deadline) if at > deadline => State::Failed(wait, source),
                    _ => State::RetryAt(at),
                }
            }
        };
    }

    /// The caller gave up (cancelled, timed out elsewhere, dropped): the
    /// call that gives held tokens back, if any are held. The wait is over.
    /// Redis takes them back only if nothing was built on them since (see
    /// [`give_back`](Self::give_back)): a wait cancelled in the middle of
    /// a queue frees nothing.
    pub fn acquire_abandon(&self, a: &mut Acquisition) -> Option<Call> {
        let state = std::mem::replace(&mut a.state, State::Done(Source::Redis));
        match state {
            State::Held {
                call: Some(call),
                slot: Some(slot),
                ..
            } => Some(self.give_back(&call, slot.end_us)),
            _ => None,
        }
    }

    /// The error for a wait that cannot end in time: the fail policy
    /// `closed` refusing and the client's own overload say so, not that
    /// the wait was too long.
    pub(crate) fn wait_failed(&self, wait: Duration, source: Source, max_wait: Duration) -> Error {
        match source {
            Source::FailClosed => Error::StoreUnavailable {
                cause: format!(
                    "redis unavailable ({}): the fail policy 'closed' refused{}",
                    self.last_cause(),
                    if self.breaker.is_open() {
                        " (the circuit breaker is open)"
                    } else {
                        ""
                    }
                ),
                retry_after: wait,
            },
            Source::Busy => Error::StoreUnavailable {
                cause: format!(
                    "the redis client is overloaded: the call could not be sent within its {:?} \
                     deadline (a full connection pool or queue)",
                    self.config.timeout
                ),
                retry_after: wait,
            },
            _ => Error::DeadlineExceeded { wait, max_wait },
        }
    }

    /// News of a pause told directly (rather than [`hear`](Self::hear)d):
    /// the pause's script ran at `start_us` (Redis' clock, as
    /// [`finish_pause`](Self::finish_pause) returns it) and moved every
    /// slot due from then on `shift` later. `a`'s slot moves with it under
    /// [`hear`](Self::hear)'s rule.
    pub fn acquire_shift(&self, a: &mut Acquisition, start_us: u64, shift: Duration) {
        if let State::Held {
            due,
            slot: Some(slot),
            ..
        } = &mut a.state
            && start_us >= slot.reserved_us
        {
            slot.pauses.push(Heard {
                seq: 0,
                at_us: start_us,
                shift_us: micros(shift),
                id: self.news.fresh_id(),
            });
            *due = slot.moved_due();
        }
    }

    /// Applies to a held slot the pauses heard since `seen`.
    fn catch_up(&self, seen: &mut u64, state: &mut State) {
        if let State::Held {
            due,
            call: Some(call),
            slot: Some(slot),
            ..
        } = state
            && self
                .news
                .collect(&call.key, seen, slot.reserved_us, &mut slot.pauses)
        {
            *due = slot.moved_due();
        }
    }
}

/// Where a held reservation is in Redis (what a pause moves).
#[derive(Clone, Debug)]
struct Slot {
    /// When the reservation's script ran, µs of Redis' clock.
    reserved_us: u64,
    /// When the tokens were due as Redis answered, µs of Redis' clock.
    due_us: u64,
    /// The end of the slot (the TAT the reservation left), µs of Redis'
    /// clock: what a give-back compares with.
    end_us: u64,
    /// The same moment on the engine's clock (ns).
    due: u64,
    /// The pauses that ran after the reservation, as heard.
    pauses: Vec<Heard>,
}

impl Slot {
    /// The engine-clock due time after every pause in `pauses`, applied in
    /// the order they ran: each moves the slot if it was not due yet, as
    /// the script moved it. A slot due before a pause began whose waiter has
    /// not gone yet (it woke late: a loaded host) waits for the pause's end
    /// instead of sending inside it — the partner said to stop; its token
    /// was spent before the pause, so it goes first when the pause ends.
    fn moved_due(&mut self) -> u64 {
        self.pauses.sort_by_key(|h| h.at_us);
        let mut due_us = self.due_us;
        for h in &self.pauses {
            if due_us >= h.at_us {
                due_us = due_us.saturating_add(h.shift_us);
            } else {
                due_us = due_us.max(h.at_us.saturating_add(h.shift_us));
            }
        }
        self.due
            .saturating_add((due_us - self.due_us).saturating_mul(1000))
    }
}

/// What an [`Acquisition`] does next: the core's one step type
/// ([`ratebound::wait::Step`]) — `Call(call)`: run it and hand its outcome
/// to [`Engine::acquire_reply`]; `Sleep(d)`: sleep, then step again;
/// `Done(source)`: the tokens are the caller's (the path that answered).
/// [`ratebound::wait::drive_blocking`] runs it (and, with tokio,
/// `ratebound::wait::drive_calls`).
pub type Step = ratebound::wait::Step<Call, Source>;

#[derive(Clone, Debug)]
enum State {
    Start,
    Pending(Call),
    RetryAt(u64),
    Held {
        /// Engine-clock nanoseconds when the tokens are due (moved by the
        /// pauses heard of).
        due: u64,
        source: Source,
        /// Where the slot is in Redis, when Redis answered.
        slot: Option<Slot>,
        /// The call that reserved them (to give them back).
        call: Option<Call>,
    },
    Done(Source),
    /// The wait cannot end in time: the wait asked for, and who said so.
    Failed(Duration, Source),
}

/// One caller's wait for global tokens (see [`Engine::acquire`]).
#[derive(Clone, Debug)]
pub struct Acquisition {
    scope: Option<String>,
    key: Vec<u8>,
    n: u64,
    /// Engine-clock nanoseconds.
    deadline: Option<u64>,
    state: State,
    /// The last news (see [`Engine::hear`]) this wait has looked at.
    seen: u64,
}

impl Acquisition {
    fn max_wait(&self, now: u64) -> Duration {
        match self.deadline {
            None => Duration::MAX,
            Some(d) => Duration::from_nanos(d.saturating_sub(now)),
        }
    }

    /// Whether the tokens are held ahead of time (a reservation waiting to
    /// be due): what an abandoned wait gives back.
    pub fn is_holding(&self) -> bool {
        matches!(self.state, State::Held { call: Some(_), .. })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use crate::config::Config;
    use ratebound::any::AnyClock;
    use ratebound::{ManualClock, Quota};

    pub(crate) const MS: Duration = Duration::from_millis(1);

    /// 10/s burst 1: T = tau = 100 000 µs.
    pub(crate) fn engine() -> (Engine, ManualClock) {
        let clock = ManualClock::new();
        let c = Config::new(Algorithm::TokenBucket(
            Quota::parse("10/s burst 1").unwrap(),
        ));
        (
            Engine::with_clock(c, AnyClock::Manual(clock.clone())).unwrap(),
            clock,
        )
    }

    /// A wait for `key` whose reservation's call has been handed out.
    pub(crate) fn pending(e: &Engine, key: &str) -> Acquisition {
        let mut a = e.acquire(None, key.as_bytes(), 1, None).unwrap();
        match e.acquire_step(&mut a).unwrap() {
            Step::Call(c) => assert_eq!(c.kind.as_str(), "reserve"),
            other => panic!("{other:?}"),
        }
        a
    }

    /// Redis' answer: reserved at `now_us`, due `wait_us` later.
    pub(crate) fn granted(e: &Engine, a: &mut Acquisition, now_us: i64, wait_us: i64) {
        e.acquire_reply(
            a,
            CallOutcome::Reply(&[1, 0, wait_us, wait_us + 100_000, 1, 0, now_us, 0, 0]),
        );
    }

    /// A wait for `key` that Redis has answered as [`granted`] says.
    pub(crate) fn reserved(e: &Engine, key: &str, now_us: i64, wait_us: i64) -> Acquisition {
        let mut a = pending(e, key);
        granted(e, &mut a, now_us, wait_us);
        a
    }

    pub(crate) fn news(at_us: u64, shift_us: u64, id: u64, key: &str) -> Vec<u8> {
        format!("{at_us}:{shift_us}:{id:016x}:{key}").into_bytes()
    }

    pub(crate) fn step(e: &Engine, a: &mut Acquisition) -> Step {
        e.acquire_step(a).unwrap()
    }

    #[test]
    fn a_pause_heard_while_sleeping_moves_the_wake_up() {
        let (e, clock) = engine();
        let mut a = reserved(&e, "k", 1_000_000, 300_000);
        assert_eq!(step(&e, &mut a), Step::Sleep(300 * MS));
        clock.advance(50 * MS);
        // Another instance paused 600 ms, 50 ms after the reservation.
        assert!(e.hear(&news(1_050_000, 600_000, 1, "rb:tb:k")));
        // The sleeper wakes at its old time and is told to sleep on.
        clock.advance(250 * MS);
        assert_eq!(step(&e, &mut a), Step::Sleep(600 * MS));
        clock.advance(599 * MS);
        assert_eq!(step(&e, &mut a), Step::Sleep(MS));
        clock.advance(MS);
        assert_eq!(step(&e, &mut a), Step::Done(Source::Redis));
        // Heard twice (Redis never does, a replay might): once.
        assert!(!e.hear(&news(1_050_000, 600_000, 1, "rb:tb:k")));
    }

    #[test]
    fn news_of_a_pause_before_the_reservation_is_not_applied() {
        let (e, clock) = engine();
        // Heard before the call was handed out: Redis' answer counts it,
        // even if its time looks later (another server's clock, after a
        // failover).
        assert!(e.hear(&news(1_100_000, 600_000, 1, "rb:tb:k")));
        let mut a = pending(&e, "k");
        // Heard after, but it ran before the reservation (900 000 < 1 000 000).
        assert!(e.hear(&news(900_000, 600_000, 2, "rb:tb:k")));
        granted(&e, &mut a, 1_000_000, 300_000);
        assert_eq!(step(&e, &mut a), Step::Sleep(300 * MS));
        // Another key's: nothing.
        assert!(e.hear(&news(1_100_000, 600_000, 3, "rb:tb:other")));
        clock.advance(300 * MS);
        assert_eq!(step(&e, &mut a), Step::Done(Source::Redis));
    }

    #[test]
    fn a_late_waiter_waits_for_a_pause_that_began_after_its_slot_was_due() {
        let (e, clock) = engine();
        let mut a = reserved(&e, "k", 1_000_000, 300_000);
        assert_eq!(step(&e, &mut a), Step::Sleep(300 * MS));
        // The slot was due at 1 300 000; a pause ran 1 µs later, for 600 ms,
        // and this waiter (woken late) has not gone: it waits for the end
        // (1 900 001) rather than send inside the pause. Its slot was not
        // moved in Redis (due before the pause), so it goes first then.
        assert!(e.hear(&news(1_300_001, 600_000, 4, "rb:tb:k")));
        clock.advance(300 * MS);
        assert_eq!(
            step(&e, &mut a),
            Step::Sleep(600 * MS + Duration::from_micros(1))
        );
        clock.advance(600 * MS + Duration::from_micros(1));
        assert_eq!(step(&e, &mut a), Step::Done(Source::Redis));
    }

    #[test]
    fn news_that_overtakes_the_reply_and_a_tie_are_applied() {
        let (e, _) = engine();
        let mut a = pending(&e, "k");
        // The pause ran in the same µs as the reservation, and its news
        // came (on the pub/sub connection) before the reservation's reply:
        // applied — a wait too long rather than one inside the pause.
        assert!(e.hear(&news(1_000_000, 200_000, 1, "rb:tb:k")));
        granted(&e, &mut a, 1_000_000, 300_000);
        assert_eq!(step(&e, &mut a), Step::Sleep(500 * MS));
        // The slot due at the very µs a pause runs moves too.
        let mut b = pending(&e, "k");
        granted(&e, &mut b, 1_000_000, 300_000);
        assert!(e.hear(&news(1_300_000, 100_000, 2, "rb:tb:k")));
        assert_eq!(step(&e, &mut b), Step::Sleep(400 * MS));
        // `a` moves again (its slot, at 1 500 000, was not due).
        assert_eq!(step(&e, &mut a), Step::Sleep(600 * MS));
    }

    #[test]
    fn pauses_apply_in_the_order_they_ran_whatever_the_order_heard() {
        // Reserved at 1 000, due at 301 000. P1 ran at 100 000 (600 ms
        // to 700 000 + …): the slot moves to 801 000. P2 ran at 700 000 and
        // moved the slot (801 000 ≥ 700 000) by 200 ms: 1 001 000.
        let (e, _) = engine();
        let mut a = reserved(&e, "k", 1_000, 300_000);
        // P2's news first: alone, it would not move the slot (301 000 <
        // 700 000) — the waiter, late, would wait for its end (900 000).
        assert!(e.hear(&news(700_000, 200_000, 2, "rb:tb:k")));
        assert_eq!(step(&e, &mut a), Step::Sleep(899 * MS));
        assert!(e.hear(&news(100_000, 500_000, 1, "rb:tb:k")));
        assert_eq!(step(&e, &mut a), Step::Sleep(1000 * MS));
        // The same news heard in the order they ran.
        let (e, _) = engine();
        let mut a = reserved(&e, "k", 1_000, 300_000);
        e.hear(&news(100_000, 500_000, 1, "rb:tb:k"));
        e.hear(&news(700_000, 200_000, 2, "rb:tb:k"));
        assert_eq!(step(&e, &mut a), Step::Sleep(1000 * MS));
    }

    #[test]
    fn a_reply_for_a_caller_gone_gives_back_what_it_reserved() {
        let (e, _) = engine();
        let mut a = pending(&e, "k");
        let State::Pending(call) = a.state.clone() else {
            panic!("{a:?}")
        };
        // Due later or at once: the caller never saw it — given back, up
        // to the TAT the reservation left.
        for wait_us in [300_000, 0] {
            let back = e
                .orphaned(
                    &call,
                    CallOutcome::Reply(&[1, 0, wait_us, wait_us + 100_000, 1, 0, 1_000_000, 0, 0]),
                )
                .expect("given back");
            assert_eq!(back.kind.as_str(), "return");
            assert_eq!(back.args[5], (1_100_000 + wait_us).to_string());
        }
        // Refused, or Redis down (the fail policy answered): nothing taken.
        assert!(
            e.orphaned(
                &call,
                CallOutcome::Reply(&[0, 0, 900_000, 0, 0, 0, 1_000_000, 0, 0])
            )
            .is_none()
        );
        assert!(e.orphaned(&call, CallOutcome::Timeout).is_none());
        // The wait itself gives nothing back: its call is in flight.
        assert!(e.acquire_abandon(&mut a).is_none());
    }

    #[test]
    fn told_directly_the_same_rule_holds() {
        let (e, _) = engine();
        let mut a = reserved(&e, "k", 1_000_000, 300_000);
        e.acquire_shift(&mut a, 900_000, 600 * MS); // before the reservation
        assert_eq!(step(&e, &mut a), Step::Sleep(300 * MS));
        e.acquire_shift(&mut a, 1_100_000, 600 * MS);
        assert_eq!(step(&e, &mut a), Step::Sleep(900 * MS));
        // A wait that holds nothing has nothing to move.
        let mut b = pending(&e, "k");
        granted(&e, &mut b, 1_000_000, 0);
        e.hear(&news(1_000_000, 600_000, 9, "rb:tb:k"));
        assert_eq!(step(&e, &mut b), Step::Done(Source::Redis));
    }
}
