// Hand-written declarations of the global limits in Redis (redis.js), which
// run the native `RedisEngine`'s calls with the application's client.

import type { RedisDecision, RedisEngine, RedisEngineOptions, RedisStats } from '../index'
import type { Key } from './limiters'

/**
 * A Redis client for the global limits (`redis.*`), detected by its
 * methods: an ioredis `Redis` or `Cluster` (`evalsha`), or a node-redis v4+
 * client from `createClient` or cluster from `createCluster` (`evalSha`).
 * The client stays the application's: its connection, TLS, auth, retry and
 * offline-queue settings apply, and closing it is the application's job.
 */
export type RedisClient =
  | { evalsha(...args: any[]): any; eval(...args: any[]): any }
  | { evalSha(...args: any[]): any; eval(...args: any[]): any }

/**
 * Global limits in Redis, shared by every instance of a service: one key
 * per limit, one Lua script per algorithm (`EVALSHA`, and `EVAL` once on
 * `NOSCRIPT`, within one deadline), Redis' own clock, an explicit fail
 * policy with a circuit breaker, and token leasing. The decisions are the
 * native `RedisEngine`'s; these classes only run its calls with your client.
 * Each works with and without `new`.
 *
 * ```js
 * const lim = new rb.redis.TokenBucket({ client, rate: 10, burst: 20, onError: 'closed' })
 * const d = await lim.check('partner-api')   // d.allowed, d.retryAfter, d.source, ...
 * ```
 */
export declare namespace redis {
  /** The options every global limit takes. */
  interface CommonOptions
    extends Pick<
      RedisEngineOptions,
      'prefix' | 'onError' | 'localRate' | 'timeout' | 'breakerCooldown' | 'breakerThreshold'
    > {
    /** The ioredis or node-redis client (or cluster) to run the scripts with. */
    client: RedisClient
    /**
     * Whether the checks of one turn of the event loop go out together at
     * its end as one script run over all their keys (per hash slot on a
     * cluster, at most 128): each key decided in order exactly as separate
     * calls would decide it, for less of Redis' time a decision (default
     * true). A lone check goes alone. `false`: one script call a check, at
     * once.
     */
    batch?: boolean
  }
  /** Options of `redis.TokenBucket`. */
  interface TokenBucketOptions extends CommonOptions, Pick<RedisEngineOptions, 'lease' | 'leaseTtl'> {
    /** Tokens per second per key, or a quota string (`'10/s burst 20'`). */
    rate: number | string
    /** The most tokens one key holds (default: the quota string's burst, else 1). */
    burst?: number
  }
  /** Options of `redis.FixedWindow`. */
  interface FixedWindowOptions extends CommonOptions, Pick<RedisEngineOptions, 'lease' | 'leaseTtl'> {
    /** Requests per window per key. */
    limit: number
    /** The window in seconds (a whole number of microseconds). */
    window: number
  }
  /** Options of `redis.SlidingWindow` (no leasing). */
  interface SlidingWindowOptions extends CommonOptions {
    /** Requests per sliding window per key. */
    limit: number
    /** The window in seconds (a whole number of microseconds). */
    window: number
  }
  /**
   * The counters since the limiter was made: the driver's (round trips,
   * timeouts, errors, batches, the queue) and the engine's answers by the
   * path that gave them (`RedisEngine.stats`).
   */
  interface Stats extends RedisStats {
    /**
     * Script calls started: round trips (an `EVALSHA`, and its `EVAL` after
     * `NOSCRIPT`, count once; a batch counts once).
     */
    calls: number
    /** `NOSCRIPT` replies answered with `EVAL`. */
    evals: number
    /** Calls that missed their deadline (the fail policy answered; they may still have run). */
    timeouts: number
    /** Calls that failed with a client or server error (the fail policy answered). */
    errors: number
    /** Of the calls, batches: one script run over several checks' keys. */
    batches: number
    /** The checks that went in those batches. */
    batched: number
    /**
     * Calls that waited in the limiter's queue for room in flight (256 keys
     * in batches, or 64 calls sent alone): this process's own load, never
     * the fail policy's.
     */
    queued: number
    /** Calls that never left the queue (it was full, or they waited too long): answered `'busy'`. */
    unsent: number
  }
  /** Tokens reserved in Redis by `reserve`. */
  interface RedisReservation {
    /** Seconds until the tokens are due. */
    readonly delay: number
    /** Which path answered. */
    readonly source: string
    /**
     * Gives the tokens back (once); whether Redis took them back — only if
     * no reservation was made after this one since, nor a pause (a cancel
     * in the middle of a queue gives nothing back: the queue never exceeds
     * the limit).
     */
    cancel(): Promise<boolean>
  }

  /** A global limit (what `TokenBucket`, `FixedWindow` and `SlidingWindow` make). */
  interface Limiter {
    /**
     * Takes `n` (default 1) tokens for `key`: Redis' decision, a lease's, or
     * the fail policy's when Redis is down, slow or erroring (`source` says
     * which). Never rejects for a Redis failure, only for bad arguments
     * (`RangeError`/`TypeError`, as `RedisEngine.begin` throws). Keys are
     * sent as raw bytes after the prefix: `'1'`, `1` and `Buffer.from('1')`
     * are one key in Redis.
     */
    check(key: Key, n?: number): Promise<RedisDecision>
    /** Whether `n` (default 1) tokens for `key` were taken. */
    tryAcquire(key: Key, n?: number): Promise<boolean>
    /**
     * `check` judged at `atUs` microseconds of Redis time instead of its
     * `TIME`: the explicit-time twin, for replaying test vectors.
     */
    checkAt(key: Key, n: number, atUs: number): Promise<RedisDecision>
    /**
     * `check` within `scope`, a middleware's policy name: that policy's own
     * Redis key (`rb:tb@burst:alice`), shared by every instance with the
     * same policy and never by another policy on the same prefix.
     */
    checkIn(scope: string, key: Key, n?: number): Promise<RedisDecision>
    /**
     * Waits until `n` (default 1) tokens for `key` are taken, counted across
     * every instance: a token bucket reserves them in Redis with one call
     * (one order for the fleet, no polling) and sleeps until they are due; a
     * window sleeps its exact `retryAfter` and asks again. Rejects with
     * `RateLimitExceededError` at once, taking nothing, when the wait would
     * exceed `timeout` seconds; an aborted `signal` gives back what it holds
     * if nobody has built on it (the last of the queue: see `reserve`).
     * Resolves with the source that answered.
     */
    acquire(key: Key, n?: number, options?: { timeout?: number; signal?: AbortSignal }): Promise<string>
    /**
     * Takes `n` tokens for `key` now even if they are due only later (token
     * buckets): act after `delay` seconds; `cancel()` gives them back.
     * Rejects with `RateLimitExceededError` beyond `maxWait` (nothing taken).
     */
    reserve(key: Key, n?: number, options?: { maxWait?: number }): Promise<RedisReservation>
    /**
     * Empties `key`'s bucket for `seconds` for every instance, moving every
     * reservation already made past it; resolves with the shift it gave in
     * seconds (0: a pause already on covered it), or null when Redis could
     * not be told. A shift is published on the prefix's pause channel
     * (`rb:pause`), so that the waiters already asleep in other instances
     * sleep on past the pause: a token bucket listens there from its first
     * `acquire` on, on a duplicate of its client in subscriber mode (the
     * first `acquire` waits, at most the deadline, for the subscription). A
     * waiter whose limiter did not hear the news (the subscription was
     * down, or the client has no `duplicate()`) goes ahead at its old time,
     * inside the pause; its next call finds the pause in Redis.
     */
    pause(key: Key, seconds: number): Promise<number | null>
    /**
     * Lifts the pause on `key` for every instance (one script call, on
     * Redis' clock) if nothing was built on it: 'lifted' (empty now,
     * refilling at the rate from now on), 'not_paused', 'queued'
     * (reservations stand behind the pause: nothing changes), or null when
     * Redis could not be told.
     */
    resume(key: Key): Promise<'lifted' | 'not_paused' | 'queued' | null>
    /**
     * The rate in force for `key` after what the outbound adapters
     * (`rb.fetch`, `rb.axios`: `adaptive`, on by default with a Redis token
     * bucket) of every instance learned of the partner's real limit, in
     * tokens per second: the learned word lives beside the bucket in Redis,
     * read by every call for the key; this answers from the last reply this
     * instance had for the key (no I/O). The configured rate while nothing
     * is learned, never above it. Throws `TypeError`
     * (`ERR_RATEBOUND_UNSUPPORTED`) for a window: windows do not learn.
     */
    learnedRate(key: Key): number
    /**
     * Gives every unspent leased token back to Redis (call it on shutdown)
     * and stops listening for pauses (closing the client stops it too);
     * resolves with how many keys' tokens went back. The client stays open.
     */
    close(): Promise<number>
    /** Whether the circuit breaker is open (Redis is being spared). */
    readonly breakerOpen: boolean
    /** Whether this limiter hears other instances' pauses now (from its first `acquire` on). */
    readonly listening: boolean
    /** The native engine (configuration, breaker, leases). */
    readonly engine: RedisEngine
    /** Leased tokens held now, over all keys. */
    readonly leased: number
    /** Every call's deadline, in seconds. */
    readonly timeout: number
    /** The burst, or the window's limit. */
    readonly limit: number
    readonly algorithm: 'token_bucket' | 'fixed_window' | 'sliding_window'
    /** Which client was detected. */
    readonly clientKind: 'ioredis' | 'ioredis-cluster' | 'node-redis'
    /** The driver's counters. */
    readonly stats: Stats
  }
  interface TokenBucket extends Limiter {}
  interface FixedWindow extends Limiter {}
  interface SlidingWindow extends Limiter {}
  /** A GCRA token bucket per key in Redis: `rate` per second, bursts of `burst`. */
  const TokenBucket: {
    new (options: TokenBucketOptions): TokenBucket
    (options: TokenBucketOptions): TokenBucket
    readonly prototype: TokenBucket
  }
  /** At most `limit` per `window` seconds per key, windows aligned to Redis' clock. */
  const FixedWindow: {
    new (options: FixedWindowOptions): FixedWindow
    (options: FixedWindowOptions): FixedWindow
    readonly prototype: FixedWindow
  }
  /** A sliding window counter of `limit` per `window` seconds per key in Redis. */
  const SlidingWindow: {
    new (options: SlidingWindowOptions): SlidingWindow
    (options: SlidingWindowOptions): SlidingWindow
    readonly prototype: SlidingWindow
  }
}
