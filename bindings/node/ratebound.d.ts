// The package's types (package.json "types", beside ratebound.js): the
// native classes and options declared by the generated index.d.ts, and what
// the JavaScript layer adds, declared by hand in types/ by topic.

export * from './index'
export * from './types/limiters'
export * from './types/gate'
export * from './types/middleware'
export * from './types/redis'
export * from './types/outbound'

/** An empty native call (the benchmarks' floor). */
export declare function noop(): void
