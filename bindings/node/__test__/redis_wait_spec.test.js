'use strict'

// spec/redis_wait.json against a real Redis through the engine
// (RedisEngine): reservations, give-backs (whether Redis took the tokens
// back), pauses, resumes and checks at explicit Redis times, the same vectors the
// Rust and Python suites replay.

const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const crypto = require('node:crypto')
const rb = require('..')
const { startServer } = require('./fixtures/redis-server.js')
const { closeAll, ioredis, runScript: run } = require('./fixtures/redis-clients.js')

const SPEC = path.join(__dirname, '..', '..', '..', 'spec', 'redis_wait.json')

after(closeAll)

// A client of a fresh server.
async function server() {
  return ioredis((await startServer()).port)
}

test('spec/redis_wait.json: every vector through the engine, zero differences', async () => {
  const client = await server()
  const { vectors } = JSON.parse(fs.readFileSync(SPEC, 'utf8'))
  assert.ok(vectors.length >= 6)
  const failures = []
  let steps = 0
  for (const v of vectors) {
    const c = v.config
    const prefix = `${v.id}-${crypto.randomBytes(6).toString('hex')}:`
    const e = new rb.RedisEngine({ algorithm: 'token_bucket', rate: c.rate, burst: c.burst, prefix, timeout: 2 })
    const key = v.id
    // The reservations granted, by step: the call and its slot's end.
    const granted = []
    for (const [i, step] of v.steps.entries()) {
      steps++
      granted.push(null)
      const n = step.n ?? 1
      let got
      if (step.call === 'reserve') {
        const call = e.beginReserve(key, n, step.max_wait_us / 1e6, null)
        assert.ok(call instanceof rb.RedisCall, `${v.id} step ${i}`)
        const at = call.at(step.at_us)
        const r = e.finishReserve(at, await run(client, at), false, null)
        if (r.retryAfter === undefined) granted[i] = [at, r.endUs]
        got =
          r.retryAfter !== undefined
            ? { granted: false, wait_us: Math.round(r.retryAfter * 1e6) }
            : { granted: true, wait_us: Math.round(r.delay * 1e6), source: r.source }
      } else if (step.call === 'return') {
        const held = step.of !== undefined ? granted[step.of] : granted.findLast((g) => g !== null)
        assert.ok(held, `${v.id} step ${i}: a granted reservation`)
        const back = e.giveBack(held[0], held[1]).at(step.at_us)
        got = { given_back: e.givenBack(await run(client, back), false, null) }
      } else if (step.call === 'pause') {
        const call = e.beginPause(key, step.for_us / 1e6, null).at(step.at_us)
        const shift = e.finishPause(await run(client, call), false, null)
        assert.notEqual(shift, null)
        got = { shift_us: Math.round(shift * 1e6) }
      } else if (step.call === 'resume') {
        const call = e.beginResume(key, null).at(step.at_us)
        got = { resumed: e.finishResume(await run(client, call), false, null) }
      } else if (step.call === 'check') {
        const call = e.begin(key, n, null).at(step.at_us)
        const d = e.finish(call, await run(client, call), false, null)
        got = { allowed: d.allowed, remaining: d.remaining, retry_after_us: Math.round(d.retryAfter * 1e6) }
      } else {
        throw new Error(`${v.id} step ${i}: unknown call ${step.call}`)
      }
      for (const [field, want] of Object.entries(step.expect)) {
        if (got[field] !== want) failures.push(`${v.id} step ${i}: ${field} = ${JSON.stringify(got[field])}, want ${JSON.stringify(want)}`)
      }
    }
  }
  assert.deepEqual(failures, [])
  assert.equal(steps, vectors.reduce((s, v) => s + v.steps.length, 0))
  assert.ok(steps >= 20, `${steps} steps`)
  client.disconnect()
})

// The lower-level wait (RedisEngine.acquire and its steps), which a driver
// for another client runs: the package's limiters use the raw path instead.
test('RedisEngine.acquire: calls, then done or a sleep; an abandoned wait gives its slot back; a timeout that cannot be met', async () => {
  const client = await server()
  const prefix = `acquire-${crypto.randomBytes(6).toString('hex')}:`
  // One token a second: each slot is 1 s after the last.
  const e = new rb.RedisEngine({ algorithm: 'token_bucket', rate: 1, burst: 1, prefix, timeout: 2 })
  // Runs the wait's calls until its next step that is not one.
  async function next(a) {
    for (;;) {
      const step = e.acquireStep(a)
      if (!(step instanceof rb.RedisCall)) return step
      e.acquireReply(a, await run(client, step), false, null)
    }
  }
  assert.equal(await next(e.acquire('k', 1, 5, null)), 'redis', 'the burst: done at once')
  const a = e.acquire('k', 1, 5, null)
  const wait = await next(a)
  assert.equal(typeof wait, 'number')
  assert.ok(wait > 0 && wait <= 1, `the next slot, reserved, is due within 1 s: ${wait}`)
  // Given up while it sleeps: the call that gives the slot back.
  const back = e.acquireAbandon(a)
  assert.ok(back instanceof rb.RedisCall)
  await run(client, back)
  // So the next wait is due in that same slot, not the one after it.
  const again = await next(e.acquire('k', 1, 5, null))
  assert.ok(typeof again === 'number' && again <= 1, `after the give-back: ${again}`)
  // A wait that cannot end within 0.5 s: the wait it would need, nothing taken.
  const exceeded = await next(e.acquire('k', 1, 0.5, null))
  assert.ok(exceeded.retryAfter > 1, JSON.stringify(exceeded))
})
