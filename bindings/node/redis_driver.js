'use strict'
// The native side of the Redis drivers (redis.js): the raw native calls and
// their shared Float64Array, the calls in flight (Pending) and the
// AbortSignal they share (Epoch), the deadline wheel, and the Driver that
// runs the calls of one engine with one client, batched per turn of the
// event loop. The client adapters it sends through are redis_clients.js'.
//
// The Driver runs the calls like the Rust driver
// (crates/ratebound-redis/src/driver/mod.rs):
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
// Back-pressure: a limiter has at most IN_FLIGHT keys in batches sent and
// not yet answered, or IN_FLIGHT / ALONE calls sent alone (a call alone
// costs Redis and the client about as much as ALONE keys of a batch).
// Beyond that calls wait in its queue, in order, and go out as answers come
// back; a call's deadline counts from when the client has written it,
// so the time it waited here — this process's own load, never
// Redis' — is not the fail policy's business. Beyond MAX_QUEUED waiting,
// a call never leaves: the engine is told it was unsent (a check is refused
// with source 'busy', the breaker untouched). The deadline wheel's timer
// looks for late calls only after the event loop has read the sockets
// (setImmediate): an answer that arrived while this process was busy is an
// answer, not a timeout.

const { setMaxListeners } = require('node:events')
const { isNoScript, errorText, clientHealth } = require('./redis_clients.js')

// Where the deadlines read the time (ms): the one place, so that a test
// can put the wheel on virtual time (with node:test's mock timers).
const clock = { now: () => performance.now() }

// Called once by redis.js with the addon and what the package defines
// (ratebound.js): the Driver class, TIMEOUT (what a RedisCall run alone
// resolves with when its deadline passed) and integers (a RedisCall's reply
// as the engine takes it).
module.exports = function redisDriver(native, { RateLimitExceededError, sleep }) {
  const { redisTemplate, redisCallScript, redisKeep, redisUseSlots, redisDrop, redisMisconfigured, redisHeard } = native
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
  const UNSENT = 4
  // What a call in flight was begun for.
  const CHECK = 0
  const RESERVE = 1
  const RAW = 2 // a RedisCall of the engine's slower steps: its reply as it came
  const WAIT = 3 // an acquire's call (or its give-back): the answer is the wait's
  // A queue of this many checks or more, with nothing in flight, goes out
  // as two batches.
  const SPLIT_AT = 8
  // Node-redis calls begun within this many ms share one AbortSignal.
  const EPOCH_MS = 1
  // The most calls a limiter has sent and not yet seen answered (or
  // expired); the rest wait in its queue. 256: 3 000 checks begun in one
  // turn, batched or not, all answered by Redis within the default 50 ms
  // deadline on a 2-core machine at a load average of 9 (512: a third of
  // the unbatched ones timed out; 128: none, but more round trips).
  const IN_FLIGHT = 256
  // What a call sent alone counts against IN_FLIGHT (a key in a batch: 1).
  // 3 000 checks begun in one turn with `batch: false`: 256 sent alone at
  // a time missed the deadline at a load average of 5 (the last of them
  // answered 60-120 ms after it went out); 64 at a time, none did.
  const ALONE = 4
  // The most calls waiting in that queue; beyond, a call is unsent at once.
  const MAX_QUEUED = 65536
  // A call that waited this many deadlines in the queue (at least
  // QUEUE_MIN_MS) is unsent: while Redis answers, IN_FLIGHT calls go out
  // per round trip; while it does not, per deadline.
  const QUEUE_DEADLINES = 20
  const QUEUE_MIN_MS = 1000

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
      // When it was queued (ms; clock.now()).
      this.since = 0
      this.done = false
      // Handed to the client: what it counts against IN_FLIGHT until
      // settled (0: not sent).
      this.sent = 0
      this.evaled = false
      this.epoch = null
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
    // The longest a call waits in the queue (ms).
    #queueMs
    // The calls handed to the client whose deadlines are not yet set.
    #launching = []
    #stamping = false
    #batching
    #templates = []
    // The script of the calls without a template, by join class.
    #scripts = []
    #stats = { calls: 0, evals: 0, timeouts: 0, errors: 0, batches: 0, batched: 0, queued: 0, unsent: 0 }
    // Commands sent and not yet answered (a batch is one).
    #inFlight = 0
    // Calls sent and not yet settled (a batch's members each count): at
    // most IN_FLIGHT.
    #load = 0
    // The wheel: every call sent, in the order its deadline was set (and
    // so, but for a call sent while Redis is slow, of its deadline), from
    // #head on; the one timer, armed while calls wait.
    #wheel = []
    #head = 0
    #timer = null
    // The queue (calls not yet sent, in order, from #first on), and
    // whether its flush is due at the end of the turn.
    #queue = []
    #first = 0
    #flushing = false
    #epoch = null
    // While the wheel's loop runs (it moves #head itself).
    #ticking = false
    // Whether the last call to end in flight got no answer in time (Redis
    // is slow or unreachable; cleared by the next answer): meanwhile one
    // call at a time is sent (ALONE), and a queued call that waited a
    // whole deadline is answered as timed out, the fail policy's — it
    // waited for Redis, not for this process.
    #slow = false
    // The typed error of the client's last failure when it said the client
    // is misconfigured (a wrong password, a missing ACL permission, an
    // unknown database), until Redis answers again: a call that then gets
    // no answer in time is that error too, not the fail policy's.
    #bad = null
    // The application's client and what it last said of its connection
    // (redis_clients.js' clientHealth), and the typed error for the last
    // text that said (cached: texts repeat at every reconnection).
    #client
    #health
    #said = null
    #saidBad = null

    constructor(engine, adapter, batching, client) {
      this.#client = client
      this.#health = clientHealth(client)
      this.#engine = engine
      this.#h = engine.handle
      this.#adapter = adapter
      this.#ms = engine.timeout * 1000
      this.#queueMs = Math.max(QUEUE_MIN_MS, QUEUE_DEADLINES * this.#ms)
      this.#batching = batching
      if (adapter.cluster) redisUseSlots(this.#h)
    }

    // The driver's counters, the engine's answers by path and the breaker.
    get stats() {
      return { ...this.#stats, ...this.#engine.stats }
    }

    // A check: the decision, from Redis or from the engine at once. Throws
    // for bad arguments (the caller turns that into a rejection).
    check(key, n, scope, atUs) {
      if (this.#health.error !== null) this.#refuseNow()
      const redisKey = rawBegin(this.#h, key, n, scope, atUs)
      if (S[0] === 0) return Promise.resolve(decisionAt(ANSWER))
      return this.#go(begun(CHECK, redisKey))
    }

    // A reservation: `{ granted, wait, source, call }`.
    reserve(key, n, maxWait) {
      if (this.#health.error !== null) this.#refuseNow()
      const redisKey = rawBeginReserve(this.#h, key, n, maxWait, undefined)
      if (S[0] === 0) return Promise.resolve(reservedAt(ANSWER, -1))
      return this.#go(begun(RESERVE, redisKey))
    }

    // A wait for `n` tokens for `key` (acquire): the engine's steps, its
    // calls through the queue like checks, its sleeps here; what `listen`
    // gives is awaited before the first. Resolves with the source that
    // answered.
    async acquire(key, n, timeout, signal, listen) {
      if (this.#health.error !== null) this.#refuseNow()
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
      if (this.#health.error !== null) {
        const bad = this.#clientSaid()
        if (bad !== null) return Promise.resolve({ error: bad.message, misconfigured: bad })
      }
      const command = call.command()
      const e = new Pending(RAW, -1, command[1], -1, -1, 0, null)
      e.words = [command[0], call.text, command.slice(2)]
      return this.#go(e)
    }

    #go(e) {
      const p = new Promise((resolve, reject) => {
        e.resolve = resolve
        e.reject = reject
      })
      const waiting = this.#queue.length - this.#first
      if (!this.#batching || e.cls < 0) {
        // Alone, at once, while there is room and no one waits before it.
        if (waiting === 0 && this.#load + ALONE <= (this.#slow ? ALONE : IN_FLIGHT)) {
          this.#sendOne(e)
          return p
        }
      }
      if (this.#load + waiting >= IN_FLIGHT || (!this.#batching && this.#load + ALONE > IN_FLIGHT)) this.#stats.queued++
      if (waiting >= MAX_QUEUED && e.kind !== RAW) {
        // This process' own overload: the call never leaves.
        this.#unsent(e)
        return p
      }
      e.since = clock.now()
      // Until it is sent, its deadline is the queue's.
      e.deadline = e.since + this.#queueMs
      this.#queue.push(e)
      this.#due()
      return p
    }

    // The queue's flush, at the end of the turn.
    #due() {
      if (!this.#flushing && this.#queue.length > this.#first) {
        this.#flushing = true
        process.nextTick(this.#flush)
      }
    }

    // A call that never left this client (its overload, not Redis'): the
    // engine answers without the fail policy or the breaker. A RAW call
    // (a pause, a give-back) is never unsent.
    #unsent(e) {
      this.#stats.unsent++
      this.#finishOne(e, UNSENT, 0, undefined)
    }

    // The calls that wait, up to `room` of them, in order (the queue kept
    // compact).
    #take(room) {
      const queue = this.#queue
      const from = this.#first
      const to = Math.min(queue.length, from + room)
      const taken = from === 0 && to === queue.length ? queue : queue.slice(from, to)
      if (to === queue.length) {
        this.#queue = []
        this.#first = 0
      } else if (to > 1024 && to * 2 > queue.length) {
        this.#queue = queue.slice(to)
        this.#first = 0
      } else {
        this.#first = to
      }
      return taken
    }

    // A call handed to the client: its deadline counts from when the
    // client has written it — node-redis writes in a setImmediate of its
    // own, ioredis at the end of the turn (redis_clients.js): the calls
    // handed over in a turn get their deadlines in a setImmediate queued
    // after the client's.
    #launch(e, cost) {
      e.sent = cost
      // Sent while Redis is slow after waiting for it in the queue: its
      // deadline still counts from when it was queued.
      if (!this.#slow) e.since = 0
      this.#load += cost
      this.#launching.push(e)
    }

    // After the client has the calls launched: their deadlines are set
    // once it has written them.
    #stampSoon() {
      if (!this.#stamping) {
        this.#stamping = true
        setImmediate(this.#stamp)
      }
    }

    #stamp = () => {
      this.#stamping = false
      const launched = this.#launching
      this.#launching = []
      const deadline = clock.now() + this.#ms
      for (const e of launched) {
        if (e.done) continue
        e.deadline = e.since === 0 ? deadline : Math.min(deadline, e.since + this.#ms)
        this.#wheel.push(e)
      }
      if (this.#timer === null && this.#head < this.#wheel.length) this.#arm(this.#ms)
    }

    // ---------------------------------------------------------- the wheel

    #arm(ms) {
      const timer = setTimeout(this.#tick, ms)
      // The wheel never keeps the process alive by itself.
      if (typeof timer.unref === 'function') timer.unref()
      this.#timer = timer
    }

    // A deadline passed: the late calls are looked for once the event loop
    // has read the sockets (an answer that came while this process was
    // busy is read first).
    #tick = () => {
      setImmediate(this.#sweep)
    }

    // Expires every call whose deadline passed; re-armed for the next one
    // (none left: the timer stops until a call begins).
    #sweep = () => {
      this.#timer = null
      const now = clock.now()
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
      let next = this.#head < wheel.length ? wheel[this.#head].deadline : Infinity
      if (this.#slow) {
        this.#expireQueued(now)
        // And when the next queued call will have waited a deadline.
        if (this.#queue.length > this.#first) next = Math.min(next, this.#queue[this.#first].since + this.#ms)
      }
      if (next !== Infinity) this.#arm(Math.max(1, Math.ceil(next - now)))
      this.#due()
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

    // The caller of `e` is answered `value` (or its promise rejected with
    // `error`).
    #settle(e, value, error) {
      e.done = true
      if (e.sent !== 0) {
        if (!this.#ticking && this.#wheel[this.#head] === e) this.#shrink()
        // Room in flight: the queue goes on.
        this.#load -= e.sent
        if (this.#load < IN_FLIGHT) this.#due()
      }
      if (error === undefined) e.resolve(value)
      else e.reject(error)
    }

    // A misconfigured client (its typed error): the caller's promise
    // rejects with it (a RAW call resolves with it as `misconfigured`), and
    // the engine never hears of the call — neither the fail policy nor the
    // breaker answers for a mistake in the configuration.
    #refuse(e, bad, text) {
      if (e.kind === RAW) {
        this.#settle(e, { error: text, misconfigured: bad })
        return
      }
      redisDrop(e.id)
      this.#settle(e, undefined, bad)
    }

    // The typed error when the client's last 'error' event said it is
    // misconfigured (and it has not been 'ready' since), else null.
    #clientSaid() {
      const text = this.#health.error
      if (text === null) return null
      if (text !== this.#said) {
        this.#said = text
        this.#saidBad = null
        try {
          redisMisconfigured(this.#h, text)
        } catch (err) {
          this.#saidBad = err
        }
      }
      return this.#saidBad
    }

    // Throws what the client said, if it said it is misconfigured: the
    // call is refused before it begins (the caller's promise rejects).
    #refuseNow() {
      const bad = this.#clientSaid()
      if (bad !== null) throw bad
    }

    // The typed error for a client's failure `text` when it says the client
    // is misconfigured (remembered until Redis answers), else null.
    #misconfigured(text) {
      let bad = null
      try {
        redisMisconfigured(this.#h, text)
      } catch (err) {
        bad = err
      }
      this.#bad = bad
      return bad
    }

    // No answer within the deadline: the fail policy's (the call may still
    // run: its tokens may be spent) — unless the client's last failure said
    // it is misconfigured.
    #expire(e) {
      const epoch = e.epoch
      if (epoch !== null && epoch.last === e) epoch.controller.abort()
      // The client may have been given its error listener since.
      if (!this.#health.watching) this.#health = clientHealth(this.#client)
      const bad = this.#bad ?? this.#clientSaid()
      if (bad !== null) {
        this.#stats.errors++
        this.#refuse(e, bad, bad.message)
        return
      }
      this.#stats.timeouts++
      this.#slow = true
      this.#finishOne(e, TIMED_OUT, 0, undefined)
    }

    // Redis is slow: the queued calls that waited a whole deadline for it
    // time out (the oldest first).
    #expireQueued(now) {
      const ms = this.#ms
      while (this.#queue.length > this.#first) {
        const e = this.#queue[this.#first]
        if (e.since + ms > now) break
        this.#take(1)
        this.#stats.timeouts++
        this.#finishOne(e, TIMED_OUT, 0, undefined)
      }
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
      const now = clock.now()
      let epoch = this.#epoch
      if (epoch === null || now - epoch.opened > EPOCH_MS) epoch = this.#epoch = new Epoch(now)
      e.epoch = epoch
      epoch.last = e
      return epoch.options
    }

    #sendOne(e) {
      const words = this.#words(e)
      this.#launch(e, ALONE)
      const options = this.#options(e)
      this.#inFlight++
      this.#stats.calls++
      let sent
      try {
        sent = this.#adapter.one(words[0], e.key, words[2], options)
      } catch (err) {
        this.#stampSoon()
        this.#oneFailed(e, err, options)
        return
      }
      this.#stampSoon()
      Promise.resolve(sent).then(
        (reply) => this.#oneReplied(e, reply),
        (err) => this.#oneFailed(e, err, options),
      )
    }

    #oneReplied(e, reply) {
      this.#inFlight--
      this.#bad = null
      if (this.#slow) {
        this.#slow = false
        this.#due()
      }
      if (e.done) {
        // Late, but Redis is alive.
        redisHeard(this.#h)
        return
      }
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
      const text = errorText(err)
      const bad = this.#misconfigured(text)
      if (e.done) return
      this.#stats.errors++
      if (bad !== null) {
        this.#refuse(e, bad, text)
        return
      }
      if (e.kind === RAW) {
        this.#settle(e, { error: text })
        return
      }
      this.#finishOne(e, FAILED, 0, text)
    }

    #finishOne(e, how, len, text) {
      if (e.kind === RAW) {
        this.#settle(e, how === TIMED_OUT ? TIMEOUT : { error: text })
        return
      }
      const told = rawFinish(this.#h, e.id, how, len, text)
      const answer = answerOf(e, ANSWER)
      this.#settle(e, answer)
      if ((told & 2) !== 0) this.notices()
    }

    // Every notice the engine holds (the breaker opened or closed, calls
    // refused as busy), emitted once each as a process warning
    // (`RateboundWarning`, code `RATEBOUND_REDIS`, `kind` the notice's).
    notices() {
      for (const n of this.#engine.takeNotices()) {
        const w = new Error(n.message)
        w.name = 'RateboundWarning'
        w.code = 'RATEBOUND_REDIS'
        w.kind = n.kind
        process.emitWarning(w)
      }
    }

    // ------------------------------------------------------------ batches

    // The queue goes out, as much of it as there is room in flight for
    // (the rest when answers come back): per join class and hash slot, up
    // to MAX_BATCH calls a script run (a group of one alone); calls that
    // never join (a pause, a give-back; every call with `batch: false`)
    // alone.
    #flush = () => {
      this.#flushing = false
      // While Redis is slow, one call at a time goes to it (the rest time
      // out in the queue, a deadline after they were queued).
      const room = (this.#slow ? ALONE : IN_FLIGHT) - this.#load
      if (room <= 0 || this.#queue.length === this.#first) return
      // The calls that waited too long never leave (the oldest first).
      const now = clock.now()
      if (this.#slow) this.#expireQueued(now)
      while (this.#queue.length > this.#first) {
        const e = this.#queue[this.#first]
        if (e.deadline > now || e.kind === RAW) break
        this.#take(1)
        this.#unsent(e)
      }
      if (this.#queue.length === this.#first) return
      const queue = this.#take(this.#batching ? room : Math.max(1, Math.floor(room / ALONE)))
      if (!this.#batching) {
        for (const e of queue) this.#sendOne(e)
        return
      }
      const first = queue[0]
      let same = first.cls >= 0
      for (let i = 1; same && i < queue.length; i++) {
        if (queue[i].cls !== first.cls || queue[i].slot !== first.slot) same = false
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
        if (e.cls < 0) {
          this.#sendOne(e)
          continue
        }
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
        // They do not join after all (arguments of different lengths): by
        // their lengths.
        const parts = new Map()
        for (const e of members) {
          const k = this.#words(e)[2].length
          const part = parts.get(k)
          if (part === undefined) parts.set(k, [e])
          else part.push(e)
        }
        for (const part of parts.values()) {
          if (part.length === 1) this.#sendOne(part[0])
          else this.#sendMany(part)
        }
        return
      }
      const words = this.#words(members[0])
      for (let i = 0; i < n; i++) this.#launch(members[i], 1)
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
        this.#stampSoon()
        this.#manyFailed(batch, err)
        return
      }
      this.#stampSoon()
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
      this.#bad = null
      if (this.#slow) {
        this.#slow = false
        this.#due()
      }
      const members = batch.members
      if (this.#waiting(members) === 0) {
        // Late, but Redis is alive.
        redisHeard(this.#h)
        return
      }
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
      const text = errorText(err)
      const bad = this.#misconfigured(text)
      if (!live) return
      this.#stats.errors++
      if (bad !== null) {
        for (const e of members) if (!e.done) this.#refuse(e, bad, text)
        return
      }
      this.#waiting(members)
      this.#finishMany(members, FAILED, 0, text)
    }

    // The members waiting (their numbers at IDS) get their answers.
    #finishMany(members, how, len, text) {
      const n = members.length
      const told = rawFinishBatch(this.#h, n, how, len, text)
      for (let i = 0; i < n; i++) {
        if (S[IDS + i] < 0) continue
        const e = members[i]
        this.#settle(e, answerOf(e, OUT + i * STRIDE))
      }
      if ((told & 2) !== 0) this.notices()
    }
  }

  return { Driver, TIMEOUT, integers }
}

// For the tests only (__test__/redis_deadline.test.js).
module.exports.clock = clock
