'use strict'
// Everything ci/bench runs for the npm package, in one go, printing a
// markdown table: per-call cost of ratebound against its peers in the same
// process (bench/micro.js), bytes per key with 100 000 keys
// (bench/memory.js) and the middleware's cost in a trivial Express and
// Fastify app under wrk (bench/http.js). About 1.5 min on 2 cores.
// Usage: node bench/run.js   (or npm run bench)
const os = require('node:os')
const micro = require('./micro.js')
const memory = require('./memory.js')
const http = require('./http.js')

function fmt(ns) {
  return ns < 100 ? ns.toFixed(1) : ns.toFixed(0)
}

async function main() {
  console.log(`node ${process.version}, ${os.cpus().length} × ${os.cpus()[0].model}, load average ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`)
  console.log()
  const rows = await micro()
  const get = (group, prefix) => rows.find((r) => r.group === group && r.impl.startsWith(prefix)).ns
  console.log('| group | implementation | median ns/call |')
  console.log('| --- | --- | ---: |')
  for (const r of rows) console.log(`| ${r.group} | ${r.impl} | ${fmt(r.ns)} |`)
  console.log()

  const goals = []
  const goal = (what, ok, detail) => goals.push(`- [${ok ? 'x' : ' '}] ${what}: ${detail}`)
  const tryA = get('allowed', 'ratebound tryAcquire')
  const js = get('allowed', 'pure-JS')
  goal('tryAcquire() ≤ 60 ns', tryA <= 60, `${fmt(tryA)} ns`)
  goal('tryAcquire() within 1.5× of the pure-JS bucket', tryA <= 1.5 * js, `${(tryA / js).toFixed(2)}× (${fmt(js)} ns)`)
  const checkA = get('allowed', 'ratebound check')
  const checkD = get('denied', 'ratebound check')
  goal('check() ≤ 150 ns', Math.max(checkA, checkD) <= 150, `allowed ${fmt(checkA)} ns, denied ${fmt(checkD)} ns`)
  const rlfA = get('allowed', 'rate-limiter-flexible')
  const rlfD = get('denied', 'rate-limiter-flexible')
  goal('≥ 7× faster than rate-limiter-flexible, allowed', rlfA / checkA >= 7, `${(rlfA / checkA).toFixed(1)}× (check() vs consume())`)
  goal('≥ 20× faster than rate-limiter-flexible, denied', rlfD / checkD >= 20, `${(rlfD / checkD).toFixed(1)}×`)

  const mem = memory()
  console.log('| keyed, 100 000 keys | V8 heap bytes/key | RSS bytes/key |')
  console.log('| --- | ---: | ---: |')
  for (const m of mem) console.log(`| ${m.which} | ${m.heap.toFixed(0)} | ${m.rss.toFixed(0)} |`)
  console.log()
  const rbMem = mem[0]
  goal('keyed ≤ 100 bytes/key, off the V8 heap', rbMem.rss <= 100 && rbMem.heap < 8, `RSS ${rbMem.rss.toFixed(0)} B/key, V8 heap ${rbMem.heap.toFixed(0)} B/key`)

  const web = await http()
  if (web) {
    console.log('| app (wrk -t1 -c32, 127.0.0.1) | plain req/s | with ratebound req/s | cost |')
    console.log('| --- | ---: | ---: | ---: |')
    for (const f of ['express', 'fastify']) {
      const plain = web.find((r) => r.framework === f && r.mode === 'plain').rps
      const rl = web.find((r) => r.framework === f && r.mode === 'ratebound').rps
      const cost = (1 - rl / plain) * 100
      console.log(`| ${f} | ${plain.toFixed(0)} | ${rl.toFixed(0)} | ${cost.toFixed(1)} % |`)
      goal(`${f} middleware ≤ 5 % of a trivial app's throughput`, cost <= 5, `${cost.toFixed(1)} %`)
    }
    console.log()
  } else {
    console.log('(wrk not found: the middleware throughput rows were skipped)\n')
  }
  console.log('Goals, this run:')
  for (const g of goals) console.log(g)
}

main()
