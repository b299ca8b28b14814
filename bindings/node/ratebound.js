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

class RateLimitExceededError extends Error {
  constructor(retryAfter) {
    super(`rate limit exceeded: the tokens would take ${retryAfter} s, longer than the timeout`)
    this.name = 'RateLimitExceededError'
    this.code = 'ERR_RATEBOUND_RATE_LIMIT_EXCEEDED'
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

// The core's waiter never asks for a sleep longer than a host timer holds
// (2^31 - 1 ms).
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

// Drives the core's waiter: [0] done, [2, ns] sleep and step again, [3, ns]
// the timeout cannot be met (nothing taken). An abort gives back what the
// waiter holds.
async function drive(step, abandon, options) {
  const signal = options == null ? undefined : options.signal
  if (signal && signal.aborted) throw abortError(signal)
  for (;;) {
    const [kind, ns] = step()
    if (kind === 0) return
    if (kind === 3) throw new RateLimitExceededError(ns / 1e9)
    try {
      await sleep(Math.ceil(ns / 1e6), signal)
    } catch (e) {
      abandon()
      throw e
    }
  }
}

function timeoutOf(options) {
  return options == null || options.timeout == null ? undefined : options.timeout
}

function define(proto, name, fn) {
  Object.defineProperty(proto, name, { value: fn, writable: true, configurable: true, enumerable: false })
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
  define(C.prototype, 'tryAcquire', function tryAcquire() {
    const h = this[HANDLE]
    return fastTry(h === undefined ? handleOf(this, getter) : h)
  })
  define(C.prototype, 'check', function check(n) {
    let h = this[HANDLE]
    if (h === undefined) h = handleOf(this, getter)
    return decision((n === undefined ? fastCheckOne(h) : fastCheck(h, n)) === 1)
  })
  define(C.prototype, 'acquire', async function acquire(n, options) {
    const waiter = this.waiter(n, timeoutOf(options))
    return drive(
      () => this.waitStep(waiter),
      () => this.abandonWait(waiter),
      options,
    )
  })
}

const keyedGetter = handleGetter(native.KeyedLimiter)
define(native.KeyedLimiter.prototype, 'check', function check(key, n) {
  const h = this[HANDLE]
  return decision(fastKeyed(h === undefined ? handleOf(this, keyedGetter) : h, key, n) === 1)
})
define(native.KeyedLimiter.prototype, 'tryAcquire', function tryAcquire(key) {
  const h = this[HANDLE]
  return fastKeyed(h === undefined ? handleOf(this, keyedGetter) : h, key, 1) === 1
})
define(native.KeyedLimiter.prototype, 'acquire', async function acquire(key, n, options) {
  const waiter = this.waiter(n, timeoutOf(options))
  // A keyed wait holds nothing to give back.
  return drive(() => this.waitStep(waiter, key), () => {}, options)
})

// Shared memory: a token bucket reserves on the shared word (every process
// in one order), a window sleeps its retry_after; an abort gives back.
define(native.SharedTokenBucket.prototype, 'acquire', async function acquire(n, options) {
  const waiter = this.waiter(n, timeoutOf(options))
  return drive(
    () => this.waitStep(waiter),
    () => this.abandonWait(waiter),
    options,
  )
})
define(native.SharedKeyedLimiter.prototype, 'acquire', async function acquire(key, n, options) {
  const waiter = this.waiter(n, timeoutOf(options))
  return drive(
    () => this.waitStep(waiter, key),
    () => this.abandonWait(waiter, key),
    options,
  )
})

const { express, fastify } = require('./middleware.js')(native.Gate, fast.gateDecide, native.SharedKeyedLimiter)
// Global limits in Redis, with the application's ioredis or node-redis client.
const redis = require('./redis.js')(native, { RateLimitExceededError, sleep, abortError })
// Calls to a partner through a limiter, as the core's Outbound advises.
const { fetch, axios } = require('./outbound.js')(native, { RateLimitExceededError })

const noop = fast.noop
const {
  ManualClock,
  TokenBucket,
  FixedWindow,
  SlidingWindow,
  SlidingLog,
  LeakyBucket,
  AllOf,
  KeyedLimiter,
  SharedTokenBucket,
  SharedKeyedLimiter,
  Gate,
  Outbound,
  Reservation,
  RedisEngine,
  RedisCall,
  http,
} = native

module.exports = {
  ManualClock,
  TokenBucket,
  FixedWindow,
  SlidingWindow,
  SlidingLog,
  LeakyBucket,
  AllOf,
  KeyedLimiter,
  SharedTokenBucket,
  SharedKeyedLimiter,
  Gate,
  Outbound,
  Reservation,
  RedisEngine,
  RedisCall,
  http,
  redis,
  RateLimitExceededError,
  express,
  fastify,
  fetch,
  axios,
  noop,
}
