//! `_Outbound` and `_Call`: the core's outbound call machine
//! (`ratebound::outbound::{Caller, Call}`) for the HTTP client adapters.
//! The machine says each step of a call; the adapter does it. The binding
//! converts values; the core decides.

use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyTuple};
use ratebound::any::AnyLimiter;
use ratebound::outbound::{Caller, Learned, Outbound as Policy, Reach, Sending, Step, Target};
use ratebound::{KeyedAlgorithm, Quota};

use crate::convert::{number, opt_number, type_name};
use crate::error::{OrPy, py_err_about};
use crate::keyed::KeyedLimiter;
use crate::limiters::Limiter;
use crate::redis::RedisEngine;
use crate::shared::{SharedKeyedLimiter, SharedTokenBucket};

/// The quota `limiter` was configured with, if it keeps what the adapters
/// learn of a partner's limit (a local token bucket, one or keyed; a shared-memory token
/// bucket, one or keyed, whose file keeps it for every process; a Redis
/// token bucket, sync or asyncio, whose keys keep it for the fleet);
/// `None` when it cannot learn.
fn ceiling_of(limiter: &Bound<'_, PyAny>) -> Option<Quota> {
    let bucket = |algorithm| match algorithm {
        KeyedAlgorithm::TokenBucket(q) => Some(q),
        _ => None,
    };
    if let Ok(l) = limiter.cast::<Limiter>() {
        return match l.get().inner.as_ref() {
            AnyLimiter::TokenBucket(tb) => Some(tb.ceiling()),
            _ => None,
        };
    }
    if let Ok(s) = limiter.cast::<SharedTokenBucket>() {
        return bucket(s.get().keyed_algorithm());
    }
    if let Ok(k) = limiter.cast::<SharedKeyedLimiter>() {
        return bucket(k.get().algorithm());
    }
    if let Ok(k) = limiter.cast::<KeyedLimiter>() {
        return bucket(k.get().inner.keyed_algorithm());
    }
    // A Redis limiter (`rb.redis.TokenBucket`, `AsyncTokenBucket`): its
    // engine keeps the word beside the bucket, for the whole fleet.
    if let Ok(engine) = limiter.getattr(pyo3::intern!(limiter.py(), "_engine"))
        && let Ok(e) = engine.cast::<RedisEngine>()
    {
        return bucket(e.get().inner.config().algorithm);
    }
    None
}

/// The `adaptive` option: `None`, `True` or `False`; anything else is a
/// `TypeError` naming it.
fn adaptive_of(adaptive: Option<&Bound<'_, PyAny>>) -> PyResult<Option<bool>> {
    match adaptive.filter(|a| !a.is_none()) {
        None => Ok(None),
        Some(a) if a.is_instance_of::<PyBool>() => Ok(Some(a.extract()?)),
        Some(a) => Err(PyTypeError::new_err(format!(
            "adaptive must be True, False or None, got {} {}",
            type_name(a),
            a.repr()?
        ))),
    }
}

/// How a limiter is named in an error: `rb.TokenBucket`,
/// `rb.redis.TokenBucket` (its public module, `ratebound` as `rb`).
fn limiter_name(limiter: &Bound<'_, PyAny>) -> String {
    let t = limiter.get_type();
    let module = t.module().map(|m| m.to_string()).unwrap_or_default();
    let public: Vec<&str> = module
        .split('.')
        .filter(|p| !p.starts_with('_'))
        .map(|p| if p == "ratebound" { "rb" } else { p })
        .collect();
    format!("{}.{}", public.join("."), type_name(limiter))
}

/// An adapter's rules: the policy, each sending's `n` and `timeout`, its
/// fixed `key` (None: each request's host), the pauses it keeps in this
/// process. Refuses a limiter whose `algorithm` is not a token bucket.
#[pyclass(name = "_Outbound", module = "ratebound._ratebound", frozen)]
pub(crate) struct Outbound {
    caller: Caller,
}

#[pymethods]
impl Outbound {
    /// Each option not given (or None) is the core's default
    /// (`Outbound::from_loose`, `Sending::from_loose`).
    ///
    /// `adaptive` is the adapter's option (None: learn where `limiter`
    /// can keep it; False: never; True: insist — `Unsupported` naming a
    /// limiter that cannot), the ceiling `limiter`'s configured quota
    /// (`Caller::with_adaptive`).
    #[new]
    #[pyo3(signature = (*, algorithm="token_bucket", key=None, n=None, timeout=None, retries=None, max_pause=None, statuses=None, any_method=None, backoff=None, adaptive=None, limiter=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        algorithm: &str,
        key: Option<String>,
        n: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        retries: Option<&Bound<'_, PyAny>>,
        max_pause: Option<&Bound<'_, PyAny>>,
        statuses: Option<&Bound<'_, PyAny>>,
        any_method: Option<bool>,
        backoff: Option<&Bound<'_, PyAny>>,
        adaptive: Option<&Bound<'_, PyAny>>,
        limiter: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let adaptive = adaptive_of(adaptive)?;
        let statuses = match statuses.filter(|s| !s.is_none()) {
            Some(list) => Some(
                list.try_iter()?
                    .map(|s| number(py, "status", &s?))
                    .collect::<PyResult<Vec<f64>>>()?,
            ),
            None => None,
        };
        let policy = Policy::from_loose(
            opt_number(py, "retries", retries)?,
            opt_number(py, "max_pause", max_pause)?,
            statuses.as_deref(),
            any_method,
            opt_number(py, "backoff", backoff)?,
        )
        .or_py(py)?;
        let sending =
            Sending::from_loose(opt_number(py, "n", n)?, opt_number(py, "timeout", timeout)?)
                .or_py(py)?;
        let caller = Caller::new(algorithm, policy, sending, key).or_py(py)?;
        let ceiling = limiter.and_then(ceiling_of);
        // A limiter that cannot learn has no ceiling to keep: any quota.
        let quota = match ceiling {
            Some(q) => q,
            None => Quota::per_second(1).or_py(py)?,
        };
        let caller = caller
            .with_adaptive(adaptive, ceiling.is_some(), quota)
            .map_err(|e| {
                let name = limiter.map_or_else(|| "no limiter".to_string(), limiter_name);
                py_err_about(py, e, &format!("adaptive=True with {name}"))
            })?;
        // A local `rb.TokenBucket`'s quota as it is when an answer is read
        // (`set_quota` changes it): the ceiling of what is learned.
        let local = limiter
            .and_then(|l| l.cast::<Limiter>().ok())
            .map(|l| Arc::clone(&l.get().inner));
        // A local keyed limiter takes a waiter's tokens only when they are
        // due (it decides again after each sleep): no slot to price again.
        let caller = if limiter.is_some_and(|l| l.cast::<KeyedLimiter>().is_ok()) {
            caller.taking_when_due()
        } else {
            caller
        };
        let caller = match (local, caller.learning().map(|l| l.ceiling())) {
            (Some(bucket), Some(built)) if matches!(*bucket, AnyLimiter::TokenBucket(_)) => caller
                .with_live_ceiling(Arc::new(move || match &*bucket {
                    AnyLimiter::TokenBucket(b) => b.ceiling(),
                    _ => built,
                })),
            _ => caller,
        };
        Ok(Outbound { caller })
    }

    /// Whether the adapter learns: after the tokens come, tell the call
    /// the limiter's learned word (`_Call.saw`).
    #[getter]
    fn learning(&self) -> bool {
        self.caller.learning().is_some()
    }

    /// The learned word of `units` 65536ths of the ceiling, changed at
    /// `changed_ms` (Unix ms), by a cut or not, as the limiters keep it.
    #[staticmethod]
    #[pyo3(signature = (units, changed_ms, cut=false))]
    fn learned_word(units: u32, changed_ms: u64, cut: bool) -> u64 {
        Learned::new(units, changed_ms).with_cut(cut).to_bits()
    }

    /// Each sending's `(n, timeout)` as the core reads them
    /// (`Sending::from_loose`).
    #[staticmethod]
    #[pyo3(signature = (n=None, timeout=None))]
    fn sending(
        py: Python<'_>,
        n: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(u64, Option<f64>)> {
        let s = Sending::from_loose(opt_number(py, "n", n)?, opt_number(py, "timeout", timeout)?)
            .or_py(py)?;
        Ok((s.n(), s.timeout().map(|t| t.as_secs_f64())))
    }

    #[getter]
    fn retries(&self) -> u32 {
        self.caller.outbound().retries()
    }

    #[getter]
    fn max_pause(&self) -> f64 {
        self.caller.outbound().max_pause().as_secs_f64()
    }

    #[getter]
    fn backoff(&self) -> f64 {
        self.caller.outbound().backoff().as_secs_f64()
    }

    /// One call of `method` to `scheme://host:port`, with the request's
    /// own `key`, `n` and `timeout` (this one only with `timeout_given`:
    /// None is then "no timeout"); `resendable` unless its body is read
    /// once.
    #[pyo3(signature = (method, scheme, host, port, key=None, n=None, timeout=None, timeout_given=false, resendable=true))]
    #[allow(clippy::too_many_arguments)]
    fn call(
        slf: &Bound<'_, Self>,
        method: &str,
        scheme: &str,
        host: &str,
        port: Option<u16>,
        key: Option<String>,
        n: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        timeout_given: bool,
        resendable: bool,
    ) -> PyResult<Call> {
        let py = slf.py();
        let n = opt_number(py, "n", n)?;
        let timeout = match timeout_given {
            true => Some(opt_number(py, "timeout", timeout)?),
            false => None,
        };
        let target = Target { scheme, host, port };
        let call = slf
            .get()
            .caller
            .call_loose(method, target, key, n, timeout, resendable)
            .or_py(py)?;
        Ok(Call {
            caller: slf.clone().unbind(),
            call,
        })
    }

    /// Whether a throw of the adapter's hook is the first (to be warned
    /// of); the later ones are swallowed.
    fn hook_threw(&self) -> bool {
        self.caller.hook_threw()
    }

    /// What to do after the response to attempt `attempt` (0: the first):
    /// `(pause_seconds | None, capped, retry, gave_up)`.
    fn advise(
        &self,
        method: &str,
        status: u16,
        headers: Vec<(String, String)>,
        attempt: u32,
        now_unix: f64,
    ) -> (Option<f64>, bool, bool, bool) {
        let headers = headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
        let a = self
            .caller
            .outbound()
            .advise(method, status, headers, attempt, now_unix);
        (
            a.pause.map(|d| d.as_secs_f64()),
            a.capped,
            a.retry,
            a.gave_up,
        )
    }
}

/// One call's steps (`_Outbound.call`): `next(now)` gives a tuple —
/// `("hold", s)`, `("acquire", n, timeout)`, `("send",)`,
/// `("adapt", from_units, to_units, cut, seen, next)` (the learned words'
/// fractions in 65536ths, whether `next` is a cut, and the words to hand
/// the limiter's `_adapt`), `("pause", s)`,
/// `("event", outcome, seconds, status, attempt, capped, local, from_rate,
/// to_rate)` (the rates in tokens/s, for `adapted` only), `("retry",)` or
/// `("done",)`.
#[pyclass(name = "_Call", module = "ratebound._ratebound")]
pub(crate) struct Call {
    caller: Py<Outbound>,
    call: ratebound::outbound::Call,
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[pymethods]
impl Call {
    #[getter]
    fn key(&self) -> &str {
        self.call.key()
    }

    /// The next step at `now` (the adapter's monotonic clock, seconds).
    fn next<'py>(&mut self, py: Python<'py>, now: f64) -> PyResult<Bound<'py, PyTuple>> {
        let now = Duration::try_from_secs_f64(now).unwrap_or_default();
        let step = self.call.next(&self.caller.get().caller, now).or_py(py)?;
        match step {
            Step::Hold(d) => ("hold", secs(d)).into_pyobject(py),
            Step::Acquire { n, timeout } => ("acquire", n, timeout.map(secs)).into_pyobject(py),
            Step::Send => ("send",).into_pyobject(py),
            Step::Pause(d) => ("pause", secs(d)).into_pyobject(py),
            Step::Adapt { seen, next } => (
                "adapt",
                seen.fraction_units(),
                next.fraction_units(),
                next.was_cut(),
                seen.to_bits(),
                next.to_bits(),
            )
                .into_pyobject(py),
            Step::Report(e) => {
                let caller = &self.caller.get().caller;
                let rates = e
                    .learned
                    .map(|(from, to)| (caller.rate(from), caller.rate(to)));
                let (from_rate, to_rate) = rates.unwrap_or_default();
                (
                    "event",
                    e.outcome.as_str(),
                    e.duration.map(secs),
                    e.status,
                    e.attempt,
                    e.capped,
                    e.local,
                    from_rate,
                    to_rate,
                )
                    .into_pyobject(py)
            }
            Step::Retry => ("retry",).into_pyobject(py),
            Step::Done => ("done",).into_pyobject(py),
        }
    }

    /// The answer: its status and header fields, received at `now_unix`.
    fn answered(&mut self, status: u16, headers: Vec<(String, String)>, now_unix: f64) {
        let headers = headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
        self.call
            .answered(&self.caller.get().caller, status, headers, now_unix);
    }

    /// The learned word (`_learned` of the limiter, for the call's key)
    /// the sending goes under, read after the tokens came.
    fn saw(&mut self, seen: u64) {
        self.call.saw(Learned::from_bits(seen));
    }

    /// The learned word when the wait for the tokens began (read before
    /// asking for them): a cut that comes while the sending is in line
    /// makes it wait again (`acquire` once more) rather than send at the
    /// old pace.
    fn reserving(&mut self, seen: u64) {
        self.call.reserving(Learned::from_bits(seen));
    }

    /// The limiter refused the tokens `("acquire", ...)` asked for with
    /// `RateLimitExceeded` (nothing taken): they were `wait` seconds away.
    /// The machine says what next: hold and ask again (a learning call's
    /// line beyond the horizon), or the error (`next` raises it).
    fn beyond(&mut self, wait: f64) {
        self.call
            .beyond(Duration::try_from_secs_f64(wait).unwrap_or_default());
    }

    /// Whether the limiter replaced its learned word as `("adapt", ...)`
    /// asked (False too when it failed).
    fn adapted(&mut self, replaced: bool) {
        self.call.adapted(replaced);
    }

    /// Where the pause took hold: True (everyone sharing the limiter),
    /// False (only this process), None (the limiter failed to make it).
    fn paused(&mut self, shared: Option<bool>, now: f64) {
        let reach = shared.map(|s| if s { Reach::Shared } else { Reach::Local });
        let now = Duration::try_from_secs_f64(now).unwrap_or_default();
        self.call.paused(&self.caller.get().caller, reach, now);
    }
}
