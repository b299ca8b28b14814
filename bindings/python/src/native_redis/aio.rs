//! asyncio futures completed from the runtime, with no thread per call and
//! without the GIL on the runtime's thread: a finished call is queued, and
//! the first one queued since the loop last looked writes one byte to a
//! socket pair the loop watches (`loop.add_reader`); the loop then sets
//! every queued future's result at once. Where a loop cannot watch a socket
//! (Windows' proactor loop), `loop.call_soon_threadsafe` wakes it instead.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyNotImplementedError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyList};
use ratebound_redis::Call;

use super::link::RunResult;
use crate::decision::Decision;
use crate::redis::RedisEngine;

/// What a finished call hands its future.
pub(crate) enum Done {
    /// A check's call: the engine's decision.
    Decision {
        fut: Py<PyAny>,
        engine: Py<RedisEngine>,
        call: Call,
        result: RunResult,
    },
    /// Any call: `(reply, timed_out, error)`, as the redis-py runners give it.
    Outcome { fut: Py<PyAny>, result: RunResult },
    /// A `PUBLISH`: whether Redis took it.
    Bool { fut: Py<PyAny>, ok: bool },
}

enum Wake {
    #[cfg(unix)]
    Pipe {
        writer: std::os::unix::net::UnixStream,
        reader: std::os::unix::net::UnixStream,
    },
    Threadsafe {
        call_soon: Py<PyAny>,
        drain: PyOnceLock<Py<PyAny>>,
    },
}

struct Shared {
    queue: Mutex<Vec<Done>>,
    /// Whether the loop has been woken for what is queued.
    armed: AtomicBool,
    wake: Wake,
}

/// One event loop's finished calls (see the module docs). Calling it (the
/// loop does) sets their futures' results.
#[pyclass(name = "_Completions", frozen, module = "ratebound")]
pub(crate) struct Completions {
    shared: Arc<Shared>,
}

/// What a task holds to hand its result to the loop.
#[derive(Clone)]
pub(crate) struct Sender(Arc<Shared>);

impl Sender {
    /// Queues `done` and wakes the loop if it is not woken already.
    pub(crate) fn send(&self, done: Done) {
        let s = &self.0;
        s.queue.lock().unwrap_or_else(|e| e.into_inner()).push(done);
        // Ordering: AcqRel — the push above is seen by the drain that
        // follows the wake; the drain's Release store of false pairs with
        // this swap.
        if s.armed.swap(true, Ordering::AcqRel) {
            return;
        }
        match &s.wake {
            #[cfg(unix)]
            Wake::Pipe { writer, .. } => {
                use std::io::Write;
                // A full socket buffer means the loop has a byte to read
                // already.
                let _ = (&*writer).write(&[1]);
            }
            Wake::Threadsafe { call_soon, drain } => Python::attach(|py| {
                if let Some(d) = drain.get(py) {
                    let _ = call_soon.call1(py, (d.clone_ref(py),));
                }
            }),
        }
    }
}

impl Completions {
    /// A new one for `event_loop`, registered with it.
    pub(crate) fn new(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> PyResult<Py<Completions>> {
        #[cfg(unix)]
        {
            let (writer, reader) = std::os::unix::net::UnixStream::pair()?;
            writer.set_nonblocking(true)?;
            reader.set_nonblocking(true)?;
            use std::os::fd::AsRawFd;
            let fd = reader.as_raw_fd();
            let this = Py::new(
                py,
                Completions {
                    shared: Arc::new(Shared {
                        queue: Mutex::new(Vec::new()),
                        armed: AtomicBool::new(false),
                        wake: Wake::Pipe { writer, reader },
                    }),
                },
            )?;
            match event_loop.call_method1("add_reader", (fd, this.clone_ref(py))) {
                Ok(_) => return Ok(this),
                Err(e) if e.is_instance_of::<PyNotImplementedError>(py) => {}
                Err(e) => return Err(e),
            }
        }
        let this = Py::new(
            py,
            Completions {
                shared: Arc::new(Shared {
                    queue: Mutex::new(Vec::new()),
                    armed: AtomicBool::new(false),
                    wake: Wake::Threadsafe {
                        call_soon: event_loop.getattr("call_soon_threadsafe")?.unbind(),
                        drain: PyOnceLock::new(),
                    },
                }),
            },
        )?;
        if let Wake::Threadsafe { drain, .. } = &this.get().shared.wake {
            let _ = drain.set(py, this.clone_ref(py).into_any());
        }
        Ok(this)
    }

    /// What a task holds to hand its result here.
    pub(crate) fn sender(&self) -> Sender {
        Sender(self.shared.clone())
    }
}

/// `(reply, timed_out, error)` for Python, as the redis-py runners give it.
pub(crate) fn outcome_tuple<'py>(
    py: Python<'py>,
    r: &RunResult,
) -> PyResult<Bound<'py, pyo3::types::PyTuple>> {
    let none = py.None();
    match r {
        RunResult::Reply(v) => (PyList::new(py, v)?.into_any(), false, none).into_pyobject(py),
        // A batch reply of the wrong length: the engine's Malformed, as for
        // a reply that is no list of integers.
        RunResult::Malformed => ("malformed", false, none).into_pyobject(py),
        RunResult::Timeout => (none.clone_ref(py), true, none).into_pyobject(py),
        RunResult::Failed(e) => (none, false, e.as_str()).into_pyobject(py),
    }
}

fn set(py: Python<'_>, fut: &Py<PyAny>, value: Bound<'_, PyAny>) {
    let f = fut.bind(py);
    // A cancelled future (its task gave up) takes no result.
    if f.call_method0(intern!(py, "done"))
        .and_then(|d| d.is_truthy())
        .unwrap_or(true)
    {
        return;
    }
    let _ = f.call_method1(intern!(py, "set_result"), (value,));
}

#[pymethods]
impl Completions {
    /// Sets the result of every queued future (the loop calls this when the
    /// socket pair is readable, or when woken thread-safely).
    fn __call__(&self, py: Python<'_>) {
        let s = &self.shared;
        #[cfg(unix)]
        if let Wake::Pipe { reader, .. } = &s.wake {
            use std::io::Read;
            let mut buf = [0u8; 256];
            while matches!((&*reader).read(&mut buf), Ok(n) if n > 0) {}
        }
        // Ordering: Release — a send after this store wakes the loop again;
        // see `Sender::send`.
        s.armed.store(false, Ordering::Release);
        let done = std::mem::take(&mut *s.queue.lock().unwrap_or_else(|e| e.into_inner()));
        for d in done {
            match d {
                Done::Decision {
                    fut,
                    engine,
                    call,
                    result,
                } => {
                    let d = engine.get().inner.finish(&call, result.outcome());
                    if let Ok(obj) = Py::new(
                        py,
                        Decision {
                            inner: d.decision(),
                            source: Some(d.source()),
                        },
                    ) {
                        set(py, &fut, obj.into_bound(py).into_any());
                    }
                }
                Done::Outcome { fut, result } => {
                    if let Ok(t) = outcome_tuple(py, &result) {
                        set(py, &fut, t.into_any());
                    }
                }
                Done::Bool { fut, ok } => {
                    let b = PyBool::new(py, ok);
                    set(py, &fut, b.to_owned().into_any());
                }
            }
        }
    }
}
