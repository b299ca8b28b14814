//! Call deadlines and the fail policy in tokio's virtual time: the limiter
//! runs over a scripted connection that never answers, or answers after a
//! scripted delay, and its engine (breaker, local share) reads a
//! [`TokioClock`]. Each answer's time is then exact: the fail policy
//! answers a silent server exactly at the call's deadline, an open breaker
//! at once, a late reply within the deadline exactly when it lands.
//! (`faults.rs` runs the same faults against a real Redis, with generous
//! bounds.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ratebound::any::AnyClock;
use ratebound::{Quota, TokioClock};
use ratebound_redis::{Algorithm, Config, OnError, RedisLimiter, Source};
use redis::aio::ConnectionLike;
use redis::{Cmd, RedisFuture, Value};
use tokio::time::Instant;

/// What the scripted server does with the next command.
#[derive(Clone, Copy, Debug)]
enum Script {
    /// Never answers.
    Silent,
    /// Answers after the delay: every key granted, due in `wait_us`.
    After(Duration, i64),
    /// The client's own runtime stalls for the duration as the call goes
    /// out (the clock jumps: every timer due meanwhile fires late, as in a
    /// starved process), and the server never answers.
    Stall(Duration),
}

/// A connection whose server follows a [`Script`]; it counts the commands
/// sent to it and keeps the last one's arguments.
#[derive(Clone)]
struct Scripted {
    script: Arc<Mutex<Script>>,
    sent: Arc<AtomicUsize>,
    last: Arc<Mutex<Vec<String>>>,
}

impl Scripted {
    fn new(script: Script) -> Scripted {
        Scripted {
            script: Arc::new(Mutex::new(script)),
            sent: Arc::new(AtomicUsize::new(0)),
            last: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn last(&self) -> Vec<String> {
        self.last.lock().unwrap().clone()
    }

    fn set(&self, script: Script) {
        *self.script.lock().unwrap() = script;
    }

    fn sent(&self) -> usize {
        // Ordering: Relaxed — a count read after the calls were awaited.
        self.sent.load(Ordering::Relaxed)
    }
}

impl ConnectionLike for Scripted {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        // Ordering: Relaxed — see `sent`.
        self.sent.fetch_add(1, Ordering::Relaxed);
        *self.last.lock().unwrap() = cmd
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => String::new(),
            })
            .collect();
        let script = *self.script.lock().unwrap();
        // EVALSHA sha numkeys …: the script's nine integers per key.
        let keys = match cmd.args_iter().nth(2) {
            Some(redis::Arg::Simple(n)) => std::str::from_utf8(n).unwrap().parse().unwrap(),
            _ => 1,
        };
        Box::pin(async move {
            match script {
                Script::Silent => std::future::pending().await,
                Script::Stall(d) => {
                    tokio::time::advance(d).await;
                    std::future::pending().await
                }
                Script::After(delay, wait_us) => {
                    tokio::time::sleep(delay).await;
                    let one = [1, 0, wait_us, wait_us, 1, 0, 0, 0, 0];
                    Ok(Value::Array(
                        (0..keys)
                            .flat_map(|_| one.map(Value::Int))
                            .collect::<Vec<_>>(),
                    ))
                }
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        _pipeline: &'a redis::Pipeline,
        _offset: usize,
        _count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        unreachable!("the limiter sends no pipelines")
    }

    fn get_db(&self) -> i64 {
        0
    }
}

const DEADLINE: Duration = Duration::from_millis(50);
const COOLDOWN: Duration = Duration::from_millis(200);

fn limiter(on_error: OnError, conn: &Scripted, threshold: u32) -> RedisLimiter<Scripted> {
    let mut c = Config::new(Algorithm::TokenBucket(
        Quota::parse("100/s burst 100").unwrap(),
    ));
    c.on_error = on_error;
    c.timeout = DEADLINE;
    c.breaker_cooldown = COOLDOWN;
    c.breaker_threshold = threshold;
    RedisLimiter::with_clock(
        c,
        AnyClock::Shared(Arc::new(TokioClock::new())),
        conn.clone(),
    )
    .unwrap()
}

const POLICIES: [(OnError, Source); 3] = [
    (OnError::Open, Source::FailOpen),
    (OnError::Closed, Source::FailClosed),
    (OnError::Local(50.0), Source::Local),
];

/// A silent server: each of the first `breaker_threshold` checks gets the
/// fail policy's answer exactly at its deadline; the breaker then answers
/// at once and sends nothing until its cool-down is over; the probe after
/// it, answered 30 ms later, is Redis' answer at exactly 30 ms; a reply
/// 80 ms late is the fail policy's at exactly 50 ms.
#[tokio::test(start_paused = true)]
async fn a_silent_server_gets_the_fail_policy_exactly_at_the_deadline() {
    for (on_error, failed) in POLICIES {
        let conn = Scripted::new(Script::Silent);
        let limiter = limiter(on_error, &conn, 3);
        let check = || async {
            let t = Instant::now();
            let d = limiter.check("k").await.unwrap();
            (d, t.elapsed())
        };
        for i in 0..3 {
            let (d, took) = check().await;
            assert_eq!((d.source(), took), (failed, DEADLINE), "{on_error:?} {i}");
            assert_eq!(d.is_allowed(), on_error != OnError::Closed, "{on_error:?}");
            if on_error == OnError::Closed {
                assert_eq!(d.retry_after(), COOLDOWN);
            }
        }
        assert!(limiter.engine().breaker_open(), "{on_error:?}");
        assert_eq!(conn.sent(), 3);
        // Open (since the third deadline): answered at once, nothing
        // sent, for the whole cool-down.
        let (d, took) = check().await;
        assert_eq!((d.source(), took), (failed, Duration::ZERO));
        tokio::time::sleep(COOLDOWN - Duration::from_millis(1)).await;
        let (d, took) = check().await;
        assert_eq!((d.source(), took), (failed, Duration::ZERO));
        assert_eq!(
            conn.sent(),
            3,
            "{on_error:?}: the open breaker sends nothing"
        );
        // Its cool-down over, one probe goes; the server answers it.
        tokio::time::sleep(Duration::from_millis(1)).await;
        conn.set(Script::After(Duration::from_millis(30), 0));
        let (d, took) = check().await;
        assert_eq!(
            (d.source(), took),
            (Source::Redis, Duration::from_millis(30))
        );
        assert!(d.is_allowed());
        assert!(!limiter.engine().breaker_open(), "{on_error:?}");
        assert_eq!(conn.sent(), 4);
        // Late: past the deadline, the policy answers at the deadline.
        tokio::time::sleep(Duration::from_secs(1)).await;
        conn.set(Script::After(Duration::from_millis(80), 0));
        let (d, took) = check().await;
        assert_eq!((d.source(), took), (failed, DEADLINE), "{on_error:?}");
    }
}

/// Waiting on a silent server: the reservation misses its deadline and the
/// fail policy answers the wait exactly then — `open` goes ahead, `closed`
/// fails (saying why), `local` takes the local share. An answered
/// reservation sleeps exactly the wait Redis gave, after its reply.
#[tokio::test(start_paused = true)]
async fn waits_on_a_silent_server_follow_the_fail_policy_at_the_deadline() {
    for (on_error, failed) in POLICIES {
        let conn = Scripted::new(Script::Silent);
        let limiter = limiter(on_error, &conn, 3);
        let t = Instant::now();
        let got = limiter
            .acquire_n("k", 1, Some(Duration::from_millis(200)))
            .await;
        assert_eq!(t.elapsed(), DEADLINE, "{on_error:?}");
        match on_error {
            OnError::Closed => {
                let e = got.unwrap_err();
                assert_eq!(e.code(), "store_unavailable", "{e}");
                assert!(
                    e.to_string()
                        .contains("redis unavailable (no reply within 50ms)"),
                    "{e}"
                );
            }
            _ => assert_eq!(got.unwrap(), failed),
        }
        // Answered in 10 ms with a slot due 120 ms later.
        tokio::time::sleep(Duration::from_secs(1)).await;
        conn.set(Script::After(Duration::from_millis(10), 120_000));
        let t = Instant::now();
        let got = limiter.acquire_n("k", 1, Some(Duration::from_millis(200)));
        assert_eq!(got.await.unwrap(), Source::Redis, "{on_error:?}");
        assert_eq!(t.elapsed(), Duration::from_millis(130), "{on_error:?}");
    }
}

/// Batching on a silent server: 64 callers in flight together (two sends,
/// the rest queued behind them), and 8 more started 10 ms apart (queued
/// behind sends that never land); every one is answered by the fail
/// policy exactly at its own deadline — none hangs behind a stalled batch,
/// none is answered early.
#[tokio::test(start_paused = true)]
async fn batched_callers_on_a_silent_server_answer_at_their_own_deadline() {
    for (on_error, failed) in [
        (OnError::Open, Source::FailOpen),
        (OnError::Closed, Source::FailClosed),
    ] {
        let conn = Scripted::new(Script::Silent);
        // A breaker that never opens: every call goes out.
        let limiter = limiter(on_error, &conn, u32::MAX);
        assert!(limiter.engine().config().batch, "batching is the default");
        let t0 = Instant::now();
        let mut callers = Vec::new();
        for i in 0..72u64 {
            let limiter = limiter.clone();
            let start = Duration::from_millis(10 * i.saturating_sub(63));
            callers.push(tokio::spawn(async move {
                tokio::time::sleep_until(t0 + start).await;
                let d = limiter.check(format!("k{i}")).await.unwrap();
                (start, d.source(), t0.elapsed())
            }));
        }
        for c in callers {
            let (start, source, at) = c.await.unwrap();
            assert_eq!((source, at), (failed, start + DEADLINE), "{on_error:?}");
        }
        assert!(conn.sent() >= 2 + 3, "batched: {} sends", conn.sent());
        assert!(conn.sent() < 72, "batched: {} sends", conn.sent());
    }
}

/// Callers left in the queue past their deadline: one caller's send and a
/// batch of 16 go at 0 ms, 300 callers queue at 2 ms, and the two sends
/// that end at 50 ms (at the deadline, or with a reply at 40 ms) take two
/// full batches (128 calls each) — 44 callers are still queued when their
/// deadline passes at 52 ms. On a silent server that is the server's
/// trouble: every one gets the fail policy. On a server that answered at
/// 40 ms it is the client's own queue: busy. (The batcher once read "a
/// send ended lately" as "Redis is alive", so the silent server's 44 were
/// busy too; a CI run against a real paused Redis met the same reading
/// when a caller's deadline and a timed-out send ended together.)
#[tokio::test(start_paused = true)]
async fn callers_still_queued_at_their_deadline_are_busy_only_while_redis_answers() {
    for (script, first, left) in [
        (Script::Silent, Source::FailOpen, Source::FailOpen),
        (
            Script::After(Duration::from_millis(40), 0),
            Source::Redis,
            Source::Busy,
        ),
    ] {
        let conn = Scripted::new(script);
        // A breaker that never opens: every call goes out.
        let limiter = limiter(OnError::Open, &conn, u32::MAX);
        let t0 = Instant::now();
        let mut callers = Vec::new();
        for i in 0..317u64 {
            let limiter = limiter.clone();
            let start = Duration::from_millis(if i < 17 { 0 } else { 2 });
            callers.push(tokio::spawn(async move {
                tokio::time::sleep_until(t0 + start).await;
                let d = limiter.check(format!("k{i}")).await.unwrap();
                (d.source(), t0.elapsed())
            }));
        }
        let mut answers = Vec::new();
        for c in callers {
            answers.push(c.await.unwrap());
        }
        let (first_at, left_at) = match script {
            Script::Silent => (DEADLINE, DEADLINE + Duration::from_millis(2)),
            Script::After(..) => (Duration::from_millis(40), Duration::from_millis(52)),
            Script::Stall(_) => unreachable!("not run here"),
        };
        // The first 17 went out at 0 ms (alone, then a batch of 16).
        for (i, a) in answers[..17].iter().enumerate() {
            assert_eq!(*a, (first, first_at), "{script:?}: caller {i}");
        }
        // The 300 that queued at 2 ms: 256 went out in two batches, 44
        // never did; every one is answered at its deadline.
        for (i, a) in answers[17..].iter().enumerate() {
            assert_eq!(*a, (left, left_at), "{script:?}: caller {}", 17 + i);
        }
        assert_eq!(conn.sent(), 4, "{script:?}: two sends, then two batches");
    }
}

/// A wait or a reservation whose future is dropped after its call reached
/// the server but before the reply came (the reply lands 10 ms after the
/// send; the caller goes at 5 ms): the reply is still read when it lands,
/// and what the server reserved is given back then — one `return` call at
/// exactly 10 ms, up to the TAT the reservation left. Without it the slot
/// was lost to everyone (a `reservations_share_one_order…` run against a
/// real Redis hit this: the drop fell between Redis' script and its reply).
#[tokio::test(start_paused = true)]
async fn a_caller_gone_while_its_reservation_is_in_flight_gives_it_back() {
    for (due_us, reserve) in [(500_000, false), (500_000, true), (0, false), (0, true)] {
        let conn = Scripted::new(Script::After(Duration::from_millis(10), due_us));
        let limiter = limiter(OnError::Closed, &conn, 3);
        let t = Instant::now();
        let gone = if reserve {
            tokio::time::timeout(Duration::from_millis(5), async {
                limiter
                    .reserve_n("k", 1, Duration::from_secs(1))
                    .await
                    .map(|r| r.consume())
            })
            .await
            .is_err()
        } else {
            tokio::time::timeout(Duration::from_millis(5), limiter.acquire_n("k", 1, None))
                .await
                .is_err()
        };
        assert!(gone, "{due_us} {reserve}: the caller went before the reply");
        assert_eq!(conn.sent(), 1);
        tokio::time::sleep_until(t + Duration::from_millis(10)).await;
        // The reply's task, then the give-back's send, run at 10 ms.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(t.elapsed(), Duration::from_millis(10));
        assert_eq!(conn.sent(), 2, "{due_us} {reserve}: the give-back went");
        let last = conn.last();
        assert_eq!(
            last[last.len() - 2..],
            ["return", &due_us.to_string()],
            "{last:?}"
        );
    }
}

/// A client too busy to run its own timers (a starved process: here the
/// clock jumps 200 ms past every deadline while the first call goes out)
/// cannot tell Redis' silence from its own lateness: its callers, sent or
/// still queued, are refused as busy — the client's own overload — and
/// neither the fail policy nor the breaker hears of it. On a runtime that
/// keeps time, the same silent server gets the fail policy
/// (`a_silent_server_gets_the_fail_policy_exactly_at_the_deadline`).
#[tokio::test(start_paused = true)]
async fn a_client_whose_timers_run_late_is_busy_not_the_fail_policy() {
    let conn = Scripted::new(Script::Stall(Duration::from_millis(200)));
    let limiter = limiter(OnError::Open, &conn, 100);
    let checks: Vec<_> = (0..20)
        .map(|i| {
            let l = limiter.clone();
            tokio::spawn(async move { l.check(format!("stall-{i}")).await.unwrap() })
        })
        .collect();
    for c in checks {
        let d = c.await.unwrap();
        assert_eq!(d.source(), Source::Busy, "{d:?}");
        assert!(!d.is_allowed());
    }
    let stats = limiter.stats();
    assert_eq!(stats.fail_policy(), 0, "{stats:?}");
    assert!(!stats.breaker_open, "{stats:?}");
}
