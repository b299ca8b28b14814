'use strict'
// Global limits in Redis: the driver of the native RedisEngine (the sans-I/O
// engine of the ratebound-redis crate) with the application's own client —
// ioredis (Redis or Cluster) or node-redis v4+ (createClient or
// createCluster). No limiting logic lives here: the engine builds every
// call, reads every reply and decides what a timeout or an error means (the
// fail policy, the circuit breaker, the leases).
//
// This file holds the public classes (RedisLimiter and its TokenBucket,
// FixedWindow and SlidingWindow, which ratebound.js exports as `redis`),
// their options, and the pause news they publish and listen for. The rest
// is in these files:
//   redis_clients.js  the client adapters (which client, how each sends a
//                     call), the pause subscription, whenEnded — stateless;
//   redis_driver.js   the Driver that runs the calls of one engine, with
//                     redis_raw.js (the raw native calls and their shared
//                     array) and redis_flight.js (the sends the crate's
//                     plan::Turns asks for: the batches per turn and the
//                     deadline wheel).

const { adapterFor, whenEnded } = require('./redis_clients.js')
const redisDriver = require('./redis_driver.js')

module.exports = function redisDrivers(native, { drive, abortError, RateLimitExceededError }) {
  const { RedisEngine } = native
  const { Driver, TIMEOUT, integers } = redisDriver(native, { drive })

  function optionError(message) {
    const e = new TypeError(message)
    e.code = 'ERR_RATEBOUND_INVALID_OPTION'
    return e
  }

  const COMMON = ['client', 'prefix', 'onError', 'localRate', 'timeout', 'lease', 'leaseTtl', 'breakerCooldown', 'breakerThreshold', 'batch']
  const OPTIONS = {
    token_bucket: new Set([...COMMON, 'rate', 'burst']),
    fixed_window: new Set([...COMMON, 'limit', 'window']),
    sliding_window: new Set([...COMMON, 'limit', 'window']),
  }

  class RedisLimiter {
    #engine
    #adapter
    #client
    #driver
    #ms
    // The pause listener: null (not yet), false (the client cannot
    // subscribe) or { ready, listening(), close() } (and #settled once its
    // first attempt is over).
    #news = null
    #settled = false
    #tokenBucket
    #forget = () => {}

    constructor(algorithm, name, options) {
      if (options == null || typeof options !== 'object') {
        const e = new TypeError(`redis.${name}: options are required`)
        e.code = 'ERR_INVALID_ARG_TYPE'
        throw e
      }
      const known = OPTIONS[algorithm]
      for (const k of Object.keys(options)) {
        if (!known.has(k)) throw optionError(`redis.${name}: unknown option '${k}' (known: ${[...known].join(', ')})`)
      }
      const batch = options.batch == null ? true : options.batch
      if (typeof batch !== 'boolean') throw optionError(`redis.${name}: batch must be true or false, not ${typeof batch === 'string' ? `'${batch}'` : String(batch)}`)
      const adapter = adapterFor(options.client)
      const engineOptions = { ...options, algorithm }
      delete engineOptions.client
      delete engineOptions.batch
      this.#engine = new RedisEngine(engineOptions)
      this.#adapter = adapter
      this.#client = options.client
      this.#ms = this.#engine.timeout * 1000
      this.#tokenBucket = algorithm === 'token_bucket'
      this.#driver = new Driver(this.#engine, adapter, batch, options.client)
    }

    // A token bucket's waits listen for other instances' pauses from the
    // first on; the first waits (at most the deadline) for the subscription
    // before it reserves, so that no reservation is made before the limiter
    // listens (waits that start meanwhile wait with it): a Promise to
    // await, or undefined once there is nothing to wait for.
    #listen() {
      if (this.#news === false || !this.#tokenBucket) return undefined
      if (this.#news === null) {
        const engine = this.#engine
        const news = this.#adapter.subscribe(engine.pauseChannel, (m) => {
          engine.hear(Buffer.isBuffer(m) ? m : Buffer.from(String(m)))
        })
        if (news === null) {
          this.#news = false
          return undefined
        }
        this.#news = news
        this.#settled = false
        news.ready.then(() => {
          if (this.#news === news) this.#settled = true
        })
        this.#forget = whenEnded(this.#client, () => this.#stopListening())
      }
      if (this.#settled) return undefined
      return this.#subscribed()
    }

    async #subscribed() {
      let timer
      await Promise.race([this.#news.ready, new Promise((resolve) => (timer = setTimeout(resolve, this.#ms)))])
      clearTimeout(timer)
      // Over either way: later waits never wait for a subscription that
      // cannot be made now (Redis down) — it goes on trying by itself.
      this.#settled = true
    }

    #listener = () => this.#listen()

    #stopListening() {
      const news = this.#news
      this.#news = null
      this.#settled = false
      this.#forget()
      this.#forget = () => {}
      if (news) news.close()
    }

    // PUBLISH within the deadline; never rejects.
    #publish(channel, message) {
      return new Promise((resolve) => {
        const timer = setTimeout(() => resolve(false), this.#ms)
        let sent
        try {
          sent = this.#adapter.publish(channel, message)
        } catch {
          clearTimeout(timer)
          resolve(false)
          return
        }
        Promise.resolve(sent).then(
          () => {
            clearTimeout(timer)
            resolve(true)
          },
          () => {
            clearTimeout(timer)
            resolve(false)
          },
        )
      })
    }

    /**
     * Takes `n` (default 1) tokens for `key`: Redis' decision, a lease's,
     * or the fail policy's (see `source`). Rejects only for bad arguments.
     */
    check(key, n) {
      try {
        return this.#driver.check(key, n, undefined, undefined)
      } catch (e) {
        return Promise.reject(e)
      }
    }

    /** Whether `n` (default 1) tokens for `key` were taken. */
    tryAcquire(key, n) {
      return this.check(key, n).then((d) => d.allowed)
    }

    // What became of a RedisCall run alone, as the engine's napi methods
    // take it; a misconfigured client is thrown (never the engine's).
    async #result(call) {
      const r = await this.#driver.run(call)
      if (r === TIMEOUT) return [null, true, null]
      if (r.misconfigured !== undefined) throw r.misconfigured
      if (r.error !== undefined) return [null, false, r.error]
      return [integers(r.reply), false, null]
    }

    // The engine's notices, once each, after a call of its slower steps.
    #told() {
      if (this.#engine.hasNotices) this.#driver.notices()
    }

    /**
     * Waits until `n` (default 1) tokens for `key` are taken, counted
     * across every instance. A token bucket reserves them in Redis with one
     * call (every instance is served in the order its call reached Redis,
     * no polling) and sleeps until they are due; a window sleeps its exact
     * `retryAfter` and asks again. Rejects with `RateLimitExceededError` at
     * once, taking nothing, when the wait would exceed `timeout` seconds.
     * An aborted `signal` gives back what the wait holds. Resolves with the
     * source that answered (`'redis'`, `'lease'`, `'fail_open'`, `'local'`).
     * A waiter whose reservation another instance's `pause` moved sleeps on
     * until its new time (the limiter listens for pauses from its first
     * wait on).
     */
    acquire(key, n, options) {
      const signal = options == null ? undefined : options.signal
      if (signal && signal.aborted) return Promise.reject(abortError(signal))
      const timeout = options == null || options.timeout == null ? undefined : options.timeout
      return this.#driver.acquire(key, n, timeout, signal, this.#listener)
    }

    /**
     * Takes `n` tokens for `key` now even if they are due only later
     * (token buckets): resolves with `{ delay, source, cancel() }` — act
     * after `delay` seconds; `await cancel()` gives them back (once) and
     * resolves with whether Redis took them — only if no reservation was
     * made after this one since, nor a pause: a cancel in the middle of a
     * queue gives nothing back, so the queue never exceeds the limit.
     * Rejects with `RateLimitExceededError`, taking nothing, when they would
     * be due only after `maxWait` seconds.
     */
    async reserve(key, n, options) {
      const maxWait = options == null || options.maxWait == null ? null : options.maxWait
      const r = await this.#driver.reserve(key, n, maxWait)
      // Refused (nothing taken): the package's RateLimitExceededError, as
      // for local limiters.
      if (!r.granted) throw new RateLimitExceededError(r.wait, maxWait ?? undefined)
      // The call that gives the tokens back (null: due at once).
      let back = r.call
      const engine = this.#engine
      const result = (c) => this.#result(c)
      return {
        delay: r.wait,
        source: r.source,
        async cancel() {
          const c = back
          back = null
          if (c === null) return false
          return engine.givenBack(...(await result(c)))
        },
      }
    }

    /**
     * Empties `key`'s bucket for `seconds` on Redis' clock, for every
     * instance, moving every reservation already made past the pause in its
     * order (obeying a partner's `Retry-After` once for the fleet); a pause
     * ending no later than one already on changes nothing. Resolves with the
     * shift it gave in seconds (0: covered already), or null when Redis
     * could not be told. A shift is published on the prefix's pause channel
     * for the waiters of the other instances (this limiter's own are told
     * at once).
     */
    async pause(key, seconds) {
      const call = this.#engine.beginPause(key, seconds, null)
      const paused = this.#engine.finishPauseNews(call, ...(await this.#result(call)))
      this.#told()
      if (paused == null) return null
      if (paused.news != null) await this.#publish(this.#engine.pauseChannel, paused.news)
      return paused.shift
    }

    /**
     * Lifts the pause on `key` for every instance, on Redis' clock, if
     * nothing was built on it (one script call; the rule is the engine's):
     * resolves with 'lifted' (the bucket is empty now and refills at its
     * rate from now on), 'not_paused', 'queued' (reservations stand behind
     * the pause: nothing changes, and no waiter is woken early), or null
     * when Redis could not be told (the pause stays on).
     */
    async resume(key) {
      const call = this.#engine.beginResume(key, null)
      const resumed = this.#engine.finishResume(...(await this.#result(call)))
      this.#told()
      return resumed
    }

    /**
     * The rate in force for `key` after what the outbound adapters
     * (`rb.fetch`, `rb.axios`: `adaptive`) of every instance learned of its
     * partner's real limit, in tokens per second: the learned word lives
     * beside the bucket in Redis and every call for the key reads it; this
     * answers from the last reply this instance had for the key (no I/O).
     * The configured rate while nothing is learned, never above it. Throws
     * `ERR_RATEBOUND_UNSUPPORTED` for a window (it does not learn).
     */
    learnedRate(key) {
      return this.#engine.learnedRate(key, null)
    }

    /**
     * `key`'s learned word (internal: the outbound adapters), a u64 in
     * decimal, from the last reply for the key (no I/O).
     */
    learnedWord(key) {
      return this.#engine.learnedWord(key, null)
    }

    /**
     * Replaces `key`'s learned word `seen` with `next` for every instance
     * if it is still `seen` (internal: the outbound adapters' 'adapt'; one
     * script call, its call and reply the engine's): resolves with whether
     * it did — false too when Redis could not be told (nothing learned).
     */
    async adaptWord(key, seen, next) {
      const call = this.#engine.beginAdapt(key, seen, next, null)
      if (call === null) return false
      const { replaced, news } = this.#engine.finishAdapt(call, ...(await this.#result(call)))
      this.#told()
      // The other instances' waiters hear it before they send.
      if (news != null) await this.#publish(this.#engine.pauseChannel, news)
      return replaced
    }

    /**
     * `check` within `scope` (a middleware's policy name): that policy's
     * own key in Redis, never shared with another policy on the prefix.
     */
    checkIn(scope, key, n) {
      try {
        return this.#driver.check(key, n, scope, undefined)
      } catch (e) {
        return Promise.reject(e)
      }
    }

    /**
     * `check` judged at `atUs` microseconds of Redis time instead of its
     * `TIME`: the explicit-time twin, for replaying test vectors.
     */
    checkAt(key, n, atUs) {
      try {
        return this.#driver.check(key, n, undefined, atUs)
      } catch (e) {
        return Promise.reject(e)
      }
    }

    /**
     * Gives every unspent leased token back to Redis (call it on shutdown)
     * and stops listening for pauses (closing the limiter's subscriber, a
     * duplicate of the client; closing the client does too); resolves with
     * how many keys' tokens went back. The client stays open: it is the
     * application's.
     */
    async close() {
      this.#stopListening()
      const calls = this.#engine.drain()
      const results = await Promise.all(calls.map((c) => this.#driver.run(c)))
      return results.filter((r) => r.reply !== undefined).length
    }

    /**
     * Whether this limiter hears other instances' pauses now (from its
     * first wait on, when its client can be duplicated).
     */
    get listening() {
      return this.#news !== null && this.#news !== false && this.#news.listening()
    }

    /** The native engine (configuration, breaker, leases). */
    get engine() {
      return this.#engine
    }

    /** Which client was detected: 'ioredis', 'ioredis-cluster' or 'node-redis'. */
    get clientKind() {
      return this.#adapter.kind
    }

    /**
     * Counters since creation. The driver's: `calls` (script calls sent:
     * round trips; a batch is one), `evals` (NOSCRIPT answered with EVAL),
     * `timeouts`, `errors`, `batches` (of the calls, batches of several
     * checks), `batched` (the checks that went in them), `queued` (calls
     * that waited for room in flight) and `unsent` (calls that never left:
     * answered as busy). The engine's answers by the path that gave them:
     * `redis`, `lease`, `damaged`, `failOpen`, `failClosed`, `failLocal`,
     * `busy`; and `breakerOpen` now.
     */
    get stats() {
      return this.#driver.stats
    }
  }

  // The engine's own state, read through: `breakerOpen` (whether the
  // circuit breaker is open: Redis is being spared), `leased` (leased tokens
  // held now, over all keys), `timeout` (every call's deadline, in seconds),
  // `limit` (the burst, or the window's limit) and `algorithm`.
  for (const name of ['breakerOpen', 'leased', 'timeout', 'limit', 'algorithm']) {
    Object.defineProperty(RedisLimiter.prototype, name, {
      get() {
        return this.engine[name]
      },
      configurable: true,
    })
  }

  // Each class works with and without `new`.
  function limiterClass(algorithm, name) {
    const C = {
      [name]: class extends RedisLimiter {
        constructor(options) {
          super(algorithm, name, options)
        }
      },
    }[name]
    const F = {
      [name]: function (options) {
        return new C(options)
      },
    }[name]
    F.prototype = C.prototype
    Object.defineProperty(C.prototype, 'constructor', { value: F, writable: true, configurable: true, enumerable: false })
    return F
  }

  return {
    TokenBucket: limiterClass('token_bucket', 'TokenBucket'),
    FixedWindow: limiterClass('fixed_window', 'FixedWindow'),
    SlidingWindow: limiterClass('sliding_window', 'SlidingWindow'),
  }
}
