'use strict'
// rb.fetch and rb.axios against REAL HTTP partners on 127.0.0.1 (node:http),
// written here with their own tiny token bucket — not ratebound — that
// answer 429 with Retry-After when over their limit and count what they
// answered; the fleet tests use a redis-server this file starts itself
// (fixtures/redis-server.js). Every loop is bounded, every timer cleared,
// every server closed; nothing but 127.0.0.1 is contacted.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const crypto = require('node:crypto')
const fs = require('node:fs')
const http = require('node:http')
const os = require('node:os')
const path = require('node:path')
const { once } = require('node:events')
const IORedis = require('ioredis')
const axios = require('axios')
const rb = require('..')
const { sleep, now, unhandledRejections } = require('./fixtures/common.js')
const { HOST, startServer, stopAll } = require('./fixtures/redis-server.js')
const { Server: RedisServer, freePort } = require('./fixtures/redis-server.js')

// Real HTTP on real time: an upper bound here only says the calls were not
// stuck (a loaded 2-core machine may be seconds late). Each sending's exact
// instant — the limiter's schedule, the capped pause, the refusal at once —
// is asserted in virtual time in outbound_virtual.test.js.
const SLACK_MS = 5000

// Every rejection nobody handled, anywhere in this file: there must be none.
const unhandled = unhandledRejections()

const partners = new Set()
const clients = new Set()
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'ratebound-outbound-test-'))

after(async () => {
  for (const p of [...partners]) await p.close()
  for (const c of [...clients]) c.disconnect()
  await stopAll()
  fs.rmSync(TMP, { recursive: true, force: true })
  assert.deepEqual(unhandled, [], 'unhandled rejections')
})

// A partner's own limit: `rate` per second, bursts of `burst`; `take()` is
// 0 when a token was taken, else the seconds until one is there.
function bucket(rate, burst) {
  let tokens = burst
  let at = now()
  return {
    take() {
      const t = now()
      tokens = Math.min(burst, tokens + ((t - at) / 1000) * rate)
      at = t
      if (tokens >= 1) {
        tokens -= 1
        return 0
      }
      return (1 - tokens) / rate
    },
  }
}

// An HTTP server on 127.0.0.1 that counts its answers by status;
// `handle(req, body)` returns [status, headers, text].
async function partner(handle) {
  const counts = new Map()
  const seen = []
  const server = http.createServer((req, res) => {
    const chunks = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString()
      seen.push({ method: req.method, path: req.url, body, at: now() })
      const [status, headers, text] = handle(req, body)
      counts.set(status, (counts.get(status) ?? 0) + 1)
      res.writeHead(status, { 'content-type': 'text/plain', ...headers })
      res.end(text)
    })
  })
  server.listen(0, HOST)
  await once(server, 'listening')
  const { port } = server.address()
  const p = {
    url: `http://${HOST}:${port}`,
    host: `${HOST}:${port}`,
    seen,
    count: (status) => counts.get(status) ?? 0,
    hits: (pathname) => seen.filter((s) => s.path === pathname).length,
    async close() {
      partners.delete(p)
      server.closeAllConnections()
      server.close()
      await once(server, 'close')
    },
  }
  partners.add(p)
  return p
}

// A strict partner: `rate`/s, bursts of `burst`, 429 with the whole seconds
// to wait in Retry-After; `throttle(s)` makes it refuse everything for `s`
// seconds from the next request on, with `Retry-After: s`. It judges
// arrival times, so a caller limited to 20/s burst 5 meets one of 25/s
// burst 20: 15 of slack for requests a loaded machine's stall bunches up
// (burst 10 saw one 429 after a stall of ~1 s); no limit at all (30 or 50 at
// once) still fails it. The exact schedules: outbound_virtual.test.js,
// redis_wait_spec.test.js.
async function strictPartner(rate, burst) {
  const limit = bucket(rate, burst)
  let armed = null
  let refuseUntil = -Infinity
  const p = await partner(() => {
    const t = now()
    if (armed !== null) {
      refuseUntil = t + armed * 1000
      p.throttledAt = t
      armed = null
    }
    if (t < refuseUntil) return [429, { 'retry-after': String(Math.round((refuseUntil - p.throttledAt) / 1000)) }, 'throttled']
    const wait = limit.take()
    if (wait > 0) return [429, { 'retry-after': String(Math.ceil(wait)) }, 'over the limit']
    return [200, {}, 'ok']
  })
  p.throttle = (seconds) => (armed = seconds)
  p.refuseUntil = () => refuseUntil
  return p
}

// A partner playing a script per path: the statuses (and headers) it
// answers in turn, the last one repeated.
async function scriptedPartner(scripts) {
  const turns = new Map()
  return partner((req) => {
    const script = scripts[req.url]
    if (script === undefined) return [404, {}, 'no such path']
    const i = turns.get(req.url) ?? 0
    turns.set(req.url, i + 1)
    const [status, headers = {}] = script[Math.min(i, script.length - 1)]
    return [status, headers, status === 200 ? `ok ${req.method}` : `status ${status}`]
  })
}

async function redisClient(port) {
  const c = new IORedis({ host: HOST, port, lazyConnect: true, retryStrategy: () => 50 })
  c.on('error', () => {})
  clients.add(c)
  await c.connect()
  return c
}

let redisServer = null
async function redisPort() {
  if (redisServer === null) redisServer = await startServer()
  return redisServer.port
}

// `count` instances of one Redis limit, each with its own connection.
async function fleet(count, options) {
  const port = await redisPort()
  const prefix = `outbound-${crypto.randomBytes(6).toString('hex')}:`
  const members = []
  for (let i = 0; i < count; i++) {
    const client = await redisClient(port)
    // Failing closed, with a deadline a loaded machine meets: a pacing
    // test must not be admitted by the fail policy (and an outbound
    // limiter failing open draws a warning).
    members.push({ client, limiter: new rb.redis.TokenBucket({ client, prefix, onError: 'closed', timeout: 1, ...options }) })
  }
  return {
    members,
    async close() {
      for (const m of members) {
        await m.limiter.close()
        m.client.disconnect()
        clients.delete(m.client)
      }
    },
  }
}

const outcomes = (events) => events.map((e) => `${e.outcome}@${e.attempt}${e.status == null ? '' : `:${e.status}`}`)
// The decisions on answers only: whether a sending waited (>= 1 ms) depends
// on what the bucket holds.
const decisions = (events) => outcomes(events.filter((e) => e.outcome !== 'waited'))

// ---------------------------------------------------------------- fetch

test('fetch: 30 concurrent calls under a local TokenBucket below the partner: zero 429s', async (t) => {
  const p = await strictPartner(25, 20)
  const call = rb.fetch({ limiter: new rb.TokenBucket({ rate: 20, burst: 5 }) })
  const start = now()
  const statuses = await Promise.all(
    Array.from({ length: 30 }, async () => {
      const res = await call(`${p.url}/items`)
      await res.text()
      return res.status
    }),
  )
  const ms = now() - start
  t.diagnostic(`30 calls in ${ms.toFixed(0)} ms (ideal 1250); partner: ${p.count(200)} × 200, ${p.count(429)} × 429`)
  assert.deepEqual(statuses, Array(30).fill(200))
  assert.equal(p.count(200), 30)
  assert.equal(p.count(429), 0)
  assert.ok(ms >= 1200, `${ms} ms: faster than the limiter allows`)
  assert.ok(ms <= 1250 + SLACK_MS, `${ms} ms`)
  await p.close()
})

test('fetch: a fleet of 10 rb.redis.TokenBucket instances sharing one key: zero 429s', async (t) => {
  const p = await strictPartner(25, 20)
  const f = await fleet(10, { rate: 20, burst: 5 })
  const calls = f.members.map((m) => rb.fetch({ limiter: m.limiter, key: 'partner' }))
  const start = now()
  const statuses = await Promise.all(
    calls.flatMap((call) =>
      Array.from({ length: 4 }, async () => {
        const res = await call(`${p.url}/items`)
        await res.text()
        return res.status
      }),
    ),
  )
  const ms = now() - start
  t.diagnostic(`40 calls from 10 instances in ${ms.toFixed(0)} ms (ideal 1750); partner: ${p.count(200)} × 200, ${p.count(429)} × 429`)
  assert.deepEqual(statuses, Array(40).fill(200))
  assert.equal(p.count(200), 40)
  assert.equal(p.count(429), 0)
  assert.ok(ms >= 1700, `${ms} ms: faster than the limit allows`)
  assert.ok(ms <= 1750 + SLACK_MS + 250, `${ms} ms`)
  await f.close()
  await p.close()
})

test('fetch: a partner throttling for 2 s pauses the whole Redis fleet once', async (t) => {
  const p = await strictPartner(1000, 1000)
  const f = await fleet(10, { rate: 20, burst: 5 })
  const paused = []
  const calls = f.members.map((m) =>
    rb.fetch({ limiter: m.limiter, key: 'partner', onDecision: (e) => e.outcome === 'paused' && paused.push(e) }),
  )
  const start = now()
  let served = 0
  const results = await Promise.all(
    calls.flatMap((call) =>
      Array.from({ length: 4 }, async () => {
        const res = await call(`${p.url}/items`)
        await res.text()
        // The partner switches after 10 calls were served.
        if (++served === 10) p.throttle(2)
        return res.status
      }),
    ),
  )
  const ms = now() - start
  const refused = p.count(429)
  const late = p.seen.filter((s) => s.at >= p.refuseUntil()).length
  const lastRefusal = Math.max(...p.seen.filter((s) => s.at < p.refuseUntil()).map((s) => s.at))
  const firstAfter = Math.min(...p.seen.filter((s) => s.at >= p.refuseUntil()).map((s) => s.at))
  t.diagnostic(
    `40 callers: ${refused} × 429 during the 2 s refusal, then ${late} requests after it, all 200; ` +
      `first request after the refusal ${(firstAfter - p.refuseUntil()).toFixed(0)} ms after its end; total ${ms.toFixed(0)} ms`,
  )
  assert.deepEqual(results, Array(40).fill(200))
  assert.ok(refused >= 1, 'the partner never refused')
  // Only the requests in flight when it switched (the other instances
  // hear of the pause through Redis), not one per caller (40) nor one per
  // 50 ms of the refusal (40 more): a quarter of that, within half the
  // refusal — bounds for a loaded machine that a pause not shared fails.
  assert.ok(refused <= 10, `${refused} × 429`)
  assert.equal(p.count(200), 40)
  assert.equal(p.count(200) + refused, p.seen.length)
  assert.ok(lastRefusal - p.throttledAt < 1000, `a request went out ${(lastRefusal - p.throttledAt).toFixed(0)} ms into the pause`)
  assert.ok(paused.length === refused && paused.every((e) => e.seconds === 2 && e.status === 429), JSON.stringify(paused))
  // 10 at once (burst 5, then 20/s), the 2 s pause, the other 30+ at 20/s.
  assert.ok(ms >= 2000 + 1500, `${ms} ms`)
  assert.ok(ms <= 2000 + 2000 + SLACK_MS + 500, `${ms} ms`)
  await f.close()
  await p.close()
})

test('fetch: 503 then 200 is retried once; a POST is not, unless anyMethod', async () => {
  const p = await scriptedPartner({
    '/flaky': [[503], [200]],
    '/post': [[503], [200]],
    '/post-any': [[503], [200]],
    '/request': [[503], [200]],
  })
  const limiter = new rb.TokenBucket({ rate: 100, burst: 10 })
  const events = []
  const call = rb.fetch({ limiter, backoff: 0.05, onDecision: (e) => events.push(e) })
  const res = await call(`${p.url}/flaky`)
  assert.equal(res.status, 200)
  assert.equal(await res.text(), 'ok GET')
  assert.equal(p.hits('/flaky'), 2)
  // No retry without a pause: the bare 503 paused the backoff first.
  assert.deepEqual(decisions(events), ['paused@0:503', 'retried@0:503'])
  assert.deepEqual(events.find((e) => e.outcome === 'paused'), { outcome: 'paused', key: p.host, seconds: 0.05, status: 503, attempt: 0, capped: false, local: false })
  assert.deepEqual(events.find((e) => e.outcome === 'retried'), { outcome: 'retried', key: p.host, seconds: null, status: 503, attempt: 0, capped: false, local: false })

  events.length = 0
  const post = await call(`${p.url}/post`, { method: 'POST', body: 'payload' })
  assert.equal(post.status, 503)
  assert.equal(await post.text(), 'status 503')
  assert.equal(p.hits('/post'), 1)
  assert.deepEqual(decisions(events), ['gave_up@0:503'])

  const any = rb.fetch({ limiter, anyMethod: true, backoff: 0.05 })
  const again = await any(`${p.url}/post-any`, { method: 'POST', body: 'payload' })
  assert.equal(again.status, 200)
  assert.equal(await again.text(), 'ok POST')
  assert.deepEqual(
    p.seen.filter((s) => s.path === '/post-any').map((s) => s.body),
    ['payload', 'payload'],
  )
  // A Request with a body: each sending gets a clone, so the retry resends it.
  const req = new Request(`${p.url}/request`, { method: 'PUT', body: 'put body' })
  const put = await call(req)
  assert.equal(put.status, 200)
  assert.deepEqual(
    p.seen.filter((s) => s.path === '/request').map((s) => `${s.method} ${s.body}`),
    ['PUT put body', 'PUT put body'],
  )
  await p.close()
})

test('fetch: Retry-After of a year pauses for maxPause; spent retries return the last 429', async () => {
  const p = await scriptedPartner({
    '/year': [[429, { 'retry-after': '31536000' }], [200]],
    '/never': [[429]],
    '/year-strict': [[429, { 'retry-after': '31536000' }], [200]],
  })
  const limiter = new rb.TokenBucket({ rate: 100, burst: 10 })
  const events = []
  const call = rb.fetch({ limiter, maxPause: 1, backoff: 0.05, onDecision: (e) => events.push(e) })
  const start = now()
  const res = await call(`${p.url}/year`)
  const ms = now() - start
  assert.equal(res.status, 200)
  assert.equal(p.hits('/year'), 2)
  // The retry's acquire waited out the capped pause: about 1 s, not a year.
  assert.ok(ms >= 950 && ms <= 1000 + SLACK_MS, `${ms} ms`)
  assert.deepEqual(decisions(events), ['paused@0:429', 'retried@0:429'])
  assert.deepEqual(events.find((e) => e.outcome === 'paused'), { outcome: 'paused', key: p.host, seconds: 1, status: 429, attempt: 0, capped: true, local: false })
  // The retry's wait is told after the retry (attempt 1).
  assert.deepEqual(outcomes(events).slice(-1), ['waited@1'])
  const retryWait = events.at(-1).seconds
  assert.ok(retryWait >= 0.95 && retryWait <= 1 + SLACK_MS / 1000, String(retryWait))

  // A retry waits within the timeout too: past it, RateLimitExceededError
  // and nothing more is sent.
  const strict = rb.fetch({ limiter: new rb.TokenBucket({ rate: 100, burst: 10 }), maxPause: 1, timeout: 0.5 })
  await assert.rejects(strict(`${p.url}/year-strict`), rb.RateLimitExceededError)
  assert.equal(p.hits('/year-strict'), 1)

  events.length = 0
  const spent = await call(`${p.url}/never`)
  assert.equal(spent.status, 429)
  assert.equal(await spent.text(), 'status 429', 'the last answer is the caller\'s, body and all')
  assert.equal(p.hits('/never'), 3)
  assert.deepEqual(decisions(events), ['paused@0:429', 'retried@0:429', 'paused@1:429', 'retried@1:429', 'gave_up@2:429'])
  await p.close()
})

test('fetch: a throwing onDecision does not break the request', async () => {
  const p = await scriptedPartner({ '/flaky': [[503], [200]] })
  const warned = once(process, 'warning')
  let calls = 0
  const call = rb.fetch({
    limiter: new rb.TokenBucket({ rate: 100, burst: 10 }),
    onDecision: () => {
      calls++
      throw new Error('metrics are down')
    },
  })
  const res = await call(`${p.url}/flaky`)
  assert.equal(res.status, 200)
  assert.equal(p.hits('/flaky'), 2)
  assert.ok(calls >= 1, 'onDecision was called (and threw)')
  const [warning] = await warned
  assert.equal(warning.code, 'RATEBOUND_ON_DECISION_THREW')
  assert.match(warning.message, /metrics are down/)
  await p.close()
})

test('fetch: a wait beyond timeout rejects and sends nothing; an aborted wait gives its token back', async () => {
  const p = await scriptedPartner({ '/x': [[200]] })
  // A token an hour: the next is due an hour after the first call, and a
  // wait up to the 30-minute timeout would take 30 minutes.
  const limiter = new rb.TokenBucket({ rate: 1 / 3600, burst: 1 })
  const call = rb.fetch({ limiter })
  assert.equal((await call(`${p.url}/x`)).status, 200)
  const start = now()
  await assert.rejects(call(`${p.url}/x`, { ratebound: { timeout: 1800 } }), (e) => {
    assert.ok(e instanceof rb.RateLimitExceededError, String(e))
    assert.ok(e.retryAfter > 1800 && e.retryAfter <= 3600, String(e.retryAfter))
    return true
  })
  // Not a wait of the timeout: a liveness bound only. "At once" (no time
  // passed) is checked exactly in outbound_virtual.test.js, 'fetch: a wait
  // beyond the timeout is refused at once and sends nothing (virtual time)'.
  assert.ok(now() - start < 10_000, `the refusal took ${now() - start} ms`)
  assert.equal(p.hits('/x'), 1)

  // The same with the adapter's default timeout.
  const strict = rb.fetch({ limiter, timeout: 0 })
  await assert.rejects(strict(`${p.url}/x`), rb.RateLimitExceededError)
  assert.equal(p.hits('/x'), 1)

  // An abort during the wait: an AbortError, nothing sent, and the token
  // reserved for it comes back. On a manual clock: at 1 s (when it is
  // due) the bucket holds it again, and only it.
  const clock = new rb.ManualClock()
  const limiter2 = new rb.TokenBucket({ rate: 1, burst: 1, clock })
  const call2 = rb.fetch({ limiter: limiter2 })
  assert.equal((await call2(`${p.url}/x`)).status, 200)
  const ac = new AbortController()
  const waiting = call2(`${p.url}/x`, { signal: ac.signal })
  await sleep(50) // it waits (for the token due at 1 s on the clock)
  ac.abort()
  await assert.rejects(waiting, { name: 'AbortError' })
  assert.equal(p.hits('/x'), 2)
  assert.equal(limiter2.tryAcquire(), false, 'no token before 1 s')
  clock.advance(1)
  assert.equal(limiter2.tryAcquire(), true, 'the aborted wait kept its token')
  assert.equal(limiter2.tryAcquire(), false)
  await p.close()
})

test('fetch: the key is the host by default, a function, or the request\'s own', async () => {
  const a = await scriptedPartner({ '/t1': [[200]], '/t2': [[200]], '/x': [[200]] })
  const b = await scriptedPartner({ '/t1': [[200]], '/t2': [[200]], '/x': [[200]] })
  // Two hosts (two ports): two keys of one KeyedLimiter.
  const byHost = rb.fetch({ limiter: new rb.KeyedLimiter({ rate: 1, burst: 2 }), timeout: 0.1 })
  // Each host had its own burst: one shared key would make a third call
  // wait 1 s, beyond the 0.1 s timeout, and refuse it (no time measured).
  const statuses = await Promise.all([a, a, b, b].map(async (p) => (await byHost(`${p.url}/x`)).status))
  assert.deepEqual(statuses, [200, 200, 200, 200])
  await assert.rejects(byHost(`${a.url}/x`), rb.RateLimitExceededError)
  await assert.rejects(byHost(`${b.url}/x`), rb.RateLimitExceededError)
  assert.deepEqual([a.hits('/x'), b.hits('/x')], [2, 2])
  // The request's own key.
  assert.equal((await byHost(`${a.url}/x`, { ratebound: { key: 'batch' } })).status, 200)
  assert.equal(a.hits('/x'), 3)

  // A function of the request: one tenant's limit across both hosts.
  const seen = []
  const byTenant = rb.fetch({
    limiter: new rb.KeyedLimiter({ rate: 1, burst: 1 }),
    timeout: 0.1,
    key: (url, init) => {
      seen.push([url instanceof URL, init])
      return url.pathname.slice(1)
    },
  })
  const init = { headers: { 'x-tenant': 't1' } }
  assert.equal((await byTenant(`${a.url}/t1`, init)).status, 200)
  await assert.rejects(byTenant(`${b.url}/t1`), rb.RateLimitExceededError)
  assert.equal((await byTenant(`${b.url}/t2`)).status, 200)
  assert.deepEqual([a.hits('/t1'), b.hits('/t1'), b.hits('/t2')], [1, 0, 1])
  assert.equal(seen[0][0], true)
  assert.equal(seen[0][1], init)
  await a.close()
  await b.close()
})

// ---------------------------------------------------------------- axios

test('axios: 503 then 200 retried once, the 429 pause, a POST not retried, spent retries', async () => {
  const p = await scriptedPartner({
    '/flaky': [[503], [200]],
    '/pause': [[429, { 'retry-after': '1' }], [200]],
    '/post': [[503], [200]],
    '/post-lenient': [[503], [200]],
    '/never': [[429]],
  })
  const events = []
  const api = rb.axios(axios.create({ baseURL: p.url }), {
    limiter: new rb.KeyedLimiter({ rate: 100, burst: 10 }),
    backoff: 0.05,
    onDecision: (e) => events.push(e),
  })
  const res = await api.get('/flaky')
  assert.equal(res.status, 200)
  assert.equal(res.data, 'ok GET')
  assert.equal(p.hits('/flaky'), 2)
  assert.deepEqual(decisions(events), ['paused@0:503', 'retried@0:503'])
  assert.equal(events.find((e) => e.outcome === 'retried').key, p.host)

  events.length = 0
  const start = now()
  const paused = await api.get('/pause')
  const ms = now() - start
  assert.equal(paused.status, 200)
  assert.equal(p.hits('/pause'), 2)
  assert.ok(ms >= 950 && ms <= 1000 + SLACK_MS, `${ms} ms`)
  assert.deepEqual(decisions(events), ['paused@0:429', 'retried@0:429'])
  assert.equal(events.find((e) => e.outcome === 'paused').seconds, 1)
  assert.deepEqual(outcomes(events).slice(-1), ['waited@1'])
  assert.ok(events.at(-1).seconds >= 0.95, String(events.at(-1).seconds))

  events.length = 0
  await assert.rejects(api.post('/post', { a: 1 }), (e) => {
    assert.ok(axios.isAxiosError(e), String(e))
    assert.equal(e.response.status, 503)
    assert.equal(e.response.data, 'status 503')
    return true
  })
  assert.equal(p.hits('/post'), 1)
  assert.deepEqual(decisions(events), ['gave_up@0:503'])

  await assert.rejects(api.get('/never'), (e) => e.response.status === 429 && e.response.data === 'status 429')
  assert.equal(p.hits('/never'), 3)

  // With every status resolving, the answers come through the success path.
  const lenient = rb.axios(axios.create({ baseURL: p.url, validateStatus: () => true }), {
    limiter: new rb.TokenBucket({ rate: 100, burst: 10 }),
    anyMethod: true,
    backoff: 0.05,
  })
  const posted = await lenient.post('/post-lenient', { a: 1 })
  assert.equal(posted.status, 200)
  assert.deepEqual(
    p.seen.filter((s) => s.path === '/post-lenient').map((s) => s.body),
    ['{"a":1}', '{"a":1}'],
  )
  await p.close()
})

test('axios: a burst of 30 concurrent calls below the partner: zero 429s', async (t) => {
  const p = await strictPartner(25, 20)
  const api = rb.axios(axios.create({ baseURL: p.url }), { limiter: new rb.TokenBucket({ rate: 20, burst: 5 }) })
  const start = now()
  const statuses = await Promise.all(Array.from({ length: 30 }, async () => (await api.get('/items')).status))
  const ms = now() - start
  t.diagnostic(`30 axios calls in ${ms.toFixed(0)} ms (ideal 1250); partner: ${p.count(200)} × 200, ${p.count(429)} × 429`)
  assert.deepEqual(statuses, Array(30).fill(200))
  assert.equal(p.count(200), 30)
  assert.equal(p.count(429), 0)
  assert.ok(ms >= 1200 && ms <= 1250 + SLACK_MS, `${ms} ms`)
  await p.close()
})

test('axios: timeout, signal, per-request key; eject', async () => {
  const p = await scriptedPartner({ '/x': [[200]] })
  const instance = axios.create({ baseURL: p.url })
  const api = rb.axios(instance, { limiter: new rb.KeyedLimiter({ rate: 1, burst: 1 }), timeout: 0.1 })
  assert.equal((await api.get('/x')).status, 200)
  await assert.rejects(api.get('/x'), rb.RateLimitExceededError)
  assert.equal((await api.get('/x', { ratebound: { key: 'other' } })).status, 200)
  const ac = new AbortController()
  const timer = setTimeout(() => ac.abort(), 50)
  await assert.rejects(api.get('/x', { signal: ac.signal, ratebound: { timeout: 5 } }), { name: 'AbortError' })
  clearTimeout(timer)
  assert.equal(p.hits('/x'), 2)
  assert.throws(() => rb.axios(instance, { limiter: new rb.TokenBucket({ rate: 1 }) }), { code: 'ERR_INVALID_ARG_VALUE' })
  assert.equal(rb.axios.eject(instance), true)
  assert.equal(rb.axios.eject(instance), false)
  assert.equal((await instance.get('/x')).status, 200, 'no limiter any more')
  await p.close()
})

// ---------------------------------------------------------------- bad input

test('bad input at construction: typed errors naming the value', async () => {
  const bucket = new rb.TokenBucket({ rate: 1 })
  const typed = (C, code, re) => (e) => e instanceof C && e.code === code && re.test(e.message)
  for (const make of [(o) => rb.fetch(o), (o) => rb.axios(axios.create(), o)]) {
    assert.throws(() => make(), typed(TypeError, 'ERR_INVALID_ARG_TYPE', /options are required/))
    assert.throws(() => make({}), typed(TypeError, 'ERR_INVALID_ARG_TYPE', /limiter is required/))
    assert.throws(() => make({ limiter: {} }), typed(TypeError, 'ERR_INVALID_ARG_TYPE', /limiter must be a token bucket/))
    assert.throws(() => make({ limiter: bucket, timeot: 1 }), typed(TypeError, 'ERR_RATEBOUND_INVALID_OPTION', /'timeot'/))
    // The core's rule and message (Sending::from_loose), as Python's.
    for (const [bad, re] of [[-1, /invalid timeout -1/], [NaN, /invalid timeout NaN/], [Infinity, /invalid timeout inf/], [1e300, /invalid timeout 1e300/]]) {
      assert.throws(() => make({ limiter: bucket, timeout: bad }), typed(RangeError, 'ERR_RATEBOUND_INVALID_NUMBER', re))
    }
    assert.throws(() => make({ limiter: bucket, timeout: '5' }), typed(TypeError, 'ERR_INVALID_ARG_TYPE', /timeout.*"5"/))
    assert.throws(() => make({ limiter: bucket, n: 0 }), typed(RangeError, 'ERR_RATEBOUND_INVALID_NUMBER', /n 0/))
    assert.throws(() => make({ limiter: bucket, retries: 1.5 }), (e) => e instanceof RangeError && /retries/.test(e.message))
    assert.throws(() => make({ limiter: bucket, maxPause: 0 }), (e) => e instanceof RangeError && /max_?pause/i.test(e.message))
    assert.throws(() => make({ limiter: bucket, backoff: 0 }), typed(RangeError, 'ERR_RATEBOUND_INVALID_NUMBER', /invalid backoff 0/))
    assert.throws(() => make({ limiter: bucket, backoff: '1' }), typed(TypeError, 'ERR_INVALID_ARG_TYPE', /backoff.*"1"/))
    assert.throws(() => make({ limiter: bucket, anyMethod: 'yes' }), typed(TypeError, 'ERR_INVALID_ARG_TYPE', /anyMethod.*"yes"/))
    assert.throws(() => make({ limiter: new rb.KeyedLimiter({ rate: 1 }), key: {} }), typed(TypeError, 'ERR_INVALID_ARG_TYPE', /key/))
    assert.throws(() => make({ limiter: bucket, onDecision: 'log' }), typed(TypeError, 'ERR_INVALID_ARG_TYPE', /onDecision/))
  }
  assert.throws(() => rb.fetch({ limiter: bucket, fetch: 'no' }), typed(TypeError, 'ERR_INVALID_ARG_TYPE', /fetch/))
  assert.throws(() => rb.axios({}, { limiter: bucket }), typed(TypeError, 'ERR_INVALID_ARG_TYPE', /axios instance/))

  // A window cannot be paused: refused before any request.
  const io = new IORedis({ host: HOST, port: 1, lazyConnect: true })
  const windows = [
    [new rb.FixedWindow({ limit: 10, window: 1 }), 'fixed_window'],
    [new rb.SlidingWindow({ limit: 10, window: 1 }), 'sliding_window'],
    [new rb.SlidingLog({ limit: 10, window: 1 }), 'sliding_log'],
    [new rb.LeakyBucket({ rate: 10, maxDelay: 1 }), 'leaky_bucket'],
    [new rb.AllOf([bucket]), 'all_of'],
    [new rb.KeyedLimiter({ algorithm: 'fixed_window', limit: 10, window: 1 }), 'fixed_window'],
    [new rb.SharedKeyedLimiter({ path: path.join(TMP, 'win.limit'), algorithm: 'sliding_window', limit: 10, window: 1 }), 'sliding_window'],
    [new rb.redis.FixedWindow({ client: io, limit: 10, window: 1 }), 'fixed_window'],
    [new rb.redis.SlidingWindow({ client: io, limit: 10, window: 1 }), 'sliding_window'],
  ]
  for (const [limiter, algorithm] of windows) {
    for (const make of [(o) => rb.fetch(o), (o) => rb.axios(axios.create(), o)]) {
      assert.throws(
        () => make({ limiter }),
        typed(TypeError, 'ERR_RATEBOUND_UNSUPPORTED', new RegExp(`${algorithm} does not support pause \\(an outbound limiter must be a token bucket\\)`)),
        algorithm,
      )
    }
  }
  // Every bucket is taken; making the adapter touches no key.
  const keyed = new rb.KeyedLimiter({ rate: 1 })
  for (const limiter of [
    bucket,
    keyed,
    new rb.SharedTokenBucket({ path: path.join(TMP, 'bucket.limit'), rate: 1, burst: 1 }),
    new rb.SharedKeyedLimiter({ path: path.join(TMP, 'keyed.limit'), rate: 1, burst: 1 }),
    new rb.redis.TokenBucket({ client: io, rate: 1, onError: 'closed' }),
  ]) {
    assert.equal(typeof rb.fetch({ limiter }), 'function')
  }
  assert.equal(keyed.size, 0)
  io.disconnect()

  // A request's own options are checked too: its promise rejects.
  const call = rb.fetch({ limiter: bucket, fetch: async () => assert.fail('sent') })
  await assert.rejects(call('http://127.0.0.1:1/', { ratebound: { timeout: -2 } }), typed(RangeError, 'ERR_RATEBOUND_INVALID_NUMBER', /timeout -2/))
  await assert.rejects(call('http://127.0.0.1:1/', { ratebound: { tiemout: 1 } }), typed(TypeError, 'ERR_RATEBOUND_INVALID_OPTION', /'tiemout'/))
  await assert.rejects(call('http://127.0.0.1:1/', { ratebound: { key: {} } }), typed(TypeError, 'ERR_INVALID_ARG_TYPE', /ratebound.key/))
})

// ------------------------------------------------- refusals and outages

// The gaps between the partner's receptions on `pathname`, in ms.
const gaps = (p, pathname) => {
  const at = p.seen.filter((s) => s.path === pathname).map((s) => s.at)
  return at.slice(1).map((t, i) => t - at[i])
}

// One GET of `pathname` through `adapter` ('fetch' or 'axios'); its status.
async function get(adapter, p, pathname, options) {
  if (adapter === 'fetch') {
    const res = await rb.fetch(options)(`${p.url}${pathname}`)
    await res.text()
    return res.status
  }
  const api = rb.axios(axios.create({ baseURL: p.url, validateStatus: () => true }), options)
  return (await api.get(pathname)).status
}

for (const adapter of ['fetch', 'axios']) {
  test(`${adapter}: a bare 429 is retried only after the backoff, doubling up to maxPause`, async (t) => {
    // A reverse proxy's limiter: 429 with no Retry-After, no RateLimit
    // fields, three times. Before: the retries went out at once.
    const p = await scriptedPartner({ '/bare': [[429], [429], [429], [200]] })
    const events = []
    const status = await get(adapter, p, '/bare', {
      limiter: new rb.TokenBucket({ rate: 100, burst: 10 }),
      retries: 3,
      backoff: 0.2,
      maxPause: 0.5,
      onDecision: (e) => events.push(e),
    })
    assert.equal(status, 200)
    const g = gaps(p, '/bare')
    t.diagnostic(`gaps ${g.map((x) => x.toFixed(1)).join(', ')} ms`)
    assert.equal(g.length, 3)
    // 200 ms, doubled to 400, doubled to 800 and cut to 500: lower bounds
    // (the pause starts when the refusal is read, after the partner sent it).
    for (const [i, pause] of [200, 400, 500].entries()) assert.ok(g[i] >= pause - 5, `gap ${i}: ${g[i]} ms < ${pause} ms`)
    assert.deepEqual(
      events.filter((e) => e.outcome === 'paused').map((e) => [e.seconds, e.attempt, e.capped, e.local]),
      [[0.2, 0, false, false], [0.4, 1, false, false], [0.5, 2, true, false]],
    )
    await p.close()
  })

  for (const onError of ['local', 'open']) {
    test(`${adapter}: a partner's Retry-After outlives a Redis outage (onError '${onError}')`, async (t) => {
      // Redis is killed, then the partner answers 429 Retry-After: 1: the
      // pause cannot reach Redis, so the adapter keeps it in this process
      // (and a limiter failing 'local' pauses its local share). Before: the
      // retry went out at once, admitted by the fail policy.
      const server = await new RedisServer(await freePort()).start()
      const client = await redisClient(server.port)
      const limiter = new rb.redis.TokenBucket({
        client,
        prefix: `outage-${crypto.randomBytes(6).toString('hex')}:`,
        rate: 100,
        burst: 10,
        onError,
        ...(onError === 'local' ? { localRate: 50 } : {}),
        timeout: 0.2,
      })
      await server.kill()
      const warnings = []
      const onWarning = (w) => w.code === 'RATEBOUND_OUTBOUND_FAILS_OPEN' && warnings.push(w)
      process.on('warning', onWarning)
      const p = await scriptedPartner({ '/outage': [[429, { 'retry-after': '1' }], [200]] })
      const events = []
      const probes = []
      const status = await get(adapter, p, '/outage', {
        limiter,
        key: 'partner',
        onDecision: (e) => {
          events.push(e)
          // While the pause holds, the local share refuses.
          if (e.outcome === 'paused' && onError === 'local') probes.push(limiter.check('partner'))
        },
      })
      assert.equal(status, 200)
      const g = gaps(p, '/outage')
      t.diagnostic(`Redis down: the retry ${g[0].toFixed(1)} ms after the 429`)
      assert.equal(g.length, 1)
      assert.ok(g[0] >= 1000 - 5, `the retry ${g[0]} ms after the refusal`)
      const paused = events.filter((e) => e.outcome === 'paused')
      assert.deepEqual(paused.map((e) => [e.seconds, e.local]), [[1, true]])
      if (onError === 'local') {
        assert.equal(probes.length, 1)
        assert.equal((await probes[0]).allowed, false, 'the local share is paused')
      }
      // The outbound default: a limiter failing open is warned about.
      await new Promise((resolve) => setImmediate(resolve))
      process.off('warning', onWarning)
      assert.equal(warnings.length, onError === 'open' ? 1 : 0)
      await limiter.close()
      client.disconnect()
      clients.delete(client)
      await p.close()
    })
  }
}
