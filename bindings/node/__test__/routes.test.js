// Per-route limits over real HTTP on 127.0.0.1, the way Express and Fastify
// users write them: /login 5 per minute per IP, /api per API key, /health
// unlimited, and one limit shared by two routes; in Fastify also as the
// routes' config.rateLimit under the plugin.
const { test } = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const rb = require('..')

function request(port, method, path, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, headers, agent: false }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk) => (body += chunk))
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }))
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

test('Fastify: config.rateLimit per route under the plugin; rateLimit: false exempts a route', async () => {
  const Fastify = require('fastify')
  const clock = new rb.ManualClock()
  const f = Fastify()
  // The app-wide limit: 2 per client, then 1 a second. /a and /b have no
  // config, so they meet it (and share it); /login's 6 requests and /health's
  // 20 would be refused by it, so its passing them shows the routes' own
  // settings replace it.
  await f.register(rb.fastify, { rate: 1, burst: 2, clock })
  f.post('/login', { config: { rateLimit: { rate: '5/minute', clock } } }, async () => 'ok')
  f.get('/api', { config: { rateLimit: { rate: 3, key: { header: 'x-api-key' }, clock } } }, async () => 'ok')
  f.get('/health', { config: { rateLimit: false } }, async () => 'ok')
  f.get('/a', async () => 'a')
  f.get('/b', async () => 'b')
  await f.listen({ port: 0, host: '127.0.0.1' })
  try {
    const port = f.server.address().port
    await checkRoutes(port, clock)
    // 12 s later the app-wide bucket is full again (2), and still shared.
    const after = []
    for (const p of ['/b', '/a', '/b']) {
      const r = await request(port, 'GET', p)
      assert.equal(r.headers['ratelimit-policy'], '"default";q=2;w=2', 'the app-wide limit')
      after.push(r.status)
    }
    assert.deepEqual(after, [200, 200, 429])
    assert.equal((await request(port, 'GET', '/health')).status, 200)
  } finally {
    await f.close()
  }
})

test('Fastify: global: false limits only configured routes, in child plugins too, a GET and its HEAD as one', async () => {
  const Fastify = require('fastify')
  const clock = new rb.ManualClock()
  const f = Fastify()
  await f.register(rb.fastify, { global: false })
  assert.equal(f.ratebound, null, 'no app-wide gate')
  f.get('/open', async () => 'ok')
  // An encapsulated child context, registered after the plugin: the
  // plugin's onRoute hook sees its routes (prefixed).
  f.register(
    async (child) => {
      child.get('/items', { config: { rateLimit: { rate: 1, burst: 2, clock } } }, async () => 'items')
    },
    { prefix: '/v1' },
  )
  await f.listen({ port: 0, host: '127.0.0.1' })
  try {
    const port = f.server.address().port
    for (let i = 0; i < 10; i++) {
      const open = await request(port, 'GET', '/open')
      assert.equal(open.status, 200)
      assert.equal(open.headers.ratelimit, undefined)
    }
    const statuses = []
    for (const m of ['GET', 'HEAD', 'GET']) statuses.push((await request(port, m, '/v1/items')).status)
    assert.deepEqual(statuses, [200, 200, 429], "Fastify's automatic HEAD route shares its GET route's limit")
    clock.advance(1)
    const again = await request(port, 'GET', '/v1/items')
    assert.equal(again.status, 200)
    assert.equal(again.body, 'items')
  } finally {
    await f.close()
  }
})

test('Fastify: a route inherits the plugin options it does not give; its policy and key come whole', async () => {
  const Fastify = require('fastify')
  const clock = new rb.ManualClock()
  const f = Fastify()
  // Defaults for every configured route: 1/s burst 2, and the client
  // address from X-Forwarded-For when the peer is this host's proxy.
  await f.register(rb.fastify, { global: false, rate: 1, burst: 2, trustedProxies: ['127.0.0.1/32'], clock })
  f.get('/inherit', { config: { rateLimit: {} } }, async () => 'ok')
  f.post('/login', { config: { rateLimit: { rate: '5/minute' } } }, async () => 'ok')
  f.get('/keyed', { config: { rateLimit: { keyHeader: 'x-api-key' } } }, async () => 'ok')
  await f.listen({ port: 0, host: '127.0.0.1' })
  try {
    const port = f.server.address().port
    const from = (ip, extra = {}) => ({ 'x-forwarded-for': ip, ...extra })
    const statuses = async (method, path, headers, n) => {
      const out = []
      for (let i = 0; i < n; i++) out.push((await request(port, method, path, headers)).status)
      return out
    }
    // The plugin's policy and trustedProxies: each forwarded client has 2.
    assert.deepEqual(await statuses('GET', '/inherit', from('10.0.0.1'), 3), [200, 200, 429])
    assert.deepEqual(await statuses('GET', '/inherit', from('10.0.0.2'), 1), [200])
    // Its own rate, without the plugin's burst of 2 (5/minute: a burst of
    // 5); still keyed by the forwarded client.
    assert.deepEqual(await statuses('POST', '/login', from('10.0.0.1'), 6), [200, 200, 200, 200, 200, 429])
    assert.deepEqual(await statuses('POST', '/login', from('10.0.0.3'), 1), [200])
    // Its own key, the plugin's policy.
    const r = await request(port, 'GET', '/keyed', { 'x-api-key': 'k' })
    assert.equal(r.headers['ratelimit-policy'], '"default";q=2;w=2')
    assert.deepEqual(await statuses('GET', '/keyed', { 'x-api-key': 'k' }, 2), [200, 429])
    assert.deepEqual(await statuses('GET', '/keyed', { 'x-api-key': 'other' }, 1), [200])
  } finally {
    await f.close()
  }
})

test('Fastify: onDecision for config routes: inherited from the plugin, their own, or none', async () => {
  const Fastify = require('fastify')
  const clock = new rb.ManualClock()
  const app = []
  const own = []
  const f = Fastify()
  await f.register(rb.fastify, { global: false, onDecision: (e) => app.push(e) })
  f.get('/inherits', { config: { rateLimit: { rate: 1, burst: 2, clock } } }, async () => 'ok')
  f.get('/own', { config: { rateLimit: { rate: 1, burst: 1, clock, label: 'own', onDecision: (e) => own.push(e) } } }, async () => 'ok')
  f.get('/quiet', { config: { rateLimit: { rate: 1, burst: 1, clock, onDecision: null } } }, async () => 'ok')
  f.get('/free', { config: { rateLimit: false } }, async () => 'ok')
  await f.listen({ port: 0, host: '127.0.0.1' })
  try {
    const port = f.server.address().port
    const statuses = []
    for (const p of ['/inherits', '/inherits', '/inherits', '/own', '/own', '/quiet', '/quiet', '/free']) {
      statuses.push((await request(port, 'GET', p)).status)
    }
    assert.deepEqual(statuses, [200, 200, 429, 200, 429, 200, 429, 200])
  } finally {
    await f.close()
  }
  const event = (outcome, label) => ({ outcome, policy: outcome === 'refused' ? 'default' : null, policies: ['default'], label })
  assert.deepEqual(app, [event('allowed', '/inherits'), event('allowed', '/inherits'), event('refused', '/inherits')])
  assert.deepEqual(own, [event('allowed', 'own'), event('refused', 'own')])
})

test('Fastify: a bad config.rateLimit or plugin option fails at ready(), not at the first request', async () => {
  const Fastify = require('fastify')
  async function ready(pluginOptions, rateLimit) {
    const f = Fastify()
    f.register(rb.fastify, pluginOptions)
    f.register(async (child) => {
      child.get('/x', { config: { rateLimit } }, async () => 'ok')
    })
    try {
      await f.ready()
    } finally {
      await f.close()
    }
  }
  const where = /^route GET \/x: config\.rateLimit/
  await assert.rejects(ready({ global: false }, { rate: 5, concurencyLimit: 3 }), {
    name: 'TypeError',
    code: 'ERR_RATEBOUND_INVALID_OPTION',
    message: /^route GET \/x: config\.rateLimit: invalid option "concurencyLimit": is not a middleware option$/,
  })
  await assert.rejects(ready({ global: false }, { rate: -1 }), { name: 'RangeError', code: 'ERR_RATEBOUND_INVALID_RATE', message: where })
  await assert.rejects(ready({ rate: 100 }, { rate: '5/fortnight' }), { name: 'TypeError', code: 'ERR_RATEBOUND_PARSE_ERROR', message: where })
  // No policy at all: the core's rule names both forms.
  await assert.rejects(ready({ global: false }, { key: 'ip' }), { code: 'ERR_RATEBOUND_INVALID_OPTION', message: /^route GET \/x: config\.rateLimit: .*give rate/ })
  await assert.rejects(ready({ global: false }, true), { code: 'ERR_INVALID_ARG_TYPE', message: where })
  // With global: false the plugin's options are the routes' defaults,
  // checked at registration all the same.
  await assert.rejects(ready({ global: false, rate: -1 }, false), { code: 'ERR_RATEBOUND_INVALID_RATE' })
  await assert.rejects(ready({ global: false, concurencyLimit: 3 }, false), {
    code: 'ERR_RATEBOUND_INVALID_OPTION',
    message: /"concurencyLimit"/,
  })
  await assert.rejects(ready({ global: 'no', rate: 5 }, false), { code: 'ERR_INVALID_ARG_TYPE', message: /global/ })
  await assert.rejects(ready({}, false), { code: 'ERR_RATEBOUND_INVALID_OPTION', message: /give rate/ })
  await ready({ global: false }, { rate: 5 })
  // A route's key replaces the plugin's whole (both kept would be two keys).
  await ready({ global: false, rate: 5, keyHeader: 'x-a' }, { key: { header: 'x-b' } })
  // A route declared at the root after the plugin: its declaration throws.
  const f = Fastify()
  await f.register(rb.fastify, { global: false })
  assert.throws(() => f.get('/y', { config: { rateLimit: { rate: 0 } } }, async () => 'ok'), {
    code: 'ERR_RATEBOUND_INVALID_RATE',
    message: /^route GET \/y: /,
  })
  await f.close()
})

test('Fastify: a config.rateLimit route declared before the plugin fails loudly', async () => {
  const Fastify = require('fastify')
  const f = Fastify()
  // Not awaited: the plugin loads after the routes below are declared, so
  // its onRoute hook never sees /early.
  f.register(rb.fastify, { rate: 100 })
  f.get('/early', { config: { rateLimit: { rate: 1 } } }, async () => 'ok')
  f.get('/plain', async () => 'ok')
  await f.listen({ port: 0, host: '127.0.0.1' })
  try {
    const port = f.server.address().port
    const early = await request(port, 'GET', '/early')
    assert.equal(early.status, 500)
    assert.equal(JSON.parse(early.body).code, 'ERR_RATEBOUND_ROUTE_NOT_SEEN')
    const plain = await request(port, 'GET', '/plain')
    assert.equal(plain.status, 200)
    assert.equal(plain.headers['ratelimit-policy'], '"default";q=100;w=1', 'the app-wide limit still covers it')
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
  assert.deepEqual(shed, [{ outcome: 'shed', policy: null, policies: ['default'], label: 'app', priority: 'normal' }])
  assert.throws(() => rb.express({ rate: 1, onDecision: 'yes' }), TypeError)
})
