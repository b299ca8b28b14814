'use strict'
// Waiting for a global token: 50 instances (each its own ioredis client and
// limiter) take 4 tokens each from one key of 100/s burst 10, all at once,
// three ways in the same run against one redis-server:
// - ratebound: reserve in Redis (one EVALSHA), then sleep until due — what
//   `acquire` does; the reserved moment is known, so the wake-up's lateness
//   is measured directly;
// - a polling loop over ratebound's `check` (sleep the exact retryAfter,
//   ask again) — what users write without `acquire`;
// - Bottleneck 2 in clustering mode (datastore ioredis, one shared id,
//   minTime 10 ms): its own Redis scripts.
// Rows: script calls per acquisition (INFO commandstats, all EVALSHA/EVAL),
// lateness of each wake-up after the moment the limit allowed it (p50/p99),
// order inversions (pairs of acquisitions served in the other order than
// their first call reached Redis, by more than 1 ms), the total time.
// Median of ROUNDS rounds. Usage: node bench/waiting.js [rounds]   (~30 s)
const { spawn } = require('node:child_process')
const fs = require('node:fs')
const net = require('node:net')
const os = require('node:os')
const path = require('node:path')
const IORedis = require('ioredis')
const Bottleneck = require('bottleneck')
const rb = require('..')

const ROUNDS = Number(process.argv[2] || 3)
const INSTANCES = 50
const EACH = 4
const RATE = 100
const BURST = 10
const now = () => performance.now()
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address()
      s.close(() => resolve(port))
    })
  })
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]
}
const median = (xs) => pct(xs, 50)

async function scriptCalls(admin) {
  const info = await admin.info('commandstats')
  let n = 0
  for (const c of ['evalsha', 'eval']) {
    const m = new RegExp(`cmdstat_${c}:calls=(\\d+)`).exec(info)
    if (m) n += Number(m[1])
  }
  return n
}

// Pairs served in the other order than their first call reached Redis
// (by more than 1 ms).
function inversions(rows) {
  const byFirst = [...rows].sort((a, b) => a.first - b.first)
  let n = 0
  for (let i = 0; i < byFirst.length; i++) {
    for (let j = i + 1; j < byFirst.length; j++) if (byFirst[i].done > byFirst[j].done + 1) n++
  }
  return n
}

// The k-th acquisition (0-based, by completion) is allowed at
// start + max(0, k + 1 − burst) / rate: lateness is its completion after that.
function lateness(rows, start) {
  const done = rows.map((r) => r.done).sort((a, b) => a - b)
  return done.map((t, k) => Math.max(0, t - (start + (Math.max(0, k + 1 - BURST) * 1000) / RATE)))
}

// INSTANCES limiters in Redis, each with a client of its own, and the
// function that closes the clients.
async function redisLimiters(port) {
  const cs = []
  for (let i = 0; i < INSTANCES; i++) {
    const c = new IORedis({ host: '127.0.0.1', port })
    await c.ping()
    cs.push(c)
  }
  const lims = cs.map((client) => rb.redis.TokenBucket({ client, rate: `${RATE}/s burst ${BURST}`, timeout: 1 }))
  return { lims, close: async () => cs.forEach((c) => c.disconnect()) }
}

// Every limiter takes EACH acquisitions, one after another, all limiters at
// once (`acquireOne(lim)`, which may return the moment the acquisition was
// due: then how late it woke goes to `wake`). The script calls Redis ran,
// when each acquisition was asked for and done, the start and the total
// (ms); `close()` after.
async function measure(admin, limiters, acquireOne, close) {
  const before = await scriptCalls(admin)
  const rows = []
  const wake = []
  const start = now()
  await Promise.all(
    limiters.map(async (lim) => {
      for (let i = 0; i < EACH; i++) {
        const first = now()
        const due = await acquireOne(lim)
        const done = now()
        if (due !== undefined) wake.push(done - due)
        rows.push({ first, done })
      }
    }),
  )
  const row = { calls: (await scriptCalls(admin)) - before, rows, start, wake, total: now() - start }
  await close()
  return row
}

async function ratebound(port, admin, key) {
  const { lims, close } = await redisLimiters(port)
  const acquireOne = async (lim) => {
    const r = await lim.reserve(key, 1, { maxWait: 60 })
    const due = now() + r.delay * 1000
    // As acquire does: whole milliseconds, rounded up (never early).
    if (r.delay > 0) await sleep(Math.ceil(r.delay * 1000))
    return due
  }
  return measure(admin, lims, acquireOne, close)
}

async function polling(port, admin, key) {
  const { lims, close } = await redisLimiters(port)
  const acquireOne = async (lim) => {
    for (;;) {
      const d = await lim.check(key)
      if (d.allowed) break
      await sleep(d.retryAfter * 1000)
    }
  }
  return measure(admin, lims, acquireOne, close)
}

async function bottleneck(port, admin, key) {
  const id = `bn-${key}`
  const limiters = []
  for (let i = 0; i < INSTANCES; i++) {
    const b = new Bottleneck({
      id,
      datastore: 'ioredis',
      clearDatastore: false,
      clientOptions: { host: '127.0.0.1', port },
      minTime: 1000 / RATE,
      maxConcurrent: null,
    })
    await b.ready()
    limiters.push(b)
  }
  const close = async () => {
    for (const b of limiters) await b.disconnect()
  }
  return measure(admin, limiters, (b) => b.schedule(async () => {}), close)
}

async function main() {
  const port = await freePort()
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rb-wait-bench-'))
  const server = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' })
  const admin = new IORedis({ host: '127.0.0.1', port, retryStrategy: () => 50 })
  admin.on('error', () => {}) // refused until the server listens
  for (let i = 0; i < 200; i++) {
    try {
      await admin.ping()
      break
    } catch {
      await sleep(25)
    }
  }
  try {
    const results = { ratebound: [], polling: [], bottleneck: [] }
    for (let round = 0; round < ROUNDS; round++) {
      for (const [name, run] of Object.entries({ ratebound, polling, bottleneck })) {
        const key = `wait-${name}-${round}-${Date.now()}`
        results[name].push(await run(port, admin, key))
        await sleep(200)
      }
    }
    const n = INSTANCES * EACH
    console.log(`# waiting: ${INSTANCES} instances × ${EACH} acquisitions, ${RATE}/s burst ${BURST}, one key; median of ${ROUNDS} rounds`)
    console.log('| way | script calls / acquisition | served after the limit allowed, p50 / p99 (ms) | order inversions | total s (ideal ' + ((n - BURST) / RATE).toFixed(2) + ') |')
    console.log('| --- | ---: | ---: | ---: | ---: |')
    for (const [name, rs] of Object.entries(results)) {
      const calls = median(rs.map((r) => r.calls / n))
      const late = rs.map((r) => lateness(r.rows, r.start))
      const p50 = median(late.map((l) => pct(l, 50)))
      const p99 = median(late.map((l) => pct(l, 99)))
      const inv = median(rs.map((r) => inversions(r.rows)))
      const total = median(rs.map((r) => r.total / 1000))
      console.log(`| ${name} | ${calls.toFixed(2)} | ${p50.toFixed(2)} / ${p99.toFixed(2)} | ${inv} | ${total.toFixed(2)} |`)
    }
    const wake = results.ratebound.map((r) => r.wake)
    console.log(
      `ratebound: wake-up after the reserved moment p50 ${median(wake.map((w) => pct(w, 50))).toFixed(2)} ms, p99 ${median(wake.map((w) => pct(w, 99))).toFixed(2)} ms (goal ≤ 2 ms)`,
    )
  } finally {
    admin.disconnect()
    server.kill()
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
