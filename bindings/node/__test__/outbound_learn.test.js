'use strict'
// rb.fetch and rb.axios learn a partner's real limit (issue 39): against a
// REAL HTTP partner on 127.0.0.1 (fixtures/outbound.js' server, with its
// own bucket) that answers a bare 429 — no Retry-After, no RateLimit
// fields — beyond its limit, a local TokenBucket configured well above it
// cuts the rate it runs at (`adapted` events, `learnedRate()`); with
// `adaptive: false` it does not. The rule itself (when to cut, when to
// step up) is the core's, replayed exactly in outbound_calls.test.js;
// here only the direction is asserted, over bounded loops, never a time.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const IORedis = require('ioredis')
const axios = require('axios')
const rb = require('..')
const { unhandledRejections } = require('./fixtures/common.js')
const { HOST, startServer } = require('./fixtures/redis-server.js')
const { ioredis, nodeRedis, closeAll } = require('./fixtures/redis-clients.js')
const { TMP, cleanup, bucket, partner } = require('./fixtures/outbound.js')

const unhandled = unhandledRejections()

after(async () => {
  await closeAll()
  await cleanup()
  assert.deepEqual(unhandled, [], 'unhandled rejections')
})

// The partner: 10/s, bursts of 5, a bare 429 beyond.
async function bare429Partner() {
  const limit = bucket(10, 5)
  return partner(() => (limit.take() === 0 ? [200, {}, 'ok'] : [429, {}, 'over the limit']))
}

// The configured rate, far above the partner's 10/s.
const CONFIGURED = 100

// Sends through `call` (a function of a path returning the status), four
// at a time, until `enough(events)` or `most` requests.
async function drive(call, events, enough, most) {
  let sent = 0
  const worker = async () => {
    while (sent < most && !enough(events)) {
      sent++
      await call('/items')
    }
  }
  await Promise.all([worker(), worker(), worker(), worker()])
  return sent
}

const cuts = (events) => events.filter((e) => e.outcome === 'adapted' && e.toRate < e.fromRate)

// Each adapter, learning (by default with fetch, asked for with axios).
const ADAPTERS = {
  fetch: (p, options) => {
    const f = rb.fetch(options)
    return async (pathname) => (await f(`${p.url}${pathname}`)).status
  },
  axios: (p, options) => {
    const api = rb.axios(axios.create({ baseURL: p.url, validateStatus: () => true }), options)
    return async (pathname) => (await api.get(pathname)).status
  },
}

// One redis-server for the file's Redis buckets, started on first use.
let redis = null
const redisPort = async () => (redis ??= await startServer()).port
// A Redis token bucket on its own connection and prefix (failing closed:
// a learning test must not be admitted by the fail policy).
let prefixes = 0
const redisBucket = (connect) => async (rate, burst) => {
  const client = await connect(await redisPort())
  return new rb.redis.TokenBucket({ client, prefix: `learn-${process.pid}-${prefixes++}:`, rate, burst, onError: 'closed', timeout: 1 })
}

// The limiters that learn: a bucket in this process, a keyed one (per key,
// beside the key's state), the shared-memory ones, whose file keeps the
// learned word for every process on the host, and the Redis bucket (over
// either client), whose key keeps it for every instance.
let files = 0
const LEARNERS = {
  'redis (ioredis)': redisBucket(ioredis),
  'redis (node-redis)': redisBucket(nodeRedis),
  local: (rate, burst) => new rb.TokenBucket({ rate, burst }),
  keyed: (rate, burst) => new rb.KeyedLimiter({ rate, burst, maxKeys: 8 }),
  shared: (rate, burst) => new rb.SharedTokenBucket({ path: path.join(TMP, `learn-${process.pid}-${files++}.limit`), rate, burst }),
  'shared-keyed': (rate, burst) =>
    new rb.SharedKeyedLimiter({ path: path.join(TMP, `learn-keyed-${process.pid}-${files++}.limit`), rate, burst, maxKeys: 8 }),
}

// The learned rate: a keyed limiter's for the adapters' key (the host).
const gauge = (limiter, key) =>
  [rb.KeyedLimiter, rb.SharedKeyedLimiter, rb.redis.TokenBucket].some((C) => limiter instanceof C) ? limiter.learnedRate(key) : limiter.learnedRate()

for (const [name, make] of Object.entries(ADAPTERS)) {
  for (const [kind, learner] of Object.entries(LEARNERS)) {
  test(`${name} over a ${kind} bucket: bare 429s from a partner below the configured rate cut the learned rate; adaptive: false does not`, async (t) => {
    const p = await bare429Partner()
    const limiter = await learner(CONFIGURED, 10)
    const host = new URL(p.url).host
    assert.equal(gauge(limiter, host), CONFIGURED, 'nothing learned yet: the configured rate')
    const events = []
    // retries: 0 — every answer is the caller's; learning does not need a
    // retry (nor a pause: a bare 429 with no retry left pauses nothing).
    const options = { limiter, retries: 0, onDecision: (e) => events.push(e) }
    if (name === 'axios') options.adaptive = true
    const call = make(p, options)
    const sent = await drive(call, events, (e) => cuts(e).length >= 3, 1000)

    assert.ok(p.count(429) > 0, 'the partner refused')
    const adapted = events.filter((e) => e.outcome === 'adapted')
    assert.ok(cuts(events).length >= 3, `${cuts(events).length} cuts in ${sent} requests (${p.count(429)} × 429)`)
    // The first cut is from the ceiling: nothing was learned before.
    assert.equal(adapted[0].fromRate, CONFIGURED)
    assert.equal(adapted[0].status, 429)
    for (const e of adapted) {
      assert.equal(typeof e.fromRate, 'number')
      assert.equal(typeof e.toRate, 'number')
      // A refusal cuts, a success steps up: never the other way.
      if (e.status === 429) assert.ok(e.toRate < e.fromRate, JSON.stringify(e))
      else assert.ok(e.status === 200 && e.toRate > e.fromRate && e.toRate <= CONFIGURED, JSON.stringify(e))
    }
    // One chain of changes: each event starts where the last one left.
    for (let i = 1; i < adapted.length; i++) assert.equal(adapted[i].fromRate, adapted[i - 1].toRate)
    // The limiter runs at the last rate learned, below the configured one
    // (for the key the events name: the partner's host).
    assert.equal(adapted[0].key, host)
    const learned = gauge(limiter, host)
    assert.equal(learned, adapted.at(-1).toRate)
    assert.ok(learned < CONFIGURED, String(learned))
    if (kind === 'keyed') {
      // Per key: the host's bucket runs at the learned rate (its burst
      // scaled down too), another key at the whole quota.
      assert.ok(limiter.available(host) < 10, String(limiter.available(host)))
      assert.equal(limiter.learnedRate('other.test'), CONFIGURED)
      assert.equal(limiter.available('other.test'), 10)
    }
    t.diagnostic(
      `learning: ${sent} requests, ${p.count(200)} × 200, ${p.count(429)} × 429, ${cuts(events).length} cuts, ` +
        `${adapted.length - cuts(events).length} steps up; learned ${learned.toFixed(2)}/s of ${CONFIGURED}/s`,
    )
    await p.close()

    // The same partner, adaptive: false: refused, and nothing learned.
    const q = await bare429Partner()
    const fixed = await learner(CONFIGURED, 10)
    const still = []
    const plain = make(q, { limiter: fixed, retries: 0, adaptive: false, onDecision: (e) => still.push(e) })
    await drive(plain, still, () => false, 60)
    assert.ok(q.count(429) > 0, 'the partner refused')
    assert.deepEqual(
      still.filter((e) => e.outcome === 'adapted'),
      [],
    )
    const qhost = new URL(q.url).host
    assert.equal(gauge(fixed, qhost), CONFIGURED)
    t.diagnostic(`adaptive: false: 60 requests, ${q.count(200)} × 200, ${q.count(429)} × 429; still ${gauge(fixed, qhost)}/s`)
    await q.close()
  })
  }
}

// Several adapters over one limiter learn one rate: what one learned is
// the word the next sends under (no cut from a word it no longer holds).
test('two adapters sharing a TokenBucket learn one rate', async () => {
  const p = await bare429Partner()
  const limiter = new rb.TokenBucket({ rate: CONFIGURED, burst: 10 })
  const events = []
  const a = ADAPTERS.fetch(p, { limiter, retries: 0, onDecision: (e) => events.push(e) })
  const b = ADAPTERS.axios(p, { limiter, retries: 0, onDecision: (e) => events.push(e) })
  let turn = 0
  await drive((pathname) => (turn++ % 2 === 0 ? a : b)(pathname), events, (e) => cuts(e).length >= 2, 1000)
  const adapted = events.filter((e) => e.outcome === 'adapted')
  assert.ok(cuts(events).length >= 2, `${cuts(events).length} cuts`)
  for (let i = 1; i < adapted.length; i++) assert.equal(adapted[i].fromRate, adapted[i - 1].toRate)
  assert.equal(limiter.learnedRate(), adapted.at(-1).toRate)
  await p.close()
})

test('adaptive: bad input and the limiters that do not learn', async () => {
  const typed = (C, code, re) => (e) => e instanceof C && e.code === code && re.test(e.message)
  const bucket = new rb.TokenBucket({ rate: 1 })
  const io = new IORedis({ host: HOST, port: 1, lazyConnect: true })
  // Every token bucket keeps a learned word (local, keyed, shared-memory,
  // Redis); the windows do not learn (and serve no adapter).
  const learners = [
    bucket,
    new rb.KeyedLimiter({ rate: 1 }),
    new rb.SharedTokenBucket({ path: path.join(TMP, 'learn-bucket.limit'), rate: 1, burst: 1 }),
    new rb.SharedKeyedLimiter({ path: path.join(TMP, 'learn-keyed.limit'), rate: 1, burst: 1 }),
    new rb.redis.TokenBucket({ client: io, rate: 1, onError: 'closed' }),
  ]
  // The Redis windows (no outbound limiters: they cannot be paused) do
  // not learn: a typed error, never a word.
  for (const w of [
    new rb.redis.FixedWindow({ client: io, limit: 1, window: 1, onError: 'closed' }),
    new rb.redis.SlidingWindow({ client: io, limit: 1, window: 1, onError: 'closed' }),
  ]) {
    assert.throws(() => w.learnedRate('k'), typed(TypeError, 'ERR_RATEBOUND_UNSUPPORTED', /window/))
    await assert.rejects(w.adaptWord('k', '0', '1'), typed(TypeError, 'ERR_RATEBOUND_UNSUPPORTED', /window/))
  }
  // A Redis bucket's words are checked like the others', and a Redis that
  // cannot be told learns nothing: false, never a rejection.
  const down = learners[4]
  assert.equal(down.learnedWord('k'), '0')
  assert.equal(down.learnedRate('k'), 1)
  await assert.rejects(down.adaptWord('k', '0', 'lots'), typed(TypeError, 'ERR_INVALID_ARG_TYPE', /next is a learned word/))
  assert.equal(await down.adaptWord('k', '0', String((1n << 61n) | (20000n << 44n) | 1799999999999n)), false)
  for (const make of [(o) => rb.fetch(o), (o) => rb.axios(axios.create(), o)]) {
    for (const bad of ['yes', 1, {}]) {
      assert.throws(() => make({ limiter: bucket, adaptive: bad }), typed(TypeError, 'ERR_INVALID_ARG_TYPE', /adaptive is a boolean, not/))
    }
    assert.throws(() => make({ limiter: bucket, adaptive: 'yes' }), /adaptive is a boolean, not "yes"/)
    for (const limiter of learners) {
      make({ limiter })
      make({ limiter, adaptive: false })
      make({ limiter, adaptive: true })
    }
  }
  io.disconnect()

  // The keyed local limiter learns per key: a bare 429 cuts the host's
  // rate (one event), and no other key's; a window's learnedRate is a
  // typed error.
  const events = []
  const keyed = new rb.KeyedLimiter({ rate: 1000, burst: 1000 })
  const f = rb.fetch({ limiter: keyed, retries: 0, onDecision: (e) => events.push(e), fetch: async () => new Response(null, { status: 429 }) })
  assert.equal((await f('http://partner.test/')).status, 429)
  assert.deepEqual(
    events.map((e) => e.outcome),
    ['adapted', 'gave_up'],
  )
  assert.equal(keyed.learnedRate('partner.test'), events[0].toRate)
  assert.ok(events[0].toRate < 1000, String(events[0].toRate))
  assert.equal(keyed.learnedRate('other.test'), 1000)
  const window = new rb.KeyedLimiter({ algorithm: 'fixed_window', limit: 10, window: 1 })
  assert.throws(() => window.learnedRate('k'), typed(TypeError, 'ERR_RATEBOUND_UNSUPPORTED', /fixed_window/))
  assert.throws(() => keyed.adaptWord('k', '0', 'lots'), typed(TypeError, 'ERR_INVALID_ARG_TYPE', /next is a learned word/))

  // The native words are u64s in decimal: anything else is a TypeError.
  assert.throws(() => bucket.adaptWord('0', 'lots'), typed(TypeError, 'ERR_INVALID_ARG_TYPE', /next is a learned word.*"lots"/))
  assert.throws(() => bucket.adaptWord('-1', '0'), typed(TypeError, 'ERR_INVALID_ARG_TYPE', /seen/))
  assert.throws(() => bucket.adaptWord('18446744073709551616', '0'), typed(TypeError, 'ERR_INVALID_ARG_TYPE', /seen/))
  const o = new rb.Outbound({ limiter: bucket })
  assert.equal(o.learning, true, 'on by default with a TokenBucket')
  assert.equal(new rb.Outbound({ limiter: bucket, adaptive: false }).learning, false)
  assert.equal(new rb.Outbound({}).learning, false, 'no limiter: nothing keeps what is learned')
  const call = o.call('GET', 'http:', 'p', null, null, null, null, false, true)
  assert.throws(() => call.saw('0x10'), typed(TypeError, 'ERR_INVALID_ARG_TYPE', /learned word/))
  // A word above 2^53 keeps every bit through the adapter's strings.
  assert.equal(bucket.learnedWord(), '0')
  const big = String((1n << 61n) | (20000n << 44n) | 1799999999999n)
  assert.equal(bucket.adaptWord('0', big), true)
  assert.equal(bucket.learnedWord(), big)
  assert.equal(bucket.adaptWord('0', '0'), false, 'no longer the word seen: kept')
  // The rate of (65536 − 20000)/65536 of the ceiling, 1/s.
  assert.ok(Math.abs(bucket.learnedRate() - 45536 / 65536) < 1e-9, String(bucket.learnedRate()))
  // setQuota sets the ceiling and keeps the word.
  bucket.setQuota(10)
  assert.ok(Math.abs(bucket.learnedRate() - (10 * 45536) / 65536) < 1e-9, String(bucket.learnedRate()))
})

test('the shared-memory buckets keep the learned word in the file, for every handle (every process)', () => {
  const typed = (C, code, re) => (e) => e instanceof C && e.code === code && re.test(e.message)
  const file = path.join(TMP, `learn-words-${process.pid}.limit`)
  // Two handles on one file stand for two worker processes.
  const a = new rb.SharedTokenBucket({ path: file, rate: 100, burst: 10 })
  const b = new rb.SharedTokenBucket({ path: file, rate: 100, burst: 10 })
  assert.equal(new rb.Outbound({ limiter: a }).learning, true, 'on by default with a SharedTokenBucket')
  assert.equal(a.learnedWord(), '0')
  // A cut to 7/10 of the ceiling (45876 65536ths), made at some instant.
  const cut = String((1n << 61n) | (19660n << 44n) | 1799999999999n)
  assert.equal(a.adaptWord('0', cut), true)
  assert.equal(b.learnedWord(), cut, 'the other handle reads the word')
  assert.equal(b.adaptWord('0', '0'), false, 'no longer the word seen: kept')
  assert.ok(Math.abs(b.learnedRate() - (100 * 45876) / 65536) < 1e-9, String(b.learnedRate()))
  assert.equal(b.learnedRate('any key'), b.learnedRate(), 'one bucket, one rate')
  // It runs at it: a burst of 7 where 10 were configured.
  let taken = 0
  while (b.tryAcquire()) taken++
  assert.equal(taken, 7)
  assert.throws(() => a.adaptWord(cut, 'lots'), typed(TypeError, 'ERR_INVALID_ARG_TYPE', /next is a learned word/))

  const kfile = path.join(TMP, `learn-words-keyed-${process.pid}.limit`)
  const k = new rb.SharedKeyedLimiter({ path: kfile, rate: 100, burst: 10, maxKeys: 8 })
  const k2 = new rb.SharedKeyedLimiter({ path: kfile, rate: 100, burst: 10, maxKeys: 8 })
  assert.equal(new rb.Outbound({ limiter: k }).learning, true, 'on by default with a token-bucket SharedKeyedLimiter')
  assert.equal(k.adaptWord('partner.example', '0', cut), true)
  assert.equal(k2.learnedWord('partner.example'), cut)
  assert.equal(k2.learnedWord('other.example'), '0', 'each key its own word')
  assert.equal(k2.learnedRate('other.example'), 100)
  assert.throws(() => k2.learnedRate(), typed(TypeError, 'ERR_INVALID_ARG_TYPE', /key/))
  const w = new rb.SharedKeyedLimiter({ path: path.join(TMP, `learn-window-${process.pid}.limit`), algorithm: 'fixed_window', limit: 10, window: 1 })
  assert.equal(new rb.Outbound({ limiter: w }).learning, false, 'a window does not learn')
  assert.throws(() => w.learnedRate('k'), typed(TypeError, 'ERR_RATEBOUND_UNSUPPORTED', /fixed_window/))
  assert.throws(() => w.adaptWord('k', '0', cut), typed(TypeError, 'ERR_RATEBOUND_UNSUPPORTED', /fixed_window/))
})

// A worker process: GETs `url` through rb.fetch over the shared bucket at
// `file` until it has seen two changes of the learned rate (or 300
// requests), then prints each change as "from to status".
const WORKER = `
const rb = require(process.argv[1])
const [url, file, configured] = process.argv.slice(2)
const limiter = new rb.SharedTokenBucket({ path: file, rate: Number(configured), burst: 10 })
const events = []
const f = rb.fetch({ limiter, retries: 0, onDecision: (e) => events.push(e) })
;(async () => {
  for (let i = 0; i < 300 && events.filter((e) => e.outcome === 'adapted').length < 2; i++) {
    await (await f(url)).arrayBuffer()
  }
  for (const e of events) if (e.outcome === 'adapted') console.log(e.fromRate, e.toRate, e.status)
})()
`

test('worker processes learn one rate through a SharedTokenBucket file', async () => {
  const { spawn } = require('node:child_process')
  const p = await bare429Partner()
  const file = path.join(TMP, `learn-processes-${process.pid}.limit`)
  // Four processes, each its own adapter, one file: a change is one
  // compare-and-swap on the file's word from the word its request was sent
  // under, so no two processes change the same word (four local buckets
  // would each cut from the configured rate), and the file holds the last.
  const run = () =>
    new Promise((resolve, reject) => {
      const child = spawn(process.execPath, ['-e', WORKER, path.join(__dirname, '..'), `${p.url}/items`, file, String(CONFIGURED)], {
        stdio: ['ignore', 'pipe', 'inherit'],
      })
      let out = ''
      child.stdout.on('data', (d) => (out += d))
      child.on('error', reject)
      child.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`worker exited ${code}`))))
    })
  const outs = await Promise.all([run(), run(), run(), run()])
  const changes = outs.flatMap((o) =>
    o
      .trim()
      .split('\n')
      .filter(Boolean)
      .map((l) => l.split(' ').map(Number)),
  )
  assert.ok(changes.length >= 4, JSON.stringify(changes))
  const froms = changes.map((c) => c[0])
  assert.equal(new Set(froms).size, froms.length, `two processes changed the same word: ${JSON.stringify(changes)}`)
  assert.equal(froms.filter((r) => r === CONFIGURED).length, 1, 'one cut from the configured rate, for all of them')
  const here = new rb.SharedTokenBucket({ path: file, rate: CONFIGURED, burst: 10 })
  assert.ok(
    changes.some((c) => c[1] === here.learnedRate()),
    `${here.learnedRate()}`,
  )
  assert.ok(here.learnedRate() < CONFIGURED)
  await p.close()
})

// The Redis bucket keeps the learned word beside the bucket in Redis: two
// instances (two connections) of one limit read one word — each from the
// last reply it had for the key — and run at it.
test('the Redis bucket keeps the learned word in Redis, for every instance', async () => {
  const port = await redisPort()
  const prefix = `learn-words-${process.pid}:`
  const a = new rb.redis.TokenBucket({ client: await ioredis(port), prefix, rate: 100, burst: 10, onError: 'closed', timeout: 1 })
  const b = new rb.redis.TokenBucket({ client: await nodeRedis(port), prefix, rate: 100, burst: 10, onError: 'closed', timeout: 1 })
  assert.equal(new rb.Outbound({ limiter: a }).learning, true, 'on by default with a redis.TokenBucket')
  // A cut to 7/10 of the ceiling (45876 65536ths), made at some instant.
  const cut = String((1n << 61n) | (19660n << 44n) | 1799999999999n)
  assert.equal(await a.adaptWord('partner', '0', cut), true)
  assert.equal(a.learnedWord('partner'), cut, 'the reply carried the word')
  assert.equal(b.learnedWord('partner'), '0', 'no reply yet: nothing known (no I/O)')
  // It runs at it: a burst of 7 where 10 were configured; the replies
  // carry the word to b.
  let taken = 0
  while (taken < 20 && (await b.tryAcquire('partner'))) taken++
  assert.equal(taken, 7)
  assert.equal(b.learnedWord('partner'), cut)
  assert.ok(Math.abs(b.learnedRate('partner') - (100 * 45876) / 65536) < 1e-9, String(b.learnedRate('partner')))
  assert.equal(await b.adaptWord('partner', '0', '0'), false, 'no longer the word seen: kept')
  assert.equal(b.learnedRate('other'), 100, 'each key its own word')
  await a.close()
  await b.close()
})

test("an announced quota is a share of the bucket's quota as it is now (setQuota after the adapter was built)", async () => {
  // 10/s → 20/s: the announced 100 for 10 s is 100 / (20 + 20·10) of the
  // quota as it is now, 9.09/s — not 100 / (10 + 10·10) of it (18.2/s,
  // twice what the partner announced).
  const p = await partner(() => [200, { 'RateLimit-Remaining': '100', 'RateLimit-Reset': '10' }, 'ok'])
  for (const [name, make] of Object.entries(ADAPTERS)) {
    const limiter = new rb.TokenBucket({ rate: 10, burst: 10 })
    const call = make(p, { limiter })
    limiter.setQuota(20, 20)
    assert.equal(await call('/v1'), 200)
    assert.ok(Math.abs(limiter.learnedRate() - 100 / 11) < 0.01, `${name}: ${limiter.learnedRate()}`)
  }
  await p.close()
})
