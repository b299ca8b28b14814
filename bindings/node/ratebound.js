'use strict'
// The npm package's entry point: the generated loader's classes (index.js),
// with the three hot calls swapped for raw N-API entry points, plus what
// needs the event loop: acquire() and the Express/Fastify middleware.
// No limiting logic lives here: every decision is the Rust core's.

const native = loadNative()

// The addon for this platform: the one in this package (linux-x64-gnu in
// the published tarball), a per-platform package (`ratebound-<platform>`),
// or a build from source. Without one, a single message says what to do —
// never a bare "Cannot find module".
function loadNative() {
  try {
    return require('./index.js')
  } catch (e) {
    const platform = `${process.platform}-${process.arch}`
    const err = new Error(
      `ratebound: no native addon for ${platform} could be loaded (${e && e.message ? e.message.split('\n')[0] : e}). ` +
        'This package ships a prebuilt addon for linux-x64-gnu only. To build one for this machine, install Rust ' +
        '(https://rustup.rs, 1.88 or newer) and run, in a clone of the ratebound repository: ' +
        'cd bindings/node && npm install && npm run build — then install that directory (npm install <path>).',
    )
    err.code = 'ERR_RATEBOUND_NO_ADDON'
    err.cause = e
    throw err
  }
}

// The raw entry points, and the array the decision's numbers come back in
// ([limit, remaining, retry ns, reset ns]): one per thread, shared by every
// copy of this module loaded in it.
const fast = native.bindFastPath()
const scratch = fast.scratch
const fastTry = fast.tryAcquire
const fastCheck = fast.check
const fastCheckOne = fast.checkOne
const fastKeyed = fast.keyedCheck

const HANDLE = Symbol('ratebound.handle')

// The class's own `handle` getter checks that `self` is an instance of that
// very class (napi-rs's class check); the number is then cached on the
// instance, so later calls skip the check.
function handleGetter(C) {
  return Object.getOwnPropertyDescriptor(C.prototype, 'handle').get
}
function handleOf(self, getter) {
  const h = getter.call(self)
  self[HANDLE] = h
  return h
}

function decision(allowed) {
  return {
    allowed,
    limit: scratch[0],
    remaining: scratch[1],
    retryAfter: scratch[2] / 1e9,
    resetAfter: scratch[3] / 1e9,
  }
}

// A wait longer than the caller accepts: the core's DeadlineExceeded (its
// message and code, as the native errors and Python's RateLimitExceeded).
class RateLimitExceededError extends Error {
  constructor(retryAfter, maxWait) {
    super(native.deadlineMessage(retryAfter, maxWait ?? undefined))
    this.name = 'RateLimitExceededError'
    this.code = 'ERR_RATEBOUND_DEADLINE_EXCEEDED'
    this.retryAfter = retryAfter
  }
}

function abortError(signal) {
  if (signal.reason !== undefined) return signal.reason
  const e = new Error('the operation was aborted')
  e.name = 'AbortError'
  e.code = 'ABORT_ERR'
  return e
}

// The longest sleep a host timer holds (2^31 - 1 ms): the core's waiter
// never asks for more; a Redis wait's step is asked again after it.
const MAX_SLEEP_MS = 2 ** 31 - 1

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal && signal.aborted) return reject(abortError(signal))
    let timer
    const onAbort = () => {
      clearTimeout(timer)
      reject(abortError(signal))
    }
    if (signal) signal.addEventListener('abort', onAbort, { once: true })
    timer = setTimeout(() => {
      if (signal) signal.removeEventListener('abort', onAbort)
      resolve()
    }, ms)
  })
}

// What a wait does next: the one protocol of every wait, local or in Redis
// (src/limiters/wait.rs' `step`).
const { call: STEP_CALL, sleep: STEP_SLEEP, done: STEP_DONE, exceeded: STEP_EXCEEDED } = native.waitSteps()

// Drives a wait: `step()` gives [CALL, call] (run by `run`, then step
// again), [SLEEP, s], [DONE, x] (resolves with x) or [EXCEEDED, s] (the
// timeout cannot be met: nothing taken). An abort ends it with
// `abandon()` awaited, which gives back what the wait holds.
async function drive(step, abandon, options, run) {
  const signal = options == null ? undefined : options.signal
  if (signal && signal.aborted) throw abortError(signal)
  for (;;) {
    const [kind, value] = step()
    if (kind === STEP_CALL) {
      await run(value)
      continue
    }
    if (kind === STEP_DONE) return value
    if (kind === STEP_EXCEEDED) throw new RateLimitExceededError(value, options == null ? undefined : options.timeout)
    if (kind !== STEP_SLEEP) throw new Error(`ratebound: unknown wait step ${kind}`)
    try {
      await sleep(Math.min(Math.ceil(value * 1000), MAX_SLEEP_MS), signal)
    } catch (e) {
      await abandon()
      throw e
    }
  }
}

function timeoutOf(options) {
  const timeout = options == null || options.timeout == null ? undefined : options.timeout
  numberArg('timeout', timeout, true)
  return timeout
}

// `n` as a wait takes it: a number, or not given.
function numbered(n) {
  numberArg('n', n, true)
  return n
}

function define(proto, name, fn) {
  Object.defineProperty(proto, name, { value: fn, writable: true, configurable: true, enumerable: false })
}

// A number argument of the wrong kind: the documented TypeError with the
// core's code, naming the value (napi's own conversion error, a bare
// `NumberExpected`, names neither). `optional`: undefined and null are
// "not given".
function numberArg(name, v, optional) {
  if (typeof v === 'number' || (optional && v == null)) return
  let shown
  try {
    shown = typeof v === 'string' ? JSON.stringify(v) : String(v)
  } catch {
    shown = typeof v
  }
  const e = new TypeError(`invalid ${name} ${shown}: must be a number`)
  e.code = 'ERR_RATEBOUND_INVALID_NUMBER'
  throw e
}

// The native method `name` of `proto`, its number arguments (`[index,
// name, optional]`) checked first.
function typed(proto, name, args) {
  const f = proto[name]
  if (typeof f !== 'function') return
  define(proto, name, function (...a) {
    for (const [i, label, optional] of args) numberArg(label, a[i], optional)
    return f.apply(this, a)
  })
}

for (const C of [native.TokenBucket, native.SharedTokenBucket, native.LeakyBucket, native.FixedWindow, native.SlidingWindow, native.SlidingLog, native.AllOf]) {
  typed(C.prototype, 'pause', [[0, 'seconds', false]])
  typed(C.prototype, 'reserve', [[0, 'n', true], [1, 'maxWait', true]])
}
for (const C of [native.KeyedLimiter, native.SharedKeyedLimiter]) {
  typed(C.prototype, 'pause', [[1, 'seconds', false]])
  typed(C.prototype, 'reserve', [[1, 'n', true], [2, 'maxWait', true]])
}

// `acquire(n, options)` of a limiter without keys: its own wait for `n`,
// stepped by `drive`; an abort gives back what the wait holds.
async function acquire(n, options) {
  const waiter = this.waiter(numbered(n), timeoutOf(options))
  return drive(
    () => this.waitStep(waiter),
    () => this.abandonWait(waiter),
    options,
  )
}

for (const C of [
  native.TokenBucket,
  native.FixedWindow,
  native.SlidingWindow,
  native.SlidingLog,
  native.LeakyBucket,
  native.AllOf,
]) {
  const getter = handleGetter(C)
  // `tryAcquire(n)` takes `n`, as Python's `try_acquire(n=…)` and the Redis
  // limiters' `tryAcquire(key, n)` do (it took 1 whatever `n` was).
  define(C.prototype, 'tryAcquire', function tryAcquire(n) {
    let h = this[HANDLE]
    if (h === undefined) h = handleOf(this, getter)
    if (n === undefined) return fastTry(h)
    numberArg('n', n)
    return fastCheck(h, n) === 1
  })
  define(C.prototype, 'check', function check(n) {
    let h = this[HANDLE]
    if (h === undefined) h = handleOf(this, getter)
    if (n === undefined) return decision(fastCheckOne(h) === 1)
    if (typeof n !== 'number') numberArg('n', n)
    return decision(fastCheck(h, n) === 1)
  })
  define(C.prototype, 'acquire', acquire)
}

const keyedGetter = handleGetter(native.KeyedLimiter)
define(native.KeyedLimiter.prototype, 'check', function check(key, n) {
  if (n !== undefined && typeof n !== 'number') numberArg('n', n)
  const h = this[HANDLE]
  return decision(fastKeyed(h === undefined ? handleOf(this, keyedGetter) : h, key, n) === 1)
})
define(native.KeyedLimiter.prototype, 'tryAcquire', function tryAcquire(key, n) {
  if (n !== undefined) numberArg('n', n)
  const h = this[HANDLE]
  return fastKeyed(h === undefined ? handleOf(this, keyedGetter) : h, key, n === undefined ? 1 : n) === 1
})
define(native.KeyedLimiter.prototype, 'acquire', async function acquire(key, n, options) {
  const waiter = this.waiter(numbered(n), timeoutOf(options))
  // A keyed wait holds nothing to give back.
  return drive(() => this.waitStep(waiter, key), () => {}, options)
})

// Shared memory: `tryAcquire(n)` / `tryAcquire(key, n)` take `n` (the
// native call takes one).
{
  const one = native.SharedTokenBucket.prototype.tryAcquire
  define(native.SharedTokenBucket.prototype, 'tryAcquire', function tryAcquire(n) {
    if (n === undefined) return one.call(this)
    numberArg('n', n)
    return this.check(n).allowed
  })
  const oneKeyed = native.SharedKeyedLimiter.prototype.tryAcquire
  define(native.SharedKeyedLimiter.prototype, 'tryAcquire', function tryAcquire(key, n) {
    if (n === undefined) return oneKeyed.call(this, key)
    numberArg('n', n)
    return this.check(key, n).allowed
  })
}

// Shared memory: a token bucket reserves on the shared word (every process
// in one order), a window sleeps its retry_after; an abort gives back.
define(native.SharedTokenBucket.prototype, 'acquire', acquire)
define(native.SharedKeyedLimiter.prototype, 'acquire', async function acquire(key, n, options) {
  const waiter = this.waiter(numbered(n), timeoutOf(options))
  return drive(
    () => this.waitStep(waiter, key),
    () => this.abandonWait(waiter, key),
    options,
  )
})

// The gate's whole sequence for one request is the core's (Gate::admit):
// `gateAdmit` runs it, calling the gate's hooks with the request, and its
// answer comes back as numbers in `scratch` (what it found, the status, the
// outcome, the refusing policy, the concurrency place, which fields, their
// numbers, whether a notice comes: each at its place in `fast.gateSlots`,
// the layout's one definition being `gate_slot` in src/fast/calls.rs) and strings
// (the RateLimit value; for an answer the content type and body too; a
// store episode's notice), made into an Admission
// here and only here.
const fastAdmit = fast.gateAdmit
const fastFinish = fast.gateFinish
const fastRelease = fast.placeRelease
const fastResponded = fast.placeResponded
const {
  found: G_FOUND,
  status: G_STATUS,
  outcome: G_OUTCOME,
  refusedBy: G_REFUSED_BY,
  place: G_PLACE,
  fields: G_FIELDS,
  limit: G_LIMIT,
  remaining: G_REMAINING,
  reset: G_RESET,
  retryAfter: G_RETRY_AFTER,
  priority: G_PRIORITY,
  notice: G_NOTICE,
} = fast.gateSlots
const OUTCOMES = fast.outcomes
const PRIORITIES = fast.priorities
const [F_POLICY, F_RATELIMIT, F_LIMIT, F_REMAINING, F_RESET, F_RETRY] = fast.fieldNames

/**
 * A request's place among the requests in flight under the gate's
 * concurrencyLimit: hold it until the response is done (a streaming body
 * until it ends), then release() it (or close(): the same; both idempotent).
 * responded() when the response's head is written: an adaptive limit
 * times the request then (else at release()).
 */
class Place {
  #slot
  constructor(slot) {
    this.#slot = slot
  }
  responded() {
    const slot = this.#slot
    if (slot >= 0) fastResponded(slot)
  }
  release() {
    const slot = this.#slot
    if (slot >= 0) {
      this.#slot = -1
      fastRelease(slot)
    }
  }
  close() {
    this.release()
  }
  get held() {
    return this.#slot >= 0
  }
}

/** The gate's answer to a request: a Verdict, and the place it holds. */
class Admission {
  constructor(status, headers, contentType, body, outcome, refusedBy, place, priority, notice) {
    this.status = status
    this.headers = headers
    this.contentType = contentType
    this.body = body
    this.outcome = outcome
    this.refusedBy = refusedBy
    this.place = place
    this.priority = priority
    // The log line of a remote policy's episode of failures this request
    // began (outcome 'store_error') or ended, else undefined.
    this.notice = notice
  }
}

// What admit() reads of a gate once: its slot, the RateLimit-Policy value
// (the same in every verdict) and the policies' names.
const GATE = Symbol('ratebound.gate')
const gateGetter = handleGetter(native.Gate)
function gateOf(gate) {
  const g = { handle: gateGetter.call(gate), policy: gate.policy, names: gate.policyNames }
  gate[GATE] = g
  return g
}

function admission(g, r) {
  const status = scratch[G_STATUS]
  let ratelimit = r
  let contentType
  let body
  let notice
  if (scratch[G_NOTICE] !== 0) {
    ratelimit = r[0]
    contentType = r[1]
    body = r[2]
    notice = r[3]
  } else if (status !== 0) {
    ratelimit = r[0]
    contentType = r[1]
    body = r[2]
  }
  const mask = scratch[G_FIELDS]
  let headers
  if (mask === 3) {
    headers = [F_POLICY, g.policy, F_RATELIMIT, ratelimit]
  } else {
    headers = []
    if (mask & 1) headers.push(F_POLICY, g.policy)
    if (mask & 2) headers.push(F_RATELIMIT, ratelimit)
    if (mask & 4) {
      headers.push(F_LIMIT, String(scratch[G_LIMIT]), F_REMAINING, String(scratch[G_REMAINING]), F_RESET, String(scratch[G_RESET]))
    }
    if (mask & 8) headers.push(F_RETRY, String(scratch[G_RETRY_AFTER]))
  }
  const by = scratch[G_REFUSED_BY]
  const place = scratch[G_PLACE]
  const priority = scratch[G_PRIORITY]
  return new Admission(
    status,
    headers,
    contentType,
    body,
    OUTCOMES[scratch[G_OUTCOME]],
    by < 0 ? undefined : g.names[by],
    place < 0 ? null : new Place(place),
    priority < 0 ? undefined : PRIORITIES[priority],
    notice,
  )
}

define(native.Gate.prototype, 'admit', function admit(request, peer, rawHeaders) {
  const g = this[GATE] ?? gateOf(this)
  const r = fastAdmit(g.handle, request, peer, rawHeaders)
  const found = scratch[G_FOUND]
  if (found === 1) return admission(g, r)
  return found === 0 ? null : r
})
define(native.Gate.prototype, 'finish', function finish(ask, answers, request) {
  const g = this[GATE] ?? gateOf(this)
  return admission(g, fastFinish(g.handle, ask, answers, request))
})

const { express, fastify } = require('./middleware.js')(native, fast.policyFields)
// Global limits in Redis, with the application's ioredis or node-redis client.
const redis = require('./redis.js')(native, { drive, abortError, RateLimitExceededError })
// Calls to a partner through a limiter, as the core's Outbound advises.
const { fetch, axios } = require('./outbound.js')(native, { RateLimitExceededError, sleep })

const noop = fast.noop

// What JavaScript adds, then the native classes as they are: each assigned
// by name, so that Node's ESM loader sees every named export
// (`import { TokenBucket } from 'ratebound'`).
module.exports = {
  redis,
  RateLimitExceededError,
  express,
  fastify,
  fetch,
  axios,
  noop,
}
module.exports.ManualClock = native.ManualClock
module.exports.TokenBucket = native.TokenBucket
module.exports.FixedWindow = native.FixedWindow
module.exports.SlidingWindow = native.SlidingWindow
module.exports.SlidingLog = native.SlidingLog
module.exports.LeakyBucket = native.LeakyBucket
module.exports.AllOf = native.AllOf
module.exports.KeyedLimiter = native.KeyedLimiter
module.exports.SharedTokenBucket = native.SharedTokenBucket
module.exports.SharedKeyedLimiter = native.SharedKeyedLimiter
module.exports.Gate = native.Gate
module.exports.Ask = native.Ask
module.exports.Outbound = native.Outbound
module.exports.Reservation = native.Reservation
module.exports.RedisEngine = native.RedisEngine
module.exports.RedisCall = native.RedisCall
module.exports.http = native.http
