//! `Gate`: the whole middleware request sequence, for every Python front
//! door (`ratebound.asgi`, `ratebound.wsgi`, `ratebound.django`, the route
//! limits). Built by the core's one parser (`GateSpec`), it runs the core's
//! `Gate::admit` / `Gate::finish` with the front door's hooks — exempt,
//! critical, priority, the key function, `on_decision` — called here with the
//! framework's request; its answers cross as typed objects: `Admission`, the
//! concurrency `Place` a passing request holds, and `Ask`, a request
//! waiting for its remote (Redis, shared-memory) policies. The hooks are
//! `hooks`'s; the answers `answers`'s.

use std::net::IpAddr;
use std::sync::Mutex;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use ratebound::gate;
use ratebound::gate::{GateSpec, RemoteAnswer, RemoteKind};

use crate::convert::{clock_of, type_name};
use crate::decision::Decision;
use crate::error::{OrPy, py_err};
use crate::redis::RedisEngine_;

mod answers;
mod headers;
mod hooks;
mod options;

pub(crate) use answers::{Admission, Ask, Concurrency, Place, lock};
pub(crate) use headers::PyHeaders;
pub(crate) use options::{
    PriorityHook, hook, policy_spec, priority_hook, priority_of, set_option, with_loose,
};

use hooks::PyHooks;

// ---------------------------------------------------------------- gate

/// The whole request sequence of a Python front door, built from its
/// options by the core's parser (`GateSpec`): every rule and default the
/// core's, the same in Rust and Node.
#[pyclass(frozen, module = "ratebound")]
pub(crate) struct Gate {
    inner: gate::Gate,
    /// Header names and the fixed policy value, made once as Python
    /// objects: `(name, as bytes, as str)`.
    fixed: Vec<(String, Py<PyAny>, Py<PyAny>)>,
    /// The header names the gate reads, with their WSGI environ keys.
    environ_keys: Vec<(String, Py<PyString>)>,
    exempt: Option<Py<PyAny>>,
    critical: Option<Py<PyAny>>,
    priority: Option<PriorityHook>,
    key: Option<Py<PyAny>>,
    /// `on_decision` and the event class it is told (`RateLimitEvent`).
    on_decision: Option<(Py<PyAny>, Py<PyAny>)>,
    label: Option<Py<PyAny>>,
    /// The policies' names, local then remote, for the events.
    policies: Py<PyTuple>,
}

pub(crate) const FIELD_NAMES: [&str; 7] = [
    "ratelimit-policy",
    "ratelimit",
    "retry-after",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "text/plain; charset=utf-8",
];

impl Gate {
    /// A core verdict (and its place) as an `Admission`.
    fn verdict<'py>(
        &self,
        py: Python<'py>,
        v: &gate::Verdict<'_>,
        place: Option<gate::Place>,
        wsgi: bool,
    ) -> PyResult<Bound<'py, Admission>> {
        let headers = PyList::empty(py);
        for (name, value) in v.fields.iter() {
            let value = match value {
                gate::Field::Text(t) => self.text(py, t, wsgi),
                gate::Field::Number(n) => self.text(py, &n.to_string(), wsgi),
            };
            headers.append((self.text(py, name, wsgi), value))?;
        }
        let (content_type, body) = match &v.body {
            Some((c, b)) => (
                self.text(py, c, wsgi).unbind(),
                PyBytes::new(py, b.as_bytes()).into_any().unbind(),
            ),
            None => (py.None(), py.None()),
        };
        let place = match place {
            Some(p) => Py::new(
                py,
                Place {
                    inner: Mutex::new(Some(p)),
                },
            )?
            .into_any(),
            None => py.None(),
        };
        Bound::new(
            py,
            Admission {
                status: v.status.into_pyobject(py)?.into_any().unbind(),
                headers: headers.unbind(),
                content_type,
                body,
                place,
                code: v.status,
                outcome: v.outcome,
                priority: v.priority,
                refused_by: v.refused_by.map(str::to_string),
                notice: v.notice.map(|n| n.to_string()),
            },
        )
    }

    /// `text` as bytes (ASGI) or str (WSGI), from the cache when it is one of
    /// the fixed strings.
    fn text<'py>(&self, py: Python<'py>, text: &str, wsgi: bool) -> Bound<'py, PyAny> {
        match self.fixed.iter().find(|(t, _, _)| t == text) {
            Some((_, b, s)) => if wsgi { s } else { b }.bind(py).clone(),
            None if wsgi => PyString::new(py, text).into_any(),
            None => PyBytes::new(py, text.as_bytes()).into_any(),
        }
    }

    fn id(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }
}

#[pymethods]
impl Gate {
    /// `options`: the middleware's options and the one policy's fields
    /// (`rate`, `burst`, ...) by name, `None` values not given;
    /// `policies`: `(name, rate or dict of policy fields)` pairs (the list
    /// form); `remote`: `(name, RedisEngine_ or SharedKeyedLimiter)` pairs,
    /// policies decided elsewhere. `key`: a function of the request (the
    /// application gives each request's key), or `"ip"` / a header name.
    /// `exempt`, `critical`: functions of the request; `priority`:
    /// `"critical"`, `"normal"`, `"background"` or a function of the
    /// request returning one; `on_decision` is told a `RateLimitEvent` per
    /// request, with `label`.
    #[new]
    #[pyo3(signature = (
        options, policies=None, remote=None, *,
        key=None, exempt=None, critical=None, priority=None, on_decision=None, label=None,
        clock=None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        options: &Bound<'_, PyDict>,
        policies: Option<&Bound<'_, PyAny>>,
        remote: Option<Vec<(String, Bound<'_, PyAny>)>>,
        key: Option<Bound<'_, PyAny>>,
        exempt: Option<Bound<'_, PyAny>>,
        critical: Option<Bound<'_, PyAny>>,
        priority: Option<Bound<'_, PyAny>>,
        on_decision: Option<Bound<'_, PyAny>>,
        label: Option<Bound<'_, PyAny>>,
        clock: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let priority = priority_hook(py, priority)?;
        let mut spec = GateSpec::default();
        for (name, value) in options.iter() {
            if value.is_none() {
                continue;
            }
            let name: String = name.extract()?;
            with_loose(&name, &value, |v| spec.set(&name, v))?;
        }
        let mut key_fn = None;
        if let Some(k) = key.filter(|k| !k.is_none()) {
            if k.is_callable() {
                spec.give_key();
                key_fn = Some(k.unbind());
            } else {
                with_loose("key", &k, |v| spec.set("key", v))?;
            }
        }
        if let Some(policies) = policies.filter(|p| !p.is_none()) {
            spec.use_policy_list();
            for item in policies.try_iter()? {
                let (name, policy): (String, Bound<'_, PyAny>) = item?.extract()?;
                spec.add_policy(policy_spec(py, &name, &policy)?)
                    .or_py(py)?;
            }
        }
        // Policies decided elsewhere: a global limit in Redis (its engine),
        // or a limit shared by the host's processes (shared memory).
        for (name, limiter) in remote.iter().flatten() {
            let (kind, algorithm) = if let Ok(engine) = limiter.cast::<RedisEngine_>() {
                (RemoteKind::Redis, engine.get().inner.config().algorithm)
            } else if let Ok(shared) = limiter.cast::<crate::shared::SharedKeyedLimiter>() {
                (RemoteKind::Host, shared.get().algorithm())
            } else {
                return Err(PyTypeError::new_err(format!(
                    "a remote policy must be a Redis limiter or a SharedKeyedLimiter, got {}",
                    type_name(limiter)
                )));
            };
            spec.add_remote(Some(name), kind, algorithm);
        }
        let inner = spec.build(clock_of(clock)?).or_py(py)?;
        if priority.is_some() && !inner.is_capped() {
            // As the core's background_fraction: a priority means nothing
            // without a concurrency limit to shed under.
            return Err(py_err(
                py,
                ratebound::Error::InvalidOption {
                    name: "priority",
                    value: match &priority {
                        Some(PriorityHook::Fixed(p)) => p.as_str().to_string(),
                        _ => "a function".to_string(),
                    },
                    reason: "sheds under a concurrency limit: set concurrency_limit (a number or \"auto\") as well",
                },
            ));
        }
        let on_decision = match hook("on_decision", on_decision)? {
            Some(f) => {
                let event = py.import("ratebound._http")?.getattr("RateLimitEvent")?;
                Some((f, event.unbind()))
            }
            None => None,
        };
        let fixed = FIELD_NAMES
            .iter()
            .copied()
            .chain([inner.policy_field()])
            .map(|t| {
                (
                    t.to_string(),
                    PyBytes::new(py, t.as_bytes()).into_any().unbind(),
                    PyString::new(py, t).into_any().unbind(),
                )
            })
            .collect();
        let environ_keys = inner
            .header_names()
            .map(|n| {
                let key = format!("HTTP_{}", n.to_ascii_uppercase().replace('-', "_"));
                (n.to_string(), PyString::new(py, &key).unbind())
            })
            .collect();
        let names: Vec<&str> = inner.policy_names().collect();
        let policies = PyTuple::new(py, names)?.unbind();
        Ok(Gate {
            inner,
            fixed,
            environ_keys,
            exempt: hook("exempt", exempt)?,
            critical: hook("critical", critical)?,
            priority,
            key: key_fn,
            on_decision,
            label: label.filter(|l| !l.is_none()).map(Bound::unbind),
            policies,
        })
    }

    /// The whole sequence for one request — exempt, a concurrency place
    /// (shed at a full cap unless critical), the key, the policies,
    /// `on_decision` — with the hooks called with `request` (the
    /// framework's request object). `peer`: the client address; `headers`:
    /// the ASGI scope's header list, or with `wsgi=True` the WSGI environ
    /// (header names and values out are then str); `label`: the event's
    /// label when the gate has none (the route).
    ///
    /// `None`: exempt, on to the application untouched. An `Admission`: the
    /// answer. An `Ask`: the remote policies first, then `finish`.
    #[pyo3(signature = (request, peer=None, headers=None, wsgi=false, label=None))]
    fn admit<'py>(
        &self,
        py: Python<'py>,
        request: &Bound<'py, PyAny>,
        peer: Option<&str>,
        headers: Option<&Bound<'py, PyAny>>,
        wsgi: bool,
        label: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let environ;
        let lines = match headers.filter(|h| !h.is_none()) {
            None => PyHeaders::None,
            Some(h) if wsgi => {
                environ = h
                    .cast::<PyDict>()
                    .map_err(|_| PyTypeError::new_err("a WSGI environ must be a dict"))?;
                PyHeaders::Environ(environ, &self.environ_keys)
            }
            Some(h) => PyHeaders::Asgi(h),
        };
        let r = gate::Request {
            key: None,
            peer: peer.and_then(|p| p.parse::<IpAddr>().ok()),
            headers: &lines,
        };
        let label = label.filter(|l| !l.is_none());
        let mut hooks = PyHooks {
            gate: self,
            request,
            label,
            error: None,
        };
        let admitted = self.inner.admit(&r, &mut hooks);
        if let Some(e) = hooks.error {
            // The place, if any, is given back here, untimed: a failed
            // hook says nothing of the service's latency.
            if let gate::Admit::Decided(gate::Admission { place: Some(p), .. }) = admitted {
                p.forfeit();
            }
            return Err(e);
        }
        Ok(match admitted {
            gate::Admit::Exempt => None,
            // Only a failed hook stops the sequence, and its error is raised
            // above; a stop without one would be the core's bug.
            gate::Admit::Stopped => {
                return Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "the request sequence stopped without a hook's error",
                ));
            }
            gate::Admit::Decided(a) => {
                Some(self.verdict(py, &a.verdict, a.place, wsgi)?.into_any())
            }
            gate::Admit::Ask(ask) => {
                let identity = PyBytes::new(py, ask.identity()).unbind();
                let ask = Ask {
                    inner: Mutex::new(Some(ask)),
                    identity,
                    wsgi,
                    label: label.map(|l| l.clone().unbind()),
                    gate: self.id(),
                };
                Some(Bound::new(py, ask)?.into_any())
            }
        })
    }

    /// The rest of `admit` once the remote policies have answered `ask`:
    /// per remote policy, in order, its `Decision`, or the exception its
    /// check raised — mapped by the core's one rule
    /// (`RemoteAnswer::from_error`, by the exception's `code`): a full table
    /// (`TooManyKeys`) answers as the gate's own (503), any other error is
    /// a failed store (503 with `store_error_retry_after`), never a 500.
    /// `None` stands for a full table too.
    fn finish<'py>(
        &self,
        py: Python<'py>,
        ask: &Bound<'py, Ask>,
        answers: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, Admission>> {
        let a = ask.get();
        if a.gate != self.id() {
            return Err(PyValueError::new_err("this Ask is another gate's"));
        }
        let wanted = self.inner.remote_names().len();
        if answers.len() != wanted {
            return Err(PyValueError::new_err(format!(
                "{} answers for {wanted} remote policies",
                answers.len()
            )));
        }
        let asked = lock(&a.inner)
            .take()
            .ok_or_else(|| PyValueError::new_err("this Ask is already finished or closed"))?;
        let answers = answers
            .iter()
            .map(remote_answer)
            .collect::<PyResult<Vec<RemoteAnswer>>>()?;
        let none = py.None().into_bound(py);
        let mut hooks = PyHooks {
            gate: self,
            request: &none,
            label: a.label.as_ref().map(|l| l.bind(py)),
            error: None,
        };
        let admission = self.inner.finish(asked, &answers, &mut hooks);
        if let Some(e) = hooks.error {
            return Err(e);
        }
        self.verdict(py, &admission.verdict, admission.place, a.wsgi)
    }

    /// Takes a place under the concurrency limit by hand (always `True`
    /// without one); pair a `True` with one `leave()`. The front doors take
    /// theirs through `admit`.
    fn try_enter(&self) -> bool {
        self.inner.try_enter()
    }

    /// Gives back a place from `try_enter`.
    fn leave(&self) {
        self.inner.leave();
    }

    /// Whether a concurrency limit is set.
    #[getter]
    fn capped(&self) -> bool {
        self.inner.is_capped()
    }

    /// Whether the concurrency limit is learned from latency
    /// (`concurrency_limit="auto"`): a place's `responded()` then times
    /// its request.
    #[getter]
    fn adaptive(&self) -> bool {
        self.inner.concurrency().is_some_and(|c| c.is_adaptive())
    }

    /// The concurrency limit now, for a metrics gauge (`None` without
    /// one).
    #[getter]
    fn concurrency(&self) -> Option<Concurrency> {
        self.inner.concurrency().map(Concurrency::of)
    }

    /// The `RateLimit-Policy` field value.
    #[getter]
    fn policy_field(&self) -> &str {
        self.inner.policy_field()
    }

    /// The policies' names, local then remote (for `on_decision`).
    #[getter]
    fn policy_names(&self, py: Python<'_>) -> Py<PyTuple> {
        self.policies.clone_ref(py)
    }

    /// The names of the remote policies, in the order `finish` takes
    /// their answers.
    #[getter]
    fn remote_names(&self) -> Vec<String> {
        self.inner.remote_names().map(str::to_string).collect()
    }

    /// Keys tracked (by the first policy).
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Drops fresh per-key state; how many entries went.
    fn cleanup(&self, py: Python<'_>) -> usize {
        let inner = &self.inner;
        py.detach(|| inner.cleanup())
    }
}

/// One remote policy's answer as the core takes it: a `Decision`, an
/// exception (by its `code`, the core's rule), or `None` (a full table).
///
/// # Errors
/// `TypeError` for anything else.
fn remote_answer(answer: &Bound<'_, PyAny>) -> PyResult<RemoteAnswer> {
    if let Ok(d) = answer.cast::<Decision>() {
        return Ok(d.get().inner.into());
    }
    if answer.is_none() {
        return Ok(RemoteAnswer::Full);
    }
    if answer.is_instance_of::<pyo3::exceptions::PyBaseException>() {
        let code = answer
            .getattr(pyo3::intern!(answer.py(), "code"))
            .ok()
            .and_then(|c| c.extract::<String>().ok());
        return Ok(RemoteAnswer::from_error(code.as_deref()));
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "a remote policy's answer is a Decision, the exception its check raised, or None, not {}",
        answer.get_type().name()?
    )))
}
