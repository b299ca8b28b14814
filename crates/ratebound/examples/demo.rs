//! Replays DESIGN.md scenario 1 on a manual clock and prints it as a table:
//! a token bucket of 2 per second, burst 3.
//!
//! Run: `cargo run --release --example demo -p ratebound`

use std::time::Duration;

use ratebound::{Decision, ManualClock, Quota, TokenBucket};

fn main() -> Result<(), ratebound::Error> {
    let quota = Quota::parse("2/s burst 3")?;
    let clock = ManualClock::new();
    let bucket = TokenBucket::with_clock(quota, clock.clone());

    println!("ratebound demo: token bucket {quota} (2 per second, 3 at once), manual clock\n");
    println!(
        "{:>4}  {:>9}  {:>8}  {:>9}  {:>11}  {:>11}",
        "step", "t", "decision", "remaining", "retry_after", "reset_after"
    );
    let advances_ms = [0, 0, 0, 0, 250, 250, 10_000, 0, 0, 0];
    let (mut admitted, mut refused) = (0, 0);
    for (step, advance) in advances_ms.into_iter().enumerate() {
        clock.advance(Duration::from_millis(advance));
        let d: Decision = bucket.check();
        if d.is_allowed() {
            admitted += 1;
        } else {
            refused += 1;
        }
        println!(
            "{:>4}  {:>9}  {:>8}  {:>9}  {:>11}  {:>11}",
            step + 1,
            format!("{:?}", Duration::from_nanos(ratebound::Clock::now(&clock))),
            if d.is_allowed() { "ok" } else { "denied" },
            d.remaining(),
            format!("{:?}", d.retry_after()),
            format!("{:?}", d.reset_after()),
        );
    }
    println!("\n{admitted} admitted, {refused} refused");
    Ok(())
}
