'use strict'
// Defects a first user hits (issue 37 §4), each reproduced on main before
// its fix, through real Express and Fastify servers on 127.0.0.1: a
// framework that trusts every proxy hands each client its own key (a
// rotated X-Forwarded-For escaped a limit of 1), and a route's limit under
// the site-wide one overwrote the site-wide quota fields. The Retry-After
// cap: spec/outbound.json (outbound_spec.test.js); priorities answering
// nothing or throwing: priority.test.js. Arguments the local limiters
// take and Redis refused: n = 0, a pause of 0; a pause beyond a day,
// refused everywhere.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const expressLib = require('express')
const Fastify = require('fastify')
const IORedis = require('ioredis')
const rb = require('..')
const { HOST, startServer, stopAll } = require('./fixtures/redis-server.js')

after(stopAll)

async function get(port, path, headers = {}) {
  const r = await fetch(`http://127.0.0.1:${port}${path}`, { headers })
  return { status: r.status, headers: r.headers, body: await r.text() }
}

// An Express app with `trust proxy` set to `trust`, `limit` in front of /,
// and an error handler answering the error's code; its port and stop().
async function express(trust, limit) {
  const app = expressLib()
  if (trust !== undefined) app.set('trust proxy', trust)
  app.use(limit)
  app.get('/', (req, res) => res.send('hello'))
  app.use((err, req, res, next) => res.status(500).json({ code: err.code, message: err.message }))
  const server = app.listen(0, '127.0.0.1')
  await new Promise((r) => server.once('listening', r))
  return { port: server.address().port, stop: () => new Promise((r) => server.close(r)) }
}

async function fastify(trustProxy, options) {
  const app = Fastify(trustProxy === undefined ? {} : { trustProxy })
  await app.register(rb.fastify, options)
  app.get('/', async () => 'hello')
  app.setErrorHandler((err, request, reply) => reply.code(500).send({ code: err.code, message: err.message }))
  await app.listen({ port: 0, host: '127.0.0.1' })
  return { port: app.server.address().port, stop: () => app.close() }
}

// Two requests from one client, each naming another first
// X-Forwarded-For entry: their statuses.
async function rotating(port) {
  const out = []
  for (const forwarded of ['192.0.2.1', '192.0.2.2']) out.push((await get(port, '/', { 'x-forwarded-for': forwarded })).status)
  return out
}

const ONE = { rate: '1/minute', burst: 1 }

// The framework's trust setting never picks the key: without the
// middleware's own trustedProxies the key is the socket's peer (a rotated
// X-Forwarded-For escapes nothing, whatever Express trusts); with them the
// core reads the header from those proxies only. Before (issue 38), the
// key was the framework's req.ip: a trusted loopback hop let each
// client name its own key.
test("Express: the key is the socket's peer whatever trust proxy says; trustedProxies make the header count", async () => {
  for (const trust of [undefined, false, true, 'loopback', 1, 16]) {
    const { port, stop } = await express(trust, rb.express(ONE))
    try {
      assert.deepEqual(await rotating(port), [200, 429], String(trust))
    } finally {
      await stop()
    }
  }
  const own = await express(true, rb.express({ ...ONE, trustedProxies: ['127.0.0.0/8', '::1/128'] }))
  try {
    assert.deepEqual(await rotating(own.port), [200, 200])
  } finally {
    await own.stop()
  }
})

test("Fastify: the key is the socket's peer whatever trustProxy says; trustedProxies make the header count", async () => {
  for (const trustProxy of [undefined, true, '127.0.0.1']) {
    const app = await fastify(trustProxy, ONE)
    try {
      assert.deepEqual(await rotating(app.port), [200, 429], String(trustProxy))
    } finally {
      await app.stop()
    }
  }
  const own = await fastify(true, { ...ONE, trustedProxies: ['127.0.0.0/8', '::1/128'] })
  try {
    assert.deepEqual(await rotating(own.port), [200, 200])
  } finally {
    await own.stop()
  }
})

// The site-wide limit (100/minute, 'site') and a route's (5/minute,
// 'route') both answer: both policies are listed, as the Python front
// doors list them.
function bothListed(r) {
  const policy = r.headers.get('ratelimit-policy')
  const fields = r.headers.get('ratelimit')
  assert.match(policy, /"site";q=100;w=60/)
  assert.match(policy, /"route";q=5;w=60/)
  assert.match(fields, /"site";r=99;t=\d+/)
  assert.match(fields, /"route";r=4;t=\d+/)
}

test('Express: a route limit under the site-wide one lists both policies in RateLimit and RateLimit-Policy', async () => {
  const app = expressLib()
  app.use(rb.express({ policies: [{ name: 'site', rate: '100/minute' }] }))
  app.get('/limited', rb.express({ policies: [{ name: 'route', rate: '5/minute' }] }), (req, res) => res.send('ok'))
  const server = app.listen(0, '127.0.0.1')
  await new Promise((r) => server.once('listening', r))
  try {
    const r = await get(server.address().port, '/limited')
    assert.equal(r.status, 200)
    bothListed(r)
  } finally {
    await new Promise((r) => server.close(r))
  }
})

test('Fastify: a route limit under the site-wide one lists both policies in RateLimit and RateLimit-Policy', async () => {
  const app = Fastify()
  await app.register(rb.fastify, { policies: [{ name: 'site', rate: '100/minute' }] })
  app.get('/limited', { onRequest: rb.fastify.limit({ policies: [{ name: 'route', rate: '5/minute' }] }) }, async () => 'ok')
  await app.listen({ port: 0, host: '127.0.0.1' })
  try {
    const r = await get(app.server.address().port, '/limited')
    assert.equal(r.status, 200)
    bothListed(r)
  } finally {
    await app.close()
  }
})

test('Redis takes n = 0 and a pause of 0 as the local limiters do; a pause beyond a day is refused everywhere, the value named', async () => {
  const server = await startServer()
  const client = new IORedis({ host: HOST, port: server.port, lazyConnect: true })
  await client.connect()
  try {
    const key = `first-use-${process.pid}-${Date.now()}`
    const shared = new rb.redis.TokenBucket({ client, rate: 10, burst: 2, onError: 'closed', timeout: 2 })
    const local = new rb.TokenBucket({ rate: 10, burst: 2 })
    await shared.acquire(key, 0, { timeout: 0 })
    await shared.pause(key, 0)
    await local.acquire(0, { timeout: 0 })
    local.pause(0)
    // Nothing was taken: both tokens are there.
    assert.equal(await shared.tryAcquire(key, 2), true)
    assert.equal(local.tryAcquire(2), true)
    const tooLong = { code: 'ERR_RATEBOUND_INVALID_NUMBER', message: /invalid seconds 1000000000: a pause is at most 86400 s/ }
    await assert.rejects(async () => shared.pause(key, 1e9), tooLong)
    assert.throws(() => local.pause(1e9), tooLong)
    assert.throws(() => new rb.KeyedLimiter({ rate: 10, burst: 2 }).pause('k', 1e9), tooLong)
    await shared.pause(key, 86400)
    local.pause(86400)
  } finally {
    client.disconnect()
  }
})

test('a number argument of the wrong kind is the documented TypeError with an ERR_RATEBOUND_ code, naming the value', async () => {
  const wrong = (name, shown) => ({ name: 'TypeError', code: 'ERR_RATEBOUND_INVALID_NUMBER', message: `invalid ${name} ${shown}: must be a number` })
  const local = new rb.TokenBucket({ rate: 1, burst: 2 })
  const keyed = new rb.KeyedLimiter({ rate: 1, burst: 2 })
  await assert.rejects(local.acquire('1'), wrong('n', '"1"'))
  await assert.rejects(local.acquire(1, { timeout: '1' }), wrong('timeout', '"1"'))
  await assert.rejects(keyed.acquire('k', '1'), wrong('n', '"1"'))
  assert.throws(() => local.pause('1'), wrong('seconds', '"1"'))
  assert.throws(() => local.check(true), wrong('n', 'true'))
  assert.throws(() => local.reserve('1'), wrong('n', '"1"'))
  assert.throws(() => keyed.pause('k', '1'), wrong('seconds', '"1"'))
  assert.throws(() => keyed.check('k', '1'), wrong('n', '"1"'))
  // Nothing was taken by the refused calls.
  assert.equal(local.tryAcquire(), true)
  assert.equal(local.tryAcquire(), true)
})

test('tryAcquire(n) takes n tokens, as check(n) and Python try_acquire(n=…) do, on every local limiter', () => {
  const os = require('node:os')
  const fs = require('node:fs')
  const path = require('node:path')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rb-try-'))
  try {
    const clock = new rb.ManualClock()
    const singles = [
      new rb.TokenBucket({ rate: '1/minute', burst: 3, clock }),
      new rb.FixedWindow({ limit: 3, window: 60, clock }),
      new rb.SlidingWindow({ limit: 3, window: 60, clock }),
      new rb.SlidingLog({ limit: 3, window: 60, clock }),
      new rb.SharedTokenBucket({ path: path.join(dir, 'one.limit'), rate: '1/minute', burst: 3 }),
    ]
    for (const l of singles) {
      const name = l.constructor.name
      assert.equal(l.tryAcquire(2), true, name)
      // Two taken: one is left, so two more are refused and one is not.
      assert.equal(l.tryAcquire(2), false, name)
      assert.equal(l.tryAcquire(), true, name)
      assert.equal(l.tryAcquire(), false, name)
      assert.throws(() => l.tryAcquire('2'), { name: 'TypeError', code: 'ERR_RATEBOUND_INVALID_NUMBER' }, name)
    }
    const keyed = [
      new rb.KeyedLimiter({ rate: '1/minute', burst: 3, maxKeys: 10, clock }),
      new rb.SharedKeyedLimiter({ path: path.join(dir, 'keys.limit'), rate: '1/minute', burst: 3, maxKeys: 10 }),
    ]
    for (const l of keyed) {
      const name = l.constructor.name
      assert.equal(l.tryAcquire('k', 2), true, name)
      assert.equal(l.tryAcquire('k', 2), false, name)
      assert.equal(l.tryAcquire('k'), true, name)
      assert.equal(l.tryAcquire('k'), false, name)
      assert.throws(() => l.tryAcquire('k', '2'), { name: 'TypeError', code: 'ERR_RATEBOUND_INVALID_NUMBER' }, name)
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
})
