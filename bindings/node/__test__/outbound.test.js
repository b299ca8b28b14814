'use strict'
// rb.fetch and rb.axios against REAL HTTP partners on 127.0.0.1 (node:http;
// fixtures/outbound.js: their own tiny token bucket — not ratebound — that
// answers 429 with Retry-After when over their limit and counts what they
// answered); the fleet tests use a redis-server the fixture starts. Bad
// input, refusals and outages: outbound_refusals.test.js. Every loop is
// bounded, every timer cleared, every server closed; nothing but 127.0.0.1
// is contacted.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { once } = require('node:events')
const axios = require('axios')
const rb = require('..')
const { sleep, now, unhandledRejections } = require('./fixtures/common.js')
const { SLACK_MS, cleanup, strictPartner, scriptedPartner, fleet, outcomes, decisions } = require('./fixtures/outbound.js')

// Every rejection nobody handled, anywhere in this file: there must be none.
const unhandled = unhandledRejections()

after(async () => {
  await cleanup()
  assert.deepEqual(unhandled, [], 'unhandled rejections')
})

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
  // The pauses and retries only (learning: outbound_learn.test.js).
  const call = rb.fetch({ limiter, backoff: 0.05, adaptive: false, onDecision: (e) => events.push(e) })
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

  const any = rb.fetch({ limiter, anyMethod: true, backoff: 0.05, adaptive: false })
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
  // The pauses and retries only (learning: outbound_learn.test.js).
  const call = rb.fetch({ limiter, maxPause: 1, backoff: 0.05, adaptive: false, onDecision: (e) => events.push(e) })
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
    // The retries and pauses alone (learning is outbound_learn*.test.js').
    adaptive: false,
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
