//! The simulated fleet of `learn_fleet.rs`: a discrete-event loop in
//! milliseconds (no threads, no sleeps, no wall clock), its partners and
//! what a run counts.

use std::time::Duration;

use ratebound::outbound::{LINE_HORIZON, Learned, Learning, read_answer};
use ratebound::{Error, ManualClock, Quota, TokenBucket};

pub const INSTANCES: usize = 50;
pub const MS: u64 = 1_000_000;

/// The partner's limit over time: (from second, rate per second), burst 20;
/// and the span (in s) during which it is down (a 503 to everything). Or,
/// when it `announce`s, a quota of [`WINDOW_QUOTA`] per window of
/// [`WINDOW_S`] seconds (from 0 s on), told on every answer.
pub struct Partner {
    /// Refuses half of what it admits, at random (a fixed sequence): a
    /// hostile or broken partner whose refusals say nothing of a rate.
    pub coin: bool,
    pub phases: Vec<(u64, u64)>,
    pub down: Option<(u64, u64)>,
    pub announce: Option<Style>,
}

/// How an announcing partner tells its quota on every answer.
#[derive(Clone, Copy, Debug)]
pub enum Style {
    /// `RateLimit-Remaining` / `RateLimit-Reset` (seconds, rounded up).
    Fields,
    /// The IETF field: `RateLimit: "default";r=R;t=T`.
    Ietf,
    /// `X-RateLimit-Remaining` / `X-RateLimit-Reset` as a Unix time.
    XUnix,
}

/// The announcing partner's quota: 100 per 10 s window.
pub const WINDOW_QUOTA: u64 = 100;
pub const WINDOW_S: u64 = 10;

/// The Unix time (s) of the simulation's 0 ms.
pub const EPOCH_S: u64 = 1_800_000_000;

impl Style {
    /// The answer's header fields for `remaining` requests left, the
    /// window ending at `end_ms`, told at `now_ms`.
    pub fn headers(self, remaining: u64, end_ms: u64, now_ms: u64) -> Vec<(String, String)> {
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
pub struct Second {
    pub ok: u64,
    pub refused: u64,
    pub rate: f64,
}

pub struct Run {
    pub seconds: Vec<Second>,
    /// The learned fraction's lowest and highest value at any ms.
    pub low: f64,
    pub high: f64,
}

impl Run {
    /// 200s, refusals over seconds `from..to`.
    pub fn counts(&self, from: usize, to: usize) -> (u64, u64) {
        let s = &self.seconds[from..to];
        (
            s.iter().map(|x| x.ok).sum(),
            s.iter().map(|x| x.refused).sum(),
        )
    }

    /// The share of refusals among what reached the partner in `from..to`.
    pub fn refused_share(&self, from: usize, to: usize) -> f64 {
        let (ok, refused) = self.counts(from, to);
        refused as f64 / (ok + refused).max(1) as f64
    }

    /// The 200s in `from..to` over the partner's capacity `rate × span`.
    pub fn goodput(&self, from: usize, to: usize, rate: u64) -> f64 {
        self.counts(from, to).0 as f64 / (rate * (to - from) as u64) as f64
    }

    /// The first second from `from` at whose end the learned rate is at
    /// least `rate`.
    pub fn reached(&self, from: usize, rate: f64) -> Option<usize> {
        (from..self.seconds.len()).find(|&s| self.seconds[s].rate >= rate)
    }

    /// The changing partner's phases (10/s, 5/s, 10/s from 0, 10 and 20 s):
    /// in the second half of each, at most 10 % refused and at least
    /// `bars[i]` of that phase's capacity served.
    pub fn check_phases(&self, label: &str, bars: [f64; 3]) {
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

    pub fn print(&self, title: &str) {
        println!("{title}: second, 200s, 429s, learned rate");
        for (i, s) in self.seconds.iter().enumerate() {
            println!("  {i:>2}s {:>3} {:>3} {:>5.2}", s.ok, s.refused, s.rate);
        }
    }
}

/// A deterministic pseudo-random sequence (xorshift64).
pub struct Rng(u64);

impl Rng {
    pub fn round_trip_ms(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        20 + self.0 % 61
    }
}

pub enum Event {
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
pub fn simulate(learning: Option<Learning>, partner: &Partner, seconds: u64) -> Run {
    simulate_seeded(learning, partner, seconds, 0x9E37_79B9_7F4A_7C15, None)
}

/// [`simulate`] with the instances in line as the adapters are: each
/// idle instance reserves its slot in the shared bucket at once (as
/// `wait_n` does) and sends when the slot comes, taken at the rate in
/// force when it reserved — within the call machine's [`LINE_HORIZON`]:
/// a slot further away is not taken, the instance holds and asks again
/// (`Call::beyond`).
pub fn simulate_queued(learning: Option<Learning>, partner: &Partner, seconds: u64) -> Run {
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
pub fn simulate_unbounded_line(learning: Option<Learning>, partner: &Partner, seconds: u64) -> Run {
    simulate_seeded(
        learning,
        partner,
        seconds,
        0x9E37_79B9_7F4A_7C15,
        Some(Duration::MAX),
    )
}

pub fn simulate_seeded(
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
pub fn requeue(reserved: u64, seen: u64) -> bool {
    Learned::from_bits(seen).cut_since(Learned::from_bits(reserved))
}

pub fn bare_429s() -> Partner {
    Partner {
        phases: vec![(0, 10)],
        down: None,
        coin: false,
        announce: None,
    }
}

pub fn default_learning() -> Learning {
    Learning::new(Quota::parse("30/s burst 30").unwrap())
}

/// The partner at 10/s, 5/s from 10 s, 10/s again from 20 s (burst 20,
/// bare 429s).
pub fn changing_partner() -> Partner {
    Partner {
        phases: vec![(0, 10), (10, 5), (20, 10)],
        down: None,
        coin: false,
        announce: None,
    }
}
