'use strict'
// Replays spec/gate.json — the whole middleware decision, the vectors the
// Rust core, the tower layer and the Python middleware replay — over real
// HTTP on 127.0.0.1, through rb.express() and the rb.fastify plugin. Each
// request goes out on its own connection with its header lines in order
// (repeated lines kept); the server makes the vector's `peer` the socket's
// remote address before the framework sees the request.
const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const http = require('node:http')
const path = require('node:path')
const expressLib = require('express')
const Fastify = require('fastify')
const rb = require('..')

const SPEC = path.join(__dirname, '..', '..', '..', 'spec', 'gate.json')
const { vectors } = JSON.parse(fs.readFileSync(SPEC, 'utf8'))
const RULES = JSON.parse(fs.readFileSync(path.join(path.dirname(SPEC), 'gate_rules.json'), 'utf8'))

// The test-only header carrying the peer the server is to see.
const PEER = 'x-test-peer'

// Before the framework: the socket's remote address becomes the vector's
// peer (each request has its own connection, so no other request sees it).
function withPeer(req) {
  const peer = req.headers[PEER]
  if (typeof peer === 'string') {
    Object.defineProperty(req.socket, 'remoteAddress', { value: peer, configurable: true })
  }
}

// The first line of `name` in a request's raw header lines, or undefined.
function firstLine(rawHeaders, name) {
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (rawHeaders[i].toLowerCase() === name) return rawHeaders[i + 1]
  }
  return undefined
}

const camel = (name) => name.replace(/_([a-z])/g, (_, c) => c.toUpperCase())

// The fields a policy of spec/gate.json may have. The middleware throws on
// an option name it does not know, but reads only the policy fields it
// knows: a misspelt one would replay another policy than the file says.
const POLICY_FIELDS = new Set(['name', 'algorithm', 'rate', 'burst', 'limit', 'window'])

// What a vector's failing remote policy's check throws: an Error no fail
// policy covers (`fails: "error"`), or a full table's
// ERR_RATEBOUND_TOO_MANY_KEYS.
function failure(fails) {
  if (fails === 'too_many_keys') {
    const e = new Error('the table is full')
    e.code = 'ERR_RATEBOUND_TOO_MANY_KEYS'
    return e
  }
  if (fails === 'store_misconfigured') {
    const e = new Error('authentication failed: a wrong password or user')
    e.code = 'ERR_RATEBOUND_STORE_MISCONFIGURED'
    return e
  }
  if (fails !== 'error') throw new Error(`unknown fails ${JSON.stringify(fails)}`)
  return new TypeError('the store failed')
}

// A vector's remote policy: a Redis limiter (of the policy's shape, over a
// client that is never called) whose check rejects with what `fails` names.
function failingRemote(p) {
  const { name, fails, ...fields } = p
  for (const f of Object.keys(fields)) {
    if (!['rate', 'burst'].includes(f)) throw new Error(`unknown remote field ${f}`)
  }
  const never = () => Promise.reject(new Error('not called'))
  const client = { evalSha: never, eval: never, sendCommand: never, publish: never }
  const limiter = rb.redis.TokenBucket({ client, ...fields })
  limiter.checkIn = () => Promise.reject(failure(fails))
  return { name, limiter }
}

// The vector's options as the middleware takes them: camelCase names;
// `key: "given"` is a key function returning the x-given header; the
// outcomes onDecision is told go to `told`.
function middlewareOptions(options, clock, rawOf, told) {
  const out = { clock, onDecision: (e) => told.push(e.outcome) }
  for (const [name, value] of Object.entries(options)) {
    if (name === 'policies') {
      for (const p of value) {
        const unknown = Object.keys(p).filter((f) => !POLICY_FIELDS.has(f))
        if (unknown.length > 0) throw new Error(`unknown policy field ${unknown.join(', ')}`)
      }
      out.policies = [...(out.policies ?? []), ...value]
    } else if (name === 'remote') {
      out.policies = [...(out.policies ?? []), ...value.map(failingRemote)]
    } else if (name === 'key') {
      if (value !== 'given') throw new Error(`unknown key source ${JSON.stringify(value)}`)
      out.key = (req) => firstLine(rawOf(req), 'x-given')
    } else {
      out[camel(name)] = value
    }
  }
  return out
}

// How long one request may take before it fails the vector: a liveness
// bound (a server that never answers fails here instead of hanging the run).
const REQUEST_TIMEOUT_MS = 10_000

// One GET / on a fresh connection with exactly these header lines (after
// Host and the peer), in this order.
function send(port, peer, lines) {
  const headers = ['Host', `127.0.0.1:${port}`, PEER, peer]
  for (const [name, value] of lines) headers.push(name, value)
  return new Promise((resolve, reject) => {
    const signal = AbortSignal.timeout(REQUEST_TIMEOUT_MS)
    const req = http.request({ host: '127.0.0.1', port, path: '/', method: 'GET', agent: false, headers, signal }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk) => (body += chunk))
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end()
  })
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// Takes `n` concurrency places; a place a finished response has not given
// back yet (its 'close' may trail the client's end) is waited for briefly.
async function occupy(gate, n) {
  let taken = 0
  for (let tries = 0; taken < n && tries < 400; tries++) {
    if (gate.tryEnter()) taken++
    else await sleep(5)
  }
  return taken
}

const show = (v) => (v === undefined ? 'absent' : JSON.stringify(v))

async function replay(vector, start, failures) {
  const clock = new rb.ManualClock()
  const told = []
  const { port, gate, stop } = await start(vector.options, clock, told)
  try {
    for (const [i, r] of vector.requests.entries()) {
      const where = `${vector.id} step ${i}`
      if (r.at_ns !== undefined) clock.setNanos(r.at_ns)
      const occupied = r.occupied ?? 0
      const taken = await occupy(gate, occupied)
      let got
      try {
        if (taken !== occupied) failures.push(`${where}: occupied = ${taken}, want ${occupied}`)
        got = await send(port, r.peer, r.headers ?? [])
      } finally {
        for (let j = 0; j < taken; j++) gate.leave()
      }
      const want = r.expect
      if (got.status !== want.status) failures.push(`${where}: status = ${got.status}, want ${want.status}`)
      for (const [name, value] of Object.entries(want.headers ?? {})) {
        const have = got.headers[name.toLowerCase()]
        const expected = value === null ? undefined : value
        if (have !== expected) failures.push(`${where}: header ${name.toLowerCase()} = ${show(have)}, want ${show(expected)}`)
      }
      if (want.body !== undefined && got.body !== want.body) {
        failures.push(`${where}: body = ${show(got.body)}, want ${show(want.body)}`)
      }
      const outcome = told.at(-1)
      if (want.outcome !== undefined && outcome !== want.outcome) {
        failures.push(`${where}: outcome = ${show(outcome)}, want ${show(want.outcome)}`)
      }
    }
  } finally {
    await stop()
  }
}

async function startExpress(options, clock, told, trust) {
  const mw = rb.express(middlewareOptions(options, clock, (req) => req.rawHeaders, told))
  const app = expressLib()
  if (trust) app.set('trust proxy', true)
  app.use(mw)
  app.use((req, res) => res.status(200).send('ok'))
  const server = http.createServer((req, res) => {
    withPeer(req)
    app(req, res)
  })
  await new Promise((r) => server.listen(0, '127.0.0.1', r))
  return {
    port: server.address().port,
    gate: mw.gate,
    stop: () => new Promise((r) => server.close(r)),
  }
}

async function startFastify(options, clock, told, trust) {
  const app = Fastify({
    trustProxy: trust === true,
    serverFactory: (handler) =>
      http.createServer((req, res) => {
        withPeer(req)
        handler(req, res)
      }),
  })
  await app.register(rb.fastify, middlewareOptions(options, clock, (request) => request.raw.rawHeaders, told))
  app.get('/', (request, reply) => reply.code(200).send('ok'))
  await app.listen({ port: 0, host: '127.0.0.1' })
  return { port: app.server.address().port, gate: app.ratebound, stop: () => app.close() }
}

for (const [framework, start] of [
  ['Express', startExpress],
  ['Fastify', startFastify],
]) {
  test(`spec/gate.json over HTTP: ${framework}`, async () => {
    const failures = []
    let replayed = 0
    for (const vector of vectors) {
      await replay(vector, start, failures)
      replayed++
    }
    assert.deepEqual(failures, [])
    assert.equal(replayed, vectors.length)
    assert.ok(vectors.length >= 48, `${vectors.length} vectors`)
  })
}

// The attack: behind one trusted proxy, a client sends the same
// X-Forwarded-For (what the proxy reports) and a fresh Forwarded each time,
// hoping the middleware prefers the one it controls. Only the configured
// header (X-Forwarded-For by default) is read: one bucket, 1 admitted.
async function forgedForwarded(start) {
  const { port, stop } = await start()
  try {
    const statuses = []
    for (let i = 0; i < 5; i++) {
      const r = await send(port, '127.0.0.1', [
        ['X-Forwarded-For', '5.5.5.5'],
        ['Forwarded', `for=9.9.${i}.1`],
      ])
      statuses.push(r.status)
    }
    assert.deepEqual(statuses, [200, 429, 429, 429, 429])
  } finally {
    await stop()
  }
}

const attackOptions = { rate: 1, burst: 1, trustedProxies: 1 }

test('a forged Forwarded header does not buy fresh buckets: Express', async () => {
  await forgedForwarded(async () => {
    const app = expressLib()
    app.use(rb.express(attackOptions))
    app.use((req, res) => res.send('ok'))
    const server = app.listen(0, '127.0.0.1')
    await new Promise((r) => server.once('listening', r))
    return { port: server.address().port, stop: () => new Promise((r) => server.close(r)) }
  })
})

test('a forged Forwarded header does not buy fresh buckets: Fastify', async () => {
  await forgedForwarded(async () => {
    const app = Fastify()
    await app.register(rb.fastify, attackOptions)
    app.get('/', async () => 'ok')
    await app.listen({ port: 0, host: '127.0.0.1' })
    return { port: app.server.address().port, stop: () => app.close() }
  })
})

// spec/gate_rules.json's `merge` vectors: a route's own limit under the
// app-wide middleware; the response carries both limits' fields by the
// core's rule (before: Express and Fastify kept the route's legacy fields
// whichever limit was tighter).
async function startMergeExpress({ site, route }, clock, told) {
  const app = expressLib()
  const mw = rb.express(middlewareOptions(site, clock, (req) => req.rawHeaders, told))
  app.use(mw)
  app.get('/', rb.express(middlewareOptions(route, clock, (req) => req.rawHeaders, told)), (req, res) => res.send('ok'))
  const server = http.createServer((req, res) => {
    withPeer(req)
    app(req, res)
  })
  await new Promise((r) => server.listen(0, '127.0.0.1', r))
  return { port: server.address().port, gate: mw.gate, stop: () => new Promise((r) => server.close(r)) }
}

async function startMergeFastify({ site, route }, clock, told) {
  const app = Fastify({
    serverFactory: (handler) =>
      http.createServer((req, res) => {
        withPeer(req)
        handler(req, res)
      }),
  })
  const rawOf = (request) => request.raw.rawHeaders
  await app.register(rb.fastify, middlewareOptions(site, clock, rawOf, told))
  const onRequest = rb.fastify.limit(middlewareOptions(route, clock, rawOf, told))
  app.get('/', { onRequest }, (request, reply) => reply.send('ok'))
  await app.listen({ port: 0, host: '127.0.0.1' })
  return { port: app.server.address().port, gate: app.ratebound, stop: () => app.close() }
}

for (const [framework, start] of [
  ['Express', startMergeExpress],
  ['Fastify', startMergeFastify],
]) {
  test(`spec/gate_rules.json merge vectors over HTTP: ${framework}`, async () => {
    const failures = []
    for (const v of RULES.merge) {
      await replay({ id: v.id, options: { site: v.site, route: v.route }, requests: v.requests }, start, failures)
    }
    assert.deepEqual(failures, [])
    assert.ok(RULES.merge.length >= 4)
  })
}

// spec/gate_rules.json's `client_address` vectors, with the framework told
// to trust every proxy: the key is still the socket's peer unless the
// middleware's own trustedProxies say otherwise (before: req.ip, which
// such a framework takes from the client's X-Forwarded-For).
for (const [framework, start] of [
  ['Express', startExpress],
  ['Fastify', startFastify],
]) {
  test(`spec/gate_rules.json client_address vectors over HTTP, the framework trusting every proxy: ${framework}`, async () => {
    const failures = []
    for (const v of RULES.client_address) {
      await replay(v, (options, clock, told) => start(options, clock, told, true), failures)
      await replay(v, start, failures)
    }
    assert.deepEqual(failures, [])
    assert.ok(RULES.client_address.length >= 2)
  })
}

// spec/gate_rules.json's `route_options`: which options a route's own
// limit takes and which of the plugin's it inherits — the core's rules, as
// the Fastify plugin applies them (Python's route limits take the same).
test('spec/gate_rules.json route_options: the core rules the Fastify routes follow', async () => {
  const { takes, inherits } = RULES.route_options
  const failures = []
  for (const t of takes) {
    let took = true
    try {
      rb.Gate.routeOption(camel(t.option))
    } catch (e) {
      took = false
      assert.equal(e.code, 'ERR_RATEBOUND_INVALID_OPTION')
    }
    if (took !== t.takes) failures.push(`${t.option}: takes = ${took}`)
  }
  for (const v of inherits) {
    const own = v.own.map(camel)
    const got = v.site.filter((name) => rb.Gate.routeInherits(camel(name), own))
    if (JSON.stringify(got) !== JSON.stringify(v.inherited)) failures.push(`${v.id}: inherited ${got}`)
  }
  assert.deepEqual(failures, [])
  assert.ok(takes.length >= 20 && inherits.length >= 4)
})

test("Fastify: a route's limit refuses the application's options and does not inherit them", async () => {
  // Before (issue 38): a route's concurrencyLimit was taken, and the
  // plugin's inherited (each route its own cap).
  const refused = Fastify()
  await refused.register(rb.fastify, { rate: 100 })
  // Thrown where the route is declared (at the root context: by get()).
  assert.throws(
    () => refused.get('/', { config: { rateLimit: { rate: 1, concurrencyLimit: 1 } } }, async () => 'ok'),
    (e) => e.code === 'ERR_RATEBOUND_INVALID_OPTION' && /route GET \/: .*concurrencyLimit/.test(e.message),
  )
  await refused.close()
  const app = Fastify()
  await app.register(rb.fastify, { rate: 100, headers: 'legacy', concurrencyLimit: 5, global: false })
  app.get('/', { config: { rateLimit: { rate: 1, burst: 1 } } }, async () => 'ok')
  await app.listen({ port: 0, host: '127.0.0.1' })
  try {
    const r = await send(app.server.address().port, '127.0.0.1', [])
    assert.equal(r.status, 200)
    assert.equal(r.headers['x-ratelimit-limit'], '1') // the plugin's headers: inherited
  } finally {
    await app.close()
  }
})
