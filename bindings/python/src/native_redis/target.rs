//! Where a native connection goes, as Python gives it: a URL or a list of
//! cluster nodes' URLs, read by `ratebound_redis::connect::Target` (every
//! bad value a `ConfigError` naming it, its password hidden).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};
use ratebound_redis::connect::Target;

use crate::convert::type_name;
use crate::error::error_class;

/// Whether `obj` names a target rather than being a client: a `str`, or a
/// list or tuple of them.
pub(crate) fn is_target(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_instance_of::<PyString>()
        || ((obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>())
            && obj
                .try_iter()
                .map(|mut it| it.all(|x| x.is_ok_and(|x| x.is_instance_of::<PyString>())))
                .unwrap_or(false))
}

/// Reads what `rb.redis` was given in place of a client: a URL, or a list
/// (tuple) of cluster nodes' URLs (a list names a cluster's nodes, even a
/// list of one); `ca_file`: see `Target::parse`.
pub(crate) fn parse(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    ca_file: Option<&str>,
) -> PyResult<Target> {
    let list = !obj.is_instance_of::<PyString>();
    let urls: Vec<String> = if !list {
        vec![obj.extract::<String>()?]
    } else if is_target(obj) {
        obj.try_iter()?
            .map(|x| x.and_then(|x| x.extract::<String>()))
            .collect::<PyResult<_>>()?
    } else {
        return Err(PyTypeError::new_err(format!(
            "a Redis target must be a URL (str) or a list of cluster nodes' URLs, got {}",
            type_name(obj)
        )));
    };
    Target::parse(&urls, list, ca_file).map_err(|e| {
        match error_class(py, "ConfigError").and_then(|c| c.call1((e.0, "invalid_option"))) {
            Ok(e) => PyErr::from_value(e),
            Err(e) => e,
        }
    })
}
