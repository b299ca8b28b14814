'use strict'
// Global limits in Redis: the driver of the native RedisEngine (the sans-I/O
// engine of the ratebound-redis crate) with the application's own client —
// ioredis (Redis or Cluster) or node-redis v4+ (createClient or
// createCluster). No limiting logic lives here: the engine builds every
// call, reads every reply and decides what a timeout or an error means (the
// fail policy, the circuit breaker, the leases). This file only runs the
// calls, like the Rust driver (crates/ratebound-redis/src/driver.rs):
//
//   EVALSHA <sha> 1 <key> <args...>, and on NOSCRIPT  EVAL <text> 1 <key> <args...>
//
// once, both within ONE deadline (a timer, cleared on completion). A timeout
// or any client error is an outcome handed to the engine, never a rejection.
//
// Pause news: a pause that moved reservations is PUBLISHed on the prefix's
// channel (rb:pause), and a token bucket listens there from its first wait
// on, on a duplicate of the application's client in subscriber mode; every
// message goes to the engine's hear(), which moves the waiters it holds.

module.exports = function redisDrivers(native, { RateLimitExceededError, sleep, abortError }) {
  const { RedisEngine, RedisCall } = native
  // The longest sleep a host timer holds; the engine is asked again after it.
  const MAX_SLEEP_MS = 2 ** 31 - 1

  function optionError(message) {
    const e = new TypeError(message)
    e.code = 'ERR_RATEBOUND_INVALID_OPTION'
    return e
  }

  function isNoScript(e) {
    return e != null && typeof e.message === 'string' && e.message.startsWith('NOSCRIPT')
  }

  function errorText(e) {
    if (e == null) return 'unknown error'
    if (typeof e.message === 'string' && e.message !== '') return e.message
    return String(e)
  }

  // Never rejects: a client's promise with its failure swallowed.
  function quietly(p) {
    try {
      Promise.resolve(p).catch(() => {})
    } catch {}
  }

  // A subscription to `channel` on `sub` (a duplicate of the application's
  // client): `ready` resolves once subscribed (true) or on the first failure
  // (false); the client reconnects and resubscribes by itself afterwards.
  function subscription(subscribe, isReady, stop) {
    let subscribed = false
    let closed = false
    const ready = (async () => {
      await subscribe()
      subscribed = true
      return true
    })().catch(() => false)
    return {
      ready,
      listening: () => subscribed && !closed && isReady(),
      close() {
        if (closed) return
        closed = true
        try {
          quietly(stop())
        } catch {}
      },
    }
  }

  // The limiter's subscriber must never keep the process alive by itself.
  function unrefSocket(stream) {
    if (stream != null && typeof stream.unref === 'function') stream.unref()
  }

  // What each client needs to run a script on one key: `evalsha` and
  // `eval` returning a Promise, and whether a queued command can be
  // withdrawn when its deadline passes; `publish`, and `subscribe` (null
  // when the client cannot be duplicated: no listener).
  function adapterFor(client) {
    if (client == null || (typeof client !== 'object' && typeof client !== 'function')) {
      const e = new TypeError('client must be an ioredis client (Redis or Cluster) or a node-redis v4+ client (createClient or createCluster)')
      e.code = 'ERR_INVALID_ARG_TYPE'
      throw e
    }
    if (typeof client.evalSha === 'function' && typeof client.eval === 'function') {
      // node-redis v4+ (client or cluster; a cluster routes by the first key).
      const abortable = typeof client.withAbortSignal === 'function'
      return {
        kind: 'node-redis',
        abortable,
        evalsha(sha, key, args, signal) {
          const c = signal === undefined ? client : client.withAbortSignal(signal)
          return c.evalSha(sha, { keys: [key], arguments: args })
        },
        eval(text, key, args, signal) {
          const c = signal === undefined ? client : client.withAbortSignal(signal)
          return c.eval(text, { keys: [key], arguments: args })
        },
        publish: (channel, message) => client.publish(channel, message),
        subscribe(channel, onMessage) {
          if (typeof client.duplicate !== 'function') return null
          let sub
          try {
            sub = client.duplicate()
          } catch {
            return null
          }
          if (sub == null || typeof sub.connect !== 'function' || typeof sub.subscribe !== 'function') return null
          let up = false
          if (typeof sub.on === 'function') {
            sub.on('error', () => {})
            sub.on('ready', () => (up = true))
            sub.on('reconnecting', () => (up = false))
            sub.on('end', () => (up = false))
          }
          return subscription(
            async () => {
              await sub.connect()
              up = true
              if (typeof sub.unref === 'function') sub.unref()
              // bufferMode: the message as a Buffer (a key need not be UTF-8).
              await sub.subscribe(channel, (message) => onMessage(message), true)
            },
            () => up,
            () => (typeof sub.destroy === 'function' ? sub.destroy() : sub.disconnect()),
          )
        },
      }
    }
    if (typeof client.evalsha === 'function' && typeof client.eval === 'function') {
      // ioredis (Redis or Cluster; a cluster routes by the key).
      return {
        kind: client.isCluster === true ? 'ioredis-cluster' : 'ioredis',
        abortable: false,
        evalsha: (sha, key, args) => client.evalsha(sha, 1, key, ...args),
        eval: (text, key, args) => client.eval(text, 1, key, ...args),
        publish: (channel, message) => client.publish(channel, message),
        subscribe(channel, onMessage) {
          if (typeof client.duplicate !== 'function') return null
          const cluster = client.isCluster === true
          let sub
          try {
            // A queue while (re)connecting, so that SUBSCRIBE waits for the
            // connection instead of failing; resubscribed on reconnection.
            sub = cluster
              ? client.duplicate(undefined, { enableOfflineQueue: true, lazyConnect: false })
              : client.duplicate({ enableOfflineQueue: true, maxRetriesPerRequest: null, lazyConnect: false, autoResubscribe: true })
          } catch {
            return null
          }
          if (sub == null || typeof sub.subscribe !== 'function' || typeof sub.on !== 'function') return null
          sub.on('error', () => {})
          sub.on('messageBuffer', (_channel, message) => onMessage(message))
          if (!cluster) sub.on('connect', () => unrefSocket(sub.stream))
          return subscription(
            () => sub.subscribe(channel),
            () => sub.status === 'ready',
            () => sub.disconnect(),
          )
        },
      }
    }
    const e = new TypeError(
      'client has neither evalSha (node-redis v4+) nor evalsha (ioredis): pass an ioredis Redis/Cluster or a node-redis client/cluster',
    )
    e.code = 'ERR_INVALID_ARG_TYPE'
    throw e
  }

  // The script's reply as the engine takes it: an array of numbers (the
  // clients' bigints and numeric strings as numbers); anything else as it
  // came, which the engine counts as a malformed reply (as Python's).
  function integers(reply) {
    if (!Array.isArray(reply)) return reply
    const out = new Array(reply.length)
    for (let i = 0; i < reply.length; i++) {
      const v = reply[i]
      out[i] = typeof v === 'number' ? v : typeof v === 'bigint' || typeof v === 'string' ? Number(v) : NaN
    }
    return out
  }

  const TIMEOUT = Object.freeze({ timedOut: true })

  // Runs `call` within `ms`: resolves (never rejects) with { reply } or
  // TIMEOUT or { error }. Every client promise gets its handlers at once, so
  // a late failure after the deadline is no unhandled rejection.
  function run(adapter, call, ms, stats) {
    return new Promise((resolve) => {
      let done = false
      const controller = adapter.abortable ? new AbortController() : undefined
      const signal = controller === undefined ? undefined : controller.signal
      const timer = setTimeout(() => {
        if (done) return
        done = true
        stats.timeouts++
        // node-redis: a command still queued (offline) is withdrawn, so it
        // does not run when the connection comes back. One already sent may
        // still run: its tokens may be spent.
        if (controller !== undefined) controller.abort()
        resolve(TIMEOUT)
      }, ms)
      const settle = (result) => {
        if (done) return
        done = true
        clearTimeout(timer)
        resolve(result)
      }
      const fail = (e) => {
        if (!done) stats.errors++
        settle({ error: errorText(e) })
      }
      const ok = (reply) => settle({ reply })
      // [sha, key, ...args] in one native call; a key that is valid UTF-8
      // comes as a string (the clients write an all-string command in one
      // piece, a Buffer argument through a slower path).
      const command = call.command()
      const sha = command[0]
      const key = command[1]
      const args = command.slice(2)
      stats.calls++
      let first
      try {
        first = adapter.evalsha(sha, key, args, signal)
      } catch (e) {
        fail(e)
        return
      }
      Promise.resolve(first).then(ok, (e) => {
        if (done) return
        if (!isNoScript(e)) {
          fail(e)
          return
        }
        // Not loaded on this server (a restart, a failover, SCRIPT FLUSH,
        // another cluster node): EVAL loads it. Same deadline.
        stats.evals++
        let second
        try {
          second = adapter.eval(call.text, key, args, signal)
        } catch (e2) {
          fail(e2)
          return
        }
        Promise.resolve(second).then(ok, fail)
      })
    })
  }

  // One 'end' listener per application client, however many limiters share
  // it: when the client is closed, so are the limiters' subscribers.
  const onEnd = new WeakMap()
  function whenEnded(client, stop) {
    if (typeof client.on !== 'function') return () => {}
    let stops = onEnd.get(client)
    if (stops === undefined) {
      stops = new Set()
      onEnd.set(client, stops)
      const ended = () => {
        for (const f of [...stops]) f()
      }
      try {
        client.on('end', ended)
      } catch {}
    }
    stops.add(stop)
    return () => stops.delete(stop)
  }

  const COMMON = ['client', 'prefix', 'onError', 'localRate', 'timeout', 'lease', 'leaseTtl', 'breakerCooldown', 'breakerThreshold']
  const OPTIONS = {
    token_bucket: new Set([...COMMON, 'rate', 'burst']),
    fixed_window: new Set([...COMMON, 'limit', 'window']),
    sliding_window: new Set([...COMMON, 'limit', 'window']),
  }

  class RedisLimiter {
    #engine
    #adapter
    #client
    #ms
    #stats = { calls: 0, evals: 0, timeouts: 0, errors: 0 }
    // The pause listener: null (not yet), false (the client cannot
    // subscribe) or { ready, listening(), close() } (and #settled once its
    // first attempt is over).
    #news = null
    #settled = false
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
      const adapter = adapterFor(options.client)
      const engineOptions = { ...options, algorithm }
      delete engineOptions.client
      this.#engine = new RedisEngine(engineOptions)
      this.#adapter = adapter
      this.#client = options.client
      this.#ms = this.#engine.timeout * 1000
    }

    // A token bucket's waits listen for other instances' pauses from the
    // first on; the first waits (at most the deadline) for the subscription
    // before it reserves, so that no reservation is made before the limiter
    // listens (waits that start meanwhile wait with it).
    async #listen() {
      if (this.#news === false || this.#engine.algorithm !== 'token_bucket') return
      if (this.#news === null) {
        const engine = this.#engine
        const news = this.#adapter.subscribe(engine.pauseChannel, (m) => {
          engine.hear(Buffer.isBuffer(m) ? m : Buffer.from(String(m)))
        })
        if (news === null) {
          this.#news = false
          return
        }
        this.#news = news
        this.#settled = false
        news.ready.then(() => {
          if (this.#news === news) this.#settled = true
        })
        this.#forget = whenEnded(this.#client, () => this.#stopListening())
      }
      if (this.#settled) return
      let timer
      await Promise.race([this.#news.ready, new Promise((resolve) => (timer = setTimeout(resolve, this.#ms)))])
      clearTimeout(timer)
      // Over either way: later waits never wait for a subscription that
      // cannot be made now (Redis down) — it goes on trying by itself.
      this.#settled = true
    }

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

    async #decide(begun, atUs) {
      if (!(begun instanceof RedisCall)) return begun
      const call = atUs === undefined ? begun : begun.at(atUs)
      const r = await run(this.#adapter, call, this.#ms, this.#stats)
      if (r === TIMEOUT) return this.#engine.finish(call, null, true, null)
      if (r.error !== undefined) return this.#engine.finish(call, null, false, r.error)
      return this.#engine.finish(call, integers(r.reply), false, null)
    }

    /**
     * Takes `n` (default 1) tokens for `key`: Redis' decision, a lease's,
     * or the fail policy's (see `source`). Rejects only for bad arguments.
     */
    async check(key, n) {
      return this.#decide(this.#engine.begin(key, n))
    }

    /** Whether `n` (default 1) tokens for `key` were taken. */
    async tryAcquire(key, n) {
      return (await this.#decide(this.#engine.begin(key, n))).allowed
    }

    async #reply(a, call) {
      const r = await run(this.#adapter, call, this.#ms, this.#stats)
      if (r === TIMEOUT) return this.#engine.acquireReply(a, null, true, null)
      if (r.error !== undefined) return this.#engine.acquireReply(a, null, false, r.error)
      return this.#engine.acquireReply(a, integers(r.reply), false, null)
    }

    async #result(call) {
      const r = await run(this.#adapter, call, this.#ms, this.#stats)
      if (r === TIMEOUT) return [null, true, null]
      if (r.error !== undefined) return [null, false, r.error]
      return [integers(r.reply), false, null]
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
    async acquire(key, n, options) {
      const signal = options == null ? undefined : options.signal
      if (signal && signal.aborted) throw abortError(signal)
      const timeout = options == null || options.timeout == null ? null : options.timeout
      const a = this.#engine.acquire(key, n, timeout, null)
      await this.#listen()
      for (;;) {
        const step = this.#engine.acquireStep(a)
        if (typeof step === 'string') return step
        if (step instanceof RedisCall) {
          await this.#reply(a, step)
        } else if (typeof step === 'number') {
          try {
            await sleep(Math.min(Math.ceil(step * 1000), MAX_SLEEP_MS), signal)
          } catch (e) {
            const back = this.#engine.acquireAbandon(a)
            if (back !== null) await run(this.#adapter, back, this.#ms, this.#stats)
            throw e
          }
        } else {
          throw new RateLimitExceededError(step.retryAfter)
        }
      }
    }

    /**
     * Takes `n` tokens for `key` now even if they are due only later
     * (token buckets): resolves with `{ delay, source, cancel() }` — act
     * after `delay` seconds; `await cancel()` gives them back (once).
     * Rejects with `RateLimitExceededError`, taking nothing, when they would
     * be due only after `maxWait` seconds.
     */
    async reserve(key, n, options) {
      const maxWait = options == null || options.maxWait == null ? null : options.maxWait
      const begun = this.#engine.beginReserve(key, n, maxWait, null)
      let call = null
      let granted = begun
      if (begun instanceof RedisCall) {
        granted = this.#engine.finishReserve(begun, ...(await this.#result(begun)))
        if (granted.delay > 0) call = begun
      }
      // Refused (nothing taken): the package's RateLimitExceededError, as
      // for local limiters.
      if (granted.retryAfter !== undefined) throw new RateLimitExceededError(granted.retryAfter)
      const self = this
      return {
        delay: granted.delay,
        source: granted.source,
        async cancel() {
          const c = call
          call = null
          if (c === null) return false
          const r = await run(self.#adapter, self.#engine.giveBack(c), self.#ms, self.#stats)
          return r !== TIMEOUT && r.error === undefined
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
      if (paused == null) return null
      if (paused.news != null) await this.#publish(this.#engine.pauseChannel, paused.news)
      return paused.shift
    }

    /**
     * `check` within `scope` (a middleware's policy name): that policy's
     * own key in Redis, never shared with another policy on the prefix.
     */
    async checkIn(scope, key, n) {
      return this.#decide(this.#engine.begin(key, n, scope))
    }

    /**
     * `check` judged at `atUs` microseconds of Redis time instead of its
     * `TIME`: the explicit-time twin, for replaying test vectors.
     */
    async checkAt(key, n, atUs) {
      return this.#decide(this.#engine.begin(key, n), atUs)
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
      const results = await Promise.all(calls.map((c) => run(this.#adapter, c, this.#ms, this.#stats)))
      return results.filter((r) => r.reply !== undefined).length
    }

    /** Whether the circuit breaker is open (Redis is being spared). */
    get breakerOpen() {
      return this.#engine.breakerOpen
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

    /** Leased tokens held now, over all keys. */
    get leased() {
      return this.#engine.leased
    }

    /** The deadline of every call, in seconds. */
    get timeout() {
      return this.#engine.timeout
    }

    /** The burst, or the window's limit. */
    get limit() {
      return this.#engine.limit
    }

    /** The algorithm: 'token_bucket', 'fixed_window' or 'sliding_window'. */
    get algorithm() {
      return this.#engine.algorithm
    }

    /** Which client was detected: 'ioredis', 'ioredis-cluster' or 'node-redis'. */
    get clientKind() {
      return this.#adapter.kind
    }

    /**
     * Counters since creation: `calls` (round trips started), `evals`
     * (NOSCRIPT answered with EVAL), `timeouts`, `errors`.
     */
    get stats() {
      return { ...this.#stats }
    }
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
