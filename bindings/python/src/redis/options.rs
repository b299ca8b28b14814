//! `_RedisEngine`'s options, read into the engine's configuration.

use pyo3::prelude::*;
use pyo3::types::PyBool;
use ratebound::gate::Loose;
use ratebound_redis::{Algorithm, Config};

use crate::convert::opt_number;
use crate::error::OrPy;

/// The configuration of an engine of `algorithm` from its options
/// (`numbers`: the numeric ones by name, None where not given): every
/// option is parsed, checked and defaulted by the core.
pub(super) fn config(
    py: Python<'_>,
    algorithm: Algorithm,
    prefix: Option<&str>,
    on_error: Option<&str>,
    numbers: [(&'static str, Option<&Bound<'_, PyAny>>); 6],
    batch: Option<&Bound<'_, PyAny>>,
) -> PyResult<Config> {
    let mut options: Vec<(&str, Loose<'_>)> = Vec::new();
    if let Some(p) = prefix {
        options.push(("prefix", Loose::Text(p)));
    }
    if let Some(o) = on_error {
        options.push(("on_error", Loose::Text(o)));
    }
    for (name, value) in numbers {
        if let Some(n) = opt_number(py, name, value)? {
            options.push((name, Loose::Number(n)));
        }
    }
    // `batch` (a bool; anything else is the core's error naming it).
    let batch_text;
    if let Some(b) = batch.filter(|b| !b.is_none()) {
        let loose = if b.is_instance_of::<PyBool>() {
            Loose::Bool(b.extract()?)
        } else {
            batch_text = b.repr()?.to_string();
            Loose::Text(&batch_text)
        };
        options.push(("batch", loose));
    }
    Config::from_options(algorithm, &options).or_py(py)
}
