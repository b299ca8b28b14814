'use strict'
// The Redis driver's deadline and fail policy in virtual time: a scripted
// client that never answers, or answers late or in time, and the driver's
// deadline wheel on node:test's mock timers (setTimeout and Date; the
// driver reads the time through redis_driver.js' `clock`, here Date.now();
// setImmediate stays real: settle() runs its turns). Each answer is asserted at an exact virtual instant: none a
// millisecond before the 50 ms deadline, the fail policy's at it. The
// real-Redis versions (redis.test.js, redis_batch.test.js) keep generous
// bounds only.

const { test, mock, afterEach } = require('node:test')
const assert = require('node:assert/strict')
const rb = require('..')
const { settle } = require('./fixtures/common.js')
const { clock } = require('../redis_driver.js')

const realNow = clock.now

// Moves virtual time forward by `ms`, one millisecond at a time (each
// timer, and the setImmediate it queues, runs at its instant).
async function advance(ms) {
  for (let i = 0; i < ms; i++) {
    mock.timers.tick(1)
    await settle()
  }
}

function virtual() {
  mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 0 })
  clock.now = () => Date.now()
}

afterEach(() => {
  mock.timers.reset()
  clock.now = realNow
})

// A client as given that answers every script call after `delay` ms of
// virtual time (Infinity: never), with a GCRA reply that admits.
function scripted(delay) {
  const sent = []
  const answer = (...args) => {
    sent.push(Date.now())
    return new Promise((resolve) => {
      if (delay !== Infinity) setTimeout(() => resolve([1, 19, 0, 100000, 1, 0, 1_000_000, 0, 0]), delay)
    })
  }
  return { client: { evalsha: answer, eval: answer }, sent }
}

// The answer to one check, asked at virtual time 0: [the decision, the
// virtual instant it came].
async function answerOf(lim, key = 'k') {
  const got = { d: null, at: null }
  lim.check(key).then((d) => {
    got.d = d
    got.at = Date.now()
  })
  await settle()
  return got
}

for (const [policy, extra, source, allowed] of [
  ['open', {}, 'fail_open', true],
  ['closed', {}, 'fail_closed', false],
  ['local', { localRate: 5 }, 'local', true],
]) {
  test(`a call Redis never answers: onError ${policy} answers exactly at the 50 ms deadline (virtual time)`, async () => {
    virtual()
    const { client, sent } = scripted(Infinity)
    const lim = new rb.redis.TokenBucket({ client, rate: 10, burst: 20, onError: policy, timeout: 0.05, ...extra })
    const got = await answerOf(lim)
    assert.deepEqual(sent, [0], 'sent at once')
    await advance(49)
    assert.equal(got.d, null, `answered at ${got.at} ms, before the deadline`)
    await advance(1)
    assert.ok(got.d !== null, 'no answer at the deadline')
    assert.equal(got.at, 50)
    assert.equal(got.d.source, source)
    assert.equal(got.d.allowed, allowed)
    assert.equal(lim.stats.timeouts, 1, JSON.stringify(lim.stats))
  })
}

test('an answer 1 ms before the deadline is Redis\' answer; 1 ms after it, the fail policy\'s at the deadline (virtual time)', async () => {
  virtual()
  const early = new rb.redis.TokenBucket({ client: scripted(49).client, rate: 10, burst: 20, onError: 'closed', timeout: 0.05 })
  let got = await answerOf(early)
  await advance(49)
  assert.equal(got.at, 49)
  assert.equal(got.d.source, 'redis')
  assert.equal(got.d.allowed, true)
  assert.equal(early.stats.timeouts, 0)

  const late = new rb.redis.TokenBucket({ client: scripted(51).client, rate: 10, burst: 20, onError: 'closed', timeout: 0.05 })
  const t0 = Date.now()
  got = await answerOf(late)
  await advance(49)
  assert.equal(got.d, null)
  await advance(3)
  assert.equal(got.at - t0, 50)
  assert.equal(got.d.source, 'fail_closed')
  assert.equal(late.stats.timeouts, 1)
})

// A node-redis-like client that never answers: each command takes an
// AbortSignal, and one sent with a signal already aborted is rejected at
// once, as node-redis does (a command already written stays written).
function abortable() {
  const sent = []
  const sendCommand = (words, options) => {
    const signal = options?.abortSignal
    sent.push({ at: Date.now(), key: words[3].replace('rb:tb:', ''), aborted: signal?.aborted === true, signal })
    if (signal?.aborted) {
      const e = new Error('The command was aborted')
      e.name = 'AbortError'
      return Promise.reject(e)
    }
    return new Promise(() => {})
  }
  return { client: { evalSha: () => {}, eval: () => {}, sendCommand }, sent }
}

// The calls node-redis is given share an AbortSignal per millisecond,
// aborted once the calls it carries have all timed out. Redis slow: a call
// that waited in the queue goes out with what is left of its deadline (here
// 1 ms) and times out; the next call sent within the same millisecond must
// not get that signal, already aborted, and with it an AbortError — the
// fail policy's answer at 30 ms, 20 ms before its deadline (CI saw it so in
// redis_batch.test.js' deadline wheel, at 30.0 ms).
test('Redis slow: a call sent just after another timed out is never given its aborted signal (virtual time)', async () => {
  virtual()
  const { client, sent } = abortable()
  const lim = new rb.redis.TokenBucket({ client, rate: 100, burst: 100, onError: 'closed', timeout: 0.05, breakerThreshold: 100000, batch: false })
  const got = new Map()
  const ask = (key) => {
    const s = Date.now()
    lim.check(key).then((d) => got.set(key, { took: Date.now() - s, source: d.source }))
  }
  // 64 calls fill what is in flight; the rest wait in the queue.
  for (let i = 0; i < 64; i++) ask(`a${i}`)
  await settle()
  assert.equal(sent.length, 64)
  await advance(1)
  ask('q1')
  await advance(20)
  ask('q2')
  await settle()
  await advance(29)
  // At 50 ms the first 64 time out (Redis slow): q1 goes out with 1 ms
  // left of its deadline, and times out at 51 ms.
  assert.equal(got.size, 64, [...got.keys()].join())
  assert.deepEqual(sent.slice(64).map((s) => [s.key, s.at]), [['q1', 50]])
  await advance(1)
  assert.deepEqual(got.get('q1'), { took: 50, source: 'fail_closed' })
  // q2 went out at 51 ms, with a live signal, and waits for its deadline.
  assert.deepEqual(sent.slice(65).map((s) => [s.key, s.at, s.aborted]), [['q2', 51, false]])
  // Every signal whose calls all timed out is aborted (a command the
  // client still held would be withdrawn); q2's is live.
  assert.deepEqual([...new Set(sent.slice(0, 65).map((s) => s.signal.aborted))], [true])
  assert.equal(sent[65].signal.aborted, false)
  await advance(19)
  assert.equal(got.get('q2'), undefined, `q2 answered ${JSON.stringify(got.get('q2'))}, before its deadline`)
  await advance(1)
  assert.deepEqual(got.get('q2'), { took: 50, source: 'fail_closed' })
  assert.equal(sent[65].signal.aborted, true)
  assert.equal(lim.stats.timeouts, 66, JSON.stringify(lim.stats))
  assert.equal(lim.stats.errors, 0, JSON.stringify(lim.stats))
})
