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
const { closeAll } = require('./fixtures/redis-clients.js')
const { cleanup, bucket, learnFleet, span, shown, rounded } = require('./fixtures/outbound.js')

after(async () => {
  await closeAll()
  await cleanup()
})

// The fleet for `seconds` through `http` ('fetch' | 'axios'), in front of
// a partner of 10/s burst 20 answering a bare 429 beyond.
function fleet(http, adaptive, seconds) {
  const limit = bucket(10, 20)
  return learnFleet({ http, adaptive, seconds, answer: () => (limit.take() === 0 ? [200, {}] : [429, {}]) })
}

// The last `n` seconds: the share refused, and the partner's 200s against
// its capacity (10/s).
function last(counts, n) {
  const { share, goodput } = span(counts, counts.length - n, counts.length, 10)
  return { refused: share, goodput }
}

for (const http of ['fetch', 'axios']) {
  test(`fifty instances over one Redis bucket find a bare-429 partner's limit through rb.${http}`, async (t) => {
    const { counts, rates, reports } = await fleet(http, undefined, 20)
    const { refused, goodput } = last(counts, 10)
    const sent = reports.reduce((a, r) => a + r.sent, 0)
    const failed = reports.reduce((a, r) => a + r.failed, 0)
    t.diagnostic(`${http}, learning: 200s/429s per second ${shown(counts)}`)
    t.diagnostic(`${http}, learning: learned rate in Redis at each second's end ${rounded(rates)}`)
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
