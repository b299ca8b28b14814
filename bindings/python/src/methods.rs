//! The Python methods the local, shared-memory and Redis classes have in
//! common, written once. pyo3 takes one `#[pymethods]` block a class: each
//! macro writes a class's whole block, its own methods (`{ ... }`) and the
//! shared ones. `$or` turns the class's errors into Python's (`or_py`, `or_shm`);
//! `$seconds` reads a pause's `seconds` as its `pause` takes them (`number`,
//! `pause_of`); `$source` is its [`Source`](crate::waiting::Source) variant.

/// `Limiter` and `SharedTokenBucket`: `available`, `limit`, `reserve`,
/// `pause`, `resume`, `acquire_blocking` and `_waiter`. `$holder` is the class's
/// [`Holder`](crate::limiters::Holder) variant, and each class has a
/// `reserved(n, max_wait)`: the wait in nanoseconds and the permit.
macro_rules! single_pymethods {
    ($ty:ident, $or:ident, $seconds:ident, $source:path, $holder:path, { $($own:tt)* }) => {
        #[pymethods]
        impl $ty {
            $($own)*

            /// Tokens (requests) that could be taken now.
            fn available(&self) -> u64 {
                self.inner.available()
            }

            /// The most that can ever be taken at once (burst or window limit).
            #[getter]
            fn limit(&self) -> u64 {
                self.inner.limit()
            }

            /// Takes `n` now even if they arrive only later (for every
            /// process, if it is shared), if within `max_wait` seconds (None:
            /// any wait). Token and leaky buckets only.
            #[pyo3(signature = (n=None, max_wait=None))]
            fn reserve(&self, py: Python<'_>, n: Option<&Bound<'_, PyAny>>, max_wait: Option<&Bound<'_, PyAny>>) -> PyResult<Reservation> {
                let n = count(py, n)?;
                let max_wait = opt_seconds(py, "max_wait", max_wait)?;
                let (wait, permit) = self.reserved(n, max_wait).$or(py)?;
                Ok(Reservation::new($holder(self.inner.clone()), permit, wait))
            }

            /// Empties a token bucket (for every process, if it is shared) for
            /// `seconds`; it refills at the rate afterwards. Reservations
            /// already held keep their time.
            fn pause(&self, py: Python<'_>, seconds: &Bound<'_, PyAny>) -> PyResult<()> {
                self.inner.pause($seconds(py, "seconds", seconds)?).$or(py)
            }

            /// Lifts a token bucket's pause now (for every process, if it is
            /// shared) if nothing was built on it: "lifted", "not_paused" or
            /// "queued" (see `ratebound::Resumed`).
            fn resume(&self, py: Python<'_>) -> PyResult<&'static str> {
                self.inner.resume().map(|r| r.as_str()).$or(py)
            }

            /// Blocks the calling thread (GIL released) until `n` are taken;
            /// raises `RateLimitExceeded` at once, taking nothing, if
            /// `timeout` seconds cannot suffice.
            #[pyo3(signature = (n=None, timeout=None))]
            fn acquire_blocking(&self, py: Python<'_>, n: Option<&Bound<'_, PyAny>>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
                self._waiter(py, n, timeout)?.run_blocking(py)
            }

            /// For `acquire`: a wait for `n` (see `Waiter`).
            #[pyo3(signature = (n=None, timeout=None))]
            fn _waiter(&self, py: Python<'_>, n: Option<&Bound<'_, PyAny>>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Waiter> {
                let n = count(py, n)?;
                Waiter::of(py, $source(self.inner.clone()), n, timeout)
            }
        }
    };
}

/// `KeyedLimiter` and `SharedKeyedLimiter`: the constructor's common
/// arguments — `rate=None, burst=None, *, algorithm=None, limit=None,
/// window=None, max_keys=None`, between the class's own leading and trailing
/// ones (`new(lead: T; trail: U) |py, algorithm, max_keys| { ... }`: the
/// body gets the core's algorithm and the checked `max_keys`) — then
/// `check`, `try_acquire`, `available`, `pause`, `resume`, `__len__`,
/// `acquire_blocking` and `_waiter`.
macro_rules! keyed_pymethods {
    (
        $ty:ident, $or:ident, $seconds:ident, $source:path,
        new($($lead:ident: $leadty:ty),*; $($trail:ident: $trailty:ty),*)
            |$py:ident, $alg:ident, $max:ident| $new:block,
        { $($own:tt)* }
    ) => {
        #[pymethods]
        impl $ty {
            #[new]
            #[pyo3(signature = (
                $($lead,)* rate=None, burst=None, *, algorithm=None, limit=None, window=None,
                max_keys=None $(, $trail=None)*
            ))]
            #[allow(clippy::too_many_arguments)]
            fn new(
                $py: Python<'_>,
                $($lead: $leadty,)*
                rate: Option<&Bound<'_, PyAny>>,
                burst: Option<&Bound<'_, PyAny>>,
                algorithm: Option<&str>,
                limit: Option<&Bound<'_, PyAny>>,
                window: Option<&Bound<'_, PyAny>>,
                max_keys: Option<&Bound<'_, PyAny>>,
                $($trail: $trailty,)*
            ) -> PyResult<Self> {
                let numbers = [rate, burst, limit, window];
                let $alg = crate::keyed::keyed_algorithm_of($py, algorithm, numbers)?;
                let $max = match crate::convert::opt_number($py, "max_keys", max_keys)? {
                    Some(m) => Some(ratebound::any::whole("max_keys", m, 1).or_py($py)?),
                    None => None,
                };
                $new
            }

            $($own)*

            /// Takes `n` (default 1) for `key` if its limit allows (for every
            /// process, if it is shared).
            #[pyo3(signature = (key, n=None))]
            fn check(&self, py: Python<'_>, key: &Bound<'_, PyAny>, n: Option<&Bound<'_, PyAny>>) -> PyResult<Py<Decision>> {
                let n = count(py, n)?;
                let d = with_key(key, |k| self.inner.check_n(k, n).$or(py))?;
                decision(py, d)
            }

            /// Like `check`, returning only whether it was allowed.
            #[pyo3(signature = (key, n=None))]
            fn try_acquire(&self, py: Python<'_>, key: &Bound<'_, PyAny>, n: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
                let n = count(py, n)?;
                with_key(key, |k| Ok(self.inner.check_n(k, n).$or(py)?.is_allowed()))
            }

            /// Tokens `key` could take now.
            fn available(&self, key: &Bound<'_, PyAny>) -> PyResult<u64> {
                with_key(key, |k| Ok(self.inner.available(k)))
            }

            /// Empties `key`'s token bucket (for every process, if it is
            /// shared) for `seconds`; it refills at the rate afterwards.
            fn pause(&self, py: Python<'_>, key: &Bound<'_, PyAny>, seconds: &Bound<'_, PyAny>) -> PyResult<()> {
                let s = $seconds(py, "seconds", seconds)?;
                with_key(key, |k| self.inner.pause(k, s).$or(py))
            }

            /// Lifts `key`'s pause now (for every process, if it is shared) if
            /// nothing was built on it: "lifted", "not_paused" or, in a shared
            /// table, "queued" (an in-process key never has reservations
            /// behind its pause).
            fn resume(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<&'static str> {
                with_key(key, |k| self.inner.resume(k).map(|r| r.as_str()).$or(py))
            }

            /// Keys held now.
            fn __len__(&self) -> usize {
                self.inner.len()
            }

            /// Blocks (GIL released) until `n` are taken for `key`; raises
            /// `RateLimitExceeded` at once, taking nothing, if `timeout`
            /// seconds cannot suffice.
            #[pyo3(signature = (key, n=None, timeout=None))]
            fn acquire_blocking(&self, py: Python<'_>, key: &Bound<'_, PyAny>, n: Option<&Bound<'_, PyAny>>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
                self._waiter(py, key, n, timeout)?.run_blocking(py)
            }

            /// For `acquire`: a wait for `n` of `key` (see `Waiter`).
            #[pyo3(signature = (key, n=None, timeout=None))]
            fn _waiter(&self, py: Python<'_>, key: &Bound<'_, PyAny>, n: Option<&Bound<'_, PyAny>>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Waiter> {
                let n = count(py, n)?;
                Waiter::of(py, $source(self.inner.clone(), key.clone().unbind()), n, timeout)
            }
        }
    };
}

/// `_RedisEngine` and `_NativeRedis`: the class's own methods, then three
/// kinds written with their arguments once. `scoped`: `(key, n=None,
/// [timeout or max_wait]=None, scope=None)` — a key (str, bytes or int),
/// a count, a number of seconds for some, and a middleware policy's scope.
/// `keyed`: `(key, [seconds], scope=None)` — a key, for some a number of
/// seconds (a pause's), and the scope.
/// `outcome`: the method's own arguments, then what became of a call —
/// `reply=None, timed_out=False, error=None, unsent=False`, the runner's
/// outcome tuple — as a `Report` named by the method.
macro_rules! redis_pymethods {
    (
        impl $class:ident { $($own:tt)* }
        scoped {$(
            $(#[$sattr:meta])*
            fn $sname:ident(
                $ss:ident, $spy:ident, $key:ident, $n:ident, $scope:ident $(; $secs:ident)?
            ) -> $sret:ty $sbody:block
        )*}
        keyed {$(
            $(#[$kattr:meta])*
            fn $kname:ident(
                $ks:ident, $kpy:ident, $kkey:ident, $kscope:ident $(; $ksecs:ident)?
            ) -> $kret:ty $kbody:block
        )*}
        outcome {$(
            $(#[$attr:meta])*
            fn $name:ident<$lt:lifetime>(
                $s:ident, $py:ident, $report:ident $(; $($arg:ident: $ty:ty),+)?
            ) -> $ret:ty $body:block
        )*}
    ) => {
        #[pymethods]
        impl $class {
            $($own)*
            $(
                $(#[$sattr])*
                #[pyo3(signature = ($key, $n=None, $($secs=None,)? $scope=None))]
                fn $sname(
                    &$ss,
                    $spy: Python<'_>,
                    $key: &Bound<'_, PyAny>,
                    $n: Option<&Bound<'_, PyAny>>,
                    $($secs: Option<&Bound<'_, PyAny>>,)?
                    $scope: Option<&str>,
                ) -> $sret $sbody
            )*
            $(
                $(#[$kattr])*
                #[pyo3(signature = ($kkey, $($ksecs,)? $kscope=None))]
                fn $kname(
                    &$ks,
                    $kpy: Python<'_>,
                    $kkey: &Bound<'_, PyAny>,
                    $($ksecs: &Bound<'_, PyAny>,)?
                    $kscope: Option<&str>,
                ) -> $kret $kbody
            )*
            $(
                $(#[$attr])*
                #[pyo3(signature = (
                    $($($arg,)+)? reply=None, timed_out=false, error=None, unsent=false
                ))]
                #[allow(clippy::too_many_arguments)]
                fn $name<$lt>(
                    &$s,
                    $py: Python<$lt>,
                    $($($arg: $ty,)+)?
                    reply: Option<&Bound<$lt, PyAny>>,
                    timed_out: bool,
                    error: Option<&str>,
                    unsent: bool,
                ) -> $ret {
                    let $report = Report::new(reply, timed_out, error, unsent);
                    $body
                }
            )*
        }
    };
}
