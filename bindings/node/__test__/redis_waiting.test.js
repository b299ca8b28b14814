'use strict'
// Waiting on global limits in Redis (acquire, reserve, pause; split from
// redis.test.js) with real clients against a REAL redis-server this file
// starts itself: a free 127.0.0.1 port, no persistence, killed at the end.
// Every loop is bounded in time; nothing but 127.0.0.1 is contacted.
// Without redis-server every test here FAILS.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const rb = require('..')
const { sleep, now, unhandledRejections } = require('./fixtures/common.js')
const { cli } = require('./fixtures/redis-server.js')
const { closeAll, dropClient: closeClient, ioredis, CLIENTS, randomKey, main } = require('./fixtures/redis-clients.js')

// Every rejection nobody handled, anywhere in this file: there must be none.
const unhandled = unhandledRejections()

after(closeAll)

// The waits' exact rules (a pause's moves, the give-backs) are engine steps
// at explicit times in spec/redis_wait.json (redis_wait_spec.test.js).
// Here real clients run them: the order of the reservations is read from
// Redis (MONITOR, the bucket's TAT), times are measured from before what
// they follow, periods are 500 ms, and an upper bound on a real wait keeps
// LATE_MS for a loaded machine.
const RATE = '2/s burst 1'
const PERIOD = 0.5
const PAUSE = 1.0
const LATE = 0.5
// How early a wait may end: it sleeps a delay in µs read from Redis' clock.
const EARLY = 0.005

// Script calls: all (`failed` false) or those Redis ran to their end (a
// NOSCRIPT refusal left out).
async function scriptCalls(port, { failed = true } = {}) {
  const info = await cli(port, 'INFO', 'commandstats')
  let sum = 0
  for (const c of ['evalsha', 'eval']) {
    const m = new RegExp(`cmdstat_${c}:calls=(\\d+),.*failed_calls=(\\d+)`).exec(info)
    if (m) sum += Number(m[1]) - (failed ? 0 : Number(m[2]))
  }
  return sum
}

// The bucket's theoretical arrival time in Redis (µs of its clock; a
// pause's end after ":" left out), null without a key.
async function tat(port, key) {
  const raw = await cli(port, 'GET', `rb:tb:${key}`)
  return raw === '' ? null : Number(raw.split(':')[0])
}

async function until(what, ms = 10000) {
  const stop = now() + ms
  while (!(await what())) {
    assert.ok(now() < stop, 'not within the bound')
    await sleep(2)
  }
}

test('waiting: twenty instances acquire in one order, one script call each, never ahead of the bound', async () => {
  const s = await main()
  const key = randomKey('twenty')
  const clients = []
  const limiters = []
  for (let i = 0; i < 20; i++) {
    const c = await ioredis(s.port)
    clients.push(c)
    limiters.push(rb.redis.TokenBucket({ client: c, rate: '50/s burst 10', onError: 'closed', timeout: 1 }))
  }
  // Every connection made and the script loaded: no NOSCRIPT below.
  for (const lim of limiters) await lim.acquire(randomKey('warm'))
  const byPort = new Map(clients.map((c, i) => [String(c.stream.localPort), i]))
  const watch = await ioredis(s.port)
  const monitor = await watch.monitor()
  const order = []
  const end = randomKey('end')
  let ended = false
  monitor.on('monitor', (time, args, source) => {
    const cmd = String(args[0]).toUpperCase()
    if (cmd === 'ECHO' && args[1] === end) ended = true
    else if ((cmd === 'EVALSHA' || cmd === 'EVAL') && args.includes(`rb:tb:${key}`)) order.push(byPort.get(source.split(':').at(-1)))
  })
  const before = await scriptCalls(s.port)
  const t0 = now()
  const done = limiters.map(() => [])
  await Promise.all(
    limiters.map(async (lim, i) => {
      for (let j = 0; j < 3; j++) {
        assert.equal(await lim.acquire(key, 1, { timeout: 10 }), 'redis')
        done[i].push((now() - t0) / 1000)
      }
    }),
  )
  const used = (await scriptCalls(s.port)) - before
  await cli(s.port, 'ECHO', end)
  await until(() => ended)
  monitor.disconnect()
  assert.equal(used, 60, `${used} script calls for 60 acquisitions`)
  assert.deepEqual([...order].sort((a, b) => a - b), Array.from({ length: 60 }, (_, k) => Math.floor(k / 3)), `${order}`)
  // In the order they reached Redis, the k-th completes no earlier than its
  // slot: one served ahead of an earlier reservation would.
  const nth = Array(20).fill(0)
  order.forEach((i, k) => {
    const t = done[i][nth[i]++]
    assert.ok(t >= Math.max(k + 1 - 10, 0) / 50 - EARLY, `reservation ${k} (instance ${i}) done at ${t}, before its slot`)
  })
  const last = Math.max(...done.flat())
  assert.ok(last >= 1.0 - EARLY && last < 1.0 + LATE, `last at ${last}`)
  console.log(`# waiting: 60 acquisitions by 20 instances, last at ${last.toFixed(3)} s, ${used} script calls`)
  for (const c of clients) await closeClient(c)
  await closeClient(watch)
})

test('waiting: reservations share one order, cancel and abort give the slot back, beyond maxWait rejects', async () => {
  const s = await main()
  const client = await ioredis(s.port)
  const key = randomKey('reserve')
  const a = rb.redis.TokenBucket({ client, rate: RATE, onError: 'closed', timeout: 1 })
  const b = rb.redis.TokenBucket({ client, rate: RATE, onError: 'closed', timeout: 1 })
  const t0 = now()
  const rs = []
  for (const lim of [a, b, a, b]) rs.push(await lim.reserve(key, 1, { maxWait: 5 }))
  const elapsed = (now() - t0) / 1000
  assert.equal(rs[0].delay, 0)
  // Slot i of one queue: i periods after the first, less the time the calls since took.
  rs.slice(1).forEach((r, i) => assert.ok(r.delay <= PERIOD * (i + 1) && r.delay >= PERIOD * (i + 1) - elapsed, `${rs.map((x) => x.delay)}`))
  const queued = await tat(s.port, key)
  // The error names the maximum wait the caller gave (it said 0ns).
  await assert.rejects(a.reserve(key, 1, { maxWait: PERIOD }), (e) => e instanceof rb.RateLimitExceededError && e.retryAfter > PERIOD && e.message.endsWith('exceeds the maximum wait of 500ms'))
  assert.equal(await tat(s.port, key), queued, 'beyond maxWait: nothing taken')
  const next = await b.reserve(key, 1, { maxWait: 5 })
  const taken = await tat(s.port, key)
  assert.equal(taken, queued + PERIOD * 1e6)
  // Cancelled: the TAT is back, the next reservation takes the same slot.
  assert.equal(await next.cancel(), true)
  assert.equal(await tat(s.port, key), queued)
  assert.equal(await next.cancel(), false)
  const again = await a.reserve(key, 1, { maxWait: 5 })
  assert.equal(await tat(s.port, key), taken)
  assert.ok(again.delay <= next.delay, `${again.delay} ${next.delay}`)
  // An aborted acquire gives its slot back, once Redis holds it.
  const ac = new AbortController()
  const waiting = a.acquire(key, 1, { signal: ac.signal })
  await until(async () => (await tat(s.port, key)) !== taken)
  assert.equal(await tat(s.port, key), taken + PERIOD * 1e6)
  ac.abort()
  await assert.rejects(waiting, (e) => e.name === 'AbortError')
  assert.equal(await tat(s.port, key), taken, 'the aborted slot was given back')
  await b.reserve(key, 1, { maxWait: 5 })
  assert.equal(await tat(s.port, key), taken + PERIOD * 1e6)
  await closeClient(client)
})

test('waiting: a pause is for everyone and once; a wait that cannot end in time rejects at once', async () => {
  const s = await main()
  const client = await ioredis(s.port)
  const key = randomKey('pause')
  const a = rb.redis.TokenBucket({ client, rate: '100/s burst 10', timeout: 1 })
  const b = rb.redis.TokenBucket({ client, rate: '100/s burst 10', timeout: 1 })
  assert.equal((await b.check(key)).allowed, true)
  let t = now()
  const shift = await a.pause(key, PAUSE)
  assert.ok(shift >= PAUSE - 0.001, `${shift}`)
  assert.equal(await b.pause(key, 0.1), 0, 'inside a pause already on: nothing moves')
  const d = await b.check(key)
  assert.ok(!d.allowed && d.retryAfter >= PAUSE - (now() - t) / 1000, JSON.stringify(d))
  await b.acquire(key, 1, { timeout: 5 })
  // The pause began after t: the wait ends after its end.
  assert.ok(now() - t >= (PAUSE - EARLY) * 1000, `${now() - t} ms`)
  // Well before the timeout, which a wait of the timeout would reach.
  await a.pause(key, 60)
  t = now()
  await assert.rejects(b.acquire(key, 1, { timeout: 5 }), (e) => e instanceof rb.RateLimitExceededError && e.message.endsWith('exceeds the maximum wait of 5s'))
  assert.ok(now() - t < 5000 - 2500, `${now() - t} ms`)
  // Bad input: typed errors, never a hang.
  await assert.rejects(a.pause(key, -1), (e) => e.code === 'ERR_RATEBOUND_INVALID_NUMBER')
  await assert.rejects(a.pause(key, NaN), (e) => e.code === 'ERR_RATEBOUND_INVALID_NUMBER')
  await assert.rejects(a.acquire(key, 1, { timeout: Infinity }), (e) => e.code === 'ERR_RATEBOUND_INVALID_NUMBER')
  await assert.rejects(a.acquire(key, 11), (e) => e.code === 'ERR_RATEBOUND_INSUFFICIENT_CAPACITY')
  await assert.rejects(a.reserve(key, 1, { maxWait: -2 }), (e) => e.code === 'ERR_RATEBOUND_INVALID_NUMBER')
  const fw = rb.redis.FixedWindow({ client, limit: 2, window: 0.5, timeout: 1 })
  await assert.rejects(fw.pause(key, 1), (e) => e.code === 'ERR_RATEBOUND_UNSUPPORTED')
  await assert.rejects(fw.reserve(key, 1), (e) => e.code === 'ERR_RATEBOUND_UNSUPPORTED')
  // A full window's waiter is admitted in a later window: the counter in
  // Redis ("<window index>:<count>") names the window of each admission.
  const fw1 = rb.redis.FixedWindow({ client, limit: 2, window: 1, timeout: 1 })
  let wkey
  let raw = ''
  // Bounded; '': the window ended (its key expired) before the read, again.
  for (let i = 0; i < 5 && raw === ''; i++) {
    wkey = randomKey('window')
    await fw1.acquire(wkey, 2)
    raw = await cli(s.port, 'GET', `rb:fw:${wkey}`)
  }
  const full = raw.split(':').map(Number)
  assert.equal(full[1], 2, `${full}`)
  // Admitted at the start of the next window: read well within it.
  assert.equal(await fw1.acquire(wkey, 1, { timeout: 3 }), 'redis')
  const later = (await cli(s.port, 'GET', `rb:fw:${wkey}`)).split(':').map(Number)
  assert.ok(later[0] > full[0] && later[1] === 1, `${full} then ${later}`)
  await closeClient(client)
})

// `count` acquisitions of one token of `key`, each started once Redis has
// run the previous one's reservation (their order is known whatever the
// load): their completion times in seconds from the returned t0, in the
// order they reserved.
async function waitersInOrder(lim, key, count, port) {
  const t0 = now()
  const base = await scriptCalls(port, { failed: false })
  const waiters = []
  for (let i = 0; i < count; i++) {
    waiters.push(
      (async () => {
        await lim.acquire(key, 1, { timeout: 30 })
        return (now() - t0) / 1000
      })(),
    )
    await until(async () => (await scriptCalls(port, { failed: false })) >= base + i + 1)
  }
  return { waiters, t0 }
}

// Waiter 0 took the burst before the pause; every other completes after
// the pause's end (it began after pausedAt), in order, at its old slot — i
// periods after the burst, taken between t0 and done[0] — moved by shift.
function checkMoved(done, pausedAt, shift) {
  assert.ok(done[0] < pausedAt, `the burst went at once: ${done}`)
  assert.ok(shift >= PAUSE - 0.001, `${shift}`)
  const end = pausedAt + PAUSE
  for (let i = 1; i < done.length; i++) {
    assert.ok(done[i] >= end, `waiter ${i} at ${done[i].toFixed(3)} s, inside the pause (ends ${end.toFixed(3)}): ${done}`)
    const lo = PERIOD * i + shift
    const hi = done[0] + PERIOD * i + shift
    assert.ok(done[i] >= lo - EARLY && done[i] <= hi + LATE, `waiter ${i} at ${done[i]}, want ${lo}..${hi}`)
    assert.ok(done[i - 1] < done[i], `out of order: ${done}`)
  }
}

for (const kind of Object.keys(CLIENTS)) {
  test(`waiting: ${kind} waiters already asleep move past another instance's pause, in order, one script call each`, async () => {
    const s = await main()
    const ca = await CLIENTS[kind](s.port)
    const cb = await CLIENTS[kind](s.port)
    const key = randomKey('asleep')
    const a = rb.redis.TokenBucket({ client: ca, rate: RATE, onError: 'closed', timeout: 1 })
    const b = rb.redis.TokenBucket({ client: cb, rate: RATE, onError: 'closed', timeout: 1 })
    assert.equal(a.listening, false)
    await a.acquire(randomKey('warm')) // A listens from its first wait on (and the script is loaded)
    assert.equal(a.listening, true)
    const before = await scriptCalls(s.port)
    const { waiters, t0 } = await waitersInOrder(a, key, 4, s.port)
    const pausedAt = (now() - t0) / 1000
    const shift = await b.pause(key, PAUSE)
    const done = await Promise.all(waiters)
    checkMoved(done, pausedAt, shift)
    assert.equal((await scriptCalls(s.port)) - before, 4 + 1, 'one script call per acquisition, one for the pause')
    await a.close()
    assert.equal(a.listening, false)
    // Closing the application's client stops the subscriber too.
    await a.acquire(randomKey('again'))
    assert.equal(a.listening, true)
    await closeClient(ca)
    await until(() => !a.listening)
    await closeClient(cb)
  })
}

test('waiting: a waiter that cannot listen goes ahead at its old time; its next call finds the pause; its own pause reaches it', async () => {
  const s = await main()
  const c = await ioredis(s.port)
  const cb = await ioredis(s.port)
  // A client without duplicate(): no subscriber.
  const plain = { evalsha: (...args) => c.evalsha(...args), eval: (...args) => c.eval(...args), publish: (...args) => c.publish(...args) }
  const deaf = rb.redis.TokenBucket({ client: plain, rate: RATE, onError: 'closed', timeout: 1 })
  const b = rb.redis.TokenBucket({ client: cb, rate: RATE, onError: 'closed', timeout: 1 })
  let key = randomKey('deaf')
  let { waiters, t0 } = await waitersInOrder(deaf, key, 2, s.port)
  let pausedAt = (now() - t0) / 1000
  assert.notEqual(await b.pause(key, PAUSE), null)
  let done = await Promise.all(waiters)
  assert.equal(deaf.listening, false)
  assert.ok(done[1] >= PERIOD - EARLY && done[1] < pausedAt + PAUSE, `it went at its old slot: ${done} (the pause ends ${pausedAt + PAUSE})`)
  await deaf.acquire(key, 1, { timeout: 5 })
  assert.ok((now() - t0) / 1000 >= pausedAt + PAUSE, 'the next call waits past the pause')
  // Its own pause: told at once.
  key = randomKey('own')
  ;({ waiters, t0 } = await waitersInOrder(deaf, key, 2, s.port))
  pausedAt = (now() - t0) / 1000
  assert.notEqual(await deaf.pause(key, PAUSE), null)
  done = await Promise.all(waiters)
  assert.ok(done[1] >= pausedAt + PAUSE, `${done} (the pause ends ${pausedAt + PAUSE})`)
  await closeClient(c)
  await closeClient(cb)
})

// Last: every test above has run (node:test runs a file's tests in order).
test('no unhandled rejection in this file', async () => {
  await sleep(100)
  assert.deepEqual(unhandled.map(String), [])
})
