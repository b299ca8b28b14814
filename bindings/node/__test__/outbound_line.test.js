'use strict'
// A learning adapter takes no slot further than the core's line horizon
// (1 s) ahead (issue 39): a fleet in a long line keeps the pace of the
// rate in force when each slot was taken, so a rise of the learned rate
// would reach the partner a queue's length late. The adapter asks its
// limiter for the tokens within the horizon; the limiter refuses further
// ones at once (RateLimitExceededError, nothing taken), and the adapter
// hands that to the machine (`call.beyond`), which says hold, then ask
// again. Here five calls at once through a bucket of 2/s burst 1 and a
// REAL partner on 127.0.0.1: the fifth's slot is 2 s away — refused once,
// held, asked again and sent: every call is answered, none fails. With
// `adaptive: false` the adapter asks with no limit and joins the line as
// before. The rule itself (how long the hold is, a timeout too short to
// hold) is the core's: spec/outbound_calls.json's `line-*` vectors.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const axios = require('axios')
const rb = require('..')
const { startServer } = require('./fixtures/redis-server.js')
const { ioredis, closeAll } = require('./fixtures/redis-clients.js')
const { TMP, cleanup, partner } = require('./fixtures/outbound.js')

after(async () => {
  await closeAll()
  await cleanup()
})

const CALLS = 5

let redis = null
let files = 0
const LIMITERS = {
  local: async () => new rb.TokenBucket({ rate: 2, burst: 1 }),
  shared: async () => new rb.SharedTokenBucket({ path: path.join(TMP, `line-${process.pid}-${files++}.limit`), rate: 2, burst: 1 }),
  redis: async () => {
    redis ??= await startServer()
    const client = await ioredis(redis.port)
    return new rb.redis.TokenBucket({ client, prefix: `line-${process.pid}-${files++}:`, rate: 2, burst: 1, onError: 'closed', timeout: 1 })
  },
}

const ADAPTERS = {
  fetch: (url, options) => {
    const f = rb.fetch(options)
    return async () => (await f(url)).status
  },
  axios: (url, options) => {
    const api = rb.axios(axios.create({ validateStatus: () => true }), options)
    return async () => (await api.get(url)).status
  },
}

// Records every ask for tokens the adapter makes on `limiter`: its
// timeout, and how far the tokens were when the limiter refused them.
function spy(limiter) {
  const asks = []
  const acquire = limiter.acquire
  limiter.acquire = async function (...args) {
    const timeout = args.at(-1)?.timeout ?? null
    try {
      await acquire.apply(this, args)
    } catch (e) {
      asks.push([timeout, e instanceof rb.RateLimitExceededError ? e.retryAfter : String(e)])
      throw e
    }
    asks.push([timeout, null])
  }
  return asks
}

for (const [name, adapter] of Object.entries(ADAPTERS)) {
  for (const [kind, make] of Object.entries(LIMITERS)) {
    test(`${name} over a ${kind} bucket: a line beyond the horizon is held and asked again, not failed`, async () => {
      const p = await partner(() => [200, {}, 'ok'])
      const limiter = await make()
      const asks = spy(limiter)
      const get = adapter(`${p.url}/v1`, { limiter, retries: 0 })
      const statuses = await Promise.all(Array.from({ length: CALLS }, () => get()))
      assert.deepEqual(statuses, Array(CALLS).fill(200))
      // Every ask within the horizon; at least one refused beyond it (a
      // Redis bucket's deadline counts its round trip: a wait just under
      // 1 s is beyond it), then asked again and served.
      assert.ok(asks.every(([timeout]) => timeout === 1), JSON.stringify(asks))
      const refused = asks.filter(([, wait]) => wait !== null).map(([, wait]) => wait)
      assert.ok(refused.length > 0 && refused.every((w) => typeof w === 'number' && w > 0.9), JSON.stringify(asks))
      assert.equal(asks.length, CALLS + refused.length, JSON.stringify(asks))
      await p.close()
    })
  }
}

test('without learning the line is joined however long', async () => {
  const p = await partner(() => [200, {}, 'ok'])
  const limiter = new rb.TokenBucket({ rate: 2, burst: 1 })
  const asks = spy(limiter)
  const get = ADAPTERS.fetch(`${p.url}/v1`, { limiter, retries: 0, adaptive: false })
  const statuses = await Promise.all(Array.from({ length: CALLS }, () => get()))
  assert.deepEqual(statuses, Array(CALLS).fill(200))
  assert.deepEqual(asks, Array(CALLS).fill([null, null]))
  await p.close()
})
