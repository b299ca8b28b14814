// Type-checked with `tsc --noEmit` against ratebound.d.ts (npm run typecheck).
import {
  Admission,
  AllOf,
  ConcurrencyState,
  DecisionEvent,
  Priority,
  Ask,
  Decision,
  FixedWindow,
  Gate,
  KeyedLimiter,
  LeakyBucket,
  ManualClock,
  RateLimitExceededError,
  SlidingLog,
  SharedKeyedLimiter,
  SharedTokenBucket,
  SlidingWindow,
  TokenBucket,
  express,
  fastify,
  FastifyRouteRateLimit,
  http,
  redis,
  RedisCall,
  RedisDecision,
  RedisNotice,
  RedisEngine,
  OutboundEvent,
  OutboundRequestOptions,
  fetch as rbFetch,
  axios as rbAxios,
} from 'ratebound'
import axiosDefault, { AxiosInstance } from 'axios'
import IORedis, { Cluster } from 'ioredis'
import { createClient, createCluster } from 'redis'
import Fastify from 'fastify'

// Route configs typed the way the README shows users (ratebound's own
// declarations do not augment Fastify's).
declare module 'fastify' {
  interface FastifyContextConfig {
    rateLimit?: FastifyRouteRateLimit
  }
}

const clock = new ManualClock()
clock.advance(0.25)
const t: number = clock.now()
const tb = new TokenBucket({ rate: 2, burst: 3, clock })
const tb2 = new TokenBucket({ rate: '100/minute' })
const lifted: 'lifted' | 'not_paused' | 'queued' = tb.resume()
void lifted
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

const mw = express({ rate: 1, burst: 2, key: { header: 'x-api-key' }, exempt: (req) => req.path === '/health', concurrencyLimit: 64, critical: (req) => req.path === '/pay' })
const behindCloudflare = express({ rate: 1, trustedProxies: ['173.245.48.0/20'], clientIpHeader: 'cf-connecting-ip', missingKey: 401, keyHeader: 'x-api-key' })
const gate: Gate = mw.gate
const v = gate.decide(undefined, '127.0.0.1', ['X-API-Key', 'alice'])
const status: number = v.status
const given = new Gate({ policies: [{ rate: 1 }], givenKey: true, trustedProxies: 1 })
given.decide('alice', '127.0.0.1')
const hooked = new Gate(
  { rate: '10/s', concurrencyLimit: 8, key: 'x-api-key' },
  { exempt: (req) => req.url === '/health', critical: () => false, report: (req, outcome, by) => void [req, outcome, by] },
)
const admitted: Admission | Ask | null = hooked.admit({ url: '/' }, '127.0.0.1', ['X-API-Key', 'alice'])
if (admitted instanceof Ask) {
  const id: Buffer = admitted.identity
  const done: Admission = hooked.finish(admitted, [null], {})
  const failed: Admission = hooked.finish(admitted, [new Error('the store failed')], {})
  const notice: string | undefined = failed.notice
  void [id, done.status, notice]
} else if (admitted !== null) {
  const held: boolean = admitted.place !== null && admitted.place.held
  admitted.place?.release()
  const out: string[] = admitted.headers
  void [held, out, admitted.outcome, admitted.refusedBy]
}
const byGivenKey = new Gate({ policies: [{ rate: 1 }] }, { key: (req: { user?: string }) => req.user })
void byGivenKey.remoteNames
const plugin: typeof fastify = fastify
const secs: number = http.retryAfterSecs(1)
const client: string = http.clientIp('10.0.0.5', ['X-Forwarded-For', '203.0.113.9'], ['10.0.0.0/8'], 'x-forwarded-for')

const engine0 = (): RedisEngine => new RedisEngine({ rate: 10, burst: 20 })

async function global(): Promise<void> {
  const io = new IORedis({ enableOfflineQueue: false, maxRetriesPerRequest: 1 })
  const nr = createClient({ disableOfflineQueue: true })
  const ioCluster = new Cluster([{ host: '127.0.0.1', port: 7000 }])
  const nrCluster = createCluster({ rootNodes: [{ url: 'redis://127.0.0.1:7000' }] })
  const tb = new redis.TokenBucket({ client: io, rate: '10/s', burst: 20, onError: 'local', localRate: 1, lease: 5 })
  const fw = redis.FixedWindow({ client: nr, limit: 100, window: 60, prefix: 'app:', timeout: 0.1 })
  const sw = new redis.SlidingWindow({ client: ioCluster, limit: 100, window: 60, onError: 'closed', breakerCooldown: 2 })
  const tb2 = new redis.TokenBucket({ client: nrCluster, rate: 10 })
  const unbatched = new redis.TokenBucket({ client: io, rate: 10, batch: false })
  const batchRuns: number = unbatched.stats.batches + unbatched.stats.batched
  const d: RedisDecision = await tb.check('partner-api')
  const source: 'redis' | 'lease' | 'fail_open' | 'fail_closed' | 'local' | 'damaged' | 'busy' = d.source
  const scoped: RedisDecision = await tb.checkIn('burst', 'partner-api')
  const waitedFrom: string = await tb.acquire('partner-api', 1, { timeout: 5, signal: new AbortController().signal })
  const held = await tb.reserve('partner-api', 1, { maxWait: 2 })
  const heldDelay: number = held.delay
  const gaveBack: boolean = await held.cancel()
  const shifted: number | null = await tb.pause('partner-api', 30)
  const resumed: 'lifted' | 'not_paused' | 'queued' | null = await tb.resume('partner-api')
  const ok: boolean = await fw.tryAcquire(42, 2)
  const at: RedisDecision = await sw.checkAt(Buffer.from('k'), 1, 1_200_000_000_000_000)
  const returned: number = await tb2.close()
  const open: boolean = tb.breakerOpen
  const calls: number = tb.stats.calls + tb.stats.evals + tb.stats.timeouts + tb.stats.errors
  const answered: number = tb.stats.redis + tb.stats.lease + tb.stats.damaged + tb.stats.failOpen + tb.stats.failClosed + tb.stats.failLocal + tb.stats.busy
  const waited: number = tb.stats.queued + tb.stats.unsent
  const sparing: boolean = tb.stats.breakerOpen && engine0().stats.breakerOpen
  const notices: RedisNotice[] = engine0().takeNotices()
  const told: boolean = engine0().hasNotices
  const engine = new RedisEngine({ rate: 10, burst: 20 })
  const b = engine.begin('k', 1)
  if (b instanceof RedisCall) {
    const args: string[] = b.args
    const key: Buffer = b.key
    const later: RedisDecision = engine.finish(b.at(1), [1, 0, 0, 0, 1], false, null)
    const failed: RedisDecision = engine.finish(b, null, true)
    void [args, key, later, failed]
  } else {
    const local: RedisDecision = b
    void local
  }
  void [source, ok, at, returned, open, calls, engine.drain(), tb.engine.breakerOpen]
  // @ts-expect-error: a client is required
  new redis.TokenBucket({ rate: 10 })
  // @ts-expect-error: no leasing on a sliding window
  new redis.SlidingWindow({ client: io, limit: 1, window: 1, lease: 2 })
  // @ts-expect-error: onError is 'open', 'closed' or 'local'
  new redis.TokenBucket({ client: io, rate: 1, onError: 'maybe' })
}

// @ts-expect-error: missingKey is 'ip', 'shared' or a status
express({ rate: 1, missingKey: 'nobody' })

// @ts-expect-error: rate is a number or a string
new TokenBucket({ rate: true })
// @ts-expect-error: check takes a count
tb.check('two')

export { t, d2, ok, fields, kd, removed, size, waiting, status, plugin, secs, client, behindCloudflare, global }

// Limits shared by the host's processes (type-checked, not run).
function sharedLimits(): void {
  const bucket = new SharedTokenBucket({ path: '/dev/shm/app.limit', rate: '10/s', burst: 20 })
  const ok: boolean = bucket.tryAcquire()
  const d: Decision = bucket.check(2)
  const left: number = bucket.available()
  const clients = new SharedKeyedLimiter({ path: '/dev/shm/clients.limit', rate: 5, burst: 5, maxKeys: 1000 })
  const c: Decision = clients.check('alice')
  const size: number = clients.size + clients.slots + clients.limit
  express({ policies: [{ name: 'local', rate: 100 }, clients, { name: 'clients', limiter: clients }] })
  void [ok, d, left, c, size]
}
void sharedLimits

// A route's own limit (type-checked, not run).
const loginHook = fastify.limit({ rate: '5/minute' })
void loginHook.gate

// Adaptive load shedding and priorities (type-checked, not run).
const adaptive = express({
  rate: 100,
  concurrencyLimit: 'auto',
  concurrencyInitial: 20,
  concurrencyMin: 2,
  concurrencyMax: 500,
  concurrencyTolerance: 1.5,
  backgroundFraction: 0.5,
  storeErrorRetryAfter: 5,
  priority: (req): Priority => (req.path.startsWith('/batch') ? 'background' : 'normal'),
  onDecision: (e: DecisionEvent) => void ((e.outcome === 'shed' && e.priority === 'background') || e.outcome === 'store_error'),
})
const now: ConcurrencyState | null = adaptive.concurrency
if (now !== null) void [now.limit, now.inFlight, now.adaptive, now.baselineMs, now.recentMs, now.windows]
const routeGauge: ConcurrencyState | null = fastify.limit({ rate: 1, concurrencyLimit: 8, priority: 'background' }).concurrency
const prioritized = new Gate(
  { policies: [], concurrencyLimit: 'auto' },
  { priority: () => 'critical', report: (req, outcome, by, priority) => void [outcome, by, priority] },
)
const shedAs: 'normal' | 'background' | undefined = prioritized.decide().priority
const gateNow: ConcurrencyState | null = prioritized.concurrency
const timedPlace = prioritized.admit({})
if (timedPlace !== null && !(timedPlace instanceof Ask)) timedPlace.place?.responded()
// @ts-expect-error: concurrencyLimit is a number or 'auto'
express({ rate: 1, concurrencyLimit: 'fast' })
// @ts-expect-error: a priority is 'critical', 'normal' or 'background'
express({ rate: 1, concurrencyLimit: 8, priority: 'urgent' })
// @ts-expect-error: the priority function returns a Priority
express({ rate: 1, concurrencyLimit: 8, priority: () => 3 })
void [routeGauge, shedAs, gateNow]

// Metrics (type-checked, not run).
const counted = express({ rate: 5, label: 'login', onDecision: (e) => void [e.outcome, e.policy, e.policies.length, e.label] })
void counted

// Fastify routes' own limits under the plugin (type-checked, not run).
async function fastifyRoutes(): Promise<void> {
  const app = Fastify()
  await app.register(fastify, { rate: 100, key: { header: 'x-api-key' }, onDecision: (e) => void e.outcome })
  app.post('/login', { config: { rateLimit: { rate: '5/minute', onDecision: null } } }, async () => 'ok')
  app.get('/health', { config: { rateLimit: false } }, async () => 'ok')
  // @ts-expect-error: a rate is a number or a string
  app.get('/bad', { config: { rateLimit: { rate: true } } }, async () => 'ok')
  const routesOnly = Fastify()
  await routesOnly.register(fastify, { global: false, onDecision: (e) => void e.label })
  // Defaults for the routes' own limits.
  await routesOnly.register(fastify, { global: false, rate: 5, trustedProxies: ['127.0.0.1/32'] })
  // @ts-expect-error: global is a boolean
  await routesOnly.register(fastify, { global: 'no', rate: 5 })
  const own: FastifyRouteRateLimit = { rate: 3, key: { header: 'x-api-key' } }
  void own
}
void fastifyRoutes

// Calling a partner (type-checked, not run): rb.fetch and rb.axios. The
// per-request options on axios's config, typed the way the README shows.
declare module 'axios' {
  interface AxiosRequestConfig {
    ratebound?: OutboundRequestOptions
  }
}
async function outboundClients(): Promise<void> {
  const io = new IORedis()
  const partner = new redis.TokenBucket({ client: io, rate: '10/s', burst: 20 })
  const events: OutboundEvent[] = []
  const call = rbFetch({ limiter: partner, key: 'partner', timeout: 5, retries: 2, maxPause: 60, statuses: [429, 503], onDecision: (e) => events.push(e) })
  const res: Response = await call('https://partner.example/v1/items', { ratebound: { timeout: 1, n: 2 }, signal: new AbortController().signal })
  const byHost = rbFetch({ limiter: new KeyedLimiter({ rate: 5 }), key: (url, init) => `${url.host}:${init?.method ?? 'GET'}`, fetch: globalThis.fetch })
  await byHost(new URL('https://a.example/'), { ratebound: { key: 'batch' } })
  rbFetch({ limiter: new SharedTokenBucket({ path: '/dev/shm/partner.limit', rate: 5 }), anyMethod: true })
  const api: AxiosInstance = rbAxios(axiosDefault.create({ baseURL: 'https://partner.example' }), {
    limiter: new TokenBucket({ rate: 5 }),
    adaptive: true,
    onDecision: (e) => void [e.outcome, e.key, e.attempt, e.status, e.seconds, e.capped, e.fromRate, e.toRate],
  })
  const gauge: number = new TokenBucket({ rate: 5 }).learnedRate()
  const fleetGauge: number = partner.learnedRate('partner')
  const got = await api.get<string>('/v1/items', { ratebound: { timeout: 2 } })
  const body: string = got.data
  const ejected: boolean = rbAxios.eject(api)
  const outcome: 'waited' | 'adapted' | 'paused' | 'retried' | 'gave_up' = events[0].outcome
  // @ts-expect-error: a limiter is required
  rbFetch({ timeout: 1 })
  // @ts-expect-error: a window cannot be paused (also a TypeError at run time)
  rbFetch({ limiter: new FixedWindow({ limit: 10, window: 1 }) })
  // @ts-expect-error: adaptive is a boolean (also a TypeError at run time)
  rbFetch({ limiter: partner, adaptive: 'yes' })
  // @ts-expect-error: per-request options are timeout, key and n
  await call('https://partner.example/', { ratebound: { retries: 3 } })
  // @ts-expect-error: the first argument is an axios instance
  rbAxios({}, { limiter: partner })
  void [res, body, ejected, outcome, gauge]
}
void outboundClients
