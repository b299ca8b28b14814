//! The runner: the gRPC and HTTP listeners, the health services, and a
//! graceful shutdown.
//!
//! [`bind`] opens both addresses (port 0 for any free port) and reports the
//! bound ones; [`Bound::run`] serves until the shutdown future completes,
//! then: health turns NOT_SERVING (gRPC health) and `/healthcheck` answers
//! 500, [`ServeOptions::drain`] passes (for a load balancer to notice),
//! both listeners stop accepting, and the requests in flight are answered
//! before it returns. [`serve`] is both.

use std::future::Future;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::serve::ListenerExt;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::SERVICE_NAME;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;

use crate::engine::Engine;
use crate::http::{HttpState, MetricsSource, router};
use crate::metrics::Metrics;
use crate::reload::{Polled, Watcher};
use crate::rls::{Bounds, RlsService};

/// The gRPC health service names reported: the whole server (`""`), the
/// RLS service, and the reference server's own (`"ratelimit"`), so a probe
/// written for it keeps working.
pub const HEALTH_NAMES: [&str; 3] = ["", SERVICE_NAME, "ratelimit"];

/// Where and how to serve.
#[derive(Clone)]
pub struct ServeOptions {
    /// The gRPC address (default `0.0.0.0:8081`, the reference server's).
    pub grpc: SocketAddr,
    /// The HTTP address (default `0.0.0.0:8080`, the reference server's).
    pub http: SocketAddr,
    /// The configuration file or directory the engine's rules were read
    /// from (for the reload and the logs; the runner itself does not read
    /// it).
    pub config: PathBuf,
    /// The bounds on a request.
    pub bounds: Bounds,
    /// Between reporting unhealthy and closing the listeners on shutdown
    /// (default 0).
    pub drain: Duration,
    /// More Prometheus text for `/metrics` (after the wire's and the
    /// engine's).
    pub extra_metrics: Option<MetricsSource>,
    /// Poll [`config`](Self::config) this often and put a changed
    /// configuration in force ([`Watcher`]; `None`, the default: never).
    pub reload_every: Option<Duration>,
    /// Told what each poll that found a change did (a configuration put in
    /// force, or refused with its file, line and column: the rules in
    /// force stay).
    pub on_reload: Option<ReloadReport>,
    /// The tokio runtime workers to serve on (`None`, the default: tokio's
    /// default, one per core, or `TOKIO_WORKER_THREADS`). The runner
    /// serves on whatever runtime it is awaited on: this is for the caller
    /// that builds the runtime (the CLI's `ratebound serve --workers N`).
    /// One worker does more decisions a second when the gateway keeps the
    /// server busy (no wake-ups between two workers); more workers answer
    /// a burst sooner when it does not (see the crate's README,
    /// "Benchmark").
    pub workers: Option<NonZeroUsize>,
}

/// Told what a reload did ([`ServeOptions::on_reload`]).
pub type ReloadReport = Arc<dyn Fn(&Polled) + Send + Sync>;

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            grpc: SocketAddr::from(([0, 0, 0, 0], 8081)),
            http: SocketAddr::from(([0, 0, 0, 0], 8080)),
            config: PathBuf::new(),
            bounds: Bounds::default(),
            drain: Duration::ZERO,
            extra_metrics: None,
            reload_every: None,
            on_reload: None,
            workers: None,
        }
    }
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("grpc", &self.grpc)
            .field("http", &self.http)
            .field("config", &self.config)
            .field("bounds", &self.bounds)
            .field("drain", &self.drain)
            .field("extra_metrics", &self.extra_metrics.is_some())
            .field("reload_every", &self.reload_every)
            .field("on_reload", &self.on_reload.is_some())
            .field("workers", &self.workers)
            .finish()
    }
}

/// Why serving failed.
#[derive(Debug)]
pub enum ServeError {
    /// An address could not be bound.
    Bind {
        /// `"gRPC"` or `"HTTP"`.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The gRPC server failed.
    Grpc(tonic::transport::Error),
    /// The HTTP server failed.
    Http(std::io::Error),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Bind { what, addr, source } => {
                write!(f, "cannot listen for {what} on {addr}: {source}")
            }
            ServeError::Grpc(e) => write!(f, "the gRPC server failed: {e}"),
            ServeError::Http(e) => write!(f, "the HTTP server failed: {e}"),
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServeError::Bind { source, .. } => Some(source),
            ServeError::Grpc(e) => Some(e),
            ServeError::Http(e) => Some(e),
        }
    }
}

/// Both listeners bound, not yet serving.
pub struct Bound {
    engine: Arc<Engine>,
    options: ServeOptions,
    grpc: TcpListener,
    http: TcpListener,
    grpc_addr: SocketAddr,
    http_addr: SocketAddr,
}

impl std::fmt::Debug for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bound")
            .field("grpc_addr", &self.grpc_addr)
            .field("http_addr", &self.http_addr)
            .finish_non_exhaustive()
    }
}

async fn listen(
    what: &'static str,
    addr: SocketAddr,
) -> Result<(TcpListener, SocketAddr), ServeError> {
    let bind_error = |source| ServeError::Bind { what, addr, source };
    let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
    let local = listener.local_addr().map_err(bind_error)?;
    Ok((listener, local))
}

/// Binds the gRPC and HTTP addresses of `options`.
///
/// # Errors
/// [`ServeError::Bind`] naming the address that could not be bound.
pub async fn bind(engine: Arc<Engine>, options: ServeOptions) -> Result<Bound, ServeError> {
    let (grpc, grpc_addr) = listen("gRPC", options.grpc).await?;
    let (http, http_addr) = listen("HTTP", options.http).await?;
    Ok(Bound {
        engine,
        options,
        grpc,
        http,
        grpc_addr,
        http_addr,
    })
}

impl Bound {
    /// The gRPC address bound (the real port when 0 was asked).
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    /// The HTTP address bound.
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// Serves until `shutdown` completes, then shuts down gracefully (see
    /// the module's documentation).
    ///
    /// # Errors
    /// [`ServeError`] when a server fails (not on shutdown).
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), ServeError> {
        let Bound {
            engine,
            options,
            grpc,
            http,
            ..
        } = self;
        let metrics = Arc::new(Metrics::new(engine.rules().config()));
        let healthy = Arc::new(AtomicBool::new(true));

        let (reporter, health_service) = tonic_health::server::health_reporter();
        for name in HEALTH_NAMES {
            reporter
                .set_service_status(name, ServingStatus::Serving)
                .await;
        }

        let (stop_tx, stop_rx) = watch::channel(false);
        let stopped = |mut rx: watch::Receiver<bool>| async move {
            // An error: the sender is gone, which is a stop too.
            let _ = rx.wait_for(|stop| *stop).await;
        };

        let rls = RlsService::new(Arc::clone(&engine), options.bounds, Arc::clone(&metrics));
        let grpc_server = tonic::transport::Server::builder()
            .add_service(health_service)
            .add_service(rls.into_server())
            .serve_with_incoming_shutdown(
                // Without TCP_NODELAY a small answer can wait ~40 ms for
                // the client's delayed ACK (seen as the p99.9 on loopback).
                TcpIncoming::from(grpc).with_nodelay(Some(true)),
                stopped(stop_rx.clone()),
            );

        let state = HttpState {
            engine: Arc::clone(&engine),
            bounds: options.bounds,
            metrics: Arc::clone(&metrics),
            healthy: Arc::clone(&healthy),
            extra_metrics: options.extra_metrics.clone(),
        };
        let http = http.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let http_server = axum::serve(http, router(state))
            .with_graceful_shutdown(stopped(stop_rx.clone()))
            .into_future();

        let reloader = options.reload_every.map(|every| {
            tokio::spawn(reload(
                Arc::clone(&engine),
                Arc::clone(&metrics),
                Watcher::new(options.config.clone()),
                every,
                options.on_reload.clone(),
                stopped(stop_rx.clone()),
            ))
        });
        let drain = options.drain;
        let stopper = async move {
            shutdown.await;
            healthy.store(false, Ordering::Release);
            for name in HEALTH_NAMES {
                reporter
                    .set_service_status(name, ServingStatus::NotServing)
                    .await;
            }
            if !drain.is_zero() {
                tokio::time::sleep(drain).await;
            }
            let _ = stop_tx.send(true);
        };

        let grpc_server = async { grpc_server.await.map_err(ServeError::Grpc) };
        let http_server = async { http_server.await.map_err(ServeError::Http) };
        // The first failure ends both; else both end once stopped.
        let servers = async {
            tokio::try_join!(grpc_server, http_server)?;
            Ok(())
        };
        tokio::pin!(servers, stopper);
        let result = tokio::select! {
            result = &mut servers => result,
            () = &mut stopper => servers.await,
        };
        if let Some(reloader) = reloader {
            reloader.abort();
        }
        result
    }
}

/// Polls `watcher` every `every` until `stopped`, reporting changes.
async fn reload(
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    watcher: Watcher,
    every: Duration,
    report: Option<ReloadReport>,
    stopped: impl Future<Output = ()>,
) {
    let mut watcher = Some(watcher);
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            () = &mut stopped => return,
            _ = ticks.tick() => {}
        }
        // Reading files blocks: off the runtime's workers.
        let Some(w) = watcher.take() else { return };
        let polling = Arc::clone(&engine);
        let Ok((w, polled)) = tokio::task::spawn_blocking(move || {
            let mut w = w;
            let polled = w.poll(&polling);
            (w, polled)
        })
        .await
        else {
            return;
        };
        watcher = Some(w);
        if let Polled::Reloaded { .. } = polled {
            // A domain the reload added is counted under its own label.
            metrics.know(engine.rules().config());
        }
        if polled != Polled::Unchanged
            && let Some(report) = &report
        {
            report(&polled);
        }
    }
}

/// Binds both addresses and serves until `shutdown` completes ([`bind`]
/// then [`Bound::run`]).
///
/// # Errors
/// [`ServeError`] when an address cannot be bound or a server fails.
pub async fn serve(
    engine: Arc<Engine>,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    bind(engine, options).await?.run(shutdown).await
}
