//! Node.js bindings for ratebound: the npm package `ratebound`.
//!
//! Every decision is made by the core crate through [`ratebound::any`]; this
//! crate converts JavaScript values to the core's types and the core's errors
//! to JavaScript errors, nothing more. The classes here are exported by the
//! generated loader (`index.js`) and described by the generated `index.d.ts`;
//! `ratebound.js` adds what needs the event loop (`acquire`, the middleware)
//! and swaps the three hot calls (`tryAcquire`, `check`, keyed `check`) for
//! the raw N-API entry points of [`fast`]. [`redis`] exposes the sans-I/O
//! engine of `ratebound-redis` (global limits in Redis), whose calls
//! `redis.js` runs with the application's ioredis or node-redis client.
//!
//! A `#[napi]` item cannot take its doc comments from a `macro_rules!`
//! caller: the macro passes `/// text` on as `#[doc = r" text"]`, and
//! napi-derive (3.7) copies a doc attribute's token text, so `index.d.ts`
//! would read `r" text`. A macro may write napi items with the docs it
//! holds itself (`limiter_class!`), not with docs it is given; hence the
//! option objects and the Redis engine's methods spell out their
//! arguments (the JavaScript API) one by one.

pub mod error;
pub mod fast;
pub mod gate;
pub mod http;
pub mod keyed;
pub mod limiters;
pub mod outbound;
pub mod redis;
pub mod redis_wait;
pub mod shared;
mod slab;
