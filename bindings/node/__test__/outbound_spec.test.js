'use strict'
// Replays spec/outbound.json through rb.Outbound (the core's outbound
// decision); the Rust and Python suites replay the same file.
const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const rb = require('..')

const SPEC = path.join(__dirname, '..', '..', '..', 'spec', 'outbound.json')
const { vectors } = JSON.parse(fs.readFileSync(SPEC, 'utf8'))

function outbound(config = {}) {
  return new rb.Outbound({
    retries: config.retries,
    maxPause: config.max_pause_s,
    statuses: config.statuses,
    anyMethod: config.any_method,
    backoff: config.backoff_s,
  })
}

test('every vector of spec/outbound.json', () => {
  assert.ok(vectors.length >= 30, 'the spec lost vectors')
  for (const v of vectors) {
    const got = outbound(v.config).advise(v.method, v.status, v.headers, v.attempt, v.now_unix)
    const e = v.expect
    assert.deepEqual(
      { pause: got.pause ?? null, capped: got.capped, retry: got.retry, gaveUp: got.gaveUp },
      { pause: e.pause_s, capped: e.capped, retry: e.retry, gaveUp: e.gave_up },
      `${v.id}: ${v.doc}`,
    )
  }
})

test('every options vector of spec/outbound.json: the core reads them, as Rust and Python', () => {
  const { options } = JSON.parse(fs.readFileSync(SPEC, 'utf8'))
  assert.ok(options.length >= 10, 'the spec lost option vectors')
  for (const v of options) {
    const g = v.given
    let got
    try {
      const o = outbound(g)
      const s = rb.Outbound.sending(g.n, g.timeout_s)
      got = { retries: o.retries, max_pause_s: o.maxPause, n: s.n, timeout_s: s.timeout ?? null }
      if ('backoff_s' in (v.expect ?? {})) got.backoff_s = o.backoff
    } catch (e) {
      assert.ok(v.error, `${v.id}: ${e.message}`)
      assert.ok(e instanceof RangeError && e.code === `ERR_RATEBOUND_${v.error.code.toUpperCase()}`, `${v.id}: ${e.code}`)
      assert.ok(e.message.startsWith(`invalid ${v.error.name} `), `${v.id}: ${e.message}`)
      continue
    }
    assert.equal(v.error, undefined, `${v.id}: no error`)
    assert.deepEqual(got, v.expect, v.id)
  }
})

test('bad options are typed errors naming the value', () => {
  for (const bad of [0, -1, NaN, Infinity]) {
    assert.throws(() => new rb.Outbound({ maxPause: bad }), (e) => e instanceof RangeError && /maxPause|max_pause/.test(e.message), String(bad))
  }
  assert.throws(() => new rb.Outbound({ statuses: [429, 42] }), (e) => e instanceof RangeError && /42/.test(e.message))
  assert.throws(() => new rb.Outbound({ retries: 1.5 }), (e) => e instanceof RangeError && /retries/.test(e.message))
  assert.equal(new rb.Outbound().retries, 2)
  assert.equal(new rb.Outbound().maxPause, 300)
})
