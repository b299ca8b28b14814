//! The Redis driver's hot path as raw N-API callbacks (see `fast` for why:
//! a napi-rs method costs more than the work itself).
//!
//! One call begins a check (or a reservation, or a wait's next step) and
//! gives `redis.js` the key to send; the rest of the command — the script
//! and its arguments — is a *template* the engine made before, which
//! `redis.js` fetched once and keeps. One call reads what became of it
//! (the reply's numbers written into the shared `Float64Array`, `ffi`) and
//! writes the answer back there (`finish`, a module of its own). A batch of
//! begun calls (`redis.js` lays it out from the templates) is answered with
//! one call too. The calls in flight wait in a per-thread table, by
//! number (`table`); nothing is allocated on the JavaScript heap per check
//! but the key.
//!
//! What `[0]` of the shared array says after a step: 1 a call to run (its
//! number, template, class and slot at `[1..5]`, the key returned — for a
//! call without a template, `[key, ...args]`); 0 an
//! answer at `ANSWER` — a check's: allowed (1/0), limit, remaining,
//! retryAfter (s), resetAfter (s), source (an index into `sources`); a
//! reservation's: granted (1/0), delay or retryAfter (s), source, kept (1:
//! the call that gives it back waits for `redisKeep`, the reservation's
//! cancel). A wait's
//! step: 1 a call, 2 sleep (`ANSWER`: seconds), 3 done (`ANSWER`: the
//! source), 4 it cannot end in time (`ANSWER`: retryAfter s).

#![allow(unsafe_code)]

use std::ptr;
use std::sync::Arc;
use std::time::Duration;

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;
use ratebound::Error as CoreError;
use ratebound::any::{self, Key};
use ratebound_redis::{BatchCall, Begin, Call, CallOutcome, Engine, ReserveBegin, Step};

use super::ffi::{
    ANSWER, BOUND, CALL_SLOTS, DECISION_SLOTS, IDS, LEN, OUT, REPLY, RESERVED_SLOTS, SCRATCH,
    STRIDE, bytes_value, call_slot, count, int, no_engine, number, put, slot_map, string, throw,
    throw_core, throw_key, type_of, uint, undefined,
};
use super::finish::{decision, reserved};
use super::table::{
    ACQUISITIONS, CALLS, ENGINES, Entry, Flight, SOURCES, engine, source_code, take_call, template,
    use_slots,
};
use crate::error;
use crate::fast::{raw_entries, with_key};
use crate::redis::RedisCall;

/// What a wait's step gave, in `[0]`: the one protocol of every wait.
use crate::limiters::step::{
    ALL as STEPS, CALL as STEP_CALL, DONE as STEP_DONE, EXCEEDED as STEP_EXCEEDED,
    SLEEP as STEP_SLEEP,
};

/// Publishes a begun call: its number, template, class and slot; the key
/// to send as the return value.
unsafe fn publish_call(
    env: sys::napi_env,
    entry: &mut Entry,
    call: Call,
    explicit: bool,
    acquisition: Option<u32>,
) -> sys::napi_value {
    // An explicit time is a template of its own each time: not kept.
    let template = if explicit {
        -1.0
    } else {
        entry.template(&call)
    };
    let class = entry.class(&call);
    let slot = if entry.slots {
        f64::from(ratebound_redis::plan::hash_slot(&call.key))
    } else {
        0.0
    };
    // SAFETY: live env (the caller's contract).
    let key = unsafe {
        let key = bytes_value(env, &call.key);
        if template < 0.0 {
            with_args(env, key, &call.args)
        } else {
            key
        }
    };
    let id = CALLS.with(|c| c.borrow_mut().insert(Flight { call, acquisition }));
    let mut head = [0.0; call_slot::LEN];
    head[call_slot::STEP] = STEP_CALL;
    head[call_slot::ID] = f64::from(id);
    head[call_slot::TEMPLATE] = template;
    head[call_slot::CLASS] = class;
    head[call_slot::SLOT] = slot;
    put(0, &head);
    key
}

/// `[key, ...args]`: what a call without a template gives back.
unsafe fn with_args(env: sys::napi_env, key: sys::napi_value, args: &[String]) -> sys::napi_value {
    let mut array = ptr::null_mut();
    // SAFETY: live env and handles (the caller's contract).
    unsafe {
        sys::napi_create_array_with_length(env, 1 + args.len(), &mut array);
        sys::napi_set_element(env, array, 0, key);
        for (i, a) in args.iter().enumerate() {
            sys::napi_set_element(env, array, 1 + i as u32, bytes_value(env, a.as_bytes()));
        }
    }
    array
}

/// Publishes the call `call` begun for engine `h`.
unsafe fn publish(
    env: sys::napi_env,
    h: u32,
    call: Call,
    explicit: bool,
    acquisition: Option<u32>,
) -> sys::napi_value {
    // SAFETY: live env (the caller's contract).
    ENGINES.with(|s| match s.borrow_mut().get_mut(h) {
        Some(entry) => unsafe { publish_call(env, entry, call, explicit, acquisition) },
        None => unsafe { no_engine(env) },
    })
}

/// Reads a scope: undefined or null (none) or a string.
unsafe fn scope_of(
    env: sys::napi_env,
    scope: sys::napi_value,
) -> std::result::Result<Option<String>, sys::napi_value> {
    // SAFETY: live handles (the caller's contract).
    unsafe {
        match type_of(env, scope) {
            sys::ValueType::napi_undefined | sys::ValueType::napi_null => Ok(None),
            _ => match string(env, scope) {
                Some(s) => Ok(Some(s)),
                None => Err(throw(
                    env,
                    error::Kind::Type,
                    "ERR_INVALID_ARG_TYPE",
                    "scope must be a string",
                )),
            },
        }
    }
}

/// Reads seconds named `name`: undefined or null (none) or a duration.
unsafe fn seconds_of(
    env: sys::napi_env,
    name: &'static str,
    v: sys::napi_value,
) -> std::result::Result<Option<Duration>, sys::napi_value> {
    // SAFETY: live handles (the caller's contract).
    unsafe {
        match type_of(env, v) {
            sys::ValueType::napi_undefined | sys::ValueType::napi_null => Ok(None),
            _ => any::seconds(name, number(env, v).unwrap_or(f64::NAN))
                .map(Some)
                .map_err(|e| throw_core(env, &e)),
        }
    }
}

/// Runs `f` with the raw bytes of the key `key`; a bad key or `f`'s error
/// is thrown.
unsafe fn with_bytes<R>(
    env: sys::napi_env,
    key: sys::napi_value,
    f: impl FnOnce(&[u8]) -> std::result::Result<R, CoreError>,
) -> std::result::Result<R, sys::napi_value> {
    // SAFETY: live handles (the caller's contract).
    unsafe {
        let r = with_key(env, key, |k| match k {
            Key::Text(s) => f(s.as_bytes()),
            Key::Bytes(b) => f(b),
            Key::Int(i) => f(i.to_string().as_bytes()),
        });
        match r {
            Err(e) => Err(throw_key(env, e)),
            Ok(Err(e)) => Err(throw_core(env, &e)),
            Ok(Ok(r)) => Ok(r),
        }
    }
}

/// Runs `f` with the arguments of `beginReserve` and `acquire`, `(handle,
/// key, n, seconds, scope)`, read in that order (the first bad one is
/// thrown): the handle's engine, the scope, the key's bytes, the count and
/// the seconds named `name` (undefined or null: none). The handle and what
/// `f` gave; its error is thrown.
unsafe fn with_wait_args<R>(
    env: sys::napi_env,
    [h, key, n, seconds, scope]: [sys::napi_value; 5],
    name: &'static str,
    f: impl FnOnce(
        &Engine,
        Option<&str>,
        &[u8],
        u64,
        Option<Duration>,
    ) -> std::result::Result<R, CoreError>,
) -> std::result::Result<(u32, R), sys::napi_value> {
    // SAFETY: live handles (the caller's contract).
    unsafe {
        let h = uint(env, h);
        let n = count(env, n).map_err(|e| throw_core(env, &e))?;
        let seconds = seconds_of(env, name, seconds)?;
        let scope = scope_of(env, scope)?;
        let Some(engine) = engine(h) else {
            return Err(no_engine(env));
        };
        let r = with_bytes(env, key, |k| f(&engine, scope.as_deref(), k, n, seconds))?;
        Ok((h, r))
    }
}

/// The arguments `(handle, a)` of `acquireStep` and `acquireAbandon`: the
/// handle, its engine and the wait's number (not checked); no engine is
/// thrown.
unsafe fn wait_of(
    env: sys::napi_env,
    h: sys::napi_value,
    a: sys::napi_value,
) -> std::result::Result<(u32, Arc<Engine>, u32), sys::napi_value> {
    // SAFETY: live handles (the caller's contract).
    unsafe {
        let h = uint(env, h);
        let a = uint(env, a);
        match engine(h) {
            Some(engine) => Ok((h, engine, a)),
            None => Err(no_engine(env)),
        }
    }
}

raw_entries! {
    /// `begin(handle, key, n, scope, atUs) -> key | undefined`: a check's first
    /// step. A call to run: `[0] = 1`, its number, template, class and slot
    /// in the shared array, the Redis key (a string, or a `Buffer` when not
    /// UTF-8) returned. Answered already (a lease, an open breaker): `[0] = 0`
    /// and the answer at `ANSWER`.
    fn raw_begin(env, [h, key, n, scope, at]) as c"begin" {
        let h = uint(env, h);
        let n = match count(env, n) {
            Ok(n) => n,
            Err(e) => return throw_core(env, &e),
        };
        let scope = match scope_of(env, scope) {
            Ok(s) => s,
            Err(thrown) => return thrown,
        };
        let at = match type_of(env, at) {
            sys::ValueType::napi_undefined | sys::ValueType::napi_null => None,
            _ => match any::whole("nowUs", number(env, at).unwrap_or(f64::NAN), 0) {
                Ok(at) => Some(at),
                Err(e) => return throw_core(env, &e),
            },
        };
        let Some(engine) = engine(h) else {
            return no_engine(env);
        };
        match with_bytes(env, key, |k| engine.begin_in(scope.as_deref(), k, n)) {
            Err(thrown) => thrown,
            Ok(Begin::Done(d)) => {
                put(call_slot::STEP, &[0.0]);
                put(ANSWER, &decision(&d));
                undefined(env)
            }
            Ok(Begin::Call(call)) => {
                let call = match at {
                    Some(at) => call.at(at),
                    None => call,
                };
                publish(env, h, call, at.is_some(), None)
            }
        }
    }

    /// `beginReserve(handle, key, n, maxWait, scope) -> key | undefined`: a
    /// reservation's first step, as `begin` (an answer at `ANSWER` in the
    /// reservation's layout).
    fn raw_begin_reserve(env, [h, key, n, max_wait, scope]) as c"beginReserve" {
        let args = [h, key, n, max_wait, scope];
        let begun = with_wait_args(env, args, "maxWait", |engine, scope, k, n, max_wait| {
            engine.begin_reserve(scope, k, n, max_wait.unwrap_or(Duration::MAX))
        });
        match begun {
            Err(thrown) => thrown,
            Ok((_, ReserveBegin::Done(r))) => {
                put(call_slot::STEP, &[0.0]);
                put(ANSWER, &reserved(&r, false));
                undefined(env)
            }
            Ok((h, ReserveBegin::Call(call))) => publish(env, h, call, false, None),
        }
    }

    /// `acquire(handle, key, n, timeout, scope) -> number`: a wait for `n`
    /// tokens for `key` that cannot take longer than `timeout` seconds (none:
    /// as long as it takes): its number, for `acquireStep`.
    fn raw_acquire(env, [h, key, n, timeout, scope]) as c"acquire" {
        let args = [h, key, n, timeout, scope];
        let begun = with_wait_args(env, args, "timeout", |engine, scope, k, n, timeout| {
            engine.acquire(scope, k, n, timeout)
        });
        match begun {
            Err(thrown) => thrown,
            Ok((_, a)) => {
                let id = ACQUISITIONS.with(|s| s.borrow_mut().insert(a));
                int(env, id as i32)
            }
        }
    }

    /// `acquireStep(handle, a) -> key | undefined`: what wait `a` does next
    /// (see the module's docs); a call is published as `begin`'s, and its
    /// outcome goes to the wait (`finish` answers nothing for it). A wait that
    /// is over is forgotten.
    fn raw_acquire_step(env, [h, a]) as c"acquireStep" {
        let (h, engine, a) = match wait_of(env, h, a) {
            Ok(w) => w,
            Err(thrown) => return thrown,
        };
        let step = ACQUISITIONS.with(|s| s.borrow_mut().get_mut(a).map(|w| engine.acquire_step(w)));
        let over = |what: f64, value: f64| {
            ACQUISITIONS.with(|s| s.borrow_mut().take(a));
            put(call_slot::STEP, &[what]);
            put(ANSWER, &[value]);
        };
        match step {
            None => throw(
                env,
                error::Kind::Type,
                "ERR_INVALID_ARG_VALUE",
                &format!("no Redis wait {a} under way"),
            ),
            Some(Ok(Step::Call(call))) => publish(env, h, call, false, Some(a)),
            Some(Ok(Step::Sleep(d))) => {
                put(call_slot::STEP, &[STEP_SLEEP]);
                put(ANSWER, &[d.as_secs_f64()]);
                undefined(env)
            }
            Some(Ok(Step::Done(source))) => {
                over(STEP_DONE, source_code(source));
                undefined(env)
            }
            Some(Err(CoreError::DeadlineExceeded { wait, .. })) => {
                over(STEP_EXCEEDED, wait.as_secs_f64());
                undefined(env)
            }
            Some(Err(e)) => {
                ACQUISITIONS.with(|s| s.borrow_mut().take(a));
                throw_core(env, &e)
            }
        }
    }

    /// `acquireAbandon(handle, a) -> key | undefined`: the caller of wait `a`
    /// gave up; the call that gives back what it holds (published as
    /// `begin`'s; it needs no answer), or undefined. The wait is forgotten.
    fn raw_acquire_abandon(env, [h, a]) as c"acquireAbandon" {
        let (h, engine, a) = match wait_of(env, h, a) {
            Ok(w) => w,
            Err(thrown) => return thrown,
        };
        let wait = ACQUISITIONS.with(|s| s.borrow_mut().take(a));
        match wait.and_then(|mut w| engine.acquire_abandon(&mut w)) {
            Some(call) => publish(env, h, call, false, None),
            None => {
                put(call_slot::STEP, &[0.0]);
                undefined(env)
            }
        }
    }

    /// `acquireForget(a)`: forgets wait `a` if it is still known (however it
    /// ended); whether it was.
    fn raw_acquire_forget(env, [a]) as c"acquireForget" {
        let a = uint(env, a);
        let known = ACQUISITIONS.with(|s| s.borrow_mut().take(a)).is_some();
        int(env, i32::from(known))
    }
}

/// The shared array of this thread and the raw entry points (internal):
/// `{ scratch, begin, beginReserve, acquire, acquireStep, acquireAbandon,
/// acquireForget, finish, finishBatch, enter, carry, settle, landed, stamp, flush,
/// sweep, turns, sources, answerAt, idsAt, replyAt,
/// outAt, stride, maxBatch, replyLen, steps }`. Every copy of `redis.js` loaded in
/// one thread gets the same array.
#[napi(skip_typescript)]
pub fn bind_redis_path(env: &Env) -> Result<Object<'_>> {
    static SHARED: crate::fast::SharedArray = crate::fast::SharedArray {
        len: LEN,
        bound: &BOUND,
        scratch: &SCRATCH,
    };
    let fns: Vec<_> = ENTRIES
        .iter()
        .chain(super::finish::ENTRIES)
        .chain(super::turns::ENTRIES)
        .copied()
        .collect();
    // SAFETY: `env` is the live env of this call.
    let mut exports = unsafe { crate::fast::bind_raw(env, &SHARED, &fns)? };
    let sources: Vec<&str> = SOURCES.iter().map(|s| s.as_str()).collect();
    exports.set("sources", sources)?;
    exports.set("answerAt", ANSWER as u32)?;
    exports.set("idsAt", IDS as u32)?;
    exports.set("replyAt", REPLY as u32)?;
    exports.set("outAt", OUT as u32)?;
    exports.set("stride", STRIDE as u32)?;
    exports.set("maxBatch", BatchCall::MAX as u32)?;
    exports.set("replyLen", ratebound_redis::REPLY_LEN as u32)?;
    exports.set("callSlots", slot_map(CALL_SLOTS, 0))?;
    exports.set("decisionSlots", slot_map(DECISION_SLOTS, 0))?;
    exports.set("reservedSlots", slot_map(RESERVED_SLOTS, 0))?;
    exports.set("turns", super::turns::codes())?;
    exports.set("steps", STEPS.to_vec())?;
    Ok(exports)
}

/// Engine `handle`'s template `index` (internal): `[sha, text, args,
/// batchSha, batchText]` — what every call of that template sends but its
/// key.
#[napi(skip_typescript)]
pub fn redis_template(
    env: Env,
    handle: u32,
    index: u32,
) -> Result<(String, String, Vec<String>, String, String)> {
    match template(handle, index) {
        Some((t, batch)) => Ok((
            t.script.sha().to_string(),
            t.script.text.to_string(),
            t.args,
            batch.sha().to_string(),
            batch.text.to_string(),
        )),
        None => Err(error::invalid_type(
            &env,
            &format!("no Redis template {index}"),
        )),
    }
}

/// The script of begun call `id` (internal; for a call without a
/// template): `[sha, text, batchSha, batchText]`.
#[napi(skip_typescript)]
pub fn redis_call_script(env: Env, id: u32) -> Result<(String, String, String, String)> {
    let found = CALLS.with(|c| {
        c.borrow().get(id).map(|f| {
            let script = f.call.script;
            let batch = script.batch();
            (
                script.sha().to_string(),
                script.text.to_string(),
                batch.sha().to_string(),
                batch.text.to_string(),
            )
        })
    });
    found.ok_or_else(|| error::invalid_type(&env, &format!("no Redis call {id} in flight")))
}

/// Takes kept call `id` (the give-back of a reservation granted ahead of
/// time) out of the table as a `RedisCall`, for its cancel to run
/// (internal).
#[napi(skip_typescript)]
pub fn redis_keep(env: Env, id: u32) -> Result<RedisCall> {
    take_call(id)
        .map(|f| RedisCall { call: f.call })
        .ok_or_else(|| error::invalid_type(&env, &format!("no Redis call {id} kept")))
}

/// Makes engine `handle`'s `begin` give each key's hash slot (internal;
/// for a cluster client).
#[napi(skip_typescript)]
pub fn redis_use_slots(handle: u32) -> bool {
    use_slots(handle)
}

/// Forgets call `id` without telling its engine (internal): the client
/// said it is misconfigured, which is an error for the caller, never the
/// fail policy's or the breaker's. Whether it was in flight.
#[napi(skip_typescript)]
pub fn redis_drop(id: u32) -> bool {
    take_call(id).is_some()
}

/// Throws the typed `ERR_RATEBOUND_STORE_MISCONFIGURED` error when a
/// client's failure `text` says the client is misconfigured (a wrong
/// password, a missing ACL permission, an unknown database, ...: engine
/// `handle`'s `misconfigured`, which also closes a breaker a probe had
/// opened), else returns false (internal).
#[napi(skip_typescript)]
pub fn redis_misconfigured(env: Env, handle: u32, text: String) -> Result<bool> {
    let outcome = CallOutcome::Failed(&text);
    let found = match engine(handle) {
        Some(engine) => engine.misconfigured(&outcome).err(),
        None => ratebound_redis::misconfiguration(&text),
    };
    match found {
        Some(e) => Err(error::throw(&env, &e)),
        None => Ok(false),
    }
}

/// Tells engine `handle` that Redis replied just now (internal: a reply
/// that landed after its call's deadline — Redis is alive, so calls that
/// time out meanwhile are this client's overload; see
/// `Engine::heard_from_redis`).
#[napi(skip_typescript)]
pub fn redis_heard(handle: u32) {
    if let Some(engine) = engine(handle) {
        engine.heard_from_redis();
    }
}
