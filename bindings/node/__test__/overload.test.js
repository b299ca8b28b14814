'use strict'
// The overload scenario on a real Express server on 127.0.0.1: a
// handler that runs at most 4 requests at a time for 20 ms each (capacity
// 200/s) under an open-loop load of 500 requests/s for 4 s (sent on a fixed
// schedule, never waiting for answers; 2000 requests in all). Measured on
// the requests sent after a 1 s warm-up: p50/p99 of the admitted (200)
// requests from their scheduled send time, and the goodput (200s completed
// per second within the measured period).
// - none: no shedding — the latency grows without bound (the contrast);
// - fixed 20: a fixed concurrencyLimit guessed too high — bounded, but 5x
//   the unloaded latency (16 requests queue behind the 4 slots);
// - auto: concurrencyLimit: 'auto', no number given — p99 ≤ 3× the
//   unloaded latency (20 sequential requests in the same run) and at least
//   80 % of the capacity served;
// - half background: normal requests succeed at least twice as often as
//   background ones, critical ones are never shed;
// - recovery: when the overload ends the service answers at once without
//   shedding, and when the capacity comes back (16 slots) the limit comes
//   back up within seconds and shedding stops.
// The numbers are printed (node --test __test__/overload.test.js).
const { test } = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const { performance } = require('node:perf_hooks')
const expressLib = require('express')
const rb = require('..')

const RATE = 500 // requests per second, offered
const LOAD_S = 4
const WARMUP_S = 1
const SERVICE_MS = 20

// A pool of `slots()` handler places for SERVICE_MS each; the rest wait in
// line (FIFO), as a thread pool or a database pool would.
function pool(slots) {
  let busy = 0
  const waiting = []
  function next() {
    busy--
    if (waiting.length > 0) start(waiting.shift())
  }
  function start(done) {
    busy++
    setTimeout(() => {
      done()
      next()
    }, SERVICE_MS)
  }
  return (done) => (busy < slots() ? start(done) : waiting.push(done))
}

async function server(middleware, slots) {
  const app = expressLib()
  if (middleware !== null) app.use(middleware)
  const work = pool(slots)
  app.get('/', (req, res) => work(() => res.send('ok')))
  const s = app.listen(0, '127.0.0.1')
  await new Promise((r) => s.once('listening', r))
  return { port: s.address().port, close: () => new Promise((r) => s.close(r)) }
}

// One GET; resolves with [status, ms since `sentAt`].
function one(agent, port, headers, sentAt) {
  return new Promise((resolve) => {
    const req = http.get({ agent, host: '127.0.0.1', port, path: '/', headers }, (res) => {
      res.resume()
      res.on('end', () => resolve([res.statusCode, performance.now() - sentAt]))
    })
    req.on('error', () => resolve([0, performance.now() - sentAt]))
  })
}

// Open-loop load: request i is due at i / rate seconds, sent by a 2 ms
// timer (its latency counts from when it was due, so a late timer cannot
// hide queueing); `headers(i)` marks it. Each result: { at (s, due), done
// (s, answered), status, ms, i }.
async function load(port, rate, seconds, headers = () => ({})) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4096 })
  const total = Math.round(rate * seconds)
  const results = []
  const pending = []
  const t0 = performance.now()
  let sent = 0
  await new Promise((resolve) => {
    const timer = setInterval(() => {
      const due = Math.min(total, Math.floor(((performance.now() - t0) / 1000) * rate) + 1)
      for (; sent < due; sent++) {
        const i = sent
        const at = t0 + (i / rate) * 1000
        pending.push(
          one(agent, port, headers(i), at).then(([status, ms]) =>
            results.push({ i, at: (at - t0) / 1000, done: (at - t0 + ms) / 1000, status, ms }),
          ),
        )
      }
      if (sent >= total) {
        clearInterval(timer)
        resolve()
      }
    }, 2)
  })
  await Promise.all(pending)
  agent.destroy()
  return results
}

function quantile(values, q) {
  if (values.length === 0) return NaN
  const s = [...values].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]
}

// p50/p99 of the admitted requests due after the warm-up, the goodput
// (200s answered within the measured period, per second) and the share shed.
function summary(results, from = WARMUP_S, to = LOAD_S) {
  const measured = results.filter((r) => r.at >= from && r.at < to)
  const ok = measured.filter((r) => r.status === 200).map((r) => r.ms)
  const served = results.filter((r) => r.status === 200 && r.done >= from && r.done < to).length
  return {
    p50: quantile(ok, 0.5),
    p99: quantile(ok, 0.99),
    goodput: served / (to - from),
    shed: measured.filter((r) => r.status === 503).length / measured.length,
    other: measured.filter((r) => r.status !== 200 && r.status !== 503).length,
  }
}

const ms = (x) => `${x.toFixed(1)} ms`
function show(name, s) {
  console.log(
    `${name.padEnd(16)} p50 ${ms(s.p50).padStart(9)}  p99 ${ms(s.p99).padStart(9)}  goodput ${s.goodput.toFixed(0).padStart(3)}/s  shed ${(s.shed * 100).toFixed(0)} %`,
  )
}

test('overload: no shedding vs concurrencyLimit: auto, half background, recovery (Express, 4 slots x 20 ms, 500 req/s)', async () => {
  let slots = 4
  const limit = rb.express({ policies: [], concurrencyLimit: 'auto', priority: (req) => req.headers['x-priority'] ?? 'normal' })
  const auto = await server(limit, () => slots)
  const none = await server(null, () => 4)
  // A fixed cap, guessed too high (the number the adaptive limit starts at).
  const fixed = await server(rb.express({ policies: [], concurrencyLimit: 20 }), () => 4)
  try {
    // Unloaded: 20 sequential requests (they also give the adaptive limit
    // its baseline: requests that entered alone).
    const agent = new http.Agent({ keepAlive: true })
    const alone = []
    for (let i = 0; i < 20; i++) alone.push((await one(agent, auto.port, {}, performance.now()))[1])
    agent.destroy()
    const unloaded = quantile(alone, 0.5)
    console.log(`unloaded         p50 ${ms(unloaded)} (20 sequential requests); capacity 200/s; offered ${RATE}/s for ${LOAD_S} s`)

    const noShed = summary(await load(none.port, RATE, LOAD_S))
    show('none', noShed)
    const fixed20 = summary(await load(fixed.port, RATE, LOAD_S))
    show('fixed 20', fixed20)
    const adaptive = summary(await load(auto.port, RATE, LOAD_S))
    show('auto', adaptive)
    console.log(`                 limit now ${limit.concurrency.limit}, baseline ${ms(limit.concurrency.baselineMs)}`)
    assert.equal(noShed.other + fixed20.other + adaptive.other, 0, 'only 200 and 503 answers')
    assert.ok(fixed20.p99 > 3 * unloaded, `a fixed cap of 20 queues 16 behind the 4 slots: p99 ${fixed20.p99} ms`)
    assert.ok(noShed.p99 > 10 * unloaded, `no shedding: p99 ${noShed.p99} ms grows far beyond the unloaded ${unloaded} ms`)
    assert.ok(adaptive.p99 <= 3 * unloaded, `auto: p99 ${adaptive.p99} ms within 3x the unloaded ${unloaded} ms`)
    assert.ok(adaptive.goodput >= 160, `auto: goodput ${adaptive.goodput}/s, at least 80 % of 200/s`)

    // Half of the load background, one request in 20 critical.
    const kind = (i) => (i % 20 === 0 ? 'critical' : i % 2 === 0 ? 'background' : 'normal')
    const mixed = await load(auto.port, RATE, LOAD_S, (i) => ({ 'x-priority': kind(i) }))
    show('auto, half bg', summary(mixed))
    const success = (k) => {
      const of = mixed.filter((r) => r.at >= WARMUP_S && kind(r.i) === k)
      return of.filter((r) => r.status === 200).length / of.length
    }
    const [normal, background, critical] = [success('normal'), success('background'), success('critical')]
    const criticalShed = mixed.filter((r) => kind(r.i) === 'critical' && r.status !== 200).length
    console.log(
      `                 success: normal ${(normal * 100).toFixed(0)} %, background ${(background * 100).toFixed(0)} %, critical ${(critical * 100).toFixed(0)} % (${criticalShed} critical shed)`,
    )
    assert.ok(normal >= 2 * background, `normal ${normal} at least twice background ${background}`)
    assert.equal(criticalShed, 0)

    // Recovery. The overload ends (100/s, half the capacity): answered
    // without shedding, at the unloaded latency.
    const low = await load(auto.port, 100, 1)
    const after = summary(low, 0, 1)
    show('after, 100/s', after)
    assert.equal(after.shed, 0)
    assert.ok(after.p99 <= 3 * unloaded, `after the overload: p99 ${after.p99} ms`)
    // The capacity comes back (16 slots, 800/s) under the same 500/s: the
    // limit rises until nothing is shed.
    const before = limit.concurrency.limit
    slots = 16
    const back = await load(auto.port, RATE, 3)
    const shedAt = back.filter((r) => r.status === 503).map((r) => r.at)
    const recovered = shedAt.length === 0 ? 0 : Math.max(...shedAt)
    const settled = summary(back, recovered, 3)
    console.log(
      `capacity back    limit ${before} -> ${limit.concurrency.limit}; last shed ${(recovered * 1000).toFixed(0)} ms into it; then p99 ${ms(settled.p99)}, goodput ${settled.goodput.toFixed(0)}/s`,
    )
    assert.ok(limit.concurrency.limit > before, `the limit came back up from ${before}`)
    assert.ok(recovered < 2, `shedding stopped within 2 s (last shed at ${recovered} s)`)
  } finally {
    await auto.close()
    await none.close()
    await fixed.close()
  }
})
