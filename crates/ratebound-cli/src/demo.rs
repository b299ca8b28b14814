//! `ratebound demo`: the source scenarios 1–6 on a manual clock, each as a
//! table. Deterministic: the output is compared with a golden file.
//! Scenario 7, the incident, and 8, a wrong limit learned, run live
//! (`incident.rs`, `learning.rs`); [`run`] is the command.

use std::fmt::Write as _;
use std::time::Duration;

use ratebound::{
    Clock, Decision, FixedWindow, KeyedAlgorithm, KeyedLimiter, Limiter, ManualClock, Quota,
    SlidingLog, SlidingWindow, TokenBucket,
};

use clap::Args;
use ratebound_cli::{Shown, parse_duration};

use crate::{CliError, incident, learning, show_duration};

const SECOND: u64 = 1_000_000_000;

#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
    /// Also run scenario 7's fleet on a limit in this Redis, e.g.
    /// redis://127.0.0.1:6379 (its keys: rb-demo-<pid>:tb:partner-demo).
    #[arg(long)]
    redis: Option<String>,
    /// How long each of scenario 7's fleets runs.
    #[arg(long, default_value = "3s", allow_hyphen_values = true)]
    seconds: String,
    /// Only scenarios 1-6 (deterministic, no network).
    #[arg(long, conflicts_with = "live_only")]
    no_live: bool,
    /// Only the live scenarios (7, and 8 unless --no-learning).
    #[arg(long)]
    live_only: bool,
    /// How long each of scenario 8's fleets runs (whole seconds, 1-60).
    #[arg(long, default_value = "10s", allow_hyphen_values = true)]
    learning_seconds: String,
    /// Skip scenario 8 (a fleet learning a partner's real limit).
    #[arg(long)]
    no_learning: bool,
}

/// Scenarios 1-6, then 7 and 8 live (unless told otherwise).
pub(crate) fn run(args: &DemoArgs) -> Result<String, CliError> {
    let secs = parse_duration(&args.seconds, "--seconds")?;
    if secs == 0 || secs > 60 * SECOND {
        return Err(CliError::new(format!(
            "--seconds must be more than 0 and at most 60 s, got {}",
            Shown(&args.seconds)
        )));
    }
    let mut out = if args.live_only {
        String::new()
    } else {
        render()?
    };
    if !args.no_live {
        out.push_str(&incident::render(
            args.redis.as_deref(),
            Duration::from_nanos(secs),
        )?);
        if !args.no_learning {
            let learn = parse_duration(&args.learning_seconds, "--learning-seconds")?;
            if !(SECOND..=60 * SECOND).contains(&learn) {
                return Err(CliError::new(format!(
                    "--learning-seconds must be from 1 s to 60 s, got {}",
                    Shown(&args.learning_seconds)
                )));
            }
            out.push_str(&learning::render(Duration::from_secs(learn / SECOND))?);
        }
    }
    Ok(out)
}

/// One table: a title, then rows of (time, request, decision, remaining,
/// retry-after).
struct Table {
    out: String,
}

impl Table {
    fn new(title: &str) -> Table {
        let mut out = String::new();
        let _ = writeln!(out, "{title}");
        let _ = writeln!(
            out,
            "  {:>9}  {:<18}  {:<8}  {:>9}  {:>11}",
            "time", "request", "decision", "remaining", "retry-after"
        );
        Table { out }
    }

    fn row(&mut self, now: u64, request: &str, decision: &str, d: &Decision) {
        let _ = writeln!(
            self.out,
            "  {:>9}  {:<18}  {:<8}  {:>9}  {:>11}",
            show_duration(now),
            request,
            decision,
            d.remaining(),
            if d.is_allowed() {
                "-".to_string()
            } else {
                show_duration(d.retry_after_nanos())
            },
        );
    }

    fn line(&mut self, text: &str) {
        let _ = writeln!(self.out, "  {text}");
    }

    fn finish(self, all: &mut String) {
        all.push_str(&self.out);
        all.push('\n');
    }
}

fn verdict(d: &Decision) -> &'static str {
    if d.is_allowed() { "ok" } else { "denied" }
}

/// An HTTP status for a decision, with `Retry-After` in whole seconds
/// rounded up, as the middleware answers.
fn http(d: &Decision) -> String {
    if d.is_allowed() {
        "200".to_string()
    } else {
        format!("429 ({}s)", d.retry_after_nanos().div_ceil(SECOND))
    }
}

/// The whole demo as text.
pub fn render() -> Result<String, CliError> {
    let mut all = String::from(
        "ratebound demo: the source scenarios 1-6, on a manual clock starting at 0 (7 runs live after them)\n\n",
    );
    scenario_1(&mut all)?;
    scenarios_2_and_3(&mut all)?;
    scenario_4(&mut all)?;
    scenario_5(&mut all)?;
    scenario_6(&mut all)?;
    Ok(all)
}

fn scenario_1(all: &mut String) -> Result<(), CliError> {
    let clock = ManualClock::new();
    let bucket = TokenBucket::with_clock(Quota::parse("2/s burst 3")?, clock.clone());
    let mut t = Table::new("1. Token bucket, 2/s burst 3");
    let advances_ms = [0, 0, 0, 0, 250, 250, 10_000, 0, 0, 0];
    let mut admitted = 0;
    for (i, ms) in advances_ms.into_iter().enumerate() {
        clock.advance(Duration::from_millis(ms));
        let d = bucket.check();
        admitted += u64::from(d.is_allowed());
        t.row(clock.now(), &format!("#{}", i + 1), verdict(&d), &d);
    }
    t.line(&format!(
        "{admitted} admitted, {} refused",
        advances_ms.len() as u64 - admitted
    ));
    t.finish(all);
    Ok(())
}

fn scenarios_2_and_3(all: &mut String) -> Result<(), CliError> {
    let clock = ManualClock::new();
    let keyed: KeyedLimiter<String, ManualClock> =
        KeyedLimiter::new(KeyedAlgorithm::TokenBucket(Quota::parse("1/s burst 2")?))?
            .with_clock(clock.clone());
    let mut t = Table::new("2. Per-key limit 1/s burst 2 on X-API-Key (HTTP status, Retry-After)");
    for key in ["alice", "alice", "alice", "bob"] {
        let d = keyed.check(&key.to_string())?;
        t.row(clock.now(), &format!("key {key}"), &http(&d), &d);
    }
    t.finish(all);

    let mut t = Table::new("3. Cleanup: 10 min later, one request without a key");
    clock.advance(Duration::from_secs(600));
    let d = keyed.check(&"anonymous".to_string())?;
    t.row(clock.now(), "no key", &http(&d), &d);
    let removed = keyed.cleanup_idle(Duration::from_secs(300));
    t.line(&format!(
        "cleanup_idle(5 min): {removed} removed (alice, bob), {} left",
        keyed.len()
    ));
    t.finish(all);
    Ok(())
}

fn scenario_4(all: &mut String) -> Result<(), CliError> {
    let clock = ManualClock::new();
    let bucket = TokenBucket::with_clock(Quota::parse("1/s burst 5")?, clock.clone());
    let mut t = Table::new("4. Ticked bucket: capacity 5, +1 token a tick, 2 requests a tick");
    let (mut admitted, mut refused) = (0, 0);
    for tick in 1..=10 {
        clock.advance(Duration::from_secs(1));
        for r in 1..=2 {
            let d = bucket.check();
            if d.is_allowed() {
                admitted += 1;
            } else {
                refused += 1;
            }
            t.row(clock.now(), &format!("tick {tick} #{r}"), verdict(&d), &d);
        }
    }
    t.line(&format!("{admitted} admitted, {refused} refused"));
    t.finish(all);
    Ok(())
}

fn scenario_5(all: &mut String) -> Result<(), CliError> {
    let mut t =
        Table::new("5. 100/min: 100 requests at 59.9 s and 100 at 60.1 s (the boundary burst)");
    let minute = Duration::from_secs(60);
    let limiters: [(&str, Box<dyn Limiter>); 3] = [
        (
            "fixed window",
            Box::new(FixedWindow::with_clock(100, minute, ManualClock::new())?),
        ),
        (
            "sliding window",
            Box::new(SlidingWindow::with_clock(100, minute, ManualClock::new())?),
        ),
        (
            "sliding log",
            Box::new(SlidingLog::with_clock(100, minute, ManualClock::new())?),
        ),
    ];
    for (name, limiter) in &limiters {
        let mut admitted = [0u64; 2];
        let mut last = None;
        for (i, at) in [59_900_000_000u64, 60_100_000_000].into_iter().enumerate() {
            for _ in 0..100 {
                let d = limiter.check_n_at(1, at)?;
                admitted[i] += u64::from(d.is_allowed());
                last = Some((at, d));
            }
        }
        if let Some((at, d)) = last {
            t.row(at, &format!("{name} #200"), verdict(&d), &d);
        }
        t.line(&format!(
            "{name}: {} + {} = {} admitted",
            admitted[0],
            admitted[1],
            admitted[0] + admitted[1]
        ));
    }
    t.finish(all);
    Ok(())
}

fn scenario_6(all: &mut String) -> Result<(), CliError> {
    let window = SlidingWindow::with_clock(50, Duration::from_secs(60), ManualClock::new())?;
    let mut t = Table::new(
        "6. Sliding window 50/min: 42 in the previous minute, 18 in the current one, 15 s in",
    );
    for _ in 0..42 {
        window.check_n_at(1, 30 * SECOND)?;
    }
    let mut current = 0;
    for _ in 0..18 {
        current += u64::from(window.check_n_at(1, 75 * SECOND)?.is_allowed());
    }
    t.line(&format!("42 admitted at 30 s, {current} of 18 at 75 s"));
    let d = window.check_n_at(1, 75 * SECOND)?;
    t.row(75 * SECOND, "#61", verdict(&d), &d);
    t.line("estimate 42 x 0.75 + 18 = 49.5: one more would make 50.5 > 50");
    t.finish(all);
    Ok(())
}
