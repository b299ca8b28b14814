'use strict'
// Bytes per key with 100 000 keys: ratebound's KeyedLimiter against
// rate-limiter-flexible's RateLimiterMemory, each in a fresh child process
// (node --expose-gc), from process.memoryUsage() before and after, after a
// full GC. Median of RUNS runs. Usage: node bench/memory.js
const { execFileSync } = require('node:child_process')

const RUNS = 3
const N = 100_000

const child = `
const which = process.argv[1]
const N = ${N}
const rb = require(${JSON.stringify(require.resolve('..'))})
const { RateLimiterMemory } = require('rate-limiter-flexible')
async function main() {
  let limiter
  if (which === 'ratebound') limiter = new rb.KeyedLimiter({ rate: 1, burst: 10, maxKeys: 1000000 })
  else limiter = new RateLimiterMemory({ points: 10, duration: 3600 })
  // Warm up the code paths on other keys, then forget them.
  for (let i = 0; i < 1000; i++) which === 'ratebound' ? limiter.check('warm' + i) : await limiter.consume('warm' + i)
  global.gc(); global.gc()
  const before = process.memoryUsage()
  for (let i = 0; i < N; i++) {
    const key = 'user-' + i
    if (which === 'ratebound') limiter.check(key)
    else await limiter.consume(key)
  }
  global.gc(); global.gc()
  const after = process.memoryUsage()
  const size = which === 'ratebound' ? limiter.size : N
  console.log(JSON.stringify({
    keys: size,
    heap: (after.heapUsed - before.heapUsed) / N,
    rss: (after.rss - before.rss) / N,
    external: (after.external - before.external) / N,
  }))
}
main()
`

function median(xs) {
  const s = [...xs].sort((a, b) => a - b)
  return s[s.length >> 1]
}

function measure(which) {
  const runs = []
  for (let r = 0; r < RUNS; r++) {
    const out = execFileSync(process.execPath, ['--expose-gc', '-e', child, which], { encoding: 'utf8' })
    runs.push(JSON.parse(out))
  }
  return { which, heap: median(runs.map((x) => x.heap)), rss: median(runs.map((x) => x.rss)), keys: runs[0].keys }
}

function main() {
  return [measure('ratebound'), measure('rate-limiter-flexible')]
}

module.exports = main
if (require.main === module) {
  for (const r of main()) {
    console.log(`${r.which.padEnd(24)} ${r.keys} keys: V8 heap ${r.heap.toFixed(1)} B/key, RSS ${r.rss.toFixed(1)} B/key`)
  }
}
