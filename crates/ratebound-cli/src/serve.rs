//! `ratebound serve`: the rate limit service for Envoy-based gateways
//! (RLS v3 over gRPC, the reference server's HTTP endpoints), until
//! SIGTERM or SIGINT, then a graceful shutdown.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use log::Level;
use ratebound_cli::{CliError, Shown, parse_duration};
use ratebound_redis::OnError;
use ratebound_redis::connect::Target;
use ratebound_server::backend::{Backend, RedisOptions};
use ratebound_server::engine::{Engine, Options};
use ratebound_server::model::Config;
use ratebound_server::reload::Polled;
use ratebound_server::serve::{ReloadReport, ServeOptions, bind};

use crate::logging;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The reference server's YAML: a file, or a directory of them (one
    /// domain per file).
    #[arg(long, required_unless_present = "check")]
    config: Option<PathBuf>,
    /// The gRPC address (RLS v3, gRPC health).
    #[arg(long, default_value = "0.0.0.0:8081")]
    grpc: String,
    /// The HTTP address (POST /json, GET /healthcheck, GET /metrics).
    #[arg(long, default_value = "0.0.0.0:8080")]
    http: String,
    /// How long to report unhealthy before closing the listeners on
    /// SIGTERM/SIGINT (e.g. 5s), for a load balancer to notice (default:
    /// none).
    #[arg(long, allow_hyphen_values = true)]
    drain: Option<String>,
    /// How often to look at --config for a change, put in force at once
    /// (a file that does not read is reported and the rules in force
    /// stay).
    #[arg(long, default_value = "1s", allow_hyphen_values = true)]
    reload_every: String,
    /// Check the configuration (this path, or --config's), print what it
    /// holds and exit (0: good, 2: the file, line, column and bad value).
    #[arg(long, value_name = "CONFIG")]
    #[allow(clippy::option_option)]
    check: Option<Option<PathBuf>>,
    /// Keep the limits in Redis, shared by every server of the fleet: one
    /// server's URL (redis://, rediss://, unix://) or a cluster's
    /// (redis+cluster://, or --redis given once per seed node).
    #[arg(long, value_name = "URL", conflicts_with = "shm")]
    redis: Vec<String>,
    /// What answers while Redis is down, slow or erroring: open (admit)
    /// or closed (refuse); every such answer is counted in /metrics and
    /// logged.
    #[arg(long, default_value = "open", value_name = "open|closed")]
    redis_on_error: String,
    /// Each Redis call's deadline, past which the fail policy answers
    /// (Envoy's filter gives up after 20ms by default).
    #[arg(long, default_value = "15ms", allow_hyphen_values = true)]
    redis_timeout: String,
    /// Prepended to every Redis key.
    #[arg(long, default_value = "rb:")]
    redis_prefix: String,
    /// Keep the limits in shared memory, shared by the server processes of
    /// this host: one file per distinct limit in this directory.
    #[arg(long, value_name = "DIR")]
    shm: Option<PathBuf>,
    /// The most keys each distinct limit tracks (in this process, the
    /// least recently used forgotten beyond; in shared memory, each file's
    /// room).
    #[arg(long, default_value = "1000000")]
    max_keys: String,
    /// The log's lines on stderr: text (for a person) or json (one object
    /// per line: ts, level, target, msg and the event's fields).
    #[arg(long, default_value = "text", value_name = "text|json")]
    log_format: String,
    /// Runtime worker threads (default: one per core, or
    /// TOKIO_WORKER_THREADS). 1 does the most decisions a second while the
    /// gateway keeps the server busy; more answer a burst sooner when it
    /// does not (see ratebound-server's README, "Benchmark").
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    workers: Option<String>,
    /// Answer without the RateLimit, RateLimit-Policy and Retry-After
    /// fields for the gateway to add (the reference server's
    /// LIMIT_RESPONSE_HEADERS_ENABLED=false).
    #[arg(long)]
    no_response_headers: bool,
}

/// The backend the flags ask for.
fn backend(args: &ServeArgs) -> Result<Backend, CliError> {
    if let Some(dir) = &args.shm {
        std::fs::create_dir_all(dir)
            .map_err(|e| CliError::new(format!("--shm {}: {e}", dir.display())))?;
        return Ok(Backend::Shared { dir: dir.clone() });
    }
    if args.redis.is_empty() {
        return Ok(Backend::Local);
    }
    let target = Target::parse(&args.redis, args.redis.len() > 1, None)
        .map_err(|e| CliError::new(format!("--redis: {e}")))?;
    let mut options = RedisOptions::new(target);
    options.on_error = match args.redis_on_error.as_str() {
        "open" => OnError::Open,
        "closed" => OnError::Closed,
        other => {
            return Err(CliError::new(format!(
                "--redis-on-error: {} is not open or closed",
                Shown(other)
            )));
        }
    };
    // parse_duration refuses 0.
    options.timeout = Duration::from_nanos(parse_duration(&args.redis_timeout, "--redis-timeout")?);
    options.prefix = args.redis_prefix.clone();
    Ok(Backend::Redis(options))
}

/// The engine's options the flags ask for.
fn engine_options(args: &ServeArgs) -> Result<Options, CliError> {
    let max_keys = args
        .max_keys
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            CliError::new(format!(
                "--max-keys: {} is not a whole number above 0",
                Shown(&args.max_keys)
            ))
        })?;
    Ok(Options {
        max_keys,
        backend: backend(args)?,
        response_headers: !args.no_response_headers,
        ..Options::default()
    })
}

/// The most runtime workers `--workers` takes.
const MAX_WORKERS: usize = 1024;

/// `--workers N`: a whole number from 1 to [`MAX_WORKERS`].
fn workers(text: &str) -> Result<NonZeroUsize, CliError> {
    text.trim()
        .parse::<NonZeroUsize>()
        .ok()
        .filter(|n| n.get() <= MAX_WORKERS)
        .ok_or_else(|| {
            CliError::new(format!(
                "--workers: {} is not a number of runtime worker threads from 1 to {MAX_WORKERS}",
                Shown(text)
            ))
        })
}

/// The runtime `options` ask for: [`ServeOptions::workers`] worker threads
/// (tokio's default when `None`), I/O and timers enabled.
fn runtime(options: &ServeOptions) -> Result<tokio::runtime::Runtime, CliError> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = options.workers {
        builder.worker_threads(n.get());
    }
    builder
        .enable_all()
        .build()
        .map_err(|e| CliError::new(format!("cannot start the runtime: {e}")))
}

fn address(text: &str, flag: &str) -> Result<SocketAddr, CliError> {
    text.trim().parse().map_err(|_| {
        CliError::new(format!(
            "{flag}: {} is not an address such as 0.0.0.0:8081 or [::1]:8081",
            Shown(text)
        ))
    })
}

/// The rules in `path` (a file or a directory of them).
fn load(path: &std::path::Path) -> Result<Config, CliError> {
    Config::load(path).map_err(|e| CliError::new(e.to_string()))
}

/// `--check`: the configuration's summary, the files read and passed over.
fn check(path: &std::path::Path) -> Result<String, CliError> {
    let summary = ratebound_server::check(path).map_err(|e| CliError::new(e.to_string()))?;
    // The engine refuses some rules the reader takes (a limit the core
    // cannot decide by): check those too.
    Engine::new(load(path)?).map_err(|e| CliError::new(e.to_string()))?;
    let mut out = format!("{}: OK, {summary}\n", path.display());
    for file in &summary.files {
        out.push_str(&format!("  read {}\n", file.display()));
    }
    for file in &summary.skipped {
        out.push_str(&format!("  passed over {}\n", file.display()));
    }
    Ok(out)
}

/// Resolves at the first SIGTERM or SIGINT.
async fn signalled() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Runs `ratebound serve`.
pub fn run(args: &ServeArgs) -> Result<String, CliError> {
    let grpc = address(&args.grpc, "--grpc")?;
    let http = address(&args.http, "--http")?;
    let drain = match &args.drain {
        Some(d) => Duration::from_nanos(parse_duration(d, "--drain")?),
        None => Duration::ZERO,
    };
    let workers = args.workers.as_deref().map(workers).transpose()?;
    let config = match (&args.check, &args.config) {
        // `--check PATH`, or `--config PATH --check`.
        (Some(Some(path)), _) | (Some(None), Some(path)) => return check(path),
        (_, Some(path)) => path,
        (_, None) => {
            return Err(CliError::new(
                "ratebound serve: --config PATH is required".to_string(),
            ));
        }
    };
    let format = logging::Format::parse(&args.log_format).ok_or_else(|| {
        CliError::new(format!(
            "--log-format: {} is not text or json",
            Shown(&args.log_format)
        ))
    })?;
    let engine = Engine::with_options(load(config)?, engine_options(args)?)
        .map_err(|e| CliError::new(e.to_string()))?;
    logging::init(format);
    let reload_every = Duration::from_nanos(parse_duration(&args.reload_every, "--reload-every")?);
    let shown = config.display().to_string();
    let on_reload: ReloadReport = Arc::new(move |polled: &Polled| match polled {
        Polled::Unchanged => {}
        Polled::Reloaded { domains } => logging::line(
            Level::Info,
            "ratebound",
            &format!("{shown} reloaded: {}", domains.join(", ")),
            &[
                ("config", shown.clone().into()),
                ("domains", domains.clone().into()),
            ],
        ),
        Polled::Refused { error } => logging::line(
            Level::Warn,
            "ratebound",
            &format!("{error} (the rules in force stay)"),
            &[("config", shown.clone().into())],
        ),
    });
    let options = ServeOptions {
        grpc,
        http,
        config: config.clone(),
        drain,
        reload_every: Some(reload_every),
        on_reload: Some(on_reload),
        workers,
        ..ServeOptions::default()
    };
    let runtime = runtime(&options)?;
    runtime.block_on(async move {
        let bound = bind(Arc::new(engine), options)
            .await
            .map_err(|e| CliError::new(e.to_string()))?;
        let (g, h) = (bound.grpc_addr().to_string(), bound.http_addr().to_string());
        logging::line(
            Level::Info,
            "ratebound",
            &format!("gRPC on {g}, HTTP on {h}"),
            &[("grpc", g.clone().into()), ("http", h.clone().into())],
        );
        bound
            .run(signalled())
            .await
            .map_err(|e| CliError::new(e.to_string()))?;
        Ok("ratebound serve: stopped".to_string())
    })
}
