'use strict'
// rb.Gate's one call per request (the core's Gate::admit): the hooks in the
// core's order, the typed answer, the concurrency place as a guard, a hook
// that throws, remote policies through an Ask, and a streaming body that
// holds its place until it ends.
const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const rb = require('..')

// Hooks that log what the sequence asked, in order.
function logged(log, answers = {}) {
  return {
    exempt: (req) => (log.push(['exempt', req.id]), answers.exempt ?? false),
    critical: (req) => (log.push(['critical', req.id]), answers.critical ?? false),
    key: (req) => (log.push(['key', req.id]), answers.key),
    report: (req, outcome, by) => log.push(['report', req.id, outcome, by]),
  }
}

test('admit: the hooks in the core order, the answer typed, the place a guard', () => {
  const clock = new rb.ManualClock()
  const log = []
  const answers = { key: 'alice' }
  const gate = new rb.Gate({ rate: '1/s', burst: 2, concurrencyLimit: 1, clock }, logged(log, answers))
  const first = gate.admit({ id: 1 }, '192.0.2.1')
  assert.equal(first.status, 0)
  assert.equal(first.outcome, 'allowed')
  assert.deepEqual(first.headers, ['ratelimit-policy', '"default";q=2;w=2', 'ratelimit', '"default";r=1;t=1'])
  assert.equal(first.contentType, undefined)
  assert.equal(first.place.held, true)
  assert.deepEqual(log.splice(0), [['exempt', 1], ['key', 1], ['report', 1, 'allowed', null]])

  // The one place is held: shed before the key is asked, no token spent.
  const shed = gate.admit({ id: 2 }, '192.0.2.1')
  assert.equal(shed.status, 503)
  assert.equal(shed.outcome, 'shed')
  assert.deepEqual(shed.headers, ['retry-after', '1'])
  assert.equal(shed.place, null)
  assert.deepEqual(log.splice(0), [['exempt', 2], ['critical', 2], ['report', 2, 'shed', null]])

  // Critical: on without a place (alice's second token).
  answers.critical = true
  const critical = gate.admit({ id: 3 })
  assert.equal(critical.status, 0)
  assert.equal(critical.place, null)
  assert.deepEqual(log.splice(0), [['exempt', 3], ['critical', 3], ['key', 3], ['report', 3, 'allowed', null]])
  answers.critical = false

  // Released (twice: idempotent), the place is free; alice is out of tokens.
  first.place.release()
  first.place.close()
  assert.equal(first.place.held, false)
  const refused = gate.admit({ id: 4 })
  assert.equal(refused.status, 429)
  assert.equal(refused.outcome, 'refused')
  assert.equal(refused.refusedBy, 'default')
  assert.equal(refused.contentType, 'text/plain; charset=utf-8')
  assert.equal(refused.body, 'rate limit exceeded; retry in 1 s\n')
  assert.equal(refused.place, null, 'a refusal gives its place back at once')
  log.length = 0

  // Exempt: nothing more is asked, nothing reported, no place taken.
  answers.exempt = true
  assert.equal(gate.admit({ id: 5 }), null)
  assert.deepEqual(log.splice(0), [['exempt', 5]])
  answers.exempt = false
  answers.key = 'bob'
  const bob = gate.admit({ id: 6 })
  assert.equal(bob.status, 0)
  assert.ok(bob.place.held)
  bob.place.release()
})

test('admit: a hook that throws ends the sequence, its error thrown, the place given back', () => {
  const boom = new Error('boom')
  const gate = new rb.Gate(
    { rate: 100, concurrencyLimit: 1 },
    {
      exempt: (req) => {
        if (req.exempt) throw boom
        return false
      },
      report: (req) => {
        if (req.report) throw boom
      },
      key: (req) => {
        if (req.keyThrows) throw boom
        return req.key
      },
    },
  )
  assert.throws(() => gate.admit({ exempt: true }), boom)
  // A key hook that throws, or gives what is no key, charges no one (not
  // even the request's IP): the sequence stops.
  assert.throws(() => gate.admit({ keyThrows: true }), boom)
  assert.throws(() => gate.admit({ key: 2.5 }), { name: 'RangeError' })
  assert.equal(gate.size, 0)
  assert.throws(() => gate.admit({ report: true, key: 'k' }), boom)
  assert.throws(() => gate.admit({ key: {} }), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' })
  assert.throws(() => gate.admit({ key: 1.5 }), { name: 'RangeError', code: 'ERR_RATEBOUND_INVALID_KEY' })
  // Every place came back: one admitted request holds the only one.
  const v = gate.admit({ key: 'k' })
  assert.ok(v.place.held)
  assert.equal(gate.admit({ key: 'k' }).status, 503)
  v.place.release()

  assert.throws(() => new rb.Gate({ rate: 1 }, { exempt: 'yes' }), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', message: /exempt/ })
  assert.throws(() => new rb.Gate({ rate: 1 }, { exmept: () => true }), { code: 'ERR_RATEBOUND_INVALID_OPTION', message: /exmept/ })
})

test('new Gate: the options by name, through the core parser', () => {
  const gate = new rb.Gate({ rate: '5/s', key: 'X-API-Key', missingKey: 401 })
  assert.equal(gate.policy, '"default";q=5;w=1')
  assert.deepEqual(gate.headerNames, ['x-api-key'])
  assert.equal(gate.admit({}, '192.0.2.1', ['x-api-key', 'alice']).status, 0)
  assert.equal(gate.admit({}, '192.0.2.1').status, 401)
  for (const ip of ['ip', 'IP', 'Ip']) assert.deepEqual(new rb.Gate({ rate: 1, key: ip }).headerNames, [])
  const invalid = { name: 'TypeError', code: 'ERR_RATEBOUND_INVALID_OPTION' }
  // Both forms of policy; the key given twice; a misspelt option or field.
  assert.throws(() => new rb.Gate({ rate: 1, policies: [{ rate: 2 }] }), { ...invalid, message: /either rate/ })
  assert.throws(() => new rb.Gate({ rate: 1, key: { header: 'a' }, keyHeader: 'b' }), { ...invalid, message: /give the key once/ })
  assert.throws(() => new rb.Gate({ rate: 1, keyHeader: 'a' }, { key: () => 'k' }), { ...invalid, message: /give the key once/ })
  assert.throws(() => new rb.Gate({ rate: 1, skipp: () => true }), { ...invalid, message: /"skipp": is not a middleware option/ })
  assert.throws(() => new rb.Gate({ policies: [{ rate: 1, brust: 3 }] }), { ...invalid, message: /brust/ })
  assert.throws(() => new rb.Gate({ rate: 1, trustedProxies: true }), { ...invalid, message: /trustedProxies/ })
  assert.throws(() => new rb.Gate({}), { ...invalid, message: /give rate/ })
  // Only a cap: no policy needed.
  assert.equal(new rb.Gate({ concurrencyLimit: 2 }).capped, true)
})

test('remote policies: an Ask with the identity, then finish; its place a guard', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rb-gate-'))
  try {
    const shared = new rb.SharedKeyedLimiter({ path: path.join(dir, 't'), rate: '1/h', burst: 1, maxKeys: 100 })
    const log = []
    const gate = new rb.Gate(
      { policies: [{ name: 'local', rate: 100 }], remote: [{ shared }], keyHeader: 'x-api-key', concurrencyLimit: 1 },
      { report: (req, outcome, by) => log.push([req, outcome, by]) },
    )
    assert.deepEqual(gate.remoteNames, ['host'])
    assert.deepEqual(gate.policyNames, ['local', 'host'])
    const ask = gate.admit('r1', '192.0.2.1', ['X-API-Key', 'alice'])
    assert.ok(ask instanceof rb.Ask)
    assert.equal(ask.identity.toString(), 'key:alice')
    assert.deepEqual(log, [], 'not reported before it is decided')
    // Its place is held while it waits.
    assert.equal(gate.admit('r2', '192.0.2.1', ['X-API-Key', 'bob']).status, 503)
    const v = gate.finish(ask, [shared.check(ask.identity)], 'r1')
    assert.equal(v.status, 0)
    assert.match(v.headers[3], /"host";r=0/)
    assert.ok(v.place.held)
    assert.equal(ask.closed, true)
    assert.throws(() => gate.finish(ask, [null], 'r1'), { code: 'ERR_RATEBOUND_ASK_CLOSED' })
    v.place.release()

    const again = gate.admit('r3', '192.0.2.1', ['X-API-Key', 'alice'])
    const refused = gate.finish(again, [shared.check(again.identity)], 'r3')
    assert.equal(refused.status, 429)
    assert.equal(refused.refusedBy, 'host')
    assert.equal(refused.place, null)
    // A full table answers 503; a bad number is a typed error naming it.
    const full = gate.admit('r4', '192.0.2.1', ['X-API-Key', 'carol'])
    assert.equal(gate.finish(full, [null], 'r4').status, 503)
    const bad = gate.admit('r5', '192.0.2.1', ['X-API-Key', 'dave'])
    const nan = { allowed: true, limit: 1, remaining: 0, retryAfter: NaN, resetAfter: 0 }
    assert.throws(() => gate.finish(bad, [nan], 'r5'), { name: 'RangeError', code: 'ERR_RATEBOUND_INVALID_NUMBER', message: /remote retryAfter NaN/ })
    assert.throws(() => gate.finish(bad, [{ ...nan, retryAfter: 0, limit: -1 }], 'r5'), { message: /remote limit -1/ })
    assert.throws(() => gate.finish(bad, [], 'r5'), { name: 'RangeError', message: /0 answers for 1 remote policies/ })
    bad.close()
    assert.equal(bad.closed, true)
    assert.deepEqual(log, [
      ['r2', 'shed', null],
      ['r1', 'allowed', null],
      ['r3', 'refused', 'host'],
      ['r4', 'rejected', null],
    ])
    // Every place came back; another gate's Ask is refused.
    const last = gate.admit('r6', '192.0.2.1', ['X-API-Key', 'erin'])
    const other = new rb.Gate({ remote: [{ shared }], keyHeader: 'x-api-key' })
    assert.throws(() => other.finish(last, [null]), { code: 'ERR_INVALID_ARG_VALUE' })
    last.close()
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

test('a streaming body holds its place until it ends (Express and Fastify)', async () => {
  const express = require('express')
  const Fastify = require('fastify')
  async function run(start) {
    let finish
    const ended = new Promise((r) => (finish = r))
    const { port, stop } = await start(ended)
    try {
      const streaming = await fetch(`http://127.0.0.1:${port}/stream`)
      assert.equal(streaming.status, 200)
      const reader = streaming.body.getReader()
      assert.equal(new TextDecoder().decode((await reader.read()).value), 'first;')
      // The body is in flight: the one place is taken.
      const shed = await fetch(`http://127.0.0.1:${port}/stream`)
      assert.equal(shed.status, 503)
      assert.equal(shed.headers.get('retry-after'), '1')
      await shed.text()
      finish()
      while (!(await reader.read()).done);
      // The place comes back when the response closes.
      let status = 0
      for (let i = 0; i < 100 && status !== 200; i++) {
        await new Promise((r) => setTimeout(r, 5))
        const again = await fetch(`http://127.0.0.1:${port}/plain`)
        status = again.status
        await again.text()
      }
      assert.equal(status, 200)
    } finally {
      await stop()
    }
  }
  const options = { rate: 1000, burst: 1000, concurrencyLimit: 1 }
  await run(async (ended) => {
    const app = express()
    app.use(rb.express(options))
    app.get('/stream', async (req, res) => {
      res.write('first;')
      await ended
      res.end('last')
    })
    app.get('/plain', (req, res) => res.send('ok'))
    const server = app.listen(0, '127.0.0.1')
    await new Promise((r) => server.once('listening', r))
    return { port: server.address().port, stop: () => new Promise((r) => server.close(r)) }
  })
  await run(async (ended) => {
    const { Readable } = require('node:stream')
    const app = Fastify()
    await app.register(rb.fastify, options)
    app.get('/stream', (request, reply) => {
      reply.send(
        Readable.from(
          (async function* () {
            yield 'first;'
            await ended
            yield 'last'
          })(),
        ),
      )
    })
    app.get('/plain', async () => 'ok')
    await app.listen({ port: 0, host: '127.0.0.1' })
    return { port: app.server.address().port, stop: () => app.close() }
  })
})
