//! `_RedisCall`: one script run the engine asks for, and its RESP form.

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use ratebound_redis::Call;

use crate::convert::whole_u64;

/// One script run the engine asks for (see `ratebound.redis`): run
/// `EVALSHA sha 1 key *args`, and on `NOSCRIPT` `EVAL text 1 key *args`,
/// then hand the outcome to `RedisEngine.finish`.
#[pyclass(name = "_RedisCall", frozen, module = "ratebound")]
pub(crate) struct RedisCall {
    pub(crate) inner: Call,
}

#[pymethods]
impl RedisCall {
    /// The script's SHA-1 (hex), for `EVALSHA`.
    #[getter]
    fn sha(&self) -> &'static str {
        self.inner.script.sha()
    }
    /// The script's Lua source, for `EVAL` after a `NOSCRIPT` reply.
    #[getter]
    fn text(&self) -> &'static str {
        self.inner.script.text
    }
    /// The script's short name: "gcra", "fixed_window", "sliding_window".
    #[getter]
    fn script(&self) -> &'static str {
        self.inner.script.name
    }
    /// The one key: the prefix and the caller's key, raw bytes.
    #[getter]
    fn key<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.key)
    }
    /// The script's arguments (ARGV), as strings.
    #[getter]
    fn args(&self) -> Vec<String> {
        self.inner.args.clone()
    }
    /// `EVALSHA sha 1 key *args` in Redis' protocol (RESP), ready to be
    /// written to a connection as it is (`send_packed_command`).
    #[getter]
    fn command<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(
            py,
            &packed(&self.inner, b"EVALSHA", self.inner.script.sha()),
        )
    }
    /// `EVAL text 1 key *args` in Redis' protocol: the same call after a
    /// `NOSCRIPT` reply, loading the script.
    #[getter]
    fn eval_command<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &packed(&self.inner, b"EVAL", self.inner.script.text))
    }
    /// What the call asks: "check", "lease", "return", "reserve" or "pause".
    #[getter]
    fn kind(&self) -> &'static str {
        self.inner.kind.as_str()
    }
    /// The tokens asked for.
    #[getter]
    fn n(&self) -> u64 {
        self.inner.n
    }
    /// The same call judged at `now_us` (µs of Redis time) instead of
    /// Redis' `TIME`: the explicit-time twin, for replaying test vectors.
    fn at(&self, py: Python<'_>, now_us: &Bound<'_, PyAny>) -> PyResult<RedisCall> {
        let now = whole_u64(
            py,
            "now_us",
            now_us,
            "must be a whole number of microseconds from 0 to 2^64 - 1",
        )?;
        Ok(RedisCall {
            inner: self.inner.clone().at(now),
        })
    }
    fn __repr__(&self) -> String {
        format!(
            "_RedisCall(script={:?}, key={:?}, args={:?})",
            self.inner.script.name,
            String::from_utf8_lossy(&self.inner.key),
            self.inner.args
        )
    }
}

/// `verb head 1 key *args` (`EVALSHA` and the script's SHA-1, or `EVAL`
/// and its text) as one RESP array of bulk strings.
fn packed(call: &Call, verb: &[u8], head: &str) -> Vec<u8> {
    let parts = [verb, head.as_bytes(), b"1", &call.key];
    let size = parts.iter().map(|p| p.len() + 16).sum::<usize>()
        + call.args.iter().map(|a| a.len() + 16).sum::<usize>()
        + 16;
    let mut out = Vec::with_capacity(size);
    let bulk = |out: &mut Vec<u8>, b: &[u8]| {
        out.push(b'$');
        out.extend_from_slice(b.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(b);
        out.extend_from_slice(b"\r\n");
    };
    out.push(b'*');
    out.extend_from_slice((parts.len() + call.args.len()).to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for p in parts {
        bulk(&mut out, p);
    }
    for a in &call.args {
        bulk(&mut out, a.as_bytes());
    }
    out
}
