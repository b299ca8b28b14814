'use strict'
// When the calls of a Redis driver (redis_driver.js) go out and when they
// are late: the queue, the batches, the back-pressure and the deadline
// wheel — the half of its Driver that never builds a call nor reads a
// reply (Flight, which the Driver extends). One timer a limiter — the
// deadline wheel — expires the calls in flight whose deadline passed (they
// all have the same deadline, so they expire in the order they began).
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

const { isNoScript, errorText } = require('./redis_clients.js')
const { clock } = require('./redis_raw.js')

// A queue of this many checks or more, with nothing in flight, goes out
// as two batches.
const SPLIT_AT = 8
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

// Called once by redis_driver.js with the addon and redisRaw's answer.
module.exports = function redisFlight(native, raw) {
  const { redisHeard } = native
  const { S, rawFinishBatch, IDS, OUT, STRIDE, MAX_BATCH, REPLIED, TIMED_OUT, FAILED, MALFORMED, UNSENT, RAW, putReply, answerOf } = raw

  // The queue, the wheel and the batches of one Driver. What a Driver
  // gives it: _sendOne(e), _finishOne(e, how, len, text), _expire(e),
  // _words(e), _options(e, members), _misconfigured(text), _refuse(e, bad, text)
  // and notices(); the members both classes use are named `_x` (a `#x`
  // is private to one class body), the rest stay `#x`.
  class Flight {
    #h
    #ms
    _adapter
    // The longest a call waits in the queue (ms).
    #queueMs
    // The calls handed to the client whose deadlines are not yet set.
    #launching = []
    #stamping = false
    #batching
    _stats = { calls: 0, evals: 0, timeouts: 0, errors: 0, batches: 0, batched: 0, queued: 0, unsent: 0 }
    // Commands sent and not yet answered (a batch is one).
    _inFlight = 0
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
    // While the wheel's loop runs (it moves #head itself).
    #ticking = false
    // Whether the last call to end in flight got no answer in time (Redis
    // is slow or unreachable; cleared by the next answer): meanwhile one
    // call at a time is sent (ALONE), and a queued call that waited a
    // whole deadline is answered as timed out, the fail policy's — it
    // waited for Redis, not for this process.
    _slow = false
    // The typed error of the client's last failure when it said the client
    // is misconfigured (a wrong password, a missing ACL permission, an
    // unknown database), until Redis answers again: a call that then gets
    // no answer in time is that error too, not the fail policy's.
    _bad = null

    constructor(h, ms, adapter, batching) {
      this.#h = h
      this._adapter = adapter
      this.#ms = ms
      this.#queueMs = Math.max(QUEUE_MIN_MS, QUEUE_DEADLINES * this.#ms)
      this.#batching = batching
    }

    _go(e) {
      const p = new Promise((resolve, reject) => {
        e.resolve = resolve
        e.reject = reject
      })
      const waiting = this.#queue.length - this.#first
      if (!this.#batching || e.cls < 0) {
        // Alone, at once, while there is room and no one waits before it.
        if (waiting === 0 && this.#load + ALONE <= (this._slow ? ALONE : IN_FLIGHT)) {
          this._sendOne(e)
          return p
        }
      }
      if (this.#load + waiting >= IN_FLIGHT || (!this.#batching && this.#load + ALONE > IN_FLIGHT)) this._stats.queued++
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
      this._stats.unsent++
      this._finishOne(e, UNSENT, 0, undefined)
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
    _launch(e, cost) {
      e.sent = cost
      // Sent while Redis is slow after waiting for it in the queue: its
      // deadline still counts from when it was queued.
      if (!this._slow) e.since = 0
      this.#load += cost
      this.#launching.push(e)
    }

    // After the client has the calls launched: their deadlines are set
    // once it has written them.
    _stampSoon() {
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
          this._expire(e)
        }
        i++
      }
      this.#ticking = false
      this.#head = i
      this.#shrink()
      let next = this.#head < wheel.length ? wheel[this.#head].deadline : Infinity
      if (this._slow) {
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
    _settle(e, value, error) {
      e.done = true
      if (e.epoch !== null) {
        e.epoch.leave(false)
        e.epoch = null
      }
      if (e.sent !== 0) {
        if (!this.#ticking && this.#wheel[this.#head] === e) this.#shrink()
        // Room in flight: the queue goes on.
        this.#load -= e.sent
        if (this.#load < IN_FLIGHT) this.#due()
      }
      if (error === undefined) e.resolve(value)
      else e.reject(error)
    }

    // Redis is slow: the queued calls that waited a whole deadline for it
    // time out (the oldest first).
    #expireQueued(now) {
      const ms = this.#ms
      while (this.#queue.length > this.#first) {
        const e = this.#queue[this.#first]
        if (e.since + ms > now) break
        this.#take(1)
        this._stats.timeouts++
        this._finishOne(e, TIMED_OUT, 0, undefined)
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
      const room = (this._slow ? ALONE : IN_FLIGHT) - this.#load
      if (room <= 0 || this.#queue.length === this.#first) return
      // The calls that waited too long never leave (the oldest first).
      const now = clock.now()
      if (this._slow) this.#expireQueued(now)
      while (this.#queue.length > this.#first) {
        const e = this.#queue[this.#first]
        if (e.deadline > now || e.kind === RAW) break
        this.#take(1)
        this.#unsent(e)
      }
      if (this.#queue.length === this.#first) return
      const queue = this.#take(this.#batching ? room : Math.max(1, Math.floor(room / ALONE)))
      if (!this.#batching) {
        for (const e of queue) this._sendOne(e)
        return
      }
      const first = queue[0]
      let same = first.cls >= 0
      for (let i = 1; same && i < queue.length; i++) {
        if (queue[i].cls !== first.cls || queue[i].slot !== first.slot) same = false
      }
      if (same) {
        if (queue.length >= SPLIT_AT && this._inFlight === 0) {
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
          this._sendOne(e)
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
        if (part.length === 1) this._sendOne(part[0])
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
        const args = this._words(members[i])[2]
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
          const k = this._words(e)[2].length
          const part = parts.get(k)
          if (part === undefined) parts.set(k, [e])
          else part.push(e)
        }
        for (const part of parts.values()) {
          if (part.length === 1) this._sendOne(part[0])
          else this.#sendMany(part)
        }
        return
      }
      const words = this._words(members[0])
      for (let i = 0; i < n; i++) this._launch(members[i], 1)
      const options = this._options(null, members)
      this._inFlight++
      this._stats.calls++
      this._stats.batches++
      this._stats.batched += n
      const batch = { members, flat, words, options, evaled: false }
      let sent
      try {
        sent = this._adapter.many(words[3], n, flat, options)
      } catch (err) {
        this._stampSoon()
        this.#manyFailed(batch, err)
        return
      }
      this._stampSoon()
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

    // A command sent got its reply: Redis answers (no longer slow, nor
    // misconfigured).
    _replied() {
      this._inFlight--
      this._bad = null
      if (this._slow) {
        this._slow = false
        this.#due()
      }
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
      if (live && isNoScript(err) && !batch.evaled) {
        batch.evaled = true
        this._stats.evals++
        let sent
        try {
          sent = this._adapter.manyEval(batch.words[4], members.length, batch.flat, batch.options)
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
      this._inFlight--
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

module.exports.ALONE = ALONE
