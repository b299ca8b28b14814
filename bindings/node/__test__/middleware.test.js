'use strict'
// DESIGN.md scenarios 2 and 3 through real Express and Fastify servers on
// 127.0.0.1: rate 1/s burst 2 keyed by X-API-Key: alice 200, alice 200,
// alice 429 with Retry-After: 1, bob 200; then 10 minutes on, one request
// without a key, and the gate's cleanup() drops alice and bob, keeping 1.
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

async function scenario2(port, clock) {
  const a1 = await get(port, '/', { 'x-api-key': 'alice' })
  const a2 = await get(port, '/', { 'x-api-key': 'alice' })
  const a3 = await get(port, '/', { 'x-api-key': 'alice' })
  const b1 = await get(port, '/', { 'x-api-key': 'bob' })
  assert.deepEqual([a1.status, a2.status, a3.status, b1.status], [200, 200, 429, 200])
  assert.equal(a1.body, 'hello')
  assert.equal(a3.headers.get('retry-after'), '1')
  assert.equal(a3.headers.get('ratelimit-policy'), '"default";q=2;w=2')
  assert.equal(a3.headers.get('ratelimit'), '"default";r=0;t=2')
  assert.equal(a1.headers.get('ratelimit'), '"default";r=1;t=1')
  assert.match(a3.body, /rate limit exceeded; retry in 1 s/)
  // Exempt paths are not counted.
  assert.equal((await get(port, '/health', { 'x-api-key': 'alice' })).status, 200)
}

// Scenario 3, after scenario 2 on `gate` (the middleware's): 10 minutes
// later one request without a key (keyed by the peer IP), then cleanup.
// The gate's cleanup() drops the state that is fresh again; at rate 1/s
// burst 2 that is exactly the state idle over 5 minutes here: alice and
// bob go, the IP (one token spent just now) stays.
async function scenario3(port, clock, gate) {
  assert.equal(gate.size, 2) // alice and bob
  clock.advance(600)
  const ip1 = await get(port, '/')
  assert.equal(ip1.status, 200)
  assert.equal(ip1.headers.get('ratelimit'), '"default";r=1;t=1')
  assert.equal(gate.size, 3)
  assert.equal(gate.cleanup(), 2)
  assert.equal(gate.size, 1)
  // The one left is the IP's: its second request finds the token it spent
  // (a fresh state would say r=1).
  const ip2 = await get(port, '/')
  assert.equal(ip2.status, 200)
  assert.equal(ip2.headers.get('ratelimit'), '"default";r=0;t=2')
  assert.equal(gate.cleanup(), 0)
}

test('Express middleware: scenarios 2 and 3 (cleanup drops alice and bob), custom handler, trustedProxies', async () => {
  const clock = new rb.ManualClock()
  const app = expressLib()
  const limit = rb.express({
    rate: 1,
    burst: 2,
    key: { header: 'X-API-Key' },
    exempt: (req) => req.path === '/health',
    clock,
  })
  app.use(limit)
  app.get('/', (req, res) => res.send('hello'))
  app.get('/health', (req, res) => res.send('ok'))
  const server = app.listen(0, '127.0.0.1')
  await new Promise((r) => server.once('listening', r))
  try {
    const { port } = server.address()
    await scenario2(port, clock)
    await scenario3(port, clock, limit.gate)
  } finally {
    server.close()
  }

  // A custom handler, and keys from X-Forwarded-For under the middleware's
  // own trustedProxies (Express's trust proxy setting is not read).
  const app2 = expressLib()
  const seen = []
  app2.use(
    rb.express({
      rate: '1/minute',
      burst: 1,
      trustedProxies: ['127.0.0.0/8', '::1/128'],
      clock,
      handler: (req, res, next, refusal) => {
        seen.push(refusal)
        res.status(refusal.status).json({ wait: refusal.retryAfter })
      },
    }),
  )
  app2.get('/', (req, res) => res.send('hi'))
  const server2 = app2.listen(0, '127.0.0.1')
  await new Promise((r) => server2.once('listening', r))
  try {
    const { port } = server2.address()
    const xff = (ip) => ({ 'x-forwarded-for': ip })
    assert.equal((await get(port, '/', xff('203.0.113.1'))).status, 200)
    assert.equal((await get(port, '/', xff('203.0.113.2'))).status, 200)
    const refused = await get(port, '/', xff('203.0.113.1'))
    assert.equal(refused.status, 429)
    assert.equal(refused.headers.get('retry-after'), '60')
    assert.deepEqual(JSON.parse(refused.body), { wait: 60 })
    assert.equal(seen.length, 1)
  } finally {
    server2.close()
  }
})

test('Fastify plugin: scenarios 2 and 3 (cleanup drops alice and bob), legacy headers, problem+json', async () => {
  const clock = new rb.ManualClock()
  const app = Fastify()
  await app.register(rb.fastify, {
    rate: 1,
    burst: 2,
    key: (req) => req.headers['x-api-key'],
    exempt: (req) => req.url === '/health',
    clock,
  })
  app.get('/', async () => 'hello')
  app.get('/health', async () => 'ok')
  await app.listen({ port: 0, host: '127.0.0.1' })
  try {
    await scenario2(app.server.address().port, clock)
    await scenario3(app.server.address().port, clock, app.ratebound)
  } finally {
    await app.close()
  }

  const app2 = Fastify()
  await app2.register(rb.fastify, {
    policies: [
      { name: 'burst', rate: 10, burst: 1 },
      { name: 'hourly', algorithm: 'fixed_window', limit: 100, window: 3600 },
    ],
    headers: 'legacy',
    body: 'problem+json',
    missingKey: 401,
    key: { header: 'x-api-key' },
    clock,
  })
  app2.get('/', async () => 'hello')
  await app2.listen({ port: 0, host: '127.0.0.1' })
  try {
    const port = app2.server.address().port
    assert.equal((await get(port, '/')).status, 401)
    const ok = await get(port, '/', { 'x-api-key': 'k' })
    assert.equal(ok.status, 200)
    assert.equal(ok.headers.get('x-ratelimit-remaining'), '0')
    const refused = await get(port, '/', { 'x-api-key': 'k' })
    assert.equal(refused.status, 429)
    assert.match(refused.headers.get('content-type'), /^application\/problem\+json/)
    assert.equal(JSON.parse(refused.body).status, 429)
    assert.equal(refused.headers.get('retry-after'), '1')
  } finally {
    await app2.close()
  }
})

test('middleware options are checked at startup', () => {
  assert.throws(() => rb.express({ rate: 0 }), { code: 'ERR_RATEBOUND_INVALID_RATE' })
  assert.throws(() => rb.express({ rate: 1, key: 42 }), TypeError)
  assert.throws(() => rb.express({ rate: 1, trustedProxies: ['nonsense'] }), { code: 'ERR_RATEBOUND_PARSE_ERROR' })
  assert.throws(() => rb.express(), TypeError)
  // Every option is parsed by the core (GateOptions::set); a value of the
  // wrong kind names the option.
  const invalidOption = { name: 'TypeError', code: 'ERR_RATEBOUND_INVALID_OPTION' }
  assert.throws(() => rb.express({ rate: 1, trustedProxies: true }), { ...invalidOption, message: /trustedProxies/ })
  assert.throws(() => rb.express({ rate: 1, trustedProxies: ['10.0.0.0/8', 7] }), { ...invalidOption, message: /trustedProxies/ })
  assert.throws(() => rb.express({ rate: 1, headers: 3 }), { ...invalidOption, message: /headers/ })
  assert.throws(() => rb.express({ rate: 1, maxKeys: '10' }), { ...invalidOption, message: /maxKeys/ })
  assert.throws(() => rb.express({ rate: 1, missingKey: {} }), { ...invalidOption, message: /missingKey/ })
  // The forwarding header is read only from trusted proxies.
  assert.throws(() => rb.express({ rate: 1, clientIpHeader: 'cf-connecting-ip' }), { ...invalidOption, message: /clientIpHeader|client_ip_header/ })
  assert.throws(() => rb.express({ rate: 1, trustedProxies: 1, clientIpHeader: 'bad name' }), { code: 'ERR_RATEBOUND_PARSE_ERROR' })
  assert.throws(() => rb.express({ rate: 1, key: { header: 'x y' } }), { code: 'ERR_RATEBOUND_PARSE_ERROR' })
  assert.throws(() => rb.express({ rate: 1, key: { header: 'a' }, keyHeader: 'b' }), TypeError)
  // A missing-key status is an HTTP error status (the core's range).
  assert.throws(() => rb.express({ rate: 1, missingKey: 200 }), { name: 'RangeError', code: 'ERR_RATEBOUND_INVALID_NUMBER' })
  assert.throws(() => rb.express({ rate: 1, missingKey: 600 }), RangeError)
  assert.throws(() => rb.express({ rate: 1, missingKey: 'nobody' }), { code: 'ERR_RATEBOUND_PARSE_ERROR' })
  for (const ok of [
    { trustedProxies: '10.0.0.0/8', clientIpHeader: 'CF-Connecting-IP' },
    { trustedProxies: 2, clientIpHeader: 'forwarded' },
    { keyHeader: 'X-API-Key', missingKey: 401 },
    { key: () => 'k', missingKey: 'shared' },
  ]) {
    rb.express({ rate: 1, ...ok })
  }
})

test('Fastify plugin registered twice: ready() rejects with the decorator error, the process goes on', async () => {
  // Before: decorate() threw out of the plugin past avvio, an uncaught
  // exception that ended the process.
  const app = Fastify()
  app.register(rb.fastify, { rate: 10, burst: 10 })
  app.register(rb.fastify, { rate: 10, burst: 10 })
  await assert.rejects(app.ready(), { code: 'FST_ERR_DEC_ALREADY_PRESENT' })
  // Bad options still fail the same way.
  const bad = Fastify()
  bad.register(rb.fastify, { rate: 0 })
  await assert.rejects(bad.ready(), { code: 'ERR_RATEBOUND_INVALID_RATE' })
})

test('Gate: the core reads the raw header lines, in order', () => {
  const clock = new rb.ManualClock()
  const gate = new rb.Gate({ policies: [{ rate: 1, burst: 1 }], keyHeader: 'x-api-key', missingKey: 401, clock })
  assert.equal(gate.decide(undefined, '192.0.2.1', ['X-Api-Key', 'alice']).status, 0)
  assert.equal(gate.decide(undefined, '192.0.2.1', ['x-api-key', 'alice']).status, 429)
  // Two lines, a comma, an empty value: no key.
  for (const lines of [['x-api-key', 'bob', 'x-api-key', 'carol'], ['x-api-key', 'bob, carol'], ['x-api-key', ' '], []]) {
    const v = gate.decide(undefined, '192.0.2.1', lines)
    assert.equal(v.status, 401, JSON.stringify(lines))
    assert.equal(v.body, 'a key is required for this endpoint\n')
  }
  // Without givenKey the key argument is not the key.
  assert.equal(gate.decide('alice-again', '192.0.2.1', ['x-api-key', 'dave']).status, 0)
  assert.throws(() => gate.decide(undefined, '192.0.2.1', 'x-api-key: alice'), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' })
  assert.throws(() => gate.decide(undefined, '192.0.2.1', ['x-api-key', 42]), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' })

  // givenKey: the application's key; an empty one is no key.
  const given = new rb.Gate({ policies: [{ rate: 1, burst: 1 }], givenKey: true, missingKey: 'shared', clock })
  assert.equal(given.decide('alice', '192.0.2.1').status, 0)
  assert.equal(given.decide('alice', '192.0.2.2').status, 429)
  assert.equal(given.decide('', '192.0.2.1').status, 0)
  assert.equal(given.decide(null, '192.0.2.2').status, 429)
  assert.throws(() => new rb.Gate({ policies: [{ rate: 1 }], givenKey: true, keyHeader: 'x-api-key' }), { code: 'ERR_RATEBOUND_INVALID_OPTION' })

  // Behind a proxy: only the configured header, its lines combined in order.
  const proxied = new rb.Gate({ policies: [{ rate: 1, burst: 1 }], trustedProxies: 1, clock })
  assert.equal(proxied.decide(undefined, '127.0.0.1', ['X-Forwarded-For', '6.6.6.0', 'x-forwarded-for', '203.0.113.9']).status, 0)
  assert.equal(proxied.decide(undefined, '127.0.0.1', ['x-forwarded-for', '6.6.6.1, 203.0.113.9', 'forwarded', 'for=9.9.9.9']).status, 429)

  // Load shedding only: no policy, a concurrency limit.
  const shedOnly = new rb.Gate({ policies: [], concurrencyLimit: 1 })
  assert.equal(shedOnly.tryEnter(), true)
  assert.equal(shedOnly.tryEnter(), false)
  shedOnly.leave()
  assert.equal(shedOnly.decide(undefined, '192.0.2.1').status, 0)
  assert.throws(() => new rb.Gate({ policies: [] }), { code: 'ERR_RATEBOUND_NO_LIMITERS' })
})

test('http.clientIp reads only the configured header from trusted proxies', () => {
  const lines = ['X-Forwarded-For', '203.0.113.9', 'Forwarded', 'for=6.6.6.6', 'CF-Connecting-IP', '198.51.100.7']
  assert.equal(rb.http.clientIp('10.0.0.5', lines), '10.0.0.5')
  assert.equal(rb.http.clientIp('10.0.0.5', lines, ['10.0.0.0/8']), '203.0.113.9')
  assert.equal(rb.http.clientIp('10.0.0.5', lines, '10.0.0.0/8', 'forwarded'), '6.6.6.6')
  assert.equal(rb.http.clientIp('10.0.0.5', lines, 1, 'cf-connecting-ip'), '198.51.100.7')
  assert.equal(rb.http.clientIp('198.51.100.1', lines, ['10.0.0.0/8'], 'cf-connecting-ip'), '198.51.100.1')
  assert.throws(() => rb.http.clientIp('10.0.0.5', lines, true), { code: 'ERR_RATEBOUND_INVALID_OPTION' })
  assert.throws(() => rb.http.clientIp('10.0.0.5', {}, 1), { code: 'ERR_INVALID_ARG_TYPE' })
})

// Load shedding: a cap of 4 in front of a slow route; 10 requests at once:
// exactly 4 run, 6 are refused with 503 and Retry-After: 1 at once; a
// critical request still passes; every place comes back.
async function shedding(start) {
  const route = heldRoute()
  const { port, stop } = await start(route.handler)
  try {
    const pending = Array.from({ length: 10 }, () => get(port, '/slow'))
    const settled = []
    pending.forEach((p) => p.then((r) => settled.push(r)))
    for (let i = 0; i < 400 && !(route.inside === 4 && settled.length === 6); i++) {
      await new Promise((r) => setTimeout(r, 5))
    }
    assert.equal(route.inside, 4)
    assert.equal(settled.length, 6)
    for (const r of settled) {
      assert.equal(r.status, 503)
      assert.equal(r.headers.get('retry-after'), '1')
    }
    const critical = get(port, '/slow', { 'x-critical': '1' })
    for (let i = 0; i < 400 && route.inside !== 5; i++) await new Promise((r) => setTimeout(r, 5))
    assert.equal(route.inside, 5)
    route.open()
    const done = await Promise.all([...pending, critical])
    assert.equal(done.filter((r) => r.status === 200).length, 5)
    // Places came back: four at once are admitted again.
    const again = await Promise.all(Array.from({ length: 4 }, () => get(port, '/slow')))
    assert.deepEqual(again.map((r) => r.status), [200, 200, 200, 200])
  } finally {
    await stop()
  }
}

const shedOptions = {
  rate: 1000,
  burst: 1000,
  concurrencyLimit: 4,
  critical: (req) => req.headers['x-critical'] === '1',
}

test('Express middleware sheds load beyond concurrencyLimit', async () => {
  await shedding(async (slow) => {
    const app = expressLib()
    app.use(rb.express(shedOptions))
    app.get('/slow', async (req, res) => res.send(await slow()))
    const server = app.listen(0, '127.0.0.1')
    await new Promise((r) => server.once('listening', r))
    return { port: server.address().port, stop: () => new Promise((r) => server.close(r)) }
  })
  assert.throws(() => rb.express({ rate: 1, concurrencyLimit: 0 }), RangeError)
})

test('Fastify plugin sheds load beyond concurrencyLimit', async () => {
  await shedding(async (slow) => {
    const app = Fastify()
    await app.register(rb.fastify, shedOptions)
    app.get('/slow', async () => slow())
    await app.listen({ port: 0, host: '127.0.0.1' })
    return { port: app.server.address().port, stop: () => app.close() }
  })
})

test('a policy field the middleware does not take is an error naming it', () => {
  // { rate: 1, brust: 3 } once ran with the default burst, the field ignored.
  for (const make of [(policies) => rb.express({ policies }), (policies) => rb.fastify.limit({ policies })]) {
    assert.throws(
      () => make([{ name: 'p', rate: 1, brust: 3 }]),
      (e) => e.code === 'ERR_RATEBOUND_INVALID_OPTION' && /brust/.test(e.message),
    )
    make([{ name: 'p', rate: 1, burst: 3 }])
  }
})

// One name per concept (issue 38): the exemption hook is `exempt`, as in
// the Gate and Python; `skip` (accepted silently before) is refused, named.
test('the exemption hook is exempt: skip is refused with the name to use', () => {
  assert.throws(
    () => rb.express({ rate: 1, skip: () => true }),
    (e) => e.code === 'ERR_RATEBOUND_INVALID_OPTION' && /'exempt'/.test(e.message),
  )
})
