'use strict'
// Issue 39's headline, in Node over Redis: a fleet configured above a
// partner's real limit finds it. Fifty instances — five worker processes
// of ten, each instance its own Redis connection (ioredis in some
// processes, node-redis in the others), rb.redis.TokenBucket and adapter —
// share one Redis limit configured at 30/s burst 30, in front of a partner
// on 127.0.0.1 that admits 10/s burst 20 and answers a bare 429 (no
// Retry-After, no RateLimit fields) beyond. For 20 s every instance sends
// as fast as its adapter lets it (retries: 0: the partner sees the fleet's
// own pace). Learning (the default): in the last 10 s at most 5 % of what
// reached the partner is refused and at least 85 % of its capacity is
// served — through rb.fetch and through rb.axios. With adaptive: false,
// the documented contrast, more than half is refused for as long as it
// runs. The per-second counts are printed (t.diagnostic). The exact rule
// is checked in virtual time by the Rust core's tests
// (crates/ratebound/tests/learn_fleet.rs; the Rust twin of this test:
// crates/ratebound-client/tests/learn.rs); these bars hold with room on a
// loaded machine (a slow instance sends less, which only lowers the
// refusals), and goodput counts the partner's 200s.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const crypto = require('node:crypto')
const path = require('node:path')
const { spawn } = require('node:child_process')
const { startServer } = require('./fixtures/redis-server.js')
const { closeAll } = require('./fixtures/redis-clients.js')
const { cleanup, bucket, partner } = require('./fixtures/outbound.js')

after(async () => {
  await closeAll()
  await cleanup()
})

const PROCESSES = 5
const PER_PROCESS = 10
const WORKER = path.join(__dirname, 'fixtures', 'learn-fleet-worker.js')

let redis = null

// Runs the fleet for `seconds` through `http` ('fetch' | 'axios'): the
// partner's 200s and 429s in each second, and the workers' reports.
async function fleet(http, adaptive, seconds) {
  redis ??= await startServer()
  const limit = bucket(10, 20)
  // Time 0 is the fleet's start, a moment after the workers are spawned
  // (they connect first).
  const startAt = Date.now() + 4000
  const counts = Array.from({ length: seconds + 1 }, () => [0, 0])
  const p = await partner(() => {
    const s = Math.min(seconds, Math.max(0, Math.floor((Date.now() - startAt) / 1000)))
    if (limit.take() === 0) {
      counts[s][0]++
      return [200, {}, 'ok']
    }
    counts[s][1]++
    return [429, {}, '']
  })
  const prefix = `fleet-${crypto.randomBytes(6).toString('hex')}:`
  const run = (i) =>
    new Promise((resolve, reject) => {
      const options = {
        port: redis.port,
        prefix,
        url: `${p.url}/items`,
        http,
        client: i % 2 === 0 ? 'ioredis' : 'node-redis',
        instances: PER_PROCESS,
        startAt,
        endAt: startAt + seconds * 1000,
        adaptive,
      }
      const child = spawn(process.execPath, [WORKER, JSON.stringify(options)], { stdio: ['ignore', 'pipe', 'inherit'] })
      let out = ''
      child.stdout.on('data', (d) => (out += d))
      child.on('error', reject)
      child.on('close', (code) => (code === 0 ? resolve(JSON.parse(out.trim())) : reject(new Error(`worker ${i} exited ${code}: ${out}`))))
    })
  const reports = await Promise.all(Array.from({ length: PROCESSES }, (_, i) => run(i)))
  await p.close()
  return { counts: counts.slice(0, seconds), reports }
}

// The last `n` seconds: the share refused, and the partner's 200s against
// its capacity (10/s).
function last(counts, n) {
  const tail = counts.slice(-n)
  const ok = tail.reduce((a, c) => a + c[0], 0)
  const refused = tail.reduce((a, c) => a + c[1], 0)
  return { refused: refused / Math.max(1, ok + refused), goodput: ok / (10 * n) }
}

const shown = (counts) => counts.map(([ok, no], s) => `${s}:${ok}/${no}`).join(' ')

for (const http of ['fetch', 'axios']) {
  test(`fifty instances over one Redis bucket find a bare-429 partner's limit through rb.${http}`, async (t) => {
    const { counts, reports } = await fleet(http, undefined, 20)
    const { refused, goodput } = last(counts, 10)
    const sent = reports.reduce((a, r) => a + r.sent, 0)
    const failed = reports.reduce((a, r) => a + r.failed, 0)
    t.diagnostic(`${http}, learning: 200s/429s per second ${shown(counts)}`)
    t.diagnostic(
      `${http}, learning, last 10 s: ${(refused * 100).toFixed(1)} % refused, goodput ${(goodput * 100).toFixed(0)} % of capacity; ` +
        `${sent} sent, ${failed} failed; learned ${reports.map((r) => r.learned.toFixed(2)).join(', ')}/s of 30/s`,
    )
    assert.equal(failed, 0, 'no sending failed')
    assert.ok(refused <= 0.05, `${(refused * 100).toFixed(1)} % refused: ${shown(counts)}`)
    assert.ok(goodput >= 0.85, `goodput ${(goodput * 100).toFixed(0)} %: ${shown(counts)}`)
    for (const r of reports) assert.ok(r.learned < 30, `a worker's bucket learned nothing: ${r.learned}`)
  })
}

test('adaptive: false, the same fleet: more than half refused for as long as it runs', async (t) => {
  const { counts, reports } = await fleet('fetch', false, 10)
  const { refused, goodput } = last(counts, 5)
  t.diagnostic(`fixed: 200s/429s per second ${shown(counts)}`)
  t.diagnostic(`fixed, last 5 s: ${(refused * 100).toFixed(1)} % refused, goodput ${(goodput * 100).toFixed(0)} % of capacity`)
  assert.ok(refused > 0.5, `${(refused * 100).toFixed(1)} % refused: ${shown(counts)}`)
  for (const r of reports) assert.ok(Math.abs(r.learned - 30) < 0.01, `nothing learned: ${r.learned}`)
})
