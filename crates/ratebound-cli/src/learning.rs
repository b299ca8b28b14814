//! Scenario 8 of `ratebound demo`, live: a fleet whose configured limit is
//! wrong. Fifty workers share one limit set at 30/s, bursts of 30, three
//! times what the partner (on 127.0.0.1, 10/s bursts of 20) allows — and
//! the partner answers a bare 429, no `Retry-After`, as a reverse proxy's
//! limiter does. Each worker runs the core's outbound call machine (the
//! steps every adapter runs: wait for a token, send, learn from the answer;
//! no retries, so that the partner sees the fleet's own pace). Learning
//! off, the fleet draws two 429s for every 200 for as long as it runs; learning on (the adapters' default), the first
//! refusals cut the shared rate and the fleet settles under the partner's
//! real limit. The partner's 200s and 429s are printed per second.

use std::io::BufReader;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ratebound::outbound::{Caller, EventKind, Outbound, Reach, Sending, Step, Target};
use ratebound::{Quota, TokenBucket};

use crate::CliError;
use crate::incident::{PARTNER_BURST, PARTNER_RATE, Partner, WORKERS, get, join};

/// What the fleet is configured at: three times the partner's limit.
const CONFIGURED: &str = "30/s burst 30";

/// One worker's calls until `deadline`, through the machine's steps on
/// the shared `bucket`; counts the learned changes in `adapted`.
fn worker(
    bucket: &TokenBucket,
    caller: &Caller,
    addr: SocketAddr,
    deadline: Instant,
    adapted: &AtomicU64,
) -> Result<(), CliError> {
    let stream = TcpStream::connect(addr)
        .map_err(|e| CliError::new(format!("cannot reach the partner: {e}")))?;
    let mut conn = BufReader::new(stream);
    let origin = Instant::now();
    let target = Target {
        scheme: "http",
        host: "partner",
        port: None,
    };
    while Instant::now() < deadline {
        let mut call = caller.call("GET", target, None, None, None, true)?;
        loop {
            match call.next(caller, origin.elapsed())? {
                Step::Hold(d) => thread::sleep(d),
                Step::Acquire { n, timeout } => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    call.reserving(bucket.learned());
                    match bucket.reserve_n(n, timeout.unwrap_or(left).min(left)) {
                        Ok(r) => thread::sleep(r.delay()),
                        // Past the run's end: this worker is done.
                        Err(ratebound::Error::DeadlineExceeded { wait, .. }) if wait > left => {
                            return Ok(());
                        }
                        // Beyond the line's horizon: the machine says hold.
                        Err(ratebound::Error::DeadlineExceeded { wait, .. }) => {
                            call.beyond(wait);
                            continue;
                        }
                        Err(e) => return Err(e.into()),
                    }
                    call.saw(bucket.learned());
                }
                Step::Send => {
                    let (status, headers) =
                        get(&mut conn).map_err(|e| CliError::new(format!("partner: {e}")))?;
                    let now_unix = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0.0, |d| d.as_secs_f64());
                    let lines = headers.iter().map(|(k, v)| (k.as_str(), v.as_str()));
                    call.answered(caller, status, lines, now_unix);
                }
                Step::Adapt { seen, next } => call.adapted(bucket.adapt(seen, next)),
                Step::Pause(d) => {
                    bucket.pause(d);
                    call.paused(caller, Some(Reach::Shared), origin.elapsed());
                }
                Step::Report(e) => {
                    if e.outcome == EventKind::Adapted {
                        adapted.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Step::Retry => {}
                Step::Done => break,
            }
        }
    }
    Ok(())
}

/// What one fleet's run shows.
struct Run {
    /// The partner's (200s, 429s) in each second.
    seconds: Vec<(u64, u64)>,
    /// The learned rate's changes.
    adapted: u64,
    /// The rate the shared bucket ends at.
    rate: f64,
}

/// One fleet for `run_for`.
fn fleet(adaptive: bool, run_for: Duration) -> Result<Run, CliError> {
    let quota = Quota::parse(CONFIGURED)?;
    let partner = Partner::start_with(true)?;
    let bucket = Arc::new(TokenBucket::new(quota));
    let caller = Arc::new(
        // No retries: each refusal is the caller's, so the partner sees the
        // fleet's own pace (a retry's backoff would pause everyone and hide
        // it).
        Caller::new(
            "token_bucket",
            Outbound::new().with_retries(0),
            Sending::default(),
            None,
        )?
        .with_adaptive(Some(adaptive), true, quota)?,
    );
    let adapted = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + run_for;
    let handles: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (bucket, caller, adapted) = (bucket.clone(), caller.clone(), adapted.clone());
            let addr = partner.addr;
            thread::spawn(move || worker(&bucket, &caller, addr, deadline, &adapted))
        })
        .collect();
    join(handles, &partner)?;
    let mut seconds = partner.per_second();
    seconds.truncate(usize::try_from(run_for.as_secs()).unwrap_or(usize::MAX));
    let rate = quota.rate_per_second() * f64::from(bucket.learned().fraction_units().max(1))
        / f64::from(ratebound::outbound::FULL);
    Ok(Run {
        seconds,
        adapted: adapted.load(Ordering::Relaxed),
        rate,
    })
}

/// Scenario 8 as text: the same fleet without learning and with it, each
/// for `run_for`.
pub fn render(run_for: Duration) -> Result<String, CliError> {
    let secs = run_for.as_secs();
    let mut out = format!(
        "8. A wrong limit, live: {WORKERS} workers share one limit configured at {CONFIGURED}, \
         three times what the partner on 127.0.0.1 allows ({PARTNER_RATE}/s, bursts of \
         {PARTNER_BURST}),\n   and it answers a bare 429 (no Retry-After); each worker runs the \
         outbound call machine for {secs} s. The partner's 200s and 429s per second:\n"
    );
    for adaptive in [false, true] {
        let Run {
            seconds,
            adapted,
            rate,
        } = fleet(adaptive, run_for)?;
        let row: Vec<String> = seconds
            .iter()
            .map(|(ok, no)| format!("{ok:>2}/{no:<2}"))
            .collect();
        let (ok, no) = seconds
            .iter()
            .skip(seconds.len() / 2)
            .fold((0, 0), |a, s| (a.0 + s.0, a.1 + s.1));
        let share = 100.0 * no as f64 / (ok + no).max(1) as f64;
        let name = if adaptive {
            "learning (the default)"
        } else {
            "learning off          "
        };
        out.push_str(&format!("   {name} {}\n", row.join(" ")));
        out.push_str(&format!(
            "   {:22} second half: 200 x {ok}, 429 x {no} ({share:.0} % refused); \
             {adapted} changes learned, ending at {rate:.1}/s\n",
            ""
        ));
    }
    out.push('\n');
    Ok(out)
}
