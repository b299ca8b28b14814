// Type-checked with `tsc --noEmit` against index.d.ts (npm run typecheck).
import {
  AllOf,
  Decision,
  FixedWindow,
  Gate,
  KeyedLimiter,
  LeakyBucket,
  ManualClock,
  RateLimitExceededError,
  SlidingLog,
  SlidingWindow,
  TokenBucket,
  express,
  fastify,
  http,
} from 'ratebound'

const clock = new ManualClock()
clock.advance(0.25)
const t: number = clock.now()
const tb = new TokenBucket({ rate: 2, burst: 3, clock })
const tb2 = new TokenBucket({ rate: '100/minute' })
const d: Decision = tb.check()
const d2: Decision = tb.check(2)
const ok: boolean = tb.tryAcquire()
const fields: [boolean, number, number, number, number] = [d.allowed, d.limit, d.remaining, d.retryAfter, d.resetAfter]
const windows = [
  new FixedWindow({ limit: 10, window: 1 }),
  new SlidingWindow({ limit: 10, window: 1 }),
  new SlidingLog({ limit: 10, window: 1 }),
]
const lb = new LeakyBucket({ rate: 10, maxDelay: 0.5 })
const all = new AllOf([tb, lb, ...windows])
const k = new KeyedLimiter({ rate: 1, burst: 2, maxKeys: 100000, clock })
const kd: Decision = k.check('alice')
k.check(42, 1)
k.check(Buffer.from('x'))
const removed: number = k.cleanup() + k.cleanupIdle(300)
const size: number = k.size

async function waiting(): Promise<void> {
  const ac = new AbortController()
  await tb.acquire(1, { timeout: 0.5, signal: ac.signal })
  await all.acquire()
  await k.acquire('alice', 1, { timeout: 1 })
  try {
    await tb2.acquire()
  } catch (e) {
    if (e instanceof RateLimitExceededError) {
      const wait: number = e.retryAfter
    }
  }
}

const mw = express({ rate: 1, burst: 2, key: { header: 'x-api-key' }, skip: (req) => req.path === '/health', concurrencyLimit: 64, critical: (req) => req.path === '/pay' })
const behindCloudflare = express({ rate: 1, trustedProxies: ['173.245.48.0/20'], clientIpHeader: 'cf-connecting-ip', missingKey: 401, keyHeader: 'x-api-key' })
const gate: Gate = mw.gate
const v = gate.decide(undefined, '127.0.0.1', ['X-API-Key', 'alice'])
const status: number = v.status
const given = new Gate({ policies: [{ rate: 1 }], givenKey: true, trustedProxies: 1 })
given.decide('alice', '127.0.0.1')
const plugin: typeof fastify = fastify
const secs: number = http.retryAfterSecs(1)
const client: string = http.clientIp('10.0.0.5', ['X-Forwarded-For', '203.0.113.9'], ['10.0.0.0/8'], 'x-forwarded-for')

// @ts-expect-error: missingKey is 'ip', 'shared' or a status
express({ rate: 1, missingKey: 'nobody' })

// @ts-expect-error: rate is a number or a string
new TokenBucket({ rate: true })
// @ts-expect-error: check takes a count
tb.check('two')

export { t, d2, ok, fields, kd, removed, size, waiting, status, plugin, secs, client, behindCloudflare }
