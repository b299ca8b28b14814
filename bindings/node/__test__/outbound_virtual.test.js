'use strict'
// rb.fetch and rb.axios on virtual time: the limiter decides on a
// ManualClock, its waits sleep on node:test's mock timers (setTimeout and
// Date), the adapters measure a wait through outbound.js' `clock` (here
// Date.now()), and the partner is in this process (a fetch function, an
// axios adapter) with its own bucket on the same virtual clock. advance()
// moves the three together one millisecond at a time, so every sending is
// asserted at its exact instant: the limiter's schedule, the capped pause,
// the refusal at once. The real-HTTP versions (outbound.test.js) keep
// generous bounds only.

const { test, mock, afterEach } = require('node:test')
const assert = require('node:assert/strict')
const axios = require('axios')
const rb = require('..')
const { settle } = require('./fixtures/common.js')
const { clock: adapterClock } = require('../outbound.js')

const realNow = adapterClock.now
const MS = 1_000_000 // ns

// Virtual time from 0: the limiter's ManualClock, the mock timers and Date.
function virtual() {
  const clock = new rb.ManualClock()
  mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 0 })
  adapterClock.now = () => Date.now()
  return {
    clock,
    // Moves all three forward by `ms`, one millisecond at a time (the
    // limiter's clock first: a timer that fires finds it at its instant).
    async advance(ms) {
      for (let i = 0; i < ms; i++) {
        clock.advanceNanos(MS)
        mock.timers.tick(1)
        await settle()
      }
      assert.equal(clock.nowNanos(), Date.now() * MS, 'the clocks agree')
    },
  }
}

afterEach(() => {
  mock.timers.reset()
  adapterClock.now = realNow
})

// A partner in this process: `handle(path, method)` gives [status,
// headers, text]; it records when (virtual ms) each request came, and
// counts its answers. `send` is a fetch function, `adapter` an axios
// adapter (which settles as axios' own do: a status validateStatus refuses
// is an AxiosError carrying the response).
function partner(handle) {
  const seen = []
  const counts = new Map()
  const answer = (path, method) => {
    seen.push({ path, method, at: Date.now() })
    const [status, headers = {}, text = status === 200 ? `ok ${method}` : `status ${status}`] = handle(path, method)
    counts.set(status, (counts.get(status) ?? 0) + 1)
    return [status, headers, text]
  }
  return {
    seen,
    at: (path) => seen.filter((s) => path === undefined || s.path === path).map((s) => s.at),
    count: (status) => counts.get(status) ?? 0,
    async send(input, init) {
      const url = new URL(input instanceof Request ? input.url : String(input))
      const method = (init && init.method) || (input instanceof Request ? input.method : 'GET')
      const [status, headers, text] = answer(url.pathname, method)
      return new Response(text, { status, headers })
    },
    async adapter(config) {
      const [status, headers, text] = answer(new URL(config.url, config.baseURL).pathname, config.method.toUpperCase())
      const response = { data: text, status, statusText: String(status), headers: new axios.AxiosHeaders(headers), config, request: {} }
      if (!config.validateStatus || config.validateStatus(status)) return response
      throw new axios.AxiosError(
        `Request failed with status code ${status}`,
        status >= 500 ? axios.AxiosError.ERR_BAD_RESPONSE : axios.AxiosError.ERR_BAD_REQUEST,
        config,
        response.request,
        response,
      )
    },
  }
}

// A strict partner: `rate`/s, bursts of `burst` (its own bucket, on Date),
// 429 with the seconds to wait.
function strictPartner(rate, burst) {
  let tokens = burst
  let at = Date.now()
  return partner(() => {
    const t = Date.now()
    tokens = Math.min(burst, tokens + ((t - at) / 1000) * rate)
    at = t
    if (tokens >= 1 - 1e-9) {
      tokens -= 1
      return [200, {}, 'ok']
    }
    return [429, { 'retry-after': String(Math.ceil((1 - tokens) / rate)) }, 'over the limit']
  })
}

// A partner playing a script per path: the statuses (and headers) it
// answers in turn, the last one repeated.
function scriptedPartner(scripts) {
  const turns = new Map()
  return partner((path) => {
    const script = scripts[path]
    if (script === undefined) return [404, {}, 'no such path']
    const i = turns.get(path) ?? 0
    turns.set(path, i + 1)
    return script[Math.min(i, script.length - 1)]
  })
}

// The limiter's schedule for `count` requests at once: `burst` at 0, then
// one every 1000 / rate ms.
const schedule = (count, rate, burst) => Array.from({ length: count }, (_, i) => Math.max(0, i - burst + 1) * (1000 / rate))

// Starts `count` calls at virtual 0; their statuses and when each ended.
function concurrently(count, call) {
  const ended = []
  const all = Promise.all(
    Array.from({ length: count }, async () => {
      const status = await call()
      ended.push(Date.now())
      return status
    }),
  )
  return { all, ended }
}

for (const adapter of ['fetch', 'axios']) {
  // (A waiter on a ManualClock looks at it every millisecond; a 25 ms
  // interval makes a wake a millisecond late show.)
  test(`${adapter}: 30 concurrent calls under a TokenBucket of 40/s burst 5: sent exactly on its schedule, zero 429s (virtual time)`, async () => {
    const v = virtual()
    const p = strictPartner(50, 10)
    const limiter = new rb.TokenBucket({ rate: 40, burst: 5, clock: v.clock })
    let call
    if (adapter === 'fetch') {
      const f = rb.fetch({ limiter, fetch: p.send })
      call = async () => {
        const res = await f('http://partner.test/items')
        await res.text()
        return res.status
      }
    } else {
      const api = rb.axios(axios.create({ baseURL: 'http://partner.test', adapter: p.adapter }), { limiter })
      call = async () => (await api.get('/items')).status
    }
    const run = concurrently(30, call)
    await settle()
    assert.deepEqual(p.at(), [0, 0, 0, 0, 0], 'the burst at once, nothing more')
    await v.advance(624)
    assert.equal(p.seen.length, 29, 'the last one not before 625 ms')
    await v.advance(1)
    assert.deepEqual(await run.all, Array(30).fill(200))
    assert.deepEqual(p.at(), schedule(30, 40, 5))
    assert.equal(p.count(429), 0)
    assert.equal(Math.max(...run.ended), 625)
  })
}

// A pause of `d` empties the bucket until its end and refills it at its rate
// from then on (crates/ratebound/src/pause.rs): at 100/s the retry's token
// is due one interval (10 ms) after the pause ends.
test('fetch: Retry-After of a year pauses exactly maxPause; the retry is sent exactly at its end + 1/rate; a retry beyond the timeout is refused at once (virtual time)', async () => {
  const v = virtual()
  const p = scriptedPartner({
    '/year': [[429, { 'retry-after': '31536000' }], [200]],
    '/year-strict': [[429, { 'retry-after': '31536000' }], [200]],
    '/never': [[429]],
  })
  const events = []
  const call = rb.fetch({
    limiter: new rb.TokenBucket({ rate: 100, burst: 10, clock: v.clock }),
    maxPause: 1,
    backoff: 0.05,
    // The pauses' instants only: learning would change the rate after
    // each refusal (outbound_learn.test.js).
    adaptive: false,
    fetch: p.send,
    onDecision: (e) => events.push(e),
  })
  let res = null
  call('http://partner.test/year').then((r) => (res = r))
  await settle()
  assert.deepEqual(p.at('/year'), [0])
  await v.advance(1009)
  assert.deepEqual(p.at('/year'), [0], 'no retry before the capped pause is over and a token is in')
  await v.advance(1)
  assert.deepEqual(p.at('/year'), [0, 1010])
  await settle()
  assert.equal(res.status, 200)
  const outcomes = events.map((e) => `${e.outcome}@${e.attempt}${e.status == null ? '' : `:${e.status}`}`)
  assert.deepEqual(outcomes, ['paused@0:429', 'retried@0:429', 'waited@1'])
  assert.deepEqual(events[0], { outcome: 'paused', key: 'partner.test', seconds: 1, status: 429, attempt: 0, capped: true, local: false })
  assert.equal(events[2].seconds, 1.01, 'the retry waited exactly the pause and one interval')

  // A retry's wait beyond the timeout: refused at once (no virtual time
  // passes), the retry never sent.
  const strict = rb.fetch({ limiter: new rb.TokenBucket({ rate: 100, burst: 10, clock: v.clock }), maxPause: 1, timeout: 0.5, fetch: p.send })
  const t0 = Date.now()
  let refused = null
  strict('http://partner.test/year-strict').catch((e) => (refused = e))
  await settle()
  assert.ok(refused instanceof rb.RateLimitExceededError, String(refused))
  assert.match(refused.message, /exceeds the maximum wait of 500ms$/, 'the timeout given, not 0ns')
  assert.equal(Date.now(), t0)
  assert.deepEqual(p.at('/year-strict'), [t0])

  // No Retry-After: the core's backoff pauses (0.05 s, then 0.1 s), each
  // retry sent one interval after its pause ends; the last 429 the caller's.
  // (The bucket refills from empty after the pause above: the retry at
  // 1010 took its one token, the first sending here waits 10 ms for the
  // next: 1020, paused to 1070, sent 1080, paused to 1180, sent 1190.)
  const t1 = Date.now()
  let spent = null
  call('http://partner.test/never').then((r) => (spent = r))
  await settle()
  await v.advance(179)
  assert.deepEqual(p.at('/never').map((t) => t - t1), [10, 70])
  await v.advance(1)
  await settle()
  assert.deepEqual(p.at('/never').map((t) => t - t1), [10, 70, 180])
  assert.equal(spent.status, 429)
  assert.equal(await spent.text(), 'status 429')
})

test('axios: Retry-After: 1 resends exactly at the end of the pause + 1/rate (virtual time)', async () => {
  const v = virtual()
  const p = scriptedPartner({ '/pause': [[429, { 'retry-after': '1' }], [200]] })
  const events = []
  const api = rb.axios(axios.create({ baseURL: 'http://partner.test', adapter: p.adapter }), {
    limiter: new rb.KeyedLimiter({ rate: 100, burst: 10, clock: v.clock }),
    backoff: 0.05,
    // The pause's instants only: learning would change the rate after the
    // refusal (outbound_learn.test.js).
    adaptive: false,
    onDecision: (e) => events.push(e),
  })
  let res = null
  api.get('/pause').then((r) => (res = r))
  await settle()
  await v.advance(1009)
  assert.deepEqual(p.at('/pause'), [0])
  await v.advance(1)
  await settle()
  assert.deepEqual(p.at('/pause'), [0, 1010])
  assert.equal(res.status, 200)
  assert.deepEqual(
    events.map((e) => `${e.outcome}@${e.attempt}:${e.seconds}`),
    ['paused@0:1', 'retried@0:null', 'waited@1:1.01'],
  )
})

test('fetch: a wait beyond the timeout is refused at once and sends nothing (virtual time)', async () => {
  const v = virtual()
  const p = scriptedPartner({ '/x': [[200]] })
  // A token every 2 s: the next is due 2 s after the first call.
  const call = rb.fetch({ limiter: new rb.TokenBucket({ rate: 0.5, burst: 1, clock: v.clock }), fetch: p.send })
  const first = call('http://partner.test/x')
  await settle()
  assert.equal((await first).status, 200)
  let refused = null
  call('http://partner.test/x', { ratebound: { timeout: 1.5 } }).catch((e) => (refused = e))
  await settle()
  assert.ok(refused instanceof rb.RateLimitExceededError, String(refused))
  assert.equal(refused.retryAfter, 2)
  assert.equal(Date.now(), 0, 'at once: no virtual time passed')
  assert.deepEqual(p.at('/x'), [0])
  // 1 ms before the token, a wait of 1 ms is still too long for a 0 s
  // timeout; at 2 s it is sent at once.
  await v.advance(1999)
  await assert.rejects(call('http://partner.test/x', { ratebound: { timeout: 0 } }), rb.RateLimitExceededError)
  await v.advance(1)
  const third = call('http://partner.test/x', { ratebound: { timeout: 0 } })
  await settle()
  assert.equal((await third).status, 200)
  assert.deepEqual(p.at('/x'), [0, 2000])
})

// Learning (issue 39) on virtual time: the issue's partner — 10/s burst
// 20, a bare 429 beyond (no Retry-After) — called by four callers at once
// through one local TokenBucket configured at 30/s burst 30, for 20 s.
// Learning (the default) finds the partner's limit: in the last 10 s at
// most 5 % of what reached it was refused and it served at least 85 % of
// its capacity; `adaptive: false` keeps sending at 30/s, two in three
// refused. The partner answers at once (no round trip) and every instant
// is virtual: the same numbers on every run.
for (const adaptive of [undefined, false]) {
  test(`fetch: a bare-429 partner at 10/s, a TokenBucket at 30/s, adaptive ${adaptive}: the last 10 s's 429s and goodput (virtual time)`, async (t) => {
    const v = virtual()
    let tokens = 20
    let at = 0
    // [virtual ms, status] of every answer.
    const answers = []
    const p = partner(() => {
      const now = Date.now()
      tokens = Math.min(20, tokens + ((now - at) / 1000) * 10)
      at = now
      const status = tokens >= 1 - 1e-9 ? 200 : 429
      if (status === 200) tokens -= 1
      answers.push([now, status])
      return [status, {}, status === 200 ? 'ok' : 'over the limit']
    })
    const limiter = new rb.TokenBucket({ rate: 30, burst: 30, clock: v.clock })
    const adapted = []
    // The default: the option left out.
    const learning = adaptive === undefined ? {} : { adaptive }
    const f = rb.fetch({ limiter, retries: 0, ...learning, fetch: p.send, onDecision: (e) => e.outcome === 'adapted' && adapted.push(e) })
    const END = 20_000
    let stop = false
    const caller = async () => {
      while (!stop) {
        const res = await f('http://partner.test/items')
        await res.text()
      }
    }
    const callers = Promise.all([caller(), caller(), caller(), caller()])
    await v.advance(END)
    stop = true
    // Each caller's last request goes out when its token comes.
    await v.advance(1000)
    await callers
    const late = answers.filter(([ms]) => ms >= END - 10_000 && ms < END)
    const refused = late.filter(([, status]) => status === 429).length
    const served = late.length - refused
    const share = refused / late.length
    t.diagnostic(
      `adaptive ${adaptive}: last 10 s: ${late.length} reached the partner, ${refused} × 429 (${(100 * share).toFixed(1)} %), ` +
        `${served} × 200 (${served}% of its capacity of 100); ${adapted.length} adapted events; learned ${limiter.learnedRate().toFixed(2)}/s`,
    )
    if (adaptive === false) {
      assert.deepEqual(adapted, [])
      // 30/s to the nanosecond of its interval.
      assert.ok(Math.abs(limiter.learnedRate() - 30) < 1e-5, String(limiter.learnedRate()))
      assert.ok(share > 0.5, `${refused} of ${late.length}`)
    } else {
      assert.ok(share <= 0.05, `${refused} of ${late.length} refused`)
      assert.ok(served >= 85, `${served} served of 100`)
      // Down from the ceiling, never below the floor (1/20: 1.5/s).
      assert.ok(Math.abs(adapted[0].fromRate - 30) < 1e-5, String(adapted[0].fromRate))
      for (const e of adapted) assert.ok(e.toRate >= 1.5 - 1e-5 && e.toRate <= 30, JSON.stringify(e))
      assert.ok(limiter.learnedRate() < 29, String(limiter.learnedRate()))
    }
  })
}
