'use strict'
// The client side of the Redis drivers (redis.js), stateless but for
// whenEnded's weak map: which client the application passed — ioredis
// (Redis or Cluster) or node-redis v4+ (createClient or createCluster) —
// and how each sends a script call (EVALSHA / EVAL, one key or a batch;
// ioredis' socket corked within a turn of the event loop, node-redis' raw
// sendCommand); the pause subscription on a duplicate of the client; the
// clients' errors as the engine is told them; and whenEnded, which closes
// the limiters' subscribers with the application's client. No native calls
// and no limiting logic here.
//
// Pause news: a pause that moved reservations is PUBLISHed on the prefix's
// channel (rb:pause), and a token bucket listens there from its first wait
// on, on a duplicate of the application's client in subscriber mode; every
// message goes to the engine's hear(), which moves the waiters it holds.

// An ioredis socket is written as soon as the calls of a turn hold this
// many keys.
const WRITE_EVERY = 8

function errorText(e) {
  if (e == null) return 'unknown error'
  if (typeof e.message === 'string' && e.message !== '') return e.message
  return String(e)
}

// Never rejects: a client's promise with its failure swallowed.
function quietly(p) {
  try {
    Promise.resolve(p).catch(() => {})
  } catch {}
}

// A subscription to `channel` on `sub` (a duplicate of the application's
// client): `ready` resolves once subscribed (true) or on the first failure
// (false); the client reconnects and resubscribes by itself afterwards.
function subscription(subscribe, isReady, stop) {
  let subscribed = false
  let closed = false
  const ready = (async () => {
    await subscribe()
    subscribed = true
    return true
  })().catch(() => false)
  return {
    ready,
    listening: () => subscribed && !closed && isReady(),
    close() {
      if (closed) return
      closed = true
      try {
        quietly(stop())
      } catch {}
    },
  }
}

// The limiter's subscriber must never keep the process alive by itself.
function unrefSocket(stream) {
  if (stream != null && typeof stream.unref === 'function') stream.unref()
}

// What each client needs to run a script: `one` (EVALSHA sha 1 key
// ...args) and `oneEval` (EVAL text 1 key ...args), `many` and `manyEval`
// (a batch: EVALSHA sha n ...flat, `flat` the keys then the arguments),
// each returning a Promise; whether a queued command can be withdrawn when
// its deadline passes (`abortable`: the calls take `{ abortSignal }`);
// whether keys are routed by hash slot (`cluster`); `publish`, and
// `subscribe` (null when the client cannot be duplicated: no listener).
function adapterFor(client) {
  if (client == null || (typeof client !== 'object' && typeof client !== 'function')) {
    const e = new TypeError('client must be an ioredis client (Redis or Cluster) or a node-redis v4+ client (createClient or createCluster)')
    e.code = 'ERR_INVALID_ARG_TYPE'
    throw e
  }
  if (typeof client.evalSha === 'function' && typeof client.eval === 'function') {
    // node-redis v4+: the raw sendCommand (no parsing of ours to redo); a
    // cluster routes by the first key, a client takes an AbortSignal.
    const cluster = typeof client.getSlotMaster === 'function'
    const send = cluster
      ? (words, key) => client.sendCommand(key, false, words)
      : (words, key, options) => client.sendCommand(words, options)
    return {
      kind: 'node-redis',
      abortable: !cluster,
      cluster,
      one: (sha, key, args, options) => send(['EVALSHA', sha, '1', key, ...args], key, options),
      oneEval: (text, key, args, options) => send(['EVAL', text, '1', key, ...args], key, options),
      many: (sha, n, flat, options) => send(['EVALSHA', sha, String(n), ...flat], flat[0], options),
      manyEval: (text, n, flat, options) => send(['EVAL', text, String(n), ...flat], flat[0], options),
      publish: (channel, message) => client.publish(channel, message),
      subscribe(channel, onMessage) {
        if (typeof client.duplicate !== 'function') return null
        let sub
        try {
          sub = client.duplicate()
        } catch {
          return null
        }
        if (sub == null || typeof sub.connect !== 'function' || typeof sub.subscribe !== 'function') return null
        let up = false
        if (typeof sub.on === 'function') {
          sub.on('error', () => {})
          sub.on('ready', () => (up = true))
          sub.on('reconnecting', () => (up = false))
          sub.on('end', () => (up = false))
        }
        return subscription(
          async () => {
            await sub.connect()
            up = true
            if (typeof sub.unref === 'function') sub.unref()
            // bufferMode: the message as a Buffer (a key need not be UTF-8).
            await sub.subscribe(channel, (message) => onMessage(message), true)
          },
          () => up,
          () => (typeof sub.destroy === 'function' ? sub.destroy() : sub.disconnect()),
        )
      },
    }
  }
  if (typeof client.evalsha === 'function' && typeof client.eval === 'function') {
    // ioredis (Redis or Cluster; a cluster routes by the key). ioredis
    // writes each command to the socket at once, one system call each:
    // after the first call of a turn of the event loop, the next are
    // written as soon as they hold WRITE_EVERY keys instead, the rest at
    // the end of the turn (the socket corked meanwhile; a cluster's
    // sockets are the cluster's own). Not all at the end: Redis runs the
    // first while this process still makes the next, instead of each
    // waiting for the other in turn.
    const cluster = client.isCluster === true
    // Whether a call went out in this turn; the socket corked after it,
    // and the keys handed over since the last write.
    let turn = false
    let corked = null
    let written = 0
    const endTurn = () => {
      turn = false
      const stream = corked
      if (stream === null) return
      corked = null
      stream.uncork()
    }
    // Before a call is handed to the client: the turn's first goes out
    // at once, the next wait in the corked socket.
    const before = () => {
      if (cluster) return
      if (!turn) {
        turn = true
        process.nextTick(endTurn)
        return
      }
      if (corked !== null) return
      const stream = client.stream
      if (stream == null || typeof stream.cork !== 'function' || typeof stream.uncork !== 'function') return
      stream.cork()
      corked = stream
      written = 0
    }
    // After: written as soon as the waiting calls hold WRITE_EVERY keys.
    const after = (keys) => {
      if (corked === null) return
      written += keys
      if (written >= WRITE_EVERY) {
        written = 0
        corked.uncork()
        corked.cork()
      }
    }
    return {
      kind: cluster ? 'ioredis-cluster' : 'ioredis',
      abortable: false,
      cluster,
      one: (sha, key, args) => {
        before()
        const sent = client.evalsha(sha, 1, key, ...args)
        after(1)
        return sent
      },
      oneEval: (text, key, args) => {
        before()
        const sent = client.eval(text, 1, key, ...args)
        after(1)
        return sent
      },
      many: (sha, n, flat) => {
        before()
        const sent = client.evalsha(sha, n, ...flat)
        after(n)
        return sent
      },
      manyEval: (text, n, flat) => {
        before()
        const sent = client.eval(text, n, ...flat)
        after(n)
        return sent
      },
      publish: (channel, message) => client.publish(channel, message),
      subscribe(channel, onMessage) {
        if (typeof client.duplicate !== 'function') return null
        let sub
        try {
          // A queue while (re)connecting, so that SUBSCRIBE waits for the
          // connection instead of failing; resubscribed on reconnection.
          sub = cluster
            ? client.duplicate(undefined, { enableOfflineQueue: true, lazyConnect: false })
            : client.duplicate({ enableOfflineQueue: true, maxRetriesPerRequest: null, lazyConnect: false, autoResubscribe: true })
        } catch {
          return null
        }
        if (sub == null || typeof sub.subscribe !== 'function' || typeof sub.on !== 'function') return null
        sub.on('error', () => {})
        sub.on('messageBuffer', (_channel, message) => onMessage(message))
        if (!cluster) sub.on('connect', () => unrefSocket(sub.stream))
        return subscription(
          () => sub.subscribe(channel),
          () => sub.status === 'ready',
          () => sub.disconnect(),
        )
      },
    }
  }
  const e = new TypeError(
    'client has neither evalSha (node-redis v4+) nor evalsha (ioredis): pass an ioredis Redis/Cluster or a node-redis client/cluster',
  )
  e.code = 'ERR_INVALID_ARG_TYPE'
  throw e
}

// What the application's client last said of its connection, for the
// limiters that share it: `error`, the text of its last 'error' event
// (null once it is 'ready' again). One 'error' and one 'ready' listener per
// client however many limiters share it, and only on a client the
// application listens to for errors itself (node-redis requires it): a
// listener of ours must not silence an error the application would have
// seen (ioredis prints unhandled ones; node-redis throws them).
const health = new WeakMap()
function clientHealth(client) {
  let h = health.get(client)
  if (h !== undefined) return h.watching ? h : watch(client, h)
  h = { error: null, watching: false }
  health.set(client, h)
  return watch(client, h)
}

function watch(client, h) {
  if (typeof client.on !== 'function' || typeof client.listenerCount !== 'function') return h
  try {
    if (client.listenerCount('error') === 0) return h
    client.on('error', (e) => {
      h.error = errorText(e)
    })
    client.on('ready', () => {
      h.error = null
    })
    h.watching = true
  } catch {}
  return h
}

// One 'end' listener per application client, however many limiters share
// it: when the client is closed, so are the limiters' subscribers. The
// module's only state, weakly held: one map for every limiter of the package.
const onEnd = new WeakMap()
function whenEnded(client, stop) {
  if (typeof client.on !== 'function') return () => {}
  let stops = onEnd.get(client)
  if (stops === undefined) {
    stops = new Set()
    onEnd.set(client, stops)
    const ended = () => {
      for (const f of [...stops]) f()
    }
    try {
      client.on('end', ended)
    } catch {}
  }
  stops.add(stop)
  return () => stops.delete(stop)
}

module.exports = { adapterFor, errorText, whenEnded, clientHealth }
