use std::cell::Cell;
use std::rc::Rc;

use ratebound::Quota;

use super::*;
use crate::{Algorithm, Begin, Config, Engine};

/// A queued call for the tests: its number, and whether its caller still
/// waits.
struct Q {
    call: Call,
    id: usize,
    gone: Rc<Cell<bool>>,
}

impl Queued for Q {
    fn call(&self) -> &Call {
        &self.call
    }
    fn claim(&self) -> bool {
        !self.gone.get()
    }
}

fn engine(script: &str) -> Engine {
    let quota = Quota::parse("10/s").expect("quota");
    let algorithm = match script {
        "window" => Algorithm::FixedWindow {
            limit: 10,
            window: std::time::Duration::from_secs(1),
        },
        _ => Algorithm::TokenBucket(quota),
    };
    Engine::new(Config::new(algorithm)).expect("engine")
}

fn call(engine: &Engine, key: &str) -> Call {
    match engine.begin(key.as_bytes(), 1) {
        Ok(Begin::Call(c)) => c,
        other => panic!("a call, not {other:?}"),
    }
}

fn q(engine: &Engine, key: &str, id: usize) -> Q {
    Q {
        call: call(engine, key),
        id,
        gone: Rc::new(Cell::new(false)),
    }
}

fn ids(b: &Batch<Q>) -> Vec<usize> {
    b.calls().map(|q| q.id).collect()
}

#[test]
fn a_lone_call_goes_alone_and_others_wait_for_it_to_land() {
    let e = engine("bucket");
    let mut p = Planner::new(Tuning::TASKS, false);
    assert_eq!(p.enter(&call(&e, "a")), Enter::Alone(None));
    for i in 1..=3 {
        let c = q(&e, &format!("k{i}"), i);
        assert_eq!(p.enter(&c.call), Enter::Queue(None));
        assert!(p.queue(None, c).is_none(), "fewer than 16 wait");
    }
    let b = p.landed(None).expect("the queue goes when the send lands");
    assert_eq!(ids(&b), [1, 2, 3]);
    assert!(matches!(b.request(), Request::Many(ref m) if m.keys.len() == 3));
    assert!(p.landed(None).is_none(), "nothing waits: the send is over");
    assert_eq!(p.enter(&call(&e, "b")), Enter::Alone(None));
}

#[test]
fn a_second_send_goes_when_the_tuning_says_and_never_a_third() {
    let e = engine("bucket");
    let mut p = Planner::new(Tuning::TASKS, false);
    assert_eq!(p.enter(&call(&e, "first")), Enter::Alone(None));
    let mut second = None;
    for i in 1..=16 {
        let c = q(&e, &format!("k{i}"), i);
        let out = p.queue(None, c);
        if i < 16 {
            assert!(out.is_none(), "{i} waiting");
        } else {
            second = out;
        }
    }
    assert_eq!(
        ids(&second.expect("16 waiting: a second send")),
        (1..=16).collect::<Vec<_>>()
    );
    for i in 17..=40 {
        assert!(
            p.queue(None, q(&e, "x", i)).is_none(),
            "two sends in flight already"
        );
    }
    // The threads' tuning: a second caller goes alone too, a third waits.
    let mut t = Planner::new(Tuning::THREADS, false);
    assert_eq!(t.enter(&call(&e, "a")), Enter::Alone(None));
    assert_eq!(t.enter(&call(&e, "b")), Enter::Alone(None));
    let c = q(&e, "c", 7);
    assert_eq!(t.enter(&c.call), Enter::Queue(None));
    assert!(t.queue(None, c).is_none(), "two in flight");
    assert_eq!(ids(&t.landed(None).expect("the queue goes")), [7]);
}

#[test]
fn a_batch_joins_only_calls_of_one_script_and_holds_at_most_max() {
    let (bucket, window) = (engine("bucket"), engine("window"));
    let mut p = Planner::new(Tuning::TASKS, false);
    assert_eq!(p.enter(&call(&bucket, "a")), Enter::Alone(None));
    let mut seen = Vec::new();
    let check = |b: Batch<Q>, seen: &mut Vec<usize>| {
        let first = b.calls().next().expect("not empty").call.script;
        assert!(
            b.calls().all(|q| q.call.script == first),
            "one script a batch"
        );
        assert!(b.len() <= BatchCall::MAX);
        seen.extend(ids(&b));
    };
    let total = BatchCall::MAX * 2 + 10;
    for id in 0..total {
        let e = if id % 2 == 0 { &bucket } else { &window };
        if let Some(b) = p.queue(None, q(e, &format!("k{id}"), id)) {
            check(b, &mut seen);
        }
    }
    while let Some(b) = p.landed(None) {
        check(b, &mut seen);
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..total).collect::<Vec<_>>(), "every call once");
}

#[test]
fn calls_whose_caller_gave_up_are_never_sent_and_unqueue_finds_the_rest() {
    let e = engine("bucket");
    let mut p = Planner::new(Tuning::TASKS, false);
    assert_eq!(p.enter(&call(&e, "a")), Enter::Alone(None));
    let (one, two, three) = (q(&e, "1", 1), q(&e, "2", 2), q(&e, "3", 3));
    two.gone.set(true);
    for c in [one, two, three] {
        assert!(p.queue(None, c).is_none());
    }
    let three = p.unqueue(None, |q| q.id == 3).expect("still queued");
    assert_eq!(three.id, 3);
    assert!(p.unqueue(None, |q| q.id == 3).is_none(), "taken out once");
    assert_eq!(ids(&p.landed(None).expect("one left")), [1]);
}

#[test]
fn a_cluster_groups_by_hash_slot() {
    let e = engine("bucket");
    let mut p: Planner<Q> = Planner::new(Tuning::TASKS, true);
    let a = call(&e, "{user1}");
    let slot = p.group_of(&a);
    assert_eq!(slot, Some(hash_slot(&a.key)));
    assert_eq!(p.enter(&a), Enter::Alone(slot));
    // Another key of the same slot waits; one of another slot goes alone.
    let (same, other) = (call(&e, "{user1}"), call(&e, "{user2}"));
    assert_eq!(p.enter(&same), Enter::Queue(slot));
    assert_ne!(p.group_of(&other), slot);
    assert!(matches!(p.enter(&other), Enter::Alone(Some(_))));
}

#[test]
fn calls_sent_together_go_as_one_run_per_script_and_slot() {
    let (bucket, window) = (engine("bucket"), engine("window"));
    let p: Planner<Q> = Planner::new(Tuning::TASKS, false);
    let calls = vec![
        q(&bucket, "a", 1),
        q(&window, "b", 2),
        q(&bucket, "c", 3),
        q(&window, "d", 4),
        q(&bucket, "e", 5),
    ];
    let batches = p.together(calls);
    let got: Vec<Vec<usize>> = batches.iter().map(ids).collect();
    assert_eq!(got, [vec![1, 3, 5], vec![2, 4]]);
    let many: Vec<Q> = (0..BatchCall::MAX + 1)
        .map(|i| q(&bucket, "k", i))
        .collect();
    let sizes: Vec<usize> = p.together(many).iter().map(Batch::len).collect();
    assert_eq!(sizes, [BatchCall::MAX, 1]);
}

#[test]
fn replies_are_fanned_out_nine_a_call_or_malformed_for_all() {
    let e = engine("bucket");
    let p: Planner<Q> = Planner::new(Tuning::TASKS, false);
    let two = || p.together(vec![q(&e, "a", 1), q(&e, "b", 2)]).remove(0);
    let reply: Vec<i64> = (0..18).collect();
    let got = two().answers(Ok(reply.clone()));
    assert_eq!(got[0].1, Answer::Reply(reply[..9].to_vec()));
    assert_eq!(got[1].1, Answer::Reply(reply[9..].to_vec()));
    let short = two().answers(Ok(reply[..17].to_vec()));
    assert!(short.iter().all(|(_, a)| *a == Answer::Malformed));
    let failed = two().answers(Err(Answer::Failed("down".into())));
    assert!(
        failed
            .iter()
            .all(|(_, a)| *a == Answer::Failed("down".into()))
    );
    let one = p.together(vec![q(&e, "a", 1)]).remove(0);
    assert!(matches!(one.request(), Request::One(_)));
    let answers = one.answers(Ok(vec![1, 2]));
    assert_eq!(answers.len(), 1);
    assert_eq!(
        (answers[0].0.id, &answers[0].1),
        (1, &Answer::Reply(vec![1, 2]))
    );
}

#[test]
fn reply_typing_and_noscript() {
    assert_eq!(Reply::ints([Some(1), Some(2)]), Ok(vec![1, 2]));
    assert_eq!(Reply::ints([Some(1), None]), Err(Answer::Malformed));
    assert!(Reply::is_noscript(
        "NOSCRIPT No matching script. Please use EVAL."
    ));
    assert!(Reply::is_noscript("-NOSCRIPT No matching script"));
    assert!(!Reply::is_noscript("ERR unknown command"));
}

#[test]
fn a_failed_evalsha_is_followed_by_the_eval_only_on_noscript_with_time_left() {
    use std::time::Duration;
    let left = Duration::from_millis(20);
    // The server's words, with the code (redis-py's `status_code` put back,
    // node-redis, ioredis) or without it (redis-py before `status_code`).
    for noscript in [
        "NOSCRIPT No matching script. Please use EVAL.",
        "-NOSCRIPT No matching script",
        "No matching script. Please use EVAL.",
    ] {
        assert_eq!(
            Resend::after_evalsha(noscript, left),
            Resend::Eval,
            "{noscript}"
        );
        assert_eq!(
            Resend::after_evalsha(noscript, Duration::from_nanos(1)),
            Resend::Eval,
            "{noscript}: any time left"
        );
        assert_eq!(
            Resend::after_evalsha(noscript, Duration::ZERO),
            Resend::TimedOut,
            "{noscript}: past the deadline, no EVAL"
        );
    }
    for other in [
        "ERR unknown command 'EVALSHA'",
        "NOPERM this user has no permissions to run the 'evalsha' command",
        "ERR Error running script (call to f_1234): @user_script:1: No matching script",
        "BUSY Redis is busy running a script",
        "",
    ] {
        assert_eq!(
            Resend::after_evalsha(other, left),
            Resend::Failed,
            "{other}"
        );
        assert_eq!(
            Resend::after_evalsha(other, Duration::ZERO),
            Resend::Failed,
            "{other}"
        );
    }
}

#[test]
fn hash_slots_are_redis_cluster_s() {
    // From the Redis Cluster specification's examples and CLUSTER KEYSLOT.
    // CRC16/XMODEM of "123456789" is 0x31C3 (below 16384).
    assert_eq!(hash_slot(b"123456789"), 0x31C3);
    assert_eq!(hash_slot(b"{user1000}.following"), hash_slot(b"user1000"));
    assert_eq!(hash_slot(b"foo{}{bar}"), hash_slot(b"foo{}{bar}"));
    assert_ne!(hash_slot(b"foo{}{bar}"), hash_slot(b"bar"));
    assert_eq!(hash_slot(b"foo{{bar}}zap"), hash_slot(b"{bar"));
    assert_eq!(hash_slot(b"foo"), 12182);
}

#[test]
fn a_call_queued_after_the_last_send_landed_goes_at_once() {
    // `enter` said "queue", then the send in flight landed with nothing
    // queued: the call must not wait for a send that will never land.
    let e = engine("bucket");
    let mut p = Planner::new(Tuning::TASKS, false);
    assert_eq!(p.enter(&call(&e, "a")), Enter::Alone(None));
    let late = q(&e, "b", 1);
    assert_eq!(p.enter(&late.call), Enter::Queue(None));
    assert!(p.landed(None).is_none());
    assert_eq!(ids(&p.queue(None, late).expect("sent at once")), [1]);
}
