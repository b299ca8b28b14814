'use strict'

// resume: the local token bucket and keyed limiter on a ManualClock, the
// shared-memory limiters, and the Redis limiter against a real
// redis-server — the engine's call at explicit Redis times, then the
// limiter's one call on Redis' clock with long pauses.

const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const crypto = require('node:crypto')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const IORedis = require('ioredis')
const rb = require('..')
const { HOST, startServer, stopAll } = require('./fixtures/redis-server.js')
const { runScript: run } = require('./fixtures/redis-clients.js')

const S = 1_000_000 // µs

// `tb`'s next token comes in exactly `seconds` on `clock`: check() says so,
// 1 ms before it is refused, at it admitted.
function nextIn(tb, clock, seconds) {
  assert.equal(tb.check().retryAfter, seconds)
  clock.advance(seconds - 0.001)
  assert.equal(tb.tryAcquire(), false)
  clock.advance(0.001)
  assert.equal(tb.tryAcquire(), true)
}
const clients = []
after(async () => {
  for (const c of clients) c.disconnect()
  await stopAll()
})

test('a lifted pause leaves the bucket as if it had ended then', () => {
  const clock = new rb.ManualClock()
  const tb = new rb.TokenBucket({ rate: 2, burst: 3, clock })
  assert.equal(tb.resume(), 'not_paused')
  tb.pause(10)
  clock.advance(1)
  assert.equal(tb.tryAcquire(), false)
  assert.equal(tb.resume(), 'lifted')
  // Empty now, one token every 0.5 s from now on.
  nextIn(tb, clock, 0.5)
  assert.equal(tb.resume(), 'not_paused')
  // Paused again, lifted again.
  tb.pause(20)
  clock.advance(1)
  assert.equal(tb.resume(), 'lifted')
  clock.advance(0.5)
  assert.equal(tb.tryAcquire(), true)
})

test('a reservation behind the pause keeps it queued until its end', () => {
  const clock = new rb.ManualClock()
  const tb = new rb.TokenBucket({ rate: 2, burst: 3, clock })
  tb.pause(10)
  clock.advance(1)
  const r = tb.reserve(1, 60)
  assert.equal(r.delay, 9.5)
  clock.advance(1)
  assert.equal(tb.resume(), 'queued')
  nextIn(tb, clock, 9)
})

test('keyed resume; windows and bad keys get typed errors', () => {
  const clock = new rb.ManualClock()
  const k = new rb.KeyedLimiter({ rate: 2, burst: 3, clock })
  assert.equal(k.resume('alice'), 'not_paused')
  k.pause('alice', 10)
  k.pause('bob', 10)
  clock.advance(1)
  assert.equal(k.resume('alice'), 'lifted')
  clock.advance(0.5)
  assert.equal(k.tryAcquire('alice'), true)
  assert.equal(k.tryAcquire('bob'), false)
  for (const bad of [1.5, NaN, 2 ** 54]) {
    assert.throws(() => k.resume(bad), { name: 'RangeError', code: 'ERR_RATEBOUND_INVALID_KEY' }, String(bad))
  }
  assert.throws(() => k.resume({}), { name: 'TypeError' })
  assert.throws(() => new rb.FixedWindow({ limit: 10, window: 1, clock }).resume(), { name: 'TypeError', code: 'ERR_RATEBOUND_UNSUPPORTED' })
  assert.throws(() => new rb.KeyedLimiter({ algorithm: 'fixed_window', limit: 3, window: 1, clock }).resume('k'), {
    name: 'TypeError',
    code: 'ERR_RATEBOUND_UNSUPPORTED',
  })
})

test('shared resume lifts the pause for every handle', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rb-shm-resume-'))
  try {
    const file = path.join(dir, 'p.limit')
    const a = new rb.SharedTokenBucket({ path: file, rate: 2, burst: 3 })
    const b = new rb.SharedTokenBucket({ path: file, rate: 2, burst: 3 })
    assert.equal(b.resume(), 'not_paused')
    a.pause(30)
    assert.equal(b.tryAcquire(), false)
    assert.equal(b.resume(), 'lifted')
    // Empty at the resume, one token 0.5 s later: the wait is at most that.
    const d = a.check()
    assert.ok(d.retryAfter > 0 && d.retryAfter <= 0.5, `${d.retryAfter}`)
    a.pause(30)
    const r = b.reserve(1, 60)
    assert.ok(r.delay > 29, `${r.delay}`)
    assert.equal(a.resume(), 'queued')
    assert.ok(a.check().retryAfter > 29)
    const k = new rb.SharedKeyedLimiter({ path: path.join(dir, 'k.limit'), rate: 2, burst: 3, maxKeys: 8 })
    assert.equal(k.resume('alice'), 'not_paused')
    k.pause('alice', 30)
    assert.equal(k.resume('alice'), 'lifted')
    assert.ok(k.check('alice').retryAfter <= 0.5)
    assert.throws(() => k.resume(1.5), { name: 'RangeError', code: 'ERR_RATEBOUND_INVALID_KEY' })
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

async function redisClient() {
  const server = await startServer()
  const client = new IORedis({ host: HOST, port: server.port, maxRetriesPerRequest: 0 })
  client.on('error', () => {})
  clients.push(client)
  return client
}

test('the Redis engine resumes at explicit Redis times', async () => {
  const client = await redisClient()
  const prefix = `resume-${crypto.randomBytes(6).toString('hex')}:`
  const e = new rb.RedisEngine({ algorithm: 'token_bucket', rate: 2, burst: 3, prefix, timeout: 2 })
  const t0 = 1_000_000 * S
  const resume = async (at) => e.finishResume(await run(client, e.beginResume('k', null).at(at)), false, null)
  const retryUs = async (at) => {
    const call = e.begin('k', 1, null).at(at)
    const d = e.finish(call, await run(client, call), false, null)
    return d.allowed ? 0 : Math.round(d.retryAfter * 1e6)
  }
  assert.equal(await resume(t0), 'not_paused')
  e.finishPause(await run(client, e.beginPause('k', 10, null).at(t0)), false, null)
  assert.equal(await retryUs(t0 + S), 9_500_000)
  assert.equal(await resume(t0 + S), 'lifted')
  assert.equal(await retryUs(t0 + S), 500_000)
  assert.equal(await retryUs(t0 + S + 500_000), 0)
  assert.equal(await resume(t0 + 2 * S), 'not_paused')
  // A reservation behind a pause keeps it queued.
  e.finishPause(await run(client, e.beginPause('k', 10, null).at(t0 + 3 * S)), false, null)
  const call = e.beginReserve('k', 1, 60, null).at(t0 + 4 * S)
  const r = e.finishReserve(call, await run(client, call), false, null)
  assert.equal(r.delay, 9.5)
  assert.equal(await resume(t0 + 5 * S), 'queued')
  assert.equal(await retryUs(t0 + 5 * S), 9_000_000)
  assert.equal(e.beginResume('k', null).kind, 'resume')
  assert.throws(() => new rb.RedisEngine({ algorithm: 'fixed_window', limit: 3, window: 1 }).beginResume('k', null), {
    code: 'ERR_RATEBOUND_UNSUPPORTED',
  })
  assert.throws(() => e.beginResume(1.5, null), { name: 'RangeError', code: 'ERR_RATEBOUND_INVALID_KEY' })
})

test('the Redis limiter resumes in one call on Redis clock', async () => {
  const client = await redisClient()
  const prefix = `resume-${crypto.randomBytes(6).toString('hex')}:`
  const tb = new rb.redis.TokenBucket({ client, rate: 10, burst: 1, prefix })
  const key = 'partner'
  assert.equal(await tb.resume(key), 'not_paused')
  await tb.pause(key, 30)
  assert.ok((await tb.check(key)).retryAfter > 29)
  const r = await tb.reserve(key, 1, { maxWait: 60 })
  assert.equal(await tb.resume(key), 'queued')
  assert.ok(await r.cancel())
  assert.equal(await tb.resume(key), 'lifted')
  assert.ok((await tb.check(key)).retryAfter <= 0.1)
  assert.equal(await tb.resume(key), 'not_paused')
  await assert.rejects(tb.resume(1.5), { name: 'RangeError', code: 'ERR_RATEBOUND_INVALID_KEY' })
  const w = new rb.redis.FixedWindow({ client, limit: 3, window: 1, prefix })
  await assert.rejects(w.resume(key), { code: 'ERR_RATEBOUND_UNSUPPORTED' })
  await tb.close()
})
