'use strict'
// Load shedding by priority and the adaptive limit through the middleware:
// background requests get a place only below the background share of the
// limit, normal ones up to it, critical ones always (without a place at a
// full cap); a bad priority is shed (503) with a warning, never a 500, and
// a priority answering nothing is normal; onDecision
// tells a shed request's priority; the gauge (`concurrency`); the adaptive
// limit times a request when its head is written; bad options fail at
// startup. Real Express and Fastify servers on 127.0.0.1.
const { test } = require('node:test')
const assert = require('node:assert/strict')
const expressLib = require('express')
const Fastify = require('fastify')
const rb = require('..')
const { heldRoute } = require('./fixtures/common.js')

async function get(port, path, headers = {}) {
  const r = await fetch(`http://127.0.0.1:${port}${path}`, { headers })
  return { status: r.status, headers: r.headers, body: await r.text() }
}

const wait = (ms) => new Promise((r) => setTimeout(r, ms))

// Polls `done` every 5 ms, at most 2 s.
async function until(done) {
  for (let i = 0; i < 400 && !done(); i++) await wait(5)
  assert.ok(done(), 'condition not reached within 2 s')
}

test('Gate: background below the share, normal up to the limit, critical beyond it; priority asked lazily', () => {
  const asked = []
  const gate = new rb.Gate(
    { policies: [], concurrencyLimit: 4 },
    { priority: (req) => (asked.push(req.id), req.priority) },
  )
  const places = []
  const admit = (id, priority) => {
    const v = gate.admit({ id, priority })
    if (v.place !== null) places.push(v.place)
    return v
  }
  // Below the share (2 of 4) nobody is asked.
  assert.equal(admit(1, 'background').status, 0)
  assert.equal(admit(2, 'background').status, 0)
  assert.deepEqual(asked, [])
  // At the share: background shed, normal let in up to the limit.
  const shed = admit(3, 'background')
  assert.equal(shed.status, 503)
  assert.equal(shed.outcome, 'shed')
  assert.equal(shed.priority, 'background')
  assert.equal(shed.place, null)
  assert.equal(admit(4, 'normal').status, 0)
  assert.equal(admit(5, 'normal').status, 0)
  assert.equal(gate.concurrency.inFlight, 4)
  const full = admit(6, 'normal')
  assert.equal([full.status, full.priority].join(), '503,normal')
  // Critical: on without a place, never shed.
  const critical = admit(7, 'critical')
  assert.equal(critical.status, 0)
  assert.equal(critical.place, null)
  assert.deepEqual(asked, [3, 4, 5, 6, 7])
  assert.deepEqual(gate.concurrency, { limit: 4, inFlight: 4, adaptive: false })
  for (const p of places.splice(0)) p.release()
  assert.equal(gate.concurrency.inFlight, 0)

  // A constant priority, checked when the gate is made; backgroundFraction.
  const bg = new rb.Gate({ policies: [], concurrencyLimit: 4, backgroundFraction: 0.25 }, { priority: 'background' })
  const first = bg.admit({})
  assert.equal(first.status, 0)
  assert.equal(bg.admit({}).priority, 'background')
  first.place.release()
  assert.throws(() => new rb.Gate({ policies: [], concurrencyLimit: 4 }, { priority: 'urgent' }), {
    name: 'TypeError',
    code: 'ERR_RATEBOUND_INVALID_OPTION',
    message: 'invalid priority "urgent": is "critical", "normal" or "background"',
  })
  assert.throws(() => new rb.Gate({ policies: [], concurrencyLimit: 4 }, { priority: 3 }), {
    code: 'ERR_RATEBOUND_INVALID_OPTION',
    message: /priority "3"/,
  })
  assert.equal(new rb.Gate({ rate: 1 }).concurrency, null)
})

test('Gate: a priority answering nothing is normal; a bad answer or a throw is shed (503, Retry-After) with a warning, never thrown; nothing charged, no place kept', async () => {
  const boom = new Error('boom')
  const gate = new rb.Gate(
    { rate: 1, burst: 1, concurrencyLimit: 2, backgroundFraction: 0 },
    {
      priority: (req) => {
        if (req.boom) throw boom
        return req.priority
      },
    },
  )
  // A string longer than any priority's name, named whole.
  const long = 'background'.repeat(4)
  const bad = [
    [{ priority: 'urgent' }, /priority "urgent"/],
    [{ priority: 42 }, /priority "42"/],
    [{ priority: long }, new RegExp(`priority "${long}"`)],
    [{ priority: 'Normal' }, /priority "Normal"/],
    [{ boom: true }, /^boom$/],
  ]
  const warnings = []
  const warned = (w) => warnings.push(w)
  process.on('warning', warned)
  try {
    for (const [req] of bad) {
      const v = gate.admit(req, '192.0.2.1')
      assert.deepEqual([v.status, v.outcome, v.place, v.headers], [503, 'shed', null, ['retry-after', '1']], req)
    }
    await new Promise((r) => setImmediate(r))
  } finally {
    process.off('warning', warned)
  }
  assert.equal(warnings.length, bad.length)
  bad.forEach(([, message], i) => assert.match(warnings[i].message, message))
  assert.equal(warnings[0].code, 'ERR_RATEBOUND_INVALID_OPTION')
  assert.equal(warnings[4], boom)
  assert.equal(gate.concurrency.inFlight, 0)
  // No token was spent: the IP's one token is still there; undefined and
  // null answers are normal.
  const ok = gate.admit({ priority: undefined }, '192.0.2.1')
  assert.equal(ok.status, 0)
  assert.equal(gate.admit({ priority: null }, '192.0.2.1').status, 429)
  ok.place.release()
})

// A server with a cap of 4 (fraction ½) in front of /slow, which holds its
// requests (`heldRoute`); x-priority gives the priority, onDecision is logged.
async function priorities(start) {
  const route = heldRoute()
  const events = []
  const options = {
    rate: 1000,
    burst: 1000,
    concurrencyLimit: 4,
    priority: (req) => req.headers['x-priority'] ?? 'normal',
    onDecision: (e) => events.push(e),
    label: 'app',
  }
  const { port, stop, limit } = await start(options, route.handler)
  try {
    const held = [get(port, '/slow'), get(port, '/slow')]
    await until(() => route.inside === 2)
    assert.equal(limit.concurrency.inFlight, 2)
    // At the share: background is shed (503, Retry-After: 1), normal goes in.
    const bg = await get(port, '/slow', { 'x-priority': 'background' })
    assert.equal(bg.status, 503)
    assert.equal(bg.headers.get('retry-after'), '1')
    held.push(get(port, '/slow'), get(port, '/slow'))
    await until(() => route.inside === 4)
    const normal = await get(port, '/slow')
    assert.equal(normal.status, 503)
    // Critical: on past the full cap.
    held.push(get(port, '/slow', { 'x-priority': 'critical' }))
    await until(() => route.inside === 5)
    assert.equal(limit.concurrency.inFlight, 4)
    route.open()
    assert.deepEqual((await Promise.all(held)).map((r) => r.status), [200, 200, 200, 200, 200])
    const shed = events.filter((e) => e.outcome === 'shed')
    assert.deepEqual(shed, [
      { outcome: 'shed', policy: null, policies: ['default'], label: 'app', priority: 'background' },
      { outcome: 'shed', policy: null, policies: ['default'], label: 'app', priority: 'normal' },
    ])
    assert.ok(events.filter((e) => e.outcome === 'allowed').every((e) => !('priority' in e)))
    await until(() => limit.concurrency.inFlight === 0)

    // A bad priority: the fail-safe answer (503 with Retry-After, a
    // warning), never the framework's error path (500); nothing: normal.
    route.door = Promise.resolve()
    const warnings = []
    const warned = (w) => warnings.push(w)
    process.on('warning', warned)
    for (const [priority, named] of [['urgent', /priority "urgent"/], ['throw', /the priority hook failed/], ['none', null]]) {
      const held2 = [get(port, '/slow'), get(port, '/slow')]
      await until(() => limit.concurrency.inFlight === 0 && events.length > 0)
      await Promise.all(held2)
      // The priority is asked at the share only: hold two places.
      let release
      const blocker = new Promise((r) => (release = r))
      route.door = blocker
      const two = [get(port, '/slow'), get(port, '/slow')]
      await until(() => route.inside === 2)
      warnings.length = 0
      const bad = get(port, '/slow', { 'x-priority': priority })
      try {
        if (named === null) {
          // Answered nothing: normal, a place at the share.
          await until(() => route.inside === 3)
          release()
          assert.equal((await bad).status, 200)
        } else {
          const answer = await bad
          assert.deepEqual([answer.status, answer.headers.get('retry-after')], [503, '1'], priority)
          await until(() => warnings.length === 1)
          assert.match(warnings[0].message, named)
        }
      } finally {
        release()
      }
      assert.deepEqual((await Promise.all(two)).map((r) => r.status), [200, 200])
      route.door = Promise.resolve()
    }
    process.off('warning', warned)
    assert.equal(warnings.length, 0)
    await until(() => limit.concurrency.inFlight === 0)
    assert.equal((await get(port, '/slow')).status, 200)
  } finally {
    route.open()
    await stop()
  }
}

// The priority function of `options`, throwing for x-priority: throw.
function throwing(options) {
  const inner = options.priority
  return {
    ...options,
    priority: (req) => {
      if (req.headers['x-priority'] === 'throw') throw new Error('the priority hook failed')
      if (req.headers['x-priority'] === 'none') return undefined
      return inner(req)
    },
  }
}

test('Express: priorities, onDecision with the priority, a bad priority is a 503, the gauge', async () => {
  await priorities(async (options, slow) => {
    const app = expressLib()
    const limit = rb.express(throwing(options))
    app.use(limit)
    app.get('/slow', async (req, res) => res.send(await slow()))
    app.use((err, req, res, next) => res.status(500).json({ code: err.code, message: err.message }))
    const server = app.listen(0, '127.0.0.1')
    await new Promise((r) => server.once('listening', r))
    return { port: server.address().port, stop: () => new Promise((r) => server.close(r)), limit }
  })
})

test('Fastify: priorities, onDecision with the priority, a bad priority is a 503, the gauge', async () => {
  await priorities(async (options, slow) => {
    const app = Fastify()
    await app.register(rb.fastify, throwing(options))
    app.get('/slow', async () => slow())
    await app.listen({ port: 0, host: '127.0.0.1' })
    return { port: app.server.address().port, stop: () => app.close(), limit: app.ratebound }
  })
})

// 24 sequential requests (more than one window of the adaptive limit,
// which starts at 20) to `path`; the gauge after them.
async function timed(port, path, gaugeOf) {
  for (let i = 0; i < 24; i++) assert.equal((await get(port, path)).status, 200)
  const c = gaugeOf()
  assert.equal(c.adaptive, true)
  assert.equal(c.windows, 1)
  return c
}

// Exact, on the gate's ManualClock: each handler moves the clock 40 ms at
// one point of its response — after the head (/stream) or before it
// (/late) — so a latency taken at the head is 0 (the 1 µs floor) for one
// and exactly 40 ms for the other, whatever the machine's speed; one
// taken at the body's end (or at close) would be 40 ms for both.
test("concurrencyLimit: 'auto' times a request when its head is written, not when its body ends", async () => {
  const app = expressLib()
  const clock = new rb.ManualClock()
  const lateClock = new rb.ManualClock()
  // One limit per route: each window holds one route's samples.
  const limit = rb.express({ policies: [], concurrencyLimit: 'auto', clock })
  const lateLimit = rb.express({ policies: [], concurrencyLimit: 'auto', clock: lateClock })
  // The head, then 40 ms (on the clock), then the body's end.
  app.get('/stream', limit, (req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' })
    res.write('a')
    clock.advance(0.04)
    res.end('b')
  })
  // 40 ms, then the head (and body).
  app.get('/late', lateLimit, (req, res) => {
    lateClock.advance(0.04)
    res.send('ab')
  })
  // The head, then the body held on a promise the test resolves: the
  // place is held (in flight) until the body ends.
  let release = null
  app.get('/held', limit, (req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' })
    res.write('a')
    new Promise((r) => (release = r)).then(() => res.end('b'))
  })
  const server = app.listen(0, '127.0.0.1')
  await new Promise((r) => server.once('listening', r))
  try {
    const port = server.address().port
    assert.deepEqual(limit.concurrency, { limit: 20, inFlight: 0, adaptive: true, baselineMs: 0, recentMs: 0, windows: 0 })
    const stream = await timed(port, '/stream', () => limit.concurrency)
    assert.equal(stream.recentMs, 0.001, `streamed: ${stream.recentMs} ms`)
    const late = await timed(port, '/late', () => lateLimit.concurrency)
    assert.equal(late.recentMs, 40, `late head: ${late.recentMs} ms`)
    assert.equal(limit.concurrency.inFlight, 0)
    // The head is out (fetch resolves on it) and the body is held.
    const r = await fetch(`http://127.0.0.1:${port}/held`)
    assert.equal(r.status, 200)
    assert.equal(limit.concurrency.inFlight, 1, 'the place is held while the body streams')
    release()
    assert.equal(await r.text(), 'ab')
    await until(() => limit.concurrency.inFlight === 0)
  } finally {
    server.close()
  }

  const fastifyClock = new rb.ManualClock()
  const fastify = Fastify()
  await fastify.register(rb.fastify, { policies: [], concurrencyLimit: 'auto', concurrencyInitial: 16, clock: fastifyClock })
  fastify.get('/late', async () => {
    fastifyClock.advance(0.04)
    return 'ab'
  })
  await fastify.listen({ port: 0, host: '127.0.0.1' })
  try {
    // Windows of 16: the 24 requests close one.
    const late = await timed(fastify.server.address().port, '/late', () => fastify.ratebound.concurrency)
    assert.equal(late.recentMs, 40, `fastify late head: ${late.recentMs} ms`)
  } finally {
    await fastify.close()
  }
})

test('adaptive options and priorities are checked at startup, the bad value named', async () => {
  const invalid = { name: 'TypeError', code: 'ERR_RATEBOUND_INVALID_OPTION' }
  const number = { name: 'RangeError', code: 'ERR_RATEBOUND_INVALID_NUMBER' }
  const cases = [
    [{ rate: 1, concurrencyLimit: 4, concurrencyMax: 50 }, { ...invalid, message: /concurrency_limit "4".*choose one/ }],
    [{ rate: 1, concurrencyLimit: 'fast' }, { ...invalid, message: /concurrencyLimit "fast"/ }],
    [{ rate: 1, concurrencyLimit: 'auto', concurrencyTolerance: NaN }, { ...number, message: /concurrencyTolerance NaN/ }],
    [{ rate: 1, concurrencyLimit: 'auto', concurrencyTolerance: 0.5 }, { ...number, message: /concurrencyTolerance 0.5/ }],
    [{ rate: 1, concurrencyLimit: 'auto', concurrencyMin: -1 }, { ...number, message: /concurrencyMin -1/ }],
    [{ rate: 1, concurrencyLimit: 'auto', concurrencyMax: 2.5 }, { ...number, message: /concurrencyMax 2.5/ }],
    [{ rate: 1, concurrencyLimit: 'auto', concurrencyMin: 50, concurrencyMax: 10 }, { ...number, message: /max_limit 10/ }],
    [{ rate: 1, concurrencyLimit: 'auto', backgroundFraction: 1.5 }, { ...number, message: /1.5/ }],
    [{ rate: 1, backgroundFraction: 0.3 }, { ...invalid, message: /background_fraction "0.3"/ }],
    [{ rate: 1, concurrencyLimit: 'auto', priority: 'urgent' }, { ...invalid, message: /priority "urgent"/ }],
    [{ rate: 1, concurrencyLimit: 'auto', priority: 7 }, { ...invalid, message: /priority "7"/ }],
  ]
  for (const [options, error] of cases) {
    assert.throws(() => rb.express(options), error, JSON.stringify(options))
    assert.throws(() => rb.fastify.limit(options), error, JSON.stringify(options))
    const app = Fastify()
    await assert.rejects(app.register(rb.fastify, options).ready(), error, JSON.stringify(options))
    await app.close()
  }
  // With global: false the options are only routes' defaults, checked too.
  const app = Fastify()
  await assert.rejects(app.register(rb.fastify, { global: false, concurrencyLimit: 4, priority: 'urgent' }).ready(), {
    ...invalid,
    message: /priority "urgent"/,
  })
  await app.close()
  for (const ok of [
    { concurrencyLimit: 'auto' },
    { concurrencyLimit: 'auto', concurrencyInitial: 8, concurrencyMin: 4, concurrencyMax: 64, concurrencyTolerance: 2 },
    { concurrencyMax: 64 },
    { concurrencyLimit: 8, backgroundFraction: 0.25, priority: 'background' },
  ]) {
    const limit = rb.express({ rate: 1, ...ok })
    assert.equal(limit.concurrency.adaptive, ok.concurrencyLimit !== 8, JSON.stringify(ok))
  }
  assert.equal(rb.express({ rate: 1 }).concurrency, null)
})
