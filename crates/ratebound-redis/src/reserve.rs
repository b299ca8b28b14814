//! Waiting for a global token, sans-I/O: a reservation in Redis (one call,
//! the token bucket's script takes the tokens ahead of time and answers
//! with the wait), a pause for every instance (and its news, which moves
//! the waiters already asleep in every instance: [`Engine::hear`]), and
//! [`Acquisition`] — one
//! caller's wait as a state machine the drivers run: make the call it
//! hands out, sleep what it says, give back what it holds if the caller
//! gives up. Every rule (the deadline, the fail policy while waiting,
//! leases first, what a window does) is decided here; a driver only
//! performs the I/O and sleeps.

use std::time::Duration;

use ratebound::{Clock, Error};

use crate::engine::{Algorithm, Call, CallKind, Engine, Outcome, Source, well_formed};
use crate::news::{Heard, NEWS_MAX_KEY, parse_news};

/// The longest wait a script is asked to accept: 2^53 µs (Lua's doubles
/// are exact below it; about 285 years, i.e. no bound).
pub(crate) const UNBOUNDED_US: u64 = (1 << 53) - 1;

/// What a reservation came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reserved {
    /// The tokens are taken: go ahead after `wait` (zero: now).
    Granted {
        /// How long until the tokens are due.
        wait: Duration,
        /// Which path answered.
        source: Source,
        /// When they are due, in µs of Redis' clock (what a pause moves);
        /// `None` when Redis did not answer (a lease, the fail policy).
        due_us: Option<u64>,
    },
    /// Nothing taken: the tokens are due only after `wait`, beyond the
    /// longest wait accepted — or the fail policy refused (`closed`, with
    /// the breaker's cool-down as `wait`).
    Refused {
        /// The wait the tokens would need.
        wait: Duration,
        /// Which path answered.
        source: Source,
    },
    /// Nothing taken and nothing reserved (a window cannot reserve; the
    /// local share while Redis is down): ask again after `wait`.
    Retry {
        /// How long to sleep before asking again, at least 1 ns.
        wait: Duration,
        /// Which path answered.
        source: Source,
    },
}

/// The first step of a reservation: answered already, or a call to make.
#[derive(Clone, Debug)]
pub enum ReserveBegin {
    /// Answered without Redis (a lease, or the fail policy while the
    /// breaker is open).
    Done(Reserved),
    /// Run this call, then pass its outcome to [`Engine::finish_reserve`].
    Call(Call),
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Engine {
    fn capacity_check(&self, n: u64) -> Result<(), Error> {
        let capacity = self.config.algorithm.capacity();
        if n == 0 || n > capacity {
            return Err(if n == 0 {
                Error::InvalidNumber {
                    name: "n",
                    value: "0".to_string(),
                    reason: "a wait is for at least 1 token",
                }
            } else {
                Error::InsufficientCapacity {
                    requested: n,
                    burst: capacity,
                }
            });
        }
        Ok(())
    }

    /// Step one of reserving `n` tokens for `key` (within `scope`, as in
    /// [`begin_in`](Self::begin_in)), waiting at most `max_wait`: a token
    /// bucket takes them in Redis even if they are due only later, and
    /// every instance is served in the order its call reaches Redis. A
    /// lease with `n` tokens answers first.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a window (it cannot reserve: wait with
    /// [`acquire`](Self::acquire)); [`Error::InsufficientCapacity`] for an
    /// `n` above the burst, [`Error::InvalidNumber`] for `n = 0`.
    pub fn begin_reserve(
        &self,
        scope: Option<&str>,
        key: &[u8],
        n: u64,
        max_wait: Duration,
    ) -> Result<ReserveBegin, Error> {
        if !matches!(self.config.algorithm, Algorithm::TokenBucket(_)) {
            return Err(Error::Unsupported {
                operation: "reserve",
                algorithm: self.algorithm(),
            });
        }
        self.begin_take(scope, key, n, max_wait)
    }

    /// [`begin_reserve`](Self::begin_reserve), or for a window a check whose
    /// refusal is [`Reserved::Retry`] after its exact `retry_after`.
    fn begin_take(
        &self,
        scope: Option<&str>,
        key: &[u8],
        n: u64,
        max_wait: Duration,
    ) -> Result<ReserveBegin, Error> {
        self.capacity_check(n)?;
        let now = self.clock.now();
        let full = self.redis_key(scope, key);
        if self.config.lease > 0 {
            let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(lease) = leases.get_mut(&full)
                && lease.expires > now
                && lease.tokens >= n
            {
                lease.tokens -= n;
                return Ok(ReserveBegin::Done(Reserved::Granted {
                    wait: Duration::ZERO,
                    source: Source::Lease,
                    due_us: None,
                }));
            }
        }
        if !self.breaker.may_call(now) {
            return Ok(ReserveBegin::Done(
                self.fail_reserve(&full, n, now, max_wait),
            ));
        }
        let kind = match self.config.algorithm {
            Algorithm::TokenBucket(_) => CallKind::Reserve {
                max_wait_us: micros(max_wait).min(UNBOUNDED_US),
            },
            _ => CallKind::Check,
        };
        Ok(ReserveBegin::Call(self.call(full, kind, n)))
    }

    /// Step two of a reservation: what became of `call`.
    pub fn finish_reserve(&self, call: &Call, outcome: Outcome<'_>) -> Reserved {
        let now = self.clock.now();
        let max_wait = match call.kind {
            CallKind::Reserve { max_wait_us } => Duration::from_micros(max_wait_us),
            _ => Duration::MAX,
        };
        let reply = match outcome {
            Outcome::Reply(r) if well_formed(r) => r,
            Outcome::Reply(_) | Outcome::Timeout | Outcome::Failed(_) => {
                self.breaker.failure(now);
                return self.fail_reserve(&call.key, call.n, now, max_wait);
            }
        };
        self.breaker.success();
        let source = if reply[5] == 1 {
            Source::Damaged
        } else {
            Source::Redis
        };
        let wait = Duration::from_micros(reply[2] as u64);
        let granted = reply[0] == 1;
        match call.kind {
            CallKind::Reserve { .. } if granted => Reserved::Granted {
                wait,
                source,
                due_us: Some((reply[6] as u64).saturating_add(reply[2] as u64)),
            },
            CallKind::Reserve { .. } => Reserved::Refused { wait, source },
            // A window's check.
            _ if granted => Reserved::Granted {
                wait: Duration::ZERO,
                source,
                due_us: Some(reply[6] as u64),
            },
            _ => Reserved::Retry {
                wait: wait.max(Duration::from_nanos(1)),
                source,
            },
        }
    }

    /// The fail policy's answer to a reservation: `open` admits at once,
    /// `closed` refuses at once (its wait: the breaker's cool-down),
    /// `local` asks the local share (a refusal there: ask again after its
    /// wait, or refused beyond `max_wait`).
    fn fail_reserve(&self, key: &[u8], n: u64, now: u64, max_wait: Duration) -> Reserved {
        let d = self.fail(key, n, now);
        let source = d.source();
        if d.is_allowed() {
            return Reserved::Granted {
                wait: Duration::ZERO,
                source,
                due_us: None,
            };
        }
        let wait = d.retry_after().max(Duration::from_nanos(1));
        if source == Source::Local && wait <= max_wait {
            Reserved::Retry { wait, source }
        } else {
            Reserved::Refused { wait, source }
        }
    }

    /// The call that gives a granted reservation's tokens back (the caller
    /// gave up before they were due): `reserve_call` is the call that took
    /// them. Never below the present, nor into a pause that is on. Run it
    /// like any call; its outcome needs no `finish`.
    pub fn give_back(&self, reserve_call: &Call) -> Call {
        self.call(reserve_call.key.clone(), CallKind::Return, reserve_call.n)
    }

    /// The call that pauses `key` (within `scope`) for `duration` from
    /// Redis' now, for every instance: the bucket is empty until then, and
    /// every slot already reserved moves past it, in its order (see
    /// `lua/gcra.lua`). A pause that ends no later than one already on
    /// changes nothing, so instances that all obey one partner's
    /// `Retry-After` pause once.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a window (it has no slots to move);
    /// [`Error::InvalidNumber`] for a zero pause.
    pub fn begin_pause(
        &self,
        scope: Option<&str>,
        key: &[u8],
        duration: Duration,
    ) -> Result<Call, Error> {
        if !matches!(self.config.algorithm, Algorithm::TokenBucket(_)) {
            return Err(Error::Unsupported {
                operation: "pause",
                algorithm: self.algorithm(),
            });
        }
        let for_us = micros(duration);
        if for_us == 0 || for_us > UNBOUNDED_US {
            return Err(Error::InvalidNumber {
                name: "seconds",
                value: format!("{}", duration.as_secs_f64()),
                reason: "a pause is at least 1 µs and at most 2^53 µs",
            });
        }
        Ok(self.call(self.redis_key(scope, key), CallKind::Pause { for_us }, 1))
    }

    /// What became of a pause: `(start_us, shift)` — the script ran at
    /// `start_us` (Redis' clock) and moved every slot due from then on
    /// `shift` later (zero: a pause already on covered it) — or `None` when
    /// Redis could not be told (a failure like any other for the breaker).
    /// [`pause_news`](Self::pause_news) tells the waiters of every
    /// instance.
    pub fn finish_pause(&self, outcome: Outcome<'_>) -> Option<(u64, Duration)> {
        let now = self.clock.now();
        match outcome {
            Outcome::Reply(r) if well_formed(r) => {
                self.breaker.success();
                // Slots from the script's now on moved: none lies between
                // it and the end of an earlier pause (that pause moved them).
                Some((r[6] as u64, Duration::from_micros(r[2] as u64)))
            }
            _ => {
                self.breaker.failure(now);
                None
            }
        }
    }

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
        let now = self.clock.now();
        Ok(Acquisition {
            scope: scope.map(str::to_string),
            key: key.to_vec(),
            n,
            deadline: timeout.map(|t| now.saturating_add(nanos(t))),
            state: State::Start,
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
                State::Failed(wait) => {
                    return Err(Error::DeadlineExceeded {
                        wait: *wait,
                        max_wait: a.max_wait(now),
                    });
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
                    match self.begin_take(a.scope.as_deref(), &a.key, a.n, max_wait)? {
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
    pub fn acquire_reply(&self, a: &mut Acquisition, outcome: Outcome<'_>) {
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
            } => {
                let due = now.saturating_add(nanos(wait));
                State::Held {
                    due,
                    source,
                    slot: due_us.map(|due_us| Slot {
                        reserved_us: due_us.saturating_sub(micros(wait)),
                        due_us,
                        due,
                        pauses: Vec::new(),
                    }),
                    call,
                }
            }
            Reserved::Refused { wait, .. } => State::Failed(wait),
            Reserved::Retry { wait, .. } => {
                let at = now.saturating_add(nanos(wait));
                match a.deadline {
                    Some(deadline) if at > deadline => State::Failed(wait),
                    _ => State::RetryAt(at),
                }
            }
        };
    }

    /// The caller gave up (cancelled, timed out elsewhere, dropped): the
    /// call that gives held tokens back, if any are held. The wait is over.
    pub fn acquire_abandon(&self, a: &mut Acquisition) -> Option<Call> {
        let state = std::mem::replace(&mut a.state, State::Done(Source::Redis));
        match state {
            State::Held {
                call: Some(call), ..
            } => Some(self.give_back(&call)),
            _ => None,
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

    /// The pub/sub channel on which this limiter's instances tell each
    /// other of pauses: the prefix and `pause` (`rb:pause`). Keys are the
    /// prefix and an algorithm's tag (`rb:tb:…`), so no key is named so —
    /// and channels are not keys in Redis anyway.
    pub fn pause_channel(&self) -> Vec<u8> {
        let mut c = self.config.prefix.as_bytes().to_vec();
        c.extend_from_slice(b"pause");
        c
    }

    /// The message to `PUBLISH` on [`pause_channel`](Self::pause_channel)
    /// after `call` (a pause) came to `(start_us, shift)` (what
    /// [`finish_pause`](Self::finish_pause) returned), so that waiters of
    /// every instance move their slots as the script moved them in Redis;
    /// `None` when there is nothing to tell (a zero shift: a pause already
    /// on covered it). This engine's own waiters are told at once (the
    /// message that comes back on the channel is known by its id).
    ///
    /// The message is ASCII then bytes: `<start_us>:<shift_us>:<id>:<key>`
    /// — decimal µs of Redis' clock, the shift in µs, 16 hex digits that
    /// name this pause, then the Redis key (`rb:tb:alice`, raw bytes). A
    /// key longer than 4 KiB gets no message (its waiters hear of no
    /// pause; their next call still finds it).
    pub fn pause_news(&self, call: &Call, start_us: u64, shift: Duration) -> Option<Vec<u8>> {
        let shift_us = micros(shift);
        if !matches!(call.kind, CallKind::Pause { .. }) || shift_us == 0 {
            return None;
        }
        let id = self.news.fresh_id();
        self.news.record(&call.key, start_us, shift_us, id);
        if call.key.len() > NEWS_MAX_KEY {
            return None;
        }
        let mut m = format!("{start_us}:{shift_us}:{id:016x}:").into_bytes();
        m.extend_from_slice(&call.key);
        Some(m)
    }

    /// Takes in a message heard on [`pause_channel`](Self::pause_channel)
    /// (another instance's [`pause_news`](Self::pause_news)); whether it
    /// was news. A message that is malformed, of a key this limiter cannot
    /// hold (another algorithm's, another prefix's), or already heard is
    /// ignored — it is input from the network. The engine keeps the last
    /// 10 000 pieces of news, over all keys (the oldest is dropped first).
    ///
    /// The rule, applied lazily at each [`acquire_step`](Self::acquire_step)
    /// of a wait that holds a reservation: a pause whose script ran at
    /// `start_us` moves the slot `shift` later if
    /// - it was heard after the reservation's call was handed out (news
    ///   heard before is of a pause that ran before the reservation, which
    ///   Redis already counted in its answer), and
    /// - it ran after the reservation: `start_us ≥` the time the
    ///   reservation's script ran (both on Redis' clock; the same µs counts
    ///   as after — a wait too long, never too short), and
    /// - the slot was not yet due when it ran: `start_us ≤` its due time, as
    ///   moved by the pauses that ran before this one (the pauses are
    ///   applied in the order they ran, whatever the order they are heard
    ///   in).
    ///
    /// That is how the script moved the slot in Redis. Shifts only make a
    /// wait longer: a sleeper needs no interruption.
    pub fn hear(&self, message: &[u8]) -> bool {
        let Some((at_us, shift_us, id, key)) = parse_news(message) else {
            return false;
        };
        let Algorithm::TokenBucket(_) = self.config.algorithm else {
            return false;
        };
        // Only this prefix's token bucket keys (`rb:tb:` or `rb:tb@`).
        let ours = key
            .strip_prefix(self.config.prefix.as_bytes())
            .and_then(|k| k.strip_prefix(b"tb"))
            .is_some_and(|k| k.first().is_some_and(|b| *b == b':' || *b == b'@'));
        ours && self.news.record(key, at_us, shift_us, id)
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

/// What an [`Acquisition`] does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Run this call and hand its outcome to [`Engine::acquire_reply`].
    Call(Call),
    /// Sleep this long, then step again.
    Sleep(Duration),
    /// The tokens are the caller's (the path that answered).
    Done(Source),
}

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
    Failed(Duration),
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
mod tests {
    use super::*;
    use crate::engine::Config;
    use crate::news::NEWS_KEPT;
    use ratebound::any::AnyClock;
    use ratebound::{ManualClock, Quota};

    const MS: Duration = Duration::from_millis(1);

    /// 10/s burst 1: T = tau = 100 000 µs.
    fn engine() -> (Engine, ManualClock) {
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
    fn pending(e: &Engine, key: &str) -> Acquisition {
        let mut a = e.acquire(None, key.as_bytes(), 1, None).unwrap();
        match e.acquire_step(&mut a).unwrap() {
            Step::Call(c) => assert_eq!(c.kind.as_str(), "reserve"),
            other => panic!("{other:?}"),
        }
        a
    }

    /// Redis' answer: reserved at `now_us`, due `wait_us` later.
    fn granted(e: &Engine, a: &mut Acquisition, now_us: i64, wait_us: i64) {
        e.acquire_reply(
            a,
            Outcome::Reply(&[1, 0, wait_us, wait_us + 100_000, 1, 0, now_us]),
        );
    }

    fn news(at_us: u64, shift_us: u64, id: u64, key: &str) -> Vec<u8> {
        format!("{at_us}:{shift_us}:{id:016x}:{key}").into_bytes()
    }

    fn step(e: &Engine, a: &mut Acquisition) -> Step {
        e.acquire_step(a).unwrap()
    }

    #[test]
    fn a_pause_heard_while_sleeping_moves_the_wake_up() {
        let (e, clock) = engine();
        let mut a = pending(&e, "k");
        granted(&e, &mut a, 1_000_000, 300_000);
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
        let mut a = pending(&e, "k");
        granted(&e, &mut a, 1_000_000, 300_000);
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
        let mut a = pending(&e, "k");
        granted(&e, &mut a, 1_000, 300_000);
        // P2's news first: alone, it would not move the slot (301 000 <
        // 700 000) — the waiter, late, would wait for its end (900 000).
        assert!(e.hear(&news(700_000, 200_000, 2, "rb:tb:k")));
        assert_eq!(step(&e, &mut a), Step::Sleep(899 * MS));
        assert!(e.hear(&news(100_000, 500_000, 1, "rb:tb:k")));
        assert_eq!(step(&e, &mut a), Step::Sleep(1000 * MS));
        // The same news heard in the order they ran.
        let (e, _) = engine();
        let mut a = pending(&e, "k");
        granted(&e, &mut a, 1_000, 300_000);
        e.hear(&news(100_000, 500_000, 1, "rb:tb:k"));
        e.hear(&news(700_000, 200_000, 2, "rb:tb:k"));
        assert_eq!(step(&e, &mut a), Step::Sleep(1000 * MS));
    }

    #[test]
    fn an_engine_tells_its_own_waiters_and_knows_its_echo() {
        let (e, clock) = engine();
        let mut a = pending(&e, "k");
        granted(&e, &mut a, 1_000_000, 300_000);
        let call = e.begin_pause(None, b"k", 600 * MS).unwrap();
        let paused = e
            .finish_pause(Outcome::Reply(&[1, 0, 600_000, 900_000, 0, 0, 1_050_000]))
            .unwrap();
        assert_eq!(paused, (1_050_000, 600 * MS));
        let m = e.pause_news(&call, paused.0, paused.1).unwrap();
        let text = String::from_utf8(m.clone()).unwrap();
        let parts: Vec<&str> = text.splitn(4, ':').collect();
        assert_eq!(
            (parts[0], parts[1], parts[3]),
            ("1050000", "600000", "rb:tb:k")
        );
        assert_eq!(parts[2].len(), 16);
        // The echo from the channel is known already: applied once.
        assert!(!e.hear(&m));
        clock.advance(300 * MS);
        assert_eq!(step(&e, &mut a), Step::Sleep(600 * MS));
        // Another instance hears it as news; a zero shift is no news.
        let (other, _) = engine();
        assert!(other.hear(&m));
        assert_eq!(e.pause_news(&call, 1_050_000, Duration::ZERO), None);
        assert_eq!(e.pause_channel(), b"rb:pause");
        // Only a pause's outcome is news.
        let reserve = match e.begin_reserve(None, b"k", 1, MS).unwrap() {
            ReserveBegin::Call(c) => c,
            ReserveBegin::Done(r) => panic!("{r:?}"),
        };
        assert_eq!(e.pause_news(&reserve, 1, MS), None);
    }

    #[test]
    fn malformed_or_foreign_messages_are_ignored() {
        let (e, _) = engine();
        let id = "00000000000000ff";
        for bad in [
            String::new(),
            "garbage".to_string(),
            format!("1:2:{id}:"),
            format!("1:2:{id}"),
            format!("1:0:{id}:rb:tb:k"),
            format!("x:2:{id}:rb:tb:k"),
            format!("-1:2:{id}:rb:tb:k"),
            format!("1:2.5:{id}:rb:tb:k"),
            format!(" 1:2:{id}:rb:tb:k"),
            format!("1:99999999999999999:{id}:rb:tb:k"),
            format!("{}:2:{id}:rb:tb:k", 1u64 << 60),
            "1:2:ff:rb:tb:k".to_string(),
            "1:2:00000000000000FF:rb:tb:k".to_string(),
            "1:2:00000000000000fg:rb:tb:k".to_string(),
            format!("1:2:{id}:other:tb:k"),
            format!("1:2:{id}:rb:fw:k"),
            format!("1:2:{id}:rb:tbk"),
            format!("1:2:{id}:rb:tb:{}", "k".repeat(NEWS_MAX_KEY)),
        ] {
            assert!(!e.hear(bad.as_bytes()), "{bad:?}");
        }
        assert!(!e.hear(&[0xff, b':', 0xfe]));
        assert_eq!(e.news.len(), 0);
        // Keys are bytes, ':' included; scoped keys are the bucket's too.
        assert!(e.hear(format!("1:2:{id}:rb:tb:a:b\u{e9}").as_bytes()));
        assert!(e.hear(format!("1:2:{id}:rb:tb@policy:k").as_bytes()));
        // A window cannot be paused: it hears nothing.
        let w = Engine::new(Config::new(Algorithm::FixedWindow {
            limit: 1,
            window: Duration::from_secs(1),
        }))
        .unwrap();
        assert!(!w.hear(&news(1, 2, 3, "rb:tb:k")));
    }

    #[test]
    fn the_table_keeps_the_last_ten_thousand() {
        let (e, clock) = engine();
        let mut a = pending(&e, "first");
        granted(&e, &mut a, 1_000, 300_000);
        assert!(e.hear(&news(2_000, 100_000, 0, "rb:tb:first")));
        for i in 1..=NEWS_KEPT as u64 {
            assert!(e.hear(&news(2_000, 100_000, i, &format!("rb:tb:{}", i % 7))));
        }
        assert_eq!(e.news.len(), NEWS_KEPT);
        assert_eq!(e.news.lock().by_key.len(), 7, "'first' was dropped");
        // Its waiter missed it (it goes ahead at its old time — its next
        // call would find the pause in Redis).
        clock.advance(300 * MS);
        assert_eq!(step(&e, &mut a), Step::Done(Source::Redis));
    }

    #[test]
    fn told_directly_the_same_rule_holds() {
        let (e, _) = engine();
        let mut a = pending(&e, "k");
        granted(&e, &mut a, 1_000_000, 300_000);
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
