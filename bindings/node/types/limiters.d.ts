// Hand-written declarations of what ratebound.js adds to the native limiters
// (whose classes index.d.ts declares, generated from the Rust doc comments):
// waiting without blocking the event loop, and its rejection. The package's
// types entry, ratebound.d.ts, re-exports this module.

/** Options of `acquire`. */
export interface AcquireOptions {
  /**
   * The longest wait in seconds. When the tokens cannot be had by then, the
   * Promise rejects at once with a `RateLimitExceededError` and nothing is
   * taken. Default: wait as long as it takes.
   */
  timeout?: number
  /** Cancels the wait; reserved tokens are given back. */
  signal?: AbortSignal
}

/**
 * The rejection of `acquire` when its `timeout` cannot be met: `retryAfter`
 * says how long the wait would have been (seconds). Nothing was taken.
 */
export declare class RateLimitExceededError extends Error {
  constructor(retryAfter: number, maxWait?: number)
  readonly name: 'RateLimitExceededError'
  readonly code: 'ERR_RATEBOUND_DEADLINE_EXCEEDED'
  /** Seconds the caller would have had to wait. */
  readonly retryAfter: number
}

/** Waiting without blocking the event loop (added by ratebound.js). */
interface Acquirable {
  /**
   * Waits for `n` tokens (default 1) and resolves when they are taken. A
   * token bucket or leaky bucket reserves them at once and resolves after
   * the wait; a window limiter retries when it would admit. Never blocks
   * the event loop.
   */
  acquire(n?: number, options?: AcquireOptions): Promise<void>
}

// Merged into the generated classes of index.d.ts.
declare module '../index' {
  interface TokenBucket extends Acquirable {}
  interface FixedWindow extends Acquirable {}
  interface SlidingWindow extends Acquirable {}
  interface SlidingLog extends Acquirable {}
  interface LeakyBucket extends Acquirable {}
  interface AllOf extends Acquirable {}
  interface KeyedLimiter {
    /** Waits until `key` may take `n` tokens (default 1), then takes them. */
    acquire(key: string | number | Uint8Array, n?: number, options?: AcquireOptions): Promise<void>
  }
  /**
   * Waiting on a shared-memory limiter: a token bucket reserves on the shared
   * word, so every process is served in the order it asked; a window sleeps
   * its exact `retryAfter` and decides again. An aborted wait gives its
   * reservation back.
   */
  interface SharedTokenBucket extends Acquirable {}
  interface SharedKeyedLimiter {
    /** Waits until `key` may take `n` tokens (default 1), for every process. */
    acquire(key: string | number | Uint8Array, n?: number, options?: AcquireOptions): Promise<void>
  }
}

/** A key, as the middleware and `KeyedLimiter` take it. */
export type Key = string | number | Uint8Array
