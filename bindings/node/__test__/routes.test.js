// Per-route limits over real HTTP on 127.0.0.1, the way Express and Fastify
// users write them: /login 5 per minute per IP, /api per API key, /health
// unlimited, and one limit shared by two routes.
const { test } = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const rb = require('..')

function request(port, method, path, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, headers, agent: false }, (res) => {
      res.resume()
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers }))
    })
    req.on('error', reject)
    req.end()
  })
}

async function checkRoutes(port, clock) {
  for (let i = 0; i < 5; i++) {
    const ok = await request(port, 'POST', '/login')
    assert.equal(ok.status, 200)
    assert.equal(ok.headers['ratelimit-policy'], '"default";q=5;w=60')
    assert.equal(ok.headers.ratelimit, `"default";r=${4 - i};t=${12 * (i + 1)}`)
  }
  const sixth = await request(port, 'POST', '/login')
  assert.equal(sixth.status, 429)
  assert.equal(sixth.headers['retry-after'], '12', 'one token every 12 s, rounded up')
  for (let i = 0; i < 3; i++) assert.equal((await request(port, 'GET', '/api', { 'x-api-key': 'alice' })).status, 200)
  assert.equal((await request(port, 'GET', '/api', { 'x-api-key': 'alice' })).status, 429)
  assert.equal((await request(port, 'GET', '/api', { 'x-api-key': 'bob' })).status, 200)
  for (let i = 0; i < 20; i++) {
    const h = await request(port, 'GET', '/health')
    assert.equal(h.status, 200)
    assert.equal(h.headers.ratelimit, undefined)
  }
  const shared = []
  for (const p of ['/a', '/b', '/a', '/b']) shared.push((await request(port, 'GET', p)).status)
  assert.deepEqual(shared, [200, 200, 429, 429])
  clock.advance(12)
  assert.equal((await request(port, 'POST', '/login')).status, 200)
}

test('Express: a limit per route, and one shared by two routes', async () => {
  const express = require('express')
  const clock = new rb.ManualClock()
  const app = express()
  const shared = rb.express({ rate: 1, burst: 2, clock })
  app.post('/login', rb.express({ rate: '5/minute', clock }), (req, res) => res.send('ok'))
  app.get('/api', rb.express({ rate: 3, key: { header: 'x-api-key' }, clock }), (req, res) => res.send('ok'))
  app.get('/health', (req, res) => res.send('ok'))
  app.get('/a', shared, (req, res) => res.send('a'))
  app.get('/b', shared, (req, res) => res.send('b'))
  const server = app.listen(0, '127.0.0.1')
  await new Promise((resolve) => server.on('listening', resolve))
  try {
    await checkRoutes(server.address().port, clock)
  } finally {
    server.close()
  }
})

test('Fastify: onRequest: rb.fastify.limit(...) per route, and one shared by two routes', async () => {
  const Fastify = require('fastify')
  const clock = new rb.ManualClock()
  const f = Fastify()
  const shared = rb.fastify.limit({ rate: 1, burst: 2, clock })
  f.post('/login', { onRequest: rb.fastify.limit({ rate: '5/minute', clock }) }, async () => 'ok')
  f.get('/api', { onRequest: rb.fastify.limit({ rate: 3, key: { header: 'x-api-key' }, clock }) }, async () => 'ok')
  f.get('/health', async () => 'ok')
  f.get('/a', { onRequest: shared }, async () => 'a')
  f.get('/b', { onRequest: shared }, async () => 'b')
  await f.listen({ port: 0, host: '127.0.0.1' })
  try {
    await checkRoutes(f.server.address().port, clock)
  } finally {
    await f.close()
  }
})

test('bad configuration fails where the route is declared', () => {
  assert.throws(() => rb.express({ rate: '5/fortnight' }), { name: 'TypeError' })
  assert.throws(() => rb.fastify.limit({ rate: -1 }), RangeError)
  assert.throws(() => rb.fastify.limit({ rate: 5, concurencyLimit: 3 }), { code: 'ERR_RATEBOUND_INVALID_OPTION' })
})

test('examples/metrics.js: prom-client counters match the requests sent', async () => {
  const { makeApp } = require('../examples/metrics.js')
  const server = makeApp().listen(0, '127.0.0.1')
  await new Promise((resolve) => server.on('listening', resolve))
  try {
    const port = server.address().port
    const statuses = []
    for (let i = 0; i < 8; i++) statuses.push((await request(port, 'POST', '/login')).status)
    assert.deepEqual(statuses, [200, 200, 200, 200, 200, 429, 429, 429])
    for (let i = 0; i < 3; i++) assert.equal((await request(port, 'GET', '/api/items', { 'x-api-key': 'k' })).status, 200)
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text()
    const samples = {}
    for (const line of text.split('\n')) {
      if (line.startsWith('ratebound_requests{')) {
        const [name, value] = line.split(' ')
        samples[name] = Number(value)
      }
    }
    assert.deepEqual(samples, {
      'ratebound_requests{policy="default",route="/login",outcome="allowed"}': 5,
      'ratebound_requests{policy="default",route="/login",outcome="refused"}': 3,
      'ratebound_requests{policy="burst",route="/api/items",outcome="allowed"}': 3,
      'ratebound_requests{policy="hourly",route="/api/items",outcome="allowed"}': 3,
    })
  } finally {
    server.close()
  }
})

test('onDecision: the refusing policy, shedding, and Fastify route labels', async () => {
  const Fastify = require('fastify')
  const events = []
  const f = Fastify()
  const hook = rb.fastify.limit({
    policies: [
      { name: 'burst', rate: 100 },
      { name: 'tiny', algorithm: 'fixed_window', limit: 1, window: 60 },
    ],
    key: { header: 'x-api-key' },
    onDecision: (e) => events.push(e),
  })
  f.get('/items/:id', { onRequest: hook }, async () => 'ok')
  await f.listen({ port: 0, host: '127.0.0.1' })
  try {
    const port = f.server.address().port
    assert.equal((await request(port, 'GET', '/items/1', { 'x-api-key': 'a' })).status, 200)
    assert.equal((await request(port, 'GET', '/items/2', { 'x-api-key': 'a' })).status, 429)
  } finally {
    await f.close()
  }
  assert.deepEqual(events, [
    { outcome: 'allowed', policy: null, policies: ['burst', 'tiny'], label: '/items/:id' },
    { outcome: 'refused', policy: 'tiny', policies: ['burst', 'tiny'], label: '/items/:id' },
  ])
  // Shedding: a concurrency limit of 1 with one request inside.
  const express = require('express')
  const shed = []
  const mw = rb.express({ rate: 100, concurrencyLimit: 1, onDecision: (e) => shed.push(e), label: 'app' })
  const app = express()
  app.use(mw)
  app.get('/', (req, res) => res.send('ok'))
  const server = app.listen(0, '127.0.0.1')
  await new Promise((resolve) => server.on('listening', resolve))
  try {
    assert.ok(mw.gate.tryEnter())
    assert.equal((await request(server.address().port, 'GET', '/')).status, 503)
    mw.gate.leave()
  } finally {
    server.close()
  }
  assert.deepEqual(shed, [{ outcome: 'shed', policy: null, policies: ['default'], label: 'app' }])
  assert.throws(() => rb.express({ rate: 1, onDecision: 'yes' }), TypeError)
})
