'use strict'
// Issue 39's bad input, in Node over real sockets: hostile or broken
// partners on 127.0.0.1 against a fleet of ten instances in this process,
// each its own Redis connection (ioredis and node-redis in turn),
// rb.redis.TokenBucket and adapter (fixtures/learn-fleet-worker.js'
// instance), one Redis limit configured at 30/s burst 30, retries: 0.
// Over Redis rather than the in-process TokenBucket: the learned word is
// kept in Redis beside the bucket, read by the acquiring script and
// changed by compare-and-swap from ten connections — the path a fleet's
// hostile answers go through (the answers are read by the same core
// either way). The learned rate is read from Redis every 100 ms; it must
// stay within [floor, ceiling] — the default floor is 1/20 of the
// ceiling, 1.5/s — and finite, whatever the partner says:
// - a coin per request, 200 or 429, for 20 s: the fleet keeps calling;
// - hostile quota fields on every answer (a remaining count of -1 or
//   999999999999, a reset in the past, now, a year away, as a Unix time,
//   garbage, the IETF field with r=-1;t=0): every call returns the
//   partner's answer;
// - a partner that is down, 503 to everything (a refusal by default:
//   statuses [429, 503]) for 30 s, then 10/s burst 20 with a bare 429
//   beyond: back at 8/s within 10 s, and 80 % of its capacity served in
//   the last 5 s.
// The virtual-time model: crates/ratebound/tests/learn_fleet.rs.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const crypto = require('node:crypto')
const { closeAll } = require('./fixtures/redis-clients.js')
const { cleanup, bucket, fleetPartner, learnedSamples, redisPort, span, shown, rounded } = require('./fixtures/outbound.js')
const { instance, drive } = require('./fixtures/learn-fleet-worker.js')
const { sleep } = require('./fixtures/common.js')

after(async () => {
  await closeAll()
  await cleanup()
})

const CEILING = 30
const FLOOR = CEILING / 20
const INSTANCES = 10

// Ten instances calling a fleetPartner answering `answer(s, ms)` for
// `seconds` through rb.fetch: the partner's counts per second and how
// many answers it sent, the learned rate every 100 ms, what the instances
// sent and got.
async function hostile(seconds, answer) {
  const port = await redisPort()
  const prefix = `hostile-${crypto.randomBytes(6).toString('hex')}:`
  // Time 0: a moment after the instances are made (they connect first).
  const startAt = Date.now() + 1500
  const endAt = startAt + seconds * 1000
  const p = await fleetPartner(startAt, seconds, answer)
  const o = { port, prefix, http: 'fetch', url: `${p.url}/items`, startAt, endAt }
  const instances = []
  for (let i = 0; i < INSTANCES; i++) instances.push(await instance({ ...o, client: i % 2 === 0 ? 'ioredis' : 'node-redis' }))
  const sampled = learnedSamples(port, prefix, startAt, endAt, 100)
  await sleep(Math.max(0, startAt - Date.now()))
  const report = await drive(instances, o)
  const rates = await sampled
  for (const { limiter } of instances) await limiter.close()
  await p.close()
  return { counts: p.counts, rates, report, answered: p.seen.length }
}

// The learned rates' lowest and highest, and those not finite or out of
// [floor, ceiling].
function bounds(rates) {
  const bad = rates.filter((r) => !Number.isFinite(r) || r < FLOOR || r > CEILING)
  return { low: Math.min(...rates), high: Math.max(...rates), bad }
}

const got = (report) => Object.entries(report.statuses).map(([status, n]) => `${n} × ${status}`).join(', ')

test('a partner answering 200 or 429 at random: the learned rate stays within [floor, ceiling], the fleet keeps calling', async (t) => {
  const { counts, rates, report, answered } = await hostile(20, () => (Math.random() < 0.5 ? [200, {}] : [429, {}]))
  const { low, high, bad } = bounds(rates)
  const tail = span(counts, 10, 20, 10)
  t.diagnostic(`coin: 200s/429s per second ${shown(counts)}`)
  t.diagnostic(`coin: learned rate each second (every 10th sample of 100 ms) ${rounded(rates.filter((_, i) => i % 10 === 9))}`)
  t.diagnostic(`coin: learned within [${low.toFixed(3)}, ${high.toFixed(3)}] over ${rates.length} samples; 10-20 s: ${tail.ok} × 200, ${tail.refused} × 429; calls: ${got(report)}, ${report.failed} failed`)
  assert.equal(report.failed, 0, `no call failed: ${report.failure}`)
  assert.ok(rates.length >= 150, `sampled every 100 ms: ${rates.length} samples`)
  assert.deepEqual(bad, [], `learned rates within [${FLOOR}, ${CEILING}] and finite`)
  assert.ok(tail.ok > 0 && tail.refused > 0, `the fleet kept calling in the last 10 s: ${shown(counts)}`)
  assert.equal(report.sent, answered, 'every call was answered by the partner')
})

// Hostile quota fields, one set per answer in turn. The year-away reset
// comes with a count above 0: a count of 0 with it is an honest "come back
// in a year", a pause for everyone capped at maxPause (300 s by default),
// not a hostile number.
function hostileFields() {
  const unix = () => Math.floor(Date.now() / 1000)
  return [
    () => ({ 'RateLimit-Remaining': '-1', 'RateLimit-Reset': '5' }),
    () => ({ 'RateLimit-Remaining': '999999999999', 'RateLimit-Reset': '5' }),
    () => ({ 'RateLimit-Remaining': '3', 'RateLimit-Reset': '-5' }),
    () => ({ 'RateLimit-Remaining': '3', 'RateLimit-Reset': '0' }),
    () => ({ 'RateLimit-Remaining': '50', 'RateLimit-Reset': '31536000' }),
    () => ({ 'X-RateLimit-Remaining': '5', 'X-RateLimit-Reset': String(unix() + 31536000) }),
    () => ({ 'X-RateLimit-Remaining': '5', 'X-RateLimit-Reset': String(unix() - 3600) }),
    () => ({ 'RateLimit-Remaining': 'abc', 'RateLimit-Reset': 'abc' }),
    () => ({ 'RateLimit-Remaining': '', 'RateLimit-Reset': '' }),
    () => ({ 'RateLimit-Remaining': '1e309', 'RateLimit-Reset': '1e309' }),
    () => ({ RateLimit: '"default";r=-1;t=0' }),
  ]
}

test('hostile quota fields on every answer: every call returns the answer, the learned rate stays within [floor, ceiling]', async (t) => {
  const limit = bucket(10, 20)
  const fields = hostileFields()
  // Each set's [200s, 429s] it went out on.
  const on = fields.map(() => [0, 0])
  let turn = 0
  const answer = () => {
    const ok = limit.take() === 0
    const i = turn++ % fields.length
    on[i][ok ? 0 : 1]++
    return [ok ? 200 : 429, fields[i]()]
  }
  const { counts, rates, report, answered } = await hostile(15, answer)
  const { low, high, bad } = bounds(rates)
  t.diagnostic(`hostile fields: 200s/429s per second ${shown(counts)}`)
  t.diagnostic(`hostile fields: learned rate each second (every 10th sample of 100 ms) ${rounded(rates.filter((_, i) => i % 10 === 9))}`)
  t.diagnostic(`hostile fields: learned within [${low.toFixed(3)}, ${high.toFixed(3)}] over ${rates.length} samples; calls: ${got(report)}, ${report.failed} failed; ${turn} answers`)
  assert.equal(report.failed, 0, `no call failed: ${report.failure}`)
  assert.equal(report.sent, answered, 'every call was answered by the partner')
  t.diagnostic(`hostile fields: each set's 200s/429s ${on.map(([ok, no]) => `${ok}/${no}`).join(' ')}`)
  assert.ok(
    on.every(([ok, no]) => ok > 0 && no > 0),
    `every hostile set went out on a 200 and on a 429: ${JSON.stringify(on)}`,
  )
  assert.ok(rates.length >= 100, `sampled every 100 ms: ${rates.length} samples`)
  assert.deepEqual(bad, [], `learned rates within [${FLOOR}, ${CEILING}] and finite`)
})

test('a partner down for 30 s (503 to everything): the learned rate stays within bounds, and recovers within 10 s of its return', async (t) => {
  const DOWN = 30
  const SECONDS = 45
  let limit = null
  const answer = (s) => {
    if (s < DOWN) return [503, {}]
    limit ??= bucket(10, 20)
    return limit.take() === 0 ? [200, {}] : [429, {}]
  }
  const { counts, rates, report } = await hostile(SECONDS, answer)
  // The sample at the end of each second (the 10th of its 100 ms).
  const perSecond = rates.filter((_, i) => i % 10 === 9)
  const storm = bounds(rates.slice(0, DOWN * 10))
  const back = perSecond.findIndex((r, s) => s >= DOWN && r >= 8)
  const tail = span(counts, SECONDS - 5, SECONDS, 10)
  t.diagnostic(`down: 200s/refusals (503 to 30 s, 429 after) per second ${shown(counts)}`)
  t.diagnostic(`down: learned rate at each second's end ${rounded(perSecond)}`)
  t.diagnostic(
    `down: during the storm learned within [${storm.low.toFixed(3)}, ${storm.high.toFixed(3)}]; back at ≥ 8/s by the end of second ${back} (-1: not within the run); ` +
      `last 5 s: ${tail.ok} × 200, ${tail.refused} × 429, goodput ${(tail.goodput * 100).toFixed(0)} %; calls: ${got(report)}, ${report.failed} failed`,
  )
  assert.equal(report.failed, 0, `no call failed: ${report.failure}`)
  assert.deepEqual(storm.bad, [], `learned rates within [${FLOOR}, ${CEILING}] and finite during the storm`)
  assert.deepEqual(bounds(rates).bad, [], 'and after it')
  // 503 counts as a refusal by default: the storm cut the rate to the floor.
  assert.ok(storm.low < FLOOR + 0.01, `the 503s cut the learned rate to the floor: lowest ${storm.low}`)
  assert.ok(back >= DOWN && back < DOWN + 10, `back at 8/s within 10 s of the partner's return: ${rounded(perSecond)}`)
  assert.ok(tail.goodput >= 0.8, `goodput ${(tail.goodput * 100).toFixed(0)} % in the last 5 s: ${shown(counts)}`)
})
