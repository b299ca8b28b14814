//! When a Redis driver's calls go out and when they are late, for
//! `redis_flight.js`: the engine's [`Turns`] (ratebound-redis'
//! `plan::turns`, the rule for an event loop), kept in the engine's entry
//! of the native table. JavaScript holds its callers by ticket, the
//! sockets and the one timer, and does what `Turns` hands back.
//!
//! Every step is a raw callback (in `bindRedisPath`: `enter`, `carry`,
//! `settle`, `landed`, `stamp`, `flush`, `sweep`). `flush` and `sweep` write their
//! [`Out`]s at `PLAN` in the shared array — `[code, ticket]` each, a batch
//! `[MANY, n, ticket × n]` — and return how many numbers they wrote (a
//! plan longer than the room there, a flood of calls unsent at once, comes
//! back as an array instead); what they ask for next is at `ASKS`, the
//! sweep's next look at `TIMER` (ms; -1: none).

#![allow(unsafe_code)]

use std::time::Duration;

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;
use ratebound_redis::BatchCall;
use ratebound_redis::plan::{Asks, Entry, Go, Out, TurnTuning, Turns};

use super::ffi::{
    ASKS, IDS, PLAN, PLAN_LEN, TICKET, TIMER, double, int, no_engine, number, put, read, uint,
};
use super::table::ENGINES;
use crate::error;
use crate::fast::raw_entries;
use crate::limiters::from_ms;

/// The codes `redis_flight.js` reads [`Out`]s by.
pub const OUT_ONE: f64 = 0.0;
pub const OUT_MANY: f64 = 1.0;
pub const OUT_UNSENT: f64 = 2.0;
pub const OUT_TIMED_OUT: f64 = 3.0;
pub const OUT_LATE: f64 = 4.0;
/// Where `enter` puts a call: its return value's low two bits (the asks
/// above them).
pub const GO_NOW: i32 = 0;
pub const GO_QUEUED: i32 = 1;
pub const GO_UNSENT: i32 = 2;

/// The names `redis_flight.js` reads the codes by (in `bindRedisPath`).
pub fn codes() -> std::collections::HashMap<&'static str, f64> {
    [
        ("one", OUT_ONE),
        ("many", OUT_MANY),
        ("unsent", OUT_UNSENT),
        ("timedOut", OUT_TIMED_OUT),
        ("late", OUT_LATE),
        ("goNow", f64::from(GO_NOW)),
        ("goQueued", f64::from(GO_QUEUED)),
        ("goUnsent", f64::from(GO_UNSENT)),
        ("askFlush", f64::from(Asks::FLUSH)),
        ("askStamp", f64::from(Asks::STAMP)),
        ("askAbort", f64::from(Asks::ABORT)),
        ("ticketAt", TICKET as f64),
        ("asksAt", ASKS as f64),
        ("timerAt", TIMER as f64),
        ("planAt", PLAN as f64),
    ]
    .into_iter()
    .collect()
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The `(handle, nowMs)` a step begins with, read.
unsafe fn handle_at(
    env: sys::napi_env,
    h: sys::napi_value,
    now: sys::napi_value,
) -> (u32, Duration) {
    // SAFETY: live handles (the caller's contract).
    unsafe { (uint(env, h), from_ms(number(env, now).unwrap_or(0.0))) }
}

/// Runs `f` on engine `h`'s turns; `None` when the engine or its turns
/// are gone.
fn with_turns<T>(h: u32, f: impl FnOnce(&mut Turns) -> T) -> Option<T> {
    ENGINES.with(|s| s.borrow_mut().get_mut(h)?.turns.as_mut().map(f))
}

fn gone(env: &Env) -> Error {
    error::throw_as(
        env,
        error::Kind::Type,
        "ERR_INVALID_THIS",
        "not a live ratebound Redis engine",
    )
}

/// Opens the turns of engine `handle` (internal): its calls have a
/// deadline of `deadline_ms`, batched or not.
#[napi(skip_typescript)]
pub fn redis_turns_open(env: Env, handle: u32, deadline_ms: f64, batching: bool) -> Result<()> {
    let turns = Turns::new(TurnTuning::EVENT_LOOP, from_ms(deadline_ms), batching);
    ENGINES.with(|s| match s.borrow_mut().get_mut(handle) {
        Some(e) => {
            e.turns = Some(turns);
            Ok(())
        }
        None => Err(gone(&env)),
    })
}

fn push_outs(out: &[Out], to: &mut Vec<f64>) {
    for o in out {
        match o {
            Out::One(t) => to.extend([OUT_ONE, f64::from(*t)]),
            Out::Many(ts) => {
                to.extend([OUT_MANY, ts.len() as f64]);
                to.extend(ts.iter().map(|&t| f64::from(t)));
            }
            Out::Unsent(t) => to.extend([OUT_UNSENT, f64::from(*t)]),
            Out::TimedOut(t) => to.extend([OUT_TIMED_OUT, f64::from(*t)]),
            Out::Late(t) => to.extend([OUT_LATE, f64::from(*t)]),
        }
    }
}

/// Engine `handle`'s turns' counters (internal): `[calls, timeouts,
/// batches, batched, queued, unsent]`.
#[napi(skip_typescript)]
pub fn redis_turns_stats(env: Env, handle: u32) -> Result<Vec<f64>> {
    let s = with_turns(handle, |t| t.stats()).ok_or_else(|| gone(&env))?;
    Ok([
        s.calls, s.timeouts, s.batches, s.batched, s.queued, s.unsent,
    ]
    .map(|n| n as f64)
    .to_vec())
}

/// Whether a client's error text says the server has not got the script
/// (internal): send the `EVAL` once, within the same deadline.
#[napi(skip_typescript)]
pub fn redis_is_no_script(text: String) -> bool {
    ratebound_redis::plan::Reply::is_noscript(&text)
}

/// Hands `out` to JavaScript: at `PLAN` (their count returned), or as an
/// array when they do not fit there.
unsafe fn hand(env: sys::napi_env, out: &[Out]) -> sys::napi_value {
    let mut flat = Vec::with_capacity(out.len() * 2);
    push_outs(out, &mut flat);
    // SAFETY: live env (the caller's contract).
    unsafe {
        if flat.len() <= PLAN_LEN {
            put(PLAN, &flat);
            return int(env, flat.len() as i32);
        }
        let mut array = std::ptr::null_mut();
        sys::napi_create_array_with_length(env, flat.len(), &mut array);
        for (i, x) in flat.iter().enumerate() {
            sys::napi_set_element(env, array, i as u32, double(env, *x));
        }
        array
    }
}

raw_entries! {
    /// `enter(handle, cls, slot, keep, nowMs) -> go | asks << 2`: a call
    /// begins (`cls` -1: it never joins; `keep`: never unsent); its ticket at
    /// `TICKET` in the shared array.
    fn raw_enter(env, [h, cls, slot, keep, now]) as c"enter" {
        let (h, now) = handle_at(env, h, now);
        let cls = number(env, cls).unwrap_or(-1.0);
        let slot = number(env, slot).unwrap_or(0.0);
        let keep = number(env, keep).unwrap_or(0.0) != 0.0;
        let join = (cls >= 0.0).then_some((cls as u32, slot as u16));
        match with_turns(h, |t| t.enter(Entry { join, keep }, now)) {
            Some((ticket, go, asks)) => {
                put(TICKET, &[f64::from(ticket)]);
                let go = match go {
                    Go::Now => GO_NOW,
                    Go::Queued => GO_QUEUED,
                    Go::Unsent => GO_UNSENT,
                };
                int(env, go | i32::from(asks.0) << 2)
            }
            None => no_engine(env),
        }
    }

    /// `carry(handle, n, nowMs) -> 0 | 1`: the sends of the `n` calls whose
    /// tickets are at `IDS` carry the current abort signal; 1: a new one
    /// opens first (the driver makes it).
    fn raw_carry(env, [h, n, now]) as c"carry" {
        let (h, now) = handle_at(env, h, now);
        let n = uint(env, n) as usize;
        let tickets: Vec<u32> = read(IDS, n.min(BatchCall::MAX)).iter().map(|&t| t as u32).collect();
        match with_turns(h, |t| t.carry(&tickets, now)) {
            Some(open) => int(env, i32::from(open)),
            None => no_engine(env),
        }
    }

    /// `settle(handle, ticket) -> asks`: the call's caller has its answer
    /// (`askAbort`: abort the signal its send carried).
    fn raw_settle(env, [h, t]) as c"settle" {
        let (h, t) = (uint(env, h), uint(env, t));
        let asks = with_turns(h, |turns| turns.settle(t)).unwrap_or_default();
        int(env, i32::from(asks.0))
    }

    /// `landed(handle, replied) -> asks`: a send is over, with a reply
    /// (`replied` 1) or a failure.
    fn raw_landed(env, [h, replied]) as c"landed" {
        let h = uint(env, h);
        let replied = number(env, replied).unwrap_or(0.0) != 0.0;
        let asks = with_turns(h, |t| {
            if replied {
                t.replied()
            } else {
                t.failed();
                Asks::default()
            }
        })
        .unwrap_or_default();
        int(env, i32::from(asks.0))
    }

    /// `flush(handle, nowMs) -> count | array`: the end of a turn — what goes
    /// out (see the module's docs); the asks at `ASKS`.
    fn raw_flush(env, [h, now]) as c"flush" {
        let (h, now) = handle_at(env, h, now);
        match with_turns(h, |t| t.flush(now)) {
            Some((out, asks)) => {
                put(ASKS, &[f64::from(asks.0)]);
                hand(env, &out)
            }
            None => no_engine(env),
        }
    }

    /// `stamp(handle, nowMs) -> ms`: the client wrote this turn's commands;
    /// the timer to arm (ms), or -1.
    fn raw_stamp(env, [h, now]) as c"stamp" {
        let (h, now) = handle_at(env, h, now);
        match with_turns(h, |t| t.stamp(now)) {
            Some(timer) => double(env, timer.map_or(-1.0, millis)),
            None => no_engine(env),
        }
    }

    /// `sweep(handle, nowMs, misconfigured) -> count | array`: the timer
    /// fired — the calls late or timed out; the next look at `TIMER`, the
    /// asks at `ASKS`.
    fn raw_sweep(env, [h, now, bad]) as c"sweep" {
        let (h, now) = handle_at(env, h, now);
        let bad = number(env, bad).unwrap_or(0.0) != 0.0;
        match with_turns(h, |t| t.sweep(now, bad)) {
            Some((out, timer, asks)) => {
                put(ASKS, &[f64::from(asks.0)]);
                put(TIMER, &[timer.map_or(-1.0, millis)]);
                hand(env, &out)
            }
            None => no_engine(env),
        }
    }
}
