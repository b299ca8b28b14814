// One per-client limit for every worker of a Node cluster, without Redis.
//
//   RATEBOUND_LIMIT_FILE=/dev/shm/myapp-clients.limit PORT=8000 node examples/cluster.js
//
// The primary forks 4 workers that share one port; each opens the same
// file, so the limit (5 per minute per X-API-Key, burst 5) is one for all of
// them: the 6th request of a client within a minute gets 429 whichever
// worker serves it. The file is made with mode 0600 on first use.
const cluster = require('node:cluster')
const http = require('node:http')
const rb = require('..')

const file = process.env.RATEBOUND_LIMIT_FILE || '/dev/shm/ratebound-example-clients.limit'
const port = Number(process.env.PORT || 8000)
const workers = Number(process.env.WORKERS || 4)

if (cluster.isPrimary) {
  let ready = 0
  for (let i = 0; i < workers; i++) cluster.fork()
  cluster.on('message', (_worker, msg) => {
    if (msg === 'listening' && ++ready === workers) console.log(`ready: ${workers} workers on 127.0.0.1:${port}`)
  })
  process.on('SIGTERM', () => {
    for (const w of Object.values(cluster.workers)) w.kill()
    process.exit(0)
  })
} else {
  const clients = new rb.SharedKeyedLimiter({ path: file, rate: '5/minute', burst: 5, maxKeys: 100000 })
  http
    .createServer((req, res) => {
      const key = req.headers['x-api-key'] || 'anonymous'
      const d = clients.check(String(key))
      if (!d.allowed) {
        res.writeHead(429, { 'retry-after': String(Math.ceil(d.retryAfter)), 'content-type': 'text/plain' })
        res.end('Too Many Requests\n')
        return
      }
      res.writeHead(200, { 'content-type': 'text/plain' })
      res.end(`served by worker ${process.pid}\n`)
    })
    .listen(port, '127.0.0.1', () => process.send('listening'))
}
