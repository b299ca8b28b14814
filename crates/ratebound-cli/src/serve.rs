//! `ratebound serve`: the rate limit service for Envoy-based gateways
//! (RLS v3 over gRPC, the reference server's HTTP endpoints), until
//! SIGTERM or SIGINT, then a graceful shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use ratebound_cli::{CliError, Shown, parse_duration};
use ratebound_server::engine::Engine;
use ratebound_server::model::Config;
use ratebound_server::serve::{ServeOptions, bind};

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The reference server's YAML: a file, or a directory of them (one
    /// domain per file).
    #[arg(long)]
    config: PathBuf,
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
    /// Check the configuration and exit.
    #[arg(long)]
    check: bool,
}

fn address(text: &str, flag: &str) -> Result<SocketAddr, CliError> {
    text.trim().parse().map_err(|_| {
        CliError::new(format!(
            "{flag}: {} is not an address such as 0.0.0.0:8081 or [::1]:8081",
            Shown(text)
        ))
    })
}

/// The rules in `path`.
// TODO(lead): ratebound_server::config (helper 39's loader) reads `path`;
// until it is wired in, the file is only required to exist and the engine
// has no rules (every descriptor OK, as the reference server answers an
// unknown one).
fn load(path: &std::path::Path) -> Result<Config, CliError> {
    std::fs::metadata(path)
        .map_err(|e| CliError::new(format!("--config: cannot read {}: {e}", path.display())))?;
    Ok(Config::default())
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
    if args.check {
        // TODO(lead): ratebound_server::config::check(&args.config).
        return Err(CliError::new(format!(
            "--check: not yet (the configuration loader is not wired in); {} was not checked",
            args.config.display()
        )));
    }
    let config = load(&args.config)?;
    eprintln!(
        "ratebound serve: no configuration loader yet, so {} is not read: every descriptor is OK",
        args.config.display()
    );
    let options = ServeOptions {
        grpc,
        http,
        config: args.config.clone(),
        drain,
        ..ServeOptions::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(async move {
        let bound = bind(Arc::new(Engine::new(config)), options)
            .await
            .map_err(|e| CliError::new(e.to_string()))?;
        eprintln!(
            "ratebound serve: gRPC on {}, HTTP on {}",
            bound.grpc_addr(),
            bound.http_addr()
        );
        bound
            .run(signalled())
            .await
            .map_err(|e| CliError::new(e.to_string()))?;
        Ok("ratebound serve: stopped".to_string())
    })
}
