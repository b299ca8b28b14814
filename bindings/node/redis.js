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
// once, both within ONE deadline. A timeout or any client error is an
// outcome handed to the engine, never a rejection.
//
// The hot path is two raw native calls a check (src/redis/raw.rs): `begin`
// gives the Redis key and writes the call's number and template into the
// shared Float64Array `S` (the script and its arguments: the same for every
// check of one kind, fetched once and kept here), and `finish` reads the
// reply's numbers from `S` and writes the decision there, which becomes the
// decision object here. One timer a limiter — the deadline wheel — expires
// the calls in flight whose deadline passed (they all have the same
// deadline, so they expire in the order they began).
//
// Batching: a check waits in a queue that goes out at the end of the
// current turn of the event loop (process.nextTick) as ONE script run over
// all its keys (the engine's BatchCall: per hash slot on a cluster client,
// at most 128 keys), each key decided in order exactly as separate calls
// would decide it; a queue of one goes alone, as it would unbatched. With
// nothing in flight a queue of SPLIT_AT or more goes as two batches, so
// that Redis runs one while this process reads the other's answers: the
// callers those answers wake ask again together and keep the two apart.
// `batch: false` sends every check alone at once.
//
// Pause news: a pause that moved reservations is PUBLISHed on the prefix's
// channel (rb:pause), and a token bucket listens there from its first wait
// on, on a duplicate of the application's client in subscriber mode; every
// message goes to the engine's hear(), which moves the waiters it holds.

const { setMaxListeners } = require('node:events')

module.exports = function redisDrivers(native, { RateLimitExceededError, sleep, abortError }) {
  const { RedisEngine, redisTemplate, redisCallScript, redisKeep, redisUseSlots } = native
  // The longest sleep a host timer holds; the engine is asked again after it.
  const MAX_SLEEP_MS = 2 ** 31 - 1

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
  const ANSWER = R.answerAt
  const IDS = R.idsAt
  const REPLY = R.replyAt
  const OUT = R.outAt
  const STRIDE = R.stride
  const MAX_BATCH = R.maxBatch
  const REPLY_ROOM = 7 * MAX_BATCH
  const SOURCES = R.sources
  // What a wait's step gave.
  const [STEP_CALL, STEP_SLEEP, STEP_DONE, STEP_EXCEEDED] = R.steps
  // What became of a call, as `finish` is told.
  const REPLIED = 0
  const TIMED_OUT = 1
  const FAILED = 2
  const MALFORMED = 3
  // What a call in flight was begun for.
  const CHECK = 0
  const RESERVE = 1
  const RAW = 2 // a RedisCall of the engine's slower steps: its reply as it came
  const WAIT = 3 // an acquire's call (or its give-back): the answer is the wait's
  // A queue of this many checks or more, with nothing in flight, goes out
  // as two batches.
  const SPLIT_AT = 8
  // An ioredis socket is written as soon as the calls of a turn hold this
  // many keys.
  const WRITE_EVERY = 8
  // Node-redis calls begun within this many ms share one AbortSignal.
  const EPOCH_MS = 1

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

  // What each client needs to run a script: `one` (EVALSHA sha 1 key
  // ...args) and `oneEval` (EVAL text 1 key ...args), `many` and `manyEval`
  // (a batch: EVALSHA sha n ...flat, `flat` the keys then the arguments),
  // each returning a Promise; whether a queued command can be withdrawn when
  // its deadline passes (`abortable`: the calls take `{ abortSignal }`);
  // whether keys are routed by hash slot (`cluster`); `publish`, and
  // `subscribe` (null when the client cannot be duplicated: no listener).
  function adapterFor(client) {
    if (client == null || (typeof client !== 'object' && typeof client !== 'function')) {
      const e = new TypeError('client must be an ioredis client (Redis or Cluster) or a node-redis v4+ client (createClient or createCluster)')
      e.code = 'ERR_INVALID_ARG_TYPE'
      throw e
    }
    if (typeof client.evalSha === 'function' && typeof client.eval === 'function') {
      // node-redis v4+: the raw sendCommand (no parsing of ours to redo); a
      // cluster routes by the first key, a client takes an AbortSignal.
      const cluster = typeof client.getSlotMaster === 'function'
      const send = cluster
        ? (words, key) => client.sendCommand(key, false, words)
        : (words, key, options) => client.sendCommand(words, options)
      return {
        kind: 'node-redis',
        abortable: !cluster,
        cluster,
        one: (sha, key, args, options) => send(['EVALSHA', sha, '1', key, ...args], key, options),
        oneEval: (text, key, args, options) => send(['EVAL', text, '1', key, ...args], key, options),
        many: (sha, n, flat, options) => send(['EVALSHA', sha, String(n), ...flat], flat[0], options),
        manyEval: (text, n, flat, options) => send(['EVAL', text, String(n), ...flat], flat[0], options),
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
      // ioredis (Redis or Cluster; a cluster routes by the key). ioredis
      // writes each command to the socket at once, one system call each:
      // after the first call of a turn of the event loop, the next are
      // written as soon as they hold WRITE_EVERY keys instead, the rest at
      // the end of the turn (the socket corked meanwhile; a cluster's
      // sockets are the cluster's own). Not all at the end: Redis runs the
      // first while this process still makes the next, instead of each
      // waiting for the other in turn.
      const cluster = client.isCluster === true
      // Whether a call went out in this turn; the socket corked after it,
      // and the keys handed over since the last write.
      let turn = false
      let corked = null
      let written = 0
      const endTurn = () => {
        turn = false
        const stream = corked
        if (stream === null) return
        corked = null
        stream.uncork()
      }
      // Before a call is handed to the client: the turn's first goes out
      // at once, the next wait in the corked socket.
      const before = () => {
        if (cluster) return
        if (!turn) {
          turn = true
          process.nextTick(endTurn)
          return
        }
        if (corked !== null) return
        const stream = client.stream
        if (stream == null || typeof stream.cork !== 'function' || typeof stream.uncork !== 'function') return
        stream.cork()
        corked = stream
        written = 0
      }
      // After: written as soon as the waiting calls hold WRITE_EVERY keys.
      const after = (keys) => {
        if (corked === null) return
        written += keys
        if (written >= WRITE_EVERY) {
          written = 0
          corked.uncork()
          corked.cork()
        }
      }
      return {
        kind: cluster ? 'ioredis-cluster' : 'ioredis',
        abortable: false,
        cluster,
        one: (sha, key, args) => {
          before()
          const sent = client.evalsha(sha, 1, key, ...args)
          after(1)
          return sent
        },
        oneEval: (text, key, args) => {
          before()
          const sent = client.eval(text, 1, key, ...args)
          after(1)
          return sent
        },
        many: (sha, n, flat) => {
          before()
          const sent = client.evalsha(sha, n, ...flat)
          after(n)
          return sent
        },
        manyEval: (text, n, flat) => {
          before()
          const sent = client.eval(text, n, ...flat)
          after(n)
          return sent
        },
        publish: (channel, message) => client.publish(channel, message),
        subscribe(channel, onMessage) {
          if (typeof client.duplicate !== 'function') return null
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

  // Writes a reply's numbers at REPLY in `S` by the same rule; their count,
  // or -1 for a reply that is no array (or longer than any script's).
  function putReply(reply) {
    if (!Array.isArray(reply) || reply.length > REPLY_ROOM) return -1
    for (let i = 0; i < reply.length; i++) {
      const v = reply[i]
      S[REPLY + i] = typeof v === 'number' ? v : typeof v === 'bigint' || typeof v === 'string' ? Number(v) : NaN
    }
    return reply.length
  }

  // The decision the engine wrote at `at` in `S`.
  function decisionAt(at) {
    return {
      allowed: S[at] === 1,
      limit: S[at + 1],
      remaining: S[at + 2],
      retryAfter: S[at + 3],
      resetAfter: S[at + 4],
      source: SOURCES[S[at + 5]],
    }
  }

  // A reservation's answer at `at` in `S`: granted or not, the wait (the
  // delay, or the retryAfter of a refusal), the source, and the call that
  // took the tokens when they are due later (for cancel).
  function reservedAt(at, id) {
    return {
      granted: S[at] === 1,
      wait: S[at + 1],
      source: SOURCES[S[at + 2]],
      call: S[at + 3] === 1 ? redisKeep(id) : null,
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
  // and hash slot, its deadline, and the resolve of the caller's promise.
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
      this.deadline = 0
      this.done = false
      this.evaled = false
      this.epoch = null
      this.resolve = null
      // [sha, text, args, batchSha, batchText], once known (a RAW call's
      // first three from the start).
      this.words = null
    }
  }

  // The call `begin` (or a step) just published in `S`, for `kind`: its
  // key, or [key, ...args] when it has no template.
  function begun(kind, r) {
    return S[2] < 0 ? new Pending(kind, S[1], r[0], S[2], S[3], S[4], r) : new Pending(kind, S[1], r, S[2], S[3], S[4], null)
  }

  // The AbortSignal the node-redis calls of one EPOCH_MS share: aborted when
  // the deadline of the last of them passes, so that a command still queued
  // while the client is offline is withdrawn (one already sent may still
  // run: its tokens may be spent).
  class Epoch {
    constructor(opened) {
      this.opened = opened
      this.controller = new AbortController()
      // One listener a queued command: no leak warning for them.
      setMaxListeners(0, this.controller.signal)
      this.options = { abortSignal: this.controller.signal }
      this.last = null
    }
  }

  // Runs the calls of one engine with one client: the deadline wheel, the
  // batch queue, the templates and the counters.
  class Driver {
    // The engine, held while calls are in flight (its number is freed with
    // it), and its number in the native table.
    #engine
    #h
    #adapter
    #ms
    #batching
    #templates = []
    // The script of the calls without a template, by join class.
    #scripts = []
    #stats = { calls: 0, evals: 0, timeouts: 0, errors: 0, batches: 0, batched: 0 }
    // Commands sent and not yet answered (a batch is one).
    #inFlight = 0
    // The wheel: every call begun, in the order it began (and so of its
    // deadline), from #head on; the one timer, armed while calls wait.
    #wheel = []
    #head = 0
    #timer = null
    // The batch queue, and whether its flush is due at the end of the turn.
    #queue = []
    #flushing = false
    #epoch = null
    // While the wheel's loop runs (it moves #head itself).
    #ticking = false

    constructor(engine, adapter, batching) {
      this.#engine = engine
      this.#h = engine.handle
      this.#adapter = adapter
      this.#ms = engine.timeout * 1000
      this.#batching = batching
      if (adapter.cluster) redisUseSlots(this.#h)
    }

    get stats() {
      return { ...this.#stats }
    }

    // A check: the decision, from Redis or from the engine at once. Throws
    // for bad arguments (the caller turns that into a rejection).
    check(key, n, scope, atUs) {
      const redisKey = rawBegin(this.#h, key, n, scope, atUs)
      if (S[0] === 0) return Promise.resolve(decisionAt(ANSWER))
      return this.#go(begun(CHECK, redisKey))
    }

    // A reservation: `{ granted, wait, source, call }`.
    reserve(key, n, maxWait) {
      const redisKey = rawBeginReserve(this.#h, key, n, maxWait, undefined)
      if (S[0] === 0) return Promise.resolve(reservedAt(ANSWER, -1))
      return this.#go(begun(RESERVE, redisKey))
    }

    // A wait for `n` tokens for `key` (acquire): the engine's steps, its
    // calls through the queue like checks, its sleeps here; what `listen`
    // gives is awaited before the first. Resolves with the source that
    // answered.
    async acquire(key, n, timeout, signal, listen) {
      const h = this.#h
      const a = rawAcquire(h, key, n, timeout, undefined)
      // Whether the engine forgot the wait already (it ended).
      let over = false
      try {
        const listening = listen()
        if (listening !== undefined) await listening
        for (;;) {
          const redisKey = rawAcquireStep(h, a)
          const what = S[0]
          if (what === STEP_CALL) {
            await this.#go(begun(WAIT, redisKey))
            continue
          }
          const value = S[ANSWER]
          if (what === STEP_DONE || what === STEP_EXCEEDED) {
            over = true
            if (what === STEP_DONE) return SOURCES[value]
            throw new RateLimitExceededError(value)
          }
          if (what !== STEP_SLEEP) throw new Error(`ratebound: unknown step ${what}`)
          try {
            await sleep(Math.min(Math.ceil(value * 1000), MAX_SLEEP_MS), signal)
          } catch (e) {
            // Given up: what the wait holds goes back (the engine forgets
            // the wait: its number may be another's by the time that is
            // done).
            const back = rawAcquireAbandon(h, a)
            over = true
            if (S[0] === STEP_CALL) await this.#go(begun(WAIT, back))
            throw e
          }
        }
      } finally {
        if (!over) rawAcquireForget(a)
      }
    }

    // Runs a RedisCall of the engine's slower steps (pauses, a
    // reservation's give-back, drains) alone within the deadline: resolves
    // (never rejects) with { reply } or TIMEOUT or { error }.
    run(call) {
      const command = call.command()
      const e = new Pending(RAW, -1, command[1], -1, -1, 0, null)
      e.words = [command[0], call.text, command.slice(2)]
      return this.#go(e)
    }

    #go(e) {
      const p = new Promise((resolve) => {
        e.resolve = resolve
      })
      e.deadline = performance.now() + this.#ms
      this.#wheel.push(e)
      if (this.#timer === null) this.#arm(this.#ms)
      if (this.#batching && e.cls >= 0) {
        this.#queue.push(e)
        if (!this.#flushing) {
          this.#flushing = true
          process.nextTick(this.#flush)
        }
      } else {
        this.#sendOne(e)
      }
      return p
    }

    // ---------------------------------------------------------- the wheel

    #arm(ms) {
      const timer = setTimeout(this.#tick, ms)
      // The wheel never keeps the process alive by itself.
      if (typeof timer.unref === 'function') timer.unref()
      this.#timer = timer
    }

    // Expires every call whose deadline passed; re-armed for the next one
    // (none left: the timer stops until a call begins).
    #tick = () => {
      this.#timer = null
      const now = performance.now()
      const wheel = this.#wheel
      let i = this.#head
      this.#ticking = true
      while (i < wheel.length) {
        const e = wheel[i]
        if (!e.done) {
          if (e.deadline > now) break
          this.#expire(e)
        }
        i++
      }
      this.#ticking = false
      this.#head = i
      this.#shrink()
      if (this.#head < wheel.length) this.#arm(Math.max(1, Math.ceil(wheel[this.#head].deadline - now)))
    }

    // Drops the answered calls at the wheel's head.
    #shrink() {
      const wheel = this.#wheel
      let i = this.#head
      while (i < wheel.length && wheel[i].done) i++
      if (i === wheel.length) {
        if (i === 1) wheel.pop()
        else wheel.length = 0
        this.#head = 0
      } else if (i > 1024 && i * 2 > wheel.length) {
        wheel.splice(0, i)
        this.#head = 0
      } else {
        this.#head = i
      }
    }

    #settle(e, value) {
      e.done = true
      if (!this.#ticking && this.#wheel[this.#head] === e) this.#shrink()
      e.resolve(value)
    }

    // No answer within the deadline: the fail policy's (the call may still
    // run: its tokens may be spent).
    #expire(e) {
      this.#stats.timeouts++
      const epoch = e.epoch
      if (epoch !== null && epoch.last === e) epoch.controller.abort()
      this.#finishOne(e, TIMED_OUT, 0, undefined)
    }

    // ------------------------------------------------------ one call alone

    // [sha, text, args, batchSha, batchText] of a call: its template's,
    // or for a call without one (an explicit time, a wait's own deadline)
    // its class's script (kept) and its own arguments.
    #words(e) {
      if (e.words !== null) return e.words
      if (e.template >= 0) {
        const t = this.#templates[e.template]
        return t !== undefined ? t : (this.#templates[e.template] = redisTemplate(this.#h, e.template))
      }
      let script = e.cls >= 0 ? this.#scripts[e.cls] : undefined
      if (script === undefined) {
        script = redisCallScript(e.id)
        if (e.cls >= 0) this.#scripts[e.cls] = script
      }
      return (e.words = [script[0], script[1], e.args.slice(1), script[2], script[3]])
    }

    #options(e) {
      if (!this.#adapter.abortable) return undefined
      const now = performance.now()
      let epoch = this.#epoch
      if (epoch === null || now - epoch.opened > EPOCH_MS) epoch = this.#epoch = new Epoch(now)
      e.epoch = epoch
      epoch.last = e
      return epoch.options
    }

    #sendOne(e) {
      const words = this.#words(e)
      const options = this.#options(e)
      this.#inFlight++
      this.#stats.calls++
      let sent
      try {
        sent = this.#adapter.one(words[0], e.key, words[2], options)
      } catch (err) {
        this.#oneFailed(e, err, options)
        return
      }
      Promise.resolve(sent).then(
        (reply) => this.#oneReplied(e, reply),
        (err) => this.#oneFailed(e, err, options),
      )
    }

    #oneReplied(e, reply) {
      this.#inFlight--
      if (e.done) return
      if (e.kind === RAW) {
        this.#settle(e, { reply })
        return
      }
      const len = putReply(reply)
      this.#finishOne(e, len < 0 ? MALFORMED : REPLIED, len, undefined)
    }

    #oneFailed(e, err, options) {
      if (!e.done && isNoScript(err) && !e.evaled) {
        // Not loaded on this server (a restart, a failover, SCRIPT FLUSH,
        // another cluster node): EVAL loads it. Same deadline.
        e.evaled = true
        this.#stats.evals++
        const words = this.#words(e)
        let sent
        try {
          sent = this.#adapter.oneEval(words[1], e.key, words[2], options)
        } catch (err2) {
          this.#oneFailed(e, err2, options)
          return
        }
        Promise.resolve(sent).then(
          (reply) => this.#oneReplied(e, reply),
          (err2) => this.#oneFailed(e, err2, options),
        )
        return
      }
      this.#inFlight--
      if (e.done) return
      this.#stats.errors++
      if (e.kind === RAW) {
        this.#settle(e, { error: errorText(err) })
        return
      }
      this.#finishOne(e, FAILED, 0, errorText(err))
    }

    #finishOne(e, how, len, text) {
      if (e.kind === RAW) {
        this.#settle(e, how === TIMED_OUT ? TIMEOUT : { error: text })
        return
      }
      rawFinish(this.#h, e.id, how, len, text)
      this.#settle(e, answerOf(e, ANSWER))
    }

    // ------------------------------------------------------------ batches

    // The queue goes out: per join class and hash slot, up to MAX_BATCH
    // calls a script run (a group of one alone).
    #flush = () => {
      this.#flushing = false
      const queue = this.#queue
      if (queue.length === 0) return
      this.#queue = []
      const first = queue[0]
      let same = true
      for (let i = 1; i < queue.length; i++) {
        if (queue[i].cls !== first.cls || queue[i].slot !== first.slot) {
          same = false
          break
        }
      }
      if (same) {
        if (queue.length >= SPLIT_AT && this.#inFlight === 0) {
          // Two script runs rather than one: Redis runs the second while
          // this process reads the first's answers (and the callers ask
          // again), instead of each waiting for the other in turn.
          const half = Math.ceil(queue.length / 2)
          this.#sendGroup(queue.slice(0, half))
          this.#sendGroup(queue.slice(half))
          return
        }
        this.#sendGroup(queue)
        return
      }
      const groups = new Map()
      for (const e of queue) {
        const k = e.cls * 16384 + e.slot
        const g = groups.get(k)
        if (g === undefined) groups.set(k, [e])
        else g.push(e)
      }
      for (const g of groups.values()) this.#sendGroup(g)
    }

    #sendGroup(group) {
      let live = group
      for (const e of group) {
        if (e.done) {
          live = group.filter((x) => !x.done)
          break
        }
      }
      for (let i = 0; i < live.length; i += MAX_BATCH) {
        const part = live.length <= MAX_BATCH ? live : live.slice(i, i + MAX_BATCH)
        if (part.length === 1) this.#sendOne(part[0])
        else this.#sendMany(part)
      }
    }

    // The keys then the arguments of the batch of `members` (calls of one
    // join class), laid out as the engine's BatchCall lays them out: the
    // clock argument once, then each call's arguments after it, in order;
    // null when they do not join. redis_batch.test.js sends checks of
    // different n in one batch, with templates and without (an explicit
    // time): the answers of one call each.
    #flat(members) {
      const n = members.length
      let per = -1
      const flat = []
      for (let i = 0; i < n; i++) flat.push(members[i].key)
      for (let i = 0; i < n; i++) {
        const args = this.#words(members[i])[2]
        if (i === 0) {
          per = args.length
          flat.push(args[0])
        } else if (args.length !== per) {
          return null
        }
        for (let j = 1; j < per; j++) flat.push(args[j])
      }
      return flat
    }

    #sendMany(members) {
      const n = members.length
      const flat = this.#flat(members)
      if (flat === null) {
        // They do not join after all: one by one.
        for (const e of members) this.#sendOne(e)
        return
      }
      const words = this.#words(members[0])
      // One signal for the batch, aborted when its last member's deadline
      // passes.
      const options = this.#options(members[n - 1])
      const epoch = members[n - 1].epoch
      for (let i = 0; i < n - 1; i++) members[i].epoch = epoch
      this.#inFlight++
      this.#stats.calls++
      this.#stats.batches++
      this.#stats.batched += n
      const batch = { members, flat, words, options, evaled: false }
      let sent
      try {
        sent = this.#adapter.many(words[3], n, flat, options)
      } catch (err) {
        this.#manyFailed(batch, err)
        return
      }
      Promise.resolve(sent).then(
        (reply) => this.#manyReplied(batch, reply),
        (err) => this.#manyFailed(batch, err),
      )
    }

    // Writes the numbers of the members still waiting at IDS (-1 for those
    // answered already); how many wait.
    #waiting(members) {
      let live = 0
      for (let i = 0; i < members.length; i++) {
        const e = members[i]
        if (e.done) {
          S[IDS + i] = -1
        } else {
          S[IDS + i] = e.id
          live++
        }
      }
      return live
    }

    #manyReplied(batch, reply) {
      this.#inFlight--
      const members = batch.members
      if (this.#waiting(members) === 0) return
      const len = putReply(reply)
      this.#finishMany(members, len < 0 ? MALFORMED : REPLIED, len, undefined)
    }

    #manyFailed(batch, err) {
      const members = batch.members
      const live = members.some((e) => !e.done)
      if (live && isNoScript(err) && !batch.evaled) {
        batch.evaled = true
        this.#stats.evals++
        let sent
        try {
          sent = this.#adapter.manyEval(batch.words[4], members.length, batch.flat, batch.options)
        } catch (err2) {
          this.#manyFailed(batch, err2)
          return
        }
        Promise.resolve(sent).then(
          (reply) => this.#manyReplied(batch, reply),
          (err2) => this.#manyFailed(batch, err2),
        )
        return
      }
      this.#inFlight--
      if (!live) return
      this.#stats.errors++
      this.#waiting(members)
      this.#finishMany(members, FAILED, 0, errorText(err))
    }

    // The members waiting (their numbers at IDS) get their answers.
    #finishMany(members, how, len, text) {
      const n = members.length
      rawFinishBatch(this.#h, n, how, len, text)
      for (let i = 0; i < n; i++) {
        if (S[IDS + i] < 0) continue
        const e = members[i]
        this.#settle(e, answerOf(e, OUT + i * STRIDE))
      }
    }
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
      this.#driver = new Driver(this.#engine, adapter, batch)
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

    async #result(call) {
      const r = await this.#driver.run(call)
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
    acquire(key, n, options) {
      const signal = options == null ? undefined : options.signal
      if (signal && signal.aborted) return Promise.reject(abortError(signal))
      const timeout = options == null || options.timeout == null ? undefined : options.timeout
      return this.#driver.acquire(key, n, timeout, signal, this.#listener)
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
      const r = await this.#driver.reserve(key, n, maxWait)
      // Refused (nothing taken): the package's RateLimitExceededError, as
      // for local limiters.
      if (!r.granted) throw new RateLimitExceededError(r.wait)
      let call = r.call
      const engine = this.#engine
      const driver = this.#driver
      return {
        delay: r.wait,
        source: r.source,
        async cancel() {
          const c = call
          call = null
          if (c === null) return false
          const back = await driver.run(engine.giveBack(c))
          return back !== TIMEOUT && back.error === undefined
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
     * Counters since creation: `calls` (script calls sent: round trips; a
     * batch is one), `evals` (NOSCRIPT answered with EVAL), `timeouts`,
     * `errors`, `batches` (of the calls, batches of several checks) and
     * `batched` (the checks that went in them).
     */
    get stats() {
      return this.#driver.stats
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
