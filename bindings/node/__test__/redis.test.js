'use strict'
// Global limits in Redis (rb.redis.*) against REAL Redis servers that this
// file starts itself: redis-server on free 127.0.0.1 ports, no persistence,
// in a temporary directory, all killed at the end (also a 3-master cluster).
// Every loop is bounded in time; nothing but 127.0.0.1 is contacted.
// Without redis-server every test here FAILS (ci/test installs it).
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { once } = require('node:events')
const fs = require('node:fs')
const path = require('node:path')
const IORedis = require('ioredis')
const { createClient } = require('redis')
const rb = require('..')
const { sleep, now, unhandledRejections } = require('./fixtures/common.js')
const { get, expressAndFastify } = require('./fixtures/http.js')

const SPEC = path.join(__dirname, '..', '..', '..', 'spec', 'redis.json')

// Every rejection nobody handled, anywhere in this file: there must be none.
const unhandled = unhandledRejections()

const { HOST, startCluster, cli, freePort, slotOf } = require('./fixtures/redis-server.js')
const { clients, dropClient, closeAll, ioredis, nodeRedis, CLIENTS, clusterClients, randomKey, limiterFor, specDifferences, main } = require('./fixtures/redis-clients.js')

after(closeAll)

async function closeClient(c) {
  dropClient(c)
}

// ------------------------------------------------------------------- spec vectors

test('spec/redis.json: every vector with ioredis and node-redis, zero differences', async () => {
  const server = await main()
  const { vectors } = JSON.parse(fs.readFileSync(SPEC, 'utf8'))
  assert.ok(vectors.length >= 8)
  for (const [kind, connect] of Object.entries(CLIENTS)) {
    const client = await connect(server.port)
    const failures = []
    let steps = 0
    for (const v of vectors) {
      let lim = limiterFor(v.config, client)
      const key = randomKey(v.id)
      for (const [i, step] of v.steps.entries()) {
        if (step.config !== undefined) {
          // A redeploy: the same key under new settings from here on.
          await lim.close()
          lim = limiterFor(step.config, client)
        }
        const d = await lim.checkAt(key, step.n ?? 1, step.at_us)
        steps++
        failures.push(...specDifferences(`${v.id} step ${i}`, step.expect, d))
      }
      await lim.close()
    }
    assert.deepEqual(failures, [], `${kind}: differences from spec/redis.json`)
    assert.equal(steps, vectors.reduce((sum, v) => sum + v.steps.length, 0))
    assert.ok(steps >= 50, `${kind}: ${steps} steps replayed`)
    await closeClient(client)
  }
})

test("the driver detects each client; keys go to Redis as raw bytes after the prefix and the algorithm's tag", async () => {
  const server = await main()
  const io = await ioredis(server.port)
  const nr = await nodeRedis(server.port)
  const a = new rb.redis.TokenBucket({ client: io, rate: 1, burst: 5, prefix: 'rbtest:' })
  const b = rb.redis.TokenBucket({ client: nr, rate: 1, burst: 5, prefix: 'rbtest:' }) // without `new`
  assert.equal(a.clientKind, 'ioredis')
  assert.equal(b.clientKind, 'node-redis')
  assert.ok(b instanceof rb.redis.TokenBucket)
  const base = randomKey('raw')
  // '1', 1 and Buffer.from('1') are one key in Redis, shared by both clients.
  assert.equal((await a.check(`${base}1`)).remaining, 4)
  assert.equal((await b.check(Buffer.from(`${base}1`))).remaining, 3)
  assert.equal(await io.exists(`rbtest:tb:${base}1`), 1)
  const n = 7_000_000_000_123
  await a.check(n)
  await b.check(String(n))
  assert.equal((await a.check(n)).remaining, 2)
  await io.del(`rbtest:tb:${n}`)
  const keys = ['with spaces and\ttabs', 'ünïcødé ✓ 🚦 key', 'k'.repeat(10 * 1024), Buffer.from([0, 255, 10, 13, 32, 0])]
  for (const key of keys) {
    for (const lim of [a, b]) {
      const d = await lim.check(key)
      assert.equal(d.source, 'redis', `${lim.clientKind} ${String(key).slice(0, 20)}`)
      assert.equal(d.allowed, true)
    }
    const raw = Buffer.concat([Buffer.from('rbtest:tb:'), Buffer.isBuffer(key) ? key : Buffer.from(key, 'utf8')])
    assert.equal(await io.exists(raw), 1, `the key is stored as its raw bytes: ${raw.subarray(0, 40)}`)
    assert.equal((await a.check(key)).remaining, 2, 'both clients count on one key')
    await io.del(raw)
  }
  await closeClient(io)
  await closeClient(nr)
})

test("what became of a call: the engine's rule, as in Python", () => {
  // A reply that is no array of integers is the engine's Malformed, a
  // failure for the fail policy (a fraction was -1 here, a non-array
  // 'unexpected reply'); timedOut is read before a reply, then error, and
  // nothing at all is a failure (test_redis.py: the same answers).
  const e = new rb.RedisEngine({ rate: 10, burst: 20, onError: 'closed', breakerThreshold: 100 })
  const good = [1, 19, 0, 100000, 1, 0, 7, 0, 0]
  for (const reply of ['garbage', Buffer.from('garbage'), [1, 2.5], [[1]], 5, [1, '2'], {}]) {
    assert.equal(e.finish(e.begin('k'), reply).source, 'fail_closed', String(reply))
  }
  assert.equal(e.finish(e.begin('k'), good, true).source, 'fail_closed')
  assert.equal(e.finish(e.begin('k'), good, false, 'down').source, 'fail_closed')
  assert.equal(e.finish(e.begin('k'), null).source, 'fail_closed')
  assert.equal(e.finish(e.begin('k'), good).source, 'redis')
})

test('bad input: typed errors naming the value, never a crash', async () => {
  const server = await main()
  const io = await ioredis(server.port)
  const lim = new rb.redis.TokenBucket({ client: io, rate: 10, burst: 20 })
  const rejects = async (p, name, code, re) => {
    await assert.rejects(p, (e) => {
      assert.equal(e.name, name, e.message)
      assert.equal(e.code, code, e.message)
      if (re) assert.match(e.message, re)
      return true
    })
  }
  const throws = (fn, name, code, re) =>
    assert.throws(fn, (e) => {
      assert.equal(e.name, name, e.message)
      assert.equal(e.code, code, e.message)
      if (re) assert.match(e.message, re)
      return true
    })
  // n = 0 is a query, as for every local limiter.
  const q = await lim.check('k', 0)
  assert.deepEqual([q.allowed, q.remaining, q.source], [true, 20, 'redis'])
  await rejects(lim.check('k', 21), 'RangeError', 'ERR_RATEBOUND_INSUFFICIENT_CAPACITY', /21/)
  await rejects(lim.check('k', 1.5), 'RangeError', 'ERR_RATEBOUND_INVALID_NUMBER', /1\.5/)
  await rejects(lim.check('k', -1), 'RangeError', 'ERR_RATEBOUND_INVALID_NUMBER')
  await rejects(lim.tryAcquire('k', NaN), 'RangeError', 'ERR_RATEBOUND_INVALID_NUMBER')
  await rejects(lim.check({}), 'TypeError', 'ERR_INVALID_ARG_TYPE')
  await rejects(lim.check(null), 'TypeError', 'ERR_INVALID_ARG_TYPE')
  await rejects(lim.check(2 ** 60), 'RangeError', 'ERR_RATEBOUND_INVALID_KEY')
  await rejects(lim.checkAt('k', 1, -5), 'RangeError', 'ERR_RATEBOUND_INVALID_NUMBER', /nowUs/)
  const C = rb.redis.TokenBucket
  throws(() => new C(), 'TypeError', 'ERR_INVALID_ARG_TYPE')
  throws(() => new C({ rate: 1 }), 'TypeError', 'ERR_INVALID_ARG_TYPE', /client/)
  throws(() => new C({ client: {}, rate: 1 }), 'TypeError', 'ERR_INVALID_ARG_TYPE', /evalsha/)
  throws(() => new C({ client: io, rate: 1, onErorr: 'open' }), 'TypeError', 'ERR_RATEBOUND_INVALID_OPTION', /onErorr/)
  throws(() => new C({ client: io, rate: 1, onError: 'maybe' }), 'TypeError', 'ERR_RATEBOUND_INVALID_OPTION', /onError "maybe"/)
  throws(() => new C({ client: io, rate: 1, onError: 'local' }), 'TypeError', 'ERR_RATEBOUND_INVALID_OPTION', /localRate/)
  throws(() => new C({ client: io, rate: 1, onError: 'local', localRate: -2 }), 'TypeError', 'ERR_RATEBOUND_INVALID_OPTION', /localRate "-2"/)
  throws(() => new C({ client: io, rate: 1, onError: 3 }), 'TypeError', 'ERR_INVALID_ARG_TYPE', /onError/)
  throws(() => new C({ client: io, rate: 1, timeout: 0 }), 'RangeError', 'ERR_RATEBOUND_INVALID_NUMBER', /timeout 0/)
  throws(() => new C({ client: io, rate: 1, timeout: -1 }), 'RangeError', 'ERR_RATEBOUND_INVALID_NUMBER', /timeout/)
  throws(() => new C({ client: io, rate: 1, timeout: 1e9 }), 'RangeError', 'ERR_RATEBOUND_INVALID_NUMBER', /timeout/)
  throws(() => new C({ client: io, rate: 1, lease: 2.5 }), 'RangeError', 'ERR_RATEBOUND_INVALID_NUMBER', /lease 2\.5/)
  throws(() => new C({ client: io, rate: 1, leaseTtl: 0, lease: 2 }), 'RangeError', 'ERR_RATEBOUND_INVALID_NUMBER', /leaseTtl/)
  throws(() => new C({ client: io, rate: 2e6 }), 'RangeError', 'ERR_RATEBOUND_RATE_TOO_HIGH', /1000000/)
  throws(() => new C({ client: io, rate: 0 }), 'RangeError', 'ERR_RATEBOUND_INVALID_RATE')
  throws(() => new C({ client: io, rate: '10 per fortnight' }), 'TypeError', 'ERR_RATEBOUND_PARSE_ERROR')
  throws(() => new C({ client: io, burst: 3 }), 'TypeError', 'ERR_RATEBOUND_MISSING', /missing rate/)
  throws(() => new C({ client: io, limit: 3, window: 1 }), 'TypeError', 'ERR_RATEBOUND_INVALID_OPTION', /limit/)
  throws(() => new C({ client: io, rate: 1, prefix: 7 }), 'TypeError', 'ERR_INVALID_ARG_TYPE', /prefix/)
  throws(() => new rb.redis.FixedWindow({ client: io, limit: 10, window: 1e-7 }), 'RangeError', 'ERR_RATEBOUND_INVALID_WINDOW')
  throws(() => new rb.redis.SlidingWindow({ client: io, limit: 10, window: 1, lease: 3 }), 'TypeError', 'ERR_RATEBOUND_UNSUPPORTED')
  throws(() => new rb.redis.FixedWindow({ client: io, limit: 10 }), 'TypeError', 'ERR_RATEBOUND_MISSING', /missing window/)
  throws(() => new rb.RedisEngine({ rate: 1, breakerThreshold: 0 }), 'RangeError', 'ERR_RATEBOUND_INVALID_NUMBER', /breakerThreshold/)
  // The limiter still works after all that.
  assert.equal((await lim.check(randomKey('after-bad-input'))).source, 'redis')
  await closeClient(io)
})

test('unreachable Redis (a closed port): the fail policy answers within the deadline, never a hang', async () => {
  const port = await freePort() // nothing listens there
  const made = []
  // Clients as people make them: defaults (commands queue while
  // disconnected), and the fail-fast settings.
  const io1 = new IORedis({ host: HOST, port, retryStrategy: () => 50 })
  const io2 = new IORedis({ host: HOST, port, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => 50 })
  const nr1 = createClient({ socket: { host: HOST, port, reconnectStrategy: () => 50 } })
  const nr2 = createClient({ socket: { host: HOST, port, reconnectStrategy: () => 50 }, disableOfflineQueue: true })
  const nr3 = createClient({ socket: { host: HOST, port } }) // never connected
  for (const c of [io1, io2, nr1, nr2, nr3]) {
    c.on('error', () => {})
    clients.add(c)
  }
  nr1.connect().catch(() => {})
  nr2.connect().catch(() => {})
  let worst = 0
  for (const [policy, extra, source, allowed] of [
    ['open', {}, 'fail_open', true],
    ['closed', {}, 'fail_closed', false],
    ['local', { localRate: 5 }, 'local', true], // a local burst of 20 × 5/10 = 10
  ]) {
    for (const c of [io1, io2, nr1, nr2, nr3]) {
      const lim = new rb.redis.TokenBucket({ client: c, rate: 10, burst: 20, onError: policy, breakerCooldown: 5, ...extra })
      made.push(lim)
      for (let i = 0; i < 5; i++) {
        const t = now()
        const d = await lim.check('down')
        const took = now() - t
        worst = Math.max(worst, took)
        assert.equal(d.source, source, `${policy} ${lim.clientKind} call ${i}`)
        assert.equal(d.allowed, allowed, `${policy} ${lim.clientKind} call ${i}`)
        // Within the deadline, not the client's own reconnects and queues
        // (many seconds, or never): a liveness bound (2.5 s of slack) for a
        // loaded machine. The exact instant is redis_deadline.test.js'
        // (virtual time).
        assert.ok(took <= 50 + 2500, `${policy} ${lim.clientKind} call ${i} took ${took.toFixed(1)} ms (deadline 50 ms)`)
        if (policy === 'closed') assert.equal(d.retryAfter, 5)
      }
      assert.equal(lim.breakerOpen, true, 'three failures open the breaker')
    }
  }
  assert.equal(await made[0].close(), 0)
  for (const c of [io1, io2, nr1, nr2, nr3]) dropClient(c)
  await sleep(60) // late rejections of queued commands, if any, surface here
  assert.deepEqual(unhandled, [])
  console.log(`# unreachable Redis: slowest answer ${worst.toFixed(1)} ms (deadline 50 ms)`)
})

// ------------------------------------------------------------------ the incident

test('the incident: 50 instances share 10/s burst 20 through Redis; 50 local buckets do not', async () => {
  const server = await main()
  const key = randomKey('partner-api')
  const INSTANCES = 50
  const instances = []
  for (let i = 0; i < INSTANCES; i++) {
    const client = i % 2 === 0 ? await ioredis(server.port) : await nodeRedis(server.port)
    instances.push({
      client,
      global: new rb.redis.TokenBucket({ client, rate: 10, burst: 20, onError: 'closed', timeout: 1 }),
      local: new rb.TokenBucket({ rate: 10, burst: 20 }),
    })
  }
  let admitted = 0
  let localAdmitted = 0
  let requests = 0
  const sources = new Map()
  const DURATION = 3000
  const t0 = now()
  await Promise.all(
    instances.map(async ({ global, local }, i) => {
      await sleep(i % 10) // staggered starts
      while (now() - t0 < DURATION) {
        const d = await global.check(key)
        requests++
        sources.set(d.source, (sources.get(d.source) ?? 0) + 1)
        if (d.allowed) admitted++
        if (local.tryAcquire()) localAdmitted++
        await sleep(15)
      }
    }),
  )
  const elapsed = (now() - t0) / 1000
  const bound = 20 + 10 * elapsed + 1
  const line = `incident: ${requests} requests in ${elapsed.toFixed(3)} s; Redis admitted ${admitted} (bound ${bound.toFixed(1)}), 50 local buckets admitted ${localAdmitted}`
  console.log(`# ${line}`)
  assert.deepEqual([...sources.keys()], ['redis'], `every decision from Redis: ${JSON.stringify([...sources])}`)
  assert.ok(admitted <= bound, line)
  assert.ok(admitted >= 0.9 * bound, line)
  assert.ok(localAdmitted > 20 * bound, `local buckets multiply the limit: ${line}`)
  for (const { client } of instances) await closeClient(client)
})

// ----------------------------------------------------------------------- cluster

test('cluster: 3 masters, keys on different masters, the bound holds per key', async () => {
  const nodes = await startCluster()
  const { io, nr } = await clusterClients(nodes[0].port)
  // Which port serves which slots.
  const slots = await io.cluster('SLOTS')
  const owner = (slot) => slots.find(([from, to]) => slot >= from && slot <= to)[2][1]
  // One key per master.
  const keys = new Map()
  for (let i = 0; keys.size < 3 && i < 10000; i++) {
    const k = `partner-${i}`
    const port = owner(slotOf(`rb:tb:${k}`))
    if (!keys.has(port)) keys.set(port, k)
  }
  assert.equal(keys.size, 3, 'a key on each master')
  const lines = []
  const instances = []
  for (const [cluster] of [[io], [nr]]) {
    for (let i = 0; i < 3; i++) instances.push(new rb.redis.TokenBucket({ client: cluster, rate: 5, burst: 10, onError: 'closed', timeout: 1 }))
  }
  assert.deepEqual([...new Set(instances.map((l) => l.clientKind))], ['ioredis-cluster', 'node-redis'])
  const admitted = new Map([...keys.values()].map((k) => [k, 0]))
  const sources = new Set()
  const t0 = now()
  await Promise.all(
    instances.flatMap((lim) =>
      [...keys.values()].map(async (key) => {
        while (now() - t0 < 1500) {
          const d = await lim.check(key)
          sources.add(d.source)
          if (d.allowed) admitted.set(key, admitted.get(key) + 1)
          await sleep(10)
        }
      }),
    ),
  )
  const elapsed = (now() - t0) / 1000
  const bound = 10 + 5 * elapsed + 1
  assert.deepEqual([...sources], ['redis'])
  for (const [port, key] of keys) {
    const got = admitted.get(key)
    lines.push(`${key}@${port}: ${got}`)
    assert.ok(got <= bound && got >= 0.8 * bound, `${key} on :${port}: admitted ${got}, bound ${bound.toFixed(1)}`)
    assert.equal(await cli(port, 'EXISTS', `rb:tb:${key}`), '1', `rb:tb:${key} lives on :${port}`)
  }
  assert.ok(instances.reduce((s, l) => s + l.stats.evals, 0) >= 3, 'NOSCRIPT on each node loads the script')
  console.log(`# cluster: admitted per key in ${elapsed.toFixed(2)} s (bound ${bound.toFixed(1)}): ${lines.join(', ')}`)
  dropClient(io)
  dropClient(nr)
  for (const n of nodes) await n.kill()
})

// ----------------------------------------------------------------------- leasing

test('leasing: lease 1, 10, 100 — the bound holds under concurrency, round trips drop by about k', async () => {
  const server = await main()
  const trips = {}
  const lines = []
  for (const k of [1, 10, 100]) {
    const instances = []
    for (let i = 0; i < 4; i++) {
      const client = i % 2 === 0 ? await ioredis(server.port) : await nodeRedis(server.port)
      instances.push({ client })
    }
    // Round trips, demand under the rate: 4 instances × 5 concurrent loops × 60.
    const roomy = randomKey(`lease-${k}-roomy`)
    for (const inst of instances) inst.lim = new rb.redis.TokenBucket({ client: inst.client, rate: 100000, burst: 100000, lease: k, timeout: 1, onError: 'closed' })
    await cli(server.port, 'CONFIG', 'RESETSTAT')
    let total = 0
    await Promise.all(
      instances.flatMap(({ lim }) =>
        Array.from({ length: 5 }, async () => {
          for (let j = 0; j < 60; j++) {
            const d = await lim.check(roomy)
            assert.ok(d.allowed && (d.source === 'redis' || d.source === 'lease'), JSON.stringify(d))
            total++
          }
        }),
      ),
    )
    const calls = instances.reduce((s, { lim }) => s + lim.stats.calls, 0)
    const evals = instances.reduce((s, { lim }) => s + lim.stats.evals, 0)
    const info = await cli(server.port, 'INFO', 'commandstats')
    const served = ['evalsha', 'eval'].reduce((s, c) => s + Number(new RegExp(`cmdstat_${c}:calls=(\\d+)`).exec(info)?.[1] ?? 0), 0)
    assert.equal(served, calls + evals, `Redis ran the driver's ${calls} EVALSHA and ${evals} EVAL`)
    // The keys asked of Redis: each call alone, each member of a batch.
    trips[k] = instances.reduce((s, { lim }) => s + lim.stats.calls - lim.stats.batches + lim.stats.batched, 0)
    for (const { lim } of instances) await lim.close()

    // The bound, demand far above the rate: 20/s burst 100.
    const tight = randomKey(`lease-${k}-tight`)
    for (const inst of instances) inst.lim = new rb.redis.TokenBucket({ client: inst.client, rate: 20, burst: 100, lease: k, timeout: 1, onError: 'closed' })
    let admitted = 0
    const t0 = now()
    await Promise.all(
      instances.flatMap(({ lim }) =>
        Array.from({ length: 5 }, async () => {
          while (now() - t0 < 1200) {
            if ((await lim.check(tight)).allowed) admitted++
            await sleep(5)
          }
        }),
      ),
    )
    const elapsed = (now() - t0) / 1000
    const bound = 100 + 20 * elapsed + 1
    lines.push(`lease ${k}: ${total} checks, ${trips[k]} asked of Redis in ${calls} script calls; ${admitted} admitted under contention (bound ${bound.toFixed(1)})`)
    assert.ok(admitted <= bound, lines.at(-1))
    assert.ok(admitted >= 0.5 * bound, lines.at(-1))
    for (const { lim, client } of instances) {
      await lim.close()
      await closeClient(client)
    }
  }
  console.log(`# leasing: ${lines.join('; ')}`)
  assert.equal(trips[1], 1200)
  assert.ok(trips[1] / trips[10] >= 5, `lease 10: ${trips[1]} → ${trips[10]} asked of Redis`)
  assert.ok(trips[1] / trips[100] >= 30, `lease 100: ${trips[1]} → ${trips[100]} asked of Redis`)
})

test('close() gives leased tokens back', async () => {
  const server = await main()
  const client = await ioredis(server.port)
  const key = randomKey('return')
  const lim = new rb.redis.TokenBucket({ client, rate: 1, burst: 10, lease: 8 })
  const d = await lim.check(key)
  assert.deepEqual([d.source, d.remaining], ['redis', 7])
  assert.equal(lim.leased, 7)
  assert.equal(await lim.close(), 1)
  assert.equal(lim.leased, 0)
  const other = new rb.redis.TokenBucket({ client, rate: 1, burst: 10 })
  assert.equal((await other.check(key)).remaining, 8, 'the 7 unspent tokens are back in Redis')
  await closeClient(client)
})

test("a limiter's breakerOpen, leased, timeout, limit and algorithm are its engine's", async () => {
  const server = await main()
  const client = await ioredis(server.port)
  const tb = new rb.redis.TokenBucket({ client, rate: 1, burst: 10, lease: 4, timeout: 0.25 })
  const fw = rb.redis.FixedWindow({ client, limit: 7, window: 1 })
  assert.deepEqual(
    [tb.breakerOpen, tb.leased, tb.timeout, tb.limit, tb.algorithm],
    [false, 0, 0.25, 10, 'token_bucket'],
  )
  assert.deepEqual([fw.limit, fw.algorithm, fw.timeout], [7, 'fixed_window', 0.05])
  assert.equal((await tb.check(randomKey('through'))).source, 'redis')
  assert.equal(tb.leased, tb.engine.leased)
  assert.equal(tb.leased, 3)
  await tb.close()
  await closeClient(client)
})

// ------------------------------------------------------------- middleware

async function listen(app) {
  const server = app.listen(0, HOST)
  await once(server, 'listening')
  return server
}

test('middleware: a global limit in Redis is one policy away, shared by two instances (Express and Fastify)', async () => {
  const s = await main()
  const prefix = `${randomKey('mw')}:`
  const global = async () => rb.redis.TokenBucket({ client: await ioredis(s.port), rate: 1, burst: 2, prefix })
  // The local policy refills slowly (100/hour), so that what charged it shows.
  const policies = async () => [{ name: 'burst', rate: '100/hour' }, { name: 'global', limiter: await global() }]

  const { portA, portB, close } = await expressAndFastify(
    { policies: await policies(), key: { header: 'x-api-key' } },
    { policies: await policies(), key: { header: 'x-api-key' } },
  )
  try {
    const first = await get(portA, { 'x-api-key': 'alice' })
    assert.equal(first.status, 200)
    assert.equal(first.headers['ratelimit-policy'], '"burst";q=100;w=3600, "global";q=2;w=2')
    assert.equal(first.headers.ratelimit, '"burst";r=99;t=36, "global";r=1;t=1')
    assert.equal((await get(portB, { 'x-api-key': 'alice' })).status, 200)
    // The third, on either instance: the shared limit refuses.
    const third = await get(portA, { 'x-api-key': 'alice' })
    assert.equal(third.status, 429)
    assert.equal(third.headers['retry-after'], '1')
    assert.equal(third.headers.ratelimit, '"global";r=0;t=2')
    assert.equal((await get(portB, { 'x-api-key': 'alice' })).status, 429)
    // Another key has its own global bucket.
    assert.equal((await get(portB, { 'x-api-key': 'bob' })).status, 200)
    // Keyless requests are keyed by IP, globally too.
    assert.equal((await get(portA, {})).status, 200)
    // Once the global bucket has a token again, alice is admitted on A: its
    // local bucket was charged by her two admitted requests there (first,
    // this one), not by the refusal in between (that would leave 97).
    await sleep(1100)
    const again = await get(portA, { 'x-api-key': 'alice' })
    assert.equal(again.status, 200)
    assert.match(again.headers.ratelimit, /^"burst";r=98;/)
  } finally {
    await close()
  }
})

test('middleware: two Redis policies of one middleware never share a key', async () => {
  const express = require('express')
  const s = await main()
  const client = await ioredis(s.port)
  const prefix = `${randomKey('two')}:`
  // 10/hour burst 20 and 100/hour on one prefix: 60 requests let 20 through
  // (the burst); when both wrote rb:<key> they shared one state.
  const burst = rb.redis.TokenBucket({ client, rate: '10/hour burst 20', prefix, timeout: 2 })
  const hourly = rb.redis.TokenBucket({ client, rate: '100/hour', prefix, timeout: 2 })
  const app = express()
  app.use(rb.express({ policies: [{ name: 'burst', limiter: burst }, { name: 'hourly', limiter: hourly }], key: { header: 'x-api-key' } }))
  app.get('/', (req, res) => res.send('ok'))
  const server = await listen(app)
  try {
    const port = server.address().port
    const codes = []
    for (let i = 0; i < 60; i++) codes.push((await get(port, { 'x-api-key': 'alice' })).status)
    assert.equal(codes.filter((c) => c === 200).length, 20, codes.join(','))
    assert.deepEqual([...new Set(codes)].sort(), [200, 429])
    const keys = (await client.keys(`${prefix}*`)).sort()
    assert.deepEqual(keys, [`${prefix}tb@burst:key:alice`, `${prefix}tb@hourly:key:alice`])
    // Unnamed, two Redis policies would both be 'global': refused at once.
    assert.throws(
      () => rb.express({ policies: [burst, hourly] }),
      (e) => e.code === 'ERR_RATEBOUND_INVALID_OPTION' && /global/.test(e.message),
    )
  } finally {
    server.close()
    await closeClient(client)
  }
})

test('a damaged key is refused alone (source damaged) and never opens the breaker', async () => {
  const s = await main()
  const client = await ioredis(s.port)
  const prefix = `${randomKey('damaged')}:`
  const lim = rb.redis.TokenBucket({ client, rate: 1, burst: 5, prefix, onError: 'closed', timeout: 2 })
  for (const [i, value] of ['garbage', '', '1e300', '-5', 'nan'].entries()) {
    await client.set(`${prefix}tb:k${i}`, value)
    const d = await lim.check(`k${i}`)
    assert.deepEqual([d.allowed, d.source], [false, 'damaged'], JSON.stringify(value))
  }
  await client.rpush(`${prefix}tb:list`, 'x')
  assert.equal((await lim.check('list')).source, 'damaged')
  assert.equal(lim.breakerOpen, false)
  assert.equal((await lim.check('someone-else')).source, 'redis')
  await closeClient(client)
})

// Last: every test above has run (node:test runs a file's tests in order).
test('no unhandled rejection in this file', async () => {
  await sleep(100)
  assert.deepEqual(unhandled.map(String), [])
})
