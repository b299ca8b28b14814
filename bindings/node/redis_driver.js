'use strict'
// The native side of the Redis drivers (redis.js): the raw native calls and
// their shared Float64Array, the calls in flight (Pending) and the
// AbortSignal they share (Epoch), the deadline wheel, and the Driver that
// runs the calls of one engine with one client, batched per turn of the
// event loop. The client adapters it sends through are redis_clients.js'.
//
// The Driver runs the calls like the Rust driver
// (crates/ratebound-redis/src/driver.rs):
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

const { setMaxListeners } = require('node:events')
const { isNoScript, errorText } = require('./redis_clients.js')

// Called once by redis.js with the addon and what the package defines
// (ratebound.js): the Driver class, TIMEOUT (what a RedisCall run alone
// resolves with when its deadline passed) and integers (a RedisCall's reply
// as the engine takes it).
module.exports = function redisDriver(native, { RateLimitExceededError, sleep }) {
  const { redisTemplate, redisCallScript, redisKeep, redisUseSlots } = native
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
  // Node-redis calls begun within this many ms share one AbortSignal.
  const EPOCH_MS = 1

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

  return { Driver, TIMEOUT, integers }
}
