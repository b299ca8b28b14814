//! The Redis driver's hot path as raw N-API callbacks (see `fast` for why:
//! a napi-rs method costs more than the work itself).
//!
//! One call begins a check (or a reservation) and gives `redis.js` the key
//! to send; the rest of the command — the script and its arguments — is a
//! *template* the engine made before, which `redis.js` fetched once and
//! keeps. One call reads what became of it (the reply's numbers written
//! into the shared `Float64Array`) and writes the answer back there. A
//! batch of begun calls becomes one command with one call, and its reply
//! every call's answer with one more. The calls in flight wait in a
//! per-thread table, by number; nothing is allocated on the JavaScript
//! heap per check but the key.
//!
//! The shared array (`SCRATCH`, [`LEN`] numbers):
//! - `[0]` what `begin` gave: 1 a call to run, 0 an answer (at [`ANSWER`]);
//!   `[1]` the call's number, `[2]` its template (-1: none, ask
//!   `redisCallArgs`), `[3]` its join class (calls of one class may go in
//!   one batch; -1: never), `[4]` the key's Redis Cluster hash slot;
//! - [`ANSWER`]: a check's answer — allowed (1/0), limit, remaining,
//!   retryAfter (s), resetAfter (s), source (an index into `sources`) —
//!   or a reservation's — granted (1/0), delay or retryAfter (s), source,
//!   kept (1: the call waits for `redisKeep`, the reservation's cancel);
//! - [`IDS`]: a batch's call numbers (-1: a member answered already);
//! - [`REPLY`]: the numbers of a reply (a batch's: 7 per call);
//! - [`OUT`]: a batch's answers, [`STRIDE`] numbers each, as at [`ANSWER`].

#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::ffi::{CString, c_char, c_void};
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;
use ratebound::any::{self, Key};
use ratebound_redis::{
    BatchCall, Begin, Call, CallKind, CallOutcome, Engine, RedisDecision, ReserveBegin, Reserved,
    Source,
};

use crate::error;
use crate::fast::{KeyError, with_key};
use crate::redis::RedisCall;

/// Where an answer starts in the shared array.
pub const ANSWER: usize = 8;
/// The numbers of one answer.
pub const STRIDE: usize = 6;
/// Where a batch's call numbers start.
pub const IDS: usize = ANSWER + STRIDE + 2;
/// Where a reply's numbers start.
pub const REPLY: usize = IDS + BatchCall::MAX;
/// Where a batch's answers start.
pub const OUT: usize = REPLY + 7 * BatchCall::MAX;
/// The shared array's length.
pub const LEN: usize = OUT + STRIDE * BatchCall::MAX;

/// The most templates (distinct argument lists) and join classes one
/// engine keeps; calls past them go without (slower, never wrong).
const MAX_TEMPLATES: usize = 32;
const MAX_CLASSES: usize = 64;

/// Every source, in the order of the `sources` names.
const SOURCES: [Source; 6] = [
    Source::Redis,
    Source::Lease,
    Source::FailOpen,
    Source::FailClosed,
    Source::Local,
    Source::Damaged,
];

fn source_code(s: Source) -> f64 {
    SOURCES.iter().position(|x| *x == s).unwrap_or(0) as f64
}

/// A table of items by number, numbers reused once freed.
struct Slab<T> {
    items: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Slab<T> {
    const fn new() -> Slab<T> {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
        }
    }

    fn insert(&mut self, item: T) -> u32 {
        match self.free.pop() {
            Some(slot) => {
                self.items[slot as usize] = Some(item);
                slot
            }
            None => {
                self.items.push(Some(item));
                (self.items.len() - 1) as u32
            }
        }
    }

    fn get(&self, slot: u32) -> Option<&T> {
        self.items.get(slot as usize)?.as_ref()
    }

    fn get_mut(&mut self, slot: u32) -> Option<&mut T> {
        self.items.get_mut(slot as usize)?.as_mut()
    }

    fn take(&mut self, slot: u32) -> Option<T> {
        let item = self.items.get_mut(slot as usize)?.take()?;
        self.free.push(slot);
        Some(item)
    }

    /// Puts `item` back at `slot`, freed by `take` (a kept call).
    fn restore(&mut self, slot: u32, item: T) {
        if let Some(i) = self.free.iter().rposition(|&s| s == slot) {
            self.free.swap_remove(i);
            self.items[slot as usize] = Some(item);
        }
    }
}

/// An engine as the hot path sees it: the engine, and the argument lists
/// and join classes its calls were seen with.
struct Entry {
    engine: Arc<Engine>,
    templates: Vec<Call>,
    classes: Vec<Call>,
    /// Whether `begin` computes the key's hash slot (a cluster client).
    slots: bool,
}

impl Entry {
    /// The template of `call` (a call with the same script and arguments
    /// seen before), or a new one; -1 when the table is full.
    fn template(&mut self, call: &Call) -> f64 {
        if let Some(i) = self
            .templates
            .iter()
            .position(|t| t.script == call.script && t.args == call.args)
        {
            return i as f64;
        }
        if self.templates.len() >= MAX_TEMPLATES {
            return -1.0;
        }
        self.templates.push(call.clone());
        (self.templates.len() - 1) as f64
    }

    /// The join class of `call`: calls of one class join in one batch
    /// ([`BatchCall::joins`]); -1 when the table is full.
    fn class(&mut self, call: &Call) -> f64 {
        if let Some(i) = self.classes.iter().position(|c| BatchCall::joins(c, call)) {
            return i as f64;
        }
        if self.classes.len() >= MAX_CLASSES {
            return -1.0;
        }
        self.classes.push(call.clone());
        (self.classes.len() - 1) as f64
    }
}

thread_local! {
    static ENGINES: RefCell<Slab<Entry>> = const { RefCell::new(Slab::new()) };
    /// The calls begun and not yet finished, by number.
    static CALLS: RefCell<Slab<Call>> = const { RefCell::new(Slab::new()) };
    /// The shared array's data.
    static SCRATCH: Cell<*mut f64> = const { Cell::new(ptr::null_mut()) };
    /// The env the array was made in, and the reference that keeps it.
    static BOUND: Cell<(sys::napi_env, sys::napi_ref)> =
        const { Cell::new((ptr::null_mut(), ptr::null_mut())) };
}

/// Gives `engine` a number in this thread's table (its `handle`).
pub fn register(engine: Arc<Engine>) -> u32 {
    ENGINES.with(|s| {
        s.borrow_mut().insert(Entry {
            engine,
            templates: Vec::new(),
            classes: Vec::new(),
            slots: false,
        })
    })
}

/// Frees an engine's number (from its finalizer).
pub fn unregister(handle: u32) {
    let _ = ENGINES.try_with(|s| s.borrow_mut().take(handle));
}

/// Takes the begun call `id` out of the table.
pub fn take_call(id: u32) -> Option<Call> {
    CALLS.with(|c| c.borrow_mut().take(id))
}

/// Engine `handle`'s template `index`: `[sha, text, args, batchSha,
/// batchText]` of its script.
pub fn template(
    handle: u32,
    index: u32,
) -> Option<(Call, &'static ratebound_redis::script::Script)> {
    ENGINES.with(|s| {
        let s = s.borrow();
        let t = s.get(handle)?.templates.get(index as usize)?.clone();
        let batch = t.script.batch();
        Some((t, batch))
    })
}

/// Makes `begin` compute hash slots for engine `handle`.
pub fn use_slots(handle: u32) -> bool {
    ENGINES.with(|s| match s.borrow_mut().get_mut(handle) {
        Some(e) => {
            e.slots = true;
            true
        }
        None => false,
    })
}

/// CRC16/XMODEM (polynomial 0x1021, initial 0), the hash of Redis
/// Cluster's key slots, one table lookup a byte.
const CRC16: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// The Redis Cluster hash slot of `key`: of the part between the first
/// `{` and the next `}` if that part is not empty (a hash tag), else of
/// the whole key.
pub fn hash_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    let mut crc = 0u16;
    for &b in hashed {
        crc = (crc << 8) ^ CRC16[usize::from(((crc >> 8) as u8) ^ b)];
    }
    crc % 16384
}

// ------------------------------------------------------------ raw helpers

unsafe fn args<const N: usize>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> [sys::napi_value; N] {
    let mut argc = N;
    let mut argv = [ptr::null_mut(); N];
    // SAFETY: live callback info; `argv` has room for `argc` values.
    unsafe {
        sys::napi_get_cb_info(
            env,
            info,
            &mut argc,
            argv.as_mut_ptr(),
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    argv
}

unsafe fn type_of(env: sys::napi_env, v: sys::napi_value) -> i32 {
    let mut kind = sys::ValueType::napi_undefined;
    // SAFETY: live handles (the caller's contract).
    unsafe { sys::napi_typeof(env, v, &mut kind) };
    kind
}

unsafe fn number(env: sys::napi_env, v: sys::napi_value) -> Option<f64> {
    let mut x = 0f64;
    // SAFETY: live handles; a non-number reports an error status.
    let status = unsafe { sys::napi_get_value_double(env, v, &mut x) };
    (status == sys::Status::napi_ok).then_some(x)
}

unsafe fn uint(env: sys::napi_env, v: sys::napi_value) -> u32 {
    let mut h = u32::MAX;
    // SAFETY: live handles; a non-number leaves `h` at MAX, which nothing has.
    unsafe { sys::napi_get_value_uint32(env, v, &mut h) };
    h
}

/// A string argument, or `None` for anything else.
unsafe fn string(env: sys::napi_env, v: sys::napi_value) -> Option<String> {
    // SAFETY: live handles (the caller's contract).
    unsafe {
        if type_of(env, v) != sys::ValueType::napi_string {
            return None;
        }
        let mut len = 0usize;
        sys::napi_get_value_string_utf8(env, v, ptr::null_mut(), 0, &mut len);
        let mut buf = vec![0u8; len + 1];
        let mut written = 0usize;
        sys::napi_get_value_string_utf8(
            env,
            v,
            buf.as_mut_ptr().cast::<c_char>(),
            buf.len(),
            &mut written,
        );
        buf.truncate(written);
        String::from_utf8(buf).ok()
    }
}

unsafe fn throw(
    env: sys::napi_env,
    kind: error::Kind,
    code: &str,
    message: &str,
) -> sys::napi_value {
    let code = CString::new(code).unwrap_or_default();
    let message = CString::new(message).unwrap_or_default();
    // SAFETY: live env; NUL-terminated strings that outlive the call.
    unsafe {
        match kind {
            error::Kind::Range => sys::napi_throw_range_error(env, code.as_ptr(), message.as_ptr()),
            error::Kind::Type => sys::napi_throw_type_error(env, code.as_ptr(), message.as_ptr()),
            error::Kind::Plain => sys::napi_throw_error(env, code.as_ptr(), message.as_ptr()),
        }
    };
    ptr::null_mut()
}

unsafe fn throw_core(env: sys::napi_env, e: &ratebound::Error) -> sys::napi_value {
    // SAFETY: as `throw`.
    unsafe { throw(env, error::kind(e), &error::code(e), &e.to_string()) }
}

unsafe fn throw_key(env: sys::napi_env, e: KeyError) -> sys::napi_value {
    // SAFETY: as `throw`.
    unsafe {
        match e {
            KeyError::Type => throw(
                env,
                error::Kind::Type,
                "ERR_INVALID_ARG_TYPE",
                "a key must be a string, a whole number or a Uint8Array (Buffer)",
            ),
            KeyError::Range(message) => throw(
                env,
                error::Kind::Range,
                "ERR_RATEBOUND_INVALID_KEY",
                &message,
            ),
        }
    }
}

unsafe fn no_engine(env: sys::napi_env) -> sys::napi_value {
    // SAFETY: as `throw`.
    unsafe {
        throw(
            env,
            error::Kind::Type,
            "ERR_INVALID_THIS",
            "not a live ratebound Redis engine",
        )
    }
}

unsafe fn no_call(env: sys::napi_env, id: u32) -> sys::napi_value {
    // SAFETY: as `throw`.
    unsafe {
        throw(
            env,
            error::Kind::Type,
            "ERR_INVALID_ARG_VALUE",
            &format!("no Redis call {id} in flight"),
        )
    }
}

unsafe fn undefined(env: sys::napi_env) -> sys::napi_value {
    let mut out = ptr::null_mut();
    // SAFETY: live env.
    unsafe { sys::napi_get_undefined(env, &mut out) };
    out
}

unsafe fn null(env: sys::napi_env) -> sys::napi_value {
    let mut out = ptr::null_mut();
    // SAFETY: live env.
    unsafe { sys::napi_get_null(env, &mut out) };
    out
}

unsafe fn int(env: sys::napi_env, i: i32) -> sys::napi_value {
    let mut out = ptr::null_mut();
    // SAFETY: live env.
    unsafe { sys::napi_create_int32(env, i, &mut out) };
    out
}

/// `bytes` as a JavaScript string when they are UTF-8 (what the clients
/// write in one piece), else as a `Buffer`.
unsafe fn bytes_value(env: sys::napi_env, bytes: &[u8]) -> sys::napi_value {
    let mut out = ptr::null_mut();
    // SAFETY: live env; `bytes` outlives the calls, which copy it.
    unsafe {
        if std::str::from_utf8(bytes).is_ok() {
            sys::napi_create_string_utf8(
                env,
                bytes.as_ptr().cast::<c_char>(),
                bytes.len() as isize,
                &mut out,
            );
        } else {
            let mut data = ptr::null_mut::<c_void>();
            sys::napi_create_buffer_copy(
                env,
                bytes.len(),
                bytes.as_ptr().cast::<c_void>(),
                &mut data,
                &mut out,
            );
        }
    }
    out
}

// -------------------------------------------------------- the shared array

fn scratch() -> *mut f64 {
    SCRATCH.with(Cell::get)
}

/// Writes `values` at `at` in the shared array.
fn put(at: usize, values: &[f64]) {
    let p = scratch();
    if !p.is_null() && at + values.len() <= LEN {
        // SAFETY: `p` points at the data of the Float64Array of LEN
        // elements made by `bind_redis_path` in this thread, kept alive by
        // a strong reference and never detached; the range is within it.
        unsafe { ptr::copy_nonoverlapping(values.as_ptr(), p.add(at), values.len()) };
    }
}

/// `len` numbers of the shared array from `at` (as many as there are).
fn read(at: usize, len: usize) -> &'static [f64] {
    let p = scratch();
    if p.is_null() || at >= LEN {
        return &[];
    }
    let len = len.min(LEN - at);
    // SAFETY: as in `put`. No JavaScript runs while a callback reads it.
    unsafe { std::slice::from_raw_parts(p.add(at), len) }
}

fn decision(d: &RedisDecision) -> [f64; STRIDE] {
    let inner = d.decision();
    [
        f64::from(u8::from(inner.is_allowed())),
        inner.limit() as f64,
        inner.remaining() as f64,
        inner.retry_after_nanos() as f64 / 1e9,
        inner.reset_after_nanos() as f64 / 1e9,
        source_code(d.source()),
    ]
}

/// A reservation's answer; `kept`: its call waits for `redisKeep`.
fn reserved(r: &Reserved, kept: bool) -> [f64; STRIDE] {
    match *r {
        Reserved::Granted { wait, source, .. } => [
            1.0,
            wait.as_secs_f64(),
            source_code(source),
            f64::from(u8::from(kept)),
            0.0,
            0.0,
        ],
        Reserved::Refused { wait, source } | Reserved::Retry { wait, source } => {
            [0.0, wait.as_secs_f64(), source_code(source), 0.0, 0.0, 0.0]
        }
    }
}

/// Finishes `call` with `outcome`: its answer, and whether the call must
/// be kept (a reservation granted ahead of time: its cancel gives back).
fn finish(engine: &Engine, call: &Call, outcome: CallOutcome<'_>) -> ([f64; STRIDE], bool) {
    match call.kind {
        CallKind::Reserve { .. } => {
            let r = engine.finish_reserve(call, outcome);
            let kept = matches!(r, Reserved::Granted { wait, .. } if wait > Duration::ZERO);
            (reserved(&r, kept), kept)
        }
        _ => (decision(&engine.finish(call, outcome)), false),
    }
}

/// Publishes a begun call: its number, template, class and slot; the key
/// to send as the return value.
unsafe fn publish_call(
    env: sys::napi_env,
    entry: &mut Entry,
    call: Call,
    explicit: bool,
) -> sys::napi_value {
    // An explicit time is a template of its own each time: not kept.
    let template = if explicit {
        -1.0
    } else {
        entry.template(&call)
    };
    let class = entry.class(&call);
    let slot = if entry.slots {
        f64::from(hash_slot(&call.key))
    } else {
        0.0
    };
    // SAFETY: live env (the caller's contract).
    let key = unsafe { bytes_value(env, &call.key) };
    let id = CALLS.with(|c| c.borrow_mut().insert(call));
    put(0, &[1.0, f64::from(id), template, class, slot]);
    key
}

/// What `begin`'s arguments ask: `n`, the scope, the explicit time.
struct Asked {
    n: u64,
    scope: Option<String>,
    at: Option<u64>,
}

/// Reads `n`, `scope` and `atUs` (undefined: the defaults).
unsafe fn asked(
    env: sys::napi_env,
    n: sys::napi_value,
    scope: sys::napi_value,
    at: sys::napi_value,
) -> std::result::Result<Asked, sys::napi_value> {
    // SAFETY: live handles (the caller's contract).
    unsafe {
        let n = match number(env, n) {
            Some(x) => any::count(Some(x)),
            None if type_of(env, n) == sys::ValueType::napi_undefined => any::count(None),
            None => any::count(Some(f64::NAN)),
        };
        let n = n.map_err(|e| throw_core(env, &e))?;
        let scope = match type_of(env, scope) {
            sys::ValueType::napi_undefined | sys::ValueType::napi_null => None,
            _ => match string(env, scope) {
                Some(s) => Some(s),
                None => {
                    return Err(throw(
                        env,
                        error::Kind::Type,
                        "ERR_INVALID_ARG_TYPE",
                        "scope must be a string",
                    ));
                }
            },
        };
        let at = match type_of(env, at) {
            sys::ValueType::napi_undefined | sys::ValueType::napi_null => None,
            _ => {
                let x = number(env, at).unwrap_or(f64::NAN);
                Some(any::whole("nowUs", x, 0).map_err(|e| throw_core(env, &e))?)
            }
        };
        Ok(Asked { n, scope, at })
    }
}

/// `begin(handle, key, n, scope, atUs) -> key | undefined`: a check's first
/// step. A call to run: `[0] = 1`, its number, template, class and slot
/// in the shared array, the Redis key (a string, or a `Buffer` when not
/// UTF-8) returned. Answered already (a lease, an open breaker): `[0] = 0`
/// and the answer at `ANSWER`.
unsafe extern "C" fn raw_begin(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: called by N-API with live handles.
    unsafe {
        let [h, key, n, scope, at] = args::<5>(env, info);
        let h = uint(env, h);
        let asked = match asked(env, n, scope, at) {
            Ok(a) => a,
            Err(thrown) => return thrown,
        };
        let engine = ENGINES.with(|s| s.borrow().get(h).map(|e| e.engine.clone()));
        let Some(engine) = engine else {
            return no_engine(env);
        };
        let scope = asked.scope.as_deref();
        let begun = with_key(env, key, |k| match k {
            Key::Text(s) => engine.begin_in(scope, s.as_bytes(), asked.n),
            Key::Bytes(b) => engine.begin_in(scope, b, asked.n),
            Key::Int(i) => engine.begin_in(scope, i.to_string().as_bytes(), asked.n),
        });
        match begun {
            Err(e) => throw_key(env, e),
            Ok(Err(e)) => throw_core(env, &e),
            Ok(Ok(Begin::Done(d))) => {
                put(0, &[0.0]);
                put(ANSWER, &decision(&d));
                undefined(env)
            }
            Ok(Ok(Begin::Call(call))) => {
                let call = match asked.at {
                    Some(at) => call.at(at),
                    None => call,
                };
                ENGINES.with(|s| match s.borrow_mut().get_mut(h) {
                    Some(entry) => publish_call(env, entry, call, asked.at.is_some()),
                    None => no_engine(env),
                })
            }
        }
    }
}

/// `beginReserve(handle, key, n, maxWait, scope) -> key | undefined`: a
/// reservation's first step, as `begin` (an answer at `ANSWER` in the
/// reservation's layout).
unsafe extern "C" fn raw_begin_reserve(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: called by N-API with live handles.
    unsafe {
        let [h, key, n, max_wait, scope] = args::<5>(env, info);
        let h = uint(env, h);
        let nothing = undefined(env);
        let asked = match asked(env, n, scope, nothing) {
            Ok(a) => a,
            Err(thrown) => return thrown,
        };
        let max_wait = match type_of(env, max_wait) {
            sys::ValueType::napi_undefined | sys::ValueType::napi_null => Duration::MAX,
            _ => match any::seconds("maxWait", number(env, max_wait).unwrap_or(f64::NAN)) {
                Ok(d) => d,
                Err(e) => return throw_core(env, &e),
            },
        };
        let engine = ENGINES.with(|s| s.borrow().get(h).map(|e| e.engine.clone()));
        let Some(engine) = engine else {
            return no_engine(env);
        };
        let scope = asked.scope.as_deref();
        let begun = with_key(env, key, |k| match k {
            Key::Text(s) => engine.begin_reserve(scope, s.as_bytes(), asked.n, max_wait),
            Key::Bytes(b) => engine.begin_reserve(scope, b, asked.n, max_wait),
            Key::Int(i) => engine.begin_reserve(scope, i.to_string().as_bytes(), asked.n, max_wait),
        });
        match begun {
            Err(e) => throw_key(env, e),
            Ok(Err(e)) => throw_core(env, &e),
            Ok(Ok(ReserveBegin::Done(r))) => {
                put(0, &[0.0]);
                put(ANSWER, &reserved(&r, false));
                undefined(env)
            }
            Ok(Ok(ReserveBegin::Call(call))) => ENGINES.with(|s| match s.borrow_mut().get_mut(h) {
                Some(entry) => publish_call(env, entry, call, false),
                None => no_engine(env),
            }),
        }
    }
}

/// What became of a call, as `finish` is told: 0 a reply (`len` numbers
/// at `REPLY`), 1 no reply within the deadline, 2 an error (`error`'s
/// text), anything else a reply that is no list of numbers.
unsafe fn outcome_of<R>(
    env: sys::napi_env,
    how: sys::napi_value,
    len: sys::napi_value,
    text: sys::napi_value,
    f: impl FnOnce(CallOutcome<'_>) -> R,
) -> R {
    // SAFETY: live handles (the caller's contract).
    unsafe {
        match uint(env, how) {
            0 => {
                let mut ints = Vec::new();
                let values = read(REPLY, uint(env, len) as usize);
                f(CallOutcome::of_numbers(values, &mut ints))
            }
            1 => f(CallOutcome::Timeout),
            2 => {
                let text = string(env, text).unwrap_or_else(|| "error".to_string());
                f(CallOutcome::Failed(&text))
            }
            _ => f(CallOutcome::Malformed),
        }
    }
}

/// `finish(handle, id, how, len, error) -> 1 | 0`: what became of call
/// `id` (see `outcome_of`); its answer at `ANSWER` (a check's, or a
/// reservation's); 1 if it admitted (or granted). The call is forgotten
/// unless the answer says it is kept.
unsafe extern "C" fn raw_finish(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: called by N-API with live handles.
    unsafe {
        let [h, id, how, len, text] = args::<5>(env, info);
        let h = uint(env, h);
        let id = uint(env, id);
        let engine = ENGINES.with(|s| s.borrow().get(h).map(|e| e.engine.clone()));
        let Some(engine) = engine else {
            return no_engine(env);
        };
        let Some(call) = take_call(id) else {
            return no_call(env, id);
        };
        let (answer, kept) = outcome_of(env, how, len, text, |o| finish(&engine, &call, o));
        if kept {
            CALLS.with(|c| c.borrow_mut().restore(id, call));
        }
        put(ANSWER, &answer);
        int(env, i32::from(answer[0] == 1.0))
    }
}

/// The calls of a batch: the numbers at `IDS` (`count` of them; -1 for a
/// member answered already, left out).
fn members(count: usize) -> Vec<Option<u32>> {
    read(IDS, count.min(BatchCall::MAX))
        .iter()
        .map(|&x| (x >= 0.0 && x.fract() == 0.0 && x < f64::from(u32::MAX)).then_some(x as u32))
        .collect()
}

/// `batch(handle, count) -> [key1, …, keyN, arg1, …] | null`: the calls
/// numbered at `IDS` as one script run ([`BatchCall::of`]): the keys
/// then the arguments of `EVALSHA <batchSha> N …`; null when they do not
/// join (send them one by one).
unsafe extern "C" fn raw_batch(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: called by N-API with live handles.
    unsafe {
        let [_h, count] = args::<2>(env, info);
        let ids = members(uint(env, count) as usize);
        let batch = CALLS.with(|c| {
            let c = c.borrow();
            let calls: Option<Vec<&Call>> = ids.iter().map(|id| c.get((*id)?)).collect();
            BatchCall::of(&calls?)
        });
        let Some(batch) = batch else {
            return null(env);
        };
        let mut array = ptr::null_mut();
        sys::napi_create_array_with_length(env, batch.keys.len() + batch.args.len(), &mut array);
        let mut i = 0u32;
        for k in &batch.keys {
            sys::napi_set_element(env, array, i, bytes_value(env, k));
            i += 1;
        }
        for a in &batch.args {
            sys::napi_set_element(env, array, i, bytes_value(env, a.as_bytes()));
            i += 1;
        }
        array
    }
}

/// `finishBatch(handle, count, how, len, error) -> count`: what became of
/// the batch of the calls numbered at `IDS` (see `outcome_of`; a reply of
/// 7 numbers a member, in order): member `i`'s answer at `OUT + i ×
/// STRIDE`. A reply of another length fails every member.
unsafe extern "C" fn raw_finish_batch(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: called by N-API with live handles.
    unsafe {
        let [h, count, how, len, text] = args::<5>(env, info);
        let h = uint(env, h);
        let ids = members(uint(env, count) as usize);
        let engine = ENGINES.with(|s| s.borrow().get(h).map(|e| e.engine.clone()));
        let Some(engine) = engine else {
            return no_engine(env);
        };
        let calls: Vec<Option<(u32, Call)>> = ids
            .iter()
            .map(|id| id.and_then(|id| Some((id, take_call(id)?))))
            .collect();
        let answers = outcome_of(env, how, len, text, |o| {
            let parts: Vec<CallOutcome<'_>> = match o {
                CallOutcome::Reply(r) => match BatchCall::replies(r, ids.len()) {
                    Some(chunks) => chunks.map(CallOutcome::Reply).collect(),
                    None => vec![CallOutcome::Malformed; ids.len()],
                },
                other => vec![other; ids.len()],
            };
            calls
                .iter()
                .zip(parts)
                .map(|(c, o)| c.as_ref().map(|(id, call)| (*id, finish(&engine, call, o))))
                .collect::<Vec<_>>()
        });
        for (i, (a, c)) in answers.into_iter().zip(calls).enumerate() {
            let (Some((id, (answer, kept))), Some((_, call))) = (a, c) else {
                continue;
            };
            if kept {
                CALLS.with(|c| c.borrow_mut().restore(id, call));
            }
            put(OUT + i * STRIDE, &answer);
        }
        int(env, ids.len() as i32)
    }
}

/// The shared array of this thread and the raw entry points (internal):
/// `{ scratch, begin, beginReserve, finish, batch, finishBatch, sources,
/// answerAt, idsAt, replyAt, outAt, stride, maxBatch }`. Every copy of
/// `redis.js` loaded in one thread gets the same array.
#[napi(skip_typescript)]
pub fn bind_redis_path(env: &Env) -> Result<Object<'_>> {
    let raw_env = env.raw();
    let mut exports = Object::new(env)?;
    // SAFETY: `raw_env` is the live env of this call. The array is made
    // here, once per env and thread, and a strong reference keeps it (and
    // so its data pointer: the buffer is never handed out for transfer)
    // alive for the life of the env.
    unsafe {
        let (bound_env, reference) = BOUND.with(Cell::get);
        let mut array = ptr::null_mut();
        if bound_env == raw_env && !reference.is_null() {
            sys::napi_get_reference_value(raw_env, reference, &mut array);
        }
        if array.is_null() {
            let mut data = ptr::null_mut::<c_void>();
            let mut buffer = ptr::null_mut();
            sys::napi_create_arraybuffer(
                raw_env,
                LEN * std::mem::size_of::<f64>(),
                &mut data,
                &mut buffer,
            );
            sys::napi_create_typedarray(
                raw_env,
                sys::TypedarrayType::float64_array,
                LEN,
                buffer,
                0,
                &mut array,
            );
            if array.is_null() || data.is_null() {
                return Err(error::invalid_type(env, "cannot create the shared array"));
            }
            let mut reference = ptr::null_mut();
            sys::napi_create_reference(raw_env, array, 1, &mut reference);
            BOUND.with(|b| b.set((raw_env, reference)));
            SCRATCH.with(|s| s.set(data.cast::<f64>()));
        }
        sys::napi_set_named_property(raw_env, exports.raw(), c"scratch".as_ptr(), array);
        let fns: [(&std::ffi::CStr, sys::napi_callback); 5] = [
            (c"begin", Some(raw_begin)),
            (c"beginReserve", Some(raw_begin_reserve)),
            (c"finish", Some(raw_finish)),
            (c"batch", Some(raw_batch)),
            (c"finishBatch", Some(raw_finish_batch)),
        ];
        for (name, cb) in fns {
            let mut f = ptr::null_mut();
            sys::napi_create_function(
                raw_env,
                name.as_ptr(),
                name.count_bytes() as isize,
                cb,
                ptr::null_mut(),
                &mut f,
            );
            sys::napi_set_named_property(raw_env, exports.raw(), name.as_ptr(), f);
        }
    }
    let sources: Vec<&str> = SOURCES.iter().map(|s| s.as_str()).collect();
    exports.set("sources", sources)?;
    exports.set("answerAt", ANSWER as u32)?;
    exports.set("idsAt", IDS as u32)?;
    exports.set("replyAt", REPLY as u32)?;
    exports.set("outAt", OUT as u32)?;
    exports.set("stride", STRIDE as u32)?;
    exports.set("maxBatch", BatchCall::MAX as u32)?;
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

/// The arguments of begun call `id` (internal; for a call without a
/// template): `[sha, text, args, batchSha, batchText]` as `redisTemplate`.
#[napi(skip_typescript)]
pub fn redis_call_args(env: Env, id: u32) -> Result<(String, String, Vec<String>, String, String)> {
    let found = CALLS.with(|c| {
        c.borrow().get(id).map(|c| {
            let batch = c.script.batch();
            (
                c.script.sha().to_string(),
                c.script.text.to_string(),
                c.args.clone(),
                batch.sha().to_string(),
                batch.text.to_string(),
            )
        })
    });
    found.ok_or_else(|| error::invalid_type(&env, &format!("no Redis call {id} in flight")))
}

/// Takes kept call `id` (a reservation granted ahead of time) out of the
/// table as a `RedisCall`, for its cancel (internal).
#[napi(skip_typescript)]
pub fn redis_keep(env: Env, id: u32) -> Result<RedisCall> {
    take_call(id)
        .map(|call| RedisCall { call })
        .ok_or_else(|| error::invalid_type(&env, &format!("no Redis call {id} kept")))
}

/// Makes engine `handle`'s `begin` give each key's hash slot (internal;
/// for a cluster client).
#[napi(skip_typescript)]
pub fn redis_use_slots(handle: u32) -> bool {
    use_slots(handle)
}
