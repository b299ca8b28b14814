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

const SPEC = path.join(__dirname, '..', '..', '..', 'spec', 'redis.json')

// Every rejection nobody handled, anywhere in this file: there must be none.
const unhandled = unhandledRejections()

const { HOST, startServer, startCluster, cli, freePort, slotOf } = require('./fixtures/redis-server.js')
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
  const good = [1, 19, 0, 100000, 1, 0, 7]
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

// ------------------------------------------------------------------------ faults

const POLICIES = [
  ['open', {}],
  ['closed', {}],
  ['local', { localRate: 5 }],
]
const COOLDOWN = 0.2

// Three policies × two clients with the fail-fast settings, plus both
// clients with their defaults (offline queue on) under 'open'.
async function faultLimiters(port, extra = {}) {
  const out = []
  for (const [kind, connect] of Object.entries(CLIENTS)) {
    for (const [policy, opts] of POLICIES) {
      const client = await connect(port)
      out.push({ kind, policy, queue: false, client, key: randomKey(`fault-${policy}`), lim: new rb.redis.TokenBucket({ client, rate: 100, burst: 100, onError: policy, breakerCooldown: COOLDOWN, ...opts, ...extra }) })
    }
    const client = await connect(port, { fast: false })
    out.push({ kind, policy: 'open', queue: true, client, key: randomKey('fault-open-queue'), lim: new rb.redis.TokenBucket({ client, rate: 100, burst: 100, onError: 'open', breakerCooldown: COOLDOWN, ...extra }) })
  }
  return out
}

// Every limiter checks its key every 10 ms until `end` ms; each record is
// { s, e (ms since t0), source, allowed, retryAfter, breaker }.
function drive(limiters, t0, end) {
  return Promise.all(
    limiters.map(async (l) => {
      l.records = []
      while (now() - t0 < end) {
        const s = now() - t0
        const d = await l.lim.check(l.key)
        l.records.push({ s, e: now() - t0, source: d.source, allowed: d.allowed, retryAfter: d.retryAfter, breaker: l.lim.breakerOpen })
        await sleep(10)
      }
    }),
  )
}

const name = (l) => `${l.kind} onError ${l.policy}${l.queue ? ' (offline queue on)' : ''}`

function checkPolicy(l, during, seconds) {
  assert.ok(during.length >= 5, `${name(l)}: ${during.length} calls during the fault`)
  const redis = during.filter((r) => r.source === 'redis')
  assert.deepEqual(redis, [], `${name(l)}: no Redis answer during the fault`)
  // The first failures answer after their own timeout; after three the
  // breaker is open and answers at once.
  assert.ok(during.some((r) => r.breaker), `${name(l)}: the breaker opened`)
  switch (l.policy) {
    case 'open':
      for (const r of during) assert.deepEqual([r.source, r.allowed], ['fail_open', true], name(l))
      break
    case 'closed':
      for (const r of during) assert.deepEqual([r.source, r.allowed, r.retryAfter], ['fail_closed', false, COOLDOWN], name(l))
      break
    case 'local': {
      for (const r of during) assert.equal(r.source, 'local', name(l))
      const admitted = during.filter((r) => r.allowed).length
      // localRate 5/s, burst 100 × 5/100 = 5.
      assert.ok(admitted >= 1 && admitted <= 5 + 5 * seconds + 1, `${name(l)}: local admitted ${admitted} in ${seconds.toFixed(2)} s`)
      break
    }
  }
}

function checkRecovery(l, from) {
  const after = l.records.filter((r) => r.s >= from)
  const first = after.find((r) => r.source === 'redis')
  assert.ok(first, `${name(l)}: Redis answers again without a new client`)
  const tail = l.records.slice(-5)
  assert.deepEqual(tail.map((r) => r.source), Array(5).fill('redis'), `${name(l)}: recovered`)
  return first.s - from
}

function overshoot(limiters, deadlineMs) {
  let worst = -Infinity
  for (const l of limiters) for (const r of l.records) worst = Math.max(worst, r.e - r.s - deadlineMs)
  return worst
}

// The end of a fault: every limiter is answered by Redis again (checkRecovery)
// within `within` ms of `from`, and no call returned more than 40 ms past
// the 50 ms deadline; the line reported starts with `what`. Then the
// clients and the server go.
async function recovered(server, limiters, from, within, what) {
  const recovery = limiters.map((l) => checkRecovery(l, from))
  const worst = overshoot(limiters, 50)
  const line = `${what} ${Math.min(...recovery).toFixed(0)}–${Math.max(...recovery).toFixed(0)} ms; worst overshoot of the 50 ms deadline ${worst.toFixed(1)} ms`
  console.log(`# ${line}`)
  assert.ok(Math.max(...recovery) < within, line)
  assert.ok(worst <= 40, line)
  await settle(limiters)
  await server.kill()
}

async function settle(limiters) {
  for (const l of limiters) await closeClient(l.client)
  await sleep(60)
  assert.deepEqual(unhandled, [], 'no unhandled rejection')
}

test('fault: the server is killed mid-run and restarted on the same port', async () => {
  const server = await startServer()
  const limiters = await faultLimiters(server.port)
  const t0 = now()
  let killedAt, restartedAt
  const run = drive(limiters, t0, 2800)
  await sleep(400)
  await server.kill()
  killedAt = now() - t0
  await sleep(1000)
  restartedAt = now() - t0
  await server.start()
  await run
  for (const l of limiters) {
    const during = l.records.filter((r) => r.s >= killedAt + 20 && r.e <= restartedAt)
    checkPolicy(l, during, (restartedAt - killedAt) / 1000)
  }
  await recovered(server, limiters, restartedAt, 1500, `kill/restart: outage ${(restartedAt - killedAt).toFixed(0)} ms; recovery after restart`)
})

test('fault: CLIENT PAUSE 500 ALL', async () => {
  const server = await startServer()
  const limiters = await faultLimiters(server.port)
  const t0 = now()
  const run = drive(limiters, t0, 2000)
  await sleep(300)
  const pausedFrom = now() - t0
  assert.equal(await cli(server.port, 'CLIENT', 'PAUSE', '500', 'ALL'), 'OK')
  const pausedUntil = pausedFrom + 500
  await run
  for (const l of limiters) {
    const during = l.records.filter((r) => r.s >= pausedFrom + 40 && r.e <= pausedUntil - 20)
    checkPolicy(l, during, (pausedUntil - pausedFrom) / 1000)
  }
  await recovered(server, limiters, pausedUntil, 1000, 'CLIENT PAUSE 500: recovery after the pause')
})

test('fault: SCRIPT FLUSH mid-run is transparent (EVAL once, source stays redis)', async () => {
  const server = await startServer()
  // A roomy deadline: this test is about NOSCRIPT, not about timeouts.
  const limiters = await faultLimiters(server.port, { timeout: 0.5 })
  const t0 = now()
  const run = drive(limiters, t0, 900)
  await sleep(250)
  assert.equal(await cli(server.port, 'SCRIPT', 'FLUSH'), 'OK')
  await sleep(300)
  assert.equal(await cli(server.port, 'SCRIPT', 'FLUSH'), 'OK')
  await run
  for (const l of limiters) {
    const sources = [...new Set(l.records.map((r) => r.source))]
    assert.deepEqual(sources, ['redis'], `${name(l)}: ${JSON.stringify(sources)}`)
    assert.ok(l.records.every((r) => r.allowed), name(l))
    assert.equal(l.lim.stats.errors + l.lim.stats.timeouts, 0, name(l))
  }
  const evals = limiters.reduce((sum, l) => sum + l.lim.stats.evals, 0)
  const info = await cli(server.port, 'INFO', 'commandstats')
  const evalCalls = Number(/cmdstat_eval:calls=(\d+)/.exec(info)?.[1] ?? 0)
  assert.ok(evals >= 3, `EVAL after NOSCRIPT: ${evals} (first load + 2 flushes)`)
  assert.equal(evalCalls, evals, 'every EVAL the driver sent reached Redis')
  await settle(limiters)
  await server.kill()
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

// ------------------------------------------------------------- middleware

async function listen(app) {
  const server = app.listen(0, HOST)
  await once(server, 'listening')
  return server
}

function get(port, headers) {
  const http = require('node:http')
  return new Promise((resolve, reject) => {
    const req = http.get({ host: HOST, port, path: '/', headers, agent: false }, (res) => {
      let body = ''
      res.on('data', (c) => (body += c))
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }))
    })
    req.on('error', reject)
  })
}

test('middleware: a global limit in Redis is one policy away, shared by two instances (Express and Fastify)', async () => {
  const express = require('express')
  const Fastify = require('fastify')
  const s = await main()
  const prefix = `${randomKey('mw')}:`
  const global = async () => rb.redis.TokenBucket({ client: await ioredis(s.port), rate: 1, burst: 2, prefix })
  // The local policy refills slowly (100/hour), so that what charged it shows.
  const policies = async () => [{ name: 'burst', rate: '100/hour' }, { name: 'global', limiter: await global() }]

  const a = express()
  a.use(rb.express({ policies: await policies(), key: { header: 'x-api-key' } }))
  a.get('/', (req, res) => res.send('ok'))
  const fastify = Fastify()
  await fastify.register(rb.fastify, { policies: await policies(), key: { header: 'x-api-key' } })
  fastify.get('/', async () => 'ok')
  await fastify.listen({ port: 0, host: HOST })
  const serverA = await listen(a)
  try {
    const portA = serverA.address().port
    const portB = fastify.server.address().port
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
    serverA.close()
    await fastify.close()
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

// The waits' exact rules (a pause's moves, the give-backs) are engine steps
// at explicit times in spec/redis_wait.json (redis_wait_spec.test.js).
// Here real clients run them: the order of the reservations is read from
// Redis (MONITOR, the bucket's TAT), times are measured from before what
// they follow, periods are 500 ms, and an upper bound on a real wait keeps
// LATE_MS for a loaded machine.
const RATE = '2/s burst 1'
const PERIOD = 0.5
const PAUSE = 1.0
const LATE = 0.5
// How early a wait may end: it sleeps a delay in µs read from Redis' clock.
const EARLY = 0.005

// Script calls: all (`failed` false) or those Redis ran to their end (a
// NOSCRIPT refusal left out).
async function scriptCalls(port, { failed = true } = {}) {
  const info = await cli(port, 'INFO', 'commandstats')
  let sum = 0
  for (const c of ['evalsha', 'eval']) {
    const m = new RegExp(`cmdstat_${c}:calls=(\\d+),.*failed_calls=(\\d+)`).exec(info)
    if (m) sum += Number(m[1]) - (failed ? 0 : Number(m[2]))
  }
  return sum
}

// The bucket's theoretical arrival time in Redis (µs of its clock; a
// pause's end after ":" left out), null without a key.
async function tat(port, key) {
  const raw = await cli(port, 'GET', `rb:tb:${key}`)
  return raw === '' ? null : Number(raw.split(':')[0])
}

async function until(what, ms = 10000) {
  const stop = now() + ms
  while (!(await what())) {
    assert.ok(now() < stop, 'not within the bound')
    await sleep(2)
  }
}

test('waiting: twenty instances acquire in one order, one script call each, never ahead of the bound', async () => {
  const s = await main()
  const key = randomKey('twenty')
  const clients = []
  const limiters = []
  for (let i = 0; i < 20; i++) {
    const c = await ioredis(s.port)
    clients.push(c)
    limiters.push(rb.redis.TokenBucket({ client: c, rate: '50/s burst 10', onError: 'closed', timeout: 1 }))
  }
  // Every connection made and the script loaded: no NOSCRIPT below.
  for (const lim of limiters) await lim.acquire(randomKey('warm'))
  const byPort = new Map(clients.map((c, i) => [String(c.stream.localPort), i]))
  const watch = await ioredis(s.port)
  const monitor = await watch.monitor()
  const order = []
  const end = randomKey('end')
  let ended = false
  monitor.on('monitor', (time, args, source) => {
    const cmd = String(args[0]).toUpperCase()
    if (cmd === 'ECHO' && args[1] === end) ended = true
    else if ((cmd === 'EVALSHA' || cmd === 'EVAL') && args.includes(`rb:tb:${key}`)) order.push(byPort.get(source.split(':').at(-1)))
  })
  const before = await scriptCalls(s.port)
  const t0 = now()
  const done = limiters.map(() => [])
  await Promise.all(
    limiters.map(async (lim, i) => {
      for (let j = 0; j < 3; j++) {
        assert.equal(await lim.acquire(key, 1, { timeout: 10 }), 'redis')
        done[i].push((now() - t0) / 1000)
      }
    }),
  )
  const used = (await scriptCalls(s.port)) - before
  await cli(s.port, 'ECHO', end)
  await until(() => ended)
  monitor.disconnect()
  assert.equal(used, 60, `${used} script calls for 60 acquisitions`)
  assert.deepEqual([...order].sort((a, b) => a - b), Array.from({ length: 60 }, (_, k) => Math.floor(k / 3)), `${order}`)
  // In the order they reached Redis, the k-th completes no earlier than its
  // slot: one served ahead of an earlier reservation would.
  const nth = Array(20).fill(0)
  order.forEach((i, k) => {
    const t = done[i][nth[i]++]
    assert.ok(t >= Math.max(k + 1 - 10, 0) / 50 - EARLY, `reservation ${k} (instance ${i}) done at ${t}, before its slot`)
  })
  const last = Math.max(...done.flat())
  assert.ok(last >= 1.0 - EARLY && last < 1.0 + LATE, `last at ${last}`)
  console.log(`# waiting: 60 acquisitions by 20 instances, last at ${last.toFixed(3)} s, ${used} script calls`)
  for (const c of clients) await closeClient(c)
  await closeClient(watch)
})

test('waiting: reservations share one order, cancel and abort give the slot back, beyond maxWait rejects', async () => {
  const s = await main()
  const client = await ioredis(s.port)
  const key = randomKey('reserve')
  const a = rb.redis.TokenBucket({ client, rate: RATE, onError: 'closed', timeout: 1 })
  const b = rb.redis.TokenBucket({ client, rate: RATE, onError: 'closed', timeout: 1 })
  const t0 = now()
  const rs = []
  for (const lim of [a, b, a, b]) rs.push(await lim.reserve(key, 1, { maxWait: 5 }))
  const elapsed = (now() - t0) / 1000
  assert.equal(rs[0].delay, 0)
  // Slot i of one queue: i periods after the first, less the time the calls since took.
  rs.slice(1).forEach((r, i) => assert.ok(r.delay <= PERIOD * (i + 1) && r.delay >= PERIOD * (i + 1) - elapsed, `${rs.map((x) => x.delay)}`))
  const queued = await tat(s.port, key)
  // The error names the maximum wait the caller gave (it said 0ns).
  await assert.rejects(a.reserve(key, 1, { maxWait: PERIOD }), (e) => e instanceof rb.RateLimitExceededError && e.retryAfter > PERIOD && e.message.endsWith('exceeds the maximum wait of 500ms'))
  assert.equal(await tat(s.port, key), queued, 'beyond maxWait: nothing taken')
  const next = await b.reserve(key, 1, { maxWait: 5 })
  const taken = await tat(s.port, key)
  assert.equal(taken, queued + PERIOD * 1e6)
  // Cancelled: the TAT is back, the next reservation takes the same slot.
  assert.equal(await next.cancel(), true)
  assert.equal(await tat(s.port, key), queued)
  assert.equal(await next.cancel(), false)
  const again = await a.reserve(key, 1, { maxWait: 5 })
  assert.equal(await tat(s.port, key), taken)
  assert.ok(again.delay <= next.delay, `${again.delay} ${next.delay}`)
  // An aborted acquire gives its slot back, once Redis holds it.
  const ac = new AbortController()
  const waiting = a.acquire(key, 1, { signal: ac.signal })
  await until(async () => (await tat(s.port, key)) !== taken)
  assert.equal(await tat(s.port, key), taken + PERIOD * 1e6)
  ac.abort()
  await assert.rejects(waiting, (e) => e.name === 'AbortError')
  assert.equal(await tat(s.port, key), taken, 'the aborted slot was given back')
  await b.reserve(key, 1, { maxWait: 5 })
  assert.equal(await tat(s.port, key), taken + PERIOD * 1e6)
  await closeClient(client)
})

test('waiting: a pause is for everyone and once; a wait that cannot end in time rejects at once', async () => {
  const s = await main()
  const client = await ioredis(s.port)
  const key = randomKey('pause')
  const a = rb.redis.TokenBucket({ client, rate: '100/s burst 10', timeout: 1 })
  const b = rb.redis.TokenBucket({ client, rate: '100/s burst 10', timeout: 1 })
  assert.equal((await b.check(key)).allowed, true)
  let t = now()
  const shift = await a.pause(key, PAUSE)
  assert.ok(shift >= PAUSE - 0.001, `${shift}`)
  assert.equal(await b.pause(key, 0.1), 0, 'inside a pause already on: nothing moves')
  const d = await b.check(key)
  assert.ok(!d.allowed && d.retryAfter >= PAUSE - (now() - t) / 1000, JSON.stringify(d))
  await b.acquire(key, 1, { timeout: 5 })
  // The pause began after t: the wait ends after its end.
  assert.ok(now() - t >= (PAUSE - EARLY) * 1000, `${now() - t} ms`)
  // Well before the timeout, which a wait of the timeout would reach.
  await a.pause(key, 60)
  t = now()
  await assert.rejects(b.acquire(key, 1, { timeout: 5 }), (e) => e instanceof rb.RateLimitExceededError && e.message.endsWith('exceeds the maximum wait of 5s'))
  assert.ok(now() - t < 5000 - 2500, `${now() - t} ms`)
  // Bad input: typed errors, never a hang.
  await assert.rejects(a.pause(key, -1), (e) => e.code === 'ERR_RATEBOUND_INVALID_NUMBER')
  await assert.rejects(a.pause(key, NaN), (e) => e.code === 'ERR_RATEBOUND_INVALID_NUMBER')
  await assert.rejects(a.acquire(key, 1, { timeout: Infinity }), (e) => e.code === 'ERR_RATEBOUND_INVALID_NUMBER')
  await assert.rejects(a.acquire(key, 11), (e) => e.code === 'ERR_RATEBOUND_INSUFFICIENT_CAPACITY')
  await assert.rejects(a.reserve(key, 1, { maxWait: -2 }), (e) => e.code === 'ERR_RATEBOUND_INVALID_NUMBER')
  const fw = rb.redis.FixedWindow({ client, limit: 2, window: 0.5, timeout: 1 })
  await assert.rejects(fw.pause(key, 1), (e) => e.code === 'ERR_RATEBOUND_UNSUPPORTED')
  await assert.rejects(fw.reserve(key, 1), (e) => e.code === 'ERR_RATEBOUND_UNSUPPORTED')
  // A full window's waiter is admitted in a later window: the counter in
  // Redis ("<window index>:<count>") names the window of each admission.
  const fw1 = rb.redis.FixedWindow({ client, limit: 2, window: 1, timeout: 1 })
  let wkey
  let raw = ''
  // Bounded; '': the window ended (its key expired) before the read, again.
  for (let i = 0; i < 5 && raw === ''; i++) {
    wkey = randomKey('window')
    await fw1.acquire(wkey, 2)
    raw = await cli(s.port, 'GET', `rb:fw:${wkey}`)
  }
  const full = raw.split(':').map(Number)
  assert.equal(full[1], 2, `${full}`)
  // Admitted at the start of the next window: read well within it.
  assert.equal(await fw1.acquire(wkey, 1, { timeout: 3 }), 'redis')
  const later = (await cli(s.port, 'GET', `rb:fw:${wkey}`)).split(':').map(Number)
  assert.ok(later[0] > full[0] && later[1] === 1, `${full} then ${later}`)
  await closeClient(client)
})

// `count` acquisitions of one token of `key`, each started once Redis has
// run the previous one's reservation (their order is known whatever the
// load): their completion times in seconds from the returned t0, in the
// order they reserved.
async function waitersInOrder(lim, key, count, port) {
  const t0 = now()
  const base = await scriptCalls(port, { failed: false })
  const waiters = []
  for (let i = 0; i < count; i++) {
    waiters.push(
      (async () => {
        await lim.acquire(key, 1, { timeout: 30 })
        return (now() - t0) / 1000
      })(),
    )
    await until(async () => (await scriptCalls(port, { failed: false })) >= base + i + 1)
  }
  return { waiters, t0 }
}

// Waiter 0 took the burst before the pause; every other completes after
// the pause's end (it began after pausedAt), in order, at its old slot — i
// periods after the burst, taken between t0 and done[0] — moved by shift.
function checkMoved(done, pausedAt, shift) {
  assert.ok(done[0] < pausedAt, `the burst went at once: ${done}`)
  assert.ok(shift >= PAUSE - 0.001, `${shift}`)
  const end = pausedAt + PAUSE
  for (let i = 1; i < done.length; i++) {
    assert.ok(done[i] >= end, `waiter ${i} at ${done[i].toFixed(3)} s, inside the pause (ends ${end.toFixed(3)}): ${done}`)
    const lo = PERIOD * i + shift
    const hi = done[0] + PERIOD * i + shift
    assert.ok(done[i] >= lo - EARLY && done[i] <= hi + LATE, `waiter ${i} at ${done[i]}, want ${lo}..${hi}`)
    assert.ok(done[i - 1] < done[i], `out of order: ${done}`)
  }
}

for (const kind of Object.keys(CLIENTS)) {
  test(`waiting: ${kind} waiters already asleep move past another instance's pause, in order, one script call each`, async () => {
    const s = await main()
    const ca = await CLIENTS[kind](s.port)
    const cb = await CLIENTS[kind](s.port)
    const key = randomKey('asleep')
    const a = rb.redis.TokenBucket({ client: ca, rate: RATE, onError: 'closed', timeout: 1 })
    const b = rb.redis.TokenBucket({ client: cb, rate: RATE, onError: 'closed', timeout: 1 })
    assert.equal(a.listening, false)
    await a.acquire(randomKey('warm')) // A listens from its first wait on (and the script is loaded)
    assert.equal(a.listening, true)
    const before = await scriptCalls(s.port)
    const { waiters, t0 } = await waitersInOrder(a, key, 4, s.port)
    const pausedAt = (now() - t0) / 1000
    const shift = await b.pause(key, PAUSE)
    const done = await Promise.all(waiters)
    checkMoved(done, pausedAt, shift)
    assert.equal((await scriptCalls(s.port)) - before, 4 + 1, 'one script call per acquisition, one for the pause')
    await a.close()
    assert.equal(a.listening, false)
    // Closing the application's client stops the subscriber too.
    await a.acquire(randomKey('again'))
    assert.equal(a.listening, true)
    await closeClient(ca)
    await until(() => !a.listening)
    await closeClient(cb)
  })
}

test('waiting: a waiter that cannot listen goes ahead at its old time; its next call finds the pause; its own pause reaches it', async () => {
  const s = await main()
  const c = await ioredis(s.port)
  const cb = await ioredis(s.port)
  // A client without duplicate(): no subscriber.
  const plain = { evalsha: (...args) => c.evalsha(...args), eval: (...args) => c.eval(...args), publish: (...args) => c.publish(...args) }
  const deaf = rb.redis.TokenBucket({ client: plain, rate: RATE, onError: 'closed', timeout: 1 })
  const b = rb.redis.TokenBucket({ client: cb, rate: RATE, onError: 'closed', timeout: 1 })
  let key = randomKey('deaf')
  let { waiters, t0 } = await waitersInOrder(deaf, key, 2, s.port)
  let pausedAt = (now() - t0) / 1000
  assert.notEqual(await b.pause(key, PAUSE), null)
  let done = await Promise.all(waiters)
  assert.equal(deaf.listening, false)
  assert.ok(done[1] >= PERIOD - EARLY && done[1] < pausedAt + PAUSE, `it went at its old slot: ${done} (the pause ends ${pausedAt + PAUSE})`)
  await deaf.acquire(key, 1, { timeout: 5 })
  assert.ok((now() - t0) / 1000 >= pausedAt + PAUSE, 'the next call waits past the pause')
  // Its own pause: told at once.
  key = randomKey('own')
  ;({ waiters, t0 } = await waitersInOrder(deaf, key, 2, s.port))
  pausedAt = (now() - t0) / 1000
  assert.notEqual(await deaf.pause(key, PAUSE), null)
  done = await Promise.all(waiters)
  assert.ok(done[1] >= pausedAt + PAUSE, `${done} (the pause ends ${pausedAt + PAUSE})`)
  await closeClient(c)
  await closeClient(cb)
})

// Last: every test above has run (node:test runs a file's tests in order).
test('no unhandled rejection in this file', async () => {
  await sleep(100)
  assert.deepEqual(unhandled.map(String), [])
})
