//! What became of the Redis hot path's calls (`raw`): the raw `finish` and
//! `finishBatch` callbacks read a call's outcome (a reply's numbers in the
//! shared `Float64Array`, a timeout, an error's text, never sent), hand it
//! to the engine and write the answer back there — a check's decision or a
//! reservation's answer, `STRIDE` numbers in the layouts `raw` describes.

#![allow(unsafe_code)]

use std::time::Duration;

use napi::sys;
use ratebound_redis::{BatchCall, Call, CallKind, CallOutcome, Engine, RedisDecision, Reserved};

use super::ffi::{
    ANSWER, IDS, OUT, REPLY, STRIDE, decision_slot, int, no_call, no_engine, put, read,
    reserved_slot, string, uint,
};
use super::table::{ACQUISITIONS, CALLS, Flight, engine, source_code, take_call};
use crate::fast::raw_entries;

pub(super) fn decision(d: &RedisDecision) -> [f64; STRIDE] {
    let inner = d.decision();
    let mut a = [0.0; STRIDE];
    a[decision_slot::ALLOWED] = f64::from(u8::from(inner.is_allowed()));
    a[decision_slot::LIMIT] = inner.limit() as f64;
    a[decision_slot::REMAINING] = inner.remaining() as f64;
    a[decision_slot::RETRY_AFTER] = inner.retry_after_nanos() as f64 / 1e9;
    a[decision_slot::RESET_AFTER] = inner.reset_after_nanos() as f64 / 1e9;
    a[decision_slot::SOURCE] = source_code(d.source());
    a
}

/// A reservation's answer; `kept`: its call waits for `redisKeep`.
pub(super) fn reserved(r: &Reserved, kept: bool) -> [f64; STRIDE] {
    let mut a = [0.0; STRIDE];
    match *r {
        Reserved::Granted { wait, source, .. } => {
            a[reserved_slot::GRANTED] = 1.0;
            a[reserved_slot::WAIT] = wait.as_secs_f64();
            a[reserved_slot::SOURCE] = source_code(source);
            a[reserved_slot::KEPT] = f64::from(u8::from(kept));
        }
        Reserved::Refused { wait, source } | Reserved::Retry { wait, source } => {
            a[reserved_slot::WAIT] = wait.as_secs_f64();
            a[reserved_slot::SOURCE] = source_code(source);
        }
    }
    a
}

/// Finishes the call `flight` with `outcome`: its answer, and the call to
/// keep in its place, if any (a reservation granted ahead of time: the
/// call that gives it back, for its cancel). A wait's call goes to its
/// acquisition (no answer: the wait steps again); a call giving tokens
/// back needs no finish.
fn finish(
    engine: &Engine,
    flight: &Flight,
    outcome: CallOutcome<'_>,
) -> ([f64; STRIDE], Option<Call>) {
    let call = &flight.call;
    if let Some(a) = flight.acquisition {
        ACQUISITIONS.with(|s| {
            if let Some(a) = s.borrow_mut().get_mut(a) {
                engine.acquire_reply(a, outcome);
            }
        });
        return ([0.0; STRIDE], None);
    }
    match call.kind {
        CallKind::Return => ([0.0; STRIDE], None),
        CallKind::Reserve { .. } => {
            let r = engine.finish_reserve(call, outcome);
            let back = match r {
                Reserved::Granted {
                    wait,
                    end_us: Some(end_us),
                    ..
                } if wait > Duration::ZERO => Some(engine.give_back(call, end_us)),
                _ => None,
            };
            (reserved(&r, back.is_some()), back)
        }
        _ => (decision(&engine.finish(call, outcome)), None),
    }
}

/// What became of a call, as `finish` is told: 0 a reply (`len` numbers
/// at `REPLY`), 1 no reply within the deadline, 2 an error (`error`'s
/// text), 4 never sent (the client's own overload: the engine answers
/// without the fail policy or the breaker), anything else a reply that is
/// no list of numbers.
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
            4 => f(CallOutcome::Unsent),
            _ => f(CallOutcome::Malformed),
        }
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

raw_entries! {
    /// `finish(handle, id, how, len, error) -> 0..3`: what became of call
    /// `id` (see `outcome_of`); its answer at `ANSWER` (a check's, or a
    /// reservation's); bit 0 set if it admitted (or granted), bit 1 if the
    /// engine has notices to take (`takeNotices`). The call is forgotten
    /// unless the answer says it is kept.
    fn raw_finish(env, [h, id, how, len, text]) as c"finish" {
        let h = uint(env, h);
        let id = uint(env, id);
        let Some(engine) = engine(h) else {
            return no_engine(env);
        };
        let Some(flight) = take_call(id) else {
            return no_call(env, id);
        };
        let (answer, kept) = outcome_of(env, how, len, text, |o| finish(&engine, &flight, o));
        if let Some(back) = kept {
            let flight = Flight {
                call: back,
                acquisition: None,
            };
            CALLS.with(|c| c.borrow_mut().restore(id, flight));
        }
        put(ANSWER, &answer);
        int(
            env,
            i32::from(answer[0] == 1.0) | (i32::from(engine.has_notices()) << 1),
        )
    }

    /// `finishBatch(handle, count, how, len, error) -> 0 | 2`: what became of
    /// the batch of the calls numbered at `IDS` (see `outcome_of`; a reply of
    /// `REPLY_LEN` numbers a member, in order): member `i`'s answer at `OUT + i ×
    /// STRIDE`. A reply of another length fails every member. 2 if the engine
    /// has notices to take (`takeNotices`).
    fn raw_finish_batch(env, [h, count, how, len, text]) as c"finishBatch" {
        let h = uint(env, h);
        let ids = members(uint(env, count) as usize);
        let Some(engine) = engine(h) else {
            return no_engine(env);
        };
        let flights: Vec<Option<(u32, Flight)>> = ids
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
            flights
                .iter()
                .zip(parts)
                .map(|(f, o)| f.as_ref().map(|(_, flight)| finish(&engine, flight, o)))
                .collect::<Vec<_>>()
        });
        for (i, (a, f)) in answers.into_iter().zip(flights).enumerate() {
            let (Some((answer, kept)), Some((id, _))) = (a, f) else {
                continue;
            };
            if let Some(back) = kept {
                let flight = Flight {
                    call: back,
                    acquisition: None,
                };
                CALLS.with(|c| c.borrow_mut().restore(id, flight));
            }
            put(OUT + i * STRIDE, &answer);
        }
        int(env, i32::from(engine.has_notices()) << 1)
    }
}
