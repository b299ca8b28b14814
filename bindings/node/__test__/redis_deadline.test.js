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
const { clock } = require('../redis_driver.js')

const realNow = clock.now

// Lets the promises and the immediates of this turn run (real turns of the
// event loop; the mocked timers fire only on tick()).
async function settle() {
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve))
}

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
      if (delay !== Infinity) setTimeout(() => resolve([1, 19, 0, 100000, 1, 0, 1_000_000]), delay)
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
