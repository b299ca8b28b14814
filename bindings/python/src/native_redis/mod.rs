//! The native Redis connection (`_NativeRedis`): what `ratebound.redis`
//! uses when given a URL in place of a redis-py client. The engine's calls
//! run with the `redis` crate on the extension's own tokio runtime, on one
//! multiplexed connection per target, with the GIL released while they
//! wait; asyncio futures are completed from the runtime (see `aio`).
//! Decisions are the engine's (`_RedisEngine`), exactly as on the redis-py
//! path: the same calls, the same deadline, the same fail policy.

mod aio;
mod link;
mod target;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyWeakrefMethods, PyWeakrefReference};
use ratebound_redis::connect::{PauseListener, Target, speaks_plain};
use ratebound_redis::plan::Answer;
use ratebound_redis::{Begin, Call};

use crate::convert::{count, type_name};
use crate::decision::Decision;
use crate::error::OrPy;
use crate::redis::{RedisCall, RedisEngine, misconfigured, tell, with_raw_key};
use aio::{Completions, Done, Outgoing};
use link::Link;

pub(crate) use aio::Completions as NativeCompletions;

/// Runs `fut` on the runtime and waits for it on this thread: driven here
/// (`block_on`), or, on a thread inside another tokio runtime already
/// (Python called from some other extension's runtime), spawned and waited
/// for (`block_on` cannot nest); `None` if the task was lost.
fn wait<T: Send + 'static>(
    handle: &tokio::runtime::Handle,
    fut: impl std::future::Future<Output = T> + Send + 'static,
) -> Option<T> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Some(handle.block_on(fut));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    handle.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv().ok()
}

/// What became of a call whose task was lost (see `wait`).
fn lost() -> Answer {
    Answer::Failed("the call's task was lost".to_string())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A Redis connection made by ratebound from a URL (`redis://`,
/// `rediss://`, `redis+cluster://`, `unix://`, or a list of cluster nodes'
/// URLs) for the limiter whose engine is `engine`: `ratebound.redis` calls
/// it instead of redis-py. Limiters naming the same target (and batching
/// alike: the engine's `batch` option) share one connection; a forked child
/// makes its own.
#[pyclass(name = "_NativeRedis", frozen, module = "ratebound")]
pub(crate) struct NativeRedis {
    target: Arc<Target>,
    batch: bool,
    engine: Py<RedisEngine>,
    link: Mutex<Option<Arc<Link>>>,
    /// The event loop last used (a weak reference) and its completions.
    aio: Mutex<Option<LoopCompletions>>,
    listener: Mutex<Option<PauseListener>>,
}

static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// An event loop (weakly: a closed loop goes when nothing else holds it)
/// and its completions.
struct LoopCompletions {
    event_loop: Py<PyWeakrefReference>,
    completions: Py<Completions>,
}

impl LoopCompletions {
    fn of(&self, py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> bool {
        self.event_loop
            .bind(py)
            .upgrade()
            .is_some_and(|l| l.is(event_loop))
    }
}

/// Every event loop's completions (one socket pair a loop, whatever the
/// number of limiters); a loop that is gone is forgotten at the next miss.
static LOOPS: Mutex<Vec<LoopCompletions>> = Mutex::new(Vec::new());

/// The completions of `event_loop`, made and registered with it the first
/// time.
fn completions_for(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> PyResult<Py<Completions>> {
    let (found, gone) = {
        let mut loops = lock(&LOOPS);
        let found = loops
            .iter()
            .find(|l| l.of(py, event_loop))
            .map(|l| l.completions.clone_ref(py));
        let (live, gone): (Vec<_>, Vec<_>) = std::mem::take(&mut *loops)
            .into_iter()
            .partition(|l| l.event_loop.bind(py).upgrade().is_some());
        *loops = live;
        (found, gone)
    };
    // Dropped without the lock held (a decref may run Python code).
    drop(gone);
    if let Some(c) = found {
        return Ok(c);
    }
    // Made without the lock held: registering runs Python code, which may
    // let another thread in (that thread then makes its own: harmless).
    let c = Completions::new(py, event_loop)?;
    let entry = LoopCompletions {
        event_loop: PyWeakrefReference::new(event_loop)?.unbind(),
        completions: c.clone_ref(py),
    };
    lock(&LOOPS).push(entry);
    Ok(c)
}

impl NativeRedis {
    fn engine(&self) -> &ratebound_redis::Engine {
        &self.engine.get().inner
    }

    fn timeout(&self) -> Duration {
        self.engine().timeout()
    }

    /// This generation's link (see `link`'s docs on fork).
    fn link(&self) -> PyResult<Arc<Link>> {
        let generation = link::generation();
        let mut slot = lock(&self.link);
        if let Some(l) = &*slot {
            if l.generation == generation {
                return Ok(l.clone());
            }
            // The parent's, in a forked child: left alone (see `link`).
            if let Some(old) = slot.take() {
                std::mem::forget(old);
            }
            if let Some(old) = lock(&self.listener).take() {
                std::mem::forget(old);
            }
        }
        let l = link::link_for(&self.target, self.batch).map_err(PyErr::from)?;
        *slot = Some(l.clone());
        Ok(l)
    }

    fn decision(py: Python<'_>, d: ratebound_redis::RedisDecision) -> PyResult<Py<PyAny>> {
        Ok(Py::new(
            py,
            Decision {
                inner: d.decision(),
                source: Some(d.source()),
            },
        )?
        .into_any())
    }

    /// Runs `call` on this thread, the GIL released meanwhile.
    fn run_blocking(&self, py: Python<'_>, call: &Arc<Call>) -> PyResult<Answer> {
        let link = self.link()?;
        let (l, call, engine) = (link.clone(), call.clone(), self.engine.get().inner.clone());
        Ok(py
            .detach(|| {
                wait(
                    &link.handle,
                    async move { l.pump.run(&call, &engine).await },
                )
            })
            .unwrap_or_else(lost))
    }

    /// The running event loop (a `RuntimeError` outside one, before
    /// anything is begun).
    fn running_loop(py: Python<'_>) -> PyResult<Py<PyAny>> {
        let get = GET_RUNNING_LOOP.get_or_try_init(py, || {
            py.import("asyncio")?
                .getattr("get_running_loop")
                .map(Bound::unbind)
        })?;
        get.call0(py)
    }

    /// A new future of `event_loop`, and the loop's completions.
    fn future(
        &self,
        py: Python<'_>,
        event_loop: &Py<PyAny>,
    ) -> PyResult<(Py<PyAny>, Py<Completions>)> {
        let known = match &*lock(&self.aio) {
            Some(l) if l.of(py, event_loop.bind(py)) => Some(l.completions.clone_ref(py)),
            _ => None,
        };
        let completions = match known {
            Some(c) => c,
            None => {
                let c = completions_for(py, event_loop.bind(py))?;
                let mine = LoopCompletions {
                    event_loop: PyWeakrefReference::new(event_loop.bind(py))?.unbind(),
                    completions: c.clone_ref(py),
                };
                let old = lock(&self.aio).replace(mine);
                drop(old);
                c
            }
        };
        let fut = event_loop.call_method0(py, pyo3::intern!(py, "create_future"))?;
        Ok((fut, completions))
    }

    fn begin(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<&Bound<'_, PyAny>>,
        scope: Option<&str>,
    ) -> PyResult<Begin> {
        let n = count(py, n)?;
        with_raw_key(key, |k| self.engine().begin_in(scope, k, n).or_py(py))
    }
}

redis_pymethods! {
impl NativeRedis {
    #[new]
    #[pyo3(signature = (target, engine, *, ssl_ca_certs=None))]
    fn new(
        py: Python<'_>,
        target: &Bound<'_, PyAny>,
        engine: Py<RedisEngine>,
        ssl_ca_certs: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        // The engine's option (`Config::batch`, default true).
        let batch = engine.get().inner.config().batch;
        let ca = match ssl_ca_certs.filter(|c| !c.is_none()) {
            None => None,
            Some(c) => Some(
                py.import("os")?
                    .call_method1("fspath", (c,))
                    .and_then(|p| p.extract::<String>())
                    .map_err(|_| {
                        PyTypeError::new_err(format!(
                            "ssl_ca_certs must be a path (str), got {}",
                            type_name(c)
                        ))
                    })?,
            ),
        };
        let target: Arc<Target> = Arc::new(target::parse(py, target, ca.as_deref())?);
        let this = NativeRedis {
            target,
            batch,
            engine,
            link: Mutex::new(None),
            aio: Mutex::new(None),
            listener: Mutex::new(None),
        };
        // Connect now (in the background): the first call should not pay
        // for it.
        let link = this.link()?;
        // TLS to a server that speaks none is a typo, not an outage: asked
        // once, now (a plain `PING`, at most 0.5 s; a server down now is
        // not asked again, and its calls' timeouts stay the fail policy's).
        if let Some((host, port)) = this.target.tls_address() {
            let shown = this.target.shown().to_string();
            let plain = py
                .detach(|| {
                    wait(
                        &link.handle,
                        speaks_plain(host, port, Duration::from_millis(500)),
                    )
                })
                .unwrap_or(false);
            if plain {
                let text = format!(
                    "tls handshake to {shown}: the server answers plain RESP, it speaks no TLS"
                );
                if let Some(err) = misconfigured(py, &text) {
                    return Err(err);
                }
            }
        }
        Ok(this)
    }


    /// Runs `call` (EVALSHA, and EVAL on NOSCRIPT) within the deadline, the
    /// GIL released meanwhile: `(reply, timed_out, error, unsent)` for the
    /// engine's `finish` steps.
    fn run<'py>(
        &self,
        py: Python<'py>,
        call: &Bound<'py, RedisCall>,
    ) -> PyResult<Bound<'py, pyo3::types::PyTuple>> {
        let r = self.run_blocking(py, &Arc::new(call.get().inner.clone()))?;
        aio::outcome_tuple(py, &r)
    }

    /// `PUBLISH channel message` within the deadline; whether Redis took it.
    fn publish(&self, py: Python<'_>, channel: &str, message: &[u8]) -> PyResult<bool> {
        let link = self.link()?;
        let (timeout, message) = (self.timeout(), message.to_vec());
        let channel = channel.as_bytes().to_vec();
        let l = link.clone();
        Ok(py
            .detach(|| {
                wait(&link.handle, async move {
                    l.publish(&channel, &message, timeout).await
                })
            })
            .unwrap_or(false))
    }


    /// `run` for asyncio: a future of `(reply, timed_out, error, unsent)`.
    fn arun(&self, py: Python<'_>, call: &Bound<'_, RedisCall>) -> PyResult<Py<PyAny>> {
        let link = self.link()?;
        let event_loop = Self::running_loop(py)?;
        let (fut, completions) = self.future(py, &event_loop)?;
        let out = Outgoing {
            link,
            call: Arc::new(call.get().inner.clone()),
            fut: fut.clone_ref(py),
            engine: self.engine.clone_ref(py),
            decide: false,
        };
        completions.get().queue(py, event_loop.bind(py), out)?;
        Ok(fut)
    }

    /// `publish` for asyncio: a future of whether Redis took it.
    fn apublish(&self, py: Python<'_>, channel: &str, message: &[u8]) -> PyResult<Py<PyAny>> {
        let link = self.link()?;
        let (fut, completions) = self.future(py, &Self::running_loop(py)?)?;
        let (f, sender) = (fut.clone_ref(py), completions.get().sender());
        let (timeout, channel, message) = (
            self.timeout(),
            channel.as_bytes().to_vec(),
            message.to_vec(),
        );
        link.handle.clone().spawn(async move {
            let ok = link.publish(&channel, &message, timeout).await;
            sender.send(Done::Bool { fut: f, ok });
        });
        Ok(fut)
    }

    /// Starts listening for other instances' pauses (once; see the module
    /// docs of `ratebound.redis`).
    fn listen(&self) -> PyResult<()> {
        let link = self.link()?;
        let mut lis = lock(&self.listener);
        if lis.is_none() {
            let _in = link.handle.enter();
            *lis = Some(self.target.listen(self.engine.get().inner.clone()));
        }
        Ok(())
    }

    /// Whether the listener is subscribed now.
    #[getter]
    fn listening(&self) -> bool {
        lock(&self.listener)
            .as_ref()
            .is_some_and(PauseListener::subscribed)
    }

    /// Whether the listener's first attempt to subscribe is over (or there
    /// is no listener).
    #[getter]
    fn heard_first(&self) -> bool {
        lock(&self.listener)
            .as_ref()
            .is_none_or(|l| l.first().load(std::sync::atomic::Ordering::Acquire))
    }

    /// Waits (the GIL released) until the listener's first attempt is over,
    /// at most `timeout` seconds; it counts as over after that.
    fn wait_listening(&self, py: Python<'_>, timeout: f64) {
        let first = lock(&self.listener).as_ref().map(|l| l.first().clone());
        let Some(first) = first else { return };
        let until = std::time::Instant::now() + Duration::from_secs_f64(timeout.clamp(0.0, 60.0));
        py.detach(|| {
            while !first.load(std::sync::atomic::Ordering::Acquire)
                && std::time::Instant::now() < until
            {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        // Over either way: later waits never wait for a subscription that
        // cannot be made now (the listener goes on trying by itself).
        first.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Stops listening and lets go of the connection (closed once no
    /// limiter uses it); the next call connects again.
    fn close(&self) {
        let lis = lock(&self.listener).take();
        drop(lis);
        let link = lock(&self.link).take();
        drop(link);
        let aio = lock(&self.aio).take();
        drop(aio);
    }

    /// The target, its passwords hidden.
    #[getter]
    fn target(&self) -> &str {
        self.target.shown()
    }

    /// Whether concurrent calls are batched.
    #[getter]
    fn batch(&self) -> bool {
        self.batch
    }

    fn __repr__(&self) -> String {
        format!(
            "_NativeRedis({:?}, batch={})",
            self.target.shown(),
            self.batch
        )
    }
}

scoped {
    /// `engine.begin`, the call and `engine.finish` in one step, the GIL
    /// released while Redis answers: the decision for `n` (default 1) of
    /// `key`, within `scope` if given.
    fn check(self, py, key, n, scope) -> PyResult<Py<PyAny>> {
        match self.begin(py, key, n, scope)? {
            Begin::Done(d) => Self::decision(py, d),
            Begin::Call(call) => {
                let call = Arc::new(call);
                let r = self.run_blocking(py, &call)?;
                self.engine().misconfigured(&r.outcome()).or_py(py)?;
                let d = self.engine().finish(&call, r.outcome());
                tell(py, self.engine());
                Self::decision(py, d)
            }
        }
    }

    /// `check` for asyncio: a `Decision` already (a lease, the breaker), or
    /// a future of the running loop that gets it.
    fn acheck(self, py, key, n, scope) -> PyResult<Py<PyAny>> {
        let event_loop = Self::running_loop(py)?;
        let link = self.link()?;
        match self.begin(py, key, n, scope)? {
            Begin::Done(d) => Self::decision(py, d),
            Begin::Call(call) => {
                let (fut, completions) = self.future(py, &event_loop)?;
                let out = Outgoing {
                    link,
                    call: Arc::new(call),
                    fut: fut.clone_ref(py),
                    engine: self.engine.clone_ref(py),
                    decide: true,
                };
                completions.get().queue(py, event_loop.bind(py), out)?;
                Ok(fut)
            }
        }
    }
}

keyed {}

outcome {}
}

/// Whether `client` names a Redis target (a str, or a list or tuple of
/// str) rather than being a redis-py client.
#[pyfunction]
pub(crate) fn _is_redis_target(client: &Bound<'_, PyAny>) -> bool {
    target::is_target(client)
}

/// Called in a forked child (`os.register_at_fork`): the child's next call
/// makes its own runtime and connections.
#[pyfunction]
pub(crate) fn _redis_forked() {
    link::forked();
}
