'use strict'
// The overload figures of concurrencyLimit: 'auto' on a real Express server
// (README, "Load shedding"): __test__/fixtures/overload.js's scenarios —
// none, a fixed limit of 20, auto, half background, and a slowdown and its
// end — each goal printed met or MISSED. A benchmark, run by ci/bench; it
// never fails on a goal (the behaviour is tested in
// __test__/overload.test.js). Usage: node bench/overload.js (~40 s)
const rb = require('..')
const f = require('../__test__/fixtures/overload.js')

const goal = (name, met) => console.log(`goal ${name}: ${met ? 'met' : 'MISSED'}`)

async function main() {
  const limit = rb.express({ policies: [], concurrencyLimit: 'auto', priority: (req) => req.headers['x-priority'] ?? 'normal' })
  const auto = await f.server(limit, () => 4)
  const none = await f.server(null, () => 4)
  const fixed = await f.server(rb.express({ policies: [], concurrencyLimit: 20 }), () => 4)
  try {
    const unloaded = await f.unloaded(auto.port)
    console.log(`unloaded         p50 ${f.ms(unloaded)} (20 sequential requests); capacity 200/s; offered ${f.RATE}/s for ${f.LOAD_S} s`)
    f.show('none', f.summary(await f.load(none.port, f.RATE, f.LOAD_S)))
    f.show('fixed 20', f.summary(await f.load(fixed.port, f.RATE, f.LOAD_S)))
    const adaptive = f.summary(await f.load(auto.port, f.RATE, f.LOAD_S))
    f.show('auto', adaptive)
    console.log(`                 limit now ${limit.concurrency.limit}, baseline ${f.ms(limit.concurrency.baselineMs)}`)
    goal('auto: p99 <= 3x unloaded', adaptive.p99 <= 3 * unloaded)
    goal('auto: goodput >= 160/s', adaptive.goodput >= 160)
    const kind = (i) => (i % 20 === 0 ? 'critical' : i % 2 === 0 ? 'background' : 'normal')
    const mixed = f.summary(await f.load(auto.port, f.RATE, f.LOAD_S, (i) => ({ 'x-priority': kind(i) })))
    f.show('auto, half bg', mixed)
    const after = f.summary(await f.load(auto.port, 100, 1), 0, 1)
    f.show('after, 100/s', after)
    goal('after the overload: none shed', after.shed === 0)
  } finally {
    await auto.close()
    await none.close()
    await fixed.close()
  }
  // A slowdown: 40 ms from 2.5 s to 6.5 s of 12.5 s at 500/s.
  const { results, seen, base } = await f.slowdown(12.5, 2.5, 6.5)
  const before = f.summary(results, 1, 2.5)
  const during = f.summary(results, 4.5, 6.5)
  const recovered = f.summary(results, 9.5, 12.5)
  console.log(`slowdown         unloaded ${f.ms(base)}`)
  f.show('20 ms, 1-2.5 s', before)
  f.show('40 ms, 4.5-6.5 s', during)
  f.show('20 ms, 9.5-12.5 s', recovered)
  console.log(`limit every 0.5 s: ${seen.filter((_, k) => k % 2 === 0).map((w) => w.limit).join(' ')}`)
  console.log(`baseline ms:       ${seen.filter((_, k) => k % 2 === 0).map((w) => w.baseline.toFixed(0)).join(' ')}`)
  // Recovered: from the first half second after which every half second
  // serves 90 % of the goodput before at a p50 within 1.2x before.
  const halves = []
  for (let t = 6.5; t < 12.5; t += 0.5) halves.push(t)
  const fine = (t) => {
    const s = f.summary(results, t, t + 0.5)
    return s.goodput >= 0.9 * before.goodput && s.p50 <= 1.2 * before.p50
  }
  const k = halves.findIndex((_, i) => halves.slice(i).every(fine))
  const back = k < 0 ? null : halves[k] - 6.5
  console.log(back === null ? 'not recovered within 6 s of its end' : `recovered ${back.toFixed(1)} s after its end`)
  goal('slowdown: goodput >= 80/s 2 s into it', during.goodput >= 80)
  goal('after the slowdown: p99 within 1.25x before', recovered.p99 <= 1.25 * before.p99)
  goal('after the slowdown: recovered within 3 s', back !== null && back <= 3)
}

main().catch((e) => {
  console.error(e)
  process.exitCode = 1
})
