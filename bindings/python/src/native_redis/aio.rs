//! asyncio on the native connection, with no thread per call and without
//! the GIL on the runtime's thread.
//!
//! - **Out: one turn, one batch.** The calls an event loop's tasks make in
//!   one turn of the loop are queued, and the first one schedules
//!   (`loop.call_soon`) a flush that hands them all to the runtime at once,
//!   each limiter's to its pump's `run_together` (the crate's rule: those
//!   that join go out as one batch script run, per hash slot in a cluster,
//!   a lone call as itself) — so one task in flight never waits for a
//!   batch, and many form batches.
//! - **Back: one byte, every answer.** A finished call is queued for its
//!   loop, and the first one queued since the loop last looked writes one
//!   byte to a socket pair the loop watches (`loop.add_reader`); the loop
//!   then sets every queued future's result at once. Where a loop cannot
//!   watch a socket (Windows' proactor loop), `loop.call_soon_threadsafe`
//!   wakes it instead.
//!
//! Nothing here holds its loop strongly: a loop that is gone takes its
//! registration with it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyNotImplementedError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyList, PyWeakrefMethods, PyWeakrefReference};
use ratebound_redis::Call;
use ratebound_redis::plan::Answer;

use super::link::Link;
use crate::decision::Decision;
use crate::redis::{RedisEngine, tell};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a finished call hands its future.
pub(crate) enum Done {
    /// A check's call: the engine's decision.
    Decision {
        fut: Py<PyAny>,
        engine: Py<RedisEngine>,
        call: Arc<Call>,
        result: Answer,
    },
    /// Any call: `(reply, timed_out, error)`, as the redis-py runners give it.
    Outcome { fut: Py<PyAny>, result: Answer },
    /// A `PUBLISH`: whether Redis took it.
    Bool { fut: Py<PyAny>, ok: bool },
}

/// A call waiting for the end of its loop's turn.
pub(crate) struct Outgoing {
    /// Where it goes.
    pub(crate) link: Arc<Link>,
    /// The call.
    pub(crate) call: Arc<Call>,
    /// The future it completes.
    pub(crate) fut: Py<PyAny>,
    /// The limiter's engine.
    pub(crate) engine: Py<RedisEngine>,
    /// A check (its future gets the engine's decision), or not (it gets
    /// `(reply, timed_out, error)`).
    pub(crate) decide: bool,
}

impl Outgoing {
    fn done(self, result: Answer) -> Done {
        match self.decide {
            true => Done::Decision {
                fut: self.fut,
                engine: self.engine,
                call: self.call,
                result,
            },
            false => Done::Outcome {
                fut: self.fut,
                result,
            },
        }
    }
}

enum Wake {
    #[cfg(unix)]
    Pipe {
        writer: std::os::unix::net::UnixStream,
        reader: std::os::unix::net::UnixStream,
    },
    Threadsafe {
        event_loop: Py<PyWeakrefReference>,
    },
}

struct Shared {
    /// Finished calls, for the loop.
    queue: Mutex<Vec<Done>>,
    /// Whether the loop has been woken for what is queued.
    armed: AtomicBool,
    wake: Wake,
    /// This turn's calls, for the runtime.
    outgoing: Mutex<Vec<Outgoing>>,
    /// Whether this turn's flush is scheduled.
    scheduled: AtomicBool,
}

/// One event loop's calls in and out (see the module docs). Calling it
/// (the loop does, when its socket pair is readable) sets the results of
/// the finished calls' futures.
#[pyclass(name = "_Completions", frozen, module = "ratebound")]
pub(crate) struct Completions {
    shared: Arc<Shared>,
}

/// A scheduled flush of one turn's calls (see the module docs).
#[pyclass(name = "_Turn", frozen, module = "ratebound")]
pub(crate) struct Turn {
    shared: Arc<Shared>,
}

/// What a task holds to hand its results to the loop.
#[derive(Clone)]
pub(crate) struct Sender(Arc<Shared>);

impl Sender {
    /// Queues `done` and wakes the loop if it is not woken already.
    pub(crate) fn send(&self, done: Done) {
        self.send_all(std::iter::once(done));
    }

    /// Queues every one of `done`, waking the loop once.
    fn send_all(&self, done: impl IntoIterator<Item = Done>) {
        let s = &self.0;
        lock(&s.queue).extend(done);
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
            Wake::Threadsafe { event_loop } => Python::attach(|py| {
                let drain = Completions {
                    shared: self.0.clone(),
                };
                if let (Some(l), Ok(d)) = (event_loop.bind(py).upgrade(), Py::new(py, drain)) {
                    let _ = l.call_method1(intern!(py, "call_soon_threadsafe"), (d,));
                }
            }),
        }
    }
}

fn shared(wake: Wake) -> Arc<Shared> {
    Arc::new(Shared {
        queue: Mutex::new(Vec::new()),
        armed: AtomicBool::new(false),
        wake,
        outgoing: Mutex::new(Vec::new()),
        scheduled: AtomicBool::new(false),
    })
}

impl Completions {
    /// A new one for `event_loop`, registered with it.
    pub(crate) fn new(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> PyResult<Py<Completions>> {
        #[cfg(unix)]
        {
            use std::os::fd::AsRawFd;
            let (writer, reader) = std::os::unix::net::UnixStream::pair()?;
            writer.set_nonblocking(true)?;
            reader.set_nonblocking(true)?;
            let fd = reader.as_raw_fd();
            let s = shared(Wake::Pipe { writer, reader });
            let drain = Py::new(py, Completions { shared: s.clone() })?;
            match event_loop.call_method1("add_reader", (fd, drain.clone_ref(py))) {
                Ok(_) => return Ok(drain),
                Err(e) if e.is_instance_of::<PyNotImplementedError>(py) => {}
                Err(e) => return Err(e),
            }
        }
        let s = shared(Wake::Threadsafe {
            event_loop: PyWeakrefReference::new(event_loop)?.unbind(),
        });
        Py::new(py, Completions { shared: s })
    }

    /// What a task holds to hand its result here.
    pub(crate) fn sender(&self) -> Sender {
        Sender(self.shared.clone())
    }

    /// Queues `call` for the end of this turn of `event_loop` (the running
    /// loop, whose thread this is).
    pub(crate) fn queue(
        &self,
        py: Python<'_>,
        event_loop: &Bound<'_, PyAny>,
        call: Outgoing,
    ) -> PyResult<()> {
        let s = &self.shared;
        lock(&s.outgoing).push(call);
        // Ordering: Relaxed — only the loop's thread (holding the GIL)
        // touches the flag.
        if !s.scheduled.swap(true, Ordering::Relaxed) {
            let turn = Py::new(py, Turn { shared: s.clone() })?;
            if let Err(e) = event_loop.call_method1(intern!(py, "call_soon"), (turn,)) {
                s.scheduled.store(false, Ordering::Relaxed);
                let dropped = std::mem::take(&mut *lock(&s.outgoing));
                drop(dropped);
                return Err(e);
            }
        }
        Ok(())
    }
}

#[pymethods]
impl Turn {
    /// Hands this turn's calls to the runtime: one task a connection, the
    /// calls that join as one batch (see the module docs).
    fn __call__(&self) {
        let s = &self.shared;
        s.scheduled.store(false, Ordering::Relaxed);
        let calls = std::mem::take(&mut *lock(&s.outgoing));
        let mut by_link: Vec<Vec<Outgoing>> = Vec::new();
        for c in calls {
            match by_link
                .iter_mut()
                .find(|g| Arc::ptr_eq(&g[0].link, &c.link))
            {
                Some(g) => g.push(c),
                None => by_link.push(vec![c]),
            }
        }
        for group in by_link {
            let link = group[0].link.clone();
            let sender = Sender(s.clone());
            let calls = group
                .iter()
                .map(|o| (o.call.clone(), o.engine.get().inner.clone()))
                .collect();
            link.handle.clone().spawn(async move {
                let results = link.pump.run_together(calls).await;
                sender.send_all(group.into_iter().zip(results).map(|(o, r)| o.done(r)));
            });
        }
    }
}

/// `(reply, timed_out, error, unsent)` for Python, as the redis-py runners
/// give it.
pub(crate) fn outcome_tuple<'py>(
    py: Python<'py>,
    r: &Answer,
) -> PyResult<Bound<'py, pyo3::types::PyTuple>> {
    let none = py.None();
    match r {
        Answer::Reply(v) => (PyList::new(py, v)?.into_any(), false, none, false).into_pyobject(py),
        // A batch reply of the wrong length: the engine's Malformed, as for
        // a reply that is no list of integers.
        Answer::Malformed => ("malformed", false, none, false).into_pyobject(py),
        Answer::Timeout => (none.clone_ref(py), true, none, false).into_pyobject(py),
        Answer::Failed(e) => (none, false, e.as_str(), false).into_pyobject(py),
        Answer::Unsent => (none.clone_ref(py), false, none, true).into_pyobject(py),
    }
}

/// Sets `err` as the exception of `fut` (unless it is done already).
fn fail(py: Python<'_>, fut: &Py<PyAny>, err: PyErr) {
    let f = fut.bind(py);
    if f.call_method0(intern!(py, "done"))
        .and_then(|d| d.is_truthy())
        .unwrap_or(true)
    {
        return;
    }
    let _ = f.call_method1(intern!(py, "set_exception"), (err.into_value(py),));
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
    /// Sets the result of every finished call's future (the loop calls this
    /// when the socket pair is readable, or when woken thread-safely).
    fn __call__(&self, py: Python<'_>) {
        let s = &self.shared;
        #[cfg(unix)]
        if let Wake::Pipe { reader, .. } = &s.wake {
            use std::io::Read;
            let mut buf = [0u8; 256];
            // Until a read comes back short: one read in the usual case of
            // a byte or two.
            while matches!((&*reader).read(&mut buf), Ok(n) if n == buf.len()) {}
        }
        // Ordering: Release — a send after this store wakes the loop again;
        // see `Sender::send_all`.
        s.armed.store(false, Ordering::Release);
        let done = std::mem::take(&mut *lock(&s.queue));
        for d in done {
            match d {
                Done::Decision {
                    fut,
                    engine,
                    call,
                    result,
                } => {
                    let engine = &engine.get().inner;
                    if let Err(e) = engine.misconfigured(&result.outcome()) {
                        fail(py, &fut, crate::error::py_err(py, e));
                        continue;
                    }
                    let d = engine.finish(&call, result.outcome());
                    tell(py, engine);
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
