'use strict'
// Replays every vector in spec/ (the files the Rust and Python suites
// replay) through the public JavaScript API, asserting every expected field.
const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const rb = require('..')

const SPEC = path.join(__dirname, '..', '..', '..', 'spec')
const load = (name) => JSON.parse(fs.readFileSync(path.join(SPEC, name), 'utf8'))
const ns = (seconds) => Math.round(seconds * 1e9)

function build(spec, clock) {
  switch (spec.algorithm) {
    case 'token_bucket':
      return new rb.TokenBucket({ rate: spec.quota, clock })
    case 'leaky_bucket':
      return new rb.LeakyBucket({ rate: spec.quota, maxDelay: spec.max_delay_ns / 1e9, clock })
    case 'fixed_window':
      return new rb.FixedWindow({ limit: spec.limit, window: spec.window_ns / 1e9, clock })
    case 'sliding_window':
      return new rb.SlidingWindow({ limit: spec.limit, window: spec.window_ns / 1e9, clock })
    case 'sliding_log':
      return new rb.SlidingLog({ limit: spec.limit, window: spec.window_ns / 1e9, clock })
    case 'all_of': {
      const members = spec.members.map((m) => build(m, clock))
      const all = new rb.AllOf(members)
      all.members = members
      return all
    }
    default:
      throw new Error(`unknown algorithm ${spec.algorithm}`)
  }
}

function observed(fn) {
  try {
    const d = fn()
    return {
      allowed: d.allowed,
      limit: d.limit,
      remaining: d.remaining,
      retry_after_ns: ns(d.retryAfter),
      reset_after_ns: ns(d.resetAfter),
    }
  } catch (e) {
    const code = /^ERR_RATEBOUND_(.*)$/.exec(e.code)
    if (!code) throw e
    return { error: code[1].toLowerCase() }
  }
}

function compare(where, got, expect, failures) {
  for (const [field, want] of Object.entries(expect)) {
    const value = got == null ? undefined : got[field]
    if (value !== want) failures.push(`${where}: ${field} = ${JSON.stringify(value)}, want ${JSON.stringify(want)}`)
  }
}

function replay(vector, failures) {
  const clock = new rb.ManualClock()
  const limiter = build(vector.limiter ?? { algorithm: 'token_bucket', quota: vector.quota }, clock)
  const reservations = []
  let admitted = 0
  let refused = 0
  vector.steps.forEach((step, i) => {
    if (step.set_time_ns !== undefined) clock.setNanos(step.set_time_ns)
    if (step.advance_ns !== undefined) clock.advanceNanos(step.advance_ns)
    const n = step.n ?? 1
    for (let rep = 0; rep < (step.repeat ?? 1); rep++) {
      let got
      switch (step.call) {
        case 'check':
          got = observed(() => limiter.check(n))
          if (got.allowed === true) admitted++
          else if (got.allowed === false) refused++
          break
        case 'available':
          got = { available: limiter.available() }
          break
        case 'member_available':
          got = { available: limiter.members[step.member].available() }
          break
        case 'reserve':
          try {
            const r = limiter.reserve(n, step.max_wait_ns / 1e9)
            reservations.push(r)
            got = { delay_ns: r.delayNanos }
          } catch (e) {
            got = { error: e.code.replace(/^ERR_RATEBOUND_/, '').toLowerCase() }
          }
          break
        case 'cancel':
          reservations[step.reservation].cancel()
          break
        case 'set_quota':
          limiter.setQuota(step.quota)
          break
        default:
          throw new Error(`${vector.id} step ${i}: unknown call ${step.call}`)
      }
      if (step.expect) compare(rep === 0 ? `${vector.id} step ${i}` : `${vector.id} step ${i} (repeat ${rep})`, got, step.expect, failures)
    }
  })
  if (vector.totals) compare(`${vector.id} totals`, { admitted, refused }, vector.totals, failures)
}

const FILES = {
  'token_bucket.json': 8,
  'fixed_window.json': 1,
  'sliding_window.json': 2,
  'sliding_log.json': 1,
  'leaky_bucket.json': 2,
  'boundary_burst.json': 4,
  'all_of.json': 2,
}

for (const [file, atLeast] of Object.entries(FILES)) {
  test(`spec/${file}`, () => {
    const { vectors } = load(file)
    assert.ok(vectors.length >= atLeast, `${file}: expected at least ${atLeast} vectors`)
    const failures = []
    for (const v of vectors) replay(v, failures)
    assert.deepEqual(failures, [])
  })
}

test('every spec file is replayed', () => {
  const files = fs.readdirSync(SPEC).filter((f) => f.endsWith('.json')).sort()
  // gate.json and gate_rules.json are replayed over HTTP by
  // gate_spec.test.js; redis.json against
  // real Redis servers, with ioredis and node-redis, by redis.test.js;
  // redis_wait.json through the engine by redis_wait_spec.test.js;
  // outbound.json through rb.Outbound by outbound_spec.test.js;
  // outbound_calls.json through the call machine, rb.fetch and rb.axios by
  // outbound_calls.test.js; redis_learn.json (the learned word in Redis) by
  // the Rust driver's tests/learn.rs until this binding's Redis limiters
  // learn (issue 39).
  assert.deepEqual(files, [...Object.keys(FILES), 'keyed.json', 'http.json', 'gate.json', 'gate_rules.json', 'redis.json', 'redis_wait.json', 'redis_learn.json', 'outbound.json', 'outbound_calls.json'].sort())
})

function keyedAlgorithm(spec) {
  if (spec.algorithm === 'token_bucket') return { rate: spec.quota }
  return { algorithm: spec.algorithm, limit: spec.limit, window: spec.window_ns / 1e9 }
}

test('spec/keyed.json', () => {
  const { vectors } = load('keyed.json')
  assert.ok(vectors.length >= 4)
  const failures = []
  for (const vector of vectors) {
    const clock = new rb.ManualClock()
    const spec = vector.limiter
    const opts = { ...keyedAlgorithm(spec.per_key), clock }
    if (spec.max_keys !== undefined) {
      opts.maxKeys = spec.max_keys
      opts.overflow = { reject_new_keys: 'reject', evict_least_recent: 'evict' }[spec.overflow]
    }
    const k = new rb.KeyedLimiter(opts)
    vector.steps.forEach((step, i) => {
      if (step.advance_ns !== undefined) clock.advanceNanos(step.advance_ns)
      let got
      switch (step.call) {
        case 'check':
          got = observed(() => k.check(step.key, step.n ?? 1))
          break
        case 'len':
          got = { len: k.size }
          break
        case 'available':
          got = { available: k.available(step.key) }
          break
        case 'cleanup':
          got = { removed: k.cleanup() }
          break
        case 'cleanup_idle':
          got = { removed: k.cleanupIdle(step.idle_ns / 1e9) }
          break
        case 'remove':
          got = { removed: k.remove(step.key) }
          break
        default:
          throw new Error(`${vector.id} step ${i}: unknown call ${step.call}`)
      }
      if (step.expect) compare(`${vector.id} step ${i}`, got, step.expect, failures)
    })
  }
  assert.deepEqual(failures, [])
})

test('spec/http.json', () => {
  const { vectors } = load('http.json')
  const failures = []
  for (const vector of vectors) {
    vector.cases.forEach((c, i) => {
      let got
      switch (vector.kind) {
        case 'retry_after':
          got = rb.http.retryAfterSecs(c.wait_ns)
          break
        case 'ip_key':
          got = rb.http.ipKey(c.ip, c.prefix)
          break
        case 'client_ip': {
          // The header lines in order, as req.rawHeaders gives them; `header`
          // is the configured clientIpHeader (default X-Forwarded-For).
          const trusted = c.trust.cidrs ?? c.trust.hops
          got = rb.http.clientIp(c.peer, c.headers.flat(), trusted, c.header)
          break
        }
        case 'ratelimit_policy':
          got = rb.http.rateLimitPolicy(c.policies.map((p) => ({ name: p.name, rate: p.quota })))
          break
        default:
          throw new Error(`${vector.id}: unknown kind ${vector.kind}`)
      }
      compare(`${vector.id} case ${i}`, { want: got }, { want: c.want }, failures)
    })
  }
  assert.ok(vectors.length >= 4)
  assert.deepEqual(failures, [])
})
