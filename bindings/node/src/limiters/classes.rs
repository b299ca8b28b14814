//! The five algorithms and `AllOf` as classes: their options, the state
//! and the methods every class shares (`limiter_class!`), their
//! constructors.

use std::cell::Cell;
use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratebound::Limiter;
use ratebound::any::{self, AnyLimiter};

use super::clock::ManualClock;
use super::decision::Decision;
use super::options::{RateOption, clock_of, loose_number, loose_rate, number, rate_of, tokens};
use super::reservation::{Holder, Reservation};
use super::wait::{HOST_MAX_SLEEP, Waiter, step_to_js};
use crate::error::{OrThrow, invalid_type};
use crate::fast;

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

/// What every limiter class holds: the core limiter and its slot in the
/// fast-path table.
pub struct LimiterSlot {
    pub(crate) limiter: Arc<AnyLimiter>,
    handle: u32,
}

impl LimiterSlot {
    fn new(limiter: AnyLimiter) -> LimiterSlot {
        let limiter = Arc::new(limiter);
        LimiterSlot {
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

    fn waiter(&self, env: &Env, n: Option<f64>, timeout: Option<f64>) -> Result<Waiter> {
        let n = tokens(env, n)?;
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

    fn resume(&self, env: &Env) -> Result<&'static str> {
        self.limiter.resume().map(|r| r.as_str()).or_throw(env)
    }
}

impl Drop for LimiterSlot {
    fn drop(&mut self) {
        fast::unregister_limiter(self.handle);
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
                self.slot.check(&env, n)
            }

            /// Takes one token (or `n`) now if it is there: the decision
            /// only, with no object created (without `n`, the fastest call).
            #[napi(ts_args_type = "n?: number")]
            pub fn try_acquire(&self) -> bool {
                self.slot.limiter.try_acquire()
            }

            /// What `check(n)` would answer now, taking nothing.
            #[napi]
            pub fn peek(&self, env: Env, n: Option<f64>) -> Result<Decision> {
                self.slot.peek(&env, n)
            }

            /// How many tokens could be taken now.
            #[napi]
            pub fn available(&self) -> f64 {
                self.slot.limiter.available() as f64
            }

            /// The most the limiter admits at once.
            #[napi(getter)]
            pub fn limit(&self) -> f64 {
                self.slot.limiter.limit() as f64
            }

            /// The algorithm: `"token_bucket"`, `"fixed_window"`,
            /// `"sliding_window"`, `"sliding_log"`, `"leaky_bucket"` or
            /// `"all_of"`.
            #[napi(getter)]
            pub fn algorithm(&self) -> &'static str {
                self.slot.limiter.algorithm()
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
                self.slot.pause(&env, seconds)
            }

            /// Lifts a token bucket's pause now if nothing was built on it:
            /// `'lifted'` (empty now, refilling at the rate from now on),
            /// `'not_paused'`, or `'queued'` (reservations stand behind the
            /// pause: nothing changes, it ends when it was to end).
            ///
            /// @throws {TypeError} `ERR_RATEBOUND_UNSUPPORTED` for the other
            /// algorithms.
            #[napi(ts_return_type = "'lifted' | 'not_paused' | 'queued'")]
            pub fn resume(&self, env: Env) -> Result<&'static str> {
                self.slot.resume(&env)
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
                self.slot.reserve(&env, n, max_wait)
            }

            /// The slot of the fast entry points (internal).
            #[napi(getter, skip_typescript)]
            pub fn handle(&self) -> u32 {
                self.slot.handle
            }

            /// A wait for `n` tokens (internal: `acquire`).
            #[napi(skip_typescript)]
            pub fn waiter(&self, env: Env, n: Option<f64>, timeout: Option<f64>) -> Result<Waiter> {
                self.slot.waiter(&env, n, timeout)
            }

            /// One step of a wait (internal: `acquire`).
            #[napi(skip_typescript)]
            pub fn wait_step(&self, env: Env, waiter: &Waiter) -> Result<Vec<f64>> {
                self.slot.wait_step(&env, waiter)
            }

            /// Ends a wait early, giving back what it holds (internal).
            #[napi(skip_typescript)]
            pub fn abandon_wait(&self, env: Env, waiter: &Waiter) -> Result<()> {
                self.slot.abandon_wait(&env, waiter)
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
    slot: LimiterSlot,
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
            slot: LimiterSlot::new(limiter),
        })
    }

    /// Replaces the quota, keeping what was taken: `rate` per second (or a
    /// quota string) with `burst`.
    #[napi(ts_args_type = "rate: number | string, burst?: number")]
    pub fn set_quota(&self, env: Env, rate: RateOption, burst: Option<f64>) -> Result<()> {
        let rate = Some(rate);
        let rate = rate_of(&rate).or_throw(&env)?;
        let q = any::quota(rate, burst).or_throw(&env)?;
        let l = &self.slot.limiter;
        l.set_quota_at(q, l.now()).or_throw(&env)
    }
}
limiter_class!(TokenBucket);

/// A fixed window: `limit` requests per aligned `window` seconds. Simple,
/// but up to twice the limit can pass across a window boundary.
#[napi]
pub struct FixedWindow {
    slot: LimiterSlot,
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
            slot: LimiterSlot::new(limiter),
        })
    }
}
limiter_class!(FixedWindow);

/// A sliding window counter: the current window's count plus the previous
/// window's, weighted by how much of it still overlaps. One word of state;
/// an approximation of the exact `SlidingLog`.
#[napi]
pub struct SlidingWindow {
    slot: LimiterSlot,
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
            slot: LimiterSlot::new(limiter),
        })
    }
}
limiter_class!(SlidingWindow);

/// A sliding log: exactly `limit` per any `window` seconds, keeping one
/// timestamp per admitted request (memory grows with the limit).
#[napi]
pub struct SlidingLog {
    slot: LimiterSlot,
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
            slot: LimiterSlot::new(limiter),
        })
    }
}
limiter_class!(SlidingLog);

/// A leaky bucket (a queue): departures exactly `1/rate` seconds apart; a
/// request is admitted only if its turn comes within `maxDelay` seconds.
/// With `acquire`, callers wait for their turn.
#[napi]
pub struct LeakyBucket {
    slot: LimiterSlot,
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
            slot: LimiterSlot::new(limiter),
        })
    }
}
limiter_class!(LeakyBucket);

/// Several limiters as one, all or nothing: a request is admitted only if
/// every member admits it, and members that admitted give their tokens back
/// when another refuses.
#[napi]
pub struct AllOf {
    slot: LimiterSlot,
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
                Either5::A(l) => l.slot.limiter.clone(),
                Either5::B(l) => l.slot.limiter.clone(),
                Either5::C(l) => l.slot.limiter.clone(),
                Either5::D(l) => l.slot.limiter.clone(),
                Either5::E(l) => l.slot.limiter.clone(),
            })
            .collect();
        let limiter = AnyLimiter::all_of(members).or_throw(&env)?;
        Ok(AllOf {
            slot: LimiterSlot::new(limiter),
        })
    }
}
limiter_class!(AllOf);
