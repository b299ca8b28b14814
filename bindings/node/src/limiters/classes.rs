//! The five algorithms and `AllOf` as classes: their options, the state
//! and the methods every class shares (`limiter_class!`), their
//! constructors.

use std::cell::Cell;
use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratebound::Error as CoreError;
use ratebound::Limiter;
use ratebound::any::{self, AnyClock, AnyLimiter, Rate};
use ratebound::outbound::{Learned, Learning};

use super::clock::ManualClock;
use super::decision::Decision;
use super::options::{
    Loose, RateOption, clock_of, loose_number, loose_rate, number, rate_of, tokens,
};
use super::reservation::{Holder, Reservation};
use super::wait::{HOST_MAX_SLEEP, Waiter, core_step};
use crate::error::{OrThrow, invalid_type};
use crate::fast;
use crate::slab::Registered;

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

/// What every limiter class holds: the core limiter, numbered in the
/// fast-path table.
pub struct LimiterSlot {
    pub(crate) limiter: Registered<AnyLimiter>,
}

impl LimiterSlot {
    fn new(limiter: AnyLimiter) -> LimiterSlot {
        LimiterSlot {
            limiter: Registered::new(
                Arc::new(limiter),
                fast::register_limiter,
                fast::unregister_limiter,
            ),
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
        core_step(env, self.limiter.wait_step(&mut waiter.state.borrow_mut()))
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

/// A limiter class's methods: `limiter_class!(Name)`, the methods every
/// class shares over its [`LimiterSlot`] (`self.0`); `limiter_class!(Name(
/// Options) = make)`, those and the constructor from `Options` (`make`: the
/// options to the core's limiter, which checks and defaults them).
macro_rules! limiter_class {
    ($name:ident($options:ident) = $make:expr) => {
        #[napi]
        impl $name {
            /// A limiter of these options (each option's rule is on its
            /// field).
            ///
            /// @throws {RangeError} `ERR_RATEBOUND_INVALID_RATE`,
            /// `ERR_RATEBOUND_INVALID_NUMBER`, ... for a number that is not
            /// usable; {TypeError} `ERR_INVALID_ARG_TYPE` for an option of
            /// another type, `ERR_RATEBOUND_PARSE_ERROR` for a quota string
            /// that does not parse.
            #[napi(constructor)]
            pub fn new(env: Env, options: Option<$options<'_>>) -> Result<$name> {
                let o = options.ok_or_else(|| invalid_type(&env, "options are required"))?;
                let make: fn(&Env, $options<'_>) -> Result<AnyLimiter> = $make;
                Ok($name(LimiterSlot::new(make(&env, o)?)))
            }
        }
        limiter_class!($name);
    };
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
                self.0.check(&env, n)
            }

            /// Takes one token (or `n`) now if it is there: the decision
            /// only, with no object created (without `n`, the fastest call).
            #[napi(ts_args_type = "n?: number")]
            pub fn try_acquire(&self) -> bool {
                self.0.limiter.try_acquire()
            }

            /// What `check(n)` would answer now, taking nothing.
            #[napi]
            pub fn peek(&self, env: Env, n: Option<f64>) -> Result<Decision> {
                self.0.peek(&env, n)
            }

            /// How many tokens could be taken now.
            #[napi]
            pub fn available(&self) -> f64 {
                self.0.limiter.available() as f64
            }

            /// The most the limiter admits at once.
            #[napi(getter)]
            pub fn limit(&self) -> f64 {
                self.0.limiter.limit() as f64
            }

            /// The algorithm: `"token_bucket"`, `"fixed_window"`,
            /// `"sliding_window"`, `"sliding_log"`, `"leaky_bucket"` or
            /// `"all_of"`.
            #[napi(getter)]
            pub fn algorithm(&self) -> &'static str {
                self.0.limiter.algorithm()
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
                self.0.pause(&env, seconds)
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
                self.0.resume(&env)
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
                self.0.reserve(&env, n, max_wait)
            }

            /// The slot of the fast entry points (internal).
            #[napi(getter, skip_typescript)]
            pub fn handle(&self) -> u32 {
                self.0.limiter.handle
            }

            /// A wait for `n` tokens (internal: `acquire`).
            #[napi(skip_typescript)]
            pub fn waiter(&self, env: Env, n: Option<f64>, timeout: Option<f64>) -> Result<Waiter> {
                self.0.waiter(&env, n, timeout)
            }

            /// One step of a wait (internal: `acquire`).
            #[napi(skip_typescript)]
            pub fn wait_step(&self, env: Env, waiter: &Waiter) -> Result<Vec<f64>> {
                self.0.wait_step(&env, waiter)
            }

            /// Ends a wait early, giving back what it holds (internal).
            #[napi(skip_typescript)]
            pub fn abandon_wait(&self, env: Env, waiter: &Waiter) -> Result<()> {
                self.0.abandon_wait(&env, waiter)
            }
        }
    };
}

/// A window class's constructor in the core: `limit` per `window` seconds.
type WindowMaker = fn(f64, f64, AnyClock) -> std::result::Result<AnyLimiter, CoreError>;

/// A window class's limiter from its options.
fn windowed(env: &Env, o: WindowOptions<'_>, make: WindowMaker) -> Result<AnyLimiter> {
    let limit = loose_number(env, &o.limit, "limit")?;
    let window = loose_number(env, &o.window, "window")?;
    number(limit, "limit")
        .and_then(|l| make(l, number(window, "window")?, clock_of(o.clock)))
        .or_throw(env)
}

/// A rated class's limiter: `rate` (tokens per second or a quota string)
/// and its other number option (`other`: the value and its name), by the
/// core's constructor `make`.
fn rated(
    env: &Env,
    rate: &Loose<'_>,
    other: (&Loose<'_>, &str),
    make: impl FnOnce(Rate<'_>, Option<f64>) -> std::result::Result<AnyLimiter, CoreError>,
) -> Result<AnyLimiter> {
    let rate = loose_rate(env, rate)?;
    let other = loose_number(env, other.0, other.1)?;
    rate_of(&rate).and_then(|r| make(r, other)).or_throw(env)
}

/// A token bucket (GCRA): at most `burst` tokens, refilled at `rate` per
/// second (or a quota string), starting full. One 64-bit word of state,
/// updated lock-free; `retryAfter` is exact to the nanosecond.
///
/// ```js
/// const tb = new TokenBucket({ rate: 2, burst: 3 })   // or rate: '2/s'
/// if (tb.tryAcquire()) { ... }
/// const d = tb.check(); d.allowed, d.remaining, d.retryAfter
/// ```
#[napi]
pub struct TokenBucket(LimiterSlot);
limiter_class!(
    TokenBucket(TokenBucketOptions) = |env, o| {
        rated(env, &o.rate, (&o.burst, "burst"), |rate, burst| {
            AnyLimiter::token_bucket(rate, burst, clock_of(o.clock))
        })
    }
);

#[napi]
impl TokenBucket {
    /// Replaces the quota, keeping what was taken: `rate` per second (or a
    /// quota string) with `burst`.
    #[napi(ts_args_type = "rate: number | string, burst?: number")]
    pub fn set_quota(&self, env: Env, rate: RateOption, burst: Option<f64>) -> Result<()> {
        let rate = Some(rate);
        let rate = rate_of(&rate).or_throw(&env)?;
        let q = any::quota(rate, burst).or_throw(&env)?;
        let l = &self.0.limiter;
        l.set_quota_at(q, l.now()).or_throw(&env)
    }

    /// The rate in force after what the outbound adapters calling through
    /// this bucket learned of the partner's real limit (`rb.fetch`,
    /// `rb.axios`: `adaptive`), in tokens per second: the configured rate
    /// (the last `setQuota`'s) while nothing is learned, never above it
    /// and never below its floor (1/20 of it).
    #[napi]
    pub fn learned_rate(&self) -> f64 {
        self.core()
            .map_or(0.0, |b| Learning::new(b.ceiling()).rate(b.learned()))
    }

    /// The learned word (internal: the outbound adapters), a `u64` in
    /// decimal.
    #[napi(skip_typescript)]
    pub fn learned_word(&self) -> String {
        crate::outbound::word(self.core().map_or_else(Learned::fresh, |b| b.learned()))
    }

    /// Replaces the learned word `seen` with `next` if it is still `seen`
    /// (internal: the outbound adapters' `'adapt'` step); whether it did.
    #[napi(skip_typescript)]
    pub fn adapt_word(&self, env: Env, seen: String, next: String) -> Result<bool> {
        let seen = crate::outbound::word_of(&env, "seen", &seen)?;
        let next = crate::outbound::word_of(&env, "next", &next)?;
        Ok(self.core().is_some_and(|b| b.adapt(seen, next)))
    }
}

impl TokenBucket {
    /// The core's limiter, shared (an outbound adapter reads the bucket's
    /// quota as it is now: `setQuota` changes it).
    pub(crate) fn shared(&self) -> std::sync::Arc<AnyLimiter> {
        std::sync::Arc::clone(&self.0.limiter)
    }

    /// The core's token bucket (always: the class makes no other).
    pub(crate) fn core(&self) -> Option<&ratebound::TokenBucket<AnyClock>> {
        match &**self.0.limiter {
            AnyLimiter::TokenBucket(b) => Some(b),
            _ => None,
        }
    }
}

/// A fixed window: `limit` requests per aligned `window` seconds. Simple,
/// but up to twice the limit can pass across a window boundary.
#[napi]
pub struct FixedWindow(LimiterSlot);
limiter_class!(FixedWindow(WindowOptions) = |env, o| windowed(env, o, AnyLimiter::fixed_window));

/// A sliding window counter: `limit` per sliding `window` seconds, the
/// current window's count plus the previous window's, weighted by how much
/// of it still overlaps. One word of state; an approximation of the exact
/// `SlidingLog`.
#[napi]
pub struct SlidingWindow(LimiterSlot);
limiter_class!(
    SlidingWindow(WindowOptions) = |env, o| windowed(env, o, AnyLimiter::sliding_window)
);

/// A sliding log: exactly `limit` per any `window` seconds, keeping one
/// timestamp per admitted request (memory grows with the limit).
#[napi]
pub struct SlidingLog(LimiterSlot);
limiter_class!(SlidingLog(WindowOptions) = |env, o| windowed(env, o, AnyLimiter::sliding_log));

/// A leaky bucket (a queue): `rate` departures per second, exactly `1/rate`
/// seconds apart; a request is admitted only if its turn comes within
/// `maxDelay` seconds. With `acquire`, callers wait for their turn.
#[napi]
pub struct LeakyBucket(LimiterSlot);
limiter_class!(
    LeakyBucket(LeakyBucketOptions) = |env, o| {
        rated(
            env,
            &o.rate,
            (&o.max_delay, "maxDelay"),
            |rate, max_delay| {
                AnyLimiter::leaky_bucket(rate, number(max_delay, "maxDelay")?, clock_of(o.clock))
            },
        )
    }
);

/// Several limiters as one, all or nothing: a request is admitted only if
/// every member admits it, and members that admitted give their tokens back
/// when another refuses.
#[napi]
pub struct AllOf(LimiterSlot);

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
            .map(|m| {
                let slot = match m {
                    Either5::A(l) => &l.0,
                    Either5::B(l) => &l.0,
                    Either5::C(l) => &l.0,
                    Either5::D(l) => &l.0,
                    Either5::E(l) => &l.0,
                };
                slot.limiter.clone()
            })
            .collect();
        let limiter = AnyLimiter::all_of(members).or_throw(&env)?;
        Ok(AllOf(LimiterSlot::new(limiter)))
    }
}
limiter_class!(AllOf);
