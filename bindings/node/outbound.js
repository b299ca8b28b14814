'use strict'
// Calling a partner through a limiter: rb.fetch (a fetch function) and
// rb.axios (interceptors on the application's axios instance). The native
// Outbound is the Rust core's call machine: it says every step of a call —
// hold, acquire, send, adapt, pause, report, retry or done — and owns every
// rule (the default key, the waited threshold, one-shot bodies, a failed
// pause, what an answer teaches of the partner's limit, the events;
// spec/outbound_calls.json). This file only does the I/O: sleeps, waits
// for tokens, sends, tells the limiter what was learned, pauses and
// reports.
//
// The pause goes to the limiter itself, so that every caller sharing it
// waits (with an rb.redis.TokenBucket, every instance of the fleet), and a
// retry waits for its token like any other request.

// Where the adapters read the time (ms) they measure a wait with (the
// `waited` event, what is left of a timeout after a hold): the one place,
// so that a test on virtual time (node:test's mock timers and a ManualClock)
// can put it there, as redis_driver.js' `clock`.
const clock = { now: () => performance.now() }

module.exports = function outbound(native, { RateLimitExceededError, sleep }) {
  const { Outbound, RedisEngine } = native

  // Every option each adapter reads: anything else is a misspelling and
  // fails where the adapter is made.
  const POLICY = ['limiter', 'key', 'timeout', 'n', 'retries', 'maxPause', 'backoff', 'statuses', 'anyMethod', 'adaptive', 'onDecision']
  const FETCH_OPTIONS = new Set([...POLICY, 'fetch'])
  const AXIOS_OPTIONS = new Set(POLICY)
  // What one request may override (`init.ratebound`, `config.ratebound`).
  const OWN_OPTIONS = new Set(['timeout', 'key', 'n'])

  // The limiters that can be paused.
  const LIMITERS =
    'a token bucket (TokenBucket, SharedTokenBucket, a token-bucket KeyedLimiter or SharedKeyedLimiter, rb.redis.TokenBucket)'

  const { typeError, valueError, invalidOption } = require('./errors.js')

  function shown(v) {
    if (typeof v === 'string') return JSON.stringify(v)
    if (typeof v === 'function') return 'a function'
    if (typeof v === 'bigint') return `${v}n`
    try {
      return String(v)
    } catch {
      return typeof v
    }
  }

  // A native error's message names where it was thrown.
  function within(where, f) {
    try {
      return f()
    } catch (e) {
      if (e != null && typeof e.message === 'string') e.message = `${where}: ${e.message}`
      throw e
    }
  }

  // A number option's type, checked here (the native conversion's errors
  // name no option); its value and default are the core's.
  function number(where, name, v, what) {
    if (v != null && typeof v !== 'number') throw typeError(`${where}: ${name} is ${what}, not ${shown(v)}`)
    return v ?? undefined
  }

  function isKey(v) {
    return typeof v === 'string' || (typeof v === 'number' && Number.isSafeInteger(v)) || v instanceof Uint8Array
  }

  const UNKEYED = [native.TokenBucket, native.SharedTokenBucket, native.FixedWindow, native.SlidingWindow, native.SlidingLog, native.LeakyBucket, native.AllOf]
  const KEYED = [native.KeyedLimiter, native.SharedKeyedLimiter]

  // What the limiter is: keyed or not, in Redis or not (one that cannot be
  // paused is refused by the core's Outbound, never at the first 429).
  function limiterOf(where, limiter) {
    if (limiter == null || typeof limiter !== 'object') {
      throw typeError(`${where}: limiter is required: ${LIMITERS}, not ${shown(limiter)}`)
    }
    const remote = limiter.engine instanceof RedisEngine
    const keyed = remote || KEYED.some((C) => limiter instanceof C)
    if (!keyed && !UNKEYED.some((C) => limiter instanceof C)) throw typeError(`${where}: limiter must be ${LIMITERS}`)
    return { keyed, remote }
  }

  // The native Outbound (the core's call machine: the policy, each
  // sending's tokens and timeout, the fixed key, the limiters it accepts,
  // whether it learns — from the limiter and `adaptive`), with the
  // options' types checked here.
  function outboundOf(where, options) {
    const { statuses, anyMethod, key, adaptive } = options
    if (statuses != null && (!Array.isArray(statuses) || !statuses.every((s) => typeof s === 'number'))) {
      throw typeError(`${where}: statuses is an array of HTTP statuses, not ${shown(statuses)}`)
    }
    if (anyMethod != null && typeof anyMethod !== 'boolean') throw typeError(`${where}: anyMethod is a boolean, not ${shown(anyMethod)}`)
    if (adaptive != null && typeof adaptive !== 'boolean') throw typeError(`${where}: adaptive is a boolean, not ${shown(adaptive)}`)
    const o = {
      algorithm: String(options.limiter.algorithm),
      key: typeof key === 'string' ? key : undefined,
      n: number(where, 'n', options.n, 'a number of tokens'),
      timeout: number(where, 'timeout', options.timeout, 'a number of seconds'),
      retries: number(where, 'retries', options.retries, 'a whole number'),
      maxPause: number(where, 'maxPause', options.maxPause, 'a number of seconds'),
      backoff: number(where, 'backoff', options.backoff, 'a number of seconds'),
      statuses: statuses ?? undefined,
      anyMethod: anyMethod ?? undefined,
      adaptive: adaptive ?? undefined,
      limiter: options.limiter,
    }
    return within(where, () => new Outbound(o))
  }

  // One adapter's options, checked and defaulted: everything a request
  // needs that does not depend on the request.
  function prepare(where, options, known) {
    if (options == null || typeof options !== 'object') throw typeError(`${where}: options are required ({ limiter, ... })`)
    for (const name of Object.keys(options)) {
      if (!known.has(name)) throw invalidOption(`${where}: unknown option '${name}' (known: ${[...known].join(', ')})`)
    }
    const { keyed, remote } = limiterOf(where, options.limiter)
    if (remote && options.limiter.engine.onError === 'open') {
      process.emitWarning(
        `${where}: an outbound limiter that fails open sends every request to the partner while Redis is unreachable ` +
          "(a flood partners block keys for): build it with onError: 'local', localRate: <this instance's share> (or 'closed')",
        { code: 'RATEBOUND_OUTBOUND_FAILS_OPEN' },
      )
    }
    // The key: the limiter's (keyed limiters), else only the events' name
    // for the request.
    const key = options.key
    if (key != null && typeof key !== 'function' && !isKey(key)) {
      throw typeError(`${where}: key is a string or a function of the request, not ${shown(key)}`)
    }
    const onDecision = options.onDecision ?? null
    if (onDecision !== null && typeof onDecision !== 'function') throw typeError(`${where}: onDecision must be a function of the event`)
    const outbound = outboundOf(where, options)
    return {
      where,
      limiter: options.limiter,
      keyed,
      remote,
      outbound,
      // The core says whether this adapter learns (`adaptive`, and whether
      // the limiter keeps what is learned).
      learning: outbound.learning,
      key: key ?? null,
      // A throwing onDecision is the application's bug, never the
      // request's failure: swallowed, the first throw warned (the core's
      // rule: hookThrew).
      report:
        onDecision === null
          ? null
          : (event) => {
              try {
                onDecision(event)
              } catch (e) {
                if (outbound.hookThrew()) {
                  process.emitWarning(`${where}: onDecision threw (${e != null && e.message ? e.message : e}); later throws are not reported`, {
                    code: 'RATEBOUND_ON_DECISION_THREW',
                  })
                }
              }
            },
    }
  }

  // One request's call: its own `ratebound` overrides (timeout, key, n)
  // and the adapter's key function; the rest (the adapter's options, the
  // host's key) is the core's. `key` is the limiter's key: the request's
  // or the function's as given (a number or bytes too), else the core's.
  function callOf(p, own, url, init, method, signal, resendable) {
    let key = null
    let n
    let timeout
    if (own != null) {
      if (typeof own !== 'object') throw typeError(`${p.where}: ratebound is { timeout, key, n }, not ${shown(own)}`)
      for (const name of Object.keys(own)) {
        if (!OWN_OPTIONS.has(name)) throw invalidOption(`${p.where}: unknown ratebound option '${name}' (known: timeout, key, n)`)
      }
      n = number(p.where, 'n', own.n, 'a number of tokens')
      timeout = number(p.where, 'timeout', own.timeout, 'a number of seconds')
      if (own.key != null) {
        if (!isKey(own.key)) throw typeError(`${p.where}: ratebound.key is a string, not ${shown(own.key)}`)
        key = own.key
      }
    }
    if (key === null && typeof p.key === 'function') {
      key = p.key(url(), init)
      if (!isKey(key)) throw typeError(`${p.where}: the key function returned ${shown(key)}, not a string`)
    } else if (key === null && p.key !== null && typeof p.key !== 'string') key = p.key
    const u = key === null && typeof p.key !== 'string' ? url() : null
    const port = u === null || u.port === '' ? null : Number(u.port)
    const call = within(p.where, () =>
      p.outbound.call(method, u?.protocol ?? '', u?.hostname ?? '', port, key === null ? null : keyName(key), n ?? null, timeout ?? null, own != null && own.timeout !== undefined, resendable),
    )
    return { call, key: key ?? call.key, signal: signal ?? undefined }
  }

  // A key as the core names it (its table of kept pauses, its events).
  function keyName(key) {
    if (typeof key === 'string') return key
    if (typeof key === 'number') return String(key)
    return `bytes:${Buffer.from(key).toString('hex')}`
  }

  // Does the core's steps of call `c` up to the next 'send', 'retry' or
  // 'done', which it returns: the adapter sends, or lets the answer go and
  // sends again, or gives it to the caller. Beyond the timeout the
  // limiter's RateLimitExceededError (nothing taken) goes on to the
  // caller; an aborted signal gives the tokens back.
  async function advance(p, c) {
    for (;;) {
      const s = c.call.next(clock.now())
      switch (s.kind) {
        case 'hold':
          // At most 2^31 - 1 ms a timer: a longer hold is asked again.
          await sleep(Math.min(Math.ceil(s.seconds * 1000), 2 ** 31 - 1), c.signal)
          break
        case 'acquire': {
          const options = { timeout: s.timeout ?? undefined, signal: c.signal }
          // The word the wait began under: a cut while in line means wait
          // again (the machine says acquire once more).
          if (p.learning) c.call.reserving(p.keyed ? p.limiter.learnedWord(c.key) : p.limiter.learnedWord())
          try {
            if (p.keyed) await p.limiter.acquire(c.key, s.n, options)
            else await p.limiter.acquire(s.n, options)
          } catch (e) {
            if (!(e instanceof RateLimitExceededError)) throw e
            // Nothing taken: the machine says hold (a learning call's line
            // beyond its horizon), or 'exceeded'.
            c.call.beyond(e.retryAfter)
            break
          }
          // What the answer's evidence will be about: the learned word
          // the tokens came under (a Redis bucket's: its last reply's, or
          // what another instance published since).
          if (p.learning) c.call.saw(p.keyed ? p.limiter.learnedWord(c.key) : p.limiter.learnedWord())
          break
        }
        case 'adapt':
          c.call.adapted(await adapt(p, c.key, s.seen, s.next))
          break
        case 'pause':
          c.call.paused(await pause(p, c.key, s.seconds), clock.now())
          break
        case 'event':
          if (p.report !== null) {
            const { outcome, seconds, status, attempt, capped, local } = s
            const event = { outcome, key: c.key, seconds: seconds ?? null, status: status ?? null, attempt, capped, local }
            if (outcome === 'adapted') {
              event.fromRate = s.fromRate ?? null
              event.toRate = s.toRate ?? null
            }
            p.report(event)
          }
          break
        case 'exceeded':
          throw new RateLimitExceededError(s.seconds, s.timeout ?? undefined)
        default:
          return s.kind
      }
    }
  }

  // An answer to the core: its status and header fields.
  function answered(c, status, headers) {
    c.call.answered(status, headers, Date.now() / 1000)
  }

  // Tells the limiter the learned word the answer calls for (`next`, if
  // it still holds `seen`: the words are u64s in decimal): whether it
  // replaced it. A limiter that could not be told learns nothing this
  // time (false): the next answer proposes again.
  async function adapt(p, key, seen, next) {
    try {
      return (await (p.keyed ? p.limiter.adaptWord(key, seen, next) : p.limiter.adaptWord(seen, next))) === true
    } catch {
      return false
    }
  }

  // Pauses the limiter: true when everyone sharing it was told, false
  // when only this process (Redis could not be told: the local share of a
  // limiter failing 'local' is paused), null when the limiter could not
  // make it (a shared table with no slot for the key).
  async function pause(p, key, seconds) {
    try {
      if (p.remote) {
        if ((await p.limiter.pause(key, seconds)) != null) return true
        p.limiter.engine.pauseLocal(key, seconds)
        return false
      }
      if (p.keyed) p.limiter.pause(key, seconds)
      else p.limiter.pause(seconds)
      return true
    } catch {
      return null
    }
  }

  function isRequest(v) {
    return v != null && typeof v === 'object' && typeof v.url === 'string' && typeof v.clone === 'function' && typeof v.method === 'string'
  }

  // A body that can be read once only (a stream): such a request is never
  // sent again.
  function oneShot(body) {
    return (
      body != null &&
      typeof body === 'object' &&
      (typeof body.getReader === 'function' || typeof body.pipe === 'function' || typeof body[Symbol.asyncIterator] === 'function')
    )
  }

  async function discard(response) {
    try {
      if (response.body != null && typeof response.body.cancel === 'function') await response.body.cancel()
    } catch {}
  }

  /**
   * A fetch function whose every request waits for a token of `limiter`
   * first, and whose partner's answers pause the limiter and are retried as
   * the core's Outbound advises.
   */
  function fetch(options) {
    const p = prepare('rb.fetch', options, FETCH_OPTIONS)
    const given = options.fetch
    if (given != null && typeof given !== 'function') throw typeError(`rb.fetch: fetch is a fetch function, not ${shown(given)}`)
    const send = given ?? ((input, init) => globalThis.fetch(input, init))
    return async function ratebound(input, init) {
      const request = isRequest(input) ? input : null
      let sendInit = init
      let own
      if (init != null && init.ratebound !== undefined) {
        ;({ ratebound: own, ...sendInit } = init)
      }
      let parsed = null
      const url = () => parsed ?? (parsed = new URL(request !== null ? request.url : input instanceof URL ? input.href : String(input)))
      const method = String((init != null && init.method) || (request !== null ? request.method : 'GET')).toUpperCase()
      const signal = init != null && init.signal != null ? init.signal : request !== null ? request.signal : undefined
      const c = callOf(p, own, url, init, method, signal, !oneShot(init != null ? init.body : undefined))
      // A Request's body is read by its sending: each sending gets a clone.
      const clone = request !== null && request.body != null
      let response
      for (;;) {
        const step = await advance(p, c)
        if (step === 'done') return response
        if (step === 'retry') await discard(response)
        else {
          response = await send(clone ? request.clone() : input, sendInit)
          answered(c, response.status, [...response.headers])
        }
      }
    }
  }

  // An axios response's header fields as [name, value] pairs.
  function axiosHeaders(headers) {
    const out = []
    if (headers == null) return out
    const fields = typeof headers.toJSON === 'function' ? headers.toJSON() : headers
    for (const [name, value] of Object.entries(fields)) {
      if (Array.isArray(value)) for (const v of value) out.push([name, String(v)])
      else if (value != null && value !== false) out.push([name, String(value)])
    }
    return out
  }

  // The instances rb.axios was installed on, with their interceptor ids.
  const installed = new WeakMap()

  /**
   * Installs rb.fetch's behavior on an axios instance: a request
   * interceptor that waits for the token, a response interceptor (both
   * paths) that pauses the limiter and sends again through
   * `instance.request(config)`. Returns the instance.
   */
  function axios(instance, options) {
    if (
      instance == null ||
      instance.interceptors == null ||
      instance.interceptors.request == null ||
      typeof instance.interceptors.request.use !== 'function' ||
      typeof instance.request !== 'function'
    ) {
      throw typeError(`rb.axios: the first argument is an axios instance (axios.create()), not ${shown(instance)}`)
    }
    const p = prepare('rb.axios', options, AXIOS_OPTIONS)
    if (installed.has(instance)) throw valueError('rb.axios: this axios instance goes through rb.axios already (rb.axios.eject(instance) first)')

    // The call rides on the config (`rateboundCall`): the request
    // interceptor does its steps up to the sending, the response
    // interceptor the steps after the answer, and a retry goes through
    // `instance.request` — and so the request interceptor — again.
    async function onRequest(config) {
      let c = config.rateboundCall
      if (c == null) {
        let parsed = null
        const url = () => parsed ?? (parsed = new URL(instance.getUri(config)))
        const method = String(config.method || 'get').toUpperCase()
        c = callOf(p, config.ratebound, url, config, method, config.signal, !oneShot(config.data))
      }
      await advance(p, c)
      return { ...config, rateboundCall: c }
    }

    async function onAnswer(response, error) {
      const config = response.config
      const c = config.rateboundCall
      answered(c, response.status, axiosHeaders(response.headers))
      if ((await advance(p, c)) === 'retry') {
        // A stream answer (responseType 'stream') is let go.
        const data = response.data
        if (data != null && typeof data.destroy === 'function') data.destroy()
        return instance.request(config)
      }
      if (error !== undefined) throw error
      return response
    }

    const request = instance.interceptors.request.use(onRequest)
    const response = instance.interceptors.response.use(
      (res) => (res != null && res.config != null && res.config.rateboundCall != null ? onAnswer(res) : res),
      (error) => {
        // Only an answer from the partner is advised on; anything else
        // (no connection, a refused wait, an abort) goes on as it is.
        if (error == null || error.response == null || error.response.config == null || error.response.config.rateboundCall == null) throw error
        return onAnswer(error.response, error)
      },
    )
    installed.set(instance, { request, response })
    return instance
  }

  /** Removes rb.axios's interceptors from `instance`; whether it had them. */
  axios.eject = function eject(instance) {
    const ids = instance == null ? undefined : installed.get(instance)
    if (ids === undefined) return false
    instance.interceptors.request.eject(ids.request)
    instance.interceptors.response.eject(ids.response)
    installed.delete(instance)
    return true
  }

  return { fetch, axios }
}

module.exports.clock = clock
