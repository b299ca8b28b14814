//! The clock, the decision and the five algorithms (plus `AllOf`) as classes.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratebound::any::{self, AnyClock, AnyLimiter, Rate};
use ratebound::{Error as CoreError, Limiter, Permit};

use crate::error::{OrThrow, invalid_type};
use crate::fast;

/// A clock moved only by hand, for tests: it starts at 0 and every limiter
/// given it as `clock` decides at its time. Thread-safe and shared: any
/// number of limiters may use one clock.
#[napi]
pub struct ManualClock {
    pub(crate) inner: ratebound::ManualClock,
}

#[napi]
impl ManualClock {
    /// A new clock at time 0.
    #[napi(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> ManualClock {
        ManualClock {
            inner: ratebound::ManualClock::new(),
        }
    }

    /// Moves the clock forward by `seconds` (a finite number ≥ 0).
    #[napi(ts_args_type = "seconds: number")]
    pub fn advance(&self, env: Env, seconds: Option<Unknown<'_>>) -> Result<()> {
        let seconds = number(loose_number(&env, &seconds, "seconds")?, "seconds").or_throw(&env)?;
        let by = any::seconds("seconds", seconds).or_throw(&env)?;
        self.inner.advance(by);
        Ok(())
    }

    /// Moves the clock forward by a whole number of nanoseconds.
    #[napi]
    pub fn advance_nanos(&self, env: Env, nanos: f64) -> Result<()> {
        let nanos = any::whole("nanos", nanos, 0).or_throw(&env)?;
        self.inner.advance_nanos(nanos);
        Ok(())
    }

    /// Sets the time to a whole number of nanoseconds since the clock's
    /// epoch (it may move backwards: limiters tolerate that).
    #[napi]
    pub fn set_nanos(&self, env: Env, nanos: f64) -> Result<()> {
        let nanos = any::whole("nanos", nanos, 0).or_throw(&env)?;
        self.inner.set_nanos(nanos);
        Ok(())
    }

    /// The time in seconds since the clock's epoch.
    #[napi]
    pub fn now(&self) -> f64 {
        ratebound::Clock::now(&self.inner) as f64 / 1e9
    }

    /// The time in nanoseconds since the clock's epoch (exact up to 2^53).
    #[napi]
    pub fn now_nanos(&self) -> f64 {
        ratebound::Clock::now(&self.inner) as f64
    }
}

/// The clock option: a `ManualClock`, or the process's monotonic clock.
pub fn clock_of(clock: Option<&ManualClock>) -> AnyClock {
    match clock {
        Some(c) => AnyClock::Manual(c.inner.clone()),
        None => AnyClock::default(),
    }
}

/// The answer to one check. A refusal is a decision with `allowed: false`,
/// never an exception.
#[napi(object)]
pub struct Decision {
    /// Whether the request was admitted (and its tokens taken).
    pub allowed: bool,
    /// The most the limiter admits at once (the burst, or the window's limit).
    pub limit: f64,
    /// Whole tokens left after this decision.
    pub remaining: f64,
    /// Seconds until the same request would be admitted (exact to the
    /// nanosecond); 0 when allowed.
    pub retry_after: f64,
    /// Seconds until the limiter is full again.
    pub reset_after: f64,
}

impl From<ratebound::Decision> for Decision {
    fn from(d: ratebound::Decision) -> Decision {
        Decision {
            allowed: d.is_allowed(),
            limit: d.limit() as f64,
            remaining: d.remaining() as f64,
            retry_after: d.retry_after_nanos() as f64 / 1e9,
            reset_after: d.reset_after_nanos() as f64 / 1e9,
        }
    }
}

/// The rate option: tokens per second, or a quota string.
pub type RateOption = Either<f64, String>;

/// An option as JavaScript gave it; `null` and `undefined` mean "not given".
pub type Loose<'a> = Option<Unknown<'a>>;

fn given<'a>(value: &Loose<'a>) -> Result<Option<(ValueType, Unknown<'a>)>> {
    match value {
        None => Ok(None),
        Some(v) => match v.get_type()? {
            ValueType::Undefined | ValueType::Null => Ok(None),
            t => Ok(Some((t, *v))),
        },
    }
}

/// A number option (`null`/`undefined`: not given).
pub fn loose_number(env: &Env, value: &Loose<'_>, name: &str) -> Result<Option<f64>> {
    match given(value)? {
        None => Ok(None),
        Some((ValueType::Number, v)) => Ok(Some(f64::from_unknown(v)?)),
        Some(_) => Err(invalid_type(env, &format!("{name} must be a number"))),
    }
}

/// A rate option: a number or a quota string (`null`/`undefined`: not given).
pub fn loose_rate(env: &Env, value: &Loose<'_>) -> Result<Option<RateOption>> {
    match given(value)? {
        None => Ok(None),
        Some((ValueType::Number, v)) => Ok(Some(Either::A(f64::from_unknown(v)?))),
        Some((ValueType::String, v)) => Ok(Some(Either::B(String::from_unknown(v)?))),
        Some(_) => Err(invalid_type(
            env,
            "rate must be a number (per second) or a quota string such as '10/s'",
        )),
    }
}

/// A missing required option, as the core names it.
pub fn required(name: &'static str) -> CoreError {
    CoreError::Missing { name }
}

/// `rate` as the core takes it.
pub fn rate_of(rate: &Option<RateOption>) -> std::result::Result<Rate<'_>, CoreError> {
    match rate {
        Some(Either::A(r)) => Ok(Rate::PerSecond(*r)),
        Some(Either::B(s)) => Ok(Rate::Text(s)),
        None => Err(required("rate")),
    }
}

/// A required number option.
pub fn number(value: Option<f64>, name: &'static str) -> std::result::Result<f64, CoreError> {
    value.ok_or_else(|| required(name))
}

/// `n` as a count of tokens (default 1).
pub fn tokens(env: &Env, n: Option<f64>) -> Result<u64> {
    match n {
        None => Ok(1),
        Some(n) => any::whole("n", n, 0).or_throw(env),
    }
}

/// Options of `new TokenBucket(...)`.
#[napi(object, object_to_js = false)]
pub struct TokenBucketOptions<'a> {
    /// Tokens per second (`2`), or a quota string (`'2/s'`, `'100/minute'`,
    /// `'10/s burst 20'`).
    #[napi(ts_type = "number | string")]
    pub rate: Option<Unknown<'a>>,
    /// The most tokens held at once (a whole number ≥ 1); default: the
    /// quota string's burst, else 1.
    #[napi(ts_type = "number")]
    pub burst: Option<Unknown<'a>>,
    /// A `ManualClock` to decide with (default: the monotonic clock).
    pub clock: Option<&'static ManualClock>,
}

/// Options of `new FixedWindow(...)`, `new SlidingWindow(...)` and
/// `new SlidingLog(...)`.
#[napi(object, object_to_js = false)]
pub struct WindowOptions<'a> {
    /// Requests admitted per window (a whole number ≥ 1).
    #[napi(ts_type = "number")]
    pub limit: Option<Unknown<'a>>,
    /// The window in seconds.
    #[napi(ts_type = "number")]
    pub window: Option<Unknown<'a>>,
    /// A `ManualClock` to decide with (default: the monotonic clock).
    pub clock: Option<&'static ManualClock>,
}

/// Options of `new LeakyBucket(...)`.
#[napi(object, object_to_js = false)]
pub struct LeakyBucketOptions<'a> {
    /// Departures per second, or a quota string.
    #[napi(ts_type = "number | string")]
    pub rate: Option<Unknown<'a>>,
    /// The longest a request may wait in the queue, in seconds: a request
    /// that would leave later is refused.
    #[napi(ts_type = "number")]
    pub max_delay: Option<Unknown<'a>>,
    /// A `ManualClock` to decide with (default: the monotonic clock).
    pub clock: Option<&'static ManualClock>,
}

/// The state every limiter class shares: the core limiter and its slot in
/// the fast-path table.
pub struct Shared {
    pub(crate) limiter: Arc<AnyLimiter>,
    handle: u32,
}

impl Shared {
    fn new(limiter: AnyLimiter) -> Shared {
        let limiter = Arc::new(limiter);
        Shared {
            handle: fast::register_limiter(limiter.clone()),
            limiter,
        }
    }

    fn check(&self, env: &Env, n: Option<f64>) -> Result<Decision> {
        let n = tokens(env, n)?;
        self.limiter.check_n(n).map(Decision::from).or_throw(env)
    }

    fn peek(&self, env: &Env, n: Option<f64>) -> Result<Decision> {
        let n = tokens(env, n)?;
        self.limiter
            .peek_n_at(n, self.limiter.now())
            .map(Decision::from)
            .or_throw(env)
    }

    fn waiter(&self, env: &Env, n: f64, timeout: Option<f64>) -> Result<Waiter> {
        let n = any::whole("n", n, 0).or_throw(env)?;
        Waiter::new(env, self.limiter.waiter(n, timeout, HOST_MAX_SLEEP))
    }

    fn wait_step(&self, env: &Env, waiter: &Waiter) -> Result<Vec<f64>> {
        step_to_js(env, self.limiter.wait_step(&mut waiter.state.borrow_mut()))
    }

    fn abandon_wait(&self, env: &Env, waiter: &Waiter) -> Result<()> {
        self.limiter
            .abandon(&mut waiter.state.borrow_mut())
            .or_throw(env)
    }

    fn reserve(&self, env: &Env, n: Option<f64>, max_wait: Option<f64>) -> Result<Reservation> {
        let n = tokens(env, n)?;
        let max_wait = match max_wait {
            Some(m) => Some(any::seconds("maxWait", m).or_throw(env)?),
            None => None,
        };
        let now = self.limiter.now();
        let (wait, permit) = self.limiter.reserve_n_at(n, max_wait, now).or_throw(env)?;
        Ok(Reservation {
            limiter: Holder::Local(self.limiter.clone()),
            permit: Cell::new(Some(permit)),
            wait,
        })
    }

    fn pause(&self, env: &Env, seconds: f64) -> Result<()> {
        self.limiter.pause(seconds).or_throw(env)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        fast::unregister_limiter(self.handle);
    }
}

/// Tokens taken ahead of time by `reserve`: act after `delay` seconds, or
/// `cancel()` to give them back (as far as no later taker depends on them).
#[napi]
pub struct Reservation {
    pub(crate) limiter: Holder,
    pub(crate) permit: Cell<Option<Permit>>,
    pub(crate) wait: u64,
}

/// Whose tokens a [`Reservation`] holds.
pub(crate) enum Holder {
    /// A local limiter's.
    Local(Arc<AnyLimiter>),
    /// A shared-memory bucket's.
    Shared(Arc<ratebound_shm::SharedLimiter>),
}

#[napi]
impl Reservation {
    /// Seconds to wait before acting (exact to the nanosecond).
    #[napi(getter)]
    pub fn delay(&self) -> f64 {
        self.wait as f64 / 1e9
    }

    /// Nanoseconds to wait before acting.
    #[napi(getter)]
    pub fn delay_nanos(&self) -> f64 {
        self.wait as f64
    }

    /// Gives the tokens back; a second call does nothing.
    #[napi]
    pub fn cancel(&self) {
        if let Some(permit) = self.permit.take() {
            match &self.limiter {
                Holder::Local(l) => l.release(permit),
                // Issued by this handle: never foreign.
                Holder::Shared(l) => {
                    let _ = l.release(permit);
                }
            }
        }
    }
}

/// A host timer holds at most 2^31 − 1 ms (about 24.8 days; a longer
/// `setTimeout` fires after 1 ms): the core's waiter never asks for more.
pub const HOST_MAX_SLEEP: u64 = ((1 << 31) - 1) * 1_000_000;

/// One caller's wait, made and driven by `acquire` (internal: it has no
/// methods of its own): the deadline, the tokens it holds, when it is over.
#[napi]
pub struct Waiter {
    pub(crate) state: RefCell<any::Waiter>,
}

impl Waiter {
    /// Wraps a core waiter just made, or throws its error.
    pub fn new(env: &Env, made: std::result::Result<any::Waiter, CoreError>) -> Result<Waiter> {
        Ok(Waiter {
            state: RefCell::new(made.or_throw(env)?),
        })
    }
}

/// A wait step for JavaScript: `[0, 0]` done, `[2, nanos]` sleep that long
/// and step again, `[3, nanos]` the timeout cannot be met (nothing taken;
/// `nanos` is the wait that would have been needed).
pub fn step_to_js(env: &Env, step: std::result::Result<any::Wait, CoreError>) -> Result<Vec<f64>> {
    match step {
        Ok(any::Wait::Done) => Ok(vec![0.0, 0.0]),
        Ok(any::Wait::Sleep(nanos)) => Ok(vec![2.0, nanos as f64]),
        Err(CoreError::DeadlineExceeded { wait, .. }) => Ok(vec![3.0, wait.as_nanos() as f64]),
        Err(e) => Err(crate::error::throw(env, &e)),
    }
}

macro_rules! limiter_class {
    ($name:ident) => {
        #[napi]
        impl $name {
            /// Takes `n` tokens (default 1) now if all `n` are there, and
            /// says so. A refusal is a decision, never an exception.
            ///
            /// @throws {RangeError} `ERR_RATEBOUND_INSUFFICIENT_CAPACITY` when
            /// `n` is more than the limiter ever admits at once.
            #[napi]
            pub fn check(&self, env: Env, n: Option<f64>) -> Result<Decision> {
                self.shared.check(&env, n)
            }

            /// Takes one token now if it is there: the decision only, with
            /// no object created (the fastest call).
            #[napi]
            pub fn try_acquire(&self) -> bool {
                self.shared.limiter.try_acquire()
            }

            /// What `check(n)` would answer now, taking nothing.
            #[napi]
            pub fn peek(&self, env: Env, n: Option<f64>) -> Result<Decision> {
                self.shared.peek(&env, n)
            }

            /// How many tokens could be taken now.
            #[napi]
            pub fn available(&self) -> f64 {
                self.shared.limiter.available() as f64
            }

            /// The most the limiter admits at once.
            #[napi(getter)]
            pub fn limit(&self) -> f64 {
                self.shared.limiter.limit() as f64
            }

            /// The algorithm: `"token_bucket"`, `"fixed_window"`,
            /// `"sliding_window"`, `"sliding_log"`, `"leaky_bucket"` or
            /// `"all_of"`.
            #[napi(getter)]
            pub fn algorithm(&self) -> &'static str {
                self.shared.limiter.algorithm()
            }

            /// Empties a token bucket for `seconds` (a partner's
            /// `Retry-After`): no token before then, refilling at the rate
            /// afterwards. A pause ending no later than one already on
            /// changes nothing; reservations already held keep their time.
            ///
            /// @throws {RangeError} `ERR_RATEBOUND_INVALID_NUMBER` for
            /// `seconds` that are not a finite number ≥ 0; {TypeError}
            /// `ERR_RATEBOUND_UNSUPPORTED` for the other algorithms.
            #[napi]
            pub fn pause(&self, env: Env, seconds: f64) -> Result<()> {
                self.shared.pause(&env, seconds)
            }

            /// Takes `n` tokens (default 1) now even if they are not there
            /// yet, as long as they will be within `maxWait` seconds
            /// (default: any wait): act after `reservation.delay` seconds,
            /// or `cancel()` to give them back.
            ///
            /// @throws {RangeError} `ERR_RATEBOUND_DEADLINE_EXCEEDED` (nothing
            /// taken) when the wait would be longer; {TypeError}
            /// `ERR_RATEBOUND_UNSUPPORTED` for the windows and the log.
            #[napi]
            pub fn reserve(
                &self,
                env: Env,
                n: Option<f64>,
                max_wait: Option<f64>,
            ) -> Result<Reservation> {
                self.shared.reserve(&env, n, max_wait)
            }

            /// The slot of the fast entry points (internal).
            #[napi(getter, skip_typescript)]
            pub fn handle(&self) -> u32 {
                self.shared.handle
            }

            /// A wait for `n` tokens (internal: `acquire`).
            #[napi(skip_typescript)]
            pub fn waiter(&self, env: Env, n: f64, timeout: Option<f64>) -> Result<Waiter> {
                self.shared.waiter(&env, n, timeout)
            }

            /// One step of a wait (internal: `acquire`).
            #[napi(skip_typescript)]
            pub fn wait_step(&self, env: Env, waiter: &Waiter) -> Result<Vec<f64>> {
                self.shared.wait_step(&env, waiter)
            }

            /// Ends a wait early, giving back what it holds (internal).
            #[napi(skip_typescript)]
            pub fn abandon_wait(&self, env: Env, waiter: &Waiter) -> Result<()> {
                self.shared.abandon_wait(&env, waiter)
            }
        }
    };
}

/// A token bucket (GCRA): at most `burst` tokens, refilled at `rate` per
/// second, starting full. One 64-bit word of state, updated lock-free;
/// `retryAfter` is exact to the nanosecond.
///
/// ```js
/// const tb = new TokenBucket({ rate: 2, burst: 3 })   // or rate: '2/s'
/// if (tb.tryAcquire()) { ... }
/// const d = tb.check(); d.allowed, d.remaining, d.retryAfter
/// ```
#[napi]
pub struct TokenBucket {
    shared: Shared,
}

#[napi]
impl TokenBucket {
    /// A token bucket of `rate` per second holding at most `burst`.
    ///
    /// @throws {RangeError} `ERR_RATEBOUND_INVALID_RATE`,
    /// `ERR_RATEBOUND_INVALID_NUMBER`, ... for a rate or burst that is not
    /// usable; {TypeError} `ERR_RATEBOUND_PARSE_ERROR` for a quota string
    /// that does not parse.
    #[napi(constructor)]
    pub fn new(env: Env, options: Option<TokenBucketOptions<'_>>) -> Result<TokenBucket> {
        let o = options.ok_or_else(|| invalid_type(&env, "options are required"))?;
        let rate = loose_rate(&env, &o.rate)?;
        let burst = loose_number(&env, &o.burst, "burst")?;
        let limiter = rate_of(&rate)
            .and_then(|rate| AnyLimiter::token_bucket(rate, burst, clock_of(o.clock)))
            .or_throw(&env)?;
        Ok(TokenBucket {
            shared: Shared::new(limiter),
        })
    }

    /// Replaces the quota, keeping what was taken: `rate` per second (or a
    /// quota string) with `burst`.
    #[napi(ts_args_type = "rate: number | string, burst?: number")]
    pub fn set_quota(&self, env: Env, rate: RateOption, burst: Option<f64>) -> Result<()> {
        let rate = Some(rate);
        let rate = rate_of(&rate).or_throw(&env)?;
        let q = any::quota(rate, burst).or_throw(&env)?;
        let l = &self.shared.limiter;
        l.set_quota_at(q, l.now()).or_throw(&env)
    }
}
limiter_class!(TokenBucket);

/// A fixed window: `limit` requests per aligned `window` seconds. Simple,
/// but up to twice the limit can pass across a window boundary.
#[napi]
pub struct FixedWindow {
    shared: Shared,
}

#[napi]
impl FixedWindow {
    /// `limit` per `window` seconds.
    #[napi(constructor)]
    pub fn new(env: Env, options: Option<WindowOptions<'_>>) -> Result<FixedWindow> {
        let o = options.ok_or_else(|| invalid_type(&env, "options are required"))?;
        let (limit, window) = (
            loose_number(&env, &o.limit, "limit")?,
            loose_number(&env, &o.window, "window")?,
        );
        let limiter = number(limit, "limit")
            .and_then(|l| Ok((l, number(window, "window")?)))
            .and_then(|(l, w)| AnyLimiter::fixed_window(l, w, clock_of(o.clock)))
            .or_throw(&env)?;
        Ok(FixedWindow {
            shared: Shared::new(limiter),
        })
    }
}
limiter_class!(FixedWindow);

/// A sliding window counter: the current window's count plus the previous
/// window's, weighted by how much of it still overlaps. One word of state;
/// an approximation of the exact `SlidingLog`.
#[napi]
pub struct SlidingWindow {
    shared: Shared,
}

#[napi]
impl SlidingWindow {
    /// `limit` per sliding `window` seconds.
    #[napi(constructor)]
    pub fn new(env: Env, options: Option<WindowOptions<'_>>) -> Result<SlidingWindow> {
        let o = options.ok_or_else(|| invalid_type(&env, "options are required"))?;
        let (limit, window) = (
            loose_number(&env, &o.limit, "limit")?,
            loose_number(&env, &o.window, "window")?,
        );
        let limiter = number(limit, "limit")
            .and_then(|l| Ok((l, number(window, "window")?)))
            .and_then(|(l, w)| AnyLimiter::sliding_window(l, w, clock_of(o.clock)))
            .or_throw(&env)?;
        Ok(SlidingWindow {
            shared: Shared::new(limiter),
        })
    }
}
limiter_class!(SlidingWindow);

/// A sliding log: exactly `limit` per any `window` seconds, keeping one
/// timestamp per admitted request (memory grows with the limit).
#[napi]
pub struct SlidingLog {
    shared: Shared,
}

#[napi]
impl SlidingLog {
    /// `limit` per any `window` seconds.
    #[napi(constructor)]
    pub fn new(env: Env, options: Option<WindowOptions<'_>>) -> Result<SlidingLog> {
        let o = options.ok_or_else(|| invalid_type(&env, "options are required"))?;
        let (limit, window) = (
            loose_number(&env, &o.limit, "limit")?,
            loose_number(&env, &o.window, "window")?,
        );
        let limiter = number(limit, "limit")
            .and_then(|l| Ok((l, number(window, "window")?)))
            .and_then(|(l, w)| AnyLimiter::sliding_log(l, w, clock_of(o.clock)))
            .or_throw(&env)?;
        Ok(SlidingLog {
            shared: Shared::new(limiter),
        })
    }
}
limiter_class!(SlidingLog);

/// A leaky bucket (a queue): departures exactly `1/rate` seconds apart; a
/// request is admitted only if its turn comes within `maxDelay` seconds.
/// With `acquire`, callers wait for their turn.
#[napi]
pub struct LeakyBucket {
    shared: Shared,
}

#[napi]
impl LeakyBucket {
    /// `rate` departures per second, waits of at most `maxDelay` seconds.
    #[napi(constructor)]
    pub fn new(env: Env, options: Option<LeakyBucketOptions<'_>>) -> Result<LeakyBucket> {
        let o = options.ok_or_else(|| invalid_type(&env, "options are required"))?;
        let rate = loose_rate(&env, &o.rate)?;
        let max_delay = loose_number(&env, &o.max_delay, "maxDelay")?;
        let limiter = rate_of(&rate)
            .and_then(|r| Ok((r, number(max_delay, "maxDelay")?)))
            .and_then(|(r, m)| AnyLimiter::leaky_bucket(r, m, clock_of(o.clock)))
            .or_throw(&env)?;
        Ok(LeakyBucket {
            shared: Shared::new(limiter),
        })
    }
}
limiter_class!(LeakyBucket);

/// Several limiters as one, all or nothing: a request is admitted only if
/// every member admits it, and members that admitted give their tokens back
/// when another refuses.
#[napi]
pub struct AllOf {
    shared: Shared,
}

/// A member of an `AllOf`.
pub type Member<'a> =
    Either5<&'a TokenBucket, &'a FixedWindow, &'a SlidingWindow, &'a SlidingLog, &'a LeakyBucket>;

#[napi]
impl AllOf {
    /// All of `members` (at least one) at once.
    #[napi(
        constructor,
        ts_args_type = "members: Array<TokenBucket | FixedWindow | SlidingWindow | SlidingLog | LeakyBucket>"
    )]
    pub fn new(env: Env, members: Vec<Member<'static>>) -> Result<AllOf> {
        let members = members
            .into_iter()
            .map(|m| match m {
                Either5::A(l) => l.shared.limiter.clone(),
                Either5::B(l) => l.shared.limiter.clone(),
                Either5::C(l) => l.shared.limiter.clone(),
                Either5::D(l) => l.shared.limiter.clone(),
                Either5::E(l) => l.shared.limiter.clone(),
            })
            .collect();
        let limiter = AnyLimiter::all_of(members).or_throw(&env)?;
        Ok(AllOf {
            shared: Shared::new(limiter),
        })
    }
}
limiter_class!(AllOf);
