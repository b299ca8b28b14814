//! The built-in shapes: `steady:RATE`, `burst:N@T`, `boundary`,
//! `poisson:RATE`, `noisy-neighbour` and `incident`.

use crate::{CliError, SECOND, Shown};

use super::{Event, Keys, Traffic, bounded, in_time_order, rate_per_second};

/// Requests at `rate` per second, evenly spread over `[start, start +
/// span)`, for `key`. The k-th is at `start + k · gap` (not a running sum,
/// whose rounding let a 1801st request into 12 s at 150/s).
pub(super) fn steady(events: &mut Vec<Event>, key: u32, start: u64, span: u64, rate: f64) {
    let gap = (SECOND as f64 / rate).max(1.0);
    let end = (start + span) as f64;
    for k in 0u64.. {
        let t = start as f64 + k as f64 * gap;
        if t >= end {
            break;
        }
        events.push(Event {
            t: t as u64,
            key,
            n: 1,
        });
    }
}

/// A small deterministic generator (splitmix64): the same seed replays the
/// same traffic on every machine.
pub struct SplitMix(u64);

impl SplitMix {
    /// The generator seeded with `seed`.
    pub fn new(seed: u64) -> SplitMix {
        SplitMix(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
}

/// What the built-in shapes are given besides their own arguments.
pub struct ShapeArgs {
    /// The span to fill, in ns (`--duration`).
    pub duration: u64,
    /// The seed of the random shapes (`--seed`).
    pub seed: u64,
    /// The window limit, for `boundary`.
    pub limit: u64,
    /// The window length in ns, for `boundary`.
    pub window: u64,
    /// The per-key rate of the limit (requests per second), for
    /// `noisy-neighbour`.
    pub rate: f64,
}

/// A built-in shape: `steady:RATE`, `burst:N@T`, `boundary`,
/// `poisson:RATE`, `noisy-neighbour` or `incident`.
pub fn shape(spec: &str, args: &ShapeArgs) -> Result<Traffic, CliError> {
    let mut keys = Keys::default();
    let mut events = Vec::new();
    let (name, arg) = spec.split_once(':').unwrap_or((spec, ""));
    let needs_arg = |what: &str| {
        if arg.is_empty() {
            Err(CliError::new(format!(
                "--traffic {name} needs an argument: {what}"
            )))
        } else {
            Ok(())
        }
    };
    let mut duration = args.duration;
    match name {
        "steady" => {
            needs_arg("steady:RATE, e.g. steady:20/s")?;
            let rate = rate_per_second(arg, "--traffic steady")?;
            bounded("--traffic steady", rate * args.duration as f64 / 1e9)?;
            steady(&mut events, keys.id("-")?, 0, args.duration, rate);
        }
        "burst" => {
            needs_arg("burst:N@T, e.g. burst:100@5s")?;
            let (n, at) = crate::split_pair(arg, '@', "--traffic burst", "N@T, e.g. burst:100@5s")?;
            let n: u64 = n.trim().parse().map_err(|_| {
                CliError::new(format!(
                    "--traffic burst: {} is not a whole number of requests",
                    Shown(n)
                ))
            })?;
            bounded("--traffic burst", n as f64)?;
            let at = crate::parse_duration(at, "--traffic burst time")?;
            let key = keys.id("-")?;
            events.extend((0..n).map(|_| Event { t: at, key, n: 1 }));
            duration = duration.max(at + SECOND);
        }
        "boundary" => {
            // The limit just before a window boundary and again just after.
            bounded("--traffic boundary", 2.0 * args.limit as f64)?;
            let key = keys.id("-")?;
            let tenth = SECOND / 10;
            let before = args.window.saturating_sub(tenth);
            for at in [before, args.window + tenth] {
                events.extend((0..args.limit).map(|_| Event { t: at, key, n: 1 }));
            }
            duration = 2 * args.window;
        }
        "poisson" => {
            needs_arg("poisson:RATE, e.g. poisson:50/s")?;
            let rate = rate_per_second(arg, "--traffic poisson")?;
            bounded("--traffic poisson", rate * args.duration as f64 / 1e9)?;
            let key = keys.id("-")?;
            let mut rng = SplitMix::new(args.seed);
            let mut t = 0.0;
            loop {
                t += -rng.unit().ln() / rate * SECOND as f64;
                if t >= args.duration as f64 {
                    break;
                }
                events.push(Event {
                    t: t as u64,
                    key,
                    n: 1,
                });
            }
        }
        "noisy-neighbour" | "noisy-neighbor" => {
            // One key sends five times the limit; nine others half of it.
            bounded(
                "--traffic noisy-neighbour",
                9.5 * args.rate * args.duration as f64 / 1e9,
            )?;
            let noisy = keys.id("noisy")?;
            steady(&mut events, noisy, 0, args.duration, 5.0 * args.rate);
            for i in 1..=9 {
                let k = keys.id(&format!("quiet-{i}"))?;
                // Offset each quiet key a little so they do not all arrive at once.
                steady(
                    &mut events,
                    k,
                    i * 1_000_000,
                    args.duration,
                    0.5 * args.rate,
                );
            }
        }
        "incident" => {
            // 50 instances, each behind its own local limiter, share 1000
            // requests per second round-robin.
            bounded("--traffic incident", 1000.0 * args.duration as f64 / 1e9)?;
            let pods: Vec<u32> = (0..50)
                .map(|i| keys.id(&format!("pod-{i:02}")))
                .collect::<Result<_, _>>()?;
            let gap = SECOND / 1000;
            let mut t = 0;
            let mut i = 0;
            while t < args.duration {
                events.push(Event {
                    t,
                    key: pods[i % pods.len()],
                    n: 1,
                });
                t += gap;
                i += 1;
            }
        }
        other => {
            return Err(CliError::new(format!(
                "unknown traffic {}: use steady:RATE, burst:N@T, boundary, poisson:RATE, \
                 noisy-neighbour, incident, or a file path",
                Shown(other)
            )));
        }
    }
    in_time_order(&mut events);
    let last = events.last().map_or(0, |e| e.t);
    Ok(Traffic {
        events,
        keys: keys.into_names(),
        duration: duration.max(last + 1),
        name: spec.to_string(),
    })
}
