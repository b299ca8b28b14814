'use strict'
// The npm package's entry point: the generated loader's classes (index.js),
// with the three hot calls swapped for raw N-API entry points, plus what
// needs the event loop: acquire() and the Express/Fastify middleware.
// No limiting logic lives here: every decision is the Rust core's.

const native = require('./index.js')

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

// A host timer holds at most 2^31 - 1 ms (about 24.8 days); a longer
// setTimeout fires after 1 ms. Longer sleeps are chained timers.
const MAX_TIMER_MS = 2 ** 31 - 1

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    let left = ms
    let timer
    const onAbort = () => {
      clearTimeout(timer)
      reject(abortError(signal))
    }
    const arm = () => {
      const chunk = Math.min(left, MAX_TIMER_MS)
      left -= chunk
      timer = setTimeout(() => {
        if (left > 0) return arm()
        if (signal) signal.removeEventListener('abort', onAbort)
        resolve()
      }, chunk)
    }
    if (signal) signal.addEventListener('abort', onAbort, { once: true })
    arm()
  })
}

// Drives the core's acquire_step: kind 0 admitted, 1 reserved (sleep, then
// go; give the permit back if aborted), 2 retry (sleep, step again), 3 the
// timeout cannot be met (reject at once, nothing taken).
async function drive(limiter, step, options) {
  const timeout = options == null ? undefined : options.timeout
  const signal = options == null ? undefined : options.signal
  if (signal && signal.aborted) throw abortError(signal)
  let deadline
  for (;;) {
    const [kind, waitNs, permit, dl] = step(timeout == null ? undefined : timeout, deadline)
    if (dl >= 0) deadline = dl
    if (kind === 0) return
    if (kind === 3) throw new RateLimitExceededError(waitNs / 1e9)
    try {
      await sleep(Math.ceil(waitNs / 1e6), signal)
    } catch (e) {
      if (kind === 1) limiter.releasePermit(permit)
      throw e
    }
    if (kind === 1) {
      limiter.forgetPermit(permit)
      return
    }
  }
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
  define(C.prototype, 'acquire', function acquire(n = 1, options) {
    return drive(this, (timeout, deadline) => this.acquireStep(n, timeout, deadline), options)
  })
}

const keyedGetter = handleGetter(native.KeyedLimiter)
define(native.KeyedLimiter.prototype, 'check', function check(key, n) {
  const h = this[HANDLE]
  return decision(fastKeyed(h === undefined ? handleOf(this, keyedGetter) : h, key, n === undefined ? 1 : n) === 1)
})
define(native.KeyedLimiter.prototype, 'tryAcquire', function tryAcquire(key) {
  const h = this[HANDLE]
  return fastKeyed(h === undefined ? handleOf(this, keyedGetter) : h, key, 1) === 1
})
define(native.KeyedLimiter.prototype, 'acquire', function acquire(key, n = 1, options) {
  return drive(this, (timeout, deadline) => this.acquireStep(key, n, timeout, deadline), options)
})

const { express, fastify } = require('./middleware.js')(native.Gate, fast.gateDecide)
// Global limits in Redis, with the application's ioredis or node-redis client.
const redis = require('./redis.js')(native)

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
  Gate,
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
  Gate,
  Reservation,
  RedisEngine,
  RedisCall,
  http,
  redis,
  RateLimitExceededError,
  express,
  fastify,
  noop,
}
