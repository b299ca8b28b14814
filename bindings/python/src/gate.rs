//! `Gate_`: the whole middleware decision, for `ratebound.asgi` and `ratebound.wsgi`.

use std::net::IpAddr;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use ratebound::any::{self, Gate, GateOptions, Key, KeySource, Loose, RemoteAnswer};
use ratebound::http::Headers;

use crate::convert::*;
use crate::decision::*;
use crate::error::*;
use crate::redis::*;

// ------------------------------------------------------------------ http

/// A middleware option as the core's loose parser takes it: `None` is "not
/// given" (the core's default).
pub(crate) fn set_option(
    options: &mut GateOptions,
    name: &str,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let py = value.py();
    if value.is_none() {
        return Ok(());
    }
    let result = if let Ok(s) = value.cast::<PyString>() {
        options.set(name, Loose::Text(&s.to_cow()?))
    } else if value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must not be a bool, got {}",
            value.repr()?
        )));
    } else if value.is_instance_of::<PyInt>() || value.is_instance_of::<PyFloat>() {
        options.set(name, Loose::Number(number(py, "option", value)?))
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
        options.set(name, Loose::List(&list))
    };
    result.or_py(py)
}

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
                        f(&wsgi_bytes(&text));
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

/// The whole decision of the ASGI and WSGI middleware (`ratebound.asgi`,
/// `ratebound.wsgi` drive it): built from the middleware's options by the
/// core's parser, every rule and default the core's.
#[pyclass(frozen, module = "ratebound")]
pub(crate) struct Gate_ {
    pub(crate) inner: Gate,
    /// Header names and the fixed policy value, made once as Python
    /// objects: `(name, as bytes, as str)`.
    pub(crate) fixed: Vec<(String, Py<PyAny>, Py<PyAny>)>,
    /// The header names the gate reads, with their WSGI environ keys.
    pub(crate) environ_keys: Vec<(String, Py<PyString>)>,
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

impl Gate_ {
    /// `f` given the request `key`, `peer` and `headers` (an ASGI header
    /// list, or with `wsgi` the environ) make.
    fn with_request<'py, R>(
        &self,
        key: Option<&Bound<'py, PyAny>>,
        peer: Option<&str>,
        headers: Option<&Bound<'py, PyAny>>,
        wsgi: bool,
        f: impl FnOnce(&any::Request<'_, PyHeaders<'_, 'py>>) -> PyResult<R>,
    ) -> PyResult<R> {
        let peer = peer.and_then(|p| p.parse::<IpAddr>().ok());
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
        let run = |key: Option<Key<'_>>| {
            f(&any::Request {
                key,
                peer,
                headers: &lines,
            })
        };
        match key.filter(|k| !k.is_none()) {
            Some(k) => with_key(k, |k| run(Some(k))),
            None => run(None),
        }
    }

    /// `(status, headers, content_type, body)` for Python.
    fn verdict<'py>(
        &self,
        py: Python<'py>,
        v: &any::Verdict<'_>,
        wsgi: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let headers = PyList::empty(py);
        for (name, value) in v.fields.iter() {
            let value = match value {
                any::Field::Text(t) => self.text(py, t, wsgi),
                any::Field::Number(n) => self.text(py, &n.to_string(), wsgi),
            };
            headers.append((self.text(py, name, wsgi), value))?;
        }
        let (ctype, body) = match &v.body {
            Some((c, b)) => (
                Some(self.text(py, c, wsgi)),
                Some(PyBytes::new(py, b.as_bytes())),
            ),
            None => (None, None),
        };
        let refused_by = v.refused_by.map(|name| PyString::new(py, name));
        (
            v.status,
            headers,
            ctype,
            body,
            v.outcome.as_str(),
            refused_by,
        )
            .into_pyobject(py)
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
}

#[pymethods]
impl Gate_ {
    /// `policies`: `(name, algorithm, rate, burst, limit, window)` tuples;
    /// `options`: the middleware's options by name (`None` values are not
    /// given); `given_key`: the application passes each request's key.
    #[new]
    #[pyo3(signature = (policies, options, *, given_key=false, clock=None, remote=None))]
    fn new(
        py: Python<'_>,
        policies: &Bound<'_, PyAny>,
        options: &Bound<'_, PyDict>,
        given_key: bool,
        clock: Option<&Bound<'_, PyAny>>,
        remote: Option<Vec<(String, Bound<'_, PyAny>)>>,
    ) -> PyResult<Self> {
        let mut list = Vec::new();
        for item in policies.try_iter()? {
            let item = item?;
            let tuple = item.cast::<PyTuple>().map_err(|_| {
                PyTypeError::new_err(
                    "policies must be (name, algorithm, rate, burst, limit, window) tuples",
                )
            })?;
            let name: String = tuple.get_item(0)?.extract()?;
            let algorithm: String = tuple.get_item(1)?.extract()?;
            let rate = tuple.get_item(2)?;
            let b = opt_number(py, "burst", Some(&tuple.get_item(3)?))?;
            let l = opt_number(py, "limit", Some(&tuple.get_item(4)?))?;
            let w = opt_number(py, "window", Some(&tuple.get_item(5)?))?;
            let alg = if rate.is_none() {
                any::keyed_algorithm(algorithm.as_str(), None, b, l, w).or_py(py)?
            } else {
                with_rate(py, &rate, |r| {
                    any::keyed_algorithm(algorithm.as_str(), Some(r), b, l, w)
                })?
            };
            list.push((name, alg));
        }
        let mut o = GateOptions::default();
        for (name, value) in options.iter() {
            let name: String = name.extract()?;
            set_option(&mut o, &name, &value)?;
        }
        if given_key {
            o.key = KeySource::Given;
        }
        // Policies decided elsewhere: a global limit in Redis (its engine),
        // or a limit shared by the host's processes (shared memory).
        for (name, limiter) in remote.iter().flatten() {
            let algorithm = if let Ok(engine) = limiter.cast::<RedisEngine_>() {
                engine.get().inner.config().algorithm.keyed()
            } else if let Ok(shared) = limiter.cast::<crate::shared::SharedKeyedLimiter>() {
                shared.get().algorithm()
            } else {
                return Err(PyTypeError::new_err(format!(
                    "a remote policy must be a Redis limiter or a SharedKeyedLimiter, got {}",
                    type_name(limiter)
                )));
            };
            o.remote.push((name.clone(), algorithm));
        }
        let inner = Gate::new(list, o, clock_of(clock)?).or_py(py)?;
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
        Ok(Gate_ {
            inner,
            fixed,
            environ_keys,
        })
    }

    /// `(status, headers, content_type, body)`: status 0 lets the request
    /// through with `headers` added to its response; otherwise answer with
    /// status, headers and body. `headers` in: the ASGI scope's header
    /// list, or with `wsgi=True` the WSGI environ. Header names and values
    /// and the content type out are bytes, or with `wsgi=True` str (the body
    /// stays bytes).
    #[pyo3(signature = (key, peer=None, headers=None, wsgi=false))]
    fn decide<'py>(
        &self,
        py: Python<'py>,
        key: Option<&Bound<'py, PyAny>>,
        peer: Option<&str>,
        headers: Option<&Bound<'py, PyAny>>,
        wsgi: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        self.with_request(key, peer, headers, wsgi, |r| {
            self.verdict(py, &self.inner.decide(r), wsgi)
        })
    }

    /// The request's key as text every instance derives alike, for the
    /// `remote` (Redis) policies: bytes (`key:…`, `ip:…` or `anonymous`), or
    /// the status a keyless request is refused with.
    #[pyo3(signature = (key, peer=None, headers=None, wsgi=false))]
    fn identity<'py>(
        &self,
        py: Python<'py>,
        key: Option<&Bound<'py, PyAny>>,
        peer: Option<&str>,
        headers: Option<&Bound<'py, PyAny>>,
        wsgi: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.with_request(key, peer, headers, wsgi, |r| {
            Ok(match self.inner.identity(r) {
                Ok(text) => PyBytes::new(py, &text).into_any(),
                Err(status) => status.into_pyobject(py)?.into_any(),
            })
        })
    }

    /// `decide` with the `remote` policies' decisions for the request's
    /// `identity`, in order (none when `identity` gave a status); `None`
    /// for a policy whose table is full (it raised `TooManyKeys`): the gate
    /// answers as for its own.
    #[pyo3(signature = (key, peer, headers, remote, wsgi=false))]
    fn decide_with<'py>(
        &self,
        py: Python<'py>,
        key: Option<&Bound<'py, PyAny>>,
        peer: Option<&str>,
        headers: Option<&Bound<'py, PyAny>>,
        remote: Vec<Option<PyRef<'py, Decision>>>,
        wsgi: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let decisions: Vec<RemoteAnswer> = remote
            .iter()
            .map(|d| d.as_ref().map_or(RemoteAnswer::Full, |d| d.inner.into()))
            .collect();
        self.with_request(key, peer, headers, wsgi, |r| {
            self.verdict(py, &self.inner.decide_with(r, &decisions), wsgi)
        })
    }

    /// Load shedding: a place among the requests in flight (always `True`
    /// without a concurrency limit); pair a `True` with one `leave()`.
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

    /// The 503 answer to a shed request, as `decide` returns answers.
    #[pyo3(signature = (wsgi=false))]
    fn shed<'py>(&self, py: Python<'py>, wsgi: bool) -> PyResult<Bound<'py, PyTuple>> {
        self.verdict(py, &self.inner.shed(), wsgi)
    }

    /// The `RateLimit-Policy` field value.
    #[getter]
    fn policy_field(&self) -> &str {
        self.inner.policy_field()
    }

    /// The policies' names, local then remote (for `on_decision`).
    #[getter]
    fn policy_names(&self) -> Vec<String> {
        self.inner.policy_names().map(str::to_string).collect()
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

/// An IPv6 prefix length: a whole number ≥ 0; above 128 counts as 128.
pub(crate) fn prefix_of(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<u8> {
    let bits = any::whole("ipv6_prefix", number(py, "ipv6_prefix", obj)?, 0).or_py(py)?;
    Ok(bits.min(128) as u8)
}
