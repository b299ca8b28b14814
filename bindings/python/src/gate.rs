//! `Gate`: the whole middleware request sequence, for every Python front
//! door (`ratebound.asgi`, `ratebound.wsgi`, `ratebound.django`, the route
//! limits). Built by the core's one parser (`GateSpec`), it runs the core's
//! `Gate::admit` / `Gate::finish` with the front door's hooks — exempt,
//! critical, the key function, `on_decision` — called here with the
//! framework's request; its answers cross as typed objects: `Verdict`, the
//! concurrency `Place` a passing request holds, and `Ask`, a request
//! waiting for its remote (Redis, shared-memory) policies.

use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard, PoisonError};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyMapping, PyString, PyTuple};
use ratebound::Error;
use ratebound::any::{
    self, GateOptions, GateSpec, Hooks, Key, Loose, PolicySpec, RemoteAnswer, RemoteKind,
};
use ratebound::http::Headers;

use crate::convert::*;
use crate::decision::*;
use crate::error::*;
use crate::redis::*;

// ------------------------------------------------------------- options

/// `f` given a Python option value as the core's loose parser takes it: a
/// str, a number (not a bool), or a list of str.
pub(crate) fn with_loose<R>(
    name: &str,
    value: &Bound<'_, PyAny>,
    f: impl FnOnce(Loose<'_>) -> Result<R, Error>,
) -> PyResult<R> {
    let py = value.py();
    let result = if let Ok(s) = value.cast::<PyString>() {
        f(Loose::Text(&s.to_cow()?))
    } else if value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must not be a bool, got {}",
            value.repr()?
        )));
    } else if value.is_instance_of::<PyInt>() || value.is_instance_of::<PyFloat>() {
        f(Loose::Number(number(py, "option", value)?))
    } else {
        let mut texts = Vec::new();
        for item in value.try_iter().map_err(|_| {
            PyTypeError::new_err(format!(
                "{name} must be a str, a number or a list of str, got {}",
                type_name(value)
            ))
        })? {
            let item = item?;
            texts.push(item.extract::<String>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "{name} entries must be str, got {}",
                    type_name(&item)
                ))
            })?);
        }
        let list: Vec<&str> = texts.iter().map(String::as_str).collect();
        f(Loose::List(&list))
    };
    result.or_py(py)
}

/// A middleware option as the core's loose parser takes it: `None` is "not
/// given" (the core's default).
pub(crate) fn set_option(
    options: &mut GateOptions,
    name: &str,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    if value.is_none() {
        return Ok(());
    }
    with_loose(name, value, |v| options.set(name, v))
}

/// One local policy of `policies=`: a rate (`"10/s burst 20"`, a number
/// per second) or a mapping of policy fields, by name — every field, its
/// default and its check the core's (`PolicySpec`).
fn policy_spec(py: Python<'_>, name: &str, spec: &Bound<'_, PyAny>) -> PyResult<PolicySpec> {
    let about = format!("policy {name:?}");
    let mut policy = PolicySpec::default();
    let mut set = |field: &str, value: &Bound<'_, PyAny>| -> PyResult<()> {
        if value.is_none() {
            return Ok(());
        }
        match with_loose(field, value, |v| Ok(policy.set(field, v))) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(py_err_about(py, e, &about)),
            Err(e) => Err(e),
        }
    };
    let is_number = spec.is_instance_of::<PyInt>() || spec.is_instance_of::<PyFloat>();
    if spec.is_instance_of::<PyString>() || (is_number && !spec.is_instance_of::<PyBool>()) {
        set("rate", spec)?;
    } else if let Ok(fields) = spec.cast::<PyMapping>() {
        for item in fields.items()?.iter() {
            let (field, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
            let field: String = field.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "{about}: field names are str, got {}",
                    type_name(&field)
                ))
            })?;
            if field == "name" && !value.eq(name)? {
                return Err(py_err_about(
                    py,
                    Error::InvalidOption {
                        name: "name",
                        value: value.str()?.to_string(),
                        reason: "differs from the policy's name in policies",
                    },
                    &about,
                ));
            }
            set(&field, &value)?;
        }
    } else {
        return Err(PyTypeError::new_err(format!(
            "{about} must be a rate (\"10/s\", a number per second), a dict of policy fields, \
             or a Redis or shared limiter, got {}",
            type_name(spec)
        )));
    }
    policy
        .set("name", Loose::Text(name))
        .map_err(|e| py_err_about(py, e, &about))?;
    // Checked here, to name the policy; the gate builds it again.
    policy.build().map_err(|e| py_err_about(py, e, &about))?;
    Ok(policy)
}

/// A hook given to the gate: `None`, or a function.
fn hook(name: &str, f: Option<Bound<'_, PyAny>>) -> PyResult<Option<Py<PyAny>>> {
    match f.filter(|f| !f.is_none()) {
        None => Ok(None),
        Some(f) if f.is_callable() => Ok(Some(f.unbind())),
        Some(f) => Err(PyTypeError::new_err(format!(
            "{name} must be a function, got {}",
            type_name(&f)
        ))),
    }
}

// ------------------------------------------------------------- headers

/// The header lines of a request as the Python servers hand them over: an
/// ASGI `scope["headers"]` list of `(name, value)` bytes pairs, or a WSGI
/// environ (`HTTP_X_API_KEY`; the server has already joined repeated lines
/// with commas).
pub(crate) enum PyHeaders<'a, 'py> {
    Asgi(&'a Bound<'py, PyAny>),
    Environ(&'a Bound<'py, PyDict>, &'a [(String, Py<PyString>)]),
    None,
}

/// The bytes of a WSGI environ string, losslessly. PEP 3333's "native
/// strings" carry the request's bytes one per character (latin-1): those
/// bytes, exactly. A server that hands over characters above U+00FF has
/// decoded the bytes itself (as UTF-8): their UTF-8 bytes again — the bytes
/// the request carried — so no two different values share a key (`user€`
/// and `user?` once did).
pub(crate) fn wsgi_bytes(s: &str) -> Vec<u8> {
    let narrow: Option<Vec<u8>> = s.chars().map(|c| u8::try_from(u32::from(c)).ok()).collect();
    narrow.unwrap_or_else(|| s.as_bytes().to_vec())
}

impl Headers for PyHeaders<'_, '_> {
    fn for_each_line<F: FnMut(&[u8])>(&self, name: &str, mut f: F) {
        match self {
            PyHeaders::None => {}
            PyHeaders::Asgi(list) => {
                let Ok(iter) = list.try_iter() else { return };
                for item in iter.flatten() {
                    let (Ok(n), Ok(v)) = (item.get_item(0), item.get_item(1)) else {
                        continue;
                    };
                    let (Ok(n), Ok(v)) = (n.cast::<PyBytes>(), v.cast::<PyBytes>()) else {
                        continue;
                    };
                    if n.as_bytes().eq_ignore_ascii_case(name.as_bytes()) {
                        f(v.as_bytes());
                    }
                }
            }
            PyHeaders::Environ(environ, keys) => {
                let Some((_, key)) = keys.iter().find(|(n, _)| n == name) else {
                    return;
                };
                let Ok(Some(value)) = environ.get_item(key.bind(environ.py())) else {
                    return;
                };
                if let Ok(s) = value.cast::<PyString>() {
                    if let Ok(text) = s.to_cow() {
                        if text.is_ascii() {
                            f(text.as_bytes()); // the same bytes, without a copy
                        } else {
                            f(&wsgi_bytes(&text));
                        }
                    } else if let Ok(raw) = s
                        .call_method1("encode", ("utf-8", "surrogateescape"))
                        .and_then(|b| b.extract::<Vec<u8>>())
                    {
                        // Lone surrogates: a server's undecodable bytes kept
                        // with surrogateescape — those bytes.
                        f(&raw);
                    }
                } else if let Ok(b) = value.cast::<PyBytes>() {
                    f(b.as_bytes());
                }
            }
        }
    }
}

// ------------------------------------------------------------ answers

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A request's place among the requests in flight under the gate's
/// `concurrency_limit`: hold it until the response is done — a streaming
/// body until it is closed — then `release()` it (or `close()`: the same;
/// both idempotent). Released too when garbage-collected.
#[pyclass(frozen, module = "ratebound")]
pub(crate) struct Place {
    inner: Mutex<Option<any::Place>>,
}

#[pymethods]
impl Place {
    /// Gives the place back now (nothing if it already was).
    fn release(&self) {
        drop(lock(&self.inner).take());
    }

    /// `release()`, under the name a response body's `close()` has.
    fn close(&self) {
        self.release();
    }

    /// Whether the place is still held.
    #[getter]
    fn held(&self) -> bool {
        lock(&self.inner).is_some()
    }

    fn __repr__(&self) -> &'static str {
        if self.held() {
            "Place(held)"
        } else {
            "Place(released)"
        }
    }
}

/// The gate's answer to a request. `status` 0 (`passed`): on to the
/// application with `headers` added to its response, holding `place` (when
/// the gate is capped) until the response is done; otherwise answer with
/// `status`, `headers`, `content_type` and `body`. Header names and values
/// and the content type are bytes, or str for a WSGI request; the body is
/// bytes. `outcome` (`"allowed"`, `"refused"`, `"shed"`, `"rejected"`) and
/// `refused_by` (the refusing policy) are what `on_decision` was told.
#[pyclass(frozen, freelist = 64, module = "ratebound")]
pub(crate) struct Verdict {
    // The fields the front doors read on every request are Python objects
    // (`None` for nothing): a frozen class's `Py` fields are struct members,
    // read by the interpreter without a call.
    /// 0 to go on; else the status to answer with.
    #[pyo3(get)]
    status: Py<PyAny>,
    /// The quota fields, `(name, value)` pairs.
    #[pyo3(get)]
    headers: Py<PyList>,
    /// A refusal's content type, or `None`.
    #[pyo3(get)]
    content_type: Py<PyAny>,
    /// A refusal's body, or `None`.
    #[pyo3(get)]
    body: Py<PyAny>,
    /// The concurrency place of a passing request under a cap, or `None`.
    #[pyo3(get)]
    place: Py<PyAny>,
    code: u16,
    outcome: any::Outcome,
    refused_by: Option<String>,
}

#[pymethods]
impl Verdict {
    /// Whether the request goes on to the application.
    #[getter]
    fn passed(&self) -> bool {
        self.code == 0
    }

    #[getter]
    fn outcome(&self) -> &'static str {
        self.outcome.as_str()
    }

    #[getter]
    fn refused_by(&self) -> Option<&str> {
        self.refused_by.as_deref()
    }

    fn __repr__(&self) -> String {
        let by = match &self.refused_by {
            Some(name) => format!(", refused_by={name:?}"),
            None => String::new(),
        };
        format!(
            "Verdict(status={}, outcome={:?}{by})",
            self.code,
            self.outcome.as_str()
        )
    }
}

/// A request waiting for the gate's remote policies (Redis limiters,
/// shared-memory tables): each checks `identity` (`key:…`, `ip:…` or
/// `anonymous`, the same in every instance) in its own scope, then
/// `Gate.finish(ask, answers)` decides. It holds the request's concurrency
/// place: `close()` it (or let it go) when the answers never come.
#[pyclass(frozen, module = "ratebound")]
pub(crate) struct Ask {
    inner: Mutex<Option<any::Ask>>,
    /// What each remote policy checks.
    #[pyo3(get)]
    identity: Py<PyBytes>,
    wsgi: bool,
    label: Option<Py<PyAny>>,
    /// The gate that asked (its address).
    gate: usize,
}

#[pymethods]
impl Ask {
    /// Gives the request's place back without deciding (idempotent).
    fn close(&self) {
        drop(lock(&self.inner).take());
    }
}

// --------------------------------------------------------------- hooks

/// The front door's functions of the request, for the core's sequence. A
/// Python exception in one is kept (and nothing more is called) until the
/// sequence returns, then raised.
struct PyHooks<'a, 'py> {
    gate: &'a Gate,
    request: &'a Bound<'py, PyAny>,
    label: Option<&'a Bound<'py, PyAny>>,
    error: Option<PyErr>,
}

impl PyHooks<'_, '_> {
    fn ask(&mut self, f: &Option<Py<PyAny>>, failed: bool) -> bool {
        let Some(f) = f else { return false };
        if self.error.is_some() {
            return failed;
        }
        let py = self.request.py();
        match f
            .bind(py)
            .call1((self.request,))
            .and_then(|r| r.is_truthy())
        {
            Ok(answer) => answer,
            Err(e) => {
                self.error = Some(e);
                failed
            }
        }
    }
}

impl Hooks for PyHooks<'_, '_> {
    fn exempt(&mut self) -> bool {
        // A raising exempt() ends the sequence at once: no place, no token.
        let gate = self.gate;
        self.ask(&gate.exempt, true)
    }

    fn critical(&mut self) -> bool {
        // Raising: shed (no token spent), the error raised.
        let gate = self.gate;
        self.ask(&gate.critical, false)
    }

    fn with_key<R>(&mut self, f: impl FnOnce(Option<Key<'_>>) -> R) -> Option<R> {
        let gate = self.gate;
        let Some(key_fn) = &gate.key else {
            return Some(f(None));
        };
        if self.error.is_some() {
            return None;
        }
        let mut f = Some(f);
        let mut call = |key: Option<Key<'_>>| (f.take().expect("the key is given once"))(key);
        let key = key_fn.bind(self.request.py()).call1((self.request,));
        let failed = match key {
            Ok(k) if k.is_none() => return Some(call(None)),
            Ok(k) => match with_key(&k, |k| Ok(call(Some(k)))) {
                Ok(answer) => return Some(answer),
                Err(e) => e,
            },
            Err(e) => e,
        };
        // The key function raised, or gave what is no key: the sequence
        // stops (no bucket charged, nothing reported) and admit raises it.
        self.error = Some(failed);
        None
    }

    fn report(&mut self, verdict: &any::Verdict<'_>) {
        let gate = self.gate;
        let Some((on_decision, event)) = &gate.on_decision else {
            return;
        };
        if self.error.is_some() {
            return;
        }
        let py = self.request.py();
        let label = match &gate.label {
            Some(l) => Some(l.bind(py)),
            None => self.label,
        };
        let told = event
            .bind(py)
            .call1((
                verdict.outcome.as_str(),
                verdict.refused_by,
                gate.policies.bind(py),
                label,
            ))
            .and_then(|e| on_decision.bind(py).call1((e,)));
        if let Err(e) = told {
            self.error = Some(e);
        }
    }
}

// ---------------------------------------------------------------- gate

/// The whole request sequence of a Python front door, built from its
/// options by the core's parser (`GateSpec`): every rule and default the
/// core's, the same in Rust and Node.
#[pyclass(frozen, module = "ratebound")]
pub(crate) struct Gate {
    inner: any::Gate,
    /// Header names and the fixed policy value, made once as Python
    /// objects: `(name, as bytes, as str)`.
    fixed: Vec<(String, Py<PyAny>, Py<PyAny>)>,
    /// The header names the gate reads, with their WSGI environ keys.
    environ_keys: Vec<(String, Py<PyString>)>,
    exempt: Option<Py<PyAny>>,
    critical: Option<Py<PyAny>>,
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
    /// A core verdict (and its place) as a `Verdict`.
    fn verdict<'py>(
        &self,
        py: Python<'py>,
        v: &any::Verdict<'_>,
        place: Option<any::Place>,
        wsgi: bool,
    ) -> PyResult<Bound<'py, Verdict>> {
        let headers = PyList::empty(py);
        for (name, value) in v.fields.iter() {
            let value = match value {
                any::Field::Text(t) => self.text(py, t, wsgi),
                any::Field::Number(n) => self.text(py, &n.to_string(), wsgi),
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
            Verdict {
                status: v.status.into_pyobject(py)?.into_any().unbind(),
                headers: headers.unbind(),
                content_type,
                body,
                place,
                code: v.status,
                outcome: v.outcome,
                refused_by: v.refused_by.map(str::to_string),
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
    /// `exempt`, `critical`: functions of the request; `on_decision` is
    /// told a `RateLimitEvent` per request, with `label`.
    #[new]
    #[pyo3(signature = (
        options, policies=None, remote=None, *,
        key=None, exempt=None, critical=None, on_decision=None, label=None, clock=None,
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
        on_decision: Option<Bound<'_, PyAny>>,
        label: Option<Bound<'_, PyAny>>,
        clock: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
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
                (
                    RemoteKind::Redis,
                    engine.get().inner.config().algorithm.keyed(),
                )
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
    /// `None`: exempt, on to the application untouched. A `Verdict`: the
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
        let r = any::Request {
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
            return Err(e); // the place, if any, is given back here
        }
        Ok(match admitted {
            any::Admit::Exempt => None,
            // Only a failed hook stops the sequence, and its error is raised
            // above; a stop without one would be the core's bug.
            any::Admit::Stopped => {
                return Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "the request sequence stopped without a hook's error",
                ));
            }
            any::Admit::Decided(a) => Some(self.verdict(py, &a.verdict, a.place, wsgi)?.into_any()),
            any::Admit::Ask(ask) => {
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
    /// one `Decision` per remote policy, in order, or `None` for a policy
    /// whose table is full (it raised `TooManyKeys`; the gate answers as
    /// for its own).
    fn finish<'py>(
        &self,
        py: Python<'py>,
        ask: &Bound<'py, Ask>,
        answers: Vec<Option<Bound<'py, Decision>>>,
    ) -> PyResult<Bound<'py, Verdict>> {
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
        let answers: Vec<RemoteAnswer> = answers
            .iter()
            .map(|d| {
                d.as_ref()
                    .map_or(RemoteAnswer::Full, |d| d.get().inner.into())
            })
            .collect();
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
