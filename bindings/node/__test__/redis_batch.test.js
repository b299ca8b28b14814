'use strict'
// The Redis driver's hot path against REAL Redis servers this file starts
// itself (127.0.0.1, free ports, no persistence; a 3-master cluster too):
// batching — checks that wait while others are in flight go out as one
// script run, each key decided exactly as separate calls in that order —
// gives the same answers as one call a check (spec vectors, bursts on a few
// keys, reservations), per hash slot on a cluster and never CROSSSLOT; the
// one deadline wheel a limiter keeps expires many calls in flight at their
// deadline (CLIENT PAUSE) and never keeps the process alive; the raw entry
// points refuse bad input with typed errors. Every loop is bounded.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const { once } = require('node:events')
const crypto = require('node:crypto')
const fs = require('node:fs')
const path = require('node:path')
const IORedis = require('ioredis')
const rb = require('..')
const { sleep, now, unhandledRejections, clientsAndBatches } = require('./fixtures/common.js')
const native = require('../index.js')

const SPEC = path.join(__dirname, '..', '..', '..', 'spec', 'redis.json')

// Every rejection nobody handled, anywhere in this file: there must be none.
const unhandled = unhandledRejections()

const { HOST, startServer, startCluster, cli } = require('./fixtures/redis-server.js')
const { dropClient, closeAll, ioredis, CLIENTS, clusterClients, randomKey, limiterFor, specDifferences, main, commandCalls } = require('./fixtures/redis-clients.js')

after(closeAll)

// ------------------------------------------------------------- spec vectors

// How many steps of the vectors go in batches when each instant's steps
// are asked at once: all g of them in one, when they are two or more (no
// batch when leasing; no instant has the 8 steps that would make two).
function expectBatched(vectors) {
  let n = 0
  for (const v of vectors) {
    let lease = v.config.lease
    let i = 0
    while (i < v.steps.length) {
      if (v.steps[i].config !== undefined) lease = v.steps[i].config.lease
      let j = i + 1
      while (!lease && j < v.steps.length && v.steps[j].at_us === v.steps[i].at_us && v.steps[j].config === undefined) j++
      if (j - i >= 2) n += j - i
      i = j
    }
  }
  return n
}

test('batching: spec/redis.json with the steps of one instant sent together — zero differences, in batches', async () => {
  const server = await main()
  const { vectors } = JSON.parse(fs.readFileSync(SPEC, 'utf8'))
  for (const [kind, connect] of Object.entries(CLIENTS)) {
    const client = await connect(server.port)
    const failures = []
    let steps = 0
    let batched = 0
    for (const v of vectors) {
      let config = v.config
      let lim = limiterFor(config, client)
      const key = randomKey(v.id)
      let i = 0
      while (i < v.steps.length) {
        if (v.steps[i].config !== undefined) {
          await lim.close()
          config = v.steps[i].config
          lim = limiterFor(config, client)
        }
        // This instant's steps (up to a redeploy), all at once; one at a
        // time when leasing (its bookkeeping is kept between calls).
        const at = v.steps[i].at_us
        let j = i + 1
        while (!config.lease && j < v.steps.length && v.steps[j].at_us === at && v.steps[j].config === undefined) j++
        const before = lim.stats.batched
        const answers = await Promise.all(v.steps.slice(i, j).map((step) => lim.checkAt(key, step.n ?? 1, at)))
        batched += lim.stats.batched - before
        for (const [k, d] of answers.entries()) {
          const step = v.steps[i + k]
          steps++
          failures.push(...specDifferences(`${v.id} step ${i + k}`, step.expect, d))
        }
        i = j
      }
      await lim.close()
    }
    assert.deepEqual(failures, [], `${kind}: differences from spec/redis.json`)
    assert.equal(steps, vectors.reduce((sum, v) => sum + v.steps.length, 0))
    assert.equal(batched, expectBatched(vectors), `${kind}: ${batched} of ${steps} steps went in batches`)
    console.log(`# spec/redis.json batched (${kind}): ${steps} steps, ${batched} of them in batches, zero differences`)
    dropClient(client)
  }
})

// -------------------------------------------------------------- bursts

test('batching: a burst of concurrent checks on a few keys admits exactly the burst, batched and not', async () => {
  const server = await main()
  const KEYS = 4
  const PER_KEY = 150
  const BURST = 40
  for (const [kind, connect] of Object.entries(CLIENTS)) {
    const client = await connect(server.port)
    const seen = {}
    for (const batch of [false, true]) {
      for (const [algorithm, make] of [
        ['token_bucket', () => new rb.redis.TokenBucket({ client, rate: 0.001, burst: BURST, onError: 'closed', timeout: 2, batch })],
        ['fixed_window', () => new rb.redis.FixedWindow({ client, limit: BURST, window: 3600, onError: 'closed', timeout: 2, batch })],
        ['sliding_window', () => new rb.redis.SlidingWindow({ client, limit: BURST, window: 3600, onError: 'closed', timeout: 2, batch })],
      ]) {
        const lim = make()
        const keys = Array.from({ length: KEYS }, (_, i) => randomKey(`burst-${i}`))
        const before = await commandCalls(server.port, 'evalsha', 'eval')
        // Interleaved: key 0, 1, 2, 3, 0, 1, ... all at once.
        const asked = []
        for (let i = 0; i < PER_KEY; i++) for (const k of keys) asked.push([k, lim.check(k)])
        const answers = await Promise.all(asked.map(([, p]) => p))
        const used = (await commandCalls(server.port, 'evalsha', 'eval')) - before
        const label = `${kind} ${algorithm} batch ${batch}`
        assert.deepEqual([...new Set(answers.map((d) => d.source))], ['redis'], label)
        for (const k of keys) {
          const mine = answers.filter((_, i) => asked[i][0] === k)
          const admitted = mine.filter((d) => d.allowed)
          assert.equal(admitted.length, BURST, `${label}: ${k} admitted exactly the burst`)
          // Each key's answers in the order asked: BURST admissions counting
          // down, then refusals (the order calls reached Redis is the order
          // they were asked).
          assert.deepEqual(
            mine.map((d) => d.remaining),
            [...Array.from({ length: BURST }, (_, i) => BURST - 1 - i), ...Array(PER_KEY - BURST).fill(0)],
            label,
          )
          assert.ok(mine.slice(0, BURST).every((d) => d.allowed) && mine.slice(BURST).every((d) => !d.allowed), label)
        }
        const s = lim.stats
        if (batch) {
          assert.ok(s.batches > 0 && s.batched > KEYS * PER_KEY / 2, `${label}: ${JSON.stringify(s)}`)
          assert.ok(used < KEYS * PER_KEY / 2, `${label}: ${used} script runs for ${KEYS * PER_KEY} checks`)
        } else {
          assert.equal(s.batches, 0, label)
          assert.equal(s.calls, KEYS * PER_KEY, label)
          assert.equal(used, KEYS * PER_KEY, label)
        }
        assert.equal(s.calls, used - s.evals, `${label}: every call reached Redis once`)
        seen[`${algorithm} ${batch}`] = answers.map((d) => [d.allowed, d.remaining, d.retryAfter > 0])
      }
    }
    // Batched and unbatched: the very same answers, check by check (the
    // retry times differ with the moment; whether there is one does not).
    for (const algorithm of ['token_bucket', 'fixed_window', 'sliding_window']) {
      assert.deepEqual(seen[`${algorithm} true`], seen[`${algorithm} false`], `${kind} ${algorithm}`)
    }
    dropClient(client)
  }
})

test('batching: checks of different n in one batch — each its own arguments, the answers of one call each', async () => {
  const server = await main()
  const ns = [1, 3, 2, 5, 1, 4, 2, 2, 3, 1]
  for (const [kind, connect] of Object.entries(CLIENTS)) {
    const client = await connect(server.port)
    const answers = {}
    for (const batch of [false, true]) {
      const lim = new rb.redis.TokenBucket({ client, rate: 0.001, burst: 50, onError: 'closed', timeout: 2, batch })
      const key = randomKey('mixed-n')
      // One key, 40 checks asking 1 to 5 tokens, all at once (templates of
      // five kinds in one batch), then the same at an explicit time (no
      // template: the engine lays the batch out).
      const asked = Array.from({ length: 40 }, (_, i) => ns[i % ns.length])
      const live = await Promise.all(asked.map((n) => lim.check(key, n)))
      const at = await Promise.all(asked.map((n) => lim.checkAt(`${key}-at`, n, 1_700_000_000_000_000)))
      if (batch) assert.ok(lim.stats.batches >= 2, `${kind}: ${JSON.stringify(lim.stats)}`)
      answers[batch] = [live, at].map((ds) => ds.map((d) => `${d.allowed} ${d.remaining} ${d.source}`))
      // 50 tokens: admitted in order while they last.
      let left = 50
      const want = asked.map((n) => (n <= left ? `true ${(left -= n)} redis` : `false ${left} redis`))
      assert.deepEqual(answers[batch][0], want, `${kind} batch ${batch}`)
    }
    assert.deepEqual(answers[true], answers[false], kind)
    dropClient(client)
  }
})

test('batching: concurrent reservations take consecutive slots, batched and not; cancel gives each back', async () => {
  const server = await main()
  for (const [kind, connect] of Object.entries(CLIENTS)) {
    const client = await connect(server.port)
    for (const batch of [false, true]) {
      // Slots 100 ms apart: a give-back counts only while its slot is
      // still ahead, and the cancels below reach Redis well within 100 ms
      // even on a loaded machine (at 10 ms apart the last of them, the
      // earliest slots, sometimes came too late).
      const lim = new rb.redis.TokenBucket({ client, rate: 10, burst: 1, onError: 'closed', timeout: 2, batch })
      const key = randomKey('slots')
      const rs = await Promise.all(Array.from({ length: 30 }, () => lim.reserve(key, 1, { maxWait: 10 })))
      const label = `${kind} batch ${batch}`
      // In the order asked, slot i is due 100 ms × i after the first: its
      // delay is that less the time its call reached Redis after the
      // first's — a time that never goes back in the order asked, and is
      // one for the members of one batch (one script run, one TIME). The
      // 30 go as two batches of 15.
      const delays = rs.map((r) => r.delay)
      const reached = delays.map((d, i) => Math.round((0.1 * i - d) * 1e6))
      reached.forEach((t, i) => assert.ok(t >= 0 && (i === 0 || t >= reached[i - 1]), `${label}: slot ${i}: ${delays}`))
      if (batch) {
        assert.deepEqual([lim.stats.batches, lim.stats.batched], [2, 30], label)
        assert.deepEqual([new Set(reached.slice(0, 15)).size, new Set(reached.slice(15)).size], [1, 1], `${label}: one batch, one clock: ${delays}`)
      }
      assert.deepEqual([...new Set(rs.map((r) => r.source))], ['redis'], label)
      // Give every slot but the first back, the last first (a give-back
      // counts only where nobody has built on it, so they chain in that
      // order): the next reservation is due within the first slot's 100 ms.
      const back = await Promise.all(rs.slice(1).reverse().map((r) => r.cancel()))
      assert.ok(back.every((b) => b === true), `${label}: ${back}`)
      const next = await lim.reserve(key, 1, { maxWait: 10 })
      assert.ok(next.delay <= 0.101, `${label}: after the cancels ${next.delay}`)
    }
    dropClient(client)
  }
})

// --------------------------------------------------------- the deadline wheel

test('deadline wheel: 300 checks in flight while Redis is paused all get the fail policy at their deadline', async () => {
  const server = await startServer()
  const lines = []
  for (const [kind, connect, batch] of clientsAndBatches(CLIENTS, [false, true])) {
    const client = await connect(server.port)
    // A high breaker threshold: every call goes to Redis and waits there.
    const lim = new rb.redis.TokenBucket({ client, rate: 100, burst: 100, onError: 'closed', timeout: 0.05, breakerThreshold: 100000, breakerCooldown: 0.2, batch })
    assert.equal((await lim.check('warm')).source, 'redis')
    // WRITE: the scripts stall, and this test's own CLIENT UNPAUSE goes
    // through once it has seen every answer (30 s would be the pause).
    assert.equal(await cli(server.port, 'CLIENT', 'PAUSE', '30000', 'WRITE'), 'OK')
    const records = []
    // Three waves of 100, 20 ms apart: many in flight at once, deadlines
    // spread over 40 ms.
    const waves = []
    for (let w = 0; w < 3; w++) {
      if (w > 0) await sleep(20)
      for (let i = 0; i < 100; i++) {
        const s = now()
        waves.push(lim.check(`k${w}-${i}`).then((d) => records.push({ took: now() - s, source: d.source, allowed: d.allowed })))
      }
    }
    await Promise.all(waves)
    const label = `${kind} batch ${batch}`
    assert.equal(records.length, 300, label)
    assert.deepEqual([...new Set(records.map((r) => `${r.source} ${r.allowed}`))], ['fail_closed false'], label)
    const took = records.map((r) => r.took).sort((a, b) => a - b)
    assert.ok(took[0] >= 49, `${label}: the first answer after ${took[0].toFixed(1)} ms, before its deadline`)
    // A liveness bound (2.5 s of slack) for a loaded machine, far below
    // the pause's end (an answer Redis gave after it would be 'redis'):
    // the exact instant is redis_deadline.test.js' (virtual time).
    assert.ok(took.at(-1) <= 50 + 2500, `${label}: the last answer after ${took.at(-1).toFixed(1)} ms`)
    assert.equal(lim.stats.timeouts, 300, `${label}: ${JSON.stringify(lim.stats)}`)
    lines.push(`${label}: ${took[0].toFixed(1)}–${took.at(-1).toFixed(1)} ms`)
    // After the pause, Redis answers again.
    assert.equal(await cli(server.port, 'CLIENT', 'UNPAUSE'), 'OK')
    for (let i = 0; ; i++) {
      const d = await lim.check('after')
      if (d.source === 'redis') break
      assert.ok(i < 100, `${label}: Redis answers after the pause`)
      await sleep(10)
    }
    dropClient(client)
  }
  console.log(`# deadline wheel, 300 checks in flight, deadline 50 ms: ${lines.join('; ')}`)
  await server.kill()
})

test('deadline wheel: a limiter with a 30 s deadline never keeps the process alive', async () => {
  const server = await main()
  const script = `
    const IORedis = require(${JSON.stringify(require.resolve('ioredis'))})
    const rb = require(${JSON.stringify(path.join(__dirname, '..'))})
    const client = new IORedis({ host: '127.0.0.1', port: ${server.port}, maxRetriesPerRequest: 0 })
    const lim = rb.redis.TokenBucket({ client, rate: 10, burst: 20, timeout: 30 })
    Promise.all([lim.check('a'), lim.check('b'), lim.check('c')]).then((ds) => {
      console.log(ds.map((d) => d.source).join(','))
      client.disconnect()
    })
  `
  const t0 = now()
  const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  child.stdout.on('data', (b) => (out += b))
  const timer = setTimeout(() => child.kill('SIGKILL'), 15000)
  const [code] = await once(child, 'exit')
  clearTimeout(timer)
  const took = now() - t0
  assert.equal(code, 0, out)
  assert.equal(out.trim(), 'redis,redis,redis')
  assert.ok(took < 10000, `the process exited ${took.toFixed(0)} ms after starting, not at the 30 s deadline`)
})

test('a limiter nobody holds any more still answers the checks it has in flight', async () => {
  const server = await startServer()
  // In a child with --expose-gc: the limiter is reachable from nowhere but
  // its calls in flight while Redis is paused and the heap is collected.
  const script = `
    const IORedis = require(${JSON.stringify(require.resolve('ioredis'))})
    const rb = require(${JSON.stringify(path.join(__dirname, '..'))})
    const failures = []
    process.on('unhandledRejection', (e) => failures.push(String(e)))
    process.on('uncaughtException', (e) => failures.push(String(e)))
    const client = new IORedis({ host: '127.0.0.1', port: ${server.port}, maxRetriesPerRequest: 0 })
    const ask = (batch) => {
      const lim = rb.redis.TokenBucket({ client, rate: 10, burst: 20, timeout: 3, batch })
      return Promise.all(Array.from({ length: 10 }, (_, i) => lim.check(batch + '-k' + i)))
    }
    ;(async () => {
      await client.ping()
      await client.call('CLIENT', 'PAUSE', '400', 'WRITE')
      const pending = [ask(false), ask(true)]
      for (let i = 0; i < 10; i++) {
        globalThis.gc()
        await new Promise((r) => setTimeout(r, 20))
      }
      // Limiters made meanwhile take the numbers the dropped ones freed, if any.
      for (let i = 0; i < 20; i++) rb.redis.TokenBucket({ client, rate: 1, burst: 1 })
      const answers = (await Promise.all(pending)).flat()
      await new Promise((r) => setTimeout(r, 50))
      console.log(JSON.stringify({ sources: [...new Set(answers.map((d) => d.source))], remaining: answers.map((d) => d.remaining), failures }))
      client.disconnect()
    })()
  `
  const child = spawn(process.execPath, ['--expose-gc', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  child.stdout.on('data', (b) => (out += b))
  const timer = setTimeout(() => child.kill('SIGKILL'), 15000)
  const [code] = await once(child, 'exit')
  clearTimeout(timer)
  assert.equal(code, 0, out)
  const got = JSON.parse(out)
  assert.deepEqual(got.failures, [])
  assert.deepEqual(got.sources, ['redis'])
  assert.deepEqual(got.remaining, Array(20).fill(19))
  await server.kill()
})

test('waits: one given up while another begins leaves the other alone', async () => {
  const server = await startServer()
  const client = await ioredis(server.port)
  for (const batch of [false, true]) {
    const lim = new rb.redis.TokenBucket({ client, rate: 10, burst: 1, onError: 'closed', timeout: 2, batch })
    const key = randomKey('given-up')
    assert.equal(await lim.acquire(key), 'redis') // the burst is spent
    const ac = new AbortController()
    const first = lim.acquire(key, 1, { signal: ac.signal }) // holds the next slot, asleep
    await sleep(20)
    // Redis holds every script run for 200 ms: the first wait's give-back,
    // then the second wait's reservation, begun after the first gave up.
    assert.equal(await cli(server.port, 'CLIENT', 'PAUSE', '200', 'WRITE'), 'OK')
    ac.abort()
    await new Promise((resolve) => setImmediate(resolve))
    const second = lim.acquire(key, 1, { timeout: 5 })
    await assert.rejects(first, (e) => e.name === 'AbortError')
    assert.equal(await second, 'redis', `batch ${batch}`)
  }
  dropClient(client)
  await server.kill()
})

// ------------------------------------------------------------------ faults

test('batching: SCRIPT FLUSH while batches are in flight — EVAL of the batch script, every decision from Redis', async () => {
  const server = await startServer()
  for (const [kind, connect] of Object.entries(CLIENTS)) {
    const client = await connect(server.port)
    const lim = new rb.redis.TokenBucket({ client, rate: 1e6, burst: 1e6, onError: 'closed', timeout: 1 })
    const sources = new Set()
    let n = 0
    const t0 = now()
    let flushed = 0
    let stop = false
    // Every loop checks on until both flushes are done, then five times
    // more: each flush meets calls in flight and calls after it, however
    // late a loaded machine runs the timers.
    const loops = Array.from({ length: 32 }, async (_, i) => {
      for (let after = 0; after < 5; ) {
        if (stop) after++
        const d = await lim.check(`k${i}-${n++ % 50}`)
        sources.add(d.source)
      }
    })
    for (const at of [150, 350]) {
      await sleep(Math.max(0, at - (now() - t0)))
      assert.equal(await cli(server.port, 'SCRIPT', 'FLUSH'), 'OK')
      flushed++
    }
    stop = true
    await Promise.all(loops)
    const s = lim.stats
    assert.deepEqual([...sources], ['redis'], `${kind}: ${JSON.stringify(s)}`)
    assert.equal(s.errors + s.timeouts, 0, kind)
    assert.ok(s.batches > 0, `${kind}: ${JSON.stringify(s)}`)
    assert.ok(s.evals >= 1 + flushed, `${kind}: EVAL after NOSCRIPT: ${s.evals}`)
    dropClient(client)
  }
  await server.kill()
})

// ----------------------------------------------------------------- cluster

test('batching in a cluster: per hash slot on 3 masters, never CROSSSLOT, exactly the burst per key', async () => {
  const nodes = await startCluster()
  const { io, nr } = await clusterClients(nodes[0].port)

  // The driver's hash slots are Redis Cluster's (hash tags, bytes, UTF-8).
  const R = native.bindRedisPath()
  const probe = new rb.RedisEngine({ rate: 1, burst: 5, breakerThreshold: 1000 })
  assert.equal(native.redisUseSlots(probe.handle), true)
  const samples = ['alice', '{user1000}.following', 'a{}b', 'a{b}c{d}', '{}', 'ünïcødé ✓ 🚦', 'k'.repeat(300), 12345]
  for (let i = 0; i < 40; i++) samples.push(crypto.randomBytes(1 + (i % 20)).toString('hex'))
  for (const k of samples) {
    const redisKey = R.begin(probe.handle, k, 1, undefined, undefined)
    const mine = R.scratch[4]
    R.finish(probe.handle, R.scratch[1], 1, 0, undefined)
    assert.equal(mine, Number(await cli(nodes[0].port, 'CLUSTER', 'KEYSLOT', redisKey)), `the slot of ${redisKey}`)
  }

  // Keys in six slots: three hash tags (two keys each, one slot), on
  // whichever masters they fall, and three plain keys.
  const slots = await io.cluster('SLOTS')
  const owner = (slot) => slots.find(([from, to]) => slot >= from && slot <= to)[2][1]
  const BURST = 20
  const PER_KEY = 60
  for (const [kind, cluster] of [['ioredis-cluster', io], ['node-redis', nr]]) {
    const tag = crypto.randomBytes(4).toString('hex')
    const keys = [`{a${tag}}x`, `{a${tag}}y`, `{b${tag}}x`, `{b${tag}}y`, `{c${tag}}x`, `{c${tag}}y`, `p${tag}`, `q${tag}`, `r${tag}`]
    const ports = new Set(keys.map((k) => owner(Number(execSlot(k)))))
    const lim = new rb.redis.TokenBucket({ client: cluster, rate: 0.001, burst: BURST, onError: 'closed', timeout: 2 })
    assert.equal(lim.clientKind, kind)
    // Two rounds: the first loads the batch script on each node (NOSCRIPT).
    for (let round = 0; round < 2; round++) {
      const asked = []
      for (let i = 0; i < PER_KEY / 2; i++) for (const k of keys) asked.push([k, lim.check(k)])
      const answers = await Promise.all(asked.map(([, p]) => p))
      assert.deepEqual([...new Set(answers.map((d) => d.source))], ['redis'], `${kind}: ${JSON.stringify(lim.stats)}`)
      if (round === 1) {
        for (const k of keys) {
          const admitted = answers.filter((d, i) => asked[i][0] === k && d.allowed).length
          assert.equal(admitted, 0, `${kind}: ${k} was spent in round 0`)
        }
      } else {
        for (const k of keys) {
          const admitted = answers.filter((d, i) => asked[i][0] === k && d.allowed).length
          assert.equal(admitted, BURST, `${kind}: ${k} admitted exactly the burst`)
        }
      }
    }
    const s = lim.stats
    assert.ok(s.batches > 0, `${kind}: ${JSON.stringify(s)}`)
    assert.ok(s.errors + s.timeouts === 0, `${kind}: ${JSON.stringify(s)}`)
    assert.ok(ports.size >= 2, `${kind}: the keys live on ${ports.size} masters`)
    console.log(`# cluster batched (${kind}): ${keys.length} keys on ${ports.size} masters, ${s.calls} script calls for ${keys.length * PER_KEY} checks (${s.batches} batches)`)
  }
  for (const n of nodes) {
    const errors = await cli(n.port, 'INFO', 'errorstats')
    assert.doesNotMatch(errors, /CROSSSLOT/, `:${n.port} ${errors}`)
  }
  dropClient(io)
  dropClient(nr)
  for (const n of nodes) await n.kill()

  function execSlot(k) {
    const redisKey = R.begin(probe.handle, k, 1, undefined, undefined)
    const slot = R.scratch[4]
    R.finish(probe.handle, R.scratch[1], 1, 0, undefined)
    assert.ok(typeof redisKey === 'string')
    return slot
  }
})

// --------------------------------------------------------------- bad input

test('bad input: the batch option and the raw entry points give typed errors, never a crash', async () => {
  const server = await main()
  const client = await ioredis(server.port)
  for (const bad of ['yes', 1, {}]) {
    assert.throws(
      () => new rb.redis.TokenBucket({ client, rate: 1, batch: bad }),
      (e) => e.name === 'TypeError' && e.code === 'ERR_RATEBOUND_INVALID_OPTION' && /batch/.test(e.message) && e.message.includes(typeof bad === 'string' ? `'${bad}'` : String(bad)),
    )
  }
  assert.equal(new rb.redis.TokenBucket({ client, rate: 1, batch: undefined }).stats.batches, 0)
  const R = native.bindRedisPath()
  const engine = new rb.RedisEngine({ rate: 1, burst: 5, breakerThreshold: 1000 })
  const h = engine.handle
  const throws = (fn, name, code) => assert.throws(fn, (e) => e.name === name && e.code === code, String(fn))
  throws(() => R.begin(999999, 'k', 1), 'TypeError', 'ERR_INVALID_THIS')
  throws(() => R.begin('nope', 'k', 1), 'TypeError', 'ERR_INVALID_THIS')
  throws(() => R.begin(h, {}, 1), 'TypeError', 'ERR_INVALID_ARG_TYPE')
  throws(() => R.begin(h, 'k', 6), 'RangeError', 'ERR_RATEBOUND_INSUFFICIENT_CAPACITY')
  throws(() => R.begin(h, 'k', 'one'), 'RangeError', 'ERR_RATEBOUND_INVALID_NUMBER')
  throws(() => R.begin(h, 'k', 1, 42), 'TypeError', 'ERR_INVALID_ARG_TYPE')
  throws(() => R.begin(h, 'k', 1, undefined, -1), 'RangeError', 'ERR_RATEBOUND_INVALID_NUMBER')
  throws(() => R.beginReserve(h, 'k', 1, -3), 'RangeError', 'ERR_RATEBOUND_INVALID_NUMBER')
  throws(() => R.finish(h, 123456, 0, 7), 'TypeError', 'ERR_INVALID_ARG_VALUE')
  throws(() => R.finish(999999, 0, 0, 7), 'TypeError', 'ERR_INVALID_THIS')
  throws(() => R.finishBatch(999999, 2, 0, 14), 'TypeError', 'ERR_INVALID_THIS')
  throws(() => R.acquire(999999, 'k', 1), 'TypeError', 'ERR_INVALID_THIS')
  throws(() => R.acquire(h, 'k', 1, -1), 'RangeError', 'ERR_RATEBOUND_INVALID_NUMBER')
  throws(() => R.acquire(h, 'k', 9), 'RangeError', 'ERR_RATEBOUND_INSUFFICIENT_CAPACITY')
  throws(() => R.acquire(h, [], 1), 'TypeError', 'ERR_INVALID_ARG_TYPE')
  throws(() => R.acquireStep(h, 123456), 'TypeError', 'ERR_INVALID_ARG_VALUE')
  throws(() => R.acquireStep(999999, 0), 'TypeError', 'ERR_INVALID_THIS')
  assert.equal(R.acquireAbandon(h, 123456), undefined)
  assert.equal(R.acquireForget(123456), 0)
  // A wait forgotten is no wait any more.
  const a = R.acquire(h, 'k', 1, 5)
  assert.equal(R.acquireForget(a), 1)
  throws(() => R.acquireStep(h, a), 'TypeError', 'ERR_INVALID_ARG_VALUE')
  throws(() => native.redisTemplate(h, 1000), 'TypeError', 'ERR_INVALID_ARG_TYPE')
  throws(() => native.redisKeep(987654), 'TypeError', 'ERR_INVALID_ARG_TYPE')
  throws(() => native.redisCallScript(987654), 'TypeError', 'ERR_INVALID_ARG_TYPE')
  // A batch of unknown members answers nothing (0: no notices either).
  R.scratch[R.idsAt] = 555555
  R.scratch[R.idsAt + 1] = 555556
  assert.equal(R.finishBatch(h, 2, 0, 14), 0)
  // A call without a template (an explicit time) comes with its arguments.
  const withArgs = R.begin(h, 'k', 1, undefined, 1_700_000_000_000_000)
  assert.equal(R.scratch[2], -1)
  assert.deepEqual(withArgs.slice(0, 2), ['rb:tb:k', '1700000000000000'])
  R.finish(h, R.scratch[1], 1, 0, undefined)
  // A begun call: a reply of the wrong length, or of NaN, is a failure of
  // the fail policy (open), and the number is free again after it.
  for (const [how, len] of [[0, 3], [3, 0], [2, 0], [0, 100000]]) {
    R.begin(h, 'k', 1)
    const id = R.scratch[1]
    R.scratch[R.replyAt] = NaN
    assert.equal(R.finish(h, id, how, len, 'down'), 1)
    assert.equal(R.sources[R.scratch[R.answerAt + 5]], 'fail_open')
    throws(() => R.finish(h, id, 0, 7), 'TypeError', 'ERR_INVALID_ARG_VALUE')
  }
  dropClient(client)
})

test('no unhandled rejection in this file', async () => {
  await sleep(100)
  assert.deepEqual(unhandled, [])
})
