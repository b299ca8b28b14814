// Hand-written declarations of the outbound adapters (outbound.js): fetch
// and axios through a limiter, as the native `Outbound` advises.

import type { KeyedLimiter, OutboundOptions, SharedKeyedLimiter, SharedTokenBucket, TokenBucket } from '../index'
import type { Key } from './limiters'
import type { redis } from './redis'

/** What a request may give for itself (`init.ratebound`, axios `config.ratebound`). */
export interface OutboundRequestOptions {
  /** The longest wait for a token, in seconds, per sending (default: the adapter's). */
  timeout?: number
  /** The key (default: the adapter's `key`). */
  key?: Key
  /** Tokens per sending (default: the adapter's `n`, else 1). */
  n?: number
}

/**
 * What `onDecision` is told, in order, about each request (the Python
 * adapters' `OutboundEvent`): `'waited'` (the limiter made sending
 * `attempt` wait `seconds`, 1 ms or more, before it went out), `'paused'`
 * (the answer to `attempt` paused the limiter for `seconds`, for everyone
 * sharing it — the partner's pause, or for a refusal that gave no advice
 * the backoff; `capped` when cut to `maxPause`; `local` when the limiter's
 * Redis could not be told, so only this process waits), `'retried'` (the answer to
 * `attempt`, with `status`, is sent again, through the limiter) or
 * `'gave_up'` (a status it retries, but the method is not idempotent or the
 * retries are spent: the caller gets this answer). With `adaptive`,
 * `'adapted'` comes first after an answer that changed the learned rate
 * every caller sharing the limiter runs at (`fromRate` → `toRate`): a
 * refusal's cut, or a step up after a quiet success.
 */
export interface OutboundEvent {
  outcome: 'waited' | 'adapted' | 'paused' | 'retried' | 'gave_up'
  /** The request's key (with an unkeyed limiter it only names the request). */
  key: Key
  /** Seconds waited (`'waited'`) or paused (`'paused'`), else null. */
  seconds: number | null
  /** The partner's status (`'paused'`, `'retried'`, `'gave_up'`), else null. */
  status: number | null
  /** The sending it is about: 0 the first, 1 the first retry, ... */
  attempt: number
  /** `'paused'`: the pause was cut to `maxPause`. */
  capped: boolean
  /**
   * `'paused'`: the pause reached only this process — Redis could not be
   * told, so the adapter holds its own sendings for the key (the retry
   * first) until it is over, and a limiter failing `'local'` paused its
   * local share.
   */
  local: boolean
  /** `'adapted'` only: the learned rate before, in tokens per second. */
  fromRate?: number | null
  /** `'adapted'` only: the learned rate now, in tokens per second (the limiter's `learnedRate()`). */
  toRate?: number | null
}

/**
 * The options of `fetch()` and `axios()`: the limiter, the key, the wait,
 * and the core's `Outbound` policy (`retries`, `maxPause`, `backoff`,
 * `statuses`, `anyMethod`). A `redis.TokenBucket` failing open (its
 * default) draws one process warning (`RATEBOUND_OUTBOUND_FAILS_OPEN`):
 * while Redis is down it would send every request to the partner.
 */
export interface OutboundClientOptions extends Omit<OutboundOptions, 'key' | 'algorithm'> {
  /**
   * A token bucket: it must be pausable. A window (`FixedWindow`,
   * `SlidingWindow`, `SlidingLog`, `LeakyBucket`, `AllOf`, a window
   * `KeyedLimiter`/`SharedKeyedLimiter`, `redis.FixedWindow`/`SlidingWindow`)
   * is a `TypeError` (`ERR_RATEBOUND_UNSUPPORTED`: the core's rule).
   */
  limiter: TokenBucket | SharedTokenBucket | KeyedLimiter | SharedKeyedLimiter | redis.TokenBucket
  /**
   * Learn the partner's real limit from its answers: a refusal (a status
   * of `statuses`, with or without a pause) cuts the rate the limiter runs
   * at, for everyone sharing it, a quiet success steps it back up, never
   * above the limiter's configured quota (`'adapted'` events; the
   * limiter's `learnedRate()`). Default: on with every token bucket, which
   * keeps what is learned (`TokenBucket`, a token-bucket `KeyedLimiter` per
   * key, `SharedTokenBucket`, a token-bucket `SharedKeyedLimiter`,
   * `redis.TokenBucket`); a window does not (`true` with one:
   * `TypeError`, `ERR_RATEBOUND_UNSUPPORTED`).
   */
  adaptive?: boolean
  /** The longest wait for a token, in seconds, per sending (default: as long as it takes). */
  timeout?: number
  /** Tokens per sending (default 1). */
  n?: number
  /** Told what happened to each request, for metrics; a throw is swallowed (one process warning). */
  onDecision?: ((event: OutboundEvent) => void) | null
}

/** A `fetch` init with the request's own limiter options. */
export type OutboundRequestInit = RequestInit & { ratebound?: OutboundRequestOptions }

/** Options of `fetch()`. */
export interface FetchOptions extends OutboundClientOptions {
  /**
   * The limiter's key (with an unkeyed limiter, only the events' name for
   * the request), or a function of the request (default: the URL's `host`,
   * port included).
   */
  key?: Key | ((url: URL, init: OutboundRequestInit | undefined) => Key)
  /** The fetch that sends (default: `globalThis.fetch`). */
  fetch?: (input: string | URL | Request, init?: RequestInit) => Promise<Response>
}

/**
 * A fetch function through `limiter`: each sending waits for its token
 * (`acquire`), and the core's `Outbound` reads every answer — it pauses the
 * limiter for the partner's `Retry-After` (with a `redis.TokenBucket`, for
 * every instance of the fleet) and sends again through the limiter (429
 * and 503 by default, idempotent methods only, at most `retries` times; a
 * `Request` with a body is cloned for each sending). When it will not send
 * again the caller gets the last answer. A wait beyond `timeout` (also a
 * retry's) rejects with `RateLimitExceededError` and sends nothing;
 * `init.signal` cancels the wait (the tokens go back) and the request.
 *
 * ```js
 * const call = rb.fetch({ limiter, key: 'partner' })
 * const res = await call('https://partner.example/v1/items')
 * ```
 */
export declare function fetch(options: FetchOptions): (input: string | URL | Request, init?: OutboundRequestInit) => Promise<Response>

/**
 * What `axios()` needs of an instance (an `AxiosInstance` from
 * `axios.create()`, or the default `axios`): its interceptors, `request`
 * and `getUri`.
 */
export interface AxiosLike {
  interceptors: {
    request: { use(...args: any[]): number; eject(id: number): void }
    response: { use(...args: any[]): number; eject(id: number): void }
  }
  request(config: any): Promise<any>
  getUri(config?: any): string
}

/**
 * Options of `axios()`. A request's own options go in `config.ratebound`;
 * to type them, augment axios's config in your code:
 * `declare module 'axios' { interface AxiosRequestConfig { ratebound?: OutboundRequestOptions } }`.
 */
export interface AxiosOptions extends OutboundClientOptions {
  /** As `FetchOptions.key`, a function of the URL and the axios config. */
  key?: Key | ((url: URL, config: any) => Key)
}

/**
 * `fetch()`'s behavior on an axios instance: a request interceptor that
 * waits for the token, a response interceptor (success and error paths)
 * that pauses the limiter and sends again through `instance.request(config)`
 * (the call, and so its attempt, rides on `config.rateboundCall`). When it will not send
 * again the caller gets the last response, or axios's rejection carrying
 * it. Returns the instance; once per instance.
 */
export declare function axios<T extends AxiosLike>(instance: T, options: AxiosOptions): T
export declare namespace axios {
  /** Removes the interceptors `axios()` installed; whether there were any. */
  function eject(instance: AxiosLike): boolean
}
