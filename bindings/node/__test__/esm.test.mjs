import { test } from 'node:test'
import assert from 'node:assert/strict'
import { TokenBucket, ManualClock, express, fastify, RateLimitExceededError, redis, RedisEngine } from 'ratebound'

test('ESM named imports', () => {
  const clock = new ManualClock()
  const tb = new TokenBucket({ rate: '2/s', burst: 1, clock })
  assert.equal(tb.tryAcquire(), true)
  assert.equal(tb.check().allowed, false)
  assert.equal(typeof express, 'function')
  assert.equal(typeof fastify, 'function')
  assert.equal(typeof RateLimitExceededError, 'function')
  assert.equal(typeof redis.TokenBucket, 'function')
  assert.equal(typeof RedisEngine, 'function')
})
