//! One check against Redis at an explicit Redis time, printed as JSON — the
//! Rust third of the cross-language test (`ci/cross_language.py`), which
//! has the Rust, Python and Node drivers take turns on one key.
//!
//! `step <redis-url> <key> <rate> <burst> <n> <now_us>`

use std::time::Duration;

use ratebound::Quota;
use ratebound_redis::{Algorithm, Config, RedisLimiter};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, key, rate, burst, n, now] = args.as_slice() else {
        return Err("usage: step <redis-url> <key> <rate> <burst> <n> <now_us>".into());
    };
    let quota = Quota::per_second(rate.parse::<f64>()?)?.with_burst(burst.parse()?)?;
    let mut config = Config::new(Algorithm::TokenBucket(quota));
    config.timeout = Duration::from_secs(2);
    let conn = redis::aio::ConnectionManager::new(redis::Client::open(url.as_str())?).await?;
    let limiter = RedisLimiter::new(config, conn)?;
    let d = limiter.check_n_at(key, n.parse()?, now.parse()?).await?;
    println!(
        "{{\"allowed\": {}, \"remaining\": {}, \"retry_after_us\": {}, \"reset_after_us\": {}, \"source\": \"{}\"}}",
        d.is_allowed(),
        d.remaining(),
        d.retry_after().as_micros(),
        d.reset_after().as_micros(),
        d.source().as_str()
    );
    Ok(())
}
