//! What a Python front door gives the gate: option values made loose for
//! the core's parser, policies of `policies=`, hooks.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyMapping, PyString};
use ratebound::Error;
use ratebound::gate::{GateOptions, Loose, PolicySpec};
use ratebound::http::Priority;

use crate::convert::{number, type_name};
use crate::error::{OrPy, py_err, py_err_about};

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
pub(crate) fn policy_spec(
    py: Python<'_>,
    name: &str,
    spec: &Bound<'_, PyAny>,
) -> PyResult<PolicySpec> {
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
pub(crate) fn hook(name: &str, f: Option<Bound<'_, PyAny>>) -> PyResult<Option<Py<PyAny>>> {
    match f.filter(|f| !f.is_none()) {
        None => Ok(None),
        Some(f) if f.is_callable() => Ok(Some(f.unbind())),
        Some(f) => Err(PyTypeError::new_err(format!(
            "{name} must be a function, got {}",
            type_name(&f)
        ))),
    }
}

/// `priority=`: a constant (checked now) or a function of the request.
pub(crate) enum PriorityHook {
    /// Every request has this priority.
    Fixed(Priority),
    /// Asked of each request (when the cap needs to know).
    Call(Py<PyAny>),
}

/// The `priority` option: `None`, `"critical"` / `"normal"` /
/// `"background"` (a `ConfigError` naming any other string, now, at
/// startup), or a function of the request returning one of them.
pub(crate) fn priority_hook(
    py: Python<'_>,
    value: Option<Bound<'_, PyAny>>,
) -> PyResult<Option<PriorityHook>> {
    match value.filter(|v| !v.is_none()) {
        None => Ok(None),
        Some(v) => {
            if let Ok(s) = v.cast::<PyString>() {
                return Ok(Some(PriorityHook::Fixed(
                    Priority::parse(&s.to_cow()?).or_py(py)?,
                )));
            }
            if v.is_callable() {
                return Ok(Some(PriorityHook::Call(v.unbind())));
            }
            Err(py_err(
                py,
                Error::InvalidOption {
                    name: "priority",
                    value: v.repr()?.to_string(),
                    reason: "must be \"critical\", \"normal\", \"background\" or a function of the request returning one",
                },
            ))
        }
    }
}

/// What a `priority` function returned, as a priority: a `ConfigError`
/// naming anything but `"critical"`, `"normal"` or `"background"`.
pub(crate) fn priority_of(answer: &Bound<'_, PyAny>) -> PyResult<Priority> {
    let py = answer.py();
    let about = "priority(request)";
    if let Ok(s) = answer.cast::<PyString>() {
        return Priority::parse(&s.to_cow()?).map_err(|e| py_err_about(py, e, about));
    }
    Err(py_err_about(
        py,
        Error::InvalidOption {
            name: "priority",
            value: answer.repr()?.to_string(),
            reason: "is not a str: the function returns \"critical\", \"normal\" or \"background\"",
        },
        about,
    ))
}
