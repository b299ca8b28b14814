//! `ratebound inspect --redis URL KEY`: what a global limit holds in Redis —
//! the key's type, value and time to live, Redis' clock, and for a token
//! bucket (with `--rate`) its tokens and TAT as the Lua script reads them.

use ratebound::Quota;

use crate::{CliError, show_duration};

fn err(e: redis::RedisError) -> CliError {
    CliError::new(format!("redis: {e}"))
}

pub fn run(url: &str, key: &str, rate: Option<&str>) -> Result<String, CliError> {
    let quota = rate
        .map(|r| Quota::parse(r).map_err(|e| CliError::new(format!("--rate: {e}"))))
        .transpose()?;
    let client = redis::Client::open(url).map_err(err)?;
    let mut con = client
        .get_connection_with_timeout(std::time::Duration::from_secs(2))
        .map_err(err)?;
    let kind: String = redis::cmd("TYPE").arg(key).query(&mut con).map_err(err)?;
    let pttl: i64 = redis::cmd("PTTL").arg(key).query(&mut con).map_err(err)?;
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut con).map_err(err)?;
    let now_us = secs * 1_000_000 + micros;
    let mut out = format!("key {key}: type {kind}");
    out.push_str(&match pttl {
        -2 => ", absent (a full bucket or an empty window: nothing is stored)\n".to_string(),
        -1 => ", no expiry\n".to_string(),
        ms => format!(
            ", expires in {}\n",
            show_duration(u64::try_from(ms).unwrap_or(0) * 1_000_000)
        ),
    });
    match kind.as_str() {
        "string" => {
            let value: String = redis::cmd("GET").arg(key).query(&mut con).map_err(err)?;
            out.push_str(&format!("value: {value}\n"));
            if let (Some(q), Ok(tat_us)) = (quota, value.parse::<u64>()) {
                // The script's TAT is in µs of Redis' clock; T rounded up.
                let t_us = q.emission_interval_nanos().div_ceil(1000).max(1);
                let tau_us = t_us * q.burst();
                let tat = tat_us.max(now_us);
                let tokens = (now_us + tau_us).saturating_sub(tat) / t_us;
                out.push_str(&format!(
                    "token bucket {q}: {tokens} of {} tokens; TAT {} ahead of Redis' clock (full again then)\n",
                    q.burst(),
                    show_duration(tat.saturating_sub(now_us) * 1000),
                ));
            }
        }
        "hash" => {
            let fields: Vec<(String, String)> = redis::cmd("HGETALL")
                .arg(key)
                .query(&mut con)
                .map_err(err)?;
            for (f, v) in fields {
                out.push_str(&format!("  {f} = {v}\n"));
            }
        }
        _ => {}
    }
    out.push_str(&format!("redis time: {now_us} us\n"));
    Ok(out)
}
