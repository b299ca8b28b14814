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
        let handles: Vec<_> = plans
            .iter()
            .map(|ops| {
                let bucket = bucket.clone();
                thread::spawn(move || run(&bucket, ops))
            })
            .collect();
        let results: Vec<(&[Op], Vec<Seen>)> = plans
            .iter()
            .copied()
            .zip(handles.into_iter().map(|h| h.join().unwrap()))
            .collect();
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

#[test]
fn two_threads_checking_admit_exactly_the_burst() {
    model_check(
        3,
        &[&[Op::Check(1), Op::Check(1)], &[Op::Check(1), Op::Check(1)]],
    );
}

#[test]
fn three_threads_taking_several_tokens() {
    model_check(4, &[&[Op::Check(2)], &[Op::Check(3)], &[Op::Check(2)]]);
}

#[test]
fn reserve_and_cancel_race_a_check() {
    model_check(
        2,
        &[
            &[Op::Reserve(2, 5), Op::CancelLast],
            &[Op::Check(1), Op::Check(1)],
        ],
    );
}

#[test]
fn two_reservations_cancelled_concurrently() {
    model_check(
        2,
        &[
            &[Op::Reserve(2, 5), Op::CancelLast],
            &[Op::Reserve(1, 5), Op::CancelLast],
        ],
    );
}

#[test]
fn set_quota_races_checks() {
    model_check(4, &[&[Op::SetBurst(1)], &[Op::Check(1), Op::Check(2)]]);
}

#[test]
fn set_quota_raising_the_burst_races_checks() {
    model_check(
        2,
        &[
            &[Op::SetBurst(3)],
            &[Op::Check(1), Op::Check(1), Op::Check(1)],
        ],
    );
}

#[test]
fn a_check_racing_four_quota_changes_answers_for_one_quota() {
    // Four changes bring the word back to the slot the check read its quota
    // from, now rewritten with another period and burst: whether the check
    // reads that slot before, during or after the rewrite, its answer (and
    // the state it leaves) must be that of one quota.
    model_check(
        4,
        &[
            &[
                Op::SetQuota(2, 3),
                Op::SetQuota(1, 2),
                Op::SetQuota(3, 5),
                Op::SetQuota(1, 6),
            ],
            &[Op::Check(1), Op::Check(2)],
        ],
    );
}

#[test]
fn checks_racing_two_quota_changes_use_each_in_turn() {
    // Checks read the quota from `current` while it holds the word's epoch
    // and from the word's slot while a change is under way (the word is
    // ahead of `current`, or `current` is being rewritten): across two
    // changes, every check's answer is that of one quota.
    model_check(
        3,
        &[
            &[Op::SetQuota(2, 2), Op::SetBurst(4)],
            &[Op::Check(1), Op::Check(2)],
        ],
    );
}

#[test]
fn set_quota_races_reserve_and_cancel() {
    model_check(
        2,
        &[&[Op::SetBurst(3)], &[Op::Reserve(2, 5), Op::CancelLast]],
    );
}

#[test]
fn a_pause_races_checks_and_a_reservation() {
    // Applied before or after each of them, never half: a check either
    // took its token before the pause or is refused after it, and the
    // reservation queues behind the pause or the pause comes after it.
    model_check(2, &[&[Op::Pause(1)], &[Op::Check(1), Op::Reserve(1, 3)]]);
}

#[test]
fn a_pause_races_reservations_queued_beyond_it() {
    // The reservations reach past the pause's end, so a pause that wrote
    // a TAT it had read before them would lose one; the last reservation's
    // wait shows where the TAT was.
    model_check(
        2,
        &[
            &[Op::Pause(1)],
            &[Op::Reserve(2, 0), Op::Reserve(2, 3), Op::Reserve(1, 10)],
        ],
    );
}

#[test]
fn a_pause_races_a_cancel() {
    model_check(2, &[&[Op::Reserve(2, 0), Op::CancelLast], &[Op::Pause(2)]]);
}

#[test]
fn two_pauses_race_a_reservation_queued_beyond_them() {
    // The second pause starts where the first ends, whichever claims the
    // end first; the reservation is moved by both or made after them.
    model_check(
        2,
        &[&[Op::Pause(2)], &[Op::Pause(3)], &[Op::Reserve(2, 10)]],
    );
}

#[test]
fn a_resume_races_a_check_and_a_reservation() {
    // The resume lifts the pause in one exchange from exactly what the
    // pause left: a reservation queued behind the pause first makes it
    // answer Queued (and the reservation keeps its slot); one made after
    // the lift queues on the lifted state; the check is refused while the
    // pause is on and admitted by no order in which it was not.
    model_check_debt(
        1,
        &[
            &[Op::Pause(2), Op::Resume],
            &[Op::Check(1), Op::Reserve(1, 5)],
        ],
    );
}

#[test]
fn a_resume_races_a_pause() {
    // Pauses and resumes claim the end word one at a time: a pause whose
    // claim comes after the resume's stands whole, one before it is lifted
    // with the other, and the end word is left where the state says (the
    // last pause starts there, and changes nothing if it ends no later);
    // the reservation and the debt left show where the bucket was left.
    model_check_debt(
        1,
        &[
            &[Op::Pause(1), Op::Resume, Op::Pause(2)],
            &[Op::Pause(3), Op::Reserve(1, 10)],
        ],
    );
}

#[test]
fn a_waiter_that_hears_of_a_pause_is_never_early() {
    // The bucket is empty; a waiter reserves the next token (due in 1 T)
    // while another thread pauses for 5 T. Whatever the order, the token
    // is due at 6 T: moved (reserved first) or queued after the pause. The
    // waiter reads the pause words before reserving and when it wakes: a
    // wake that saw the pause's news is never early, one that did not
    // finds it later (here: after the pause returned), and a double move
    // (reserved after the move, read before its news) is only late.
    loom::model(|| {
        let clock = ManualClock::new();
        clock.set_nanos(10 * T);
        let quota = Quota::with_period(Duration::from_nanos(T))
            .unwrap()
            .with_burst(1)
            .unwrap();
        let bucket = Arc::new(TokenBucket::with_clock(quota, clock));
        assert!(bucket.check().is_allowed());
        let waiter = {
            let bucket = bucket.clone();
            thread::spawn(move || {
                let seen = bucket.pause_shifted();
                let r = bucket.reserve_n(1, Duration::from_nanos(100 * T)).unwrap();
                let due = r.delay().as_nanos() as u64;
                // Its first wake.
                let heard = bucket.pause_shifted();
                (seen, due, heard)
            })
        };
        bucket.pause(Duration::from_nanos(5 * T));
        let (seen, due, heard) = waiter.join().unwrap();
        let at_wake = due + (heard - seen);
        if heard == 5 * T {
            assert!(at_wake >= 6 * T, "early at {at_wake} though it heard");
        }
        let at_last = due + (bucket.pause_shifted() - seen);
        assert!(
            (6 * T..=11 * T).contains(&at_last),
            "due at {at_last} (reserved {due}, read {seen} then {heard})"
        );
        // The queue ends where either order leaves it: 7 T.
        let next = bucket.reserve_n(1, Duration::from_nanos(100 * T)).unwrap();
        assert_eq!(next.delay(), Duration::from_nanos(7 * T));
    });
}

#[test]
fn checks_while_the_clock_moves() {
    // One thread moves the clock by one token's time; two read it and check.
    // However they interleave, one or two are admitted, and a refusal is a
    // pure function of the state it saw: no one wrote after it (burst 1: a
    // refusal means the other check had already taken the token), so the
    // same check at the same time afterwards gives the same answer.
    loom::model(|| {
        let clock = ManualClock::new();
        let quota = Quota::with_period(Duration::from_nanos(T))
            .unwrap()
            .with_burst(1)
            .unwrap();
        let bucket = Arc::new(TokenBucket::with_clock(quota, clock.clone()));
        let ticker = thread::spawn(move || clock.advance_nanos(T));
        let checkers: Vec<_> = (0..2)
            .map(|_| {
                let bucket = bucket.clone();
                thread::spawn(move || {
                    let now = ratebound::Clock::now(bucket.clock());
                    (now, bucket.check_at(now))
                })
            })
            .collect();
        ticker.join().unwrap();
        let decisions: Vec<(u64, Decision)> =
            checkers.into_iter().map(|h| h.join().unwrap()).collect();
        let admitted = decisions.iter().filter(|(_, d)| d.is_allowed()).count();
        assert!((1..=2).contains(&admitted), "{decisions:?}");
        for (now, d) in decisions.iter().filter(|(_, d)| !d.is_allowed()) {
            assert_eq!(bucket.check_at(*now), *d, "{decisions:?}");
            assert!(d.retry_after_nanos() >= 1, "{d:?}");
        }
    });
}

/// Concurrent checks (only) on any limiter that, on a frozen clock, admits
/// exactly `limit` in all — the window algorithms — checked for
/// linearizability against the same token-counting model.
fn model_check_counting(
    limit: u64,
    make: fn(ManualClock) -> Box<dyn Limiter>,
    plans: &'static [&'static [Op]],
) {
    loom::model(move || {
        let clock = ManualClock::new();
        clock.set_nanos(10 * T + 7);
        let limiter: Arc<Box<dyn Limiter>> = Arc::new(make(clock));
        let handles: Vec<_> = plans
            .iter()
            .map(|ops| {
                let limiter = limiter.clone();
                thread::spawn(move || {
                    ops.iter()
                        .map(|op| match *op {
                            Op::Check(n) => limiter.check_n(n).map_or(Seen::TooMany, seen),
                            other => panic!("{other:?} is for token buckets"),
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let results: Vec<(&[Op], Vec<Seen>)> = plans
            .iter()
            .copied()
            .zip(handles.into_iter().map(|h| h.join().unwrap()))
            .collect();
        let available = limiter.available();
        assert!(
            linearizable(limit, &results, available),
            "no sequential order explains {results:?} ending with {available} available"
        );
    });
}

const PLANS_3: &[&[Op]] = &[&[Op::Check(1), Op::Check(2)], &[Op::Check(2), Op::Check(1)]];

#[test]
fn fixed_window_checks_are_linearizable() {
    model_check_counting(
        3,
        |c| Box::new(FixedWindow::with_clock(3, Duration::from_secs(60), c).unwrap()),
        PLANS_3,
    );
}

#[test]
fn sliding_window_checks_are_linearizable() {
    model_check_counting(
        3,
        |c| Box::new(SlidingWindow::with_clock(3, Duration::from_secs(60), c).unwrap()),
        PLANS_3,
    );
}

#[test]
fn sliding_log_checks_are_linearizable() {
    model_check_counting(
        3,
        |c| Box::new(SlidingLog::with_clock(3, Duration::from_secs(60), c).unwrap()),
        PLANS_3,
    );
}

#[test]
fn leaky_bucket_hands_out_each_slot_once() {
    // Two threads reserve, one checks, on a frozen clock: the check may only
    // pass if it came first; the reservations get distinct slots exactly T
    // apart; cancelling the last one frees exactly its slot.
    loom::model(|| {
        let clock = ManualClock::new();
        let quota = Quota::with_period(Duration::from_nanos(T)).unwrap();
        let pacer =
            Arc::new(LeakyBucket::with_clock(quota, Duration::from_nanos(5 * T), clock).unwrap());
        let reservers: Vec<_> = (0..2)
            .map(|_| {
                let pacer = pacer.clone();
                thread::spawn(move || {
                    pacer
                        .reserve_n(1, Duration::MAX)
                        .unwrap()
                        .delay()
                        .as_nanos() as u64
                })
            })
            .collect();
        let checked = pacer.check().is_allowed();
        let mut delays: Vec<u64> = reservers.into_iter().map(|h| h.join().unwrap()).collect();
        delays.sort();
        let first = delays[0];
        assert!(first == 0 || first == T, "{delays:?}");
        assert_eq!(delays[1], first + T, "{delays:?}");
        assert_eq!(
            checked,
            first == T,
            "the check passes iff it took the first slot"
        );
        assert_eq!(pacer.available(), 6 - 3 + u64::from(!checked));
    });
}

#[test]
fn all_of_rolls_back_under_contention() {
    // A composite of a bucket (burst 2) and a window (limit 1) races a direct
    // check on the window. The window admits one in all; the bucket keeps
    // exactly what the composite kept.
    loom::model(|| {
        let clock = ManualClock::new();
        let bucket = std::sync::Arc::new(TokenBucket::with_clock(
            Quota::with_period(Duration::from_nanos(T))
                .unwrap()
                .with_burst(2)
                .unwrap(),
            clock.clone(),
        ));
        let window = std::sync::Arc::new(
            FixedWindow::with_clock(1, Duration::from_secs(60), clock).unwrap(),
        );
        let both = Arc::new(AllOf::new(vec![bucket.clone(), window.clone()]).unwrap());
        let composite = {
            let both = both.clone();
            thread::spawn(move || (0..2).filter(|_| both.check().is_allowed()).count() as u64)
        };
        let direct = window.check().is_allowed();
        let through = composite.join().unwrap();
        assert_eq!(
            through + u64::from(direct),
            1,
            "the window admits exactly one"
        );
        assert_eq!(
            bucket.available(),
            2 - through,
            "refused composite checks gave the token back"
        );
    });
}

#[test]
fn keyed_first_use_creates_one_state() {
    // Two threads take from the same, new key at once (burst 1): exactly one
    // state is created and exactly one of them is admitted.
    use ratebound::{KeyedAlgorithm, KeyedLimiter};
    loom::model(|| {
        let quota = Quota::with_period(Duration::from_nanos(T)).unwrap();
        let limiter = Arc::new(
            KeyedLimiter::<u32>::new(KeyedAlgorithm::TokenBucket(quota))
                .unwrap()
                .with_clock(ManualClock::new()),
        );
        let other = {
            let limiter = limiter.clone();
            thread::spawn(move || limiter.check(&7).unwrap().is_allowed())
        };
        let mine = limiter.check(&7).unwrap().is_allowed();
        let theirs = other.join().unwrap();
        assert!(mine != theirs, "exactly one admitted: {mine} {theirs}");
        assert_eq!(limiter.len(), 1);
    });
}

#[test]
fn concurrency_cap_never_lets_more_in_than_its_limit() {
    // Cap 1, two threads each trying twice: whoever holds the place is
    // alone inside (a separate counter checks it), a place given back can
    // be taken again, and at the end nothing is held.
    use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use ratebound::http::ConcurrencyCap;
    loom::model(|| {
        let cap = Arc::new(ConcurrencyCap::new(1).unwrap());
        let inside = Arc::new(AtomicUsize::new(0));
        let attempt = |cap: &ConcurrencyCap, inside: &AtomicUsize| -> usize {
            let mut admitted = 0;
            for _ in 0..2 {
                if cap.try_enter() {
                    admitted += 1;
                    assert_eq!(inside.fetch_add(1, SeqCst), 0, "two inside a cap of 1");
                    inside.fetch_sub(1, SeqCst);
                    cap.leave();
                }
            }
            admitted
        };
        let other = {
            let (cap, inside) = (cap.clone(), inside.clone());
            thread::spawn(move || attempt(&cap, &inside))
        };
        let mine = attempt(&cap, &inside);
        let theirs = other.join().unwrap();
        assert!(
            mine + theirs >= 2,
            "a free place was refused: {mine} + {theirs}"
        );
        assert_eq!(cap.in_flight(), 0);
    });
}

/// A keyed limiter on a frozen clock (10 T) with one shard: tier 0 is one
/// token per T with a burst of 1, tier 1 the same rate with a burst of 2;
/// new keys go to `tier`.
fn keyed_with_tiers(tier: usize) -> ratebound::KeyedLimiter<u32, ManualClock> {
    use ratebound::{KeyedAlgorithm, KeyedLimiter, Overflow};
    let burst = |b| {
        KeyedAlgorithm::TokenBucket(
            Quota::with_period(Duration::from_nanos(T))
                .unwrap()
                .with_burst(b)
                .unwrap(),
        )
    };
    let clock = ManualClock::new();
    clock.set_nanos(10 * T);
    KeyedLimiter::new(burst(1))
        .unwrap()
        // Under 128 keys: one shard, one lock.
        .with_max_keys(8, Overflow::RejectNewKeys)
        .unwrap()
        .with_tiers(vec![burst(2)], move |_| tier)
        .unwrap()
        .with_clock(clock)
}

#[test]
fn keyed_reset_races_checks_and_keeps_the_tier() {
    // A spent key of tier 1 (burst 2) is reset while another thread checks
    // it twice: the answers and the tokens left are those of the reset
    // coming before, between or after the checks — in tier 1 (a reset that
    // dropped the tier bits would leave tier 0's burst of 1).
    loom::model(|| {
        let limiter = Arc::new(keyed_with_tiers(1));
        assert!(limiter.check(&7).unwrap().is_allowed());
        assert!(limiter.check(&7).unwrap().is_allowed());
        let resetter = {
            let limiter = limiter.clone();
            thread::spawn(move || limiter.reset(&7))
        };
        let checks = [
            limiter.check(&7).unwrap().is_allowed(),
            limiter.check(&7).unwrap().is_allowed(),
        ];
        resetter.join().unwrap();
        let left = limiter.available(&7);
        assert!(
            [([true, true], 0), ([false, true], 1), ([false, false], 2)].contains(&(checks, left)),
            "checks {checks:?} leave {left}"
        );
    });
}

#[test]
fn keyed_reset_races_a_tier_change() {
    // A spent key of tier 0 is reset while another thread moves it to tier
    // 1 (keeping its count of tokens): reset then move leaves 1 token, move
    // then reset 2. Either way the key is in tier 1, as a full refill then
    // shows (2 tokens, not tier 0's 1): the reset's read-modify-write keeps
    // whatever tier it finds, and set_tier's write lock keeps the two apart.
    loom::model(|| {
        let limiter = Arc::new(keyed_with_tiers(0));
        assert!(limiter.check(&7).unwrap().is_allowed());
        assert_eq!(limiter.available(&7), 0);
        let resetter = {
            let limiter = limiter.clone();
            thread::spawn(move || limiter.reset(&7))
        };
        limiter.set_tier(&7, 1).unwrap();
        resetter.join().unwrap();
        let left = limiter.available(&7);
        assert!(left == 1 || left == 2, "{left} left");
        limiter.clock().advance_nanos(10 * T);
        assert_eq!(limiter.available(&7), 2, "the key is in tier 1");
    });
}

#[test]
fn keyed_release_races_a_check() {
    // One thread takes key 7's only token with a permit and gives it back;
    // another checks the key once. The check passes iff it comes first or
    // after the give-back, and the give-back returns exactly the permit's
    // token: never the other thread's, never lost to a concurrent exchange.
    loom::model(|| {
        let limiter = Arc::new(keyed_with_tiers(0));
        let now = 10 * T;
        let giver = {
            let limiter = limiter.clone();
            thread::spawn(move || {
                let (d, permit) = limiter.acquire_n_at(&7, 1, now).unwrap();
                if let Some(permit) = permit {
                    limiter.release(&7, permit).unwrap();
                }
                d.is_allowed()
            })
        };
        let checked = limiter.check_at(&7, now).unwrap().is_allowed();
        let took = giver.join().unwrap();
        let left = limiter.available_at(&7, now);
        assert!(
            [(true, false, 1), (true, true, 0), (false, true, 0)].contains(&(took, checked, left)),
            "took {took}, checked {checked}, {left} left"
        );
    });
}

/// An adaptive cap on a manual clock (windows of two samples under loom).
fn adaptive_cap(
    clock: &ManualClock,
    initial: usize,
    max: usize,
    smoothing: f64,
) -> ratebound::http::ConcurrencyCap {
    use ratebound::any::AnyClock;
    use ratebound::http::{AdaptiveConcurrency, ConcurrencyCap};
    let tuning = AdaptiveConcurrency {
        initial_limit: initial,
        min_limit: 1,
        max_limit: max,
        smoothing,
        ..AdaptiveConcurrency::default()
    };
    ConcurrencyCap::adaptive(tuning, AnyClock::Manual(clock.clone())).unwrap()
}

#[test]
fn adaptive_samples_racing_window_closes_are_each_counted_once() {
    // Two threads each time two requests: windows close at the 2nd and 4th
    // sample, possibly both at once (the second closer finds the controller
    // busy and gives its window back). Every sample is counted exactly once,
    // the limit stays in bounds and every place comes back.
    use ratebound::http::Priority;
    loom::model(|| {
        let clock = ManualClock::new();
        let cap = Arc::new(adaptive_cap(&clock, 2, 4, 0.2));
        let work = |cap: &ratebound::http::ConcurrencyCap| -> u64 {
            let mut timed = 0;
            for _ in 0..2 {
                if let Ok(before) = cap.try_enter_as(|| Priority::Normal) {
                    cap.leave_after(cap.start(), before);
                    timed += 1;
                }
            }
            timed
        };
        let other = {
            let cap = cap.clone();
            thread::spawn(move || work(&cap))
        };
        let mine = work(&cap);
        let theirs = other.join().unwrap();
        let state = cap.state().unwrap();
        assert_eq!(state.samples, mine + theirs, "{state:?}");
        assert!((1..=4).contains(&cap.limit()));
        assert_eq!(cap.in_flight(), 0);
    });
}

#[test]
fn a_lowered_adaptive_limit_races_an_admission() {
    // The limit is 2 (its maximum) and both places are held; a baseline of
    // 1 µs is known.
    // The holders leave after a second (a congested window: the limit drops
    // to 1 with smoothing 1) while another thread tries to enter: it may get
    // a place freed before the drop, never a third one, and at the end the
    // limit is 1 and nothing is held.
    use ratebound::http::Priority;
    loom::model(|| {
        let clock = ManualClock::new();
        let cap = Arc::new(adaptive_cap(&clock, 2, 2, 1.0));
        for _ in 0..2 {
            let before = cap.try_enter_as(|| Priority::Normal).unwrap();
            cap.leave_after(cap.start(), before);
        }
        let held: Vec<_> = (0..2)
            .map(|_| (cap.start(), cap.try_enter_as(|| Priority::Normal).unwrap()))
            .collect();
        clock.advance(Duration::from_secs(1));
        let other = {
            let cap = cap.clone();
            thread::spawn(move || {
                let entered = cap.try_enter_as(|| Priority::Normal);
                assert!(cap.in_flight() <= 2, "a third place");
                if entered.is_ok() {
                    cap.leave();
                }
                entered.is_ok()
            })
        };
        for (start, before) in held {
            cap.leave_after(start, before);
        }
        let _ = other.join().unwrap();
        assert_eq!(cap.limit(), 1, "{:?}", cap.state());
        assert_eq!(cap.in_flight(), 0);
        assert_eq!(cap.state().unwrap().samples, 4);
    });
}

/// A cap of one with a short queue, its place held by the caller.
fn queued_cap() -> std::sync::Arc<ratebound::http::ConcurrencyCap> {
    use ratebound::any::AnyClock;
    use ratebound::http::ConcurrencyCap;
    let clock = ManualClock::new();
    let cap = ConcurrencyCap::new(1)
        .unwrap()
        .with_queue(Duration::from_millis(5), AnyClock::Manual(clock))
        .unwrap();
    let cap = std::sync::Arc::new(cap);
    assert!(cap.try_enter());
    cap
}

#[test]
fn a_place_given_back_while_a_waiter_queues_is_never_missed() {
    // The holder leaves while another request registers in the queue: the
    // place goes to the waiter (handed over, or taken on its last look),
    // never left free with the waiter asleep.
    loom::model(|| {
        let cap = queued_cap();
        let waiter = {
            let cap = cap.clone();
            thread::spawn(move || cap.wait_for_place().unwrap())
        };
        cap.leave();
        let waiter = waiter.join().unwrap();
        assert!(waiter.is_granted(), "a free place and a sleeping waiter");
        assert_eq!(cap.in_flight(), 1);
        assert!(waiter.finish());
        cap.leave();
        assert_eq!(cap.in_flight(), 0);
    });
}

#[test]
fn a_waiter_giving_up_races_a_hand_off() {
    // The waiter's time runs out as the place is handed to it: either it
    // leaves with the place (and gives it back) or without, and no place is
    // lost or counted twice.
    loom::model(|| {
        let cap = queued_cap();
        let gave_up = {
            let cap = cap.clone();
            thread::spawn(move || {
                let waiter = cap.wait_for_place().unwrap();
                let held = waiter.finish();
                if held {
                    cap.leave();
                }
                held
            })
        };
        cap.leave();
        let _ = gave_up.join().unwrap();
        assert_eq!(cap.in_flight(), 0, "a place lost or counted twice");
    });
}
