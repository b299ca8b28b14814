//! Model checks of every concurrent path with loom.
//!
//! Run: `RUSTFLAGS="--cfg ratebound_loom" cargo test -p ratebound --release --test loom`
//! (`LOOM_MAX_PREEMPTIONS` bounds the search; ci/test uses 3).
//!
//! Each model runs a few threads against one bucket on a frozen clock, records
//! what every call returned, and then demands that some sequential order of
//! those calls, replayed on a simple token-counting reference model, returns
//! exactly the same answers and ends in the same state (linearizability).
#![cfg(ratebound_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use ratebound::{
    AllOf, Decision, FixedWindow, LeakyBucket, Limiter, ManualClock, Quota, Resumed, SlidingLog,
    SlidingWindow, TokenBucket,
};

const T: u64 = 1_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Check(u64),
    /// Reserve n tokens, accepting a wait of at most this many tokens' time.
    Reserve(u64, u64),
    /// Cancel the reservation made by this thread's previous op.
    CancelLast,
    /// Switch to this burst (same rate).
    SetBurst(u64),
    /// Switch to one token every this many `T`, with this burst.
    SetQuota(u64, u64),
    /// Pause for this many `T` (empty until then).
    Pause(u64),
    /// Lift the pause on, if nothing was built on it.
    Resume,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    Checked { allowed: bool, remaining: u64 },
    Reserved { wait_tokens: u64 },
    Refused,
    TooMany,
    Done,
    Resumed(Resumed),
}

fn seen(d: Decision) -> Seen {
    Seen::Checked {
        allowed: d.is_allowed(),
        remaining: d.remaining(),
    }
}

/// Runs one thread's ops against the real bucket.
fn run(bucket: &TokenBucket<ManualClock>, ops: &[Op]) -> Vec<Seen> {
    let mut out = Vec::new();
    let mut last = None;
    for op in ops {
        out.push(match *op {
            Op::Check(n) => bucket.check_n(n).map_or(Seen::TooMany, seen),
            Op::Reserve(n, max) => match bucket.reserve_n(n, Duration::from_nanos(max * T)) {
                Ok(r) => {
                    let wait_tokens = r.delay().as_nanos() as u64 / T;
                    last = Some(r);
                    Seen::Reserved { wait_tokens }
                }
                Err(_) => Seen::Refused,
            },
            Op::CancelLast => {
                if let Some(r) = last.take() {
                    r.cancel();
                }
                Seen::Done
            }
            Op::SetBurst(b) => {
                bucket.set_quota(
                    Quota::with_period(Duration::from_nanos(T))
                        .unwrap()
                        .with_burst(b)
                        .unwrap(),
                );
                Seen::Done
            }
            Op::SetQuota(periods, b) => {
                bucket.set_quota(
                    Quota::with_period(Duration::from_nanos(periods * T))
                        .unwrap()
                        .with_burst(b)
                        .unwrap(),
                );
                Seen::Done
            }
            Op::Pause(d) => {
                bucket.pause(Duration::from_nanos(d * T));
                Seen::Done
            }
            Op::Resume => Seen::Resumed(bucket.resume()),
        });
    }
    out
}

/// The reference: whole tokens on a frozen clock, `used` beyond a full bucket
/// (may exceed the burst while reservations are queued).
#[derive(Clone, Debug)]
struct Model {
    burst: u64,
    used: u64,
    generation: u64,
    /// Tokens' time from now until the latest pause ends (0: none).
    paused: u64,
}

struct ModelTicket {
    n: u64,
    used_after: u64,
    generation: u64,
}

impl Model {
    fn remaining(&self) -> u64 {
        self.burst.saturating_sub(self.used)
    }

    fn apply(&mut self, op: Op, last: &mut Option<ModelTicket>) -> Seen {
        match op {
            Op::Check(n) if n > self.burst => Seen::TooMany,
            Op::Check(n) => {
                let allowed = self.used + n <= self.burst;
                if allowed {
                    self.used += n;
                }
                Seen::Checked {
                    allowed,
                    remaining: self.remaining(),
                }
            }
            Op::Reserve(n, max) => {
                let wait_tokens = (self.used + n).saturating_sub(self.burst);
                if wait_tokens > max {
                    return Seen::Refused;
                }
                self.used += n;
                *last = Some(ModelTicket {
                    n,
                    used_after: self.used,
                    generation: self.generation,
                });
                Seen::Reserved { wait_tokens }
            }
            Op::CancelLast => {
                if let Some(t) = last.take()
                    && t.generation == self.generation
                {
                    // Only if nobody has built on it since: the state is
                    // still the one it left.
                    let before = self.used;
                    if self.used == t.used_after {
                        self.used -= t.n.min(self.used);
                    }
                    // Never into a pause that is on.
                    if self.paused > 0 {
                        self.used = self.used.max(before.min(self.burst + self.paused));
                    }
                }
                Seen::Done
            }
            // Empty until d tokens' time from now, every queued slot from
            // the pause's start (where a pause on ends) moved as much later
            // as the pause reaches beyond it; a pause ending no later than
            // the one on changes nothing.
            Op::Pause(d) => {
                if d > self.paused {
                    self.used = self.used.max(self.burst + self.paused) + (d - self.paused);
                    self.paused = d;
                }
                Seen::Done
            }
            // Lifted only from exactly what the pauses left (empty until
            // their end, nothing queued behind): empty now, no pause on.
            Op::Resume => Seen::Resumed(if self.paused == 0 {
                Resumed::NotPaused
            } else if self.used == self.burst + self.paused {
                self.used = self.burst;
                self.paused = 0;
                Resumed::Lifted
            } else {
                Resumed::Queued
            }),
            // On a frozen clock a whole token is a whole token at any rate:
            // a quota change keeps the count, whatever the period.
            Op::SetBurst(b) | Op::SetQuota(_, b) => {
                // Keep the token count (negative while in debt), capped at b.
                let tokens = self.burst as i64 - self.used as i64;
                self.used = (b as i64 - tokens.min(b as i64)) as u64;
                self.burst = b;
                self.generation += 1;
                Seen::Done
            }
        }
    }
}

/// True if some interleaving of the threads' op lists, run on the model,
/// reproduces every answer and the final number of available tokens.
fn linearizable(burst: u64, threads: &[(&[Op], Vec<Seen>)], available: u64) -> bool {
    linearizable_to(burst, threads, available, None)
}

/// [`linearizable`], and if `debt` is given, ending with that many tokens
/// owed beyond an empty bucket (how far the queue and the pauses reach).
fn linearizable_to(
    burst: u64,
    threads: &[(&[Op], Vec<Seen>)],
    available: u64,
    debt: Option<u64>,
) -> bool {
    fn search(
        model: Model,
        threads: &[(&[Op], Vec<Seen>)],
        pos: &mut Vec<usize>,
        tickets: &mut Vec<Option<ModelTicket>>,
        available: u64,
        debt: Option<u64>,
    ) -> bool {
        if pos.iter().zip(threads).all(|(p, (ops, _))| *p == ops.len()) {
            return model.remaining() == available
                && debt.is_none_or(|d| model.used.saturating_sub(model.burst) == d);
        }
        for i in 0..threads.len() {
            let (ops, seen) = &threads[i];
            if pos[i] == ops.len() {
                continue;
            }
            let mut next = model.clone();
            let saved = tickets[i].as_ref().map(|t| ModelTicket { ..*t });
            if next.apply(ops[pos[i]], &mut tickets[i]) == seen[pos[i]] {
                pos[i] += 1;
                if search(next, threads, pos, tickets, available, debt) {
                    return true;
                }
                pos[i] -= 1;
            }
            tickets[i] = saved;
        }
        false
    }
    let model = Model {
        burst,
        used: 0,
        generation: 0,
        paused: 0,
    };
    let mut pos = vec![0; threads.len()];
    let mut tickets = threads.iter().map(|_| None).collect();
    search(model, threads, &mut pos, &mut tickets, available, debt)
}

/// Runs `plans` on concurrent threads against a full bucket of `burst`
/// (one token per second, clock frozen at 10 s) and checks linearizability.
fn model_check(burst: u64, plans: &'static [&'static [Op]]) {
    model_check_to(burst, plans, false);
}

/// [`model_check`], also demanding the debt the model ends with: a
/// reservation after the threads shows how far the bucket is owed.
/// Each plan on a thread of its own against `limiter` (`run` makes one
/// plan's calls): every plan with what its calls saw, in the plans' order.
fn run_plans<L: Send + Sync + 'static>(
    limiter: &Arc<L>,
    plans: &'static [&'static [Op]],
    run: fn(&L, &[Op]) -> Vec<Seen>,
) -> Vec<(&'static [Op], Vec<Seen>)> {
    let handles: Vec<_> = plans
        .iter()
        .map(|ops| {
            let limiter = limiter.clone();
            thread::spawn(move || run(&limiter, ops))
        })
        .collect();
    plans
        .iter()
        .copied()
        .zip(handles.into_iter().map(|h| h.join().unwrap()))
        .collect()
}

fn model_check_debt(burst: u64, plans: &'static [&'static [Op]]) {
    model_check_to(burst, plans, true);
}

fn model_check_to(burst: u64, plans: &'static [&'static [Op]], with_debt: bool) {
    loom::model(move || {
        let clock = ManualClock::new();
        clock.set_nanos(10 * T);
        let quota = Quota::with_period(Duration::from_nanos(T))
            .unwrap()
            .with_burst(burst)
            .unwrap();
        let bucket = Arc::new(TokenBucket::with_clock(quota, clock));
        let results = run_plans(&bucket, plans, run);
        let available = bucket.available();
        let debt = with_debt.then(|| {
            let r = bucket
                .reserve_n(1, Duration::from_nanos(1_000 * T))
                .unwrap();
            (r.delay().as_nanos() as u64 / T).saturating_sub(1)
        });
        assert!(
            linearizable_to(burst, &results, available, debt),
            "no sequential order explains {results:?} ending with {available} available, {debt:?} owed"
        );
    });
}

// The models, by limiter (their `#[test]` lines are what ci/test counts).
#[path = "loom/bucket.rs"]
mod bucket;
#[path = "loom/limiters.rs"]
mod limiters;
