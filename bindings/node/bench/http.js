'use strict'
// Throughput of a trivial Express and Fastify app with and without the
// ratebound middleware, under wrk on 127.0.0.1 (1 thread, 32 connections,
// DURATION s per run, ROUNDS rounds interleaved; median req/s): about
// 4 × ROUNDS × DURATION = 20 s of load. Also the server process's CPU time
// per request (user + system, from process.cpuUsage() over IPC): a
// single-threaded server's saturated throughput is 1 / (CPU per request),
// and CPU time is far less disturbed than req/s when other processes share
// the machine (wrk itself takes one of the two cores here).
// Usage: node bench/http.js
const { spawn, execFileSync } = require('node:child_process')
const path = require('node:path')

const ROUNDS = 5
const DURATION = 1

function hasWrk() {
  try {
    execFileSync('wrk', ['--version'], { stdio: 'ignore' })
    return true
  } catch (e) {
    return e.status === 1 // wrk --version exits 1 after printing
  }
}

function start(framework, mode) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(__dirname, 'server.js'), framework, mode], {
      stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
    })
    child.stdout.once('data', (d) => resolve({ child, port: Number(String(d).trim()) }))
    child.once('error', reject)
  })
}

function cpu(child) {
  return new Promise((resolve) => {
    child.once('message', resolve)
    child.send('cpu')
  })
}

async function wrk(server) {
  const before = await cpu(server.child)
  const out = execFileSync('wrk', ['-t1', '-c32', `-d${DURATION}s`, `http://127.0.0.1:${server.port}/`], { encoding: 'utf8' })
  const after = await cpu(server.child)
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)[1])
  const requests = Number(/(\d+) requests in/.exec(out)[1])
  const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(out)
  if (non2xx) throw new Error(`refusals during the throughput run: ${non2xx[1]}`)
  return { rps, cpuUs: (after - before) / requests }
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b)
  return s[s.length >> 1]
}

async function main() {
  if (!hasWrk()) return null
  const configs = [
    ['express', 'plain'],
    ['express', 'ratebound'],
    ['fastify', 'plain'],
    ['fastify', 'ratebound'],
  ]
  const servers = []
  for (const [f, m] of configs) servers.push(await start(f, m))
  const results = configs.map(() => [])
  try {
    for (let r = 0; r < ROUNDS; r++) {
      for (let i = 0; i < servers.length; i++) results[i].push(await wrk(servers[i]))
    }
  } finally {
    for (const s of servers) s.child.kill()
  }
  return configs.map(([f, m], i) => ({
    framework: f,
    mode: m,
    rps: median(results[i].map((x) => x.rps)),
    cpuUs: median(results[i].map((x) => x.cpuUs)),
  }))
}

module.exports = main
if (require.main === module) {
  main().then((rows) => {
    if (!rows) return console.log('wrk not found: skipped')
    for (const r of rows) console.log(`${r.framework} ${r.mode}: ${r.rps.toFixed(0)} req/s, ${r.cpuUs.toFixed(1)} µs CPU/request`)
  })
}
