//! Waiting for a global token, sans-I/O: a reservation in Redis (one call,
//! the token bucket's script takes the tokens ahead of time and answers
//! with the wait), a pause for every instance, and [`Acquisition`] — one
//! caller's wait as a state machine the drivers run: make the call it
//! hands out, sleep what it says, give back what it holds if the caller
//! gives up. Every rule (the deadline, the fail policy while waiting,
//! leases first, what a window does) is decided here; a driver only
//! performs the I/O and sleeps.

use std::time::Duration;

use ratebound::{Clock, Error};

use crate::engine::{Algorithm, Call, CallKind, Engine, Outcome, Source, well_formed};

/// The longest wait a script is asked to accept: 2^53 µs (Lua's doubles
/// are exact below it; about 285 years, i.e. no bound).
const UNBOUNDED_US: u64 = (1 << 53) - 1;

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

    /// What became of a pause: `(start_us, shift)` — every slot reserved
    /// from `start_us` on (Redis' clock) moved `shift` later (zero: a pause
    /// already on covered it; [`acquire_shift`](Self::acquire_shift) tells
    /// a waiter) — or `None` when Redis could not be told (a failure like
    /// any other for the breaker).
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
    pub fn acquire_step(&self, a: &mut Acquisition) -> Result<Step, Error> {
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
                        ReserveBegin::Call(call) => a.state = State::Pending(call),
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
            } => State::Held {
                due: now.saturating_add(nanos(wait)),
                source,
                due_us,
                call,
            },
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

    /// News of a pause (another instance's, e.g. by pub/sub): a slot held
    /// from `start_us` on (Redis' clock) moves `shift` later, as the
    /// script moved it in Redis.
    pub fn acquire_shift(&self, a: &mut Acquisition, start_us: u64, shift: Duration) {
        if let State::Held {
            due,
            due_us: Some(due_us),
            ..
        } = &mut a.state
            && *due_us >= start_us
        {
            *due_us = due_us.saturating_add(micros(shift));
            *due = due.saturating_add(nanos(shift));
        }
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
        /// Engine-clock nanoseconds when the tokens are due.
        due: u64,
        source: Source,
        /// The same moment in µs of Redis' clock, when Redis answered.
        due_us: Option<u64>,
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
