// Limits shared by processes through a file-backed memory map: real child
// processes, SIGKILL in the middle of a run, and bad files.
const { test } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const rb = require('..')
const { get, expressAndFastify } = require('./fixtures/http.js')

const WORKER = path.join(__dirname, 'fixtures', 'shared-worker.js')

function tmpdir() {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'rb-shm-'))
}

function run(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [WORKER, ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout.on('data', (d) => (out += d))
    child.on('error', reject)
    child.on('exit', (code) => {
      const m = /admitted=(\d+)/.exec(out)
      if (code !== 0 || !m) reject(new Error(`worker exited ${code}: ${out}`))
      else resolve(Number(m[1]))
    })
  })
}

test('four processes share one burst exactly', async () => {
  const file = path.join(tmpdir(), 'api.limit')
  const counts = await Promise.all([0, 1, 2, 3].map(() => run(['count', file, '5000'])))
  assert.equal(counts.reduce((a, b) => a + b, 0), 500)
  const tb = new rb.SharedTokenBucket({ path: file, rate: '1/h', burst: 500 })
  assert.equal(tb.available(), 0)
  assert.equal(fs.statSync(file).mode & 0o777, 0o600)
})

test('on the real clock processes stay within burst + rate x elapsed', async () => {
  const file = path.join(tmpdir(), 'rate.limit')
  // The workers load the addon first; the bound is measured from before
  // they start, so it only grows.
  const start = process.hrtime.bigint()
  const counts = await Promise.all([0, 1, 2, 3].map(() => run(['rate', file, '300'])))
  const elapsed = Number(process.hrtime.bigint() - start) / 1e9
  const total = counts.reduce((a, b) => a + b, 0)
  assert.ok(total <= 50 + 2000 * elapsed, `${total} admitted in ${elapsed} s`)
  assert.ok(total > 150, `${total} admitted: they shared the refill too`)
})

test('keyed processes share each key\'s burst', async () => {
  const file = path.join(tmpdir(), 'keyed.limit')
  const counts = await Promise.all([0, 1, 2, 3].map(() => run(['keyed', file, '5000'])))
  assert.equal(counts.reduce((a, b) => a + b, 0), 50 * 10)
  const k = new rb.SharedKeyedLimiter({ path: file, rate: '1/h', burst: 10, maxKeys: 1000 })
  assert.equal(k.size, 50)
  assert.equal(k.available('client-7'), 0)
  assert.equal(k.available('client-new'), 10)
  assert.equal(k.available(Buffer.from('client-7')), 10, 'a string and its bytes are two keys')
})

test('SIGKILL during a run keeps the bound and the table usable', async () => {
  const dir = tmpdir()
  // KEYS keys of one token each: the workers race through them (each from
  // key 0), claiming slots, while they are being killed (measured: about
  // 370 000 are reached, so the last kill still lands mid-run). The file
  // is 32 MB: removed when the test passes.
  const KEYS = 1000000
  const file = path.join(dir, 'kill.limit')
  const logs = []
  const children = []
  // A worker, once it has opened the limiter (it says so on stdout): on a
  // busy machine loading the addon can take far longer than any fixed
  // pause, and a worker killed before it starts tests nothing. Bounded: 30 s.
  const start = () => {
    const log = path.join(dir, `log-${logs.length}`)
    logs.push(log)
    const c = spawn(process.execPath, [WORKER, 'forever', file, log, String(KEYS)], { stdio: ['ignore', 'pipe', 'inherit'] })
    children.push(c)
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`worker ${log} not ready in 30 s`)), 30000)
      c.stdout.once('data', () => {
        clearTimeout(timer)
        resolve(c)
      })
      c.once('exit', (code) => {
        clearTimeout(timer)
        reject(new Error(`worker ${log} exited (${code}) before it was ready`))
      })
    })
  }
  const exited = (c) => new Promise((resolve) => (c.exitCode !== null || c.signalCode !== null ? resolve() : c.on('exit', resolve)))
  try {
    const live = [await start(), await start(), await start()]
    for (let round = 0; round < 6; round++) {
      await new Promise((r) => setTimeout(r, 20))
      const victim = live.splice(round % live.length, 1)[0]
      victim.kill('SIGKILL')
      await exited(victim)
      live.push(await start())
    }
    await new Promise((r) => setTimeout(r, 50))
  } finally {
    // Every worker dies, whatever failed above.
    for (const c of children) {
      c.kill('SIGKILL')
      await exited(c)
    }
  }
  const logged = new Uint32Array(KEYS)
  for (const l of logs.filter((l) => fs.existsSync(l))) {
    // A kill mid-line leaves a partial last line: not counted.
    for (const line of fs.readFileSync(l, 'utf8').split('\n').slice(0, -1)) logged[Number(line)]++
  }
  const k = new rb.SharedKeyedLimiter({ path: file, rate: '1/h', burst: 1, maxKeys: KEYS })
  // Each key's one token was taken at most once, by whichever process, and
  // every logged admission is counted.
  const over = []
  let total = 0
  for (let key = 0; key < KEYS; key++) {
    if (logged[key] > 1 - k.available(key)) over.push([key, logged[key]])
    total += logged[key]
  }
  assert.deepEqual(over.slice(0, 10), [])
  assert.ok(total > 0 && k.size > 0 && k.size <= k.slots, `${total} logged, ${k.size} keys held`)
  // A new worker keeps working on the same table: a new key is admitted (it
  // claims a free slot), an exhausted one refused.
  assert.equal(k.tryAcquire('after-the-kills'), true)
  assert.equal(logged[0], 1, 'key 0, first for every worker, was admitted once')
  assert.equal(k.tryAcquire(0), false)
  fs.rmSync(dir, { recursive: true })
})

test('bad files and options are clear errors', () => {
  const dir = tmpdir()
  const file = path.join(dir, 'x.limit')
  new rb.SharedTokenBucket({ path: file, rate: 10, burst: 10 })
  assert.throws(() => new rb.SharedTokenBucket({ path: file, rate: 10, burst: 20 }), {
    code: 'ERR_RATEBOUND_SHM_MISMATCH',
    message: /burst 10, not 20/,
  })
  assert.throws(() => new rb.SharedKeyedLimiter({ path: file, rate: 10, burst: 10, maxKeys: 5 }), {
    code: 'ERR_RATEBOUND_SHM_MISMATCH',
    message: /mode/,
  })
  const whole = fs.readFileSync(file)
  fs.writeFileSync(file, Buffer.concat([Buffer.from('GARBAGE!'), whole.subarray(8)]))
  assert.throws(() => new rb.SharedTokenBucket({ path: file, rate: 10, burst: 10 }), {
    code: 'ERR_RATEBOUND_SHM_CORRUPT',
    message: /magic/,
  })
  fs.writeFileSync(file, whole.subarray(0, whole.length - 8))
  assert.throws(() => new rb.SharedTokenBucket({ path: file, rate: 10, burst: 10 }), {
    code: 'ERR_RATEBOUND_SHM_CORRUPT',
    message: /truncated/,
  })
  fs.writeFileSync(file, whole)
  fs.chmodSync(file, 0o644)
  assert.throws(() => new rb.SharedTokenBucket({ path: file, rate: 10, burst: 10 }), {
    code: 'ERR_RATEBOUND_SHM_PERMISSIONS',
    message: /mode 644/,
  })
  fs.chmodSync(file, 0o600)
  new rb.SharedTokenBucket({ path: file, rate: 10, burst: 10 })
  assert.throws(() => new rb.SharedTokenBucket({ path: path.join(dir, 'nope', 'x'), rate: 10 }), {
    code: 'ERR_RATEBOUND_SHM_IO',
    message: /does not exist/,
  })
  assert.throws(() => new rb.SharedTokenBucket({ path: path.join(dir, 'y'), rate: -1 }), RangeError)
  assert.throws(() => new rb.SharedTokenBucket({ path: path.join(dir, 'y'), rate: null }), {
    name: 'TypeError',
    code: 'ERR_RATEBOUND_MISSING',
  })
  assert.throws(() => new rb.SharedKeyedLimiter({ path: path.join(dir, 'z'), rate: 1, maxKeys: 0 }), RangeError)
  assert.throws(() => new rb.SharedTokenBucket({ path: file, rate: 10, burst: 10 }).check(11), {
    code: 'ERR_RATEBOUND_INSUFFICIENT_CAPACITY',
  })
  assert.equal(fs.existsSync(path.join(dir, 'y')), false)
})

test('examples/cluster.js: four cluster workers share one per-client limit', async () => {
  const net = require('node:net')
  const port = await new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = s.address().port
      s.close(() => resolve(p))
    })
  })
  const file = path.join(tmpdir(), 'clients.limit')
  const child = spawn(process.execPath, [path.join(__dirname, '..', 'examples', 'cluster.js')], {
    env: { ...process.env, RATEBOUND_LIMIT_FILE: file, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  try {
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('cluster did not start')), 10000)
      child.stdout.on('data', (d) => {
        if (String(d).includes('ready')) {
          clearTimeout(timer)
          resolve()
        }
      })
    })
    const statuses = []
    for (let i = 0; i < 20; i++) {
      const res = await fetch(`http://127.0.0.1:${port}/`, { headers: { 'x-api-key': 'alice', connection: 'close' } })
      statuses.push(res.status)
      await res.text()
      if (res.status === 429) assert.ok(Number(res.headers.get('retry-after')) >= 1)
    }
    assert.equal(statuses.filter((s) => s === 200).length, 5, `${statuses}`)
    assert.equal(statuses.filter((s) => s === 429).length, 15, `${statuses}`)
  } finally {
    child.kill('SIGTERM')
    await new Promise((resolve) => child.on('exit', resolve))
  }
})

test('a SharedKeyedLimiter is a middleware policy: Express and Fastify share it', async () => {
  const file = path.join(tmpdir(), 'clients.limit')
  const shared = () => new rb.SharedKeyedLimiter({ path: file, rate: '1/h', burst: 2, maxKeys: 1000 })
  const { portA, portB, close } = await expressAndFastify(
    { policies: [{ name: 'local', rate: 100 }, shared()], key: { header: 'x-api-key' } },
    { policies: [{ name: 'clients', limiter: shared() }], key: { header: 'x-api-key' } },
  )
  try {
    const first = await get(portA, { 'x-api-key': 'alice' })
    assert.equal(first.status, 200)
    assert.equal(first.headers['ratelimit-policy'], '"local";q=100;w=1, "host";q=2;w=7200')
    assert.equal((await get(portB, { 'x-api-key': 'alice' })).status, 200)
    const third = await get(portA, { 'x-api-key': 'alice' })
    assert.equal(third.status, 429)
    assert.ok(Number(third.headers['retry-after']) > 3500)
    assert.equal((await get(portB, { 'x-api-key': 'alice' })).status, 429)
    assert.equal((await get(portB, { 'x-api-key': 'bob' })).status, 200)
    // Python's middleware keys the same request the same way: one file can
    // serve workers of both languages.
    assert.equal(shared().available(Buffer.from('key:alice')), 0)
  } finally {
    await close()
  }
})

test('a full SharedKeyedLimiter policy answers 503 (Retry-After 1) in Express and Fastify, never 500', async () => {
  const table = (name) => new rb.SharedKeyedLimiter({ path: path.join(tmpdir(), `${name}.limit`), rate: '1/h', burst: 100, maxKeys: 8 })
  const tableA = table('express-full')
  const tableB = table('fastify-full')
  const { portA, portB, close } = await expressAndFastify(
    { policies: [tableA], key: { header: 'x-api-key' } },
    { policies: [tableB], key: { header: 'x-api-key' } },
  )
  try {
    for (const [port, t] of [[portA, tableA], [portB, tableB]]) {
      const counts = new Map()
      for (let i = 0; i < 150; i++) {
        const r = await get(port, { 'x-api-key': `user-${i}` })
        counts.set(r.status, (counts.get(r.status) ?? 0) + 1)
        if (r.status === 503) {
          assert.equal(r.headers['retry-after'], '1')
          assert.match(r.body, /too many clients/)
        }
      }
      assert.deepEqual([...counts.keys()].sort(), [200, 503], JSON.stringify([...counts]))
      assert.ok(counts.get(200) >= 8 && counts.get(200) <= t.slots, JSON.stringify([...counts]))
      // A client the table holds is still served.
      assert.equal((await get(port, { 'x-api-key': 'user-0' })).status, 200)
    }
  } finally {
    await close()
  }
})

// Waiting on a shared limiter (issue 23): acquire, reserve, pause.

// A child process running `script` (which gets `rb`, the file and `args`);
// its stdout lines.
function child(script, file, args = []) {
  const code = `const rb = require(${JSON.stringify(require.resolve('..'))});\n` +
    `const [file, ...args] = process.argv.slice(1);\n(async () => {\n${script}\n})().catch((e) => { console.error(e); process.exit(1) })`
  return spawn(process.execPath, ['-e', code, file, ...args.map(String)], { stdio: ['ignore', 'pipe', 'inherit'] })
}

function lines(c) {
  return new Promise((resolve, reject) => {
    let out = ''
    c.stdout.on('data', (d) => (out += d))
    c.on('error', reject)
    c.on('exit', (code) => (code === 0 ? resolve(out.trim().split('\n')) : reject(new Error(`child exited ${code}: ${out}`))))
  })
}

const now = () => process.hrtime.bigint() // CLOCK_MONOTONIC, the table's clock

for (const keyed of [false, true]) {
  test(`four processes acquiring through one file share one rate, never early (${keyed ? 'keyed' : 'bucket'})`, async () => {
    const file = path.join(tmpdir(), 'partner.limit')
    // Made (full) before the clock is read: no token is taken before start.
    if (keyed) new rb.SharedKeyedLimiter({ path: file, rate: 20, burst: 2, maxKeys: 8 })
    else new rb.SharedTokenBucket({ path: file, rate: 20, burst: 2 })
    const start = now()
    const script = keyed
      ? `const k = new rb.SharedKeyedLimiter({ path: file, rate: 20, burst: 2, maxKeys: 8 })
         for (let i = 0; i < 5; i++) { await k.acquire('partner', 1, { timeout: 60 }); console.log(String(process.hrtime.bigint())) }`
      : `const tb = new rb.SharedTokenBucket({ path: file, rate: 20, burst: 2 })
         for (let i = 0; i < 5; i++) { await tb.acquire(1, { timeout: 60 }); console.log(String(process.hrtime.bigint())) }`
    const outs = await Promise.all([0, 1, 2, 3].map(() => lines(child(script, file))))
    const done = outs.flat().map(BigInt).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
    assert.equal(done.length, 20)
    // 20 tokens at 20/s, burst 2: the i-th (from 0) never before
    // start + (i + 1 - 2) * 50 ms.
    done.forEach((t, i) => {
      const due = start + BigInt(Math.max(i + 1 - 2, 0)) * 50_000_000n
      assert.ok(t >= due, `acquisition ${i} at +${(t - start) / 1_000_000n} ms, due +${(due - start) / 1_000_000n} ms`)
    })
  })
}

test('kill -9 of a waiting process loses only its own reservation', async () => {
  const file = path.join(tmpdir(), 'kill.limit')
  const tb = new rb.SharedTokenBucket({ path: file, rate: 1, burst: 5 })
  const a0 = now()
  assert.ok(tb.check(5).allowed) // the burst, at t0 in [a0, b0]
  const b0 = now()
  const c = child(`const tb = new rb.SharedTokenBucket({ path: file, rate: 1, burst: 5 })
    const w = tb.waiter(5)
    if (tb.waitStep(w)[0] !== 2) throw new Error('not reserved')
    console.log('reserved')
    setTimeout(() => {}, 60_000)`, file)
  await new Promise((resolve, reject) => {
    c.stdout.on('data', (d) => String(d).includes('reserved') && resolve())
    c.on('exit', (code) => reject(new Error(`child exited ${code}`)))
  })
  const exited = new Promise((resolve) => c.on('exit', resolve))
  c.kill('SIGKILL')
  await exited
  const bracket = (a, b, delay) => {
    // Its 5 tokens stay taken, nothing more: one more is due at t0 + 6 s.
    const lo = Number(a0 + 6_000_000_000n - b) / 1e9 - 1e-6
    const hi = Number(b0 + 6_000_000_000n - a) / 1e9 + 1e-6
    assert.ok(lo <= delay && delay <= hi, `${delay} not in [${lo}, ${hi}]`)
  }
  let a1 = now()
  let r = tb.reserve(1, 60)
  bracket(a1, now(), r.delay)
  r.cancel()
  // An aborted wait gives its reservation back: the same slot again.
  const ac = new AbortController()
  const waiting = tb.acquire(2, { signal: ac.signal })
  ac.abort()
  await assert.rejects(waiting, { name: 'AbortError' })
  a1 = now()
  r = tb.reserve(1, 60)
  bracket(a1, now(), r.delay)
})

test('an aborted shared acquire gives its reservation back', async () => {
  // One token per 10 s: the waiter's slot is 10 s ahead, far more than the
  // test takes on a loaded machine.
  const tb = new rb.SharedTokenBucket({ path: path.join(tmpdir(), 'abort.limit'), rate: 0.1, burst: 1 })
  assert.ok(tb.tryAcquire())
  const ac = new AbortController()
  const waiting = tb.acquire(1, { signal: ac.signal })
  await new Promise((r) => setTimeout(r, 50))
  let probe = tb.reserve(1, 60)
  assert.ok(probe.delay > 15, `behind the waiter: ${probe.delay}`)
  probe.cancel()
  ac.abort()
  await assert.rejects(waiting, { name: 'AbortError' })
  probe = tb.reserve(1, 60)
  assert.ok(probe.delay <= 10, `given back: ${probe.delay}`)
  probe.cancel()
})

test('shared waits beyond their timeout fail at once, taking nothing', async () => {
  const dir = tmpdir()
  const tb = new rb.SharedTokenBucket({ path: path.join(dir, 't.limit'), rate: '1/h', burst: 1 })
  await tb.acquire(1, { timeout: 0 })
  // An hour away: never slept.
  await assert.rejects(tb.acquire(1, { timeout: 1800 }), (e) => e instanceof rb.RateLimitExceededError && e.retryAfter > 1800)
  assert.throws(() => tb.reserve(1, 1800), { code: 'ERR_RATEBOUND_DEADLINE_EXCEEDED' })
  const r = tb.reserve(1, 7200)
  assert.ok(r.delay <= 3600, 'nothing was taken by the refusals')
  r.cancel()
  const k = new rb.SharedKeyedLimiter({ path: path.join(dir, 'k.limit'), rate: '1/h', burst: 1, maxKeys: 8 })
  await k.acquire('a')
  await assert.rejects(k.acquire('a', 1, { timeout: 1800 }), rb.RateLimitExceededError)
  await k.acquire('b', 1, { timeout: 0 }) // its own bucket
})

test('shared pause empties the bucket for every handle; bad input is typed', async () => {
  const dir = tmpdir()
  const file = path.join(dir, 'p.limit')
  const a = new rb.SharedTokenBucket({ path: file, rate: 2, burst: 3 })
  const b = new rb.SharedTokenBucket({ path: file, rate: 2, burst: 3 })
  const start = now()
  a.pause(1)
  const d = b.check()
  const elapsed = Number(now() - start) / 1e9
  assert.equal(d.allowed, false)
  // Empty until 1 s, then one token every 0.5 s.
  assert.ok(1.5 - elapsed - 1e-6 <= d.retryAfter && d.retryAfter <= 1.5, `${d.retryAfter}`)
  const k = new rb.SharedKeyedLimiter({ path: path.join(dir, 'k.limit'), rate: 2, burst: 3, maxKeys: 8 })
  k.pause('alice', 1)
  assert.equal(k.check('alice').allowed, false)
  assert.equal(k.check('bob').allowed, true)
  for (const bad of [-1, NaN, Infinity, -Infinity]) {
    assert.throws(() => a.pause(bad), { name: 'RangeError', code: 'ERR_RATEBOUND_INVALID_NUMBER' })
    assert.throws(() => k.pause('a', bad), { name: 'RangeError', code: 'ERR_RATEBOUND_INVALID_NUMBER' })
    await assert.rejects(a.acquire(1, { timeout: bad }), { code: 'ERR_RATEBOUND_INVALID_NUMBER' })
    await assert.rejects(k.acquire('a', 1, { timeout: bad }), { code: 'ERR_RATEBOUND_INVALID_NUMBER' })
  }
  await assert.rejects(a.acquire(4), { code: 'ERR_RATEBOUND_INSUFFICIENT_CAPACITY' })
  await assert.rejects(k.acquire('a', 4), { code: 'ERR_RATEBOUND_INSUFFICIENT_CAPACITY' })
  const w = new rb.SharedKeyedLimiter({ path: path.join(dir, 'w.limit'), algorithm: 'fixed_window', limit: 2, window: 0.2, maxKeys: 8 })
  assert.throws(() => w.pause('a', 1), { name: 'TypeError', code: 'ERR_RATEBOUND_UNSUPPORTED' })
  // A window sleeps its retryAfter and decides again.
  const s = now()
  for (let i = 0; i < 3; i++) await w.acquire('a', 1, { timeout: 5 })
  const nextWindow = (s / 200_000_000n + 1n) * 200_000_000n
  assert.ok(now() >= nextWindow, 'the third waited for the next window')
})

test("a shared table's default room is the core's DEFAULT_SHARED_MAX_KEYS, as in Python", () => {
  // 10 000 keys, 2 slots each (test_shared.py: the same 20 000 slots).
  const k = new rb.SharedKeyedLimiter({ path: path.join(tmpdir(), 'default.limit'), rate: 1 })
  assert.equal(k.slots, 20_000)
})
