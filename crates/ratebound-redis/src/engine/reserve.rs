//! A reservation in Redis, sans-I/O: one call, the token bucket's script
//! takes the tokens ahead of time and answers with the wait ([`Reserved`]);
//! for a window, a check whose refusal says when to ask again. A caller's
//! whole wait is an [`Acquisition`](crate::Acquisition) (`acquisition.rs`);
//! a pause for every instance is in `pause.rs`.

use std::time::Duration;

use ratebound::{Clock, Error};

use crate::algorithm::Algorithm;
use crate::call::{Call, CallKind, CallOutcome, well_formed};
use crate::decision::Source;
use crate::engine::Engine;

/// The longest wait a script is asked to accept: 2^53 µs (Lua's doubles
/// are exact below it; about 285 years, i.e. no bound).
pub(crate) const UNBOUNDED_US: u64 = (1 << 53) - 1;

/// How soon a wait whose call never left the client asks again: the call
/// already waited its whole deadline for the client's pool or queue, so a
/// short pause suffices (the wait's own deadline still bounds it).
pub(crate) const BUSY_RETRY: Duration = Duration::from_millis(1);

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
        /// The end of the slot they took: the bucket's TAT as this
        /// reservation left it, in µs of Redis' clock — what
        /// [`Engine::give_back`] needs. `None` when Redis did not answer.
        end_us: Option<u64>,
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

pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Engine {
    pub(crate) fn capacity_check(&self, n: u64) -> Result<(), Error> {
        let capacity = self.config.algorithm.capacity();
        if n > capacity {
            return Err(Error::InsufficientCapacity {
                requested: n,
                burst: capacity,
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
        self.bucket_only("reserve")?;
        self.begin_take(self.redis_key(scope, key), n, max_wait)
    }

    /// [`begin_reserve`](Self::begin_reserve) on the key `full` (as
    /// [`redis_key`](Self::redis_key) names it), or for a window a check
    /// whose refusal is [`Reserved::Retry`] after its exact `retry_after`.
    pub(crate) fn begin_take(
        &self,
        full: Vec<u8>,
        n: u64,
        max_wait: Duration,
    ) -> Result<ReserveBegin, Error> {
        self.capacity_check(n)?;
        let now = self.clock.now();
        if self.config.lease > 0 {
            let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(lease) = leases.get_mut(&full)
                && n > 0
                && lease.expires > now
                && lease.tokens >= n
            {
                lease.tokens -= n;
                self.health.count(Source::Lease);
                return Ok(ReserveBegin::Done(Reserved::Granted {
                    wait: Duration::ZERO,
                    source: Source::Lease,
                    due_us: None,
                    end_us: None,
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
    pub fn finish_reserve(&self, call: &Call, outcome: CallOutcome<'_>) -> Reserved {
        let now = self.clock.now();
        let max_wait = match call.kind {
            CallKind::Reserve { max_wait_us } => Duration::from_micros(max_wait_us),
            _ => Duration::MAX,
        };
        let reply = match outcome {
            CallOutcome::Reply(r) if call.replied(r) => r,
            // The client's own overload (never sent, or late while Redis
            // answered others): nothing reserved as far as the caller
            // knows; ask again soon, within the wait's own deadline.
            _ if self.overloaded(&outcome, now) => {
                let d = self.unsent(now);
                return Reserved::Retry {
                    wait: BUSY_RETRY,
                    source: d.source(),
                };
            }
            // What is left is Redis' failure: a timeout, an error, a reply
            // of another shape.
            _ => {
                self.failed(&outcome, now);
                return self.fail_reserve(&call.key, call.n, now, max_wait);
            }
        };
        self.answered(now);
        self.heard_word(call, reply);
        let source = if reply[5] == 1 {
            Source::Damaged
        } else {
            Source::Redis
        };
        self.health.count(source);
        let wait = Duration::from_micros(reply[2] as u64);
        let granted = reply[0] == 1;
        let now_us = reply[6] as u64;
        match call.kind {
            CallKind::Reserve { .. } if granted => Reserved::Granted {
                wait,
                source,
                due_us: Some(now_us.saturating_add(reply[2] as u64)),
                // reset_after is the new TAT less the script's now.
                end_us: Some(now_us.saturating_add(reply[3] as u64)),
            },
            CallKind::Reserve { .. } => Reserved::Refused { wait, source },
            // A window's check.
            _ if granted => Reserved::Granted {
                wait: Duration::ZERO,
                source,
                due_us: Some(now_us),
                end_us: None,
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
                end_us: None,
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
    /// them, `end_us` the end of their slot (its
    /// [`Reserved::Granted`]`.end_us`). Run it like any call; its outcome
    /// needs no `finish` (the reply's `taken`, `[4]`, is `n` if they went
    /// back, 0 if not: [`given_back`]).
    ///
    /// Only what nobody has built on comes back: Redis gives the tokens
    /// back only if the bucket's TAT is still `end_us` — no reservation was
    /// made after this one (or each was given back since, in the reverse
    /// order), and no pause moved it. Then the TAT returns to where the
    /// slot began (never below the present, nor into a pause that is on),
    /// exactly as if the tokens had never been taken. Otherwise nothing
    /// changes and the tokens are lost: the slots of the reservations
    /// still held never overlap, which is what keeps every window's
    /// admissions within `burst + rate·t` (see `lua/gcra.lua` and the
    /// core's `gcra::give_back`). A cancel in the middle of a queue
    /// therefore frees nothing: the survivors keep their slots and a new
    /// caller queues after the last of them.
    ///
    /// # Examples
    /// ```
    /// use ratebound::Quota;
    /// use ratebound_redis::{Algorithm, CallOutcome, Config, Engine, ReserveBegin, Reserved};
    /// use std::time::Duration;
    ///
    /// let engine = Engine::new(Config::new(Algorithm::TokenBucket(Quota::parse("10/s")?)))?;
    /// let ReserveBegin::Call(call) = engine.begin_reserve(None, b"k", 1, Duration::MAX)? else {
    ///     unreachable!()
    /// };
    /// // Redis' answer: granted at 7 000 000 µs, due in 100 ms, the TAT
    /// // left 200 ms ahead (reset_after).
    /// let r = engine.finish_reserve(&call, CallOutcome::Reply(&[1, 0, 100_000, 200_000, 1, 0, 7_000_000, 0, 0]));
    /// let Reserved::Granted { end_us: Some(end_us), .. } = r else { unreachable!() };
    /// assert_eq!(end_us, 7_200_000);
    /// let back = engine.give_back(&call, end_us);
    /// assert_eq!(back.args[4..], ["return", "7200000"]);
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    pub fn give_back(&self, reserve_call: &Call, end_us: u64) -> Call {
        let mut back = self.call(reserve_call.key.clone(), CallKind::Return, reserve_call.n);
        back.args[5] = end_us.to_string();
        back
    }

    /// The reply to a reservation (`call`, from [`begin_reserve`] or a
    /// wait's step) whose caller went away before it came — a dropped
    /// future, a cancelled task: the call that gives back what Redis
    /// reserved, due at once or not (nobody will use it), under
    /// [`give_back`](Self::give_back)'s rule. `None` when nothing was taken.
    ///
    /// [`begin_reserve`]: Self::begin_reserve
    pub fn orphaned(&self, call: &Call, outcome: CallOutcome<'_>) -> Option<Call> {
        match self.finish_reserve(call, outcome) {
            Reserved::Granted {
                end_us: Some(end_us),
                ..
            } => Some(self.give_back(call, end_us)),
            _ => None,
        }
    }
}

/// Whether a give-back's reply (see [`Engine::give_back`]) says the tokens
/// went back: `false` for nothing given (built on, paused since) or a
/// failed call.
pub fn given_back(outcome: CallOutcome<'_>) -> bool {
    matches!(outcome, CallOutcome::Reply(r) if well_formed(r) && r[4] > 0)
}
