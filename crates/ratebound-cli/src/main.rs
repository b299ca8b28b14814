//! `ratebound`: a demo of the source scenarios, a simulator that replays
//! traffic against every algorithm (with charts) or sends it to a server
//! model behind no cap, a fixed concurrency cap and the adaptive limit, a
//! Redis inspector and a quick benchmark — all on the core that enforces
//! the limits.
//!
//! Bad input is one line on stderr and exit code 2, never a panic.

mod bench;
mod demo;
mod incident;
mod inspect;
mod learning;
mod logging;
mod plot;
mod serve;
mod server;
mod simulate;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use ratebound::Quota;
use ratebound_cli::{CliError, MAX_SPAN, SECOND, Shown, parse_duration, split_pair, traffic};

use simulate::{Algo, Limits};

/// Rate limiting you can see: the source scenarios, your traffic replayed
/// against every algorithm, a global limit's state in Redis.
#[derive(Parser, Debug)]
#[command(name = "ratebound", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The source scenarios: 1-6 on a manual clock, as tables, then 7, the
    /// incident, live (fifty workers calling a partner on 127.0.0.1).
    Demo(demo::DemoArgs),
    /// Replays traffic against one or all algorithms on a manual clock — or,
    /// with --service-time, sends it to a server model behind no cap, a
    /// fixed concurrency cap and the adaptive limit, side by side.
    #[command(after_help = "Examples:\n  \
        ratebound simulate --traffic boundary --limit 100 --window 60s\n  \
        ratebound simulate --traffic access.csv --rate \"10/s burst 20\" --plot out.svg\n  \
        # 4 workers of 20 ms (200/s) under 500/s: no cap, a cap of 4, the adaptive limit\n  \
        ratebound simulate --traffic steady:500/s --duration 4s --service-time 20ms \\\n    \
        --workers 4 --concurrency none,fixed:4,auto --warmup 1s --chart server.svg")]
    Simulate(Box<SimulateArgs>),
    /// Shows a global limit's state in Redis (tokens, TAT, TTL).
    Inspect(InspectArgs),
    /// A quick throughput check of the core on this machine.
    Bench(BenchArgs),
    /// A rate limit service for Envoy-based gateways: RLS v3 over gRPC and
    /// the reference server's HTTP endpoints, from its YAML.
    Serve(Box<serve::ServeArgs>),
}

#[derive(Args, Debug)]
struct SimulateArgs {
    /// token-bucket, fixed-window, sliding-window, sliding-log, leaky-bucket
    /// or all (the default).
    #[arg(long)]
    algorithm: Option<String>,
    /// The buckets' quota, as the core parses it: "10/s burst 20".
    #[arg(long, allow_hyphen_values = true)]
    rate: Option<String>,
    /// The windows' limit per --window (default: the quota's burst).
    #[arg(long, allow_hyphen_values = true)]
    limit: Option<String>,
    /// The windows' length: 60s, 1min, 500ms (default: burst / rate).
    #[arg(long, allow_hyphen_values = true)]
    window: Option<String>,
    /// The leaky bucket's longest queueing delay (default: burst / rate).
    #[arg(long, allow_hyphen_values = true)]
    max_delay: Option<String>,
    /// steady:RATE, burst:N@T, boundary, poisson:RATE, noisy-neighbour,
    /// incident, or a file of timestamp[,key][,n] rows (CSV or JSON lines).
    #[arg(long)]
    traffic: String,
    /// How long the built-in shapes run.
    #[arg(long, default_value = "60s", allow_hyphen_values = true)]
    duration: String,
    /// The seed of poisson traffic and of --jitter.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// One limiter for all keys (a global limit) instead of one per key.
    #[arg(long)]
    global: bool,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Draw admitted/refused over time and the level, one panel per
    /// algorithm, into an .svg or .png file (with --service-time: latency
    /// p99 and the limit over time, one panel per --concurrency variant).
    #[arg(long, visible_alias = "chart")]
    plot: Option<PathBuf>,
    /// The server model: the service time of one request (20ms). Requests
    /// go to --workers workers through a FIFO queue, behind each
    /// --concurrency variant, instead of through the rate limits.
    #[arg(long, allow_hyphen_values = true, help_heading = "Server model")]
    service_time: Option<String>,
    /// Requests the server serves at a time (default 1); the others queue.
    #[arg(long, allow_hyphen_values = true, help_heading = "Server model")]
    workers: Option<String>,
    /// What guards the server, compared side by side: none, fixed:N, auto
    /// (the adaptive limit; tuned as auto:max=200,tolerance=2). Default:
    /// none,auto.
    #[arg(long, allow_hyphen_values = true, help_heading = "Server model")]
    concurrency: Option<String>,
    /// From a time on, services take FACTOR times as long: 4s:2x (several:
    /// 4s:2x,8s:1x).
    #[arg(long, allow_hyphen_values = true, help_heading = "Server model")]
    slowdown: Option<String>,
    /// Service times vary uniformly by this fraction, seeded by --seed (0.2:
    /// ±20 %).
    #[arg(long, allow_hyphen_values = true, help_heading = "Server model")]
    jitter: Option<String>,
    /// Leave requests arriving before this out of the latencies and
    /// served/s (the adaptive limit learns meanwhile).
    #[arg(long, allow_hyphen_values = true, help_heading = "Server model")]
    warmup: Option<String>,
    /// Mark shares of the requests critical (never shed) or background
    /// (shed first), drawn with --seed; the rest is normal:
    /// background=50%,critical=5%.
    #[arg(long, allow_hyphen_values = true, help_heading = "Server model")]
    priorities: Option<String>,
    /// The share of the limit background requests may fill (default 0.5).
    #[arg(long, allow_hyphen_values = true, help_heading = "Server model")]
    background_fraction: Option<String>,
}

#[derive(Args, Debug)]
struct InspectArgs {
    /// The server, e.g. redis://127.0.0.1:6379.
    #[arg(long)]
    redis: String,
    /// The full Redis key: prefix, algorithm tag and key (e.g. rb:tb:user-1).
    key: String,
    /// The limit's quota, to turn a token bucket's TAT into tokens.
    #[arg(long, allow_hyphen_values = true)]
    rate: Option<String>,
}

#[derive(Args, Debug)]
struct BenchArgs {
    /// Seconds per measurement.
    #[arg(long, default_value = "0.5", allow_hyphen_values = true)]
    seconds: String,
}

/// A whole number ≥ 1.
fn parse_count(text: &str, what: &str) -> Result<u64, CliError> {
    match text.trim().parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(CliError::new(format!(
            "{what}: {} must be a whole number of at least 1",
            Shown(text)
        ))),
    }
}

/// A span for people: 500ms, 1.5s, 2min.
pub fn show_duration(nanos: u64) -> String {
    if nanos == 0 {
        return "0s".to_string();
    }
    let trim = |v: f64| {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    };
    if nanos < 1_000_000 {
        format!("{}us", trim(nanos as f64 / 1e3))
    } else if nanos < SECOND {
        format!("{}ms", trim(nanos as f64 / 1e6))
    } else if nanos < 600 * SECOND {
        format!("{}s", trim(nanos as f64 / 1e9))
    } else {
        format!("{}min", trim(nanos as f64 / 60e9))
    }
}

/// The limits every algorithm gets, each derived from the other when only
/// one is given (the same long-run rate and burst).
fn limits(args: &SimulateArgs) -> Result<Limits, CliError> {
    let default_rate = if args.traffic == "boundary" {
        "100/min burst 100"
    } else {
        "10/s burst 20"
    };
    let window = args
        .window
        .as_deref()
        .map(|w| parse_duration(w, "--window"))
        .transpose()?;
    let limit = args
        .limit
        .as_deref()
        .map(|l| parse_count(l, "--limit"))
        .transpose()?;
    let quota = match (&args.rate, limit, window) {
        (Some(rate), _, _) => {
            Quota::parse(rate).map_err(|e| CliError::new(format!("--rate: {e}")))?
        }
        (None, Some(l), Some(w)) => Quota::with_period(Duration::from_nanos((w / l).max(1)))
            .and_then(|q| q.with_burst(l))
            .map_err(|e| CliError::new(format!("--limit/--window: {e}")))?,
        (None, _, _) => Quota::parse(default_rate)?,
    };
    let tolerance = quota.tolerance_nanos();
    let limit = limit.unwrap_or(quota.burst());
    let window = window.unwrap_or(tolerance);
    let max_delay = match &args.max_delay {
        Some(d) => parse_duration(d, "--max-delay")?,
        None => tolerance,
    };
    Ok(Limits {
        quota,
        limit,
        window: Duration::from_nanos(window),
        max_delay: Duration::from_nanos(max_delay),
    })
}

/// The traffic `--traffic` names: a built-in shape or a file.
fn read_traffic(args: &SimulateArgs, limits: &Limits) -> Result<traffic::Traffic, CliError> {
    let duration = parse_duration(&args.duration, "--duration")?;
    let builtin = [
        "steady",
        "burst",
        "boundary",
        "poisson",
        "noisy-neighbour",
        "noisy-neighbor",
        "incident",
    ];
    let shape_name = args.traffic.split(':').next().unwrap_or("");
    let path = PathBuf::from(&args.traffic);
    if builtin.contains(&shape_name) || !path.exists() && !args.traffic.contains(['/', '.']) {
        traffic::shape(
            &args.traffic,
            &traffic::ShapeArgs {
                duration,
                seed: args.seed,
                limit: limits.limit,
                window: simulate::nanos(limits.window),
                rate: SECOND as f64 / limits.quota.emission_interval_nanos() as f64,
            },
        )
    } else {
        traffic::file(&path)
    }
}

/// The server model's flags, checked; `None` without `--service-time`.
fn server_model(args: &SimulateArgs) -> Result<Option<server::Server>, CliError> {
    let Some(service) = &args.service_time else {
        let given = [
            ("--workers", args.workers.is_some()),
            ("--slowdown", args.slowdown.is_some()),
            ("--jitter", args.jitter.is_some()),
            ("--warmup", args.warmup.is_some()),
            ("--priorities", args.priorities.is_some()),
            ("--background-fraction", args.background_fraction.is_some()),
            ("--concurrency", args.concurrency.is_some()),
        ];
        if let Some((flag, _)) = given.iter().find(|g| g.1) {
            return Err(CliError::new(format!(
                "{flag} is part of the server model: give --service-time too (e.g. --service-time 20ms)"
            )));
        }
        return Ok(None);
    };
    let rate_flags = [
        ("--algorithm", args.algorithm.is_some()),
        ("--rate", args.rate.is_some()),
        ("--limit", args.limit.is_some()),
        ("--window", args.window.is_some()),
        ("--max-delay", args.max_delay.is_some()),
        ("--global", args.global),
    ];
    if let Some((flag, _)) = rate_flags.iter().find(|g| g.1) {
        return Err(CliError::new(format!(
            "{flag} is for the rate limits; with --service-time the server model compares \
             --concurrency variants instead"
        )));
    }
    let service = parse_duration(service, "--service-time")?;
    let workers = match &args.workers {
        Some(w) => usize::try_from(parse_count(w, "--workers")?)
            .map_err(|_| CliError::new(format!("--workers: {} is too many", Shown(w))))?,
        None => 1,
    };
    Ok(Some(server::Server {
        workers,
        service,
        slowdown: args
            .slowdown
            .as_deref()
            .map(server::parse_slowdown)
            .transpose()?
            .unwrap_or_default(),
        jitter: args
            .jitter
            .as_deref()
            .map(server::parse_jitter)
            .transpose()?
            .unwrap_or(0.0),
        seed: args.seed,
        warmup: args
            .warmup
            .as_deref()
            .map(|w| parse_duration(w, "--warmup"))
            .transpose()?
            .unwrap_or(0),
        mix: args
            .priorities
            .as_deref()
            .map(server::parse_priorities)
            .transpose()?,
        background_fraction: args
            .background_fraction
            .as_deref()
            .map(server::parse_background_fraction)
            .transpose()?,
    }))
}

/// `simulate --service-time`: the traffic against the server model, once
/// per `--concurrency` variant.
fn simulate_server(args: &SimulateArgs, model: &server::Server) -> Result<String, CliError> {
    let variants = server::parse_variants(
        args.concurrency
            .as_deref()
            .unwrap_or(server::DEFAULT_VARIANTS),
    )?;
    let traffic = read_traffic(args, &limits(args)?)?;
    if model.warmup >= traffic.duration {
        return Err(CliError::new(format!(
            "--warmup {}: must be shorter than the traffic's {}",
            Shown(args.warmup.as_deref().unwrap_or("")),
            show_duration(traffic.duration)
        )));
    }
    let runs = variants
        .iter()
        .map(|v| server::run(model, v, &traffic))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(path) = &args.plot {
        plot::server_svg(
            path,
            &format!(
                "{}: {} requests to {} workers of {}",
                traffic.name,
                traffic.events.len(),
                model.workers,
                show_duration(model.service)
            ),
            model,
            &runs,
        )?;
    }
    if args.json {
        let v = server::json(&traffic, model, &runs);
        return serde_json::to_string_pretty(&v).map_err(|e| CliError::new(e.to_string()));
    }
    let mut out = server::table(&traffic, model, &runs);
    if let Some(path) = &args.plot {
        out.push_str(&format!("\nplot: {}\n", path.display()));
    }
    Ok(out)
}

fn simulate(args: &SimulateArgs) -> Result<String, CliError> {
    if let Some(model) = server_model(args)? {
        return simulate_server(args, &model);
    }
    let algos = Algo::parse(args.algorithm.as_deref().unwrap_or("all"))?;
    let limits = limits(args)?;
    let traffic = read_traffic(args, &limits)?;
    let shape_name = args.traffic.split(':').next().unwrap_or("");
    let incident = shape_name == "incident";
    let mut outcomes = Vec::new();
    for &algo in &algos {
        outcomes.push(simulate::run(
            algo,
            &limits,
            &traffic,
            args.global && !incident,
        )?);
        if incident {
            outcomes.push(simulate::run(algo, &limits, &traffic, true)?);
        }
    }
    if let Some(path) = &args.plot {
        plot::svg(
            path,
            &format!(
                "{}: {} requests, quota {}",
                traffic.name,
                traffic.events.len(),
                limits.quota
            ),
            &outcomes,
        )?;
    }
    if args.json {
        let v = simulate::json(&traffic, &limits, &outcomes);
        return serde_json::to_string_pretty(&v).map_err(|e| CliError::new(e.to_string()));
    }
    let mut out = format!(
        "traffic {}: {} requests over {} from {} keys\nlimits: quota {} (token and leaky bucket, max delay {}); {} per {} (windows)\n\n",
        traffic.name,
        traffic.events.len(),
        show_duration(traffic.duration),
        traffic.keys.len(),
        limits.quota,
        show_duration(simulate::nanos(limits.max_delay)),
        limits.limit,
        show_duration(simulate::nanos(limits.window)),
    );
    out.push_str(&simulate::table(&outcomes));
    if incident {
        out.push_str(&incident_note(&outcomes, &limits, traffic.duration));
    }
    if let Some(path) = &args.plot {
        out.push_str(&format!("\nplot: {}\n", path.display()));
    }
    Ok(out)
}

/// The incident in one paragraph: what 50 local limits let through against
/// the partner's one limit.
fn incident_note(outcomes: &[Outcome], limits: &Limits, duration: u64) -> String {
    let secs = duration as f64 / 1e9;
    let partner =
        limits.quota.burst() as f64 + secs * 1e9 / limits.quota.emission_interval_nanos() as f64;
    let mut out = format!(
        "\nThe partner allows {} over the run ({} + {}/s x {:.0} s). 50 instances, each with its own local limit:\n",
        partner.floor(),
        limits.quota.burst(),
        1e9 / limits.quota.emission_interval_nanos() as f64,
        secs
    );
    for pair in outcomes.chunks(2) {
        if let [local, global] = pair {
            out.push_str(&format!(
                "  {:<16} local limits admit {} (x{:.1} the partner's limit); one global limit admits {}\n",
                local.algo.name(),
                local.admitted,
                local.admitted as f64 / partner,
                global.admitted
            ));
        }
    }
    out
}

use simulate::Outcome;

fn run(cli: Cli) -> Result<String, CliError> {
    match cli.command {
        Command::Demo(args) => demo::run(&args),
        Command::Simulate(args) => simulate(&args),
        Command::Inspect(args) => inspect::run(&args.redis, &args.key, args.rate.as_deref()),
        Command::Bench(args) => {
            let secs = parse_duration(&args.seconds, "--seconds")?;
            bench::run(Duration::from_nanos(secs))
        }
        Command::Serve(args) => serve::run(&args),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                };
            }
            // One line: clap's message up to its first blank line (its
            // tips and usage block follow), joined.
            let text = e.render().to_string();
            let message: Vec<&str> = text
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            eprintln!(
                "ratebound: {} (see ratebound --help)",
                message.join(" ").trim_start_matches("error: ")
            );
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(out) => {
            print!("{out}");
            if !out.ends_with('\n') {
                println!();
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ratebound: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Shown;

    #[test]
    fn shown_text_is_quoted_and_cut_to_about_80_characters() {
        assert_eq!(Shown("many").to_string(), "\"many\"");
        assert_eq!(Shown("a\0b\"").to_string(), "\"a\\0b\\\"\"");
        let exactly = "x".repeat(80);
        assert_eq!(Shown(&exactly).to_string(), format!("{exactly:?}"));
        let long = "x".repeat(10_000_000);
        assert_eq!(
            Shown(&long).to_string(),
            format!("{:?}... (10000000 bytes)", &long[..80])
        );
        // Escapes count as what they show, and a character is never split.
        let zeros = "\0".repeat(100);
        assert_eq!(
            Shown(&zeros).to_string(),
            format!("{:?}... (100 bytes)", &zeros[..40])
        );
        let accents = "é".repeat(100);
        assert_eq!(
            Shown(&accents).to_string(),
            format!("{:?}... (200 bytes)", &accents[..160])
        );
    }
}
