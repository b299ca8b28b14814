//! The learning rule proven on a simulated fleet, in virtual time: a
//! discrete-event loop in milliseconds (no threads, no sleeps, no wall
//! clock). Fifty instances share one `TokenBucket` (configured 30/s burst
//! 30) whose quota follows the learned fraction (`set_quota_at`), and call
//! a partner that is itself a `TokenBucket` answering a bare 429 (or, when
//! down, a 503) beyond its limit. Each request's round trip is 20–80 ms
//! (a fixed pseudo-random sequence); each answer goes to `refused` or
//! `answered` with the state its sender saw, and the proposal is applied by
//! a compare-and-swap from that state. `--nocapture` prints the partner's
//! 200 and 429 counts per second.
#![cfg(not(ratebound_loom))]

use std::time::Duration;

use ratebound::outbound::{LINE_HORIZON, Learned, Learning, read_answer};
use ratebound::{Error, ManualClock, Quota, TokenBucket};

const INSTANCES: usize = 50;
const MS: u64 = 1_000_000;

/// The partner's limit over time: (from second, rate per second), burst 20;
/// and the span (in s) during which it is down (a 503 to everything). Or,
/// when it `announce`s, a quota of [`WINDOW_QUOTA`] per window of
/// [`WINDOW_S`] seconds (from 0 s on), told on every answer.
struct Partner {
    /// Refuses half of what it admits, at random (a fixed sequence): a
    /// hostile or broken partner whose refusals say nothing of a rate.
    coin: bool,
    phases: Vec<(u64, u64)>,
    down: Option<(u64, u64)>,
    announce: Option<Style>,
}

/// How an announcing partner tells its quota on every answer.
#[derive(Clone, Copy, Debug)]
enum Style {
    /// `RateLimit-Remaining` / `RateLimit-Reset` (seconds, rounded up).
    Fields,
    /// The IETF field: `RateLimit: "default";r=R;t=T`.
    Ietf,
    /// `X-RateLimit-Remaining` / `X-RateLimit-Reset` as a Unix time.
    XUnix,
}

/// The announcing partner's quota: 100 per 10 s window.
const WINDOW_QUOTA: u64 = 100;
const WINDOW_S: u64 = 10;

/// The Unix time (s) of the simulation's 0 ms.
const EPOCH_S: u64 = 1_800_000_000;

impl Style {
    /// The answer's header fields for `remaining` requests left, the
    /// window ending at `end_ms`, told at `now_ms`.
    fn headers(self, remaining: u64, end_ms: u64, now_ms: u64) -> Vec<(String, String)> {
        let t = (end_ms - now_ms).div_ceil(1000).to_string();
        let r = remaining.to_string();
        match self {
            Style::Fields => vec![
                ("RateLimit-Remaining".into(), r),
                ("RateLimit-Reset".into(), t),
            ],
            Style::Ietf => vec![("RateLimit".into(), format!(r#""default";r={r};t={t}"#))],
            Style::XUnix => vec![
                ("X-RateLimit-Remaining".into(), r),
                (
                    "X-RateLimit-Reset".into(),
                    (EPOCH_S + end_ms / 1000).to_string(),
                ),
            ],
        }
    }
}

/// Per second: the partner's 200s and refusals, and the learned rate at
/// the second's end.
#[derive(Default, Clone, Copy, Debug)]
struct Second {
    ok: u64,
    refused: u64,
    rate: f64,
}

struct Run {
    seconds: Vec<Second>,
    /// The learned fraction's lowest and highest value at any ms.
    low: f64,
    high: f64,
}

impl Run {
    /// 200s, refusals over seconds `from..to`.
    fn counts(&self, from: usize, to: usize) -> (u64, u64) {
        let s = &self.seconds[from..to];
        (
            s.iter().map(|x| x.ok).sum(),
            s.iter().map(|x| x.refused).sum(),
        )
    }

    /// The share of refusals among what reached the partner in `from..to`.
    fn refused_share(&self, from: usize, to: usize) -> f64 {
        let (ok, refused) = self.counts(from, to);
        refused as f64 / (ok + refused).max(1) as f64
    }

    /// The 200s in `from..to` over the partner's capacity `rate × span`.
    fn goodput(&self, from: usize, to: usize, rate: u64) -> f64 {
        self.counts(from, to).0 as f64 / (rate * (to - from) as u64) as f64
    }

    /// The first second from `from` at whose end the learned rate is at
    /// least `rate`.
    fn reached(&self, from: usize, rate: f64) -> Option<usize> {
        (from..self.seconds.len()).find(|&s| self.seconds[s].rate >= rate)
    }

    /// The changing partner's phases (10/s, 5/s, 10/s from 0, 10 and 20 s):
    /// in the second half of each, at most 10 % refused and at least
    /// `bars[i]` of that phase's capacity served.
    fn check_phases(&self, label: &str, bars: [f64; 3]) {
        for ((from, rate), bar) in [(5, 10), (15, 5), (25, 10)].into_iter().zip(bars) {
            let (share, goodput) = (
                self.refused_share(from, from + 5),
                self.goodput(from, from + 5, rate),
            );
            println!(
                "{label}{from}-{} s at {rate}/s: {:.1} % refused, goodput {:.1} %",
                from + 5,
                share * 100.0,
                goodput * 100.0
            );
            assert!(share <= 0.10, "{from} s: refused share {share}");
            assert!(goodput >= bar, "{from} s: goodput {goodput}");
        }
    }

    fn print(&self, title: &str) {
        println!("{title}: second, 200s, 429s, learned rate");
        for (i, s) in self.seconds.iter().enumerate() {
            println!("  {i:>2}s {:>3} {:>3} {:>5.2}", s.ok, s.refused, s.rate);
        }
    }
}

/// A deterministic pseudo-random sequence (xorshift64).
struct Rng(u64);

impl Rng {
    fn round_trip_ms(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        20 + self.0 % 61
    }
}

enum Event {
    /// A queued instance's slot comes: it sends, with the learned word read
    /// when it reserved.
    Send(usize, u64),
    /// A request reaches the partner: its sender, the state it saw, the
    /// way back in ms.
    Arrive(usize, u64, u64),
    /// An answer reaches its sender: the sender, the state it saw, refused,
    /// the header fields of an announcing partner.
    Answer(usize, u64, bool, Vec<(String, String)>),
}

/// Runs the fleet for `seconds` against `partner`; `learning: None` keeps
/// the shared limiter at its configured 30/s burst 30.
fn simulate(learning: Option<Learning>, partner: &Partner, seconds: u64) -> Run {
    simulate_seeded(learning, partner, seconds, 0x9E37_79B9_7F4A_7C15, None)
}

/// [`simulate`] with the instances in line as the adapters are: each
/// idle instance reserves its slot in the shared bucket at once (as
/// `wait_n` does) and sends when the slot comes, taken at the rate in
/// force when it reserved — within the call machine's [`LINE_HORIZON`]:
/// a slot further away is not taken, the instance holds and asks again
/// (`Call::beyond`).
fn simulate_queued(learning: Option<Learning>, partner: &Partner, seconds: u64) -> Run {
    simulate_seeded(
        learning,
        partner,
        seconds,
        0x9E37_79B9_7F4A_7C15,
        Some(LINE_HORIZON),
    )
}

/// [`simulate_queued`] without the horizon: fifty instances keep a line
/// fifty deep, however long it is.
fn simulate_unbounded_line(learning: Option<Learning>, partner: &Partner, seconds: u64) -> Run {
    simulate_seeded(
        learning,
        partner,
        seconds,
        0x9E37_79B9_7F4A_7C15,
        Some(Duration::MAX),
    )
}

fn simulate_seeded(
    learning: Option<Learning>,
    partner: &Partner,
    seconds: u64,
    seed: u64,
    line: Option<Duration>,
) -> Run {
    let ceiling = Quota::parse("30/s burst 30").unwrap();
    let shared = TokenBucket::with_clock(ceiling, ManualClock::new());
    let partner_quota = |rate: u64| {
        Quota::per_second(rate as f64)
            .unwrap()
            .with_burst(20)
            .unwrap()
    };
    let limit = TokenBucket::with_clock(partner_quota(partner.phases[0].1), ManualClock::new());
    let end = seconds * 1000;
    let mut events: Vec<Vec<Event>> = (0..end + 200).map(|_| Vec::new()).collect();
    // Slots reserved beyond the run: (ms, instance), sent if the run
    // reaches them.
    let mut later: Vec<(u64, usize, u64)> = Vec::new();
    let mut busy = [false; INSTANCES];
    // Instances holding (a line beyond the horizon): (ms, instance), idle
    // again then, to ask once more.
    let mut holding: Vec<(u64, usize)> = Vec::new();
    let mut rng = Rng(seed);
    // The announcing partner's window and the requests it took in it.
    let mut spent = (0u64, 0u64);
    let mut run = Run {
        seconds: vec![Second::default(); seconds as usize],
        low: 1.0,
        high: 0.0,
    };
    for now in 0..end {
        let ns = now * MS;
        let second = (now / 1000) as usize;
        if now % 1000 == 0
            && let Some(&(_, rate)) = partner.phases.iter().find(|p| p.0 * 1000 == now && now > 0)
        {
            limit.set_quota_at(partner_quota(rate), ns);
        }
        holding.retain(|&(at, who)| {
            if at == now {
                busy[who] = false;
            }
            at != now
        });
        later.retain(|&(at, who, seen)| {
            let due = at == now;
            if due {
                events[now as usize].push(Event::Send(who, seen));
            }
            !due
        });
        for event in std::mem::take(&mut events[now as usize]) {
            match event {
                Event::Send(who, reserved) => {
                    let seen = shared.learned().to_bits();
                    // Cut since this slot was taken: the slot was priced at
                    // a rate found too high; the instance takes a new one
                    // (the call machine's rule, `Call::reserving`).
                    // It asks again below, this ms, as an idle instance.
                    if requeue(reserved, seen) {
                        busy[who] = false;
                        continue;
                    }
                    let rtt = rng.round_trip_ms();
                    events[(now + rtt / 2) as usize].push(Event::Arrive(who, seen, rtt - rtt / 2));
                }
                Event::Arrive(who, seen, back) => {
                    let down = partner
                        .down
                        .is_some_and(|(a, b)| (a * 1000..b * 1000).contains(&now));
                    let heads = partner.coin && rng.round_trip_ms().is_multiple_of(2);
                    let (ok, headers) = match partner.announce {
                        Some(style) => {
                            // The window this request falls in, and what
                            // is left of its quota once it is counted.
                            let window = now / (WINDOW_S * 1000);
                            if window != spent.0 {
                                spent = (window, 0);
                            }
                            let ok = spent.1 < WINDOW_QUOTA;
                            spent.1 += u64::from(ok);
                            let end_ms = (window + 1) * WINDOW_S * 1000;
                            (ok, style.headers(WINDOW_QUOTA - spent.1, end_ms, now))
                        }
                        None => (
                            !down && !heads && limit.check_at(ns).is_allowed(),
                            Vec::new(),
                        ),
                    };
                    if ok {
                        run.seconds[second].ok += 1;
                    } else {
                        run.seconds[second].refused += 1;
                    }
                    events[(now + back) as usize].push(Event::Answer(who, seen, !ok, headers));
                }
                Event::Answer(who, seen, refused, headers) => {
                    busy[who] = false;
                    // What the call machine reads from the answer.
                    let now_unix = EPOCH_S as f64 + now as f64 / 1000.0;
                    let (pause, announced) = read_answer(
                        headers.iter().map(|(n, v)| (n.as_str(), v.as_str())),
                        now_unix,
                    );
                    if let Some(learning) = learning {
                        let seen_state = Learned::from_bits(seen);
                        let proposal = if refused {
                            learning.refused(seen_state, now)
                        } else if let Some(quota) = &announced {
                            learning.announced(seen_state, quota, now)
                        } else {
                            learning.answered(seen_state, now)
                        };
                        // The store's compare-and-swap from what the
                        // sender saw.
                        if let Some(p) = proposal {
                            shared.adapt_at(seen_state, p, ns);
                        }
                    }
                    // A count of 0: the partner's pause, for everyone
                    // (learning or not).
                    if let Some(d) = pause {
                        shared.pause_at(d, ns);
                    }
                }
            }
        }
        // Every idle instance asks the shared limiter; the first ones
        // admitted send. The order turns each ms.
        for i in 0..INSTANCES {
            let who = (i + now as usize) % INSTANCES;
            if busy[who] {
                continue;
            }
            if let Some(horizon) = line {
                busy[who] = true;
                let seen = shared.learned().to_bits();
                let r = match shared.reserve_n_at(1, horizon, ns) {
                    Ok(r) => r,
                    // Beyond the horizon: hold (`Call::beyond`'s rule).
                    Err(Error::DeadlineExceeded { wait, .. }) => {
                        let hold = wait.saturating_sub(horizon).max(horizon);
                        holding.push((now + hold.as_millis() as u64, who));
                        continue;
                    }
                    Err(e) => panic!("reserve: {e}"),
                };
                let at = now + r.delay().as_nanos().div_ceil(u128::from(MS)) as u64;
                if at == now {
                    let rtt = rng.round_trip_ms();
                    events[(now + rtt / 2) as usize].push(Event::Arrive(who, seen, rtt - rtt / 2));
                } else if at < end {
                    later.push((at, who, seen));
                }
            } else if shared.check_at(ns).is_allowed() {
                busy[who] = true;
                let rtt = rng.round_trip_ms();
                let seen = shared.learned().to_bits();
                events[(now + rtt / 2) as usize].push(Event::Arrive(who, seen, rtt - rtt / 2));
            }
        }
        let fraction = learning.map_or(1.0, |l| l.fraction(shared.learned()));
        run.low = run.low.min(fraction);
        run.high = run.high.max(fraction);
        run.seconds[second].rate = 30.0 * fraction;
    }
    run
}

/// The call machine's rule for a sending whose wait began under
/// `reserved` and ended under `seen`: wait again when a cut came between.
fn requeue(reserved: u64, seen: u64) -> bool {
    Learned::from_bits(seen).cut_since(Learned::from_bits(reserved))
}

fn bare_429s() -> Partner {
    Partner {
        phases: vec![(0, 10)],
        down: None,
        coin: false,
        announce: None,
    }
}

fn default_learning() -> Learning {
    Learning::new(Quota::parse("30/s burst 30").unwrap())
}

/// Bare 429s: configured at 30/s against a partner's 10/s burst 20, the
/// fleet settles under the partner's limit — in the last 10 s of 20, at
/// most 5 % of what reached the partner is refused and at least 85 % of
/// its capacity is served. Without learning (the documented contrast) the
/// same fleet has two thirds of its calls refused for as long as it runs.
#[test]
fn a_fleet_configured_too_high_learns_the_partners_limit() {
    let run = simulate(Some(default_learning()), &bare_429s(), 20);
    run.print("learning, partner 10/s burst 20");
    let (share, goodput) = (run.refused_share(10, 20), run.goodput(10, 20, 10));
    println!(
        "last 10 s: {:.1} % refused, goodput {:.1} %",
        share * 100.0,
        goodput * 100.0
    );
    assert!(share <= 0.05, "refused share {share}");
    assert!(goodput >= 0.85, "goodput {goodput}");

    let fixed = simulate(None, &bare_429s(), 20);
    fixed.print("no learning");
    let share = fixed.refused_share(10, 20);
    println!("no learning, last 10 s: {:.1} % refused", share * 100.0);
    assert!(share > 0.05, "without learning the bar must fail: {share}");
}

/// The goodput bar can fail too: a rule that cuts hard and climbs slowly
/// (× 0.5, 1/600 of the ceiling each 2 s) stays far under the partner's
/// capacity.
#[test]
fn a_timid_rule_fails_the_goodput_bar() {
    let timid = default_learning()
        .with_factor(0.5)
        .unwrap()
        .with_probe(Duration::from_secs(2), 1.0 / 600.0)
        .unwrap();
    let run = simulate(Some(timid), &bare_429s(), 20);
    let goodput = run.goodput(10, 20, 10);
    println!("timid rule, last 10 s: goodput {:.1} %", goodput * 100.0);
    assert!(goodput < 0.85, "goodput {goodput}");
}

/// The partner changes its limit: 10/s, 5/s for 10 s, 10/s again. In the
/// second half of each phase, at most 10 % refused and at least 80 % of
/// that phase's capacity served; the fleet is back up (a learned rate of
/// 8/s) within 10 s of the limit rising.
#[test]
fn a_fleet_follows_a_partner_that_changes_its_limit() {
    let run = simulate(Some(default_learning()), &changing_partner(), 30);
    run.print("learning, partner 10/s, 5/s, 10/s");
    run.check_phases("", [0.80, 0.80, 0.80]);
    let back = run.reached(20, 8.0).expect("back up");
    println!("learned rate back at 8/s by the end of second {back}");
    assert!(back < 30, "back at {back} s");
}

/// A partner down (503 to everything for 30 s): the learned rate stays in
/// [floor, ceiling] throughout, and climbs back within the probing time
/// once the partner is back (8/s within 10 s), serving ≥ 80 % of its
/// capacity in the last 10 s.
#[test]
fn a_fleet_survives_a_partner_that_is_down() {
    let partner = Partner {
        phases: vec![(0, 10)],
        down: Some((5, 35)),
        coin: false,
        announce: None,
    };
    let learning = default_learning();
    let run = simulate(Some(learning), &partner, 55);
    run.print("learning, partner down 5-35 s");
    println!("learned fraction within [{:.4}, {:.4}]", run.low, run.high);
    assert!(run.low >= learning.floor() && run.high <= 1.0);
    assert_eq!(run.low, learning.floor(), "the outage cut to the floor");
    let back = run.reached(35, 8.0).expect("back up");
    println!("learned rate back at 8/s by the end of second {back}");
    assert!(back < 45, "back at {back} s");
    let goodput = run.goodput(45, 55, 10);
    println!("45-55 s: goodput {:.1} %", goodput * 100.0);
    assert!(goodput >= 0.80, "goodput {goodput}");
}

/// The bare-429 and changing-limit partners against a fleet in line, as
/// the adapters are: each idle instance reserves its slot at once (as
/// `wait_n` does) and sends when it comes, priced at the rate in force
/// when it reserved. Three rules keep a line from undoing what is
/// learned: a sending whose wait saw the rate fall waits again
/// (`Call::reserving`, `Learned::cut_since`); a cut drops the slots taken
/// beyond an empty bucket (`TokenBucket::adapt`), so that those sendings
/// line up again at the new rate; and no slot is taken further than
/// [`LINE_HORIZON`] ahead (`Call::beyond`), so that a rise reaches the
/// partner within it. Without the first, the queue keeps the old pace for
/// its whole length after each cut, the partner refuses it and the fleet
/// cuts itself to the floor (16 % of the partner served, bare); without
/// the second, every cut adds a fleet's length of slots nobody uses (80 %
/// served bare, and a partner refusing at random starves the fleet: 1
/// answer in 30 s); without the third, see
/// [`an_unbounded_line_follows_a_rise_a_queues_length_late`]. With all
/// three: the issue's bars in every phase.
#[test]
fn a_fleet_in_line_learns_the_partners_limit() {
    let run = simulate_queued(Some(default_learning()), &bare_429s(), 20);
    run.print("queued, learning, partner 10/s burst 20");
    let (share, goodput) = (run.refused_share(10, 20), run.goodput(10, 20, 10));
    println!(
        "queued, last 10 s: {:.1} % refused, goodput {:.1} %",
        share * 100.0,
        goodput * 100.0
    );
    assert!(share <= 0.05, "refused share {share}");
    assert!(goodput >= 0.85, "goodput {goodput}");
    let changing = simulate_queued(Some(default_learning()), &changing_partner(), 30);
    changing.print("queued, learning, partner 10/s, 5/s, 10/s");
    changing.check_phases("queued ", [0.80, 0.80, 0.80]);
    let back = changing.reached(20, 8.0).expect("back up");
    println!("queued: learned rate back at 8/s by the end of second {back}");
    assert!(back < 30, "back at {back} s");
}

/// Why the line has a horizon: fifty instances in a line of any length,
/// the partner at 10/s, 5/s, then 10/s. A line priced at 5/s cannot go
/// earlier, so after the rise the fleet keeps the old pace for a queue's
/// length (fifty at 5/s: 10 s) — the learned rate is back up, the
/// partner's 200s are not: under 80 % of its capacity in the last phase
/// (64 % when measured), against 110 % with the horizon.
#[test]
fn an_unbounded_line_follows_a_rise_a_queues_length_late() {
    let run = simulate_unbounded_line(Some(default_learning()), &changing_partner(), 30);
    run.print("unbounded line, learning, partner 10/s, 5/s, 10/s");
    let goodput = run.goodput(25, 30, 10);
    println!("unbounded line, 25-30 s: goodput {:.1} %", goodput * 100.0);
    assert!(goodput < 0.80, "goodput {goodput}");
    assert!(run.reached(20, 8.0).is_some_and(|s| s < 30));
}

/// The partner at 10/s, 5/s from 10 s, 10/s again from 20 s (burst 20,
/// bare 429s).
fn changing_partner() -> Partner {
    Partner {
        phases: vec![(0, 10), (10, 5), (20, 10)],
        down: None,
        coin: false,
        announce: None,
    }
}

/// A partner that refuses at random, half of what it would admit, for
/// 60 s, against the fleet in line: whatever its answers, the learned rate
/// stays within [floor, ceiling], never NaN, and the fleet keeps sending
/// (the floor's trickle at least) — nothing divides by zero, nothing
/// stops the calls.
#[test]
fn a_partner_refusing_at_random_keeps_the_rate_within_bounds() {
    let partner = Partner {
        phases: vec![(0, 10)],
        down: None,
        coin: true,
        announce: None,
    };
    let learning = default_learning();
    for run in [
        simulate(Some(learning), &partner, 60),
        simulate_queued(Some(learning), &partner, 60),
    ] {
        println!("learned fraction within [{:.4}, {:.4}]", run.low, run.high);
        assert!(run.low >= learning.floor() && run.high <= 1.0);
        assert!(run.seconds.iter().all(|s| s.rate.is_finite()));
        let (ok, refused) = run.counts(30, 60);
        println!("30-60 s: 200 x {ok}, refused x {refused}");
        // At least the floor's trickle (1.5/s, half of it answered 200)
        // over the 30 s: the fleet never stops calling.
        assert!(ok >= 15 && refused > 0, "the fleet kept calling: {ok}");
    }
}

/// Announced quota: a partner with a quota of 100 per 10 s window that
/// tells `RateLimit-Remaining` / `RateLimit-Reset` on every answer (and,
/// in the other variants, the IETF `RateLimit` field, or
/// `X-RateLimit-*` with a Unix-time reset): the fleet configured at 30/s
/// draws no 429 after its first window, sending one request at a time per
/// instance (served at least 80 of each later window's 100) or in line as
/// the adapters wait (each instance's slot reserved ahead: a queue fifty
/// deep — served at least 60 % of the later windows' quota in all: 287,
/// 287 and 252 of 300 for the three styles on 2026-12-05). Without learning (only
/// the pause a count of 0 asks) the same fleet in line spends each
/// window's quota at once and draws 429s from what it had in line, window
/// after window: the documented contrast.
#[test]
fn a_fleet_follows_the_quota_a_partner_announces() {
    for style in [Style::Fields, Style::Ietf, Style::XUnix] {
        let partner = Partner {
            phases: vec![(0, 10)],
            down: None,
            coin: false,
            announce: Some(style),
        };
        for (queued, run) in [
            (false, simulate(Some(default_learning()), &partner, 40)),
            (
                true,
                simulate_queued(Some(default_learning()), &partner, 40),
            ),
        ] {
            let label = format!("{style:?}{}", if queued { ", queued" } else { "" });
            run.print(&format!("learning, announced 100 per 10 s ({label})"));
            let (first_ok, first_refused) = run.counts(0, 10);
            let (ok, refused) = run.counts(10, 40);
            let windows: Vec<u64> = (1..4).map(|w| run.counts(w * 10, w * 10 + 10).0).collect();
            println!(
                "{label}: first window {first_ok} × 200, {first_refused} × 429; \
                 then {ok} × 200 ({windows:?} per window), {refused} × 429"
            );
            assert_eq!(refused, 0, "{label}: 429s after the first window");
            assert!(windows.iter().all(|&w| w >= 80), "{label}: {windows:?}");
        }
    }
    let partner = Partner {
        phases: vec![(0, 10)],
        down: None,
        coin: false,
        announce: Some(Style::Fields),
    };
    let fixed = simulate_queued(None, &partner, 40);
    fixed.print("no learning, announced 100 per 10 s");
    let (_, refused) = fixed.counts(10, 40);
    println!("no learning: {refused} × 429 after the first window");
    assert!(refused > 0, "without learning the bar must fail");
}
