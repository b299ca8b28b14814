//! [`Turns`] in virtual time: every instant is given.

use super::*;

const DEADLINE: Duration = Duration::from_millis(50);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A call of join class `class` in slot 0.
fn joins(class: u32) -> Entry {
    Entry {
        join: Some((class, 0)),
        keep: false,
    }
}

const ALONE: Entry = Entry {
    join: None,
    keep: false,
};

/// One script run each.
fn runs(parts: &[&[Ticket]]) -> Vec<Out> {
    parts.iter().map(|p| Out::Many(p.to_vec())).collect()
}

fn batched() -> Turns {
    Turns::new(TurnTuning::EVENT_LOOP, DEADLINE, true)
}

/// Batched turns whose one call alone got no answer within its deadline
/// (settled since): Redis is slow.
fn slow() -> Turns {
    let mut t = batched();
    let (a, _, _) = t.enter(ALONE, ms(0));
    t.stamp(ms(0));
    t.sweep(ms(50), false);
    t.settle(a);
    t
}

/// Enters `n` calls like `entry` at `now`: their tickets, each queued.
fn queue(t: &mut Turns, entry: Entry, n: usize, now: Duration) -> Vec<Ticket> {
    (0..n)
        .map(|_| {
            let (ticket, go, _) = t.enter(entry, now);
            assert_eq!(go, Go::Queued);
            ticket
        })
        .collect()
}

/// Idle batched turns with `n` calls of class 0 queued and flushed at 0:
/// the turns, the calls' tickets and what the flush sent.
fn flushed(n: usize) -> (Turns, Vec<Ticket>, Vec<Out>) {
    let mut t = batched();
    let tickets = queue(&mut t, joins(0), n, ms(0));
    let (out, _) = t.flush(ms(0));
    (t, tickets, out)
}

#[test]
fn a_turns_calls_go_as_one_run_at_its_end() {
    let mut t = batched();
    let (a, go, asks) = t.enter(joins(0), ms(0));
    assert_eq!(
        (go, asks),
        (Go::Queued, Asks(Asks::FLUSH)),
        "the first asks for the flush"
    );
    let (b, _, asks) = t.enter(joins(0), ms(0));
    assert_eq!(asks, Asks::default(), "asked once a turn");
    let (c, _, _) = t.enter(joins(0), ms(0));
    let (out, asks) = t.flush(ms(0));
    assert_eq!(out, vec![Out::Many(vec![a, b, c])]);
    assert!(asks.stamp() && !asks.flush());
    assert_eq!(t.stats().batches, 1);
    assert_eq!(t.stats().batched, 3);
}

#[test]
fn a_long_queue_with_nothing_in_flight_goes_as_two_runs() {
    let (mut t, first, out) = flushed(8);
    assert_eq!(out, runs(&[&first[..4], &first[4..]]));
    // With those in flight, the next turn's eight go as one.
    let next = queue(&mut t, joins(0), 8, ms(1));
    let (out, _) = t.flush(ms(1));
    assert_eq!(out, vec![Out::Many(next)]);
    // A queue shorter than split_at goes as one even when idle.
    let (_, few, out) = flushed(7);
    assert_eq!(out, vec![Out::Many(few)]);
}

#[test]
fn groups_go_by_class_and_slot_and_a_call_that_never_joins_alone() {
    let mut t = batched();
    let (a, _, _) = t.enter(joins(0), ms(0));
    let (b, _, _) = t.enter(joins(1), ms(0));
    let (c, _, _) = t.enter(joins(0), ms(0));
    let (d, _, _) = t.enter(
        Entry {
            join: Some((0, 7)),
            keep: false,
        },
        ms(0),
    );
    // Something waits before it: it waits too.
    let (r, go, _) = t.enter(ALONE, ms(0));
    assert_eq!(go, Go::Queued);
    let (out, _) = t.flush(ms(0));
    assert_eq!(
        out,
        vec![Out::One(r), Out::Many(vec![a, c]), Out::One(b), Out::One(d)]
    );
    // Nothing waiting: a call that never joins goes at once (the stamp
    // asked for by the flush, once).
    let (_, go, asks) = t.enter(ALONE, ms(0));
    assert_eq!((go, asks), (Go::Now, Asks::default()));
    t.stamp(ms(0));
    let (_, go, asks) = t.enter(ALONE, ms(1));
    assert_eq!((go, asks), (Go::Now, Asks(Asks::STAMP)));
}

#[test]
fn a_run_holds_at_most_batch_call_max_and_the_rest_waits_for_room() {
    let (mut t, all, out) = flushed(300);
    // Room for 256: two runs (split: nothing in flight) of 128.
    assert_eq!(out, runs(&[&all[..128], &all[128..256]]));
    assert_eq!(t.waiting(), 44);
    let (again, _) = t.flush(ms(0));
    assert!(again.is_empty(), "no room in flight");
    assert_eq!(t.settle(all[0]), Asks(Asks::FLUSH), "an answer makes room");
    assert_eq!(t.flush(ms(1)).0, vec![Out::One(all[256])]);
}

#[test]
fn unbatched_calls_go_alone_at_four_each_and_then_wait() {
    let mut t = Turns::new(TurnTuning::EVENT_LOOP, DEADLINE, false);
    let mut now = Vec::new();
    for _ in 0..64 {
        let (ticket, go, _) = t.enter(joins(0), ms(0));
        assert_eq!(go, Go::Now);
        now.push(ticket);
    }
    let waiting = queue(&mut t, joins(0), 10, ms(0));
    assert_eq!(t.stats().queued, 10);
    assert!(t.flush(ms(0)).0.is_empty());
    t.settle(now[0]);
    assert_eq!(
        t.flush(ms(1)).0,
        vec![Out::One(waiting[0])],
        "room for one (4)"
    );
}

#[test]
fn a_call_that_waited_past_the_queues_limit_never_leaves_but_a_kept_one_does() {
    let mut t = Turns::new(TurnTuning::EVENT_LOOP, DEADLINE, false);
    let sent: Vec<Ticket> = (0..64).map(|_| t.enter(joins(0), ms(0)).0).collect();
    let old = queue(&mut t, joins(0), 2, ms(0));
    let kept = queue(
        &mut t,
        Entry {
            join: None,
            keep: true,
        },
        1,
        ms(0),
    );
    let young = queue(&mut t, joins(0), 1, ms(500));
    t.settle(sent[0]);
    // 20 deadlines of 50 ms: 1 s (also the least).
    assert_eq!(TurnTuning::EVENT_LOOP.queue_wait(DEADLINE), ms(1000));
    assert!(t.flush(ms(999)).0.contains(&Out::One(old[0])), "not yet");
    t.settle(old[0]);
    let (out, _) = t.flush(ms(1000));
    assert_eq!(
        out,
        vec![Out::Unsent(old[1]), Out::One(kept[0])],
        "the kept one stops the unsending"
    );
    assert_eq!(t.stats().unsent, 1);
    assert_eq!(t.waiting(), young.len());
}

#[test]
fn beyond_max_queued_a_call_is_unsent_at_once() {
    let tuning = TurnTuning {
        max_queued: 2,
        ..TurnTuning::EVENT_LOOP
    };
    let mut t = Turns::new(tuning, DEADLINE, true);
    queue(&mut t, joins(0), 2, ms(0));
    assert_eq!(t.enter(joins(0), ms(0)).1, Go::Unsent);
    let keep = Entry {
        join: None,
        keep: true,
    };
    assert_eq!(t.enter(keep, ms(0)).1, Go::Queued, "never unsent");
    assert_eq!(t.stats().unsent, 1);
}

#[test]
fn deadlines_count_from_the_stamp_and_a_late_call_makes_redis_slow() {
    let mut t = batched();
    let (a, _, _) = t.enter(ALONE, ms(0));
    // The client wrote it at 3 ms: the timer is one deadline.
    assert_eq!(t.stamp(ms(3)), Some(DEADLINE));
    assert_eq!(t.stamp(ms(3)), None, "armed already");
    let (out, timer, _) = t.sweep(ms(52), false);
    assert!(out.is_empty());
    assert_eq!(timer, Some(ms(1)), "the next look: at the deadline, 53 ms");
    let (out, timer, _) = t.sweep(ms(53), false);
    assert_eq!(out, vec![Out::Late(a)]);
    assert_eq!(timer, None, "nothing else sent: the timer stops");
    assert!(t.slow());
    assert_eq!(t.stats().timeouts, 1);
    t.settle(a);
    assert_eq!(t.replied(), Asks::default(), "a late reply: nothing waits");
    assert!(!t.slow(), "Redis answered");
}

#[test]
fn a_late_call_of_a_misconfigured_client_is_not_redis_being_slow() {
    let mut t = batched();
    let (a, _, _) = t.enter(ALONE, ms(0));
    t.stamp(ms(0));
    assert_eq!(t.sweep(ms(50), true).0, vec![Out::Late(a)]);
    assert!(!t.slow());
    assert_eq!(t.stats().timeouts, 0);
}

#[test]
fn while_redis_is_slow_one_call_goes_at_a_time_and_the_queue_times_out() {
    let mut t = slow();
    assert!(t.slow());
    // Slow: room for one call alone (4).
    let (b, go, _) = t.enter(ALONE, ms(60));
    assert_eq!(go, Go::Now);
    let (c, go, _) = t.enter(ALONE, ms(60));
    assert_eq!(go, Go::Queued, "no room while one is out");
    let q = queue(&mut t, joins(0), 3, ms(70));
    assert!(t.flush(ms(70)).0.is_empty());
    t.stamp(ms(60));
    // b is late at 110 ms; c waited a whole deadline at 110 ms, the
    // joiners (queued at 70 ms) not yet: the timer looks again at 120 ms.
    let (out, timer, _) = t.sweep(ms(110), false);
    assert_eq!(out, vec![Out::Late(b), Out::TimedOut(c)]);
    assert_eq!(timer, Some(ms(10)));
    t.settle(b);
    t.settle(c);
    // One run of the joiners (room 4); sent while slow, their deadline
    // counts from when they were queued (70 ms): 120 ms.
    assert_eq!(t.flush(ms(111)).0, vec![Out::Many(q.clone())]);
    assert_eq!(t.stamp(ms(112)), None, "the timer is armed (for 120 ms)");
    assert!(t.sweep(ms(119), false).0.is_empty());
    assert_eq!(
        t.sweep(ms(120), false).0,
        vec![Out::Late(q[0]), Out::Late(q[1]), Out::Late(q[2])]
    );
}

#[test]
fn a_reply_ends_the_slowness_and_the_queue_goes_on() {
    let mut t = slow();
    let q = queue(&mut t, joins(0), 5, ms(55));
    // Slow: room for 4.
    assert_eq!(t.flush(ms(55)).0, vec![Out::Many(q[..4].to_vec())]);
    assert_eq!(t.replied(), Asks(Asks::FLUSH), "the late call's reply");
    assert!(!t.slow());
    assert_eq!(t.flush(ms(56)).0, vec![Out::One(q[4])]);
}

#[test]
fn a_settled_tickets_deadline_is_forgotten_when_its_number_is_reused() {
    let mut t = batched();
    let (a, _, _) = t.enter(ALONE, ms(0));
    t.stamp(ms(0));
    t.settle(a);
    let (b, go, _) = t.enter(ALONE, ms(1));
    assert_eq!((b, go), (a, Go::Now), "the number is reused");
    // The old deadline (50 ms) is not the new call's (51 ms).
    let (out, _, _) = t.sweep(ms(50), false);
    assert!(out.is_empty());
    t.stamp(ms(1));
    assert_eq!(t.sweep(ms(51), false).0, vec![Out::Late(b)]);
}

/// Enters a call alone at `now`, sent at once: its ticket.
fn sent(t: &mut Turns, now: Duration) -> Ticket {
    let (ticket, go, _) = t.enter(ALONE, now);
    assert_eq!(go, Go::Now);
    ticket
}

#[test]
fn the_sends_of_a_millisecond_carry_one_signal() {
    let mut t = batched();
    let a = sent(&mut t, ms(0));
    assert!(t.carry(&[a], ms(0)), "the first opens one");
    let b = sent(&mut t, ms(1));
    assert!(!t.carry(&[b], ms(1)), "within SIGNAL_EPOCH: the same");
    let c = sent(&mut t, ms(2));
    assert!(t.carry(&[c], ms(2)), "older than SIGNAL_EPOCH: a new one");
    // A batch carries one signal.
    let many = queue(&mut t, joins(0), 3, ms(2));
    let (out, _) = t.flush(ms(2));
    assert_eq!(out, runs(&[&many]));
    assert!(!t.carry(&many, ms(2)));
    // Settled without a late call: never aborted.
    for x in [a, b, c].into_iter().chain(many) {
        assert!(!t.settle(x).abort());
    }
}

#[test]
fn a_signal_is_aborted_once_its_calls_are_settled_and_one_was_late() {
    let mut t = batched();
    let a = sent(&mut t, ms(0));
    let b = sent(&mut t, ms(0));
    assert!(t.carry(&[a], ms(0)) && !t.carry(&[b], ms(0)));
    t.stamp(ms(0));
    let (out, _, _) = t.sweep(ms(50), false);
    assert_eq!(out, [Out::Late(a), Out::Late(b)]);
    assert!(!t.settle(a).abort(), "b still waits");
    assert!(t.settle(b).abort(), "the last: aborted");
    // Never carried again, however soon: with a deadline shorter than
    // SIGNAL_EPOCH, aborted 0.6 ms after it opened, the next send 0.1 ms
    // later gets a new one.
    let us = Duration::from_micros;
    let mut t = Turns::new(TurnTuning::EVENT_LOOP, us(500), true);
    let a = sent(&mut t, us(0));
    assert!(t.carry(&[a], us(0)));
    t.stamp(us(0));
    assert_eq!(t.sweep(us(600), false).0, [Out::Late(a)]);
    assert!(t.settle(a).abort());
    let c = sent(&mut t, us(700));
    assert!(t.carry(&[c], us(700)), "a new one");
    assert!(!t.settle(c).abort());
}

#[test]
fn a_late_call_does_not_abort_its_signal_while_another_of_it_waits() {
    // Redis slow: the calls of one signal need not time out in the order
    // they were sent — the last late one leaves the live one its signal.
    let mut t = batched();
    let a = sent(&mut t, ms(0));
    t.carry(&[a], ms(0));
    t.stamp(ms(0));
    let b = sent(&mut t, ms(1));
    assert!(!t.carry(&[b], ms(1)));
    t.stamp(ms(1));
    let (out, _, _) = t.sweep(ms(50), false);
    assert_eq!(out, [Out::Late(a)]);
    assert!(!t.settle(a).abort(), "b is not answered yet");
    t.replied();
    assert!(t.settle(b).abort(), "then b is: the signal goes");
    // A signal none of whose calls was late is carried on.
    let c = sent(&mut t, ms(60));
    assert!(t.carry(&[c], ms(60)));
    t.replied();
    assert!(!t.settle(c).abort());
    let d = sent(&mut t, ms(60));
    assert!(!t.carry(&[d], ms(60)), "still open, within SIGNAL_EPOCH");
    assert_eq!(SIGNAL_EPOCH, ms(1));
}
