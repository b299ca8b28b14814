// Hand-written declarations of the hooks and answers of a `Gate` (the class
// is index.d.ts's, generated; index.d.ts imports `GateHooks` from here).

import type { Ask, RemoteDecision, Verdict } from '../index'
import type { Key } from './limiters'

/** How urgent a request is under a concurrency limit: `'background'` is shed first, `'critical'` never. */
export type Priority = 'critical' | 'normal' | 'background'

/**
 * The functions of the framework's request a `Gate`'s sequence calls, in
 * the core's order (each optional): `exempt` first (true: on to the
 * application, unlimited, nothing added); `priority` only once the
 * requests in flight reach the background share of the concurrency limit
 * (below it every request is admitted alike) — a function returning a
 * `Priority`, or one `Priority` for every request (checked when the gate
 * is made); `critical` only when every concurrency place is taken (true:
 * it goes on without one; a shortcut for the priority `'critical'`); `key`
 * after shedding, when the gate's key is the application's (`null`,
 * `undefined` or `''`: no key); `report` once per request that was not
 * exempt, with the outcome, the refusing policy and a shed request's
 * priority (for metrics). A hook that throws ends the sequence: `admit`
 * throws its error, and the place taken, if any, is given back; a
 * `priority` function that throws or returns what is no `Priority` sheds
 * the request (nothing charged) and `admit` throws (the returned value
 * named, `ERR_RATEBOUND_INVALID_OPTION`).
 */
export interface GateHooks {
  exempt?: ((request: any) => boolean) | null
  critical?: ((request: any) => boolean) | null
  priority?: Priority | ((request: any) => Priority) | null
  key?: ((request: any) => Key | null | undefined) | null
  report?:
    | ((
        request: any,
        outcome: 'allowed' | 'refused' | 'shed' | 'rejected' | 'store_error',
        refusedBy: string | null,
        priority: 'normal' | 'background' | undefined,
      ) => void)
    | null
}

/**
 * A request's place among the requests in flight under the gate's
 * `concurrencyLimit`: hold it until the response is done (a streaming body
 * until it ends), then `release()` it — or `close()`, the same; both
 * idempotent. The middleware releases it on the response's `'close'`.
 */
export interface Place {
  /**
   * The response's head is written: an adaptive limit times the request
   * now (once; else at `release()`). The middleware calls it from
   * `writeHead`.
   */
  responded(): void
  release(): void
  close(): void
  /** Whether it is still held. */
  readonly held: boolean
}

/**
 * The gate's answer to a request (`admit`, `finish`): the `Verdict` —
 * `status` 0 to go on with `headers` set on the application's response,
 * else the answer to send — and, when it passes under a
 * `concurrencyLimit`, the `Place` to hold until the response is done.
 */
export interface Admission extends Verdict {
  readonly place: Place | null
  /**
   * The log line of a remote policy's episode of failures this request
   * began (with outcome `'store_error'`) or ended; the middleware emits it
   * as a process warning (`RateboundWarning`), once per episode.
   */
  readonly notice?: string
}

// Merged into the generated class `Gate` of index.d.ts: what takes the
// framework's request (ratebound.js).
declare module '../index' {
  interface Gate {
    /**
     * The whole sequence for one request, the core's (`Gate::admit`): the
     * hooks called with `request` (the framework's request object) in the
     * core's order, a concurrency place, the key (the `keyHeader` lines of
     * `rawHeaders`, the `key` hook, or the client IP from `peer` under the
     * trusted-proxy rules), the policies, `report`. `null`: exempt. An
     * `Ask` when the gate has `remote` policies: ask each for
     * `ask.identity`, then `finish`.
     */
    admit(request: any, peer?: string | null, rawHeaders?: string[] | null): Admission | Ask | null
    /**
     * The rest of `admit` once the remote policies have answered `ask`: one
     * answer per remote policy, in `remoteNames` order — its decision, or
     * the `Error` its check threw, mapped by the core's rule (by `code`): a
     * full table (`ERR_RATEBOUND_TOO_MANY_KEYS`, or `null`) is 503 as the
     * gate's own, any other error a failed store: 503 with
     * `storeErrorRetryAfter`, outcome `'store_error'`. `report` is called
     * with `request`.
     */
    finish(ask: Ask, answers: Array<RemoteDecision | Error | null>, request?: any): Admission
  }
}
