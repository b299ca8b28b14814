//! The protocol-neutral HTTP helpers (`retry_after_secs`, `ip_key`, `client_ip`, ...).

use std::net::IpAddr;
use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;
use ratebound::any;
use ratebound::gate::GateOptions;
use ratebound::http::Forwarding;

use crate::convert::{number, whole_nanos};
use crate::error::{OrPy, py_err};
use crate::gate::set_option;

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
type Line<'py> = (Bound<'py, PyAny>, Bound<'py, PyAny>);

/// The header lines of a response with this limit's quota fields `mine`
/// merged into `present` (a response's lines, to which an inner limit — a
/// route's own — gave quota fields) by the core's rule
/// (`ratebound::gate::merge_fields`: the lists joined, the tighter legacy
/// fields, the longer wait), this limit's entries first (it decided
/// first). Pairs of str or bytes; the merged fields in the kind of
/// `mine`'s.
#[pyfunction]
pub(crate) fn _merge_fields<'py>(
    py: Python<'py>,
    present: Vec<Line<'py>>,
    mine: Vec<Line<'py>>,
) -> PyResult<Vec<Line<'py>>> {
    let text = |o: &Bound<'py, PyAny>| -> PyResult<String> {
        match o.cast::<pyo3::types::PyBytes>() {
            Ok(b) => Ok(String::from_utf8_lossy(b.as_bytes()).into_owned()),
            Err(_) => Ok(o.cast::<PyString>()?.to_cow()?.into_owned()),
        }
    };
    let pairs = |lines: &[Line<'py>]| -> PyResult<Vec<(String, String)>> {
        lines
            .iter()
            .map(|(n, v)| Ok((text(n)?, text(v)?)))
            .collect()
    };
    let (theirs, mut out): (Vec<_>, Vec<_>) = present
        .into_iter()
        .partition(|(n, _)| text(n).is_ok_and(|n| ratebound::gate::is_gate_field(n.as_bytes())));
    let as_bytes = mine
        .first()
        .is_some_and(|(n, _)| n.is_instance_of::<pyo3::types::PyBytes>());
    for (name, value) in ratebound::gate::merge_fields(&pairs(&mine)?, &pairs(&theirs)?) {
        out.push(if as_bytes {
            let bytes = |t: &str| pyo3::types::PyBytes::new(py, t.as_bytes()).into_any();
            (bytes(name), bytes(&value))
        } else {
            (
                PyString::new(py, name).into_any(),
                PyString::new(py, &value).into_any(),
            )
        });
    }
    Ok(out)
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
