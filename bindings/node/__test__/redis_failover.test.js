'use strict'
// A Redis Cluster failover under running limiters (issue 28): 3 masters with
// a replica each (6 redis-servers on 127.0.0.1, cluster-node-timeout 500 ms),
// the master holding the key's slot killed (SIGKILL), its replica promoted by
// the cluster. The same limiters — over an ioredis Cluster and a node-redis
// cluster, never rebuilt — answer by their fail policy (closed) meanwhile,
// within their deadline, and by Redis again once the replica serves the
// slot; what Redis admits stays within burst + rate·t. node-redis refreshes
// the topology only 5 s after a node starts reconnecting unless told sooner
// (topologyRefreshOnReconnectionAttemptStrategy). The figures per fail
// policy come from the Rust bench (benches/src/bin/redis_failover.rs).
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const { once } = require('node:events')
const fs = require('node:fs')
const path = require('node:path')
const crypto = require('node:crypto')
const IORedis = require('ioredis')
const { createCluster } = require('redis')
const rb = require('..')
const { sleep, now, unhandledRejections } = require('./fixtures/common.js')
const { HOST, Server, startCluster, stopAll, cli, freePort, requireRedis, scratchDir, slotOf } = require('./fixtures/redis-server.js')

const DEADLINE = 250 // ms
// How far past the deadline a call may return: a liveness bound only, for
// a loaded machine (real processes and sockets; the deadline's exact
// instant is redis_deadline.test.js', in virtual time).
const SLACK = 2500 // ms
const RATE = 10

// Each limiter checks `key` from `t0` for `runFor` ms, every 10 ms
// (bounded: one check per 10 ms of the run at most). `seen[i]`: limiter
// i's calls — when each began (ms from t0), how long it took, its source
// and whether it was allowed; `runs`: their promises.
function checkFor(limiters, key, t0, runFor) {
  const seen = limiters.map(() => [])
  const runs = limiters.map(async (lim, i) => {
    for (let n = 0; n < runFor / 10; n++) {
      const t = now()
      if (t - t0 >= runFor) break
      const d = await lim.check(key)
      seen[i].push({ at: t - t0, took: now() - t, source: d.source, allowed: d.allowed })
      await sleep(10)
    }
  })
  return { seen, runs }
}

// One instance's calls (`kind` names it) around the kill at `killed`: the
// kill was felt; every call returned within the deadline (and SLACK); every
// answer not Redis' is the fail policy's (closed), after the kill; after the
// last of them Redis answers again. Returns how many Redis admitted, when
// the last failure ended and the calls after it.
function aroundTheKill(kind, calls, killed) {
  let admitted = 0
  const failed = calls.filter((c) => c.source !== 'redis')
  assert.ok(failed.length > 0, `${kind}: the kill was felt`)
  for (const c of calls) {
    assert.ok(c.took <= DEADLINE + SLACK, `${kind}: a call took ${c.took.toFixed(0)} ms at ${c.at.toFixed(0)} ms (${c.source})`)
    if (c.source === 'redis') admitted += c.allowed ? 1 : 0
    else {
      assert.ok(c.source === 'fail_closed' && !c.allowed, `${kind}: ${c.source} at ${c.at.toFixed(0)} ms`)
      assert.ok(c.at + c.took >= killed, `${kind}: a failure before the kill, at ${c.at.toFixed(0)} ms`)
    }
  }
  const lastFailure = Math.max(...failed.map((c) => c.at + c.took))
  const back = calls.filter((c) => c.at > lastFailure)
  assert.ok(back.length > 0 && back.every((c) => c.source === 'redis'), `${kind}: answered by Redis again`)
  return { admitted, lastFailure, back }
}

// Once the instances in `seen` at `back` are answered by Redis again (`back`:
// when the last of them was), the limit is used again: they ask far more
// often than RATE, so from then to the last answer at least 90 % of RATE·t
// is admitted (counted from measured times; admissions before the kill do
// not count).
function assertUsedAgain(seen, back) {
  const calls = seen.flat()
  const end = Math.max(...calls.map((c) => c.at + c.took))
  const used = calls.filter((c) => c.source === 'redis' && c.allowed && c.at >= back).length
  const want = 0.9 * RATE * ((end - back) / 1000) - 1
  assert.ok(end - back >= 1000, `back only ${(end - back).toFixed(0)} ms before the end`)
  assert.ok(used >= want, `${used} admitted in the ${(end - back).toFixed(0)} ms after all were back (at least ${want.toFixed(1)})`)
  console.log(`# used again: ${used} admitted in the ${(end - back).toFixed(0)} ms after all were back (at least ${want.toFixed(1)})`)
}

// Every rejection nobody handled, anywhere in this file: there must be none.
const unhandled = unhandledRejections()
after(stopAll)

// The ports of the master serving `slot` and of its replica.
async function masterAndReplica(port, slot) {
  const rows = (await cli(port, 'CLUSTER', 'NODES')).split('\n').map((l) => l.trim().split(/\s+/)).filter((f) => f.length >= 8)
  const portOf = (f) => Number(f[1].split('@')[0].split(':').pop())
  const master = rows.find(
    (f) =>
      f[2].includes('master') &&
      f.slice(8).some((r) => {
        const [a, b = a] = r.split('-')
        return /^\d+$/.test(a) && Number(a) <= slot && slot <= Number(b)
      }),
  )
  const replica = rows.find((f) => f[2].includes('slave') && f[3] === master[0])
  return [portOf(master), portOf(replica)]
}

test('limiters over ioredis Cluster and node-redis cluster recover from a failover without a restart', async () => {
  const nodes = await startCluster({ masters: 3, replicas: 1, nodeTimeout: 500 })
  const key = `failover-${crypto.randomBytes(8).toString('hex')}`
  const [master, replica] = await masterAndReplica(nodes[0].port, slotOf(`rb:tb:${key}`))

  const io = new IORedis.Cluster([{ host: HOST, port: nodes[0].port }], { redisOptions: { maxRetriesPerRequest: 0 } })
  io.on('error', () => {})
  // node-redis refreshes a cluster's topology 5 s after a node starts
  // reconnecting, by default (`topologyRefreshOnReconnectionAttemptStrategy`):
  // one cluster with that default, one told 250 ms.
  const nrDefault = createCluster({ rootNodes: [{ socket: { host: HOST, port: nodes[0].port } }] })
  const nr = createCluster({
    rootNodes: [{ socket: { host: HOST, port: nodes[0].port } }],
    topologyRefreshOnReconnectionAttemptStrategy: 250,
  })
  for (const c of [nr, nrDefault]) {
    c.on('error', () => {})
    await c.connect()
  }
  const options = { rate: RATE, burst: 20, onError: 'closed', timeout: DEADLINE / 1000, breakerCooldown: 0.25 }
  const clientsUsed = [io, io, nr, nr, nrDefault]
  const limiters = clientsUsed.map((client) => new rb.redis.TokenBucket({ client, ...options }))
  const kinds = limiters.map((l, i) => (clientsUsed[i] === nrDefault ? 'node-redis (default refresh)' : l.clientKind))
  assert.deepEqual([...new Set(limiters.map((l) => l.clientKind))], ['ioredis-cluster', 'node-redis'])

  const runFor = 10000
  const killAt = 1500
  const t0 = now()
  const { seen, runs } = checkFor(limiters, key, t0, runFor)
  await sleep(killAt)
  // Timed as the signal is sent: a client may see the connection drop
  // before the process's exit is reported.
  const killed = now() - t0
  await nodes.find((n) => n.port === master).kill()
  let promoted = null
  while (now() - t0 < killed + 8000) {
    const role = await cli(replica, 'ROLE').catch(() => '')
    if (role.startsWith('master')) {
      promoted = now() - t0 - killed
      break
    }
    await sleep(10)
  }
  await Promise.all(runs)
  for (const lim of limiters) await lim.close()
  io.disconnect()
  nr.destroy()
  nrDefault.destroy()
  for (const n of nodes) await n.kill()
  assert.notEqual(promoted, null, 'the replica was promoted within 8 s')

  let redisAdmitted = 0
  // When each is back (node-redis' default refresh may come back only
  // near the end: left out of the "used again" window).
  const backs = []
  for (const [i, calls] of seen.entries()) {
    const kind = `${kinds[i]} #${i}`
    const { admitted, lastFailure, back } = aroundTheKill(kind, calls, killed)
    redisAdmitted += admitted
    // Within 4 s of the promotion; node-redis's default refresh, 5 s after
    // the kill, within 8 s.
    const within = clientsUsed[i] === nrDefault ? 8000 : 4000
    assert.ok(
      back[0].at < killed + promoted + within,
      `${kind}: back at ${back[0].at.toFixed(0)} ms, killed at ${killed.toFixed(0)}, promoted ${promoted.toFixed(0)} ms later`,
    )
    if (clientsUsed[i] !== nrDefault) backs.push(back[0].at)
    console.log(`# ${kind}: last fail-policy answer ${(lastFailure - killed).toFixed(0)} ms after the kill (promoted ${promoted.toFixed(0)} ms after it)`)
  }
  const elapsed = (now() - t0) / 1000
  assert.ok(redisAdmitted <= 20 + 10 * elapsed + 1, `${redisAdmitted} admitted in ${elapsed.toFixed(2)} s`)
  assertUsedAgain(seen, Math.max(...backs))
  assert.deepEqual(unhandled, [])
})

// A sentinel (`redis-server <conf> --sentinel`: the config file comes
// first, which the fixture's Server cannot do), killed by `kill()` and at exit.
const sentinelProcs = new Set()
process.on('exit', () => {
  for (const p of sentinelProcs) if (p.exitCode === null) p.kill('SIGKILL')
})
async function startSentinel(port, conf, dir) {
  const proc = spawn(process.env.REDIS_SERVER || 'redis-server', [conf, '--sentinel', '--port', String(port), '--bind', HOST, '--dir', dir], { stdio: 'ignore' })
  proc.on('error', () => {})
  sentinelProcs.add(proc)
  const kill = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      const exited = once(proc, 'exit')
      proc.kill('SIGKILL')
      await exited
    }
    sentinelProcs.delete(proc)
  }
  for (let i = 0; i < 200; i++) {
    if (proc.exitCode !== null) throw new Error(`sentinel on port ${port} exited (${proc.exitCode})`)
    try {
      if ((await cli(port, 'PING')) === 'PONG') return { port, kill }
    } catch {}
    await sleep(25)
  }
  await kill()
  throw new Error(`sentinel on port ${port} did not answer PING within 5 s`)
}

test('limiters over ioredis with sentinels recover from a Sentinel failover without a restart', async () => {
  requireRedis()
  const tmp = scratchDir()
  const NAME = 'partner'
  const primary = await new Server(await freePort()).start()
  const replica = await new Server(await freePort(), ['--replicaof', HOST, String(primary.port)]).start()
  const sentinels = []
  for (let i = 0; i < 3; i++) {
    const port = await freePort()
    const conf = path.join(tmp, `sentinel-${port}.conf`)
    fs.writeFileSync(
      conf,
      `sentinel monitor ${NAME} ${HOST} ${primary.port} 2\n` +
        `sentinel down-after-milliseconds ${NAME} 500\n` +
        `sentinel failover-timeout ${NAME} 10000\n`,
    )
    sentinels.push(await startSentinel(port, conf, tmp))
  }
  const primaryBy = async (port) => {
    const out = await cli(port, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', NAME).catch(() => '')
    return Number(out.split('\n')[1])
  }
  for (let i = 0; ; i++) {
    const infos = await Promise.all(sentinels.map((s) => cli(s.port, 'INFO', 'sentinel')))
    const agreed = (await Promise.all(sentinels.map((s) => primaryBy(s.port)))).every((p) => p === primary.port)
    if (agreed && infos.every((s) => s.includes('slaves=1') && s.includes('sentinels=3'))) break
    assert.ok(i < 600, 'sentinels ready within 30 s')
    await sleep(50)
  }
  // ioredis asks the sentinels for the primary at every (re)connection;
  // without the offline queue a call while disconnected fails at once.
  const clients = [0, 1].map(() => {
    const c = new IORedis({
      sentinels: sentinels.map((s) => ({ host: HOST, port: s.port })),
      name: NAME,
      maxRetriesPerRequest: 0,
      enableOfflineQueue: false,
      retryStrategy: () => 50,
    })
    c.on('error', () => {})
    return c
  })
  for (const c of clients) if (c.status !== 'ready') await new Promise((resolve) => c.once('ready', resolve))
  const options = { rate: RATE, burst: 20, onError: 'closed', timeout: DEADLINE / 1000, breakerCooldown: 0.25 }
  const limiters = clients.map((client) => new rb.redis.TokenBucket({ client, ...options }))
  const key = `failover-${crypto.randomBytes(8).toString('hex')}`
  const runFor = 9000
  const t0 = now()
  const { seen, runs } = checkFor(limiters, key, t0, runFor)
  await sleep(1500)
  const killed = now() - t0
  await primary.kill()
  let promoted = null
  while (now() - t0 < killed + 8000) {
    if ((await primaryBy(sentinels[0].port)) === replica.port && (await cli(replica.port, 'ROLE').catch(() => '')).startsWith('master')) {
      promoted = now() - t0 - killed
      break
    }
    await sleep(10)
  }
  await Promise.all(runs)
  for (const lim of limiters) await lim.close()
  for (const c of clients) c.disconnect()
  for (const n of [replica, ...sentinels]) await n.kill()
  assert.notEqual(promoted, null, 'the replica was promoted within 8 s')
  let redisAdmitted = 0
  const backs = []
  for (const [i, calls] of seen.entries()) {
    const kind = `ioredis sentinel #${i}`
    const { admitted, lastFailure, back } = aroundTheKill(kind, calls, killed)
    redisAdmitted += admitted
    assert.ok(back[0].at < killed + promoted + 4000, `${kind}: back at ${back[0].at.toFixed(0)} ms, killed at ${killed.toFixed(0)}, promoted ${promoted.toFixed(0)} ms later`)
    backs.push(back[0].at)
    console.log(`# ${kind}: last fail-policy answer ${(lastFailure - killed).toFixed(0)} ms after the kill (promoted ${promoted.toFixed(0)} ms after it)`)
  }
  const elapsed = (now() - t0) / 1000
  assert.ok(redisAdmitted <= 20 + 10 * elapsed + 1, `${redisAdmitted} admitted in ${elapsed.toFixed(2)} s`)
  assertUsedAgain(seen, Math.max(...backs))
  assert.deepEqual(unhandled, [])
})
