//! The token bucket's models: checks, reservations and cancels, quota
//! changes, pauses and resumes, a waiter, and a moving clock.

use super::*;

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

/// Two adapters propose different words from the one they both saw, while
/// a third thread checks: exactly one proposal is taken, the word and the
/// quota in force are the winner's together (`Learned::scale` of the
/// ceiling), and the check is answered by a whole quota — the bucket was
/// full, so it is admitted with the remaining count of the ceiling's burst
/// or of the winner's.
#[test]
fn two_adapts_from_one_word_one_wins_while_a_check_runs() {
    use ratebound::outbound::{FULL, Learned};
    loom::model(|| {
        let ceiling = Quota::with_period(Duration::from_nanos(T))
            .unwrap()
            .with_burst(4)
            .unwrap();
        let bucket = Arc::new(TokenBucket::with_clock(ceiling, ManualClock::new()));
        let half = Learned::new(FULL / 2, 1).with_cut(true);
        let quarter = Learned::new(FULL / 4, 1).with_cut(true);
        let spawn = |next: Learned| {
            let b = bucket.clone();
            thread::spawn(move || b.adapt_at(Learned::fresh(), next, 0))
        };
        let (a, c) = (spawn(half), spawn(quarter));
        let d = bucket.check_n_at(1, 0).expect("check");
        let (a, c) = (a.join().unwrap(), c.join().unwrap());
        assert!(a ^ c, "exactly one adapt wins: {a} {c}");
        let won = if a { half } else { quarter };
        assert_eq!(bucket.learned(), won);
        assert_eq!(bucket.quota(), won.scale(ceiling));
        assert!(d.is_allowed());
        let remaining = [3, won.scale(ceiling).burst() - 1];
        assert!(remaining.contains(&d.remaining()), "{}", d.remaining());
    });
}
