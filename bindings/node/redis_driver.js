'use strict'
// The native side of the Redis drivers (redis.js): the Driver that runs
// the calls of one engine with one client. Its parts are in two files:
//   redis_raw.js     the raw native calls and their shared Float64Array,
//                    the calls in flight (Pending), reply and answer;
//   redis_flight.js  the sends the crate's plan::Turns asks for (the
//                    queue, the batches, the back-pressure, the
//                    deadline wheel and the abort signals are its
//                    rule), by ticket (Flight, which the Driver extends).
// The client adapters it sends through are redis_clients.js'.
//
// The Driver runs the calls like the Rust driver
// (crates/ratebound-redis/src/driver/mod.rs):
//
//   EVALSHA <sha> 1 <key> <args...>, and on NOSCRIPT  EVAL <text> 1 <key> <args...>
//
// once, both within ONE deadline. A timeout or any client error is an
// outcome handed to the engine, never a rejection.

const { setMaxListeners } = require('node:events')
const { errorText, clientHealth } = require('./redis_clients.js')
const redisRaw = require('./redis_raw.js')
const redisFlight = require('./redis_flight.js')

const { clock } = redisRaw

// Called once by redis.js with the addon and what the package defines
// (ratebound.js: `drive`, which runs every wait's steps): the Driver class,
// TIMEOUT (what a RedisCall run alone resolves with when its deadline
// passed) and integers (a RedisCall's reply as the engine takes it).
module.exports = function redisDriver(native, { drive }) {
  const { redisTemplate, redisCallScript, redisUseSlots, redisDrop, redisMisconfigured, redisHeard } = native
  const raw = redisRaw(native)
  const { S, C_STEP, rawBegin, rawBeginReserve, rawAcquire, rawAcquireStep, rawAcquireAbandon, rawAcquireForget, rawFinish } = raw
  const { rawCarry, IDS } = raw
  const { ANSWER, SOURCES, STEP_CALL, STEP_DONE, STEP_EXCEEDED, REPLIED, TIMED_OUT, FAILED, MALFORMED } = raw
  const { CHECK, RESERVE, RAW, WAIT, integers, putReply, decisionAt, reservedAt, answerOf, TIMEOUT, Pending, begun } = raw
  const Flight = redisFlight(native, raw)

  // A new AbortSignal for node-redis' commands (when it opens and when it
  // is aborted is the rule of the crate's plan::Turns: `carry`): its
  // controller and the options that carry it.
  function signal() {
    const controller = new AbortController()
    // One listener a queued command: no leak warning for them.
    setMaxListeners(0, controller.signal)
    return { controller, options: { abortSignal: controller.signal } }
  }

  // Runs the calls of one engine with one client: the templates, the calls
  // sent alone, the client's health and the engine's notices; the deadline
  // wheel, the batch queue and the counters are its Flight's.
  class Driver extends Flight {
    // The engine, held while calls are in flight (its number is freed with
    // it), and its number in the native table.
    #engine
    #h
    #templates = []
    // The script of the calls without a template, by join class.
    #scripts = []
    // The signal the sends carry now (see _options).
    #signal = null
    // The application's client and what it last said of its connection
    // (redis_clients.js' clientHealth), and the typed error for the last
    // text that said (cached: texts repeat at every reconnection).
    #client
    #health
    #said = null
    #saidBad = null

    constructor(engine, adapter, batching, client) {
      super(engine.handle, engine.timeout * 1000, adapter, batching)
      this.#client = client
      this.#health = clientHealth(client)
      this.#engine = engine
      this.#h = engine.handle
      if (adapter.cluster) redisUseSlots(this.#h)
    }

    // The driver's counters, the engine's answers by path and the breaker.
    get stats() {
      return { ...this._counters(), ...this.#engine.stats }
    }

    // A check: the decision, from Redis or from the engine at once. Throws
    // for bad arguments (the caller turns that into a rejection).
    check(key, n, scope, atUs) {
      if (this.#health.error !== null) this.#refuseNow()
      const redisKey = rawBegin(this.#h, key, n, scope, atUs)
      if (S[C_STEP] === 0) return Promise.resolve(decisionAt(ANSWER))
      return this._go(begun(CHECK, redisKey))
    }

    // A reservation: `{ granted, wait, source, call }`.
    reserve(key, n, maxWait) {
      if (this.#health.error !== null) this.#refuseNow()
      const redisKey = rawBeginReserve(this.#h, key, n, maxWait, undefined)
      if (S[C_STEP] === 0) return Promise.resolve(reservedAt(ANSWER, -1))
      return this._go(begun(RESERVE, redisKey))
    }

    // A wait for `n` tokens for `key` (acquire): the engine's steps, run by
    // the package's one `drive` (its calls through the queue like checks);
    // what `listen` gives is awaited before the first. Resolves with the
    // source that answered.
    async acquire(key, n, timeout, signal, listen) {
      if (this.#health.error !== null) this.#refuseNow()
      const h = this.#h
      const a = rawAcquire(h, key, n, timeout, undefined)
      // Whether the engine forgot the wait already (it ended).
      let over = false
      const step = () => {
        const redisKey = rawAcquireStep(h, a)
        const what = S[C_STEP]
        if (what === STEP_CALL) return [what, begun(WAIT, redisKey)]
        if (what === STEP_DONE || what === STEP_EXCEEDED) over = true
        return [what, what === STEP_DONE ? SOURCES[S[ANSWER]] : S[ANSWER]]
      }
      // Given up: what the wait holds goes back (the engine forgets the
      // wait: its number may be another's by the time that is done).
      const abandon = () => {
        const back = rawAcquireAbandon(h, a)
        over = true
        if (S[C_STEP] === STEP_CALL) return this._go(begun(WAIT, back))
        return undefined
      }
      try {
        const listening = listen()
        if (listening !== undefined) await listening
        return await drive(step, abandon, { signal, timeout }, (e) => this._go(e))
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
      return this._go(e)
    }

    // A misconfigured client (its typed error): the caller's promise
    // rejects with it (a RAW call resolves with it as `misconfigured`), and
    // the engine never hears of the call — neither the fail policy nor the
    // breaker answers for a mistake in the configuration.
    _refuse(e, bad, text) {
      if (e.kind === RAW) {
        this._settle(e, { error: text, misconfigured: bad })
        return
      }
      redisDrop(e.id)
      this._settle(e, undefined, bad)
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
    _misconfigured(text) {
      let bad = null
      try {
        redisMisconfigured(this.#h, text)
      } catch (err) {
        bad = err
      }
      this._bad = bad
      return bad
    }

    // The typed error of the client's last failure, when it said the
    // client is misconfigured, else null: what a late call then is.
    _misconfiguredNow() {
      // The client may have been given its error listener since.
      if (!this.#health.watching) this.#health = clientHealth(this.#client)
      return this._bad ?? this.#clientSaid()
    }

    // No answer within the deadline: the fail policy's (the call may still
    // run: its tokens may be spent) — unless the client's last failure said
    // it is misconfigured (`bad`, its typed error).
    _expire(e, bad) {
      if (bad !== null) {
        this._stats.errors++
        this._refuse(e, bad, bad.message)
        return
      }
      this._finishOne(e, TIMED_OUT, 0, undefined)
    }

    // ------------------------------------------------------ one call alone

    // [sha, text, args, batchSha, batchText] of a call: its template's,
    // or for a call without one (an explicit time, a wait's own deadline)
    // its class's script (kept) and its own arguments.
    _words(e) {
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

    // The options of the command that carries `e` alone, or `members` (a
    // batch); undefined: the client takes none. The turns say when a new
    // signal opens (and, as calls settle, when one is aborted).
    _options(e, members) {
      if (!this._adapter.abortable) return undefined
      const calls = members === undefined ? [e] : members
      for (let i = 0; i < calls.length; i++) S[IDS + i] = calls[i].ticket
      if (rawCarry(this.#h, calls.length, clock.now()) !== 0) this.#signal = signal()
      const s = this.#signal
      for (let i = 0; i < calls.length; i++) calls[i].controller = s.controller
      return s.options
    }

    _sendOne(e) {
      this.#send(e, 0, this._adapter.one, this._options(e))
    }

    // Sends `e` alone with `how` (the adapter's `one`, or `oneEval` after a
    // NOSCRIPT) and the script at `script` of its words (sha or text).
    #send(e, script, how, options) {
      const words = this._words(e)
      this._wire(
        () => how.call(this._adapter, words[script], e.key, words[2], options),
        (reply) => this.#oneReplied(e, reply),
        (err) => this.#oneFailed(e, err, options),
      )
    }

    #oneReplied(e, reply) {
      this._replied()
      if (e.done) {
        // Late, but Redis is alive.
        redisHeard(this.#h)
        return
      }
      if (e.kind === RAW) {
        this._settle(e, { reply })
        return
      }
      const len = putReply(reply)
      this._finishOne(e, len < 0 ? MALFORMED : REPLIED, len, undefined)
    }

    #oneFailed(e, err, options) {
      if (!e.done && !e.evaled && this._noScript(err)) {
        // Not loaded on this server (a restart, a failover, SCRIPT FLUSH,
        // another cluster node): EVAL loads it. Same deadline.
        e.evaled = true
        this._stats.evals++
        this.#send(e, 1, this._adapter.oneEval, options)
        return
      }
      this._failed()
      const text = errorText(err)
      const bad = this._misconfigured(text)
      if (e.done) return
      this._stats.errors++
      if (bad !== null) {
        this._refuse(e, bad, text)
        return
      }
      if (e.kind === RAW) {
        this._settle(e, { error: text })
        return
      }
      this._finishOne(e, FAILED, 0, text)
    }

    _finishOne(e, how, len, text) {
      if (e.kind === RAW) {
        this._settle(e, how === TIMED_OUT ? TIMEOUT : { error: text })
        return
      }
      const told = rawFinish(this.#h, e.id, how, len, text)
      const answer = answerOf(e, ANSWER)
      this._settle(e, answer)
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
  }

  return { Driver, TIMEOUT, integers }
}

// For the tests only (__test__/redis_deadline.test.js).
module.exports.clock = clock
