// Hand-written declarations of the Express and Fastify middleware
// (middleware.js) over a `Gate`.

import type { ConcurrencyState, Gate, GateOptions, PolicyOptions, SharedKeyedLimiter } from '../index'
import type { Priority } from './gate'
import type { Key } from './limiters'
import type { redis } from './redis'

/** What a refused request gets, for `handler`. */
export interface Refusal {
  /** 429, 503 (shed, too many keys tracked, a remote policy's store failed) or the `missingKey` status. */
  status: number
  /** Whole seconds to wait (the `Retry-After` value), 0 if none. */
  retryAfter: number
  /** Header fields, already set on the response. */
  headers: Record<string, string>
  contentType: string
  body: string
}

/** What `onDecision` is told about each limited request. */
export interface DecisionEvent {
  /**
   * `'allowed'`, `'refused'`, `'shed'`, `'rejected'` (no valid key, a full
   * key table) or `'store_error'` (a remote policy's check threw: 503 with
   * Retry-After).
   */
  outcome: 'allowed' | 'refused' | 'shed' | 'rejected' | 'store_error'
  /** The policy that refused, or the remote policy that failed, else null. */
  policy: string | null
  /** Every policy's name, in order. */
  policies: string[]
  /** The `label` option, else the route (Express `req.route.path`, Fastify's route url), else null. */
  label: string | null
  /** A shed request's priority (only when `outcome` is `'shed'`; critical requests are never shed). */
  priority?: 'normal' | 'background'
}

/**
 * Options of `express()`, `fastify.limit()`, the `fastify` plugin and a
 * Fastify route's `config.rateLimit`: the `Gate`'s options (`keyHeader`,
 * `trustedProxies`, `clientIpHeader`, `missingKey`, ...; every default is
 * the core's), one policy's fields or `policies`, and the key.
 */
export interface MiddlewareOptions extends Omit<GateOptions, 'policies' | 'givenKey' | 'remote' | 'key'> {
  /**
   * Called once per limited request, for metrics (nothing is done for it
   * when unset or null). A Fastify route's `config.rateLimit` without it
   * inherits the plugin's; `null` there means none.
   */
  onDecision?: ((event: DecisionEvent) => void) | null
  /** The label `onDecision` reports (default: the route). */
  label?: string
  /** One policy, as in `PolicyOptions` (`rate`/`burst` or `algorithm`/`limit`/`window`). */
  rate?: number | string
  burst?: number
  algorithm?: 'token_bucket' | 'fixed_window' | 'sliding_window'
  limit?: number
  window?: number
  /** The policy's name in the `RateLimit-Policy` field (default `'default'`). */
  name?: string
  /**
   * Several policies, all or nothing (instead of the single-policy fields):
   * limits in this process, global limits in Redis (`redis.*`) and limits
   * shared by the host's processes (`SharedKeyedLimiter`), each as itself or
   * `{ name, limiter }`.
   */
  policies?: Array<
    PolicyOptions | redis.Limiter | SharedKeyedLimiter | { name: string; limiter: redis.Limiter | SharedKeyedLimiter }
  >
  /**
   * The key: `'ip'` (any case; default: the client IP — the socket's peer,
   * or with `trustedProxies` the address the core finds from the socket and
   * the `clientIpHeader`; the framework's `trust proxy`/`trustProxy` is not
   * read), a header name or `{ header: 'x-api-key' }` (the
   * same as `keyHeader`: the core reads the header lines; repeated lines, a
   * comma or an empty value are no key), or a function of the request
   * (`null`/`undefined`/`''` for no key). Given once: not with `keyHeader`.
   */
  key?: 'ip' | string | { header: string } | ((req: any) => Key | null | undefined)
  /** Requests for which this returns true are not counted (exemptions). */
  exempt?: (req: any) => boolean
  /**
   * With `concurrencyLimit`: requests for which this returns true are never
   * shed (at the cap they go on without a place).
   */
  critical?: (req: any) => boolean
  /**
   * With `concurrencyLimit`: each request's priority — `'background'`
   * requests get a place only while fewer than `backgroundFraction` of the
   * limit are in flight (shed first), `'normal'` up to the limit,
   * `'critical'` never shed. A function of the request (asked only once
   * the background share is reached), or one priority for every request.
   * A function that throws or returns anything else: the request goes to
   * the framework's error path (Express `next(err)`, Fastify's error
   * handler; 500 by default) with `ERR_RATEBOUND_INVALID_OPTION`.
   */
  priority?: Priority | ((req: any) => Priority)
  /** Called instead of the default refusal, shedding included (the headers are already set). */
  handler?: (req: any, res: any, next: (err?: unknown) => void, refusal: Refusal) => void
}

/** Express/Connect middleware: 429 with `Retry-After` and the IETF `RateLimit` fields. */
export declare function express(
  options: MiddlewareOptions,
): ((req: any, res: any, next: (err?: unknown) => void) => void) & {
  gate: Gate
  /** The gate's concurrency cap now (`gate.concurrency`), for a gauge; null without `concurrencyLimit`. */
  readonly concurrency: ConcurrencyState | null
}

/**
 * Options of the `fastify` plugin: the app-wide limit's options, which are
 * also the defaults of every route's `config.rateLimit`; with
 * `global: false` there is no app-wide limit (only routes with
 * `config.rateLimit` are limited) and the options are only those defaults.
 */
export type PluginOptions = MiddlewareOptions & { global?: boolean }

/**
 * A Fastify route's `config.rateLimit` under the `fastify` plugin: the
 * route's own limit, made when the route is declared, which replaces the
 * app-wide one for that route. It inherits the plugin's options it does not
 * give, except that the policy (`rate`, `burst`, `policies`, ...) and the
 * key (`key`, `keyHeader`) come whole from one side, and `label`; `false`:
 * no limit on the route. To type route configs, augment Fastify's in your code:
 * `declare module 'fastify' { interface FastifyContextConfig { rateLimit?: FastifyRouteRateLimit } }`.
 */
export type FastifyRouteRateLimit = MiddlewareOptions | false

/**
 * A Fastify plugin (`app.register(fastify, options)`): the app-wide limit
 * on every route of the context it is registered in, and the own limit of
 * each route declared after it with `config.rateLimit`. `app.ratebound` is
 * the app-wide limit's `Gate` (null with `global: false`).
 */
export declare function fastify(instance: any, options: PluginOptions, done: (err?: Error) => void): void
export declare namespace fastify {
  /**
   * One route's limit, as an onRequest hook:
   * `app.post('/login', { onRequest: fastify.limit({ rate: '5/minute' }) }, handler)`.
   * The same hook on several routes is one shared limit; options are checked
   * when it is made.
   */
  function limit(
    options: MiddlewareOptions,
  ): ((request: any, reply: any, done: (err?: Error) => void) => void) & {
    gate: Gate
    /** The gate's concurrency cap now, for a gauge; null without `concurrencyLimit`. */
    readonly concurrency: ConcurrencyState | null
  }
}
