'use strict'
// Global limits in Redis: decisions per second with 1, 16 and 64 checks in
// flight, in the same run as the ceiling — redis-benchmark running the same
// EVALSHA with as many connections — and rate-limiter-flexible's
// RateLimiterRedis (its fixed window, SET NX + INCRBY in one script call)
// on the same ioredis client. 10 000 keys; then one hot key with and
// without leasing (k = 100). Starts and stops its own redis-server on a
// free 127.0.0.1 port. Median of ROUNDS rounds of DURATION s per row.
// Usage: node bench/redis.js [seconds] [rounds]   (~1.5 min by default)
const { spawn, execFileSync } = require('node:child_process')
const fs = require('node:fs')
const net = require('node:net')
const os = require('node:os')
const path = require('node:path')
const IORedis = require('ioredis')
const { RateLimiterRedis } = require('rate-limiter-flexible')
const rb = require('..')

const DURATION = Number(process.argv[2] || 2)
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

// `inFlight` loops, each awaiting one check at a time, for DURATION s.
async function rate(inFlight, check, hot) {
  let done = 0
  const end = performance.now() + DURATION * 1000
  const loops = []
  for (let i = 0; i < inFlight; i++) {
    loops.push(
      (async () => {
        let k = i * 7919
        while (performance.now() < end) {
          k = (k + 1) % KEYS
          await check(hot ? 'hot' : `k${k}`)
          done++
        }
      })(),
    )
  }
  const start = performance.now()
  await Promise.all(loops)
  return done / ((performance.now() - start) / 1000)
}

function ceiling(port, clients, sha) {
  const out = execFileSync('redis-benchmark', [
    '-h', '127.0.0.1', '-p', String(port), '-c', String(clients), '-n', String(Math.max(10000, 60000 * DURATION)),
    '-r', String(KEYS), '-q', 'EVALSHA', sha, '1', 'rb:bench:__rand_int__', '', '1', '1000000000000', '1', 'check', '1',
  ]).toString()
  const m = /([\d.]+) requests per second/.exec(out)
  if (!m) throw new Error(`redis-benchmark: ${out}`)
  return Number(m[1])
}

async function main() {
  const port = await freePort()
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ratebound-bench-redis-'))
  const server = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' })
  try {
    const client = new IORedis({ host: '127.0.0.1', port, enableOfflineQueue: true, maxRetriesPerRequest: 0, lazyConnect: true })
    for (let i = 0; ; i++) {
      try {
        await client.connect()
        break
      } catch (e) {
        if (i > 100) throw e
        await new Promise((r) => setTimeout(r, 50))
      }
    }
    const big = { client, rate: 1_000_000, burst: 1_000_000, timeout: 1 }
    const plain = rb.redis.TokenBucket(big)
    const hotPlain = rb.redis.TokenBucket({ ...big, prefix: 'rb:hot:' })
    const hotLeased = rb.redis.TokenBucket({ ...big, prefix: 'rb:hotl:', lease: 100 })
    const flexible = new RateLimiterRedis({ storeClient: client, points: 1_000_000, duration: 1, keyPrefix: 'rlf' })
    // Load the script (the ceiling calls EVALSHA directly).
    await plain.check('warm')
    const sha = plain.engine.begin('x', 1).sha
    console.log(`bench/redis.js: ${DURATION} s per row, ${ROUNDS} rounds, median decisions/s (one ioredis client)`)
    console.log('| in flight | redis-benchmark EVALSHA | ratebound | share of ceiling | rate-limiter-flexible | ratebound ÷ flexible | hot key | hot key, lease 100 | lease speed-up |')
    console.log('|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
    for (const inFlight of [1, 16, 64]) {
      const rows = { ceil: [], rb: [], flex: [], hot: [], leased: [] }
      for (let r = 0; r < ROUNDS; r++) {
        rows.ceil.push(ceiling(port, inFlight, sha))
        rows.rb.push(await rate(inFlight, (k) => plain.check(k), false))
        rows.flex.push(await rate(inFlight, (k) => flexible.consume(k), false))
        rows.hot.push(await rate(inFlight, (k) => hotPlain.check(k), true))
        rows.leased.push(await rate(inFlight, (k) => hotLeased.check(k), true))
      }
      const [c, p, f, h, l] = [rows.ceil, rows.rb, rows.flex, rows.hot, rows.leased].map(median)
      console.log(`| ${inFlight} | ${c.toFixed(0)} | ${p.toFixed(0)} | ${((100 * p) / c).toFixed(0)} % | ${f.toFixed(0)} | ${(p / f).toFixed(2)} | ${h.toFixed(0)} | ${l.toFixed(0)} | ${(l / h).toFixed(1)} |`)
    }
    await hotLeased.close()
    client.disconnect()
  } finally {
    server.kill()
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

main().catch((e) => {
  console.error(e)
  process.exitCode = 1
})
