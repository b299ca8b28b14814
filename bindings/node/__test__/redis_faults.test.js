'use strict'
// Global limits in Redis under faults (split from redis.test.js), against
// REAL redis-servers this file starts itself: free 127.0.0.1 ports, no
// persistence, killed at the end. Each fail policy with both clients while
// the server is killed and restarted, paused (CLIENT PAUSE) or loses its
// scripts (SCRIPT FLUSH). Every loop is bounded in time; nothing but
// 127.0.0.1 is contacted. Without redis-server every test here FAILS.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const rb = require('..')
const { sleep, now, unhandledRejections } = require('./fixtures/common.js')
const { startServer, cli } = require('./fixtures/redis-server.js')
const { closeAll, dropClient: closeClient, CLIENTS, randomKey } = require('./fixtures/redis-clients.js')

// Every rejection nobody handled, anywhere in this file: there must be none.
const unhandled = unhandledRejections()

after(closeAll)

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

// The most a fault's answer may come after the deadline: a liveness bound
// (2.5 s of slack for a loaded machine). The exact instant of the fail
// policy's answer, at the deadline and not a millisecond before, is
// redis_deadline.test.js' (virtual time).
const LIVENESS_MS = 2500

// The end of a fault: every limiter is answered by Redis again (checkRecovery)
// within `within` ms of `from`, and no call returned more than LIVENESS_MS
// past the 50 ms deadline; the line reported starts with `what`. Then the
// clients and the server go.
async function recovered(server, limiters, from, within, what) {
  const recovery = limiters.map((l) => checkRecovery(l, from))
  const worst = overshoot(limiters, 50)
  const line = `${what} ${Math.min(...recovery).toFixed(0)}–${Math.max(...recovery).toFixed(0)} ms; worst overshoot of the 50 ms deadline ${worst.toFixed(1)} ms`
  console.log(`# ${line}`)
  assert.ok(Math.max(...recovery) < within, line)
  assert.ok(worst <= LIVENESS_MS, line)
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

// Last: every test above has run (node:test runs a file's tests in order).
test('no unhandled rejection in this file', async () => {
  await sleep(100)
  assert.deepEqual(unhandled.map(String), [])
})
