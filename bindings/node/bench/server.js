'use strict'
// A trivial app for bench/http.js: node bench/server.js express|fastify plain|ratebound
const [framework, mode] = process.argv.slice(2)
// The parent asks for this process's CPU time (µs) over IPC.
process.on('message', () => {
  const u = process.cpuUsage()
  process.send(u.user + u.system)
})
const rb = require('..')
// Never refuses during the run: the cost measured is the whole decision
// (key, bucket, RateLimit fields) on every request.
const options = { rate: 1e8, burst: 1e8 }

if (framework === 'express') {
  const app = require('express')()
  if (mode === 'ratebound') app.use(rb.express(options))
  app.get('/', (req, res) => res.send('hello'))
  const server = app.listen(0, '127.0.0.1', () => console.log(server.address().port))
} else {
  const app = require('fastify')()
  const start = async () => {
    if (mode === 'ratebound') await app.register(rb.fastify, options)
    app.get('/', async () => 'hello')
    await app.listen({ port: 0, host: '127.0.0.1' })
    console.log(app.server.address().port)
  }
  start()
}
