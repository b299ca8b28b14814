//! The rate limit service's benchmark (issue 40): decisions per second and
//! p50/p99/p99.9 latency of `ShouldRateLimit` at 1, 16 and 64 concurrent
//! gRPC streams, in-process rules, from a load generator in another process
//! than the server.
//!
//! It starts `ratebound serve` (the release CLI) as a child process on
//! 127.0.0.1 with a temporary YAML, waits for `GET /healthcheck`, then runs
//! the rows round-robin (1, 16, 64 streams; then again, `--rounds` times):
//! each row is at most `--calls` calls or `--seconds` seconds, whichever
//! comes first, with that many calls in flight at once over `--connections`
//! HTTP/2 connections (stream `i` on connection `i % connections`): a
//! closed loop, or with `--rate` an open one (that many calls a second in
//! all, each stream on its own schedule). Every
//! call's latency is kept and sorted; the table shows each column's median
//! over the rounds, and the server's CPU time per decision from
//! `/proc/PID/stat`. The child is killed at the end, and on a panic.
//!
//! `cargo build --release -p ratebound-cli && cargo run --release -p
//! ratebound-server --example rls_load -- [--server PATH] [--calls N]
//! [--seconds S] [--rounds R] [--streams 1,16,64] [--connections C]
//! [--client-threads T] [--rate CALLS_PER_SECOND] [--server-args "--workers 1"]`
//! (`--server-args`: more arguments for `ratebound serve`, split at spaces)
//!
//! The server defaults to `ratebound` beside the example's directory
//! (`target/release/ratebound` for `target/release/examples/rls_load`).

#[path = "common/mix.rs"]
mod mix;
use mix::{RULES, request};

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::{Channel, Endpoint};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The command line.
struct Options {
    server: PathBuf,
    calls: usize,
    seconds: f64,
    rounds: usize,
    streams: Vec<usize>,
    connections: usize,
    client_threads: usize,
    /// Open loop: this many calls a second in all, spread evenly over the
    /// streams (0: closed loop, each stream sends its next call as soon as
    /// its last is answered).
    rate: f64,
    /// More arguments for `ratebound serve` (e.g. `--workers 1`).
    server_args: Vec<String>,
}

fn options() -> Result<Options, Error> {
    let exe = std::env::current_exe()?;
    let beside = exe
        .parent()
        .and_then(|examples| examples.parent())
        .map(|dir| dir.join("ratebound"))
        .unwrap_or_else(|| PathBuf::from("ratebound"));
    let mut o = Options {
        server: beside,
        calls: 100_000,
        seconds: 5.0,
        rounds: 3,
        streams: vec![1, 16, 64],
        connections: 1,
        client_threads: 1,
        rate: 0.0,
        server_args: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value:?}: {e}");
        match flag.as_str() {
            "--server" => o.server = PathBuf::from(&value),
            "--calls" => o.calls = value.parse().map_err(|e| bad(&e))?,
            "--seconds" => o.seconds = value.parse().map_err(|e| bad(&e))?,
            "--rounds" => o.rounds = value.parse().map_err(|e| bad(&e))?,
            "--connections" => o.connections = value.parse().map_err(|e| bad(&e))?,
            "--client-threads" => o.client_threads = value.parse().map_err(|e| bad(&e))?,
            "--rate" => o.rate = value.parse().map_err(|e| bad(&e))?,
            "--server-args" => o.server_args = value.split_whitespace().map(String::from).collect(),
            "--streams" => {
                o.streams = value
                    .split(',')
                    .map(|s| s.trim().parse::<usize>())
                    .collect::<Result<_, _>>()
                    .map_err(|e| bad(&e))?;
            }
            _ => return Err(format!("unknown flag {flag:?}").into()),
        }
    }
    if o.calls == 0 || o.rounds == 0 || o.connections == 0 || o.client_threads == 0 {
        return Err(
            "--calls, --rounds, --connections and --client-threads must be at least 1".into(),
        );
    }
    if !(o.seconds > 0.0 && o.seconds <= 600.0) {
        return Err(format!("--seconds {}: between 0 and 600", o.seconds).into());
    }
    if !(o.rate >= 0.0 && o.rate <= 1e7) {
        return Err(format!("--rate {}: between 0 (closed loop) and 10^7", o.rate).into());
    }
    if o.streams.is_empty() || o.streams.iter().any(|&s| s == 0 || s > 10_000) {
        return Err(format!("--streams {:?}: each between 1 and 10000", o.streams).into());
    }
    Ok(o)
}

/// The `ratebound serve` child: killed and waited for when dropped (at the
/// end, on an error or on a panic), its YAML removed.
struct Server {
    child: Child,
    yaml: PathBuf,
    grpc: SocketAddr,
    http: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.yaml);
    }
}

/// Starts `ratebound serve` on 127.0.0.1 (any free ports) and reads the
/// bound addresses from its first line on stderr.
fn start(binary: &PathBuf, extra: &[String]) -> Result<Server, Error> {
    let yaml = std::env::temp_dir().join(format!("rls_load-{}.yaml", std::process::id()));
    std::fs::write(&yaml, RULES)?;
    let child = Command::new(binary)
        .args(["serve", "--config"])
        .arg(&yaml)
        .args(["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let any: SocketAddr = "127.0.0.1:0".parse()?;
    let mut server = Server {
        child,
        yaml,
        grpc: any,
        http: any,
    };
    let stderr = server.child.stderr.take().ok_or("no stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let first = lines
        .next()
        .ok_or("ratebound serve exited before reporting its addresses")??;
    // "ratebound serve: gRPC on A, HTTP on B"
    let rest = first
        .split_once("gRPC on ")
        .ok_or_else(|| format!("unexpected first line from ratebound serve: {first}"))?
        .1;
    let (grpc, http) = rest
        .split_once(", HTTP on ")
        .ok_or_else(|| format!("unexpected first line from ratebound serve: {first}"))?;
    server.grpc = grpc.trim().parse()?;
    server.http = http.trim().parse()?;
    // Keep its stderr drained (reload reports), shown as they come.
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            eprintln!("[server] {line}");
        }
    });
    Ok(server)
}

/// `GET /healthcheck` until 200, at most 100 tries 50 ms apart.
async fn healthy(http: SocketAddr) -> Result<(), Error> {
    for _ in 0..100 {
        if let Ok(mut s) = tokio::net::TcpStream::connect(http).await {
            let ask =
                format!("GET /healthcheck HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n");
            if s.write_all(ask.as_bytes()).await.is_ok() {
                let mut answer = Vec::new();
                let _ = s.read_to_end(&mut answer).await;
                if answer.starts_with(b"HTTP/1.1 200") {
                    return Ok(());
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!("ratebound serve on {http} not healthy after 5 s").into())
}

/// CPU time (user + system) of a process so far, from `/proc/PID/stat`.
fn cpu(pid: &str, tick: f64) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Past the command's ")": state is field 3, utime 14 and stime 15.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_secs_f64(ticks as f64 / tick))
}

/// Clock ticks per second (`getconf CLK_TCK`, else Linux's usual 100).
fn clock_tick() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// One stream's share of a row.
#[derive(Default)]
struct Tally {
    nanos: Vec<u64>,
    ok: u64,
    over: u64,
    other: u64,
    errors: u64,
    first_error: Option<String>,
}

/// One run of one row.
struct Run {
    calls: usize,
    per_second: f64,
    /// p50, p99, p99.9, max.
    quantiles: [Duration; 4],
    ok: u64,
    over: u64,
    other: u64,
    errors: u64,
    server_cpu: Option<Duration>,
    client_cpu: Option<Duration>,
    wall: Duration,
}

async fn row(
    clients: &[RateLimitServiceClient<Channel>],
    streams: usize,
    calls: usize,
    seconds: f64,
    seed: u64,
    pids: (&str, f64),
    rate: f64,
) -> Result<Run, Error> {
    let issued = Arc::new(AtomicUsize::new(0));
    let (pid, tick) = pids;
    let (server_before, client_before) = (cpu(pid, tick), cpu("self", tick));
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::with_capacity(streams);
    for s in 0..streams {
        let mut client = clients[s % clients.len()].clone();
        let issued = issued.clone();
        let mut rng = seed ^ (0x9E37_79B9_7F4A_7C15u64.wrapping_mul(s as u64 + 1)) | 1;
        // Open loop: stream s sends at start + (s/streams + k) × interval.
        let interval = (rate > 0.0).then(|| Duration::from_secs_f64(streams as f64 / rate));
        let mut next = interval.map(|i| start + i.mul_f64(s as f64 / streams as f64));
        tasks.push(tokio::spawn(async move {
            let mut t = Tally {
                nanos: Vec::with_capacity(calls / streams + 1),
                ..Tally::default()
            };
            while issued.fetch_add(1, Ordering::Relaxed) < calls && Instant::now() < deadline {
                if let (Some(at), Some(i)) = (next.as_mut(), interval) {
                    let now = Instant::now();
                    if *at > now {
                        tokio::time::sleep_until((*at).into()).await;
                    }
                    // The schedule is kept (late calls go out at once) unless
                    // more than 50 ms behind: then it starts again from now.
                    *at = (*at + i).max(now.checked_sub(Duration::from_millis(50)).unwrap_or(now));
                }
                let ask = request(&mut rng);
                let sent = Instant::now();
                let answer = client.should_rate_limit(ask).await;
                t.nanos.push(sent.elapsed().as_nanos() as u64);
                match answer.map(|a| a.into_inner().overall_code) {
                    Ok(c) if c == Code::Ok as i32 => t.ok += 1,
                    Ok(c) if c == Code::OverLimit as i32 => t.over += 1,
                    Ok(_) => t.other += 1,
                    Err(e) => {
                        t.errors += 1;
                        t.first_error.get_or_insert_with(|| e.to_string());
                    }
                }
            }
            t
        }));
    }
    let mut all = Tally::default();
    for task in tasks {
        let t = task.await?;
        all.nanos.extend(t.nanos);
        all.ok += t.ok;
        all.over += t.over;
        all.other += t.other;
        all.errors += t.errors;
        if all.first_error.is_none() {
            all.first_error = t.first_error;
        }
    }
    let wall = start.elapsed();
    let used = |before: Option<Duration>, who: &str| Some(cpu(who, tick)?.saturating_sub(before?));
    let (server_cpu, client_cpu) = (used(server_before, pid), used(client_before, "self"));
    if let Some(e) = &all.first_error {
        eprintln!(
            "{streams} streams: {} calls failed, the first: {e}",
            all.errors
        );
    }
    all.nanos.sort_unstable();
    let n = all.nanos.len();
    if n == 0 {
        return Err(format!("{streams} streams: no call completed").into());
    }
    // Nearest rank.
    let at =
        |q: f64| Duration::from_nanos(all.nanos[((q * n as f64).ceil() as usize).clamp(1, n) - 1]);
    Ok(Run {
        calls: n,
        per_second: n as f64 / wall.as_secs_f64(),
        quantiles: [at(0.5), at(0.99), at(0.999), at(1.0)],
        ok: all.ok,
        over: all.over,
        other: all.other,
        errors: all.errors,
        server_cpu,
        client_cpu,
        wall,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn shown_us(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

async fn bench(o: &Options, server: &Server) -> Result<(), Error> {
    healthy(server.http).await?;
    let pid = server.child.id().to_string();
    let tick = clock_tick();
    let mut clients = Vec::with_capacity(o.connections);
    for _ in 0..o.connections {
        // One Endpoint::connect is one HTTP/2 connection.
        let channel = Endpoint::from_shared(format!("http://{}", server.grpc))?
            .tcp_nodelay(true)
            .connect()
            .await?;
        clients.push(RateLimitServiceClient::new(channel));
    }
    println!(
        "ratebound serve {}(pid {pid}) on {}, {} HTTP/2 connection(s), load generator: {} tokio worker thread(s); load average before: {}",
        o.server_args
            .iter()
            .map(|a| format!("{a} "))
            .collect::<String>(),
        server.grpc,
        o.connections,
        o.client_threads,
        loadavg()
    );
    // Warm-up, not recorded: connections, the server's key tables.
    row(&clients, 16, 20_000, 2.0, 1, (&pid, tick), 0.0).await?;
    if o.rate > 0.0 {
        println!(
            "Open loop: {} calls/s in all, spread evenly over the streams; a latency runs from the call's send (tokio's timer has 1 ms ticks: sends go out in small bursts).",
            o.rate
        );
    } else {
        println!("Closed loop: each stream sends its next call when its last is answered.");
    }
    let mut runs: Vec<Vec<Run>> = o.streams.iter().map(|_| Vec::new()).collect();
    for round in 0..o.rounds {
        for (i, &streams) in o.streams.iter().enumerate() {
            let seed = 0x5EED_0000 + (round * 1000 + streams) as u64;
            let r = row(
                &clients,
                streams,
                o.calls,
                o.seconds,
                seed,
                (&pid, tick),
                o.rate,
            )
            .await?;
            let q = r.quantiles.map(micros);
            println!(
                "round {} streams {streams}: {} calls in {:.2} s, {:.0}/s, p50 {:.0} µs p99 {:.0} µs p99.9 {:.0} µs max {:.0} µs, OK {} OVER_LIMIT {} other {} errors {}",
                round + 1,
                r.calls,
                r.wall.as_secs_f64(),
                r.per_second,
                q[0],
                q[1],
                q[2],
                q[3],
                r.ok,
                r.over,
                r.other,
                r.errors
            );
            runs[i].push(r);
        }
    }
    println!();
    println!(
        "Medians of {} runs per row (at most {} calls or {} s a run; OK / OVER_LIMIT / errors: all runs' sum); CPU per decision: process CPU time (utime+stime) ÷ calls.",
        o.rounds, o.calls, o.seconds
    );
    println!();
    println!(
        "| streams | decisions/s | p50 | p99 | p99.9 | max | OK | OVER_LIMIT | errors | server CPU / decision | server CPU ÷ wall | load generator CPU / decision |"
    );
    println!(
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let mut at_64 = None;
    for (i, &streams) in o.streams.iter().enumerate() {
        let rs = &runs[i];
        let m = |f: &dyn Fn(&Run) -> f64| median(rs.iter().map(f).collect());
        let q = |k: usize| m(&|r: &Run| micros(r.quantiles[k]));
        let per_call = |f: &dyn Fn(&Run) -> Option<Duration>| {
            let v: Option<Vec<f64>> = rs
                .iter()
                .map(|r| f(r).map(|c| micros(c) / r.calls as f64))
                .collect();
            v.map(|v| format!("{:.1} µs", median(v)))
                .unwrap_or_else(|| "n/a".into())
        };
        let share: Option<Vec<f64>> = rs
            .iter()
            .map(|r| r.server_cpu.map(|c| c.as_secs_f64() / r.wall.as_secs_f64()))
            .collect();
        let sum = |f: &dyn Fn(&Run) -> u64| rs.iter().map(f).sum::<u64>();
        println!(
            "| {streams} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            m(&|r: &Run| r.per_second),
            shown_us(q(0)),
            shown_us(q(1)),
            shown_us(q(2)),
            shown_us(q(3)),
            sum(&|r: &Run| r.ok),
            sum(&|r: &Run| r.over),
            sum(&|r: &Run| r.errors + r.other),
            per_call(&|r: &Run| r.server_cpu),
            share
                .map(|v| format!("{:.2}", median(v)))
                .unwrap_or_else(|| "n/a".into()),
            per_call(&|r: &Run| r.client_cpu),
        );
        if streams == 64 {
            at_64 = Some(q(1));
        }
    }
    println!();
    match at_64 {
        Some(p99) if o.rate > 0.0 => println!(
            "Open loop at {}/s: p99 {} at 64 streams (the goal is the closed loop's).",
            o.rate,
            shown_us(p99)
        ),
        // The goal is the in-process one; over Redis, the row is compared
        // with redis-benchmark's ceiling (ci/bench prints it beside).
        Some(p99) if o.server_args.iter().any(|a| a == "--redis") => {
            println!("Over Redis: p99 at 64 streams {}.", shown_us(p99));
        }
        Some(p99) => {
            let verdict = if p99 < 1000.0 { "met" } else { "MISSED" };
            println!(
                "Goal (issue 40): in-process p99 under 1 ms at 64 streams: {verdict} ({}).",
                shown_us(p99)
            );
        }
        None => {}
    }
    println!("Load average after: {}", loadavg());
    Ok(())
}

fn main() -> Result<(), Error> {
    let o = options()?;
    let server = start(&o.server, &o.server_args)?;
    let runtime = if o.client_threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(o.client_threads)
            .enable_all()
            .build()?
    };
    let result = runtime.block_on(bench(&o, &server));
    drop(server);
    result
}
