//! `Gate`: an HTTP middleware's whole request sequence, for the Express and
//! Fastify middleware in `middleware.js` (and any other framework). Built
//! by the core's one parser (`GateSpec`) from its options by name; its
//! sequence (the core's `Gate::admit`, run by the raw `gateAdmit` of
//! [`crate::fast`] and `admit()` in `ratebound.js`) calls the hooks given
//! here with the framework's request; a request waiting for its remote
//! policies is an [`Ask`].

use std::ptr;
use std::sync::Arc;

use napi::JsValue;
use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;
use ratebound::gate;

use crate::error::OrThrow;
use crate::fast::{self, HookRefs};
use crate::limiters::{ManualClock, clock_of};
use crate::slab::Registered;

mod options;

pub use options::*;
use options::{hooks_of, spec_of};

/// A `Gate`'s answer (`decide`).
#[napi(object)]
pub struct Verdict {
    /// 0 to let the request through; otherwise the status to answer with
    /// (429, 503, 500, or the `missingKey` status).
    pub status: u32,
    /// Header fields to set, flat: `[name, value, name, value, ...]`, names
    /// in lower case (on a pass, for the response of the route).
    pub headers: Vec<String>,
    /// A refusal's content type.
    pub content_type: Option<String>,
    /// A refusal's body.
    pub body: Option<String>,
    /// `'allowed'`, `'refused'`, `'shed'` or `'rejected'` (no valid key, a
    /// full key table), for metrics.
    pub outcome: String,
    /// The policy that refused (the first in order), if one did.
    pub refused_by: Option<String>,
    /// A shed request's priority (`'critical'` is never shed).
    #[napi(ts_type = "'normal' | 'background'")]
    pub priority: Option<String>,
}

/// The concurrency cap now, for a metrics gauge (`gate.concurrency`).
#[napi(object)]
pub struct ConcurrencyState {
    /// The limit in force (the adaptive limit moves it).
    pub limit: f64,
    /// Requests holding a place now.
    pub in_flight: f64,
    /// Whether the limit is learned from latency (`concurrencyLimit: 'auto'`).
    pub adaptive: bool,
    /// The adaptive limit's baseline latency in milliseconds (the mean of
    /// requests that entered alone; 0 before the first window); absent for
    /// a fixed limit.
    pub baseline_ms: Option<f64>,
    /// The last window's mean latency in milliseconds; absent for a fixed
    /// limit.
    pub recent_ms: Option<f64>,
    /// Windows of samples the adaptive limit has measured; absent for a
    /// fixed limit.
    pub windows: Option<f64>,
}

/// The core's verdict as a JS object.
fn verdict(v: &gate::Verdict<'_>) -> Verdict {
    let mut headers = Vec::new();
    for (name, value) in v.headers() {
        headers.push(name.to_string());
        headers.push(value);
    }
    let (content_type, body) = match &v.body {
        Some((t, b)) => (Some(t.to_string()), Some(b.clone())),
        None => (None, None),
    };
    Verdict {
        status: u32::from(v.status),
        headers,
        content_type,
        body,
        outcome: v.outcome.as_str().to_string(),
        refused_by: v.refused_by.map(str::to_string),
        priority: v.priority.map(|p| p.as_str().to_string()),
    }
}

/// An HTTP middleware's whole request sequence, made by the core
/// (`ratebound::gate::Gate`): exempt → a place among the requests in flight
/// (`concurrencyLimit`; shed with 503 at a full cap unless critical) → the
/// key (the `keyHeader`, the `key` hook, or the client IP under the
/// trusted-proxy rules, IPv6 grouped by prefix) → every policy
/// all-or-nothing (remote ones first, through an `Ask`) → `report` — and
/// the answer: status, `Retry-After` in whole seconds rounded up, the quota
/// fields and the body. `express()` and `fastify()` only move these values
/// in and out.
#[napi]
pub struct Gate {
    inner: Registered<gate::Gate>,
}

#[napi]
impl Gate {
    /// A gate from its options, read by name by the core (see
    /// `GateOptions`), and the `hooks` its sequence calls with the
    /// framework's request (see `GateHooks`).
    #[napi(constructor, ts_args_type = "options: GateOptions, hooks?: GateHooks")]
    pub fn new(
        env: Env,
        this: This<Object>,
        options: Unknown<'_>,
        hooks: Option<Unknown<'_>>,
    ) -> Result<Gate> {
        let (functions, constant) = hooks_of(&env, hooks)?;
        let gives_key = !functions[crate::fast::KEY_HOOK].is_null();
        let (spec, clock) = spec_of(&env, options, gives_key)?;
        let clock = clock_of(clock.map(|inner| ManualClock { inner }).as_ref());
        let inner = Arc::new(spec.build(clock).or_throw(&env)?);
        // SAFETY: live handles of this call: the hooks are functions (just
        // checked); the gate's object holds them (`hold`) for as long as it
        // lives, so the weak references stay good while its slot does.
        #[allow(unsafe_code)]
        let refs = unsafe {
            hold(&env, &this, &functions)?;
            HookRefs::new(env.raw(), functions, constant)
        };
        Ok(Gate {
            inner: Registered::new(
                inner,
                |g| fast::register_gate(g, refs),
                fast::unregister_gate,
            ),
        })
    }

    /// Checks `options` as the constructor reads them, without making a
    /// gate (no policy needed): the defaults of a Fastify route's limits.
    #[napi(skip_typescript)]
    pub fn check(env: Env, options: Unknown<'_>, hooks: Option<Unknown<'_>>) -> Result<()> {
        let (functions, _) = hooks_of(&env, hooks)?;
        let gives_key = !functions[crate::fast::KEY_HOOK].is_null();
        spec_of(&env, options, gives_key).map(drop)
    }

    /// Throws unless a route's own limit takes the option `name` (the
    /// core's rule, `route_option`: every option but the application's —
    /// shedding is app-wide).
    #[napi(skip_typescript)]
    pub fn route_option(env: Env, name: String) -> Result<()> {
        gate::route_option(&name).or_throw(&env)
    }

    /// Whether a route's own limit inherits the plugin's option `name`,
    /// given the names of the options it gives itself (the core's rule,
    /// `route_inherits`).
    #[napi(skip_typescript)]
    pub fn route_inherits(name: String, own: Vec<String>) -> bool {
        gate::route_inherits(&name, &own)
    }

    /// The decision for one request, without the sequence's hooks or
    /// concurrency place (`admit` runs the whole sequence): `key` (with
    /// `givenKey`: a string, whole number (at most 2^53) or `Uint8Array`;
    /// `null`/`undefined`/`''` for none; ignored otherwise), the peer
    /// address (the socket's peer, as the middleware passes it), and the
    /// request's raw header lines (`req.rawHeaders`: a flat array
    /// `[name, value, ...]` in the order received). The gate reads only the
    /// `keyHeader` lines and, with `trustedProxies`, the `clientIpHeader`
    /// lines.
    #[napi(
        ts_args_type = "key?: string | number | Uint8Array | null, peer?: string | null, rawHeaders?: string[] | null"
    )]
    pub fn decide(
        &self,
        env: Env,
        key: Option<Unknown<'_>>,
        peer: Option<String>,
        raw_headers: Option<Unknown<'_>>,
    ) -> Result<Verdict> {
        let peer = peer.and_then(|p| p.parse().ok());
        let key = key.map_or(std::ptr::null_mut(), |k| k.raw());
        let lines = raw_headers.map_or(std::ptr::null_mut(), |h| h.raw());
        // SAFETY: the env and the arguments of the current call.
        #[allow(unsafe_code)]
        let v = unsafe {
            fast::with_request(env.raw(), &self.inner, key, peer, lines, |r| {
                verdict(&self.inner.decide(r))
            })
        };
        v.map_err(|e| fast::decide_error(&env, e))
    }

    /// Load shedding by hand: a place among the requests in flight (always
    /// `true` without a `concurrencyLimit`); pair a `true` with one
    /// `leave()`. `admit` takes its requests' places itself.
    #[napi]
    pub fn try_enter(&self) -> bool {
        self.inner.try_enter()
    }

    /// Gives back a place from `tryEnter()`.
    #[napi]
    pub fn leave(&self) {
        self.inner.leave();
    }

    /// Whether a `concurrencyLimit` is set.
    #[napi(getter)]
    pub fn capped(&self) -> bool {
        self.inner.is_capped()
    }

    /// The concurrency cap now — the limit, the requests in flight and,
    /// under `concurrencyLimit: 'auto'`, the latencies it learns from — or
    /// `null` without a `concurrencyLimit`. For a gauge:
    /// `collect() { this.set(gate.concurrency.limit) }`.
    #[napi(getter)]
    pub fn concurrency(&self) -> Option<ConcurrencyState> {
        let cap = self.inner.concurrency()?;
        let state = cap.state();
        Some(ConcurrencyState {
            limit: cap.limit() as f64,
            in_flight: cap.in_flight() as f64,
            adaptive: cap.is_adaptive(),
            baseline_ms: state.map(|s| s.baseline_us / 1000.0),
            recent_ms: state.map(|s| s.recent_us / 1000.0),
            windows: state.map(|s| s.windows as f64),
        })
    }

    /// The policies' names, local then remote (for `onDecision`).
    #[napi(getter)]
    pub fn policy_names(&self) -> Vec<String> {
        self.inner.policy_names().map(str::to_string).collect()
    }

    /// The remote policies' names, in the order `finish` takes their
    /// answers.
    #[napi(getter)]
    pub fn remote_names(&self) -> Vec<String> {
        self.inner.remote_names().map(str::to_string).collect()
    }

    /// The header fields the gate reads (the key header; the forwarding
    /// header when proxies are trusted), lower case. A middleware may hand
    /// over only these lines.
    #[napi(getter)]
    pub fn header_names(&self) -> Vec<String> {
        self.inner.header_names().map(str::to_string).collect()
    }

    /// The `RateLimit-Policy` field value.
    #[napi(getter)]
    pub fn policy(&self) -> String {
        self.inner.policy_field().to_string()
    }

    /// The slot of the fast entry point (internal).
    #[napi(getter, skip_typescript)]
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    /// Keys tracked by the first policy.
    #[napi(getter)]
    pub fn size(&self) -> f64 {
        self.inner.len() as f64
    }

    /// Drops state that is fresh again from every policy; how many entries
    /// went.
    #[napi]
    pub fn cleanup(&self) -> f64 {
        self.inner.cleanup() as f64
    }
}

/// Keeps the hook functions alive with the gate's object: an array of
/// them under a symbol of its own (not enumerable, not writable).
///
/// # Safety
/// Live handles of the current call.
#[allow(unsafe_code)]
unsafe fn hold(env: &Env, this: &This<Object>, functions: &[sys::napi_value]) -> Result<()> {
    let env = env.raw();
    // SAFETY: the caller's contract; every out pointer is valid.
    unsafe {
        let mut array = ptr::null_mut();
        sys::napi_create_array_with_length(env, functions.len(), &mut array);
        for (i, f) in functions.iter().enumerate() {
            if !f.is_null() {
                sys::napi_set_element(env, array, i as u32, *f);
            }
        }
        let mut symbol = ptr::null_mut();
        let mut description = ptr::null_mut();
        let text = "ratebound.hooks";
        sys::napi_create_string_utf8(
            env,
            text.as_ptr().cast(),
            text.len() as isize,
            &mut description,
        );
        sys::napi_create_symbol(env, description, &mut symbol);
        let property = sys::napi_property_descriptor {
            utf8name: ptr::null(),
            name: symbol,
            method: None,
            getter: None,
            setter: None,
            value: array,
            attributes: sys::PropertyAttributes::default,
            data: ptr::null_mut(),
        };
        let status = sys::napi_define_properties(env, this.raw(), 1, &property);
        if status != sys::Status::napi_ok {
            return Err(napi::Error::new(
                Status::GenericFailure,
                "cannot hold the gate's hooks",
            ));
        }
    }
    Ok(())
}

/// A request waiting for its gate's remote policies (Redis limiters,
/// shared-memory tables), from `admit`: each checks `identity` (`key:…`,
/// `ip:…` or `anonymous`, the same in every instance) in its own scope,
/// then `gate.finish(ask, answers, request)` decides. It holds the
/// request's concurrency place: `close()` it when the answers never come
/// (it is given back when collected, too).
#[napi]
pub struct Ask {
    pub(crate) inner: Option<gate::Ask>,
    identity: Vec<u8>,
    pub(crate) gate: Arc<gate::Gate>,
}

impl Ask {
    /// `ask`, of `gate`.
    pub(crate) fn new(ask: gate::Ask, gate: Arc<gate::Gate>) -> Ask {
        Ask {
            identity: ask.identity().to_vec(),
            inner: Some(ask),
            gate,
        }
    }
}

#[napi]
impl Ask {
    /// What each remote policy checks: `key:<the key>`, `ip:<address>` or
    /// `anonymous`.
    #[napi(getter)]
    pub fn identity(&self) -> Buffer {
        self.identity.clone().into()
    }

    /// Whether it was finished or closed.
    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.inner.is_none()
    }

    /// Gives the request's place back without deciding (idempotent).
    #[napi]
    pub fn close(&mut self) {
        self.inner = None;
    }
}
