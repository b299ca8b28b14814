//! The gate's whole sequence for one request, as raw calls: `gateAdmit`
//! runs the core's `Gate::admit` with the gate's hooks, `gateFinish` its
//! `Gate::finish` with the remote policies' answers, `placeResponded`
//! times a concurrency place at the response's head, `placeRelease` gives
//! it back. The answer crosses as a few values — the
//! numbers in the shared array ([`GATE_AT`]..), the strings as the return
//! value — that `ratebound.js` makes into one typed object in one place.

use std::ffi::c_char;
use std::ptr;
use std::rc::Rc;
use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi::sys;
use ratebound::gate;
use ratebound::gate::{Admission, Outcome};
use ratebound::http::Priority;

use super::calls::{GATE_AT, GATE_LEN, gate_slot, publish_gate};
use super::ffi::{opt_ip, raw_entries, raw_throw, raw_throw_core, slot};
use super::headers::{Lines, RAW_HEADERS_TYPE};
use super::hooks::JsHooks;
use super::slots::{GATES, GateEntry, hold_place, release_place, responded_place};
use crate::error;
use crate::gate::{Ask, RemoteDecision};

/// What `gateAdmit` found, at [`gate_slot::FOUND`].
const EXEMPT: f64 = 0.0;
const DECIDED: f64 = 1.0;
const ASK: f64 = 2.0;

/// The outcomes in the order their index crosses (`outcomes` in
/// `bindFastPath`).
pub(super) const OUTCOMES: [Outcome; 5] = [
    Outcome::Allowed,
    Outcome::Refused,
    Outcome::Shed,
    Outcome::Rejected,
    Outcome::StoreError,
];

/// The priorities in the order their index crosses (`priorities` in
/// `bindFastPath`).
pub(super) const PRIORITIES: [Priority; 3] =
    [Priority::Critical, Priority::Normal, Priority::Background];

/// The header fields of a verdict in the core's order (`Fields::iter`),
/// for `fieldNames` in `bindFastPath`: the policy, `RateLimit`, the three
/// legacy fields, `Retry-After`.
pub(super) fn field_names() -> Vec<&'static str> {
    let all = gate::Fields {
        policy: Some(""),
        ratelimit: Some(Vec::new()),
        legacy: Some([0; 3]),
        retry_after: Some(0),
    };
    all.iter().map(|(name, _)| name).collect()
}

/// The gate in `slot`, or a thrown `ERR_INVALID_THIS`.
unsafe fn gate_in(env: sys::napi_env, h: sys::napi_value) -> Option<Rc<GateEntry>> {
    // SAFETY: live handles (the caller's contract).
    unsafe {
        let h = slot(env, h);
        // Held by its own reference, not by a borrow of the table: a hook
        // may make or drop gates while the sequence runs.
        let entry = GATES.with(|s| s.borrow().get_rc(h));
        if entry.is_none() {
            raw_throw(
                env,
                error::Kind::Type,
                "ERR_INVALID_THIS",
                "not a live ratebound gate",
            );
        }
        entry
    }
}

unsafe fn string(env: sys::napi_env, text: &str) -> sys::napi_value {
    let mut out = ptr::null_mut();
    // SAFETY: live env; `text` is valid UTF-8 of this length.
    unsafe {
        sys::napi_create_string_utf8(
            env,
            text.as_ptr().cast::<c_char>(),
            text.len() as isize,
            &mut out,
        )
    };
    out
}

unsafe fn undefined(env: sys::napi_env) -> sys::napi_value {
    let mut out = ptr::null_mut();
    // SAFETY: live env.
    unsafe { sys::napi_get_undefined(env, &mut out) };
    out
}

/// `admission` out: its numbers in the shared array, its place kept in
/// the table of places; returns the `RateLimit` value (or `undefined`) for
/// a pass, `[ratelimit, contentType, body]` for an answer — and
/// `[ratelimit, contentType, body, notice]` (the first three as before,
/// `undefined` for a pass) when the verdict carries a store episode's
/// notice (the shared array's last gate slot says so).
unsafe fn publish(
    env: sys::napi_env,
    gate: &gate::Gate,
    admission: Admission<'_>,
) -> sys::napi_value {
    let Admission { verdict, place } = admission;
    let fields = &verdict.fields;
    let outcome = OUTCOMES
        .iter()
        .position(|o| *o == verdict.outcome)
        .unwrap_or(0);
    let by = verdict
        .refused_by
        .and_then(|by| gate.policy_names().position(|name| name == by))
        .map_or(-1.0, |i| i as f64);
    let place = place.map_or(-1.0, |p| f64::from(hold_place(p)));
    let mask = u8::from(fields.policy.is_some())
        | u8::from(fields.ratelimit.is_some()) << 1
        | u8::from(fields.legacy.is_some()) << 2
        | u8::from(fields.retry_after.is_some()) << 3;
    let [limit, remaining, reset] = fields.legacy.unwrap_or_default();
    let priority = verdict
        .priority
        .and_then(|p| PRIORITIES.iter().position(|q| *q == p))
        .map_or(-1.0, |i| i as f64);
    let mut numbers = [0.0; GATE_LEN];
    numbers[gate_slot::FOUND] = DECIDED;
    numbers[gate_slot::STATUS] = f64::from(verdict.status);
    numbers[gate_slot::OUTCOME] = outcome as f64;
    numbers[gate_slot::REFUSED_BY] = by;
    numbers[gate_slot::PLACE] = place;
    numbers[gate_slot::FIELDS] = f64::from(mask);
    numbers[gate_slot::LIMIT] = limit as f64;
    numbers[gate_slot::REMAINING] = remaining as f64;
    numbers[gate_slot::RESET] = reset as f64;
    numbers[gate_slot::RETRY_AFTER] = fields.retry_after.unwrap_or(0) as f64;
    numbers[gate_slot::PRIORITY] = priority;
    numbers[gate_slot::NOTICE] = f64::from(u8::from(verdict.notice.is_some()));
    publish_gate(&numbers);
    // SAFETY: live env; the strings are built from valid UTF-8.
    unsafe {
        let ratelimit = match fields.ratelimit.as_deref() {
            // ASCII: quoted names and digits.
            Some(r) => string(env, std::str::from_utf8(r).unwrap_or("")),
            None => undefined(env),
        };
        if verdict.body.is_none() && verdict.notice.is_none() {
            return ratelimit;
        }
        let mut out = ptr::null_mut();
        sys::napi_create_array_with_length(env, 4, &mut out);
        sys::napi_set_element(env, out, 0, ratelimit);
        if let Some((content_type, body)) = &verdict.body {
            sys::napi_set_element(env, out, 1, string(env, content_type));
            sys::napi_set_element(env, out, 2, string(env, body));
        }
        if let Some(notice) = verdict.notice {
            sys::napi_set_element(env, out, 3, string(env, &notice.to_string()));
        }
        out
    }
}

/// Why `answers` could not be read.
enum Bad {
    Type(String),
    Core(ratebound::Error),
}

/// The remote policies' answers as the core takes them: each a decision,
/// `null` (a full table), or the `Error` its check threw — mapped by the
/// core's one rule (`RemoteAnswer::from_error`) by its `code` less the
/// `ERR_RATEBOUND_` prefix: a full table is 503 as the gate's own, any
/// other error a failed store (503 with `storeErrorRetryAfter`).
unsafe fn answers_of(
    env: sys::napi_env,
    answers: sys::napi_value,
) -> std::result::Result<Vec<gate::RemoteAnswer>, Bad> {
    // SAFETY: live handles (the caller's contract).
    unsafe {
        let mut is_array = false;
        sys::napi_is_array(env, answers, &mut is_array);
        if !is_array {
            return Err(Bad::Type("not an array".to_string()));
        }
        let mut len = 0u32;
        sys::napi_get_array_length(env, answers, &mut len);
        let mut out = Vec::with_capacity(len as usize);
        for i in 0..len {
            let mut item = ptr::null_mut();
            sys::napi_get_element(env, answers, i, &mut item);
            let mut kind = 0;
            sys::napi_typeof(env, item, &mut kind);
            if kind == sys::ValueType::napi_null || kind == sys::ValueType::napi_undefined {
                out.push(gate::RemoteAnswer::Full);
                continue;
            }
            let mut is_error = false;
            sys::napi_is_error(env, item, &mut is_error);
            if is_error {
                out.push(gate::RemoteAnswer::from_error(
                    error_code(env, item).as_deref(),
                ));
                continue;
            }
            let decision = RemoteDecision::from_napi_value(env, item)
                .map_err(|e| Bad::Type(format!("answer {i}: {}", e.reason)))?;
            out.push(decision.answer().map_err(Bad::Core)?);
        }
        Ok(out)
    }
}

/// The core's code of a thrown error: its `code` less `ERR_RATEBOUND_`,
/// lower case; `None` for an error that is not ratebound's.
unsafe fn error_code(env: sys::napi_env, e: sys::napi_value) -> Option<String> {
    // SAFETY: live handles (the caller's contract).
    unsafe {
        let mut code = ptr::null_mut();
        if sys::napi_get_named_property(env, e, c"code".as_ptr(), &mut code) != sys::Status::napi_ok
        {
            return None;
        }
        let code = String::from_napi_value(env, code).ok()?;
        code.strip_prefix("ERR_RATEBOUND_")
            .map(str::to_ascii_lowercase)
    }
}

raw_entries! {
    /// `gateAdmit(slot, request, peer, rawHeaders)`: the core's whole sequence
    /// (`Gate::admit`), the hooks called with `request`. Returns as
    /// [`publish`] for a decision; `undefined` for an exempt request; an `Ask`
    /// for a gate with remote policies (the shared array says which).
    fn raw_gate_admit(env, [h, request, peer, raw_headers]) as c"gateAdmit" {
        let Some(entry) = gate_in(env, h) else {
            return ptr::null_mut();
        };
        let gate = &entry.gate;
        let peer = opt_ip(env, peer);
        // Every header line is copied out before any hook runs.
        let Ok(headers) = Lines::read(env, raw_headers, gate.header_names()) else {
            return raw_throw(
                env,
                error::Kind::Type,
                "ERR_INVALID_ARG_TYPE",
                RAW_HEADERS_TYPE,
            );
        };
        let r = gate::Request {
            key: None,
            peer,
            headers: &headers,
        };
        let mut hooks = JsHooks::new(env, &entry.hooks, request);
        let admitted = gate.admit(&r, &mut hooks);
        if hooks.threw {
            // The exception is pending; the place, if any, goes back now,
            // untimed (the request never reached the application).
            if let gate::Admit::Decided(Admission {
                place: Some(place), ..
            }) = admitted
            {
                place.forfeit();
            }
            return ptr::null_mut();
        }
        match admitted {
            gate::Admit::Exempt => {
                publish_gate_kind(EXEMPT);
                undefined(env)
            }
            gate::Admit::Decided(a) => publish(env, gate, a),
            // Only a hook that threw stops the sequence (returned above).
            gate::Admit::Stopped => raw_throw(
                env,
                crate::error::Kind::Plain,
                "ERR_RATEBOUND_INTERNAL",
                "the request sequence stopped without a hook's error",
            ),
            gate::Admit::Ask(ask) => {
                let ask = Ask::new(ask, gate.clone());
                match <Ask as ToNapiValue>::to_napi_value(env, ask) {
                    Ok(v) => {
                        publish_gate_kind(ASK);
                        v
                    }
                    Err(e) => throw_napi(env, e),
                }
            }
        }
    }

    /// `gateFinish(slot, ask, answers, request)`: the rest of the sequence
    /// (`Gate::finish`) once the remote policies have answered `ask`, one
    /// answer per remote policy in order (a decision; `null` for a full table;
    /// the error its check threw); returns as [`publish`].
    fn raw_gate_finish(env, [h, ask, answers, request]) as c"gateFinish" {
        let Some(entry) = gate_in(env, h) else {
            return ptr::null_mut();
        };
        let gate = &entry.gate;
        let mut ask = match ClassInstance::<Ask>::from_napi_value(env, ask) {
            Ok(ask) => ask,
            Err(_) => {
                return raw_throw(
                    env,
                    error::Kind::Type,
                    "ERR_INVALID_ARG_TYPE",
                    "ask must be the Ask the gate's admit() returned",
                );
            }
        };
        if !Arc::ptr_eq(&ask.gate, gate) {
            return raw_throw(
                env,
                error::Kind::Type,
                "ERR_INVALID_ARG_VALUE",
                "this Ask is another gate's",
            );
        }
        let answers = match answers_of(env, answers) {
            Ok(answers) => answers,
            Err(Bad::Type(reason)) => {
                return raw_throw(
                    env,
                    error::Kind::Type,
                    "ERR_INVALID_ARG_TYPE",
                    &format!(
                        "answers must be an array of the remote policies' decisions, the errors their checks threw, or null: {reason}"
                    ),
                );
            }
            Err(Bad::Core(e)) => {
                return raw_throw_core(env, &e);
            }
        };
        let wanted = gate.remote_names().len();
        if answers.len() != wanted {
            return raw_throw(
                env,
                error::Kind::Range,
                "ERR_INVALID_ARG_VALUE",
                &format!("{} answers for {wanted} remote policies", answers.len()),
            );
        }
        let Some(asked) = ask.inner.take() else {
            return raw_throw(
                env,
                error::Kind::Plain,
                "ERR_RATEBOUND_ASK_CLOSED",
                "this Ask is already finished or closed",
            );
        };
        let mut hooks = JsHooks::new(env, &entry.hooks, request);
        let admission = gate.finish(asked, &answers, &mut hooks);
        if hooks.threw {
            return ptr::null_mut();
        }
        publish(env, gate, admission)
    }

    /// `placeRelease(slot)`: gives back the place of a `Place` (which calls it
    /// once).
    fn raw_place_release(env, [h]) as c"placeRelease" {
        release_place(slot(env, h));
        undefined(env)
    }

    /// `placeResponded(slot)`: the response's head is written — under an
    /// adaptive limit the request's latency is taken now (once); the place
    /// stays held until `placeRelease`.
    fn raw_place_responded(env, [h]) as c"placeResponded" {
        responded_place(slot(env, h));
        undefined(env)
    }
}

/// Writes only what `gateAdmit` found (the first of a gate's numbers).
fn publish_gate_kind(kind: f64) {
    publish_gate(&[kind]);
}
const _: () = assert!(
    gate_slot::FOUND == 0,
    "what was found is a gate's first number"
);

/// Throws a napi-rs error from a raw callback.
unsafe fn throw_napi(env: sys::napi_env, e: napi::Error) -> sys::napi_value {
    // SAFETY: live env.
    unsafe { raw_throw(env, error::Kind::Plain, "ERR_RATEBOUND_INTERNAL", &e.reason) }
}

const _: () = assert!(GATE_AT >= 4, "the gate's numbers follow a decision's");
