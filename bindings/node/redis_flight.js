'use strict'
// When the calls of a Redis driver (redis_driver.js) go out and when they
// are late is the rule of ratebound-redis' plan::Turns
// (crates/ratebound-redis/src/plan/turns.rs: the queue, the batches of a
// turn, the back-pressure, Redis-slow mode and the deadline wheel, with
// their measured tunables), kept in the native table beside the engine.
// This half of the Driver (Flight, which the Driver extends) does what it
// says: it holds the callers by ticket, sends, runs the one timer, and
// tells it when a caller has its answer and when a send is over.
//
// Batching: a check waits for the end of the current turn of the event
// loop (process.nextTick), when the queue goes out as one script run per
// join class and hash slot (the engine's BatchCall), each key decided in
// order exactly as separate calls would decide it. A call's deadline
// counts from when the client has written it: node-redis writes in a
// setImmediate of its own, ioredis at the end of the turn
// (redis_clients.js), so the deadlines are stamped in a setImmediate
// queued after the client's. The timer looks for late calls only after
// the event loop has read the sockets (setImmediate): an answer that
// arrived while this process was busy is an answer, not a timeout.

const { errorText } = require('./redis_clients.js')
const { clock } = require('./redis_raw.js')

// Called once by redis_driver.js with the addon and redisRaw's answer.
module.exports = function redisFlight(native, raw) {
  const { redisHeard, redisTurnsOpen, redisTurnsStats, redisIsNoScript } = native
  const { S, rawFinishBatch, rawEnter, rawSettle, rawLanded, rawStamp, rawFlush, rawSweep, TURNS } = raw
  const { IDS, OUT, STRIDE, REPLIED, TIMED_OUT, FAILED, MALFORMED, UNSENT, RAW, putReply, answerOf } = raw
  const { one: ONE, many: MANY, unsent: OUT_UNSENT, timedOut: OUT_TIMED_OUT } = TURNS
  const { ticketAt: TICKET, asksAt: ASKS, timerAt: TIMER, planAt: PLAN } = TURNS
  const { goNow: GO_NOW, goUnsent: GO_UNSENT, askFlush: ASK_FLUSH, askStamp: ASK_STAMP, askAbort: ASK_ABORT } = TURNS

  // The callers and sends of one Driver. What a Driver gives it:
  // _sendOne(e), _finishOne(e, how, len, text), _expire(e, bad),
  // _misconfiguredNow(), _words(e), _options(e, members),
  // _misconfigured(text), _refuse(e, bad, text) and notices(); the members
  // both classes use are named `_x` (a `#x` is private to one class body).
  class Flight {
    #h
    _adapter
    // The driver's own counters (the rest are the turns').
    _stats = { evals: 0, errors: 0 }
    // The callers waiting, by ticket.
    #calls = []
    // The typed error of the client's last failure when it said the client
    // is misconfigured (a wrong password, a missing ACL permission, an
    // unknown database), until Redis answers again: a call that then gets
    // no answer in time is that error too, not the fail policy's.
    _bad = null

    constructor(h, ms, adapter, batching) {
      this.#h = h
      this._adapter = adapter
      redisTurnsOpen(h, ms, batching)
    }

    // The counters: the driver's and its turns'.
    _counters() {
      const [calls, timeouts, batches, batched, queued, unsent] = redisTurnsStats(this.#h)
      const { evals, errors } = this._stats
      return { calls, evals, timeouts, errors, batches, batched, queued, unsent }
    }

    _go(e) {
      const p = new Promise((resolve, reject) => {
        e.resolve = resolve
        e.reject = reject
      })
      const told = rawEnter(this.#h, e.cls, e.slot, e.kind === RAW ? 1 : 0, clock.now())
      const go = told & 3
      if (go === GO_UNSENT) {
        // This process' own overload: the call never leaves.
        this._finishOne(e, UNSENT, 0, undefined)
        return p
      }
      e.ticket = S[TICKET]
      this.#calls[e.ticket] = e
      if (go === GO_NOW) this._sendOne(e)
      this.#ask(told >> 2)
      return p
    }

    // What the turns asked for: a flush at the end of the turn, deadlines
    // once the client has written.
    #ask(asks) {
      if ((asks & ASK_FLUSH) !== 0) process.nextTick(this.#flush)
      if ((asks & ASK_STAMP) !== 0) setImmediate(this.#stamp)
    }

    #flush = () => {
      const plan = rawFlush(this.#h, clock.now())
      const asks = S[ASKS]
      this.#run(plan, null)
      this.#ask(asks)
    }

    #stamp = () => {
      const ms = rawStamp(this.#h, clock.now())
      if (ms >= 0) this.#arm(ms)
    }

    #arm(ms) {
      const timer = setTimeout(this.#tick, Math.max(1, Math.ceil(ms)))
      // The timer never keeps the process alive by itself.
      if (typeof timer.unref === 'function') timer.unref()
    }

    // A deadline passed: the late calls are looked for once the event loop
    // has read the sockets.
    #tick = () => {
      setImmediate(this.#sweep)
    }

    #sweep = () => {
      const bad = this._misconfiguredNow()
      const plan = rawSweep(this.#h, clock.now(), bad !== null ? 1 : 0)
      const timer = S[TIMER]
      const asks = S[ASKS]
      this.#run(plan, bad)
      if (timer >= 0) this.#arm(timer)
      this.#ask(asks)
    }

    // Does what the turns handed back: `plan` numbers at PLAN in `S`, or
    // an array of them (a plan too long for `S`); `bad`: the client's
    // typed error for a late call, if it said it is misconfigured. Nothing
    // it calls writes at PLAN.
    #run(plan, bad) {
      const inS = typeof plan === 'number'
      const out = inS ? S : plan
      const end = inS ? PLAN + plan : plan.length
      const calls = this.#calls
      const from = inS ? PLAN : 0
      for (let i = from; i < end; ) {
        const code = out[i]
        if (code === MANY) {
          const n = out[i + 1]
          const members = new Array(n)
          for (let j = 0; j < n; j++) members[j] = calls[out[i + 2 + j]]
          i += 2 + n
          this.#sendMany(members)
          continue
        }
        const e = calls[out[i + 1]]
        i += 2
        if (code === ONE) this._sendOne(e)
        else if (code === OUT_UNSENT) this._finishOne(e, UNSENT, 0, undefined)
        else if (code === OUT_TIMED_OUT) this._finishOne(e, TIMED_OUT, 0, undefined)
        else this._expire(e, bad)
      }
    }

    // The caller of `e` is answered `value` (or its promise rejected with
    // `error`); the turns hear of it, and may say to abort the signal its
    // send carried.
    _settle(e, value, error) {
      e.done = true
      const t = e.ticket
      if (t >= 0) {
        e.ticket = -1
        this.#calls[t] = undefined
        const asks = rawSettle(this.#h, t)
        if ((asks & ASK_ABORT) !== 0 && e.controller !== null) e.controller.abort()
        e.controller = null
        this.#ask(asks)
      }
      if (error === undefined) e.resolve(value)
      else e.reject(error)
    }

    // A command sent got its reply: Redis answers (no longer slow, nor
    // misconfigured).
    _replied() {
      this._bad = null
      this.#ask(rawLanded(this.#h, 1))
    }

    // A command sent failed for good (after its EVAL, if any).
    _failed() {
      rawLanded(this.#h, 0)
    }

    // Whether a client's failure says the server lacks the script: the
    // call's EVAL goes once, within the same deadline.
    _noScript(err) {
      return redisIsNoScript(errorText(err))
    }

    // ------------------------------------------------------------ batches

    // The keys then the arguments of the batch of `members` (calls of one
    // join class: arguments of one length), laid out as the engine's
    // BatchCall lays them out: the clock argument once, then each call's
    // arguments after it, in order. redis_batch.test.js sends checks of
    // different n in one batch, with templates and without (an explicit
    // time): the answers of one call each.
    #flat(members) {
      const n = members.length
      const flat = []
      for (let i = 0; i < n; i++) flat.push(members[i].key)
      for (let i = 0; i < n; i++) {
        const args = this._words(members[i])[2]
        for (let j = i === 0 ? 0 : 1; j < args.length; j++) flat.push(args[j])
      }
      return flat
    }

    #sendMany(members) {
      const flat = this.#flat(members)
      const words = this._words(members[0])
      const options = this._options(null, members)
      const batch = { members, flat, words, options, evaled: false }
      this.#sendBatch(batch, words[3], this._adapter.many)
    }

    // Sends `batch` with `how` (the adapter's `many`, or `manyEval` after a
    // NOSCRIPT) and script `script`.
    #sendBatch(batch, script, how) {
      this._wire(
        () => how.call(this._adapter, script, batch.members.length, batch.flat, batch.options),
        (reply) => this.#manyReplied(batch, reply),
        (err) => this.#manyFailed(batch, err),
      )
    }

    // Runs `send()` (a client's call, which may throw or reject): its reply
    // goes to `replied`, its failure to `failed`.
    _wire(send, replied, failed) {
      let sent
      try {
        sent = send()
      } catch (err) {
        failed(err)
        return
      }
      Promise.resolve(sent).then(replied, failed)
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
      this._replied()
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
      if (live && !batch.evaled && this._noScript(err)) {
        batch.evaled = true
        this._stats.evals++
        this.#sendBatch(batch, batch.words[4], this._adapter.manyEval)
        return
      }
      this._failed()
      const text = errorText(err)
      const bad = this._misconfigured(text)
      if (!live) return
      this._stats.errors++
      if (bad !== null) {
        for (const e of members) if (!e.done) this._refuse(e, bad, text)
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
        this._settle(e, answerOf(e, OUT + i * STRIDE))
      }
      if ((told & 2) !== 0) this.notices()
    }
  }

  return Flight
}
