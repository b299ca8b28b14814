'use strict'
// The raw native side of the Redis driver (redis_driver.js): the raw
// native calls of src/redis/raw.rs and their shared Float64Array `S`, what
// a call in flight is (Pending), and how a reply goes in and an answer
// comes out of `S`.
//
// The hot path is two raw native calls a check (src/redis/raw.rs): `begin`
// gives the Redis key and writes the call's number and template into the
// shared Float64Array `S` (the script and its arguments: the same for every
// check of one kind, fetched once and kept here), and `finish` reads the
// reply's numbers from `S` and writes the decision there, which becomes the
// decision object here.

// Where the deadlines read the time (ms): the one place, so that a test
// can put the wheel on virtual time (with node:test's mock timers).
const clock = { now: () => performance.now() }

// Called once by redis_driver.js with the addon: the raw entry points, the
// layout of `S`, the codes both sides agree on, and the helpers below.
module.exports = function redisRaw(native) {
  const { redisKeep } = native

  // The raw entry points and their shared array (one per thread).
  const R = native.bindRedisPath()
  const S = R.scratch
  const rawBegin = R.begin
  const rawBeginReserve = R.beginReserve
  const rawAcquire = R.acquire
  const rawAcquireStep = R.acquireStep
  const rawAcquireAbandon = R.acquireAbandon
  const rawAcquireForget = R.acquireForget
  const rawFinish = R.finish
  const rawFinishBatch = R.finishBatch
  const rawEnter = R.enter
  const rawCarry = R.carry
  const rawSettle = R.settle
  const rawLanded = R.landed
  const rawStamp = R.stamp
  const rawFlush = R.flush
  const rawSweep = R.sweep
  // The codes of the turns (src/redis/turns.rs), by name.
  const TURNS = R.turns
  const ANSWER = R.answerAt
  const IDS = R.idsAt
  const REPLY = R.replyAt
  const OUT = R.outAt
  const STRIDE = R.stride
  const MAX_BATCH = R.maxBatch
  const REPLY_ROOM = R.replyLen * MAX_BATCH
  const SOURCES = R.sources
  // Where a step's numbers are in `S` (C_), and an answer's from its start
  // (D_ a check's, V_ a reservation's): the layouts' one definition is
  // src/redis/ffi.rs' call_slot, decision_slot and reserved_slot.
  const { step: C_STEP, id: C_ID, template: C_TEMPLATE, cls: C_CLASS, slot: C_SLOT } = R.callSlots
  const { allowed: D_ALLOWED, limit: D_LIMIT, remaining: D_REMAINING } = R.decisionSlots
  const { retryAfter: D_RETRY_AFTER, resetAfter: D_RESET_AFTER, source: D_SOURCE } = R.decisionSlots
  const { granted: V_GRANTED, wait: V_WAIT, source: V_SOURCE, kept: V_KEPT } = R.reservedSlots
  // What a wait's step gave.
  const [STEP_CALL, STEP_SLEEP, STEP_DONE, STEP_EXCEEDED] = R.steps
  // What became of a call, as `finish` is told.
  const REPLIED = 0
  const TIMED_OUT = 1
  const FAILED = 2
  const MALFORMED = 3
  const UNSENT = 4
  // What a call in flight was begun for.
  const CHECK = 0
  const RESERVE = 1
  const RAW = 2 // a RedisCall of the engine's slower steps: its reply as it came
  const WAIT = 3 // an acquire's call (or its give-back): the answer is the wait's

  // One item of a script's reply as the engine takes it: a number, the
  // clients' bigints and numeric strings as numbers, anything else NaN.
  function replyNumber(v) {
    return typeof v === 'number' ? v : typeof v === 'bigint' || typeof v === 'string' ? Number(v) : NaN
  }

  // The script's reply as the engine takes it: an array of numbers
  // (`replyNumber`); anything else as it came, which the engine counts as
  // a malformed reply (as Python's).
  function integers(reply) {
    if (!Array.isArray(reply)) return reply
    const out = new Array(reply.length)
    for (let i = 0; i < reply.length; i++) out[i] = replyNumber(reply[i])
    return out
  }

  // Writes a reply's numbers at REPLY in `S` by the same rule; their count,
  // or -1 for a reply that is no array (or longer than any script's).
  function putReply(reply) {
    if (!Array.isArray(reply) || reply.length > REPLY_ROOM) return -1
    for (let i = 0; i < reply.length; i++) S[REPLY + i] = replyNumber(reply[i])
    return reply.length
  }

  // The decision the engine wrote at `at` in `S`.
  function decisionAt(at) {
    return {
      allowed: S[at + D_ALLOWED] === 1,
      limit: S[at + D_LIMIT],
      remaining: S[at + D_REMAINING],
      retryAfter: S[at + D_RETRY_AFTER],
      resetAfter: S[at + D_RESET_AFTER],
      source: SOURCES[S[at + D_SOURCE]],
    }
  }

  // A reservation's answer at `at` in `S`: granted or not, the wait (the
  // delay, or the retryAfter of a refusal), the source, and the call that
  // took the tokens when they are due later (for cancel).
  function reservedAt(at, id) {
    return {
      granted: S[at + V_GRANTED] === 1,
      wait: S[at + V_WAIT],
      source: SOURCES[S[at + V_SOURCE]],
      call: S[at + V_KEPT] === 1 ? redisKeep(id) : null,
    }
  }

  // What the caller of `e` is answered, from `at` in `S`: a check's
  // decision, a reservation's answer; nothing for a wait's call (the wait
  // steps again).
  function answerOf(e, at) {
    if (e.kind === CHECK) return decisionAt(at)
    if (e.kind === RESERVE) return reservedAt(at, e.id)
    return undefined
  }

  const TIMEOUT = Object.freeze({ timedOut: true })

  // One call in flight (or queued for a batch): what it was begun for, its
  // number in the native table, the key to send, its template, join class
  // and hash slot, its ticket, and the resolve of the caller's promise.
  class Pending {
    constructor(kind, id, key, template, cls, slot, args) {
      this.kind = kind
      this.id = id
      this.key = key
      // A call without a template: [key, ...its arguments].
      this.args = args
      this.template = template
      this.cls = cls
      this.slot = slot
      // Its ticket with the turns (redis_flight.js) until settled, else -1.
      this.ticket = -1
      this.done = false
      this.evaled = false
      // The AbortController of the signal its send carries (node-redis).
      this.controller = null
      this.resolve = null
      this.reject = null
      // [sha, text, args, batchSha, batchText], once known (a RAW call's
      // first three from the start).
      this.words = null
    }
  }

  // The call `begin` (or a step) just published in `S`, for `kind`: its
  // key, or [key, ...args] when it has no template.
  function begun(kind, r) {
    const template = S[C_TEMPLATE]
    return template < 0
      ? new Pending(kind, S[C_ID], r[0], template, S[C_CLASS], S[C_SLOT], r)
      : new Pending(kind, S[C_ID], r, template, S[C_CLASS], S[C_SLOT], null)
  }

  return {
    S,
    C_STEP,
    rawBegin,
    rawBeginReserve,
    rawAcquire,
    rawAcquireStep,
    rawAcquireAbandon,
    rawAcquireForget,
    rawFinish,
    rawFinishBatch,
    rawEnter,
    rawCarry,
    rawSettle,
    rawLanded,
    rawStamp,
    rawFlush,
    rawSweep,
    TURNS,
    ANSWER,
    IDS,
    OUT,
    STRIDE,
    MAX_BATCH,
    SOURCES,
    STEP_CALL,
    STEP_SLEEP,
    STEP_DONE,
    STEP_EXCEEDED,
    REPLIED,
    TIMED_OUT,
    FAILED,
    MALFORMED,
    UNSENT,
    CHECK,
    RESERVE,
    RAW,
    WAIT,
    integers,
    putReply,
    decisionAt,
    reservedAt,
    answerOf,
    TIMEOUT,
    Pending,
    begun,
  }
}

module.exports.clock = clock
