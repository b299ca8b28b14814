'use strict'
// ns per call of ratebound's hot calls against rate-limiter-flexible
// (RateLimiterMemory), limiter (TokenBucket) and a pure-JS token bucket, in
// one process, one run: each row is the median of RUNS timed loops of ITERS
// calls after a warm-up. Usage: node bench/micro.js [--json]
const rb = require('..')
const { RateLimiterMemory } = require('rate-limiter-flexible')
const { TokenBucket: LimiterBucket } = require('limiter')

const RUNS = 7
const ITERS = 2_000_000

function median(xs) {
  const s = [...xs].sort((a, b) => a - b)
  return s[s.length >> 1]
}

let sink = 0
function bench(fn, iters = ITERS, runs = RUNS) {
  for (let i = 0; i < Math.min(iters, 200_000); i++) sink += fn(i) ? 1 : 0 // warm-up
  const per = []
  for (let r = 0; r < runs; r++) {
    const t0 = process.hrtime.bigint()
    for (let i = 0; i < iters; i++) if (fn(i)) sink++
    per.push(Number(process.hrtime.bigint() - t0) / iters)
  }
  return median(per)
}

async function benchAsync(fn, iters = 200_000, runs = 5) {
  const batch = 1000
  const once = async () => {
    const t0 = process.hrtime.bigint()
    for (let i = 0; i < iters; i += batch) {
      const ps = new Array(batch)
      for (let j = 0; j < batch; j++) ps[j] = fn(i + j)
      await Promise.allSettled(ps)
    }
    return Number(process.hrtime.bigint() - t0) / iters
  }
  await once() // warm-up
  const per = []
  for (let r = 0; r < runs; r++) per.push(await once())
  return median(per)
}

// The pure-JS token bucket of the issue: tokens as a float, refilled from
// performance.now().
class JsBucket {
  constructor(rate, burst) {
    this.rate = rate / 1000
    this.burst = burst
    this.tokens = burst
    this.last = performance.now()
  }
  tryAcquire() {
    const now = performance.now()
    this.tokens = Math.min(this.burst, this.tokens + (now - this.last) * this.rate)
    this.last = now
    if (this.tokens >= 1) {
      this.tokens -= 1
      return true
    }
    return false
  }
}

async function main() {
  const rows = []
  const row = (group, impl, ns, note = '') => rows.push({ group, impl, ns, note })
  const BIG = 1e9 // tokens per second and burst: never refuses in the run
  const jsEmpty = () => true
  row('floor', 'empty JS call', bench(() => jsEmpty()))
  row('floor', 'empty raw N-API call (rb.noop)', bench(() => rb.noop()))
  row('floor', 'performance.now()', bench(() => performance.now() > 0))

  // Allowed path.
  const tbA = new rb.TokenBucket({ rate: BIG, burst: BIG })
  row('allowed', 'ratebound tryAcquire()', bench(() => tbA.tryAcquire()))
  row('allowed', 'ratebound check()', bench(() => tbA.check().allowed))
  row('allowed', 'ratebound available() (a plain napi-rs #[napi] method, for reference)', bench(() => tbA.available() > 0))
  const js = new JsBucket(BIG, BIG)
  row('allowed', 'pure-JS token bucket', bench(() => js.tryAcquire()))
  const lim = new LimiterBucket({ bucketSize: BIG, tokensPerInterval: BIG, interval: 'second' })
  row('allowed', 'limiter TokenBucket.tryRemoveTokens(1)', bench(() => lim.tryRemoveTokens(1)))
  const rlfA = new RateLimiterMemory({ points: BIG, duration: 1 })
  row('allowed', 'rate-limiter-flexible consume() (awaited in batches of 1000)', await benchAsync(() => rlfA.consume('k')))

  // Denied path: burst 1 at 1 per hour, drained first.
  const tbD = new rb.TokenBucket({ rate: '1/hour', burst: 1 })
  tbD.tryAcquire()
  row('denied', 'ratebound tryAcquire()', bench(() => tbD.tryAcquire()))
  row('denied', 'ratebound check()', bench(() => tbD.check().allowed))
  const jsD = new JsBucket(1 / 3600, 1)
  jsD.tryAcquire()
  row('denied', 'pure-JS token bucket', bench(() => jsD.tryAcquire()))
  const limD = new LimiterBucket({ bucketSize: 1, tokensPerInterval: 1, interval: 'hour' })
  limD.tryRemoveTokens(1)
  row('denied', 'limiter TokenBucket.tryRemoveTokens(1)', bench(() => limD.tryRemoveTokens(1)))
  const rlfD = new RateLimiterMemory({ points: 1, duration: 3600 })
  await rlfD.consume('k').catch(() => {})
  row('denied', 'rate-limiter-flexible consume() (rejects; awaited in batches of 1000)', await benchAsync(() => rlfD.consume('k'), 100_000))

  // Keyed, 100 000 keys, round robin over existing keys.
  const N = 100_000
  const keys = Array.from({ length: N }, (_, i) => `user-${i}`)
  const k = new rb.KeyedLimiter({ rate: BIG, burst: BIG, maxKeys: 1_000_000 })
  for (const key of keys) k.check(key)
  row('keyed 100k', 'ratebound KeyedLimiter.check(key)', bench((i) => k.check(keys[i % N]).allowed))
  row('keyed 100k', 'ratebound KeyedLimiter.tryAcquire(key)', bench((i) => k.tryAcquire(keys[i % N]), 500_000))
  const rlfK = new RateLimiterMemory({ points: BIG, duration: 3600 })
  for (const key of keys) await rlfK.consume(key)
  row('keyed 100k', 'rate-limiter-flexible consume(key)', await benchAsync((i) => rlfK.consume(keys[i % N])))
  const jsK = new Map(keys.map((key) => [key, new JsBucket(BIG, BIG)]))
  row('keyed 100k', 'pure-JS Map of token buckets', bench((i) => jsK.get(keys[i % N]).tryAcquire()))

  // The middleware's own cost per request, in process: the Express
  // middleware and the Fastify hook with stand-in request/response objects
  // (key by IP; headers set on a no-op response).
  const mw = rb.express({ rate: BIG, burst: BIG })
  const socket = { remoteAddress: '127.0.0.1' }
  const rawHeaders = ['Host', '127.0.0.1', 'Accept', '*/*']
  const req = { ip: '127.0.0.1', headers: {}, rawHeaders, socket, raw: { rawHeaders, socket } }
  const res = { setHeader() {}, getHeader() {} }
  const next = () => {}
  row('middleware', 'ratebound express() middleware, one request (stand-in req/res)', bench(() => mw(req, res, next) === undefined, 300_000))
  let hook = null
  rb.fastify({ decorate() {}, addHook(name, fn) { if (name === 'onRequest') hook = fn } }, { rate: BIG, burst: BIG }, () => {})
  const reply = { header() { return this }, getHeader() {} }
  row('middleware', 'ratebound fastify onRequest hook, one request (stand-in request/reply)', bench(() => hook(req, reply, next) === undefined, 300_000))

  if (sink < 0) console.log(sink)
  return rows
}

module.exports = main
if (require.main === module) {
  main().then((rows) => {
    if (process.argv.includes('--json')) return console.log(JSON.stringify(rows))
    for (const r of rows) console.log(`${r.group.padEnd(11)} ${r.impl.padEnd(80)} ${r.ns.toFixed(1).padStart(8)} ns`)
  })
}
