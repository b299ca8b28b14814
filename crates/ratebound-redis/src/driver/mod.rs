//! The Rust driver: the engine's calls run with the `redis` crate on tokio,
//! over any async connection the user already configured —
//! `redis::aio::ConnectionManager` (reconnects in the background) or
//! `redis::cluster_async::ClusterConnection` (follows `MOVED`).

#[cfg(feature = "connect")]
pub mod connect;
mod limit;
mod listener;
mod pump;
mod reservation;
pub(crate) mod sentinel;

use listener::{Listener, listen};
pub use pump::Pump;
pub use reservation::RedisReservation;
use reservation::{Flight, give_back_later};

use std::any::TypeId;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ratebound::any::AnyClock;
use ratebound::outbound::Learned;
use ratebound::{Error, Quota, Resumed};
use redis::aio::ConnectionLike;

use std::time::Duration;

use crate::plan::{Answer, Tuning};
use crate::{
    Algorithm, Begin, Call, Config, Engine, RedisDecision, ReserveBegin, Reserved, Source,
};

/// A global limit in Redis: every instance that checks the same key with
/// the same settings shares one limit.
///
/// Each check is one `EVALSHA` round trip (a `NOSCRIPT` reply loads the
/// script with `EVAL` and counts as the same call), bounded by the
/// configured deadline (default 50 ms): the `redis` crate has no per-call
/// timeout, so the driver enforces it. **A call that timed out may still
/// have run in Redis and spent its tokens**: the fail policy answers it,
/// and the tokens may be counted anyway.
///
/// **Batching** ([`Config::batch`], on by default). A call is sent alone
/// when nothing else is in flight on the connection; while one is, the
/// calls that come meanwhile (checks, leases, reservations, give-backs,
/// pauses, of every clone of this limiter) wait, and go out as one script
/// run over many keys ([`BatchCall`](crate::BatchCall), at most
/// [`BatchCall::MAX`](crate::BatchCall::MAX)) the moment it lands — or at
/// once, as a second send in flight, when 16 of them wait. The keys
/// are decided in arrival order exactly as separate calls would decide
/// them, so every decision is the same; Redis spends less per decision and
/// many callers in flight get more decisions per second. One caller in
/// flight never waits for a batch. Each caller keeps its own deadline,
/// counted from its call: past it the fail policy answers, even if its
/// batch comes back later, and a call whose caller stopped waiting before
/// its batch went out is not sent. Batches are sent by a task spawned on
/// the caller's tokio runtime, so a caller that drops its future never
/// stalls the others. In a Redis Cluster the calls are batched per hash
/// slot (see [`per_slot`](Self::per_slot)): one script run never spans two
/// slots, so no `CROSSSLOT`.
///
/// # Examples
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use ratebound::Quota;
/// use ratebound_redis::RedisLimiter;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let conn = redis::aio::ConnectionManager::new(client).await?;
/// let limiter = RedisLimiter::token_bucket(Quota::parse("10/s burst 20")?, conn)?;
/// let d = limiter.check("partner-api").await?;
/// if !d.is_allowed() {
///     println!("retry in {:?} ({})", d.retry_after(), d.source().as_str());
/// }
/// # Ok(()) }
/// ```
///
/// **Pauses and waiters.** [`pause`](Self::pause) moves every reservation
/// in Redis past the pause, and tells this limiter's own waiters. Waiters of
/// *other* instances hear of it only if their limiter listens: build it
/// with [`with_pause_news`](Self::with_pause_news), which subscribes to the
/// prefix's pause channel on a connection of its own. A waiter whose
/// limiter does not listen (or whose subscription was down when the news
/// came) wakes at its old time and goes ahead inside the pause; its
/// instance's next call finds the pause in Redis.
#[derive(Clone)]
pub struct RedisLimiter<C> {
    engine: Arc<Engine>,
    conn: C,
    listener: Option<Arc<Listener>>,
    /// Its calls on `conn`, batched when [`Config::batch`] is on.
    pump: Arc<Pump<C>>,
}

impl<C> std::fmt::Debug for RedisLimiter<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> RedisLimiter<C> {
    /// A limiter from a full [`Config`].
    ///
    /// # Errors
    /// [`Engine::new`]'s.
    pub fn new(config: Config, conn: C) -> Result<Self, Error> {
        RedisLimiter::with_clock(config, AnyClock::default(), conn)
    }

    /// As [`new`](Self::new), with `clock` for leases and the breaker (see
    /// [`Engine::with_clock`]): a [`ratebound::TokioClock`] puts them on
    /// tokio's time, with the call deadlines, so that a test under tokio's
    /// paused time checks deadlines and the fail policy exactly.
    ///
    /// # Errors
    /// [`Engine::new`]'s.
    pub fn with_clock(config: Config, clock: AnyClock, conn: C) -> Result<Self, Error> {
        let engine = Arc::new(Engine::with_clock(config, clock)?);
        let per_slot = TypeId::of::<C>() == TypeId::of::<redis::cluster_async::ClusterConnection>();
        let tuning = engine.config().batch.then_some(Tuning::TASKS);
        let pump = Pump::new(conn.clone(), tuning, per_slot);
        Ok(RedisLimiter {
            engine,
            conn,
            listener: None,
            pump,
        })
    }

    /// This limiter, batching per hash slot (`true`) or over the whole
    /// connection (`false`). A Redis Cluster runs one script only over
    /// keys of one slot, so its calls are batched per slot; the limiter
    /// knows a cluster by its connection's type
    /// (`redis::cluster_async::ClusterConnection`, on by itself). Turn it on
    /// for a connection of another type that talks to a cluster (a wrapper
    /// around a cluster connection); it changes nothing without batching
    /// ([`Config::batch`]).
    pub fn per_slot(mut self, on: bool) -> Self {
        if let Some(tuning) = self.pump.tuning()
            && self.pump.per_slot() != on
        {
            self.pump = Pump::new(self.conn.clone(), Some(tuning), on);
        }
        self
    }

    /// Whether calls are batched per hash slot (see
    /// [`per_slot`](Self::per_slot)); `false` without batching.
    pub fn batches_per_slot(&self) -> bool {
        self.pump.per_slot()
    }

    /// A token bucket with the defaults (prefix `rb:`, fail open, 50 ms).
    ///
    /// # Errors
    /// [`Engine::new`]'s.
    pub fn token_bucket(quota: Quota, conn: C) -> Result<Self, Error> {
        RedisLimiter::new(Config::new(Algorithm::TokenBucket(quota)), conn)
    }

    /// The engine (configuration, breaker state, leases).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// How many answers this limiter gave, by the path that gave them
    /// (Redis, a lease, each fail policy, busy), and whether the breaker
    /// is open: [`Engine::stats`].
    pub fn stats(&self) -> crate::Stats {
        self.engine.stats()
    }

    /// Logs the engine's notices, each once, as warnings of the `log`
    /// crate (target `ratebound_redis`): a breaker episode's start and
    /// end, an overloaded client.
    fn tell(&self) {
        if self.engine.has_notices() {
            for notice in self.engine.take_notices() {
                log::warn!(target: "ratebound_redis", "{notice}");
            }
        }
    }

    /// This limiter, listening for other instances' pauses: a thread of its
    /// own subscribes to [`Engine::pause_channel`] (`rb:pause`) with
    /// `client` (a pub/sub connection cannot be shared with commands; use
    /// the same server settings as the limiter's connection — in a cluster,
    /// any node: a `PUBLISH` reaches every node) and hands every message to
    /// [`Engine::hear`], so that a waiter whose reservation a pause moved
    /// in Redis sleeps until its new time. No call is added to any
    /// acquisition.
    ///
    /// Returns once the subscription is confirmed, or after the limiter's
    /// deadline if it is not (Redis is down, slow): it keeps trying in the
    /// background, and reconnects (100 ms to 2 s apart) whenever its
    /// connection is lost. News published while it is not subscribed is
    /// missed (see the type's docs). It stops when the last clone of the
    /// limiter is dropped or at [`shutdown`](Self::shutdown), within 200 ms.
    pub async fn with_pause_news(mut self, client: redis::Client) -> Self {
        if let Some(old) = self.listener.take() {
            old.stop.store(true, Ordering::Relaxed);
        }
        let listener = Arc::new(Listener {
            stop: Arc::new(AtomicBool::new(false)),
            subscribed: Arc::new(AtomicBool::new(false)),
        });
        let (ready, confirmed) = tokio::sync::oneshot::channel();
        let (engine, stop, subscribed) = (
            self.engine.clone(),
            listener.stop.clone(),
            listener.subscribed.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("ratebound-pause-news".to_string())
            .spawn(move || listen(&client, &engine, &stop, &subscribed, ready));
        if spawned.is_ok() {
            let _ = tokio::time::timeout(self.engine.timeout(), confirmed).await;
        }
        self.listener = Some(listener);
        self
    }

    /// Whether this limiter hears other instances' pauses now (see
    /// [`with_pause_news`](Self::with_pause_news)).
    pub fn listening(&self) -> bool {
        // Ordering: Acquire pairs with the listener's Release store; the
        // flag is advice for callers and tests, no memory depends on it.
        self.listener
            .as_ref()
            .is_some_and(|l| l.subscribed.load(Ordering::Acquire))
    }

    /// One token for `key`.
    ///
    /// # Errors
    /// As [`check_n`](Self::check_n).
    pub async fn check(&self, key: impl AsRef<[u8]>) -> Result<RedisDecision, Error> {
        self.check_n(key, 1).await
    }

    /// `n` tokens for `key`: Redis' answer, or the fail policy's when Redis
    /// is down, slow or erroring (see [`RedisDecision::source`]).
    ///
    /// # Errors
    /// [`Error::InsufficientCapacity`] for an `n` above the burst (never
    /// possible). `n = 0` is a query (admitted, nothing taken). Redis
    /// failures are not errors: the fail policy answers them; nor is a key
    /// whose state is beyond the limit (refused) or damaged
    /// ([`Source::Damaged`](crate::Source::Damaged)).
    pub async fn check_n(&self, key: impl AsRef<[u8]>, n: u64) -> Result<RedisDecision, Error> {
        self.check_n_with(None, key.as_ref(), n, None).await
    }

    /// [`check_n`](Self::check_n) for `key` within `scope` (see
    /// [`Engine::redis_key`]): a middleware's check for its policy named
    /// `scope`, which never shares a key with another policy.
    ///
    /// # Errors
    /// As [`check_n`](Self::check_n).
    pub async fn check_in(
        &self,
        scope: &str,
        key: impl AsRef<[u8]>,
        n: u64,
    ) -> Result<RedisDecision, Error> {
        self.check_n_with(Some(scope), key.as_ref(), n, None).await
    }

    /// [`check_n`](Self::check_n) judged at `now_us` (µs) instead of
    /// Redis' `TIME`: the explicit-time twin, for test vectors.
    ///
    /// # Errors
    /// As [`check_n`](Self::check_n).
    pub async fn check_n_at(
        &self,
        key: impl AsRef<[u8]>,
        n: u64,
        now_us: u64,
    ) -> Result<RedisDecision, Error> {
        self.check_n_with(None, key.as_ref(), n, Some(now_us)).await
    }

    async fn check_n_with(
        &self,
        scope: Option<&str>,
        key: &[u8],
        n: u64,
        now_us: Option<u64>,
    ) -> Result<RedisDecision, Error> {
        match self.engine.begin_in(scope, key, n)? {
            Begin::Done(d) => Ok(d),
            Begin::Call(call) => {
                let call = Arc::new(match now_us {
                    Some(now) => call.at(now),
                    None => call,
                });
                let answer = self.run(&call).await;
                self.engine.misconfigured(&answer.outcome())?;
                let d = self.engine.finish(&call, answer.outcome());
                self.tell();
                Ok(d)
            }
        }
    }

    /// Gives every unspent leased token back to Redis (call it on
    /// shutdown) and stops listening for pauses; how many calls succeeded.
    pub async fn shutdown(&self) -> usize {
        if let Some(l) = &self.listener {
            l.stop.store(true, Ordering::Relaxed);
        }
        let mut done = 0;
        for call in self.engine.drain() {
            done += usize::from(self.run(&Arc::new(call)).await.replied());
        }
        done
    }

    /// Waits for `n` tokens for `key`, as long as `timeout` allows (none:
    /// as long as it takes): one `EVALSHA` reserves them in Redis — every
    /// instance is served in the order its call reached Redis — and the
    /// task sleeps until they are due; no polling. A window cannot reserve:
    /// it sleeps the exact `retry_after` and asks again. While Redis is
    /// down, `open` returns at once, `closed` fails at once, `local` waits
    /// on the local share. If the future is dropped while it holds
    /// reserved tokens, they are given back (by a spawned task).
    ///
    /// # Errors
    /// [`Error::DeadlineExceeded`] at once, taking nothing, when the wait
    /// would exceed `timeout` (or the fail policy `closed` refuses);
    /// [`Error::InsufficientCapacity`] for `n` above the burst;
    /// [`Error::InvalidNumber`] for `n = 0`.
    pub async fn acquire_n(
        &self,
        key: impl AsRef<[u8]>,
        n: u64,
        timeout: Option<Duration>,
    ) -> Result<Source, Error> {
        let a = self.engine.acquire(None, key.as_ref(), n, timeout)?;
        ratebound::wait::drive_calls(
            a,
            |a| self.engine.acquire_step(a),
            |call| self.run_owned(Arc::new(call)),
            |a, answer| {
                self.engine.misconfigured(&answer.outcome())?;
                self.engine.acquire_reply(a, answer.outcome());
                self.tell();
                Ok(())
            },
            |a| {
                // Dropped while it holds reserved tokens (the caller's
                // future was dropped): given back from a spawned task.
                if let Some(call) = self.engine.acquire_abandon(a) {
                    give_back_later(self.clone(), call);
                }
            },
        )
        .await
    }

    /// Reserves `n` tokens for `key` if they are due within `max_wait`:
    /// taken in Redis now, usable after [`RedisReservation::delay`]. Drop
    /// or [`cancel`](RedisReservation::cancel) it to give them back;
    /// [`wait`](RedisReservation::wait) sleeps until they are due.
    ///
    /// # Errors
    /// [`Error::DeadlineExceeded`] when they would be due only after
    /// `max_wait` (nothing is taken), or when the fail policy refuses;
    /// [`Error::Unsupported`] for a window (it cannot reserve: use
    /// [`acquire_n`](Self::acquire_n)); as [`acquire_n`](Self::acquire_n).
    pub async fn reserve_n(
        &self,
        key: impl AsRef<[u8]>,
        n: u64,
        max_wait: Duration,
    ) -> Result<RedisReservation<C>, Error> {
        let (r, call) = match self.engine.begin_reserve(None, key.as_ref(), n, max_wait)? {
            ReserveBegin::Done(r) => (r, None),
            ReserveBegin::Call(call) => {
                let call = Arc::new(call);
                let answer = self.run_owned(call.clone()).await;
                self.engine.misconfigured(&answer.outcome())?;
                let r = self.engine.finish_reserve(&call, answer.outcome());
                self.tell();
                (r, Some(call))
            }
        };
        match r {
            Reserved::Granted {
                wait,
                source,
                end_us,
                ..
            } => Ok(RedisReservation {
                // Tokens due at once cannot be given back (they were the
                // caller's from the start): nothing to hold.
                held: call
                    .zip(end_us)
                    .filter(|_| !wait.is_zero())
                    .map(|(call, end_us)| (self.clone(), self.engine.give_back(&call, end_us))),
                due: tokio::time::Instant::now() + wait,
                delay: wait,
                source,
            }),
            Reserved::Refused { wait, source } | Reserved::Retry { wait, source } => {
                Err(self.engine.wait_failed(wait, source, max_wait))
            }
        }
    }

    /// Pauses `key` for `duration` for every instance: the bucket is empty
    /// until then (on Redis' clock) and every reservation already made
    /// moves past it, in its order; a pause that ends no later than one
    /// already on changes nothing. The shift it gave (zero: covered
    /// already), or `None` when Redis could not be told.
    ///
    /// A shift is news for the instances already waiting: it is published
    /// on the prefix's pause channel (a second command, within the
    /// deadline; pauses are rare) for the limiters that listen (see
    /// [`with_pause_news`](Self::with_pause_news)), and this limiter's own
    /// waiters are told at once.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a window; [`Error::InvalidNumber`] for a
    /// zero pause.
    pub async fn pause(
        &self,
        key: impl AsRef<[u8]>,
        duration: Duration,
    ) -> Result<Option<Duration>, Error> {
        let call = Arc::new(self.engine.begin_pause(None, key.as_ref(), duration)?);
        let answer = self.run(&call).await;
        self.engine.misconfigured(&answer.outcome())?;
        let paused = self.engine.finish_pause(answer.outcome());
        self.tell();
        if let Some((start_us, shift)) = paused
            && let Some(news) = self.engine.pause_news(&call, start_us, shift)
        {
            let mut conn = self.conn.clone();
            let mut command = redis::cmd("PUBLISH");
            command.arg(self.engine.pause_channel()).arg(news);
            let publish = command.query_async::<redis::Value>(&mut conn);
            // Not told (Redis down since the pause): the waiters of other
            // instances go ahead at their old times; nothing to undo.
            let _ = tokio::time::timeout(self.engine.timeout(), publish).await;
        }
        Ok(paused.map(|(_, shift)| shift))
    }

    /// Lifts the pause on `key` for every instance, on Redis' clock, if
    /// nothing was built on it (see [`Engine::begin_resume`]): one script
    /// call. [`Resumed::Lifted`]: the bucket is empty now and refills at
    /// its rate; [`Resumed::NotPaused`]; [`Resumed::Queued`]: reservations
    /// stand behind the pause, which ends when it was to end. `None` when
    /// Redis could not be told (the pause stays on).
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a window; a misconfigured server's error.
    pub async fn resume(&self, key: impl AsRef<[u8]>) -> Result<Option<Resumed>, Error> {
        let call = Arc::new(self.engine.begin_resume(None, key.as_ref())?);
        let answer = self.run(&call).await;
        self.engine.misconfigured(&answer.outcome())?;
        let resumed = self.engine.finish_resume(answer.outcome());
        self.tell();
        Ok(resumed)
    }

    /// What the fleet has learned of the partner's real limit for `key`
    /// (see [`Engine::learned`]): the word the last reply for `key` carried,
    /// without I/O — the fresh word (the ceiling) before any.
    pub fn learned(&self, key: impl AsRef<[u8]>) -> Learned {
        self.engine.learned(None, key.as_ref())
    }

    /// Replaces `key`'s learned word `seen` with `next` for every instance,
    /// if it is still `seen` (one script call, within the deadline; see
    /// [`Engine::begin_adapt`]): `Ok(true)` when it did, `Ok(false)` when
    /// another instance changed it first. The bucket runs at `next`'s share
    /// of the configured quota ([`Learned::scale`]) from then on.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`] when Redis could not be told (down,
    /// slow, the breaker open: nothing learned; no fail policy answers it);
    /// [`Error::Unsupported`] for a window; a misconfigured server's error.
    pub async fn adapt(
        &self,
        key: impl AsRef<[u8]>,
        seen: Learned,
        next: Learned,
    ) -> Result<bool, Error> {
        self.adapt_with(key.as_ref(), seen, next, None).await
    }

    /// [`adapt`](Self::adapt) judged at `now_us` (µs) instead of Redis'
    /// `TIME`: the explicit-time twin, for tests and vectors.
    ///
    /// # Errors
    /// As [`adapt`](Self::adapt).
    pub async fn adapt_at(
        &self,
        key: impl AsRef<[u8]>,
        seen: Learned,
        next: Learned,
        now_us: u64,
    ) -> Result<bool, Error> {
        self.adapt_with(key.as_ref(), seen, next, Some(now_us))
            .await
    }

    async fn adapt_with(
        &self,
        key: &[u8],
        seen: Learned,
        next: Learned,
        now_us: Option<u64>,
    ) -> Result<bool, Error> {
        let call = self.engine.begin_adapt(None, key, seen, next)?;
        let call = Arc::new(match now_us {
            Some(now) => call.at(now),
            None => call,
        });
        let answer = self.run(&call).await;
        self.engine.misconfigured(&answer.outcome())?;
        let done = self.engine.finish_adapt_news(&call, answer.outcome());
        self.tell();
        if let Ok((_, Some(news))) = &done {
            // Published on the prefix's channel as a pause is, within the
            // deadline.
            let mut conn = self.conn.clone();
            let mut command = redis::cmd("PUBLISH");
            command.arg(self.engine.pause_channel()).arg(news);
            let publish = command.query_async::<redis::Value>(&mut conn);
            let _ = tokio::time::timeout(self.engine.timeout(), publish).await;
        }
        done.map(|(replaced, _)| replaced)
    }

    /// Runs a reservation's `call` on a task of its own, so that it
    /// outlives the caller's future: if that future is dropped once the
    /// call may have reached Redis, the reply still comes, and what it
    /// reserved is given back ([`Engine::orphaned`]) — a reservation made
    /// for a caller gone is never lost.
    async fn run_owned(&self, call: Arc<Call>) -> Answer {
        let limiter = self.clone();
        let sent = call.clone();
        let mut flight = Flight {
            handle: Some(tokio::spawn(async move { limiter.run(&sent).await })),
            call,
            limiter: self.clone(),
        };
        let answer = match flight.handle.as_mut() {
            Some(handle) => handle.await,
            None => unreachable!("set above"),
        };
        flight.handle = None;
        answer.unwrap_or_else(|e| Answer::Failed(format!("the call's task failed: {e}")))
    }

    async fn run(&self, call: &Arc<Call>) -> Answer {
        self.pump.run(call, &self.engine).await
    }
}

/// The text of a failed call, for the engine and for
/// [`misconfiguration`](crate::misconfiguration): the `redis` crate's own
/// words, and for a refused `AUTH` (whose server reply the crate drops:
/// "Password authentication failed") the server's code for it,
/// `WRONGPASS`, so that a wrong password or user is told from an outage.
pub fn failure_text(e: &redis::RedisError) -> String {
    if e.kind() == redis::ErrorKind::AuthenticationFailed {
        return format!("WRONGPASS {e}");
    }
    e.to_string()
}
