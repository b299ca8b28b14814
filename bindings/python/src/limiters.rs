//! `Limiter` (the five algorithms and `AllOf`) and `Reservation`.

use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use ratebound::any::{self, AnyLimiter, LimiterOptions};
use ratebound::outbound::{Learned, Learning};
use ratebound::{Error, Limiter as _, Permit};

use crate::convert::{
    clock_of, count, nanos_to_secs, number, opt_number, opt_seconds, type_name, with_rate,
};
use crate::decision::{Decision, decision};
use crate::error::OrPy;
use crate::waiting::{Source, Waiter};

// --------------------------------------------------------------- limiter

/// The base of every single limiter; construct the subclasses
/// (`TokenBucket`, `FixedWindow`, ...) from the `ratebound` package.
#[pyclass(frozen, subclass, module = "ratebound")]
pub(crate) struct Limiter {
    pub(crate) inner: Arc<AnyLimiter>,
}

single_pymethods!(Limiter, or_py, number, Source::Limiter, Holder::Local, {
    #[new]
    #[pyo3(signature = (algorithm, *, rate=None, burst=None, limit=None, window=None, max_delay=None, members=None, clock=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        algorithm: &str,
        rate: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
        limit: Option<&Bound<'_, PyAny>>,
        window: Option<&Bound<'_, PyAny>>,
        max_delay: Option<&Bound<'_, PyAny>>,
        members: Option<&Bound<'_, PyAny>>,
        clock: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let c = clock_of(clock)?;
        let mut members_of = Vec::new();
        if let Some(m) = members.filter(|m| !m.is_none()) {
            for item in m.try_iter()? {
                let item = item?;
                let l = item.cast::<Limiter>().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "AllOf members must be ratebound limiters, got {}",
                        type_name(&item)
                    ))
                })?;
                members_of.push(l.get().inner.clone());
            }
        }
        // The numbers converted here; the choice by name, what each
        // algorithm needs and the errors are the core's.
        let (b, l, w, d) = (
            opt_number(py, "burst", burst)?,
            opt_number(py, "limit", limit)?,
            opt_number(py, "window", window)?,
            opt_number(py, "max_delay", max_delay)?,
        );
        let options: LimiterOptions<'static> = LimiterOptions {
            rate: None,
            burst: b,
            limit: l,
            window: w,
            max_delay: d,
            members: members_of,
        };
        let inner = match rate.filter(|r| !r.is_none()) {
            Some(r) => with_rate(py, r, |r| {
                let options = LimiterOptions {
                    rate: Some(r),
                    ..options
                };
                AnyLimiter::from_options(algorithm, options, c)
            })?,
            None => AnyLimiter::from_options(algorithm, options, c).or_py(py)?,
        };
        Ok(Limiter {
            inner: Arc::new(inner),
        })
    }

    /// Takes `n` (default 1) if the limit allows; the decision says so
    /// either way. A refusal is not an error.
    #[pyo3(signature = (n=None))]
    fn check(&self, py: Python<'_>, n: Option<&Bound<'_, PyAny>>) -> PyResult<Py<Decision>> {
        let d = match n {
            None => self.inner.check_at(self.inner.now()),
            Some(_) => {
                let n = count(py, n)?;
                self.inner.check_n_at(n, self.inner.now()).or_py(py)?
            }
        };
        decision(py, d)
    }

    /// Like `check`, returning only whether it was allowed.
    #[pyo3(signature = (n=None))]
    fn try_acquire(&self, py: Python<'_>, n: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        match n {
            None => Ok(self.inner.try_acquire()),
            Some(_) => {
                let n = count(py, n)?;
                Ok(self
                    .inner
                    .check_n_at(n, self.inner.now())
                    .or_py(py)?
                    .is_allowed())
            }
        }
    }

    /// What `check(n)` would answer, without taking anything.
    #[pyo3(signature = (n=None))]
    fn peek(&self, py: Python<'_>, n: Option<&Bound<'_, PyAny>>) -> PyResult<Py<Decision>> {
        let n = count(py, n)?;
        let d = self.inner.peek_n_at(n, self.inner.now()).or_py(py)?;
        decision(py, d)
    }

    /// The algorithm's name, e.g. "token_bucket".
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.inner.algorithm()
    }

    /// Replaces a token bucket's rate (and burst), converting its state.
    #[pyo3(signature = (rate, burst=None))]
    fn set_quota(
        &self,
        py: Python<'_>,
        rate: &Bound<'_, PyAny>,
        burst: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let b = opt_number(py, "burst", burst)?;
        let q = with_rate(py, rate, |r| any::quota(r, b))?;
        self.inner.set_quota_at(q, self.inner.now()).or_py(py)
    }

    /// For the outbound adapters: the word a token bucket keeps of what
    /// they learned of a partner's limit (`ratebound::outbound::Learned`,
    /// as bits; 0: nothing learned — also for every other algorithm).
    fn _learned(&self) -> u64 {
        match self.inner.as_ref() {
            AnyLimiter::TokenBucket(tb) => tb.learned().to_bits(),
            _ => Learned::fresh().to_bits(),
        }
    }

    /// For the outbound adapters: replaces the learned word `seen` with
    /// `next` if it is still `seen`, the bucket running at `next`'s share
    /// of its configured quota from now on; whether it replaced.
    fn _adapt(&self, py: Python<'_>, seen: u64, next: u64) -> PyResult<bool> {
        match self.inner.as_ref() {
            AnyLimiter::TokenBucket(tb) => {
                Ok(tb.adapt(Learned::from_bits(seen), Learned::from_bits(next)))
            }
            other => Err(cannot_learn(other)).or_py(py),
        }
    }

    /// The rate learned of the partner, in tokens per second: the
    /// configured rate when nothing is learned.
    fn _learned_rate(&self, py: Python<'_>) -> PyResult<f64> {
        match self.inner.as_ref() {
            AnyLimiter::TokenBucket(tb) => Ok(Learning::new(tb.ceiling()).rate(tb.learned())),
            other => Err(cannot_learn(other)).or_py(py),
        }
    }
});

/// What a limiter other than a token bucket says when asked to learn.
fn cannot_learn(limiter: &AnyLimiter) -> Error {
    Error::Unsupported {
        operation: "learning a partner's limit (a token bucket learns)",
        algorithm: limiter.algorithm(),
    }
}

impl Limiter {
    /// For `reserve`: the wait in nanoseconds and the permit.
    fn reserved(&self, n: u64, max_wait: Option<Duration>) -> Result<(u64, Permit), Error> {
        self.inner.reserve_n_at(n, max_wait, self.inner.now())
    }
}

/// Whose tokens a [`Reservation`] holds.
pub(crate) enum Holder {
    /// A local limiter's.
    Local(Arc<AnyLimiter>),
    /// A shared-memory bucket's.
    Shared(Arc<ratebound_shm::SharedLimiter>),
}

/// Tokens taken ahead of time by `reserve`: act after `delay` seconds, or
/// `cancel()` to give them back.
#[pyclass(frozen, module = "ratebound")]
pub(crate) struct Reservation {
    limiter: Holder,
    tokens: u64,
    /// Taken by `cancel`: a permit is single use.
    permit: std::sync::Mutex<Option<Permit>>,
    wait: u64,
}

impl Reservation {
    pub(crate) fn new(limiter: Holder, permit: Permit, wait: u64) -> Reservation {
        Reservation {
            limiter,
            tokens: permit.tokens(),
            permit: std::sync::Mutex::new(Some(permit)),
            wait,
        }
    }
}

#[pymethods]
impl Reservation {
    /// Seconds to wait before acting.
    #[getter]
    fn delay(&self) -> f64 {
        nanos_to_secs(self.wait)
    }
    #[getter]
    fn delay_ns(&self) -> u64 {
        self.wait
    }
    #[getter]
    fn tokens(&self) -> u64 {
        self.tokens
    }
    /// Gives the tokens back if no later taker has built on them
    /// (once; later calls do nothing).
    fn cancel(&self) {
        let taken = self.permit.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(p) = taken {
            match &self.limiter {
                Holder::Local(l) => l.release(p),
                // Issued by this handle: never foreign.
                Holder::Shared(l) => {
                    let _ = l.release(p);
                }
            }
        }
    }
    fn __repr__(&self) -> String {
        format!(
            "Reservation(tokens={}, delay={})",
            self.tokens,
            nanos_to_secs(self.wait)
        )
    }
}
