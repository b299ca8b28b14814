'use strict'
// Replays spec/outbound_calls.json: through the core's call machine as the
// adapters drive it (rb.Outbound#call, on a virtual clock: every step,
// `waited` and holds too), and through rb.fetch (its `fetch` option
// answering from the vector) and rb.axios (an axios adapter answering from
// the vector), with the limiter's waits and pauses recorded. The adapters'
// clocks are real, so they skip `machine_only` vectors and compare every
// step but holds and `waited`. The Rust and Python suites replay the same
// file. A learning vector (`adaptive`) runs over a TokenBucket of the
// vector's quota (its ceiling), each sending under the learned word the
// vector gives (`learned`), its `adapt` step's words read back as the
// vector writes them.
const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { Readable } = require('node:stream')
const axios = require('axios')
const rb = require('..')

const SPEC = path.join(__dirname, '..', '..', '..', 'spec', 'outbound_calls.json')
const { vectors } = JSON.parse(fs.readFileSync(SPEC, 'utf8'))
const REACH = { shared: true, local: false, failed: null }

function options(v, names) {
  const c = v.config ?? {}
  const o = {}
  for (const [from, to] of Object.entries(names)) if (from in c) o[to] = c[from]
  return o
}
const NATIVE = { key: 'key', timeout_s: 'timeout', n: 'n', retries: 'retries', max_pause_s: 'maxPause', backoff_s: 'backoff', any_method: 'anyMethod' }

// A learned word (a u64 in decimal, as the limiters and the machine pass
// it) from a vector's `learned` — its fraction in 65536ths, the instant it
// changed, whether that was a cut — by the core's documented layout
// (ratebound::outbound::Learned): bits 0–43 the instant, 44–60 65536 −
// the fraction, 61 the cut. Absent: the fresh word, 0.
const FULL = 65536n
function word(learned) {
  if (learned == null) return '0'
  const { units, at_ms: at = 0, cut = false } = learned
  return String((BigInt(cut) << 61n) | ((FULL - BigInt(units)) << 44n) | BigInt(at))
}
// A word's fraction in 65536ths and its cut bit.
const units = (w) => Number(FULL - ((BigInt(w) >> 44n) & 0x1ffffn))
const cut = (w) => ((BigInt(w) >> 61n) & 1n) === 1n

function same(a, b) {
  if (typeof a === 'number' && typeof b === 'number') return Math.abs(a - b) < 1e-6
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => same(x, b[i]))
  return a === b
}

test('every vector through the machine, on a virtual clock', () => {
  assert.ok(vectors.length >= 15, 'the spec lost vectors')
  let learned = 0
  for (const v of vectors) {
    const c = v.config ?? {}
    // The limiter whose configured quota is the ceiling; learning only
    // where the vector says so.
    const limiter = new rb.TokenBucket({ rate: c.quota ?? '30/s burst 30' })
    const o = new rb.Outbound({ ...options(v, NATIVE), adaptive: c.adaptive ?? false, limiter })
    assert.equal(o.learning, c.adaptive === true, v.id)
    const ceiling = limiter.learnedRate()
    let adapt = null
    const r = v.request
    const u = new URL(r.url)
    const port = u.port === '' ? null : Number(u.port)
    const call = o.call(r.method, u.protocol, u.hostname, port, r.key ?? null, r.n ?? null, r.timeout_s ?? null, 'timeout_s' in r, r.body !== 'stream')
    assert.equal(call.key, v.expect.key, v.id)
    let now = 1e6
    let i = 0
    let waited = null
    let refused = [0, 0]
    const steps = []
    for (;;) {
      const s = call.next(now)
      const sending = v.sendings[Math.min(i, v.sendings.length - 1)]
      if (s.kind === 'hold') {
        steps.push(['hold', s.seconds])
        now += s.seconds * 1000
      } else if (s.kind === 'acquire') {
        steps.push(['acquire', s.n, s.timeout ?? null])
        if (refused[0] !== i) refused = [i, 0]
        if (refused[1] < (sending.beyond_s ?? []).length) {
          // The limiter's deadline error: the tokens further than asked.
          call.beyond(sending.beyond_s[refused[1]++])
          continue
        }
        now += (sending.acquire_s ?? 0) * 1000
        if (o.learning) {
          // The first wait of a sending begins under `learned_before`.
          const before = waited !== i && 'learned_before' in sending ? sending.learned_before : sending.learned
          call.reserving(word(before))
          waited = i
          call.saw(word(sending.learned))
        }
      } else if (s.kind === 'adapt') {
        steps.push(['adapt', units(s.seen), units(s.next), cut(s.next)])
        adapt = s
        call.adapted(sending.adapt !== 'kept')
      } else if (s.kind === 'send') {
        steps.push(['send'])
        call.answered(sending.status, sending.headers, 1.8e9)
      } else if (s.kind === 'pause') {
        steps.push(['pause', s.seconds])
        call.paused(REACH[sending.pause ?? 'shared'], now)
      } else if (s.kind === 'event') {
        steps.push(['event', s.outcome, s.seconds ?? null, s.status ?? null, s.attempt, s.capped, s.local])
        if (s.outcome === 'adapted') {
          // The rates of the words the adapt step carried, of the ceiling.
          learned++
          assert.ok(same([s.fromRate, s.toRate], [(ceiling * units(adapt.seen)) / 65536, (ceiling * units(adapt.next)) / 65536]), `${v.id}: ${s.fromRate} → ${s.toRate}`)
        }
      } else if (s.kind === 'exceeded') {
        steps.push(['exceeded', s.seconds, s.timeout])
        break
      } else {
        steps.push([s.kind])
        if (s.kind === 'retry') i++
        else break
      }
    }
    assert.ok(same(steps, v.expect.steps), `${v.id}:\n got ${JSON.stringify(steps)}\nwant ${JSON.stringify(v.expect.steps)}`)
  }
  assert.ok(learned >= 3, 'the spec lost its learning vectors')
})

// One vector's run through an adapter: the partner's answers in turn, the
// limiter's waits and pauses recorded, the events told.
function script(v) {
  const s = { sent: 0, seen: [], keys: new Set() }
  s.answer = () => {
    s.seen.push(['send'])
    return v.sendings[s.sent++]
  }
  s.limiter = new rb.KeyedLimiter({ rate: 1000, burst: 1000 })
  s.limiter.acquire = async (key, n, o) => {
    s.keys.add(key)
    s.seen.push(['acquire', n, o.timeout ?? null])
  }
  s.limiter.pause = (key, seconds) => {
    s.seen.push(['pause', seconds])
    if (REACH[v.sendings[s.sent - 1].pause ?? 'shared'] === null) throw new Error('no slot for the key')
  }
  s.onDecision = (e) => {
    s.keys.add(e.key)
    if (e.outcome !== 'waited') s.seen.push(['event', e.outcome, e.seconds, e.status, e.attempt, e.capped, e.local])
  }
  s.check = (adapter) => {
    const want = v.expect.steps.filter((x) => !['hold', 'retry', 'done'].includes(x[0]) && !(x[0] === 'event' && x[1] === 'waited'))
    assert.ok(same(s.seen, want), `${adapter} ${v.id}:\n got ${JSON.stringify(s.seen)}\nwant ${JSON.stringify(want)}`)
    assert.deepEqual([...s.keys], [v.expect.key], `${adapter} ${v.id}`)
    assert.equal(s.sent, v.sendings.length, `${adapter} ${v.id}`)
  }
  return s
}

const ADAPTED = vectors.filter((v) => !v.machine_only)
const OPTIONS = { key: 'key', timeout_s: 'timeout', n: 'n', retries: 'retries', max_pause_s: 'maxPause', backoff_s: 'backoff', any_method: 'anyMethod' }

function own(v) {
  const r = v.request
  const o = {}
  if (r.key !== undefined) o.key = r.key
  if (r.n !== undefined) o.n = r.n
  if (r.timeout_s !== undefined) o.timeout = r.timeout_s
  return Object.keys(o).length === 0 ? undefined : o
}

test('every vector through rb.fetch', async () => {
  for (const v of ADAPTED) {
    const s = script(v)
    const fetch = rb.fetch({
      limiter: s.limiter,
      onDecision: s.onDecision,
      fetch: async () => {
        const a = s.answer()
        return new Response(null, { status: a.status, headers: a.headers })
      },
      ...options(v, OPTIONS),
      adaptive: v.config?.adaptive ?? false,
    })
    const body = { none: undefined, bytes: 'payload', stream: Readable.from(['payload']) }[v.request.body]
    await fetch(v.request.url, { method: v.request.method, body, ratebound: own(v) })
    s.check('fetch')
  }
})

test('every vector through rb.axios', async () => {
  for (const v of ADAPTED) {
    const s = script(v)
    const instance = axios.create({
      validateStatus: () => true,
      adapter: async (config) => {
        const a = s.answer()
        return { data: '', status: a.status, statusText: '', headers: Object.fromEntries(a.headers), config, request: {} }
      },
    })
    rb.axios(instance, { limiter: s.limiter, onDecision: s.onDecision, ...options(v, OPTIONS), adaptive: v.config?.adaptive ?? false })
    const data = { none: undefined, bytes: 'payload', stream: Readable.from(['payload']) }[v.request.body]
    await instance.request({ url: v.request.url, method: v.request.method, data, ratebound: own(v) })
    s.check('axios')
  }
})

// A pause kept in this process (its limiter could not make it) holds every
// later call for the key; one whose timeout is shorter fails at once,
// sending nothing: the machine's `exceeded` step (the hold and the longest
// wait accepted), and rb.fetch's RateLimitExceededError naming both.
test('a pause kept here that holds a call beyond its timeout fails it at once', async () => {
  const o = new rb.Outbound({ timeout: 1 })
  const call = () => o.call('GET', 'http:', 'p', null, null, null, null, false, true)
  const first = call()
  const now = 5000
  assert.equal(first.next(now).kind, 'acquire')
  assert.equal(first.next(now).kind, 'send')
  first.answered(429, [['Retry-After', '3']], 1.8e9)
  const pause = first.next(now)
  assert.deepEqual([pause.kind, pause.seconds], ['pause', 3])
  first.paused(REACH.failed, now)
  const held = call().next(now)
  assert.deepEqual([held.kind, held.seconds, held.timeout], ['exceeded', 3, 1])

  let sent = 0
  const limiter = new rb.KeyedLimiter({ rate: 1000, burst: 1000 })
  limiter.pause = () => {
    throw new Error('no slot for the key')
  }
  const fetch = rb.fetch({
    limiter,
    timeout: 1,
    retries: 0,
    fetch: async () => {
      sent++
      return new Response(null, { status: 429, headers: [['Retry-After', '30']] })
    },
  })
  assert.equal((await fetch('http://partner.test/')).status, 429)
  await assert.rejects(fetch('http://partner.test/'), (e) => {
    assert.equal(e.name, 'RateLimitExceededError')
    assert.equal(e.code, 'ERR_RATEBOUND_DEADLINE_EXCEEDED')
    assert.ok(e.retryAfter > 29 && e.retryAfter <= 30, String(e.retryAfter))
    assert.match(e.message, /maximum wait of 1s/)
    return true
  })
  assert.equal(sent, 1, 'the held call sent nothing')
})
