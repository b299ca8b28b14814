//! One check — or one reservation — against Redis at an explicit Redis
//! time, printed as JSON: the Rust third of the cross-language test
//! (`ci/cross_language.py`), which has the Rust, Python and Node drivers
//! take turns on one key.
//!
//! `step <redis-url> <key> <rate> <burst> <n> <now_us> [reserve <max_wait_us>]`

use std::time::Duration;

use ratebound::Quota;
use ratebound_redis::{
    Algorithm, CallOutcome, Config, Engine, RedisLimiter, ReserveBegin, Reserved,
};

const USAGE: &str =
    "usage: step <redis-url> <key> <rate> <burst> <n> <now_us> [reserve <max_wait_us>]";

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (url, key, rate, burst, n, now) = match args.as_slice() {
        [_, url, key, rate, burst, n, now, ..] => (url, key, rate, burst, n, now),
        _ => return Err(USAGE.into()),
    };
    let quota = Quota::per_second(rate.parse::<f64>()?)?.with_burst(burst.parse()?)?;
    let mut config = Config::new(Algorithm::TokenBucket(quota));
    config.timeout = Duration::from_secs(2);
    let client = redis::Client::open(url.as_str())?;
    let (n, now): (u64, u64) = (n.parse()?, now.parse()?);
    if let [_, _, _, _, _, _, _, mode, max_wait] = args.as_slice() {
        if mode != "reserve" {
            return Err(USAGE.into());
        }
        // A reservation through the engine, judged at `now`.
        let engine = Engine::new(config)?;
        let max = Duration::from_micros(max_wait.parse()?);
        let ReserveBegin::Call(call) = engine.begin_reserve(None, key.as_bytes(), n, max)? else {
            return Err("answered without Redis".into());
        };
        let call = call.at(now);
        let mut conn = client.get_multiplexed_async_connection().await?;
        let reply: Vec<i64> = match redis::cmd("EVALSHA")
            .arg(call.script.sha())
            .arg(1)
            .arg(&call.key)
            .arg(&call.args)
            .query_async(&mut conn)
            .await
        {
            Ok(r) => r,
            Err(_) => {
                redis::cmd("EVAL")
                    .arg(call.script.text)
                    .arg(1)
                    .arg(&call.key)
                    .arg(&call.args)
                    .query_async(&mut conn)
                    .await?
            }
        };
        let (granted, wait) = match engine.finish_reserve(&call, CallOutcome::Reply(&reply)) {
            Reserved::Granted { wait, .. } => (true, wait),
            Reserved::Refused { wait, .. } | Reserved::Retry { wait, .. } => (false, wait),
        };
        println!(
            "{{\"granted\": {granted}, \"wait_us\": {}}}",
            wait.as_micros()
        );
        return Ok(());
    }
    let conn = redis::aio::ConnectionManager::new(client).await?;
    let limiter = RedisLimiter::new(config, conn)?;
    let d = limiter.check_n_at(key, n, now).await?;
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
