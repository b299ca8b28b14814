//! Core errors as Python exceptions (the classes live in `ratebound._errors`).

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use ratebound::Error;

// ---------------------------------------------------------------- errors

pub(crate) static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// The Python exception for a core error: the classes live in
/// `ratebound._errors` (plain Python, so they pickle and subclass normally);
/// each carries `.code`, the core's stable `Error::code()`.
pub(crate) fn py_err(py: Python<'_>, e: Error) -> PyErr {
    let message = e.to_string();
    py_err_saying(py, e, message)
}

/// [`py_err`], its message prefixed with what it is about (`policy "a"`).
pub(crate) fn py_err_about(py: Python<'_>, e: Error, about: &str) -> PyErr {
    let message = format!("{about}: {e}");
    py_err_saying(py, e, message)
}

fn py_err_saying(py: Python<'_>, e: Error, message: String) -> PyErr {
    let class = match &e {
        Error::InsufficientCapacity { .. } => "InsufficientCapacity",
        Error::DeadlineExceeded { .. } => "RateLimitExceeded",
        Error::TooManyKeys { .. } => "TooManyKeys",
        Error::Unsupported { .. } => "Unsupported",
        Error::InvalidOption { .. } => "ConfigError",
        Error::Missing { .. } => "MissingValue",
        Error::StoreMisconfigured { .. } => "StoreMisconfigured",
        Error::StoreUnavailable { .. } => "StoreUnavailable",
        _ => "QuotaError",
    };
    let made = (|| -> PyResult<PyErr> {
        let cls = error_class(py, class)?;
        let instance = match &e {
            Error::DeadlineExceeded { wait, max_wait } => cls.call1((
                message,
                e.code(),
                wait.as_secs_f64(),
                max_wait.as_secs_f64(),
            ))?,
            Error::StoreUnavailable { retry_after, .. } => {
                cls.call1((message, e.code(), retry_after.as_secs_f64()))?
            }
            _ => cls.call1((message, e.code()))?,
        };
        Ok(PyErr::from_value(instance))
    })();
    made.unwrap_or_else(|err| err)
}

/// The exception class `name` of `ratebound._errors`.
pub(crate) fn error_class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let module =
        ERRORS.get_or_try_init(py, || py.import("ratebound._errors").map(Bound::unbind))?;
    module.bind(py).getattr(name)
}

pub(crate) trait OrPy<T> {
    fn or_py(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> OrPy<T> for Result<T, Error> {
    fn or_py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| py_err(py, e))
    }
}
