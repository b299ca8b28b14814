//! The protocol-neutral HTTP helpers (`retry_after_secs`, `ip_key`, `client_ip`, ...).

use std::net::IpAddr;
use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;
use ratebound::any::{self, GateOptions};
use ratebound::http::Forwarding;

use crate::convert::*;
use crate::error::*;
use crate::gate::*;

/// Whole seconds, rounded up, for a wait of `nanos` (the Retry-After value).
#[pyfunction]
pub(crate) fn retry_after_secs(py: Python<'_>, nanos: &Bound<'_, PyAny>) -> PyResult<u64> {
    Ok(ratebound::http::retry_after_secs(Duration::from_nanos(
        whole_nanos(py, nanos)?,
    )))
}

/// The address to key on: IPv4-mapped unwrapped, IPv6 cut to `prefix` bits
/// (the core's default and its /128 clamp: `any::ipv6_prefix`).
#[pyfunction]
#[pyo3(signature = (ip, prefix=None))]
pub(crate) fn ip_key(
    py: Python<'_>,
    ip: &str,
    prefix: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let prefix = match prefix.filter(|p| !p.is_none()) {
        Some(p) => any::ipv6_prefix("prefix", number(py, "prefix", p)?).or_py(py)?,
        None => any::DEFAULT_IPV6_PREFIX,
    };
    let ip: IpAddr = ip
        .parse()
        .map_err(|_| PyValueError::new_err(format!("not an IP address: {ip:?}")))?;
    Ok(ratebound::http::ip_key(ip, prefix).to_string())
}

/// The client's address from the peer and the request's header lines
/// (`(name, value)` pairs of str or bytes, in order), believing only the
/// `client_ip_header` (default `X-Forwarded-For`) of `trusted_proxies` (CIDR
/// strings or a hop count) — the middleware's rule.
#[pyfunction]
#[pyo3(signature = (peer, headers=None, trusted_proxies=None, client_ip_header=None))]
pub(crate) fn client_ip(
    py: Python<'_>,
    peer: &str,
    headers: Option<&Bound<'_, PyAny>>,
    trusted_proxies: Option<&Bound<'_, PyAny>>,
    client_ip_header: Option<&str>,
) -> PyResult<String> {
    let peer: IpAddr = peer
        .parse()
        .map_err(|_| PyValueError::new_err(format!("not an IP address: {peer:?}")))?;
    let mut o = GateOptions::default();
    if let Some(t) = trusted_proxies {
        set_option(&mut o, "trusted_proxies", t)?;
    }
    let forwarding = match client_ip_header {
        Some(name) => Forwarding::parse(name).or_py(py)?,
        None => Forwarding::default(),
    };
    let mut lines: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    if let Some(h) = headers.filter(|h| !h.is_none()) {
        let as_bytes = |o: Bound<'_, PyAny>| -> PyResult<Vec<u8>> {
            if let Ok(s) = o.cast::<PyString>() {
                Ok(s.to_cow()?.as_bytes().to_vec())
            } else {
                o.extract::<Vec<u8>>().map_err(|_| {
                    PyTypeError::new_err("header lines are (name, value) pairs of str or bytes")
                })
            }
        };
        for item in h.try_iter()? {
            let item = item?;
            lines.push((as_bytes(item.get_item(0)?)?, as_bytes(item.get_item(1)?)?));
        }
    }
    Ok(ratebound::http::client_ip(peer, &lines, &forwarding, &o.trusted).to_string())
}

/// The `RateLimit-Policy` value for `(name, quota_string)` token-bucket
/// policies.
#[pyfunction]
pub(crate) fn ratelimit_policy(
    py: Python<'_>,
    policies: Vec<(String, String)>,
) -> PyResult<String> {
    let mut list = Vec::new();
    for (name, quota) in policies {
        let q = ratebound::Quota::parse(&quota).or_py(py)?;
        list.push(ratebound::http::Policy::for_quota(&name, q).or_py(py)?);
    }
    Ok(ratebound::http::ratelimit_policy(&list))
}

/// The clock source the default clock uses ("tsc" or "os").
#[pyfunction]
pub(crate) fn clock_source() -> &'static str {
    ratebound::MonotonicClock::source()
}

/// A header line: (name, value), str or bytes.
type Line = (Py<PyAny>, Py<PyAny>);

/// The header lines of a response with this limit's quota fields `mine`
/// added to `present` (a response's lines, which an inner limit — a
/// route's own — may have given quota fields already), by the core's rule
/// (`ratebound::gate::merge_fields`: the lists joined, the tighter legacy
/// fields, the longer wait), this limit's entries first (it decided
/// first); `None` when `present` has no quota field (then append `mine`).
/// Pairs of str or bytes; the merged fields in the kind of `mine`'s.
#[pyfunction]
pub(crate) fn _merge_fields<'py>(
    py: Python<'py>,
    present: &Bound<'py, PyAny>,
    mine: &Bound<'py, PyAny>,
) -> PyResult<Option<Vec<Line>>> {
    let text = |o: &Bound<'py, PyAny>| -> PyResult<(String, bool)> {
        if let Ok(b) = o.cast::<pyo3::types::PyBytes>() {
            return Ok((String::from_utf8_lossy(b.as_bytes()).into_owned(), true));
        }
        let s = o.cast::<PyString>().map_err(|_| {
            PyTypeError::new_err("header lines are (name, value) pairs of str or bytes")
        })?;
        Ok((s.to_cow()?.into_owned(), false))
    };
    // The common case first, without a copy: no quota field there.
    let mut any = false;
    for item in present.try_iter()? {
        let name = item?.get_item(0)?;
        any = if let Ok(b) = name.cast::<pyo3::types::PyBytes>() {
            ratebound::gate::is_gate_field(b.as_bytes())
        } else if let Ok(s) = name.cast::<PyString>() {
            ratebound::gate::is_gate_field(s.to_cow()?.as_bytes())
        } else {
            false
        };
        if any {
            break;
        }
    }
    if !any {
        return Ok(None);
    }
    let mut kept: Vec<Line> = Vec::new();
    let mut theirs = Vec::new();
    for item in present.try_iter()? {
        let item = item?;
        let (name, value) = (item.get_item(0)?, item.get_item(1)?);
        let (n, _) = text(&name)?;
        if ratebound::gate::is_gate_field(n.as_bytes()) {
            theirs.push((n, text(&value)?.0));
        } else {
            kept.push((name.unbind(), value.unbind()));
        }
    }
    if theirs.is_empty() {
        return Ok(None);
    }
    let mut ours = Vec::new();
    let mut as_bytes = false;
    for item in mine.try_iter()? {
        let item = item?;
        let (n, b) = text(&item.get_item(0)?)?;
        as_bytes = b;
        ours.push((n, text(&item.get_item(1)?)?.0));
    }
    for (name, value) in ratebound::gate::merge_fields(&ours, &theirs) {
        let pair: Line = if as_bytes {
            (
                pyo3::types::PyBytes::new(py, name.as_bytes())
                    .into_any()
                    .unbind(),
                pyo3::types::PyBytes::new(py, value.as_bytes())
                    .into_any()
                    .unbind(),
            )
        } else {
            (
                PyString::new(py, name).into_any().unbind(),
                PyString::new(py, &value).into_any().unbind(),
            )
        };
        kept.push(pair);
    }
    Ok(Some(kept))
}

/// Raises `ConfigError` unless a route's own limit takes the option `name`
/// (the core's rule, `ratebound::gate::route_option`: every option of the
/// middleware but shedding, which is the application's).
#[pyfunction]
pub(crate) fn _route_option(py: Python<'_>, name: &str) -> PyResult<()> {
    ratebound::gate::route_option(name).or_py(py)
}

/// The core's error for a wait refused because it would be longer than the
/// caller accepts (`Error::DeadlineExceeded`: `RateLimitExceeded`, code
/// `deadline_exceeded`), for the `limit` decorator's refusal: `wait` and
/// `max_wait` in seconds (0: refused at once).
#[pyfunction]
pub(crate) fn _deadline_exceeded(py: Python<'_>, wait: f64, max_wait: f64) -> Py<PyAny> {
    let secs = |s: f64| Duration::try_from_secs_f64(s).unwrap_or_default();
    let e = ratebound::Error::DeadlineExceeded {
        wait: secs(wait),
        max_wait: secs(max_wait),
    };
    py_err(py, e).into_value(py).into_any()
}
