'use strict'
// Global limits in Redis: decisions per second with 1, 16 and 64 checks in
// flight, and the latency of each decision (p50/p99), in the same run as
// the ceiling — redis-benchmark running the very EVALSHA a check sends,
// with as many connections — and rate-limiter-flexible's RateLimiterRedis
// (its fixed window, SET NX + INCRBY in one script call) on the same
// ioredis client. ratebound twice: `batch: false` (one script call a
// check) and batched (the default: checks that wait while others are in
// flight go out together as one script run). 10 000 keys; then one hot key
// with and without leasing (k = 100), and the reserve mode (`reserve`, and
// `acquire`: a global wait) beside `check` at 16 in flight, and the checks
// again through a node-redis client (its calls carry an AbortSignal, shared
// by the calls of one millisecond and aborted once all of them are answered
// and one timed out: redis_driver.js' Epoch). Starts and stops its
// own redis-server on a free 127.0.0.1 port. Median of ROUNDS rounds of
// DURATION s per row, the variants of a row interleaved in each round.
// Usage: node bench/redis.js [seconds] [rounds]   (~3 min by default)
const { spawn, execFileSync } = require('node:child_process')
const fs = require('node:fs')
const net = require('node:net')
const os = require('node:os')
const path = require('node:path')
const IORedis = require('ioredis')
const { createClient } = require('redis')
const { RateLimiterRedis } = require('rate-limiter-flexible')
const rb = require('..')

let DURATION = Number(process.argv[2] || 2)
const ROUNDS = Number(process.argv[3] || 3)
const KEYS = 10000

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address()
      s.close(() => resolve(port))
    })
  })
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
// The median of each field over rounds.
function medians(rs) {
  const out = {}
  for (const k of Object.keys(rs[0])) out[k] = rs[0][k] === undefined ? undefined : median(rs.map((x) => x[k]))
  return out
}

// Latencies of one round, in ms (enough room for a few seconds at any rate).
const samples = new Float64Array(4_000_000)

// Redis' time in commands so far, in µs (INFO commandstats, INFO itself
// left out).
let redisClient = null
async function redisUsec() {
  const info = await redisClient.info('commandstats')
  let usec = 0
  for (const m of info.matchAll(/cmdstat_(\w+):calls=\d+,usec=(\d+)/g)) if (m[1] !== 'info') usec += Number(m[2])
  return usec
}

// `inFlight` loops, each awaiting one decision at a time, for DURATION s:
// { rate (decisions/s), p50, p99 (ms per decision), node, redis (CPU µs
// per decision: this process, Redis' commands) }.
async function rate(inFlight, decide, hot) {
  const usec0 = redisClient === null ? 0 : await redisUsec()
  const cpu0 = process.cpuUsage()
  let done = 0
  const end = performance.now() + DURATION * 1000
  const loops = []
  for (let i = 0; i < inFlight; i++) {
    loops.push(
      (async () => {
        let k = i * 7919
        while (performance.now() < end) {
          k = (k + 1) % KEYS
          const t = performance.now()
          await decide(hot ? 'hot' : `k${k}`)
          if (done < samples.length) samples[done] = performance.now() - t
          done++
        }
      })(),
    )
  }
  const start = performance.now()
  await Promise.all(loops)
  const elapsed = (performance.now() - start) / 1000
  const cpu = process.cpuUsage(cpu0)
  const usec = redisClient === null ? 0 : (await redisUsec()) - usec0
  const got = samples.subarray(0, Math.min(done, samples.length)).sort()
  return {
    rate: done / elapsed,
    p50: got[Math.floor(got.length * 0.5)],
    p99: got[Math.floor(got.length * 0.99)],
    node: (cpu.user + cpu.system) / done,
    redis: usec / done,
  }
}

// redis-benchmark sending `args` (the command a check sends, its key made
// random over KEYS) with `clients` connections: { rate, p50, p99, redis }.
async function ceiling(port, clients, args) {
  const usec0 = await redisUsec()
  const out = execFileSync('redis-benchmark', [
    '-h', '127.0.0.1', '-p', String(port), '-c', String(clients), '-n', String(Math.max(10000, 60000 * DURATION)),
    '-r', String(KEYS), '--csv', ...args,
  ]).toString()
  // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
  const row = out.trim().split('\n').pop().split(',').map((v) => v.replace(/"/g, ''))
  const [rps, , , p50, , p99] = row.slice(1).map(Number)
  if (!(rps > 0)) throw new Error(`redis-benchmark: ${out}`)
  const n = Math.max(10000, 60000 * DURATION)
  return { rate: rps, p50, p99, redis: ((await redisUsec()) - usec0) / n }
}

const num = (x) => x.toFixed(0).replace(/\B(?=(\d{3})+(?!\d))/g, ' ')
const ms = (x) => (x < 10 ? x.toFixed(2) : x.toFixed(1))
const cell = (r) => `${num(r.rate)} (${ms(r.p50)} / ${ms(r.p99)})`

async function main() {
  const port = await freePort()
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ratebound-bench-redis-'))
  const server = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' })
  try {
    const client = new IORedis({ host: '127.0.0.1', port, enableOfflineQueue: true, maxRetriesPerRequest: 0, lazyConnect: true })
    client.on('error', () => {})
    redisClient = new IORedis({ host: '127.0.0.1', port, lazyConnect: true })
    redisClient.on('error', () => {})
    for (let i = 0; ; i++) {
      try {
        await client.connect()
        await redisClient.connect()
        break
      } catch (e) {
        if (i > 100) throw e
        await new Promise((r) => setTimeout(r, 50))
      }
    }
    const big = { client, rate: 1_000_000, burst: 1_000_000, timeout: 1 }
    const plain = rb.redis.TokenBucket({ ...big, batch: false })
    const batched = rb.redis.TokenBucket(big)
    const hotPlain = rb.redis.TokenBucket({ ...big, prefix: 'rb:hot:', batch: false })
    const hotLeased = rb.redis.TokenBucket({ ...big, prefix: 'rb:hotl:', lease: 100, batch: false })
    const flexible = new RateLimiterRedis({ storeClient: client, points: 1_000_000, duration: 1, keyPrefix: 'rlf' })
    // Load the scripts (the ceiling calls EVALSHA directly), the batch
    // script too.
    await plain.check('warm')
    await Promise.all([batched.check('warm1'), batched.check('warm2'), batched.check('warm3')])
    // Warm up every path (the JIT, the connection) before measuring.
    const saved = DURATION
    DURATION = 0.3
    for (const decide of [(k) => plain.check(k), (k) => batched.check(k), (k) => flexible.consume(k), (k) => plain.reserve(k), (k) => plain.acquire(k, 1, { timeout: 5 })]) {
      await rate(16, decide, false)
    }
    DURATION = saved
    // The command a check sends, as the engine makes it, its key random.
    const call = plain.engine.begin('x', 1)
    const evalsha = ['EVALSHA', call.sha, '1', 'rb:bench:__rand_int__', ...call.args]
    console.log(`bench/redis.js: ${DURATION} s per row, ${ROUNDS} rounds, median decisions/s (p50 / p99 ms per decision), one ioredis client, ${KEYS} keys`)
    console.log(`ceiling: redis-benchmark -c <in flight> -r ${KEYS} ${evalsha.map((a) => (a === '' ? "''" : a)).join(' ')}`)
    console.log('| in flight | ceiling: redis-benchmark EVALSHA | ratebound, batch: false | share of ceiling | ratebound, batched | × ceiling | rate-limiter-flexible | unbatched ÷ flexible | batched ÷ flexible |')
    console.log('|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
    const hotRows = []
    const cpuRows = []
    for (const inFlight of [1, 16, 64]) {
      const rows = { ceil: [], plain: [], batched: [], flex: [], hot: [], leased: [] }
      for (let r = 0; r < ROUNDS; r++) {
        rows.ceil.push(await ceiling(port, inFlight, evalsha))
        rows.plain.push(await rate(inFlight, (k) => plain.check(k), false))
        rows.batched.push(await rate(inFlight, (k) => batched.check(k), false))
        rows.flex.push(await rate(inFlight, (k) => flexible.consume(k), false))
        rows.hot.push(await rate(inFlight, (k) => hotPlain.check(k), true))
        rows.leased.push(await rate(inFlight, (k) => hotLeased.check(k), true))
      }
      const m = {}
      for (const [name, rs] of Object.entries(rows)) m[name] = medians(rs)
      const { ceil: c, plain: p, batched: b, flex: f } = m
      const us = (r) => `${r.node === undefined ? '–' : r.node.toFixed(1)} / ${r.redis.toFixed(1)}`
      cpuRows.push(`| ${inFlight} | ${us(c)} | ${us(p)} | ${us(b)} | ${us(f)} |`)
      console.log(
        `| ${inFlight} | ${cell(c)} | ${cell(p)} | ${((100 * p.rate) / c.rate).toFixed(0)} % | ${cell(b)} | ${(b.rate / c.rate).toFixed(2)} | ${cell(f)} | ${(p.rate / f.rate).toFixed(2)} | ${(b.rate / f.rate).toFixed(2)} |`,
      )
      hotRows.push(`| ${inFlight} | ${cell(m.hot)} | ${cell(m.leased)} | ${(m.leased.rate / m.hot.rate).toFixed(1)} |`)
    }
    console.log('')
    console.log('CPU per decision, µs (median): this process / Redis (INFO commandstats):')
    console.log('| in flight | ceiling (Redis only) | ratebound, batch: false | ratebound, batched | rate-limiter-flexible |')
    console.log('|---:|---:|---:|---:|---:|')
    for (const row of cpuRows) console.log(row)
    console.log('')
    console.log('One hot key, batch: false, without and with leasing:')
    console.log('| in flight | hot key | hot key, lease 100 | lease speed-up |')
    console.log('|---:|---:|---:|---:|')
    for (const row of hotRows) console.log(row)
    // The reserve mode beside check, 16 in flight, each unbatched and
    // batched (rate 1e6/s: every reservation is due at once): reserve, and
    // acquire with a timeout (a reservation, the wait's bookkeeping).
    const rows = { check: [], reserve: [], acquire: [], checkB: [], reserveB: [], acquireB: [] }
    for (let r = 0; r < ROUNDS; r++) {
      rows.check.push(await rate(16, (k) => plain.check(k), false))
      rows.reserve.push(await rate(16, (k) => plain.reserve(k), false))
      rows.acquire.push(await rate(16, (k) => plain.acquire(k, 1, { timeout: 5 }), false))
      rows.checkB.push(await rate(16, (k) => batched.check(k), false))
      rows.reserveB.push(await rate(16, (k) => batched.reserve(k), false))
      rows.acquireB.push(await rate(16, (k) => batched.acquire(k, 1, { timeout: 5 }), false))
    }
    const m = {}
    for (const [name, rs] of Object.entries(rows)) m[name] = medians(rs)
    console.log('')
    console.log('The reserve mode (reserve, and acquire with a timeout: a global wait) beside check, 16 in flight:')
    console.log('| | check | reserve | reserve ÷ check | acquire | acquire ÷ check |')
    console.log('|---|---:|---:|---:|---:|---:|')
    console.log(`| batch: false | ${cell(m.check)} | ${cell(m.reserve)} | ${(m.reserve.rate / m.check.rate).toFixed(2)} | ${cell(m.acquire)} | ${(m.acquire.rate / m.check.rate).toFixed(2)} |`)
    console.log(`| batched | ${cell(m.checkB)} | ${cell(m.reserveB)} | ${(m.reserveB.rate / m.checkB.rate).toFixed(2)} | ${cell(m.acquireB)} | ${(m.acquireB.rate / m.checkB.rate).toFixed(2)} |`)
    const us = (r) => `${r.node.toFixed(1)} / ${r.redis.toFixed(1)}`
    console.log('')
    console.log('CPU per decision there, µs: this process / Redis:')
    console.log('| | check | reserve | acquire |')
    console.log('|---|---:|---:|---:|')
    console.log(`| batch: false | ${us(m.check)} | ${us(m.reserve)} | ${us(m.acquire)} |`)
    console.log(`| batched | ${us(m.checkB)} | ${us(m.reserveB)} | ${us(m.acquireB)} |`)
    // The checks through node-redis, batch: false and batched.
    const nr = createClient({ socket: { host: '127.0.0.1', port } })
    nr.on('error', () => {})
    await nr.connect()
    const nrPlain = rb.redis.TokenBucket({ ...big, client: nr, batch: false })
    const nrBatched = rb.redis.TokenBucket({ ...big, client: nr })
    await nrPlain.check('warm')
    DURATION = 0.3
    for (const lim of [nrPlain, nrBatched]) await rate(16, (k) => lim.check(k), false)
    DURATION = saved
    console.log('')
    console.log('The checks through one node-redis client (median decisions/s (p50 / p99 ms); CPU per decision, µs: this process / Redis):')
    console.log('| in flight | node-redis, batch: false | CPU | node-redis, batched | CPU |')
    console.log('|---:|---:|---:|---:|---:|')
    for (const inFlight of [1, 16, 64]) {
      const nrRows = { plain: [], batched: [] }
      for (let r = 0; r < ROUNDS; r++) {
        nrRows.plain.push(await rate(inFlight, (k) => nrPlain.check(k), false))
        nrRows.batched.push(await rate(inFlight, (k) => nrBatched.check(k), false))
      }
      const p = medians(nrRows.plain)
      const b = medians(nrRows.batched)
      console.log(`| ${inFlight} | ${cell(p)} | ${us(p)} | ${cell(b)} | ${us(b)} |`)
    }
    await nr.quit()
    const s = batched.stats
    console.log('')
    console.log(`batched limiter: ${s.calls} script calls, ${s.batches} of them batches holding ${s.batched} checks (${(s.batched / Math.max(1, s.batches)).toFixed(1)} a batch)`)
    await hotLeased.close()
    client.disconnect()
    redisClient.disconnect()
  } finally {
    server.kill()
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

main().catch((e) => {
  console.error(e)
  process.exitCode = 1
})
