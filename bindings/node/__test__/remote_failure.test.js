'use strict'
// A remote policy that fails (issue 36 item 7), over real HTTP on
// 127.0.0.1 through rb.express() and the rb.fastify plugin, with a real
// Redis limiter (ioredis, a redis-server of its own): an error that escapes
// its check — what a configuration error found at the first call, or a
// client bug, throws — is a 503 with the configured Retry-After, never a
// 500 (before: the middleware rethrew it to the framework); onDecision is
// told 'store_error' by the failing policy, and one process warning marks
// the episode's start (with the error) and one its end. Trouble the fail
// policy covers stays a decision (here: Redis decides once it answers).
// spec/gate.json's `remote` vectors replay the rule in gate_spec.test.js.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const crypto = require('node:crypto')
const IORedis = require('ioredis')
const expressLib = require('express')
const Fastify = require('fastify')
const rb = require('..')
const { HOST, startServer, stopAll } = require('./fixtures/redis-server.js')

const clients = []
after(async () => {
  for (const c of clients) c.disconnect()
  await stopAll()
})

function get(port) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: HOST, port, path: '/', agent: false }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk) => (body += chunk))
      res.on('end', () => resolve([res.statusCode, res.headers['retry-after'], res.statusCode === 200 ? '' : body]))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end()
  })
}

async function startExpress(options) {
  const app = expressLib()
  app.use(rb.express(options))
  app.get('/', (req, res) => res.send('ok'))
  const server = app.listen(0, HOST)
  await new Promise((r) => server.once('listening', r))
  return { port: server.address().port, stop: () => new Promise((r) => server.close(r)) }
}

async function startFastify(options) {
  const app = Fastify()
  await app.register(rb.fastify, options)
  app.get('/', async () => 'ok')
  await app.listen({ port: 0, host: HOST })
  return { port: app.server.address().port, stop: () => app.close() }
}

for (const [framework, start] of [
  ['Express', startExpress],
  ['Fastify', startFastify],
]) {
  test(`a failing remote policy is a 503 with Retry-After, told once per episode: ${framework}`, async () => {
    const server = await startServer()
    const client = new IORedis({ host: HOST, port: server.port, lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 })
    client.on('error', () => {})
    clients.push(client)
    await client.connect()
    const limiter = rb.redis.TokenBucket({ client, rate: 100, burst: 100, prefix: `rf-${crypto.randomUUID()}:` })
    // While `down`, the check throws what no fail policy covers.
    const checkIn = limiter.checkIn.bind(limiter)
    let down = true
    limiter.checkIn = (scope, key, n) => {
      if (down) throw new TypeError("the store's client failed")
      return checkIn(scope, key, n)
    }
    const told = []
    const warnings = []
    const onWarning = (w) => {
      if (w.name === 'RateboundWarning') warnings.push([w.code, w.message])
    }
    process.on('warning', onWarning)
    const { port, stop } = await start({
      policies: [{ name: 'global', limiter }],
      storeErrorRetryAfter: 7,
      onDecision: (e) => told.push([e.outcome, e.policy]),
    })
    const answers = []
    try {
      for (let i = 0; i < 6; i++) {
        if (i === 3) down = false
        answers.push(await get(port))
      }
      // Warnings are emitted on the next tick.
      await new Promise((r) => setImmediate(r))
    } finally {
      process.removeListener('warning', onWarning)
      await stop()
    }
    const failed = [503, '7', 'rate limit unavailable; try again shortly\n']
    assert.deepEqual(answers, [failed, failed, failed, [200, undefined, ''], [200, undefined, ''], [200, undefined, '']])
    assert.deepEqual(told, [
      ['store_error', 'global'],
      ['store_error', 'global'],
      ['store_error', 'global'],
      ['allowed', null],
      ['allowed', null],
      ['allowed', null],
    ])
    // The allowed requests were decided by Redis: its bucket holds them.
    assert.equal((await client.keys(`rf-*`)).length > 0, true)
    assert.deepEqual(warnings, [
      [
        'RATEBOUND_STORE_FAILING',
        'ratebound: the store of remote policy "global" failed; its requests are answered 503 with ' +
          "Retry-After: 7 until it answers again: TypeError: the store's client failed",
      ],
      ['RATEBOUND_STORE_ANSWERS', 'ratebound: the store of remote policy "global" answers again, after 3 failed checks'],
    ])
  })
}
