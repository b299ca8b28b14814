//! The JavaScript functions a gate's sequence calls — `exempt`, `critical`,
//! `priority`, `key` and `report`, each a function of the framework's
//! request — kept as references from the gate's construction, and called by
//! the core's `Gate::admit` through [`JsHooks`] in the core's order. A
//! constant priority (`priority: 'background'`) is read once, at
//! construction, by the core's `Priority::parse`.

use std::ffi::c_char;
use std::ptr;

use napi::sys;
use ratebound::any::Key;
use ratebound::gate;
use ratebound::gate::Hooks;
use ratebound::http::Priority;

use super::ffi::{push_utf8, raw_throw_core, raw_throw_key, type_of, with_key};

/// The hooks of one gate, as weak references: the gate's JavaScript
/// object holds the functions themselves (so a hook that refers to its
/// gate makes no cycle through a GC root). A null reference is a hook not
/// given.
pub struct HookRefs {
    env: sys::napi_env,
    exempt: sys::napi_ref,
    critical: sys::napi_ref,
    priority: sys::napi_ref,
    key: sys::napi_ref,
    report: sys::napi_ref,
    /// A priority given as a constant (no function to call).
    constant: Option<Priority>,
}

/// The hooks' names, in the order [`HookRefs::new`] takes them.
pub const HOOK_NAMES: [&str; 5] = ["exempt", "critical", "priority", "key", "report"];

/// Where the `priority` hook is in [`HOOK_NAMES`].
pub const PRIORITY_HOOK: usize = 2;
/// Where the `key` hook is in [`HOOK_NAMES`].
pub const KEY_HOOK: usize = 3;

impl HookRefs {
    /// References to `functions` (`exempt`, `critical`, `priority`, `key`,
    /// `report`; null for a hook not given), and a `constant` priority
    /// given instead of a `priority` function.
    ///
    /// # Safety
    /// `env` and the non-null values must be live handles of the current
    /// callback, each a function; the caller keeps the functions alive for
    /// as long as the gate lives.
    pub unsafe fn new(
        env: sys::napi_env,
        functions: [sys::napi_value; 5],
        constant: Option<Priority>,
    ) -> HookRefs {
        let weak = |f: sys::napi_value| {
            let mut r = ptr::null_mut();
            if !f.is_null() {
                // SAFETY: the caller's contract.
                unsafe { sys::napi_create_reference(env, f, 0, &mut r) };
            }
            r
        };
        let [exempt, critical, priority, key, report] = functions;
        HookRefs {
            env,
            exempt: weak(exempt),
            critical: weak(critical),
            priority: weak(priority),
            key: weak(key),
            report: weak(report),
            constant,
        }
    }

    /// Whether a key function was given (the gate's key is then given).
    pub fn gives_key(&self) -> bool {
        !self.key.is_null()
    }

    /// Deletes the references.
    ///
    /// # Safety
    /// Once, on the thread of the env that made them, while it lives.
    pub(super) unsafe fn delete(&self) {
        for r in [
            self.exempt,
            self.critical,
            self.priority,
            self.key,
            self.report,
        ] {
            if !r.is_null() {
                // SAFETY: the caller's contract.
                unsafe { sys::napi_delete_reference(self.env, r) };
            }
        }
    }
}

/// The hooks of one call, with the framework's request they are called
/// with. A hook that throws leaves its exception pending; nothing more is
/// called (each hook then answers what ends the sequence soonest: exempt,
/// not critical, no key) and the call returns it once the core is done.
pub(super) struct JsHooks<'h> {
    env: sys::napi_env,
    hooks: &'h HookRefs,
    request: sys::napi_value,
    /// A hook threw, or its answer could not be read: the exception is
    /// pending.
    pub(super) threw: bool,
}

impl<'h> JsHooks<'h> {
    /// The hooks of `hooks`, called with `request`.
    pub(super) fn new(env: sys::napi_env, hooks: &'h HookRefs, request: sys::napi_value) -> Self {
        JsHooks {
            env,
            hooks,
            request,
            threw: false,
        }
    }

    /// Calls the hook `r` with the request and `more` arguments: its
    /// result, or `None` when there is no such hook or it threw.
    fn call(&mut self, r: sys::napi_ref, more: &[sys::napi_value]) -> Option<sys::napi_value> {
        if r.is_null() || self.threw {
            return None;
        }
        let env = self.env;
        // SAFETY: `env` and `request` are the live handles of the current
        // callback; `r` is a live reference of this env (the gate lives
        // while it is called).
        unsafe {
            let mut f = ptr::null_mut();
            sys::napi_get_reference_value(env, r, &mut f);
            if f.is_null() {
                return None;
            }
            let mut this = ptr::null_mut();
            sys::napi_get_undefined(env, &mut this);
            let mut argv = [
                self.request,
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
            ];
            let argc = 1 + more.len().min(3);
            argv[1..argc].copy_from_slice(&more[..argc - 1]);
            let mut out = ptr::null_mut();
            let status = sys::napi_call_function(env, this, f, argc, argv.as_ptr(), &mut out);
            if status != sys::Status::napi_ok {
                self.threw = true;
                return None;
            }
            Some(out)
        }
    }

    /// Whether the hook `r` says yes (its result is truthy); `otherwise`
    /// when it threw.
    fn ask(&mut self, r: sys::napi_ref, otherwise: bool) -> bool {
        let Some(answer) = self.call(r, &[]) else {
            return if self.threw { otherwise } else { false };
        };
        let mut yes = false;
        // SAFETY: live handles; a non-boolean is coerced as JavaScript's
        // `if` does.
        unsafe {
            if sys::napi_get_value_bool(self.env, answer, &mut yes) != sys::Status::napi_ok {
                let mut coerced = ptr::null_mut();
                sys::napi_coerce_to_bool(self.env, answer, &mut coerced);
                sys::napi_get_value_bool(self.env, coerced, &mut yes);
            }
        }
        yes
    }

    /// A JavaScript string (from `text`).
    fn string(&self, text: &str) -> sys::napi_value {
        let mut out = ptr::null_mut();
        // SAFETY: live env; `text` is valid UTF-8 of the given length.
        unsafe {
            sys::napi_create_string_utf8(
                self.env,
                text.as_ptr().cast::<c_char>(),
                text.len() as isize,
                &mut out,
            )
        };
        out
    }
}

impl Hooks for JsHooks<'_> {
    fn exempt(&mut self) -> bool {
        // Throwing: the sequence ends at once — no place, no token.
        self.ask(self.hooks.exempt, true)
    }

    fn critical(&mut self) -> bool {
        // Throwing: shed (no token spent).
        self.ask(self.hooks.critical, false)
    }

    fn priority(&mut self) -> Option<Priority> {
        if let Some(constant) = self.hooks.constant {
            return Some(constant);
        }
        // No function, or one answering undefined or null: normal. A
        // function that throws, or answers what is no priority, gets the
        // core's fail-safe answer (shed: 503 with Retry-After), its error
        // emitted as a process warning — never a 500.
        let Some(answer) = self.call(self.hooks.priority, &[]) else {
            if self.threw {
                // SAFETY: live env; the hook's exception is pending.
                unsafe { warn_pending(self.env) };
                self.threw = false;
                return None;
            }
            return Some(Priority::Normal);
        };
        // SAFETY: `answer` is a live handle of this callback.
        if matches!(
            unsafe { type_of(self.env, answer) },
            sys::ValueType::napi_undefined | sys::ValueType::napi_null
        ) {
            return Some(Priority::Normal);
        }
        // One read into a small buffer: every priority's name fits it (a
        // longer string, never a priority, is read whole for the message).
        let mut buf = [0u8; 16];
        let mut len = 0usize;
        // SAFETY: `answer` is the hook's result, a live handle of this
        // callback; `buf` holds 16 bytes (N-API writes at most 15 and a NUL).
        let status = unsafe {
            sys::napi_get_value_string_utf8(
                self.env,
                answer,
                buf.as_mut_ptr().cast::<c_char>(),
                buf.len(),
                &mut len,
            )
        };
        let is_string = status == sys::Status::napi_ok;
        let parsed = if is_string && len + 4 < buf.len() {
            Priority::parse(&String::from_utf8_lossy(&buf[..len]))
        } else if is_string {
            let mut text = Vec::new();
            // SAFETY: as above.
            unsafe { push_utf8(self.env, answer, &mut text) };
            Priority::parse(&String::from_utf8_lossy(&text))
        } else {
            Err(ratebound::Error::InvalidOption {
                name: "priority",
                // SAFETY: as above.
                value: unsafe { shown(self.env, answer) },
                reason: "the priority function returns \"critical\", \"normal\" or \"background\"",
            })
        };
        match parsed {
            Ok(priority) => Some(priority),
            Err(e) => {
                // SAFETY: live env; no exception is pending (the call
                // returned normally), then the one thrown here is.
                unsafe {
                    raw_throw_core(self.env, &e);
                    warn_pending(self.env);
                }
                None
            }
        }
    }

    fn with_key<R>(&mut self, f: impl FnOnce(Option<Key<'_>>) -> R) -> Option<R> {
        let mut f = Some(f);
        let mut decide = |key: Option<Key<'_>>| (f.take().expect("the key is given once"))(key);
        let Some(value) = self.call(self.hooks.key, &[]) else {
            // The hook threw: the sequence stops (no bucket charged, nothing
            // reported) and admit rethrows. No hook: no key.
            return (!self.threw).then(|| decide(None));
        };
        // SAFETY: `value` is the hook's result, a live handle of this
        // callback; no JavaScript runs while the core reads the key.
        unsafe {
            if matches!(
                type_of(self.env, value),
                sys::ValueType::napi_undefined | sys::ValueType::napi_null
            ) {
                return Some(decide(None));
            }
            match with_key(self.env, value, |k| decide(Some(k))) {
                Ok(decided) => Some(decided),
                Err(e) => {
                    // What is no key (an object, 1.5): thrown, nothing charged.
                    raw_throw_key(self.env, &e);
                    self.threw = true;
                    None
                }
            }
        }
    }

    fn report(&mut self, verdict: &gate::Verdict<'_>) {
        if self.hooks.report.is_null() || self.threw {
            return;
        }
        let outcome = self.string(verdict.outcome.as_str());
        let by = match verdict.refused_by {
            Some(name) => self.string(name),
            None => {
                let mut null = ptr::null_mut();
                // SAFETY: live env.
                unsafe { sys::napi_get_null(self.env, &mut null) };
                null
            }
        };
        let priority = match verdict.priority {
            Some(p) => self.string(p.as_str()),
            None => {
                let mut undefined = ptr::null_mut();
                // SAFETY: live env.
                unsafe { sys::napi_get_undefined(self.env, &mut undefined) };
                undefined
            }
        };
        self.call(self.hooks.report, &[outcome, by, priority]);
    }
}

/// Takes the pending exception and emits it as a process warning
/// (`process.emitWarning(error)`); a warning that cannot be emitted is
/// dropped — a request's answer never fails for its log line.
///
/// # Safety
/// `env` is the live env of the current callback, with an exception
/// pending.
unsafe fn warn_pending(env: sys::napi_env) {
    // SAFETY: the caller's contract; the out pointers are valid, the names
    // NUL-terminated.
    unsafe {
        let mut error = ptr::null_mut();
        sys::napi_get_and_clear_last_exception(env, &mut error);
        let mut global = ptr::null_mut();
        sys::napi_get_global(env, &mut global);
        let mut process = ptr::null_mut();
        let mut emit = ptr::null_mut();
        let found = sys::napi_get_named_property(env, global, c"process".as_ptr(), &mut process)
            == sys::Status::napi_ok
            && sys::napi_get_named_property(env, process, c"emitWarning".as_ptr(), &mut emit)
                == sys::Status::napi_ok
            && type_of(env, emit) == sys::ValueType::napi_function;
        if found {
            let mut out = ptr::null_mut();
            let argv = [error];
            if sys::napi_call_function(env, process, emit, 1, argv.as_ptr(), &mut out)
                != sys::Status::napi_ok
            {
                let mut dropped = ptr::null_mut();
                sys::napi_get_and_clear_last_exception(env, &mut dropped);
            }
        }
    }
}

/// What a hook answered that is not a string, for an error message: its
/// type, or the number or boolean itself.
///
/// # Safety
/// `env` and `value` are live handles of the current callback.
unsafe fn shown(env: sys::napi_env, value: sys::napi_value) -> String {
    // SAFETY: the caller's contract; the out pointers are valid.
    unsafe {
        match type_of(env, value) {
            sys::ValueType::napi_undefined => "undefined".into(),
            sys::ValueType::napi_null => "null".into(),
            sys::ValueType::napi_boolean => {
                let mut b = false;
                sys::napi_get_value_bool(env, value, &mut b);
                b.to_string()
            }
            sys::ValueType::napi_number => {
                let mut x = 0f64;
                sys::napi_get_value_double(env, value, &mut x);
                x.to_string()
            }
            sys::ValueType::napi_function => "a function".into(),
            sys::ValueType::napi_symbol => "a symbol".into(),
            _ => "an object".into(),
        }
    }
}
