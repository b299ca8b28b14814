'use strict'
// Issue 39's other partners, in Node over Redis, with the fleet of
// outbound_learn_fleet.test.js (fifty instances: five worker processes of
// ten, each instance its own Redis connection, rb.redis.TokenBucket and
// adapter, one Redis limit configured at 30/s burst 30, retries: 0; see
// fixtures/outbound.js' learnFleet):
// - a partner that changes its limit (bare 429 beyond it): 10/s burst 20
//   for 0-10 s, 5/s for 10-20 s, 10/s again for 20-30 s. In the second
//   half of each phase at most 10 % of what reached it is refused and at
//   least 80 % of that phase's capacity is served; the learned rate in
//   Redis is back at 8/s within 10 s of the rise;
// - a partner announcing its quota, 100 per 10 s window from the fleet's
//   start, on every answer (RateLimit-Remaining / RateLimit-Reset, or the
//   IETF RateLimit field): no 429 after the first window.
// The virtual-time model of both: crates/ratebound/tests/learn_fleet.rs.
// The per-second counts and learned rates are printed (t.diagnostic).
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { closeAll } = require('./fixtures/redis-clients.js')
const { cleanup, bucket, learnFleet, span, shown, rounded } = require('./fixtures/outbound.js')

after(async () => {
  await closeAll()
  await cleanup()
})

const pct = (x) => `${(x * 100).toFixed(1)} %`

test('fifty instances over Redis follow a partner that lowers its limit and raises it again (rb.fetch)', async (t) => {
  const PHASES = [10, 5, 10]
  const limit = bucket(10, 20)
  let rate = PHASES[0]
  const answer = (s) => {
    const r = PHASES[Math.min(2, Math.floor(s / 10))]
    if (r !== rate) limit.setRate((rate = r))
    return limit.take() === 0 ? [200, {}] : [429, {}]
  }
  const { counts, rates, reports } = await learnFleet({ http: 'fetch', seconds: 30, answer })
  const failed = reports.reduce((a, r) => a + r.failed, 0)
  t.diagnostic(`changing partner: 200s/429s per second ${shown(counts)}`)
  t.diagnostic(`changing partner: learned rate in Redis at each second's end ${rounded(rates)}`)
  const phases = PHASES.map((r, i) => span(counts, i * 10 + 5, i * 10 + 10, r))
  phases.forEach((p, i) =>
    t.diagnostic(
      `phase ${i + 1} (${PHASES[i]}/s), s ${i * 10 + 5}-${i * 10 + 10}: ${p.ok} × 200, ${p.refused} × 429, ` +
        `${pct(p.share)} refused, goodput ${pct(p.goodput)} of capacity`,
    ),
  )
  // The first second from the rise (20 s) whose end saw 8/s learned.
  const back = rates.findIndex((r, s) => s >= 20 && r >= 8)
  t.diagnostic(`learned rate back at ≥ 8/s by the end of second ${back} (-1: not within the run)`)
  assert.equal(failed, 0, `no sending failed: ${reports.map((r) => r.failure).join('; ')}`)
  phases.forEach((p, i) => {
    assert.ok(p.share <= 0.1, `phase ${i + 1}: ${pct(p.share)} refused: ${shown(counts)}`)
    assert.ok(p.goodput >= 0.8, `phase ${i + 1}: goodput ${pct(p.goodput)}: ${shown(counts)}`)
  })
  assert.ok(back >= 20 && back < 30, `back at 8/s within 10 s of the rise: ${rounded(rates)}`)
})

// The announcing partner: 100 per 10 s window from the fleet's start; on
// every answer, 200 or 429, what is left of the window's quota and the
// seconds to its end (rounded up), in the `style`'s fields.
function announcing(style) {
  const QUOTA = 100
  const spent = new Map()
  return (s, ms) => {
    const window = Math.floor(Math.max(0, ms) / 10000)
    const used = spent.get(window) ?? 0
    const ok = used < QUOTA
    if (ok) spent.set(window, used + 1)
    const left = String(QUOTA - (spent.get(window) ?? 0))
    const reset = String(Math.ceil(((window + 1) * 10000 - Math.max(0, ms)) / 1000))
    const headers = style === 'fields' ? { 'RateLimit-Remaining': left, 'RateLimit-Reset': reset } : { RateLimit: `"default";r=${left};t=${reset}` }
    return [ok ? 200 : 429, headers]
  }
}

for (const [style, http] of [
  ['fields', 'fetch'],
  ['ietf', 'axios'],
]) {
  test(`fifty instances over Redis spend no more than a partner announces (${style === 'fields' ? 'RateLimit-Remaining/-Reset' : 'IETF RateLimit'}, rb.${http})`, async (t) => {
    const { counts, rates, reports } = await learnFleet({ http, seconds: 40, answer: announcing(style) })
    const failed = reports.reduce((a, r) => a + r.failed, 0)
    const windows = [0, 1, 2, 3].map((w) => span(counts, w * 10, w * 10 + 10, 10))
    const later = span(counts, 10, 40, 10)
    t.diagnostic(`announced (${style}, ${http}): 200s/429s per second ${shown(counts)}`)
    t.diagnostic(`announced (${style}, ${http}): learned rate in Redis at each second's end ${rounded(rates)}`)
    t.diagnostic(
      `announced (${style}, ${http}): per window ${windows.map((w) => `${w.ok} × 200 / ${w.refused} × 429`).join(', ')}; ` +
        `10-40 s: ${later.ok} × 200, ${later.refused} × 429`,
    )
    assert.equal(failed, 0, `no sending failed: ${reports.map((r) => r.failure).join('; ')}`)
    assert.equal(later.refused, 0, `no 429 after the first window: ${shown(counts)}`)
    // Not a fleet that stopped calling: the virtual-time model's bar for
    // a fleet in line (learn_fleet.rs: at least 60 % of the later windows'
    // quota served).
    assert.ok(later.ok >= 180, `served ${later.ok} of 300 in 10-40 s: ${shown(counts)}`)
  })
}
