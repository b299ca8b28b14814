//! The server model's flags: `--concurrency`, `--slowdown`, `--jitter`.

use ratebound::http::AdaptiveConcurrency;

use super::{Cap, Mix, Variant};
use crate::{CliError, Shown};

/// The `--concurrency` text that is the default: no cap against the
/// adaptive limit.
pub const DEFAULT_VARIANTS: &str = "none,auto";

const VARIANTS_HELP: &str = "none, fixed:N, auto, or auto:KEY=VALUE,… \
                             (initial, min, max, tolerance, smoothing)";

/// `--concurrency`: a comma-separated list of `none`, `fixed:N` and `auto`,
/// each `auto` optionally tuned, `auto:max=200,tolerance=2` (a `KEY=VALUE`
/// after an `auto` tunes it).
///
/// # Errors
/// An unknown variant, a fixed cap that is not a whole number ≥ 1, an
/// unknown tuning key or a bad tuning value, each named.
pub fn parse_variants(spec: &str) -> Result<Vec<Variant>, CliError> {
    let mut out: Vec<Variant> = Vec::new();
    for item in spec.split(',').map(str::trim) {
        let (head, tail) = item.split_once(':').unwrap_or((item, ""));
        match head {
            "none" | "off" if tail.is_empty() => out.push(Variant {
                name: "none".into(),
                cap: Cap::None,
            }),
            "fixed" => {
                let n = tail.parse::<usize>().ok().filter(|&n| n >= 1).ok_or_else(|| {
                    CliError::new(format!(
                        "--concurrency: fixed cap {} must be fixed:N with N a whole number of at \
                         least 1",
                        Shown(item)
                    ))
                })?;
                out.push(Variant {
                    name: format!("fixed:{n}"),
                    cap: Cap::Fixed(n),
                });
            }
            "auto" => {
                let mut v = Variant {
                    name: "auto".into(),
                    cap: Cap::Auto(AdaptiveConcurrency::default()),
                };
                if !tail.is_empty() {
                    tune(&mut v, tail)?;
                }
                out.push(v);
            }
            _ if item.contains('=') && !item.contains(':') => match out.last_mut() {
                Some(v) if matches!(v.cap, Cap::Auto(_)) => tune(v, item)?,
                _ => {
                    return Err(CliError::new(format!(
                        "--concurrency: {} tunes no auto variant (write auto:{item})",
                        Shown(item)
                    )));
                }
            },
            _ => {
                return Err(CliError::new(format!(
                    "--concurrency: unknown variant {}: use {VARIANTS_HELP}",
                    Shown(item)
                )));
            }
        }
    }
    for v in &out {
        if let Cap::Auto(config) = &v.cap {
            config
                .check()
                .map_err(|e| CliError::new(format!("--concurrency {}: {e}", Shown(&v.name))))?;
        }
    }
    Ok(out)
}

/// `KEY=VALUE` into an auto variant's tuning (and its name).
fn tune(v: &mut Variant, pair: &str) -> Result<(), CliError> {
    let Cap::Auto(config) = &mut v.cap else {
        return Ok(());
    };
    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
    let (key, value) = (key.trim(), value.trim());
    let whole = || {
        value.parse::<usize>().map_err(|_| {
            CliError::new(format!(
                "--concurrency auto: {key}={} must be a whole number",
                Shown(value)
            ))
        })
    };
    let real = || {
        value
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .ok_or_else(|| {
                CliError::new(format!(
                    "--concurrency auto: {key}={} must be a finite number",
                    Shown(value)
                ))
            })
    };
    match key {
        "initial" => config.initial_limit = whole()?,
        "min" => config.min_limit = whole()?,
        "max" => config.max_limit = whole()?,
        "tolerance" => config.tolerance = real()?,
        "smoothing" => config.smoothing = real()?,
        _ => {
            return Err(CliError::new(format!(
                "--concurrency auto: unknown setting {} (initial, min, max, tolerance, smoothing)",
                Shown(pair)
            )));
        }
    }
    v.name.push(if v.name == "auto" { ':' } else { ',' });
    v.name.push_str(&format!("{key}={value}"));
    Ok(())
}

/// `--slowdown 4s:2x[,8s:1x]`: from each time on, services take that many
/// times the service time (`1x` ends a slowdown).
///
/// # Errors
/// A step that is not `TIME:FACTOR`, a bad time, a factor that is not a
/// positive finite number up to 1000, or steps out of time order.
pub fn parse_slowdown(spec: &str) -> Result<Vec<(u64, f64)>, CliError> {
    let mut steps: Vec<(u64, f64)> = Vec::new();
    for step in spec.split(',').map(str::trim) {
        let (at, factor) = crate::split_pair(step, ':', "--slowdown", "TIME:FACTOR, e.g. 4s:2x")?;
        let at = crate::parse_duration(at, "--slowdown")?;
        let text = factor.trim();
        let f = text
            .strip_suffix(['x', 'X'])
            .unwrap_or(text)
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite() && *f > 0.0 && *f <= 1000.0)
            .ok_or_else(|| {
                CliError::new(format!(
                    "--slowdown: factor {} must be a number more than 0 and at most 1000, e.g. 2x",
                    Shown(factor)
                ))
            })?;
        if steps.last().is_some_and(|&(before, _)| before >= at) {
            return Err(CliError::new(format!(
                "--slowdown: {} must come after the step before it",
                Shown(step)
            )));
        }
        steps.push((at, f));
    }
    Ok(steps)
}

/// `--jitter F`: a fraction from 0 up to (not including) 1.
pub fn parse_jitter(text: &str) -> Result<f64, CliError> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|j| (0.0..1.0).contains(j))
        .ok_or_else(|| {
            CliError::new(format!(
                "--jitter: {} must be a number from 0 up to 1 (0.2: service times vary by ±20 %)",
                Shown(text)
            ))
        })
}

/// A share: `50%` or `0.5`, from 0 to 1.
fn share(text: &str, what: &str) -> Result<f64, CliError> {
    let t = text.trim();
    let value = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|p| p / 100.0),
        None => t.parse::<f64>(),
    };
    value
        .ok()
        .filter(|v| (0.0..=1.0).contains(v))
        .ok_or_else(|| {
            CliError::new(format!(
                "{what}: {} must be a share from 0 to 1 or 0% to 100%",
                Shown(text)
            ))
        })
}

/// `--priorities critical=5%,background=50%`: which share of the requests
/// is critical and which background; the rest is normal.
///
/// # Errors
/// A name other than critical or background (normal is the rest), a share
/// outside 0–100 %, or shares that add up to more than 100 %.
pub fn parse_priorities(spec: &str) -> Result<Mix, CliError> {
    let mut mix = Mix::default();
    for item in spec.split(',').map(str::trim) {
        let (name, value) = crate::split_pair(
            item,
            '=',
            "--priorities",
            "PRIORITY=SHARE, e.g. background=50%",
        )?;
        let value = share(value, "--priorities")?;
        match name.trim() {
            "critical" => mix.critical = value,
            "background" => mix.background = value,
            other => {
                return Err(CliError::new(format!(
                    "--priorities: {} is not critical or background (normal is the rest)",
                    Shown(other)
                )));
            }
        }
    }
    if mix.critical + mix.background > 1.0 + 1e-9 {
        return Err(CliError::new(format!(
            "--priorities: {} adds up to more than 100 %",
            Shown(spec)
        )));
    }
    Ok(mix)
}

/// `--background-fraction F`: the share of the limit background requests
/// may fill, 0 to 1.
pub fn parse_background_fraction(text: &str) -> Result<f64, CliError> {
    share(text, "--background-fraction")
}
