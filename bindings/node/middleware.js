'use strict'
// Express/Connect middleware and a Fastify plugin over the native Gate: the
// Gate (the Rust core) runs the whole request sequence — exempt, a
// concurrency place (shed at a full cap unless critical; background work
// first, by the priority hook), the key, the policies, onDecision — and
// answers with the status, Retry-After, the
// RateLimit fields and the body. This file only moves values between the
// framework and the Gate: the request's peer and header lines in, the
// answer out, and the remote policies' round trips between admit and finish.

// Fastify's own register options, which it passes on to the plugin: never
// a route's, nor the gate's.
const REGISTER_OPTIONS = new Set(['prefix', 'logLevel', 'logSerializers'])

// A remote policy's answer for `id`, as the gate takes it: a Redis limiter
// checks the key in its policy's own scope (two policies of one middleware
// never share a Redis key). A check that throws or rejects answers its
// error, which the gate maps by the core's one rule (by its code): a full
// host-shared table is 503 as the gate's own, any other error a failed
// store (503 with Retry-After, outcome 'store_error') — never a 500.
function answer(policy, id) {
  try {
    const d = policy.shared ? policy.limiter.check(id) : policy.limiter.checkIn(policy.name, id)
    return d != null && typeof d.then === 'function' ? Promise.resolve(d).catch(failure) : d
  } catch (e) {
    return failure(e)
  }
}

// What was thrown, as an Error the gate can read a code from.
function failure(e) {
  return e instanceof Error ? e : new Error(`a remote policy's check threw ${String(e)}`)
}

// A remote policy's episode of failures, as the gate tells it: once when it
// begins (with the error) and once when it ends, as a process warning.
// `cause`: the answer of the policy that failed.
function told(v, cause) {
  const notice = v.notice
  if (v.outcome === 'store_error') {
    const detail = cause instanceof Error ? `: ${cause.name}: ${cause.message}` : ''
    process.emitWarning(notice + detail, { type: 'RateboundWarning', code: 'RATEBOUND_STORE_FAILING' })
  } else {
    process.emitWarning(notice, { type: 'RateboundWarning', code: 'RATEBOUND_STORE_ANSWERS' })
  }
}

const { typeError, invalidOption } = require('./errors.js')

// What a refused request gets, for `handler`.
function refusal(v) {
  const headers = {}
  let retryAfter = 0
  const h = v.headers
  for (let i = 0; i < h.length; i += 2) {
    headers[h[i]] = h[i + 1]
    if (h[i] === 'retry-after') retryAfter = Number(h[i + 1])
  }
  return { status: v.status, retryAfter, headers, contentType: v.contentType, body: v.body }
}

module.exports = function middleware(native, policyFields) {
  const { Gate, Ask, SharedKeyedLimiter } = native
  // The options that make a limit's policies (the core's policy fields and
  // the list): a Fastify route gives all of them or none (inheriting only
  // the plugin's `burst` under its own `rate` would change its limit
  // behind its back).
  const POLICY_OPTIONS = new Set([...policyFields, 'policies'])

  // A remote policy of `policies` — a Redis limiter (rb.redis) or a limit
  // shared by the host's processes (rb.SharedKeyedLimiter), as itself or
  // { name, limiter } — or null for a local one (its fields the core's).
  function remoteOf(p) {
    if (p == null || typeof p !== 'object') return null
    const wrapped = p.limiter != null
    const limiter = wrapped ? p.limiter : p
    const shared = limiter instanceof SharedKeyedLimiter
    if (!shared && !(typeof limiter.check === 'function' && limiter.engine != null)) return null
    return { name: wrapped ? p.name : undefined, limiter, shared }
  }

  // The middleware's options split: the framework's (hooks, handler,
  // label; Fastify's register options dropped) and the gate's, every one
  // passed on by name for the core to read — its rules and defaults are
  // the core's alone. Remote limiters leave `policies` for `remote` (the
  // gate takes their engines; the middleware asks them).
  function split(options) {
    if (options == null || typeof options !== 'object') {
      throw typeError('ratebound middleware options are required')
    }
    const { skip, exempt, critical, priority, handler, onDecision, label, key, policies, ...gateOptions } = options
    // One name per concept: the exemption hook is `exempt` in the Gate and
    // in Python too.
    if (skip !== undefined) throw invalidOption("unknown ratebound middleware option 'skip': the exemption hook is 'exempt'")
    for (const name of REGISTER_OPTIONS) delete gateOptions[name]
    for (const name of ['remote', 'givenKey']) {
      if (gateOptions[name] !== undefined) {
        throw invalidOption(`unknown ratebound middleware option '${name}' (remote limiters go in policies, a key function in key)`)
      }
    }
    if (onDecision != null && typeof onDecision !== 'function') {
      throw typeError('onDecision must be a function of the decision event')
    }
    const remote = []
    if (Array.isArray(policies)) {
      const local = []
      for (const p of policies) {
        const r = remoteOf(p)
        if (r === null) local.push(p)
        else remote.push(r)
      }
      gateOptions.policies = local
      if (remote.length > 0) {
        gateOptions.remote = remote.map((r) => (r.shared ? { name: r.name, shared: r.limiter } : { name: r.name, engine: r.limiter.engine }))
      }
    } else if (policies !== undefined) {
      gateOptions.policies = policies
    }
    let keyOf
    if (typeof key === 'function') keyOf = key
    else if (key !== undefined) gateOptions.key = key
    // The priority (a function of the request, or one of the core's words
    // for every request) goes to the gate as it is: the gate checks it.
    return {
      gateOptions,
      remote,
      keyOf,
      exempt: exempt || undefined,
      critical: critical || undefined,
      priority: priority ?? undefined,
      handler,
      onDecision,
      label,
    }
  }

  // `raw(req)` is the framework request's Node IncomingMessage (Express:
  // the request itself; Fastify: request.raw); `routeOf(req)` its route,
  // onDecision's label when the options give none.
  function prepare(options, raw, routeOf) {
    const { gateOptions, remote, keyOf, exempt, critical, priority, handler, onDecision, label } = split(options)
    // Metrics: onDecision({ outcome, policy, policies, label }) for every
    // limited request, told by the gate's sequence, and a shed request's
    // `priority`.
    const text = label == null ? null : String(label)
    let policies = null
    const report =
      onDecision == null
        ? undefined
        : (req, outcome, policy, priority) => {
            const event = { outcome, policy, policies, label: text ?? routeOf(req) ?? null }
            if (priority !== undefined) event.priority = priority
            onDecision(event)
          }
    const gate = new Gate(gateOptions, { exempt, critical, priority, key: keyOf, report })
    // An adaptive limit times each request when its response's head is
    // written (a long body is not a slow service).
    const cap = gate.concurrency
    const timed = cap !== null && cap.adaptive
    if (report !== undefined) policies = gate.policyNames
    // The remote policies, in the order the gate takes their answers, by
    // the names it gave them.
    const names = gate.remoteNames
    remote.forEach((r, i) => (r.name = names[i]))
    // The client address is the socket's peer, always — the rule of every
    // front door: a forwarding header is read only under the middleware's
    // own trustedProxies, by the core, never through the framework's
    // req.ip (Express's `trust proxy`, Fastify's `trustProxy`).
    // Only the lines of the fields the gate reads cross into Rust (each
    // value that crosses costs an N-API call), as Node received them
    // (rawHeaders: in order, repeated lines kept); the gate names them.
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
    // The gate's whole sequence for `req`: null (exempt), an Admission, or
    // with remote policies an Ask.
    function admit(req) {
      const r = raw(req)
      return gate.admit(req, r.socket == null ? undefined : r.socket.remoteAddress, lines(r.rawHeaders))
    }
    // A request waiting for its remote policies: each is asked once for
    // the request's identity (one round trip each, bounded by its deadline;
    // Redis trouble is answered by its fail policy, an error that escapes
    // it by the gate's rule), then the gate finishes. The ask holds the
    // request's place, given back when the response closes first (the
    // client left: undefined, nothing to answer).
    async function finish(ask, req, res) {
      const left = () => ask.close()
      res.once('close', left)
      let answers
      try {
        const id = ask.identity
        answers = await Promise.all(remote.map((p) => answer(p, id)))
      } catch (e) {
        ask.close()
        throw e
      } finally {
        res.removeListener('close', left)
      }
      if (ask.closed) return undefined
      const v = gate.finish(ask, answers, req)
      if (v.notice !== undefined) told(v, answers[remote.findIndex((p) => p.name === v.refusedBy)])
      return v
    }
    return { gate, admit, finish, timed, handler: handler || null }
  }

  // The Gate's options of `options` checked, without a gate: the defaults
  // of Fastify routes' limits (no policy needed).
  function check(options) {
    const { gateOptions, keyOf, priority } = split(options)
    Gate.check(gateOptions, { key: keyOf, priority })
  }

  // How each framework answers: its raw Node response (for 'close'), a
  // header read and set, and a refusal sent.
  const EXPRESS = {
    raw: (res) => res,
    get: (res, name) => res.getHeader(name),
    header: (res, name, value) => res.setHeader(name, value),
    send(res, v) {
      res.statusCode = v.status
      res.setHeader('content-type', v.contentType)
      res.end(v.body)
    },
  }
  const FASTIFY = {
    raw: (reply) => reply.raw,
    get: (reply, name) => reply.getHeader(name),
    header: (reply, name, value) => reply.header(name, value),
    // A Buffer: Fastify sends it as is, with the core's content type (for a
    // string it would add a charset to a JSON type).
    send: (reply, v) => reply.code(v.status).header('content-type', v.contentType).send(Buffer.from(v.body)),
  }

  // The gate's fields `h` ([name, value, ...]) on the response. Quota
  // fields another limit set already (the site-wide one, before a route's)
  // are merged by the core's rule: lists joined, the site's entries first.
  const GATE_FIELDS = native.http.gateFields()
  function setFields(io, res, h) {
    let clash = false
    for (let i = 0; i < h.length && !clash; i += 2) clash = io.get(res, h[i]) !== undefined
    if (clash) {
      const present = []
      for (const name of GATE_FIELDS) {
        const value = io.get(res, name)
        if (value !== undefined) present.push(name, [].concat(value).join(', '))
      }
      h = native.http.mergeFields(present, h)
    }
    for (let i = 0; i < h.length; i += 2) io.header(res, h[i], h[i + 1])
  }

  /**
   * The one front door over a prepared gate, for both frameworks:
   * `(req, res, next)` — admit, ask the remote policies if there are any,
   * then answer through `io` (EXPRESS or FASTIFY) and hold the place until
   * the response closes.
   */
  function frontDoor(prepared, io) {
    const { admit, finish, handler, timed } = prepared
    function respond(req, res, next, v) {
      if (v === null) return next()
      if (v === undefined) return
      const place = v.place
      // Held until the response is done: a streaming body is in flight
      // until it ends. Timed (an adaptive limit) when its head is written.
      if (place !== null) {
        const r = io.raw(res)
        if (timed) timeAtHead(r, place)
        r.once('close', () => place.release())
      }
      setFields(io, res, v.headers)
      if (v.status === 0) return next()
      if (handler !== null) return handler(req, res, next, refusal(v))
      io.send(res, v)
    }
    return function ratebound(req, res, next) {
      let v
      try {
        v = admit(req)
      } catch (e) {
        return next(e)
      }
      if (v instanceof Ask) {
        finish(v, req, io.raw(res)).then((v) => respond(req, res, next, v), next)
        return
      }
      respond(req, res, next, v)
    }
  }

  // The place's request timed when the response's head is written: Node
  // writes it through writeHead (res.end() and Fastify call it too). The
  // wrapper stays (another middleware may have wrapped it in turn) and
  // times once.
  function timeAtHead(r, place) {
    const writeHead = r.writeHead
    let pending = true
    r.writeHead = function (...args) {
      if (pending) {
        pending = false
        place.responded()
      }
      return writeHead.apply(this, args)
    }
  }

  // `hook.concurrency`: the gate's concurrency cap now (null without one).
  function gauge(hook, gate) {
    Object.defineProperty(hook, 'concurrency', { get: () => gate.concurrency, enumerable: true })
  }

  /** Express/Connect middleware. */
  function express(options) {
    const prepared = prepare(
      options,
      (req) => req,
      (req) => (req.route == null ? null : req.route.path),
    )
    const { gate } = prepared
    const ratebound = frontDoor(prepared, EXPRESS)
    ratebound.gate = gate
    gauge(ratebound, gate)
    return ratebound
  }

  const fastifyRaw = (request) => request.raw
  const fastifyRoute = (request) => (request.routeOptions == null ? null : request.routeOptions.url)

  /** The onRequest hook of one prepared gate (the plugin's, or one route's). */
  function fastifyHook(prepared) {
    return frontDoor(prepared, FASTIFY)
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
      if (!REGISTER_OPTIONS.has(name)) defaults[name] = value
    }
    const hasPolicy = (o) => Object.keys(o).some((name) => POLICY_OPTIONS.has(name) && o[name] !== undefined)
    let app = null
    if (global) {
      app = prepare(rest, fastifyRaw, fastifyRoute)
    } else if (hasPolicy(rest)) {
      // Only defaults, but checked now: a bad rate fails at registration.
      prepare(rest, fastifyRaw, fastifyRoute)
    } else {
      check(rest)
    }
    const appHook = app === null ? null : fastifyHook(app)
    // A route's options by the core's rules: which it takes
    // (Gate.routeOption) and which of the plugin's it inherits
    // (Gate.routeInherits).
    function merged(own) {
      const given = Object.keys(own).filter((name) => own[name] !== undefined)
      for (const name of given) Gate.routeOption(name)
      const out = {}
      for (const [name, value] of Object.entries(defaults)) {
        if (Gate.routeInherits(name, given)) out[name] = value
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
    try {
      const limits = fastifyLimits(options)
      instance.decorate('ratebound', limits.gate)
      instance.addHook('onRoute', limits.onRoute)
      instance.addHook('onRequest', limits.onRequest)
    } catch (e) {
      return done(e)
    }
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
    gauge(hook, prepared.gate)
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
