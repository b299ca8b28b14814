'use strict'
// rb.fetch and rb.axios (split from outbound.test.js): bad input at
// construction, and refusals and outages — a bare 429's backoff, a limiter
// whose Redis is down — against REAL HTTP partners on 127.0.0.1
// (fixtures/outbound.js) and a redis-server started here. Every loop is
// bounded, every timer cleared, every server closed; nothing but 127.0.0.1
// is contacted.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const crypto = require('node:crypto')
const path = require('node:path')
const IORedis = require('ioredis')
const axios = require('axios')
const rb = require('..')
const { unhandledRejections } = require('./fixtures/common.js')
const { HOST, Server: RedisServer, freePort } = require('./fixtures/redis-server.js')
const { TMP, clients, cleanup, scriptedPartner, redisClient } = require('./fixtures/outbound.js')

// Every rejection nobody handled, anywhere in this file: there must be none.
const unhandled = unhandledRejections()

after(async () => {
  await cleanup()
  assert.deepEqual(unhandled, [], 'unhandled rejections')
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
