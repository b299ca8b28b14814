'use strict'
// Express/Connect middleware and a Fastify plugin over the native Gate: the
// Gate (the Rust core) decides the key's bucket, the status, Retry-After,
// the RateLimit fields and the body; this file only moves values between
// the framework and the Gate.

const POLICY_FIELDS = ['name', 'algorithm', 'rate', 'burst', 'limit', 'window']

// Every option the middleware reads: anything else is a misspelling, and
// fails where the middleware is made (as the core's parser does for its own).
const OPTIONS = new Set([
  ...POLICY_FIELDS,
  'policies', 'key', 'keyHeader', 'trustedProxies', 'clientIpHeader', 'ipv6Prefix', 'missingKey',
  'headers', 'body', 'maxKeys', 'overflow', 'concurrencyLimit', 'critical', 'exempt', 'skip', 'handler', 'clock',
  // Fastify's own register options, which it passes on to the plugin.
  'prefix', 'logLevel', 'logSerializers',
  'onDecision', 'label',
])

// Fastify's own register options: never a route's.
const REGISTER_OPTIONS = new Set(['prefix', 'logLevel', 'logSerializers'])

// The options that make a limit's policies: a route gives all of them or
// none (inheriting only the plugin's `burst` under its own `rate` would
// change its limit behind its back).
const POLICY_OPTIONS = new Set([...POLICY_FIELDS, 'policies'])


// A remote policy's answer for `id`, as the gate takes it: a Redis limiter
// checks the key in its policy's own scope (two policies of one middleware
// never share a Redis key); a host-shared table that is full answers null,
// which the gate turns into its full-table answer (503), never a 500.
function answer(policy, id) {
  if (!policy.shared) return policy.limiter.checkIn(policy.name, id)
  try {
    return policy.limiter.check(id)
  } catch (e) {
    if (e != null && e.code === 'ERR_RATEBOUND_TOO_MANY_KEYS') return null
    throw e
  }
}
function typeError(message) {
  const e = new TypeError(message)
  e.code = 'ERR_INVALID_ARG_TYPE'
  return e
}

function invalidOption(message) {
  const e = new TypeError(message)
  e.code = 'ERR_RATEBOUND_INVALID_OPTION'
  return e
}

// The checks every set of middleware options passes before anything is made.
function checkOptions(options) {
  if (options == null || typeof options !== 'object') {
    throw typeError('ratebound middleware options are required')
  }
  for (const name of Object.keys(options)) {
    if (!OPTIONS.has(name)) throw invalidOption(`unknown ratebound middleware option '${name}'`)
  }
  if (options.onDecision != null && typeof options.onDecision !== 'function') {
    throw typeError('onDecision must be a function of the decision event')
  }
}

module.exports = function middleware(Gate, gateDecide, SharedKeyedLimiter) {
  // `raw(req)` is the framework request's Node IncomingMessage (Express:
  // the request itself; Fastify: request.raw).
  function prepare(options, raw, routeOf) {
    checkOptions(options)
    let policies = options.policies
    if (policies == null) {
      const p = {}
      for (const f of POLICY_FIELDS) if (options[f] !== undefined) p[f] = options[f]
      policies = [p]
    }
    // The key: 'ip' (the core's default), { header } (the core reads the
    // header lines itself), or a function whose result the core is given.
    let keyOf = null
    let keyHeader = options.keyHeader
    const k = options.key
    if (typeof k === 'function') keyOf = k
    else if (k != null && typeof k === 'object' && typeof k.header === 'string') {
      if (keyHeader != null) throw typeError('give the key header once: key: { header } or keyHeader')
      keyHeader = k.header
    } else if (k != null && k !== 'ip') {
      throw typeError("key is 'ip', { header: name } or a function of the request")
    }
    // Global limits in Redis (rb.redis limiters) and limits shared by the
    // host's processes (rb.SharedKeyedLimiter) are policies too: given as
    // the limiter itself or { name, limiter }. The gate advertises them and
    // merges their decisions; this file only makes the call.
    const local = []
    const remote = []
    for (const p of policies) {
      // A field a policy does not take is an error naming it ('brust' is
      // not ignored); limiters (Redis, shared) are checked by their kind.
      if (p != null && typeof p === 'object' && p.limiter == null && p.engine == null && !(p instanceof SharedKeyedLimiter)) {
        for (const f of Object.keys(p)) {
          if (!POLICY_FIELDS.includes(f)) throw invalidOption(`policy ${JSON.stringify(p.name ?? '')}: unknown field '${f}'; a policy takes ${POLICY_FIELDS.join(', ')}`)
        }
      }
      const limiter = p != null && p.limiter != null ? p.limiter : p
      const shared = limiter instanceof SharedKeyedLimiter
      if (shared || (limiter != null && typeof limiter.check === 'function' && limiter.engine != null)) {
        remote.push({ name: (p.limiter != null && p.name) || (shared ? 'host' : 'global'), limiter, shared })
      } else {
        local.push(p)
      }
    }
    // Every option is parsed, and defaulted, by the core.
    const gate = new Gate({
      policies: local,
      remote: remote.map((r) => (r.shared ? { name: r.name, shared: r.limiter } : { name: r.name, engine: r.limiter.engine })),
      keyHeader,
      givenKey: keyOf !== null,
      trustedProxies: options.trustedProxies,
      clientIpHeader: options.clientIpHeader,
      ipv6Prefix: options.ipv6Prefix,
      missingKey: options.missingKey,
      headers: options.headers,
      body: options.body,
      maxKeys: options.maxKeys,
      overflow: options.overflow,
      concurrencyLimit: options.concurrencyLimit,
      clock: options.clock,
    })
    const skip = options.skip || options.exempt || null
    const handler = options.handler || null
    const critical = options.critical || null
    // With trustedProxies the peer is the socket's address and the core
    // applies the proxy rules to the header lines; without, the peer is the
    // framework's req.ip (Express's `trust proxy`, Fastify's `trustProxy`)
    // and the core reads no forwarding header.
    const ownProxies = options.trustedProxies != null
    const slot = gate.handle
    // One raw call, one string back: status, content type, body, then
    // header name/value pairs, separated by NUL. The header lines go over
    // as Node received them (rawHeaders: in order, repeated lines kept); the
    // core reads only the ones it needs.
    // Only the lines of the fields the gate reads cross into Rust (each
    // value that crosses costs an N-API call); the gate names them.
    const wanted = gate.headerNames
    function lines(rawHeaders) {
      if (wanted.length === 0 || rawHeaders == null) return undefined
      const out = []
      for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
        const name = rawHeaders[i]
        for (let j = 0; j < wanted.length; j++) {
          const w = wanted[j]
          if (name.length === w.length && (name === w || name.toLowerCase() === w)) {
            out.push(name, rawHeaders[i + 1])
            break
          }
        }
      }
      return out
    }
    function decide(req) {
      const r = raw(req)
      const key = keyOf === null ? undefined : keyOf(req)
      const peer = ownProxies ? (r.socket == null ? undefined : r.socket.remoteAddress) : req.ip
      return gateDecide(slot, key, peer, lines(r.rawHeaders)).split('\0')
    }
    // With Redis policies: the request's identity goes to each limiter (one
    // round trip each, bounded by its deadline; Redis trouble is answered
    // by its fail policy), then the gate decides with their decisions. A
    // promise of the same array `decide` returns.
    async function decideRemote(req) {
      const r = raw(req)
      const key = keyOf === null ? undefined : keyOf(req)
      const peer = ownProxies ? (r.socket == null ? undefined : r.socket.remoteAddress) : req.ip
      const headerLines = lines(r.rawHeaders)
      const id = gate.identity(key, peer, headerLines)
      const decisions = typeof id === 'number' ? [] : await Promise.all(remote.map((x) => answer(x, id)))
      const v = gate.decideWith(key, peer, headerLines, decisions)
      return [String(v.status), v.contentType ?? '', v.body ?? '', v.outcome, v.refusedBy ?? '', ...v.headers]
    }
    // Load shedding (the core's concurrency cap): `enter(req, res)` is true
    // when the request may go on; false when it was answered with 503.
    // Metrics: onDecision({ outcome, policy, policies, label }) for every
    // limited request when set; nothing is done for it otherwise. `label`:
    // the option, else the route (Express: req.route.path; Fastify: the
    // route's url), else null.
    const onDecision = options.onDecision || null
    const label = options.label == null ? null : String(options.label)
    const policyNames = onDecision === null ? null : gate.policyNames
    const report =
      onDecision === null
        ? null
        : (v, route) =>
            onDecision({ outcome: v[3], policy: v[4] === '' ? null : v[4], policies: policyNames, label: label ?? route ?? null })
    let enter = null
    if (gate.capped) {
      const shed = gate.shed()
      enter = (req, res, answer) => {
        if (gate.tryEnter()) {
          let left = false
          res.once('close', () => {
            if (!left) {
              left = true
              gate.leave()
            }
          })
          return true
        }
        if (critical !== null && critical(req)) return true
        if (report !== null) report(['503', '', '', 'shed', ''], routeOf(req))
        answer(shed)
        return false
      }
    }
    return { gate, decide, decideRemote: remote.length > 0 ? decideRemote : null, skip, handler, enter, report }
  }

  function refusal(v) {
    const headers = {}
    let retryAfter = 0
    for (let i = 5; i < v.length; i += 2) {
      headers[v[i]] = v[i + 1]
      if (v[i] === 'retry-after') retryAfter = Number(v[i + 1])
    }
    return { status: Number(v[0]), retryAfter, headers, contentType: v[1], body: v[2] }
  }

  /** Express/Connect middleware. */
  function express(options) {
    const { gate, decide, decideRemote, skip, handler, enter, report } = prepare(
      options,
      (req) => req,
      (req) => (req.route == null ? null : req.route.path),
    )
    const shedWith = (res) => (shed) => {
      res.statusCode = shed.status
      for (let i = 0; i < shed.headers.length; i += 2) res.setHeader(shed.headers[i], shed.headers[i + 1])
      res.setHeader('content-type', shed.contentType)
      res.end(shed.body)
    }
    function ratebound(req, res, next) {
      if (skip !== null && skip(req)) return next()
      // Shedding first: a saturated app refuses before any token is spent.
      if (enter !== null && !enter(req, res, shedWith(res))) return
      if (decideRemote !== null) {
        decideRemote(req).then((v) => answer(req, res, next, v), next)
        return
      }
      let v
      try {
        v = decide(req)
      } catch (e) {
        return next(e)
      }
      answer(req, res, next, v)
    }
    function answer(req, res, next, v) {
      if (report !== null) report(v, req.route == null ? null : req.route.path)
      for (let i = 5; i < v.length; i += 2) res.setHeader(v[i], v[i + 1])
      if (v[0] === '0') return next()
      if (handler !== null) return handler(req, res, next, refusal(v))
      res.statusCode = Number(v[0])
      res.setHeader('content-type', v[1])
      res.end(v[2])
    }
    ratebound.gate = gate
    return ratebound
  }

  const fastifyRaw = (request) => request.raw
  const fastifyRoute = (request) => (request.routeOptions == null ? null : request.routeOptions.url)

  /** The onRequest hook of one prepared gate (the plugin's, or one route's). */
  function fastifyHook(prepared) {
    const { decide, decideRemote, skip, handler, enter, report } = prepared
    function answer(request, reply, next, v) {
      if (report !== null) report(v, request.routeOptions == null ? null : request.routeOptions.url)
      for (let i = 5; i < v.length; i += 2) reply.header(v[i], v[i + 1])
      if (v[0] === '0') return next()
      if (handler !== null) return handler(request, reply, next, refusal(v))
      // A Buffer: Fastify sends it as is, with the core's content type
      // (for a string it would add a charset to a JSON type).
      reply.code(Number(v[0])).header('content-type', v[1]).send(Buffer.from(v[2]))
    }
    return function ratebound(request, reply, next) {
      if (skip !== null && skip(request)) return next()
      if (
        enter !== null &&
        !enter(request, reply.raw, (shed) => {
          for (let i = 0; i < shed.headers.length; i += 2) reply.header(shed.headers[i], shed.headers[i + 1])
          reply.code(shed.status).header('content-type', shed.contentType).send(Buffer.from(shed.body))
        })
      ) {
        return
      }
      if (decideRemote !== null) {
        decideRemote(request).then((v) => answer(request, reply, next, v), next)
        return
      }
      let v
      try {
        v = decide(request)
      } catch (e) {
        return next(e)
      }
      answer(request, reply, next, v)
    }
  }

  /**
   * The Fastify plugin's limits, decided here and nowhere else: every route
   * of the context the plugin is registered in meets the app-wide limit
   * (none with `global: false`), except a route declared after the plugin
   * with `config.rateLimit`: options give it its own limit instead, made
   * when the route is declared (bad options fail there); `false` gives it
   * none. As in @fastify/rate-limit, the plugin's options are the defaults
   * of a route's own: a route inherits every option it does not give —
   * except the policy (`rate`, `burst`, `policies`, ...), inherited whole
   * or not at all, the key (`key`/`keyHeader`, likewise) and `label`.
   */
  function fastifyLimits(options) {
    if (options == null || typeof options !== 'object') {
      throw typeError('ratebound middleware options are required')
    }
    const { global = true, ...rest } = options
    if (typeof global !== 'boolean') {
      throw typeError(`global is true (an app-wide limit, the default) or false (only routes' own limits), not ${String(global)}`)
    }
    // What routes inherit.
    const defaults = {}
    for (const [name, value] of Object.entries(rest)) {
      if (!REGISTER_OPTIONS.has(name) && name !== 'label') defaults[name] = value
    }
    const hasPolicy = (o) => Object.keys(o).some((name) => POLICY_OPTIONS.has(name) && o[name] !== undefined)
    let app = null
    if (global) {
      app = prepare(rest, fastifyRaw, fastifyRoute)
    } else if (hasPolicy(rest)) {
      // Only defaults, but checked now: a bad rate fails at registration.
      prepare(rest, fastifyRaw, fastifyRoute)
    } else {
      checkOptions(rest)
    }
    const appHook = app === null ? null : fastifyHook(app)
    function merged(own) {
      const out = {}
      const ownPolicy = hasPolicy(own)
      const ownKey = own.key !== undefined || own.keyHeader !== undefined
      for (const [name, value] of Object.entries(defaults)) {
        if (ownPolicy && POLICY_OPTIONS.has(name)) continue
        if (ownKey && (name === 'key' || name === 'keyHeader')) continue
        out[name] = value
      }
      return Object.assign(out, own)
    }
    // The routes this registration has seen carry their hook (or null) in
    // a copy of their config. One options object on one path is one limit:
    // Fastify's automatic HEAD route shares its GET route's.
    const seen = Symbol('ratebound.route')
    const made = new WeakMap()
    function ownHook(own, url) {
      let byUrl = made.get(own)
      if (byUrl === undefined) made.set(own, (byUrl = new Map()))
      let hook = byUrl.get(url)
      if (hook === undefined) {
        hook = fastifyHook(prepare(merged(own), fastifyRaw, fastifyRoute))
        byUrl.set(url, hook)
      }
      return hook
    }
    function onRoute(route) {
      const own = route.config == null ? undefined : route.config.rateLimit
      if (own === undefined) return
      const where = `route ${route.method} ${route.url}`
      let hook = null
      if (own !== false) {
        if (own === null || typeof own !== 'object') {
          throw typeError(`${where}: config.rateLimit is the route's limit options or false, not ${String(own)}`)
        }
        try {
          hook = ownHook(own, route.url)
        } catch (e) {
          e.message = `${where}: config.rateLimit: ${e.message}`
          throw e
        }
      }
      route.config = { ...route.config, [seen]: hook }
    }
    // A route with a config.rateLimit this registration never saw was
    // declared before it: an error, never silently the app-wide limit.
    function hookOf(request) {
      const route = request.routeOptions
      const config = route == null ? undefined : route.config
      if (config != null) {
        const hook = config[seen]
        if (hook !== undefined) return hook
        if (config.rateLimit !== undefined) {
          const e = new Error(
            `route ${route.method} ${route.url} has config.rateLimit but was declared before the ratebound plugin was registered: register the plugin first (await app.register(...))`,
          )
          e.code = 'ERR_RATEBOUND_ROUTE_NOT_SEEN'
          throw e
        }
      }
      return appHook
    }
    function onRequest(request, reply, next) {
      let hook
      try {
        hook = hookOf(request)
      } catch (e) {
        return next(e)
      }
      if (hook === null) return next()
      hook(request, reply, next)
    }
    return { gate: app === null ? null : app.gate, onRoute, onRequest }
  }

  /**
   * Fastify plugin: the app-wide limit (unless `global: false`) and the
   * routes' own limits (`config.rateLimit`), in one onRequest hook.
   */
  function fastify(instance, options, done) {
    let limits
    try {
      limits = fastifyLimits(options)
    } catch (e) {
      return done(e)
    }
    instance.decorate('ratebound', limits.gate)
    instance.addHook('onRoute', limits.onRoute)
    instance.addHook('onRequest', limits.onRequest)
    done()
  }

  /**
   * One route's limit: an onRequest hook for the route's options,
   * `fastify.post('/login', { onRequest: rb.fastify.limit({ rate: '5/minute' }) }, handler)`.
   * The same hook on several routes is one shared limit. Options are checked
   * here, when the route is declared.
   */
  fastify.limit = function limit(options) {
    const prepared = prepare(options, fastifyRaw, fastifyRoute)
    const hook = fastifyHook(prepared)
    hook.gate = prepared.gate
    return hook
  }

  // Like fastify-plugin: the hooks apply to the context the plugin is
  // registered in (the whole app, at the root), not only to a child context
  // of its own; the onRoute hook sees the routes of child contexts made after it.
  fastify[Symbol.for('skip-override')] = true
  fastify[Symbol.for('fastify.display-name')] = 'ratebound'
  fastify[Symbol.for('plugin-meta')] = { name: 'ratebound', fastify: '>=4' }

  return { express, fastify }
}
