//! Where the limits' state lives: in this process, one keyed limiter of
//! the core per distinct limit (algorithm, count, window, burst), each key
//! a descriptor's state key stored as a 128-bit fingerprint; or in a shared
//! [`Backend`], one limiter of the backend per distinct limit. Decisions
//! are made on a clock that reads Unix time (so fixed windows are aligned
//! to multiples of their length since the Unix epoch, as the reference
//! server's; Redis reads its own, which is Unix time too).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ratebound::any::{AnyClock, Fingerprint, Fingerprinter};
use ratebound::{Clock, KeyedAlgorithm, KeyedLimiter, MonotonicClock, Overflow, Quota};

use crate::backend::{Backend, Remote};
use crate::log_table::LogTable;
use crate::model::{Algorithm, Limit};

/// Unix time in ns, monotonic: the wall clock read once at the start, then
/// the monotonic clock's progress. A fixed window's index (`now / window`)
/// is then the reference server's (`unix_seconds / unit`), and a step of
/// the wall clock (NTP, a VM resumed) cannot move a limit backwards.
#[derive(Clone, Debug)]
pub struct UnixClock {
    origin: u64,
    monotonic: MonotonicClock,
}

impl UnixClock {
    /// The clock, reading the wall clock now.
    ///
    /// The monotonic clock is made first (its first use may calibrate for
    /// up to 200 ms), then the wall clock is read between two monotonic
    /// readings, again while they are more than 1 ms apart (a preemption),
    /// at most 8 times: the origin is the wall clock at the middle of the
    /// closest pair.
    pub fn new() -> UnixClock {
        let monotonic = MonotonicClock::new();
        let mut best: Option<(u64, u64)> = None;
        for _ in 0..8 {
            let before = monotonic.now();
            let unix = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            let after = monotonic.now();
            let gap = after.saturating_sub(before);
            let origin = u64::try_from(unix.as_nanos())
                .unwrap_or(u64::MAX)
                .saturating_sub(before + gap / 2);
            if best.is_none_or(|(g, _)| gap < g) {
                best = Some((gap, origin));
            }
            if gap <= 1_000_000 {
                break;
            }
        }
        let origin = best.map_or(0, |(_, origin)| origin);
        UnixClock { origin, monotonic }
    }
}

impl Default for UnixClock {
    fn default() -> UnixClock {
        UnixClock::new()
    }
}

impl Clock for UnixClock {
    fn now(&self) -> u64 {
        self.origin
            .saturating_add(self.monotonic.now())
            .min(ratebound::MAX_TIME_NANOS)
    }
}

/// What makes two limits one: their algorithm, count, window and burst.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Spec {
    algorithm: Algorithm,
    requests: u64,
    window_ns: u64,
    burst: u64,
}

impl Spec {
    /// The spec of `limit` (whose count is at least 1).
    pub(crate) fn of(limit: &Limit) -> Spec {
        Spec {
            algorithm: limit.algorithm,
            requests: limit.requests_per_unit,
            window_ns: u64::try_from(limit.window.length.as_nanos()).unwrap_or(u64::MAX),
            burst: limit.burst.unwrap_or(limit.requests_per_unit),
        }
    }

    /// The limit's name in a shared backend (its file, its Redis scope):
    /// every number that makes it, so that two limits never share a count.
    fn name(self) -> String {
        format!(
            "{}-{}-per-{}ns-burst-{}",
            self.algorithm.name(),
            self.requests,
            self.window_ns,
            self.burst
        )
    }

    /// The core's algorithm for this spec.
    fn algorithm(self) -> Result<KeyedAlgorithm, ratebound::Error> {
        let window = Duration::from_nanos(self.window_ns);
        Ok(match self.algorithm {
            Algorithm::FixedWindow => KeyedAlgorithm::FixedWindow {
                limit: self.requests,
                window,
            },
            Algorithm::SlidingWindow => KeyedAlgorithm::SlidingWindow {
                limit: self.requests,
                window,
            },
            // The exact log keeps a time per request: in this process it
            // is a table of its own (`LogTable`); a shared backend has no
            // log — said where the rules are taken, never replaced by an
            // approximation.
            Algorithm::SlidingLog => {
                return Err(ratebound::Error::Unsupported {
                    operation: "a sliding log per descriptor in shared memory or Redis (in this process only)",
                    algorithm: "sliding_log",
                });
            }
            Algorithm::TokenBucket => KeyedAlgorithm::TokenBucket(Quota::parse(&format!(
                "{}/{}ns burst {}",
                self.requests, self.window_ns, self.burst
            ))?),
        })
    }
}

/// One limit's state: a keyed limiter of the core.
pub(crate) type Limiter = KeyedLimiter<Fingerprint, AnyClock>;

/// The most distinct limits a store holds (each a keyed limiter, or a
/// shared backend's limiter and file): the configuration's are few, but a
/// gateway's overrides (RLS v3 `limit`) come with requests, so their count
/// is bounded here; past it, a new limit is refused (`TooManyKeys`).
pub(crate) const MAX_LIMITS: usize = 4096;

/// A shared backend's limiter of one distinct limit, and the scope its
/// keys live under.
pub(crate) struct Shared {
    pub(crate) remote: Remote,
    pub(crate) scope: String,
}

/// Every limit's state.
pub(crate) struct Store {
    limiters: RwLock<HashMap<Spec, Arc<Limiter>>>,
    logs: RwLock<HashMap<Spec, Arc<LogTable>>>,
    shared: RwLock<HashMap<Spec, Arc<Shared>>>,
    backend: Backend,
    connection: OnceLock<ratebound_redis::connect::Connection>,
    fingerprints: Fingerprinter,
    clock: AnyClock,
    max_keys: usize,
}

impl Store {
    /// A store in `backend` whose limiters each track at most `max_keys`
    /// keys (in this process, the least recently used forgotten beyond),
    /// on `clock` (Unix time in ns: a [`UnixClock`], or a manual clock set
    /// to Unix time in tests).
    pub(crate) fn new(backend: Backend, clock: AnyClock, max_keys: usize) -> Store {
        Store {
            limiters: RwLock::new(HashMap::new()),
            logs: RwLock::new(HashMap::new()),
            shared: RwLock::new(HashMap::new()),
            backend,
            connection: OnceLock::new(),
            fingerprints: Fingerprinter::new(),
            clock,
            max_keys: max_keys.max(1),
        }
    }

    /// Whether the state lives in this process.
    pub(crate) fn is_local(&self) -> bool {
        matches!(self.backend, Backend::Local)
    }

    /// The time now, Unix ns.
    pub(crate) fn now(&self) -> u64 {
        self.clock.now()
    }

    /// The stored form of a state key.
    pub(crate) fn key(&self, state_key: &[u8]) -> Fingerprint {
        self.fingerprints.of(0, state_key)
    }

    /// Whether the backend can hold `limit` (count ≥ 1), asked before any
    /// request: in this process or shared memory, its limiter is made (a
    /// file is opened); for Redis, the driver's engine is asked (no I/O:
    /// the connection is made at the first decision).
    ///
    /// # Errors
    /// The core's or the backend's reason.
    pub(crate) fn validate(&self, limit: &Limit) -> Result<(), ratebound::Error> {
        match &self.backend {
            Backend::Local if limit.algorithm == Algorithm::SlidingLog => self.log(limit).map(drop),
            Backend::Local => self.limiter(limit).map(drop),
            Backend::Shared { .. } => self.shared(limit).map(drop),
            Backend::Redis(options) => {
                let algorithm = Spec::of(limit).algorithm()?;
                ratebound_redis::Engine::new(options.config(algorithm)).map(drop)
            }
        }
    }

    /// The shared backend's limiter of `limit` (count ≥ 1), made at first
    /// use.
    ///
    /// # Errors
    /// The core's or the backend's, for a limit it cannot hold.
    pub(crate) fn shared(&self, limit: &Limit) -> Result<Arc<Shared>, ratebound::Error> {
        let spec = Spec::of(limit);
        if let Some(l) = self
            .shared
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&spec)
        {
            return Ok(Arc::clone(l));
        }
        if self.shared.read().unwrap_or_else(|e| e.into_inner()).len() >= MAX_LIMITS {
            return Err(ratebound::Error::TooManyKeys {
                max_keys: MAX_LIMITS,
            });
        }
        let scope = spec.name();
        let remote = Remote::open(
            &self.backend,
            &self.connection,
            spec.algorithm()?,
            &scope,
            self.max_keys,
        )?;
        let mut all = self.shared.write().unwrap_or_else(|e| e.into_inner());
        Ok(Arc::clone(
            all.entry(spec)
                .or_insert_with(|| Arc::new(Shared { remote, scope })),
        ))
    }

    /// Appends the backend's counters (Prometheus' text format).
    pub(crate) fn render(&self, out: &mut String) {
        let all: Vec<Arc<Shared>> = self
            .shared
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        crate::backend::render(&self.backend, all.iter().map(|s| &s.remote), out);
    }
    /// The log table of a `sliding_log` `limit` (count ≥ 1), made at
    /// first use.
    ///
    /// # Errors
    /// The core's, for a limit a log cannot hold.
    pub(crate) fn log(&self, limit: &Limit) -> Result<Arc<LogTable>, ratebound::Error> {
        let spec = Spec::of(limit);
        if let Some(l) = self
            .logs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&spec)
        {
            return Ok(Arc::clone(l));
        }
        if self.logs.read().unwrap_or_else(|e| e.into_inner()).len() >= MAX_LIMITS {
            return Err(ratebound::Error::TooManyKeys {
                max_keys: MAX_LIMITS,
            });
        }
        let made = LogTable::new(
            spec.requests,
            Duration::from_nanos(spec.window_ns),
            self.clock.clone(),
            self.max_keys,
        )?;
        let mut all = self.logs.write().unwrap_or_else(|e| e.into_inner());
        Ok(Arc::clone(
            all.entry(spec).or_insert_with(|| Arc::new(made)),
        ))
    }

    /// The limiter of `limit` (count ≥ 1), made at first use.
    ///
    /// # Errors
    /// The core's, for a limit it cannot represent (the configuration's
    /// checks refuse those first).
    pub(crate) fn limiter(&self, limit: &Limit) -> Result<Arc<Limiter>, ratebound::Error> {
        let spec = Spec::of(limit);
        if let Some(l) = self
            .limiters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&spec)
        {
            return Ok(Arc::clone(l));
        }
        if self
            .limiters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .len()
            >= MAX_LIMITS
        {
            return Err(ratebound::Error::TooManyKeys {
                max_keys: MAX_LIMITS,
            });
        }
        let made = KeyedLimiter::new(spec.algorithm()?)?
            .with_max_keys(self.max_keys, Overflow::EvictLeastRecent)?
            .with_clock(self.clock.clone());
        let mut all = self.limiters.write().unwrap_or_else(|e| e.into_inner());
        Ok(Arc::clone(
            all.entry(spec).or_insert_with(|| Arc::new(made)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_time_is_the_wall_clock_from_the_first_clock_made() {
        // The first clock of the process: its monotonic source calibrates
        // on first use, which once put the origin that far behind.
        let clock = UnixClock::new();
        let wall = || {
            u64::try_from(
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos(),
            )
            .unwrap_or(u64::MAX)
        };
        let before = wall();
        let now = clock.now();
        let after = wall();
        // Within 5 ms of the wall clock read around it (a step of the wall
        // clock during the test aside).
        assert!(
            now + 5_000_000 >= before && now <= after + 5_000_000,
            "{before} <= {now} <= {after}, off by {} ms",
            (i128::from(now) - i128::from(before)) / 1_000_000
        );
    }
}
