// Counting what the limits decide with prom-client: admitted, refused and
// shed requests per policy and route, on an Express app.
//
//   npm install prom-client
//   PORT=8000 node examples/metrics.js     # then GET /metrics
//
// Every front door takes `onDecision`; it is called once per limited request
// with { outcome, policy, policies, label } and costs nothing when not set.
const express = require('express')
const client = require('prom-client')
const rb = require('..')

const registry = new client.Registry()
const decisions = new client.Counter({
  name: 'ratebound_requests',
  help: 'Requests the rate limits decided, by policy, route and outcome',
  labelNames: ['policy', 'route', 'outcome'],
  registers: [registry],
})

function count(event) {
  if (event.outcome === 'refused') {
    // The one policy that refused.
    decisions.inc({ policy: event.policy, route: event.label || '', outcome: 'refused' })
  } else {
    // Admitted (or shed, or rejected): every policy of the limit saw it.
    for (const policy of event.policies) decisions.inc({ policy, route: event.label || '', outcome: event.outcome })
  }
}

function makeApp() {
  const app = express()
  app.post('/login', rb.express({ rate: '5/minute', onDecision: count }), (req, res) => res.json({ ok: true }))
  app.get(
    '/api/items',
    rb.express({
      policies: [
        { name: 'burst', rate: '10/s burst 20' },
        { name: 'hourly', rate: '1000/hour' },
      ],
      key: { header: 'x-api-key' },
      onDecision: count,
    }),
    (req, res) => res.json([]),
  )
  app.get('/metrics', async (req, res) => {
    res.set('content-type', registry.contentType)
    res.send(await registry.metrics())
  })
  return app
}

module.exports = { makeApp, registry }

if (require.main === module) {
  const port = Number(process.env.PORT || 8000)
  makeApp().listen(port, '127.0.0.1', () => console.log(`listening on 127.0.0.1:${port}`))
}
