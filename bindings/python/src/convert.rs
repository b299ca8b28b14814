//! Python values into the core's types: numbers, rates, keys, clocks.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt, PyString};
use ratebound::Error;
use ratebound::any::{self, AnyClock, Key, Rate};

use crate::clock::ManualClock;
use crate::error::{OrPy, py_err};

// ------------------------------------------------------ value conversion

pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_string())
}

/// A number argument as a float; a bool, a string or anything else is a
/// `TypeError`, an int too large for a float a `QuotaError` naming it.
pub(crate) fn number(py: Python<'_>, name: &'static str, obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    if obj.is_instance_of::<PyBool>()
        || !(obj.is_instance_of::<PyInt>() || obj.is_instance_of::<PyFloat>())
    {
        return Err(PyTypeError::new_err(format!(
            "{name} must be a number, got {}",
            type_name(obj)
        )));
    }
    obj.extract::<f64>()
        .map_err(|_| bad_number(py, name, obj, "is too large"))
}

/// A number argument of seconds as a duration: a finite number ≥ 0 (the
/// errors of `number`, then the core's `QuotaError` naming it).
pub(crate) fn seconds_of(
    py: Python<'_>,
    name: &'static str,
    obj: &Bound<'_, PyAny>,
) -> PyResult<std::time::Duration> {
    any::seconds(name, number(py, name, obj)?).or_py(py)
}

/// Optional seconds, checked by the core (finite, ≥ 0).
pub(crate) fn opt_seconds(
    py: Python<'_>,
    name: &'static str,
    obj: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<std::time::Duration>> {
    opt_number(py, name, obj)?
        .map(|t| any::seconds(name, t))
        .transpose()
        .or_py(py)
}

/// A whole number `name` from 0 to 2^64 - 1: a `TypeError` for anything but
/// an int, a `QuotaError` naming the value (and `reason`) outside that.
pub(crate) fn whole_u64(
    py: Python<'_>,
    name: &'static str,
    obj: &Bound<'_, PyAny>,
    reason: &'static str,
) -> PyResult<u64> {
    if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, got {}",
            type_name(obj)
        )));
    }
    obj.extract::<u64>()
        .map_err(|_| bad_number(py, name, obj, reason))
}

/// A count of nanoseconds: an int from 0 to 2^64 - 1 (a `QuotaError`
/// naming the value outside that, a `TypeError` for anything but an int).
pub(crate) fn whole_nanos(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    whole_u64(
        py,
        "nanos",
        obj,
        "must be a whole number of nanoseconds from 0 to 2^64 - 1",
    )
}

/// The core's `QuotaError` for the number `name`, naming `obj` (its repr).
fn bad_number(
    py: Python<'_>,
    name: &'static str,
    obj: &Bound<'_, PyAny>,
    reason: &'static str,
) -> PyErr {
    let value = obj.repr().map(|r| r.to_string()).unwrap_or_default();
    py_err(
        py,
        Error::InvalidNumber {
            name,
            value,
            reason,
        },
    )
}

pub(crate) fn opt_number(
    py: Python<'_>,
    name: &'static str,
    obj: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<f64>> {
    match obj {
        Some(o) if !o.is_none() => number(py, name, o).map(Some),
        _ => Ok(None),
    }
}

/// A token count as the core's `count` takes it: `None` (not given) its
/// default, else a whole number from 0 to 2^53.
pub(crate) fn count(py: Python<'_>, obj: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
    let n = match obj {
        None => None,
        Some(o) if o.is_none() => None,
        // An int, the common case, without `number`'s type checks; as a
        // double, as every number option.
        Some(o) => match o.extract::<u64>() {
            Ok(n) if !o.is_instance_of::<PyBool>() => Some(n as f64),
            _ => Some(number(py, "n", o)?),
        },
    };
    any::count(n).or_py(py)
}

/// A rate: tokens per second (int or float) or a quota string.
pub(crate) fn with_rate<T>(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    f: impl FnOnce(Rate<'_>) -> Result<T, Error>,
) -> PyResult<T> {
    if let Ok(s) = obj.cast::<PyString>() {
        let text = s.to_cow()?;
        return f(Rate::Text(&text)).or_py(py);
    }
    let r = number(py, "rate", obj).map_err(|e| {
        if e.is_instance_of::<PyTypeError>(py) {
            PyTypeError::new_err(format!(
                "rate must be a number of tokens per second or a string like \"10/s\", got {}",
                type_name(obj)
            ))
        } else {
            e
        }
    })?;
    f(Rate::PerSecond(r)).or_py(py)
}

pub(crate) fn clock_of(clock: Option<&Bound<'_, PyAny>>) -> PyResult<AnyClock> {
    match clock {
        None => Ok(AnyClock::default()),
        Some(c) if c.is_none() => Ok(AnyClock::default()),
        Some(c) => match c.cast::<ManualClock>() {
            Ok(m) => Ok(AnyClock::Manual(m.get().inner.clone())),
            Err(_) => Err(PyTypeError::new_err(format!(
                "clock must be a ratebound.ManualClock or None, got {}",
                type_name(c)
            ))),
        },
    }
}

/// Calls `f` with the key as the core takes it (str, bytes or int; a bool
/// or anything else is a `TypeError`).
pub(crate) fn with_key<R>(
    obj: &Bound<'_, PyAny>,
    f: impl FnOnce(Key<'_>) -> PyResult<R>,
) -> PyResult<R> {
    if let Ok(s) = obj.cast::<PyString>() {
        // One temporary bytes object: the abi3 (3.9) API has no borrowed
        // UTF-8 view. A lone surrogate raises UnicodeEncodeError here.
        let utf8 = s.encode_utf8()?;
        let text = std::str::from_utf8(utf8.as_bytes())
            .map_err(|_| PyValueError::new_err("a str key must encode to UTF-8"))?;
        return f(Key::Text(text));
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return f(Key::Bytes(b.as_bytes()));
    }
    if obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<PyBool>() {
        let i = obj
            .extract::<i128>()
            .map_err(|_| PyValueError::new_err("an int key must fit in 128 bits"))?;
        return f(Key::Int(i));
    }
    Err(PyTypeError::new_err(format!(
        "a key must be str, bytes or int, got {}",
        type_name(obj)
    )))
}

pub(crate) fn nanos_to_secs(n: u64) -> f64 {
    n as f64 / 1e9
}
