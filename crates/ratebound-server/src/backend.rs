//! Where the limits' state lives when it is shared: in shared memory (the
//! server processes of one host) or in Redis (every server of a fleet, one
//! node or a cluster). In-process state is the store's
//! own.
//!
//! Each distinct limit (algorithm, count, window, burst) is one limiter of
//! the backend: one file in the shared-memory directory, one key space in
//! Redis (`<prefix><tag>@<limit>:<descriptor's state key>`), so two limits
//! never share a count, and a limit changed by a reload counts from
//! nothing, as in this process.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ratebound::any::Key;
use ratebound::{Decision, Error as CoreError, KeyedAlgorithm};
use ratebound_redis::connect::{Connection, Target};
use ratebound_redis::{OnError, RedisLimiter, Source};
use ratebound_shm::SharedKeyedLimiter;

/// Where the limits' state lives.
#[derive(Clone, Debug, Default)]
pub enum Backend {
    /// In this process (the default: one gateway needs nothing else).
    #[default]
    Local,
    /// In shared memory, for several server processes on one host: one
    /// file per distinct limit in `dir` (made if missing), each with room
    /// for the engine's `max_keys` keys.
    Shared {
        /// The directory of the limits' files.
        dir: PathBuf,
    },
    /// In Redis, for a fleet of servers.
    Redis(RedisOptions),
}

impl Backend {
    /// `"local"`, `"shm"` or `"redis"`: the `backend` label of the metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Local => "local",
            Backend::Shared { .. } => "shm",
            Backend::Redis(_) => "redis",
        }
    }
}

/// How the servers reach Redis, and what answers when they cannot.
#[derive(Clone)]
pub struct RedisOptions {
    /// Where: one server's URL (`redis://`, `rediss://`, `unix://`) or a
    /// cluster's seed nodes (`redis+cluster://`, or several URLs).
    pub target: Arc<Target>,
    /// What answers while Redis is down, slow or erroring (every such
    /// answer is counted in `/metrics` and logged once per episode).
    pub on_error: OnError,
    /// Each call's deadline: past it, the fail policy answers.
    pub timeout: Duration,
    /// Prepended to every key.
    pub prefix: String,
}

impl RedisOptions {
    /// Redis at `target` with the driver's defaults: fail open (counted),
    /// a 50 ms deadline, keys under `rb:`.
    pub fn new(target: Target) -> RedisOptions {
        let target = Arc::new(target);
        let defaults = ratebound_redis::Config::new(KeyedAlgorithm::FixedWindow {
            limit: 1,
            window: Duration::from_secs(1),
        });
        RedisOptions {
            target,
            on_error: defaults.on_error,
            timeout: defaults.timeout,
            prefix: defaults.prefix,
        }
    }

    /// The driver's configuration of a limit of `algorithm`.
    pub(crate) fn config(&self, algorithm: KeyedAlgorithm) -> ratebound_redis::Config {
        let mut c = ratebound_redis::Config::new(algorithm);
        c.on_error = self.on_error;
        c.timeout = self.timeout;
        c.prefix = self.prefix.clone();
        c
    }
}

impl std::fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The target as shown: without its password.
        f.debug_struct("RedisOptions")
            .field("target", &self.target.shown())
            .field("on_error", &self.on_error)
            .field("timeout", &self.timeout)
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// One distinct limit's shared state.
pub(crate) enum Remote {
    Shared(SharedKeyedLimiter),
    Redis(RedisLimiter<Connection>),
}

impl Remote {
    /// Makes the limiter of `algorithm` named `name` (the limit's own
    /// name: its file, its Redis scope) in `backend`.
    pub(crate) fn open(
        backend: &Backend,
        connection: &OnceLock<Connection>,
        algorithm: KeyedAlgorithm,
        name: &str,
        max_keys: usize,
    ) -> Result<Remote, CoreError> {
        match backend {
            Backend::Local => Err(CoreError::Unsupported {
                operation: "a shared limit",
                algorithm: "the in-process backend",
            }),
            Backend::Shared { dir } => {
                let path = dir.join(format!("{name}.rbshm"));
                SharedKeyedLimiter::open(&path, algorithm, max_keys as u64)
                    .map(Remote::Shared)
                    .map_err(|e| CoreError::StoreMisconfigured {
                        cause: e.to_string(),
                    })
            }
            Backend::Redis(options) => {
                let conn = match connection.get() {
                    Some(c) => c.clone(),
                    None => {
                        let made = options.target.connect().map_err(|e| {
                            CoreError::StoreMisconfigured {
                                cause: format!(
                                    "{}: {}",
                                    options.target.shown(),
                                    ratebound_redis::failure_text(&e)
                                ),
                            }
                        })?;
                        connection.get_or_init(|| made).clone()
                    }
                };
                RedisLimiter::new(options.config(algorithm), conn).map(Remote::Redis)
            }
        }
    }

    /// `n` for `key` at `now` (Unix ns; Redis reads its own clock): the
    /// backend's decision. Redis down, slow or erroring is answered by the
    /// fail policy (counted), never an error.
    pub(crate) async fn check(
        &self,
        scope: &str,
        key: &[u8],
        n: u64,
        now: u64,
    ) -> Result<Decision, CoreError> {
        match self {
            Remote::Shared(l) => l.check_n_at(Key::Bytes(key), n, now).map_err(|e| match e {
                ratebound_shm::Error::Limit(e) => e,
                other => CoreError::StoreMisconfigured {
                    cause: other.to_string(),
                },
            }),
            Remote::Redis(l) => l.check_in(scope, key, n).await.map(|d| d.decision()),
        }
    }

    /// The fail policy's and Redis' counts (`None` for shared memory).
    pub(crate) fn redis_stats(&self) -> Option<ratebound_redis::Stats> {
        match self {
            Remote::Shared(_) => None,
            Remote::Redis(l) => Some(l.stats()),
        }
    }
}

/// Appends the backend's counters (Redis: each answer's source, the
/// breaker) in Prometheus' text format.
pub(crate) fn render<'a>(
    backend: &Backend,
    remotes: impl Iterator<Item = &'a Remote>,
    out: &mut String,
) {
    let Backend::Redis(_) = backend else { return };
    let mut total = ratebound_redis::Stats::default();
    let mut open = 0u64;
    for s in remotes.filter_map(Remote::redis_stats) {
        total.redis += s.redis;
        total.lease += s.lease;
        total.damaged += s.damaged;
        total.fail_open += s.fail_open;
        total.fail_closed += s.fail_closed;
        total.fail_local += s.fail_local;
        total.busy += s.busy;
        open += u64::from(s.breaker_open);
    }
    out.push_str(
        "# HELP ratebound_backend_answers_total Answers of the shared backend, by what gave them.\n\
         # TYPE ratebound_backend_answers_total counter\n",
    );
    for (source, n) in [
        (Source::Redis, total.redis),
        (Source::Lease, total.lease),
        (Source::Damaged, total.damaged),
        (Source::FailOpen, total.fail_open),
        (Source::FailClosed, total.fail_closed),
        (Source::Local, total.fail_local),
        (Source::Busy, total.busy),
    ] {
        out.push_str(&format!(
            "ratebound_backend_answers_total{{backend=\"redis\",source=\"{}\"}} {n}\n",
            source.as_str()
        ));
    }
    out.push_str(
        "# HELP ratebound_backend_errors_total Answers the fail policy gave because Redis could not.\n\
         # TYPE ratebound_backend_errors_total counter\n",
    );
    out.push_str(&format!(
        "ratebound_backend_errors_total{{backend=\"redis\"}} {}\n",
        total.fail_policy()
    ));
    out.push_str(
        "# HELP ratebound_backend_breakers_open Limits whose circuit breaker is open now.\n\
         # TYPE ratebound_backend_breakers_open gauge\n",
    );
    out.push_str(&format!(
        "ratebound_backend_breakers_open{{backend=\"redis\"}} {open}\n"
    ));
}
