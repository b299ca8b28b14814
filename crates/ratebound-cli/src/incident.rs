//! Scenario 7 of `ratebound demo`, live: the source material's incident.
//! Fifty workers call a partner that allows 10 requests/s with bursts of 20
//! (a server on 127.0.0.1 started here, with its own bucket, answering 429
//! with `Retry-After` beyond it). Through one limit shared by all fifty (in
//! shared memory, or in Redis with `--redis URL`) set below the partner's
//! quota — 9/s, bursts of 15 — each worker *waits* for its token, a 429
//! pauses the limit for everyone, and a retry goes through the limit again:
//! the partner answers no 429. Through fifty local buckets of the same
//! quota (the contrast), each worker is within its own limit and the
//! partner refuses most of what they send.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ratebound::outbound::Outbound;
use ratebound::wait::drive_blocking;
use ratebound::{KeyedAlgorithm, Quota, TokenBucket};
use ratebound_redis::{Algorithm, CallOutcome, Config, Engine, OnError};
use ratebound_shm::SharedLimiter;

use crate::CliError;

/// Workers calling the partner.
pub(crate) const WORKERS: usize = 50;
/// The partner's quota and the limit set below it.
pub(crate) const PARTNER_RATE: f64 = 10.0;
pub(crate) const PARTNER_BURST: f64 = 20.0;
const LIMIT: &str = "9/s burst 15";

/// The partner: its own token bucket (not ratebound's), counting answers
/// (in all, and per second since it started).
pub(crate) struct Partner {
    pub(crate) addr: SocketAddr,
    bucket: Mutex<(f64, Instant)>,
    ok: AtomicU64,
    refused: AtomicU64,
    stop: AtomicBool,
    /// Refusals without `Retry-After` (a reverse proxy's limiter).
    bare: bool,
    started: Instant,
    /// (200s, 429s) in each second since `started`.
    seconds: Mutex<Vec<(u64, u64)>>,
}

impl Partner {
    fn start() -> Result<Arc<Partner>, CliError> {
        Partner::start_with(false)
    }

    /// A partner answering a bare 429 (no `Retry-After`) when `bare`.
    pub(crate) fn start_with(bare: bool) -> Result<Arc<Partner>, CliError> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| CliError::new(format!("cannot listen on 127.0.0.1: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| CliError::new(format!("no local address: {e}")))?;
        let partner = Arc::new(Partner {
            addr,
            bucket: Mutex::new((PARTNER_BURST, Instant::now())),
            ok: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            bare,
            started: Instant::now(),
            seconds: Mutex::new(Vec::new()),
        });
        let p = partner.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                if p.stop.load(Ordering::Acquire) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let p = p.clone();
                thread::spawn(move || p.serve(stream));
            }
        });
        Ok(partner)
    }

    /// Answers requests on one keep-alive connection until it closes.
    fn serve(&self, stream: TcpStream) {
        let Ok(mut out) = stream.try_clone() else {
            return;
        };
        let mut input = BufReader::new(stream);
        let mut line = String::new();
        loop {
            // The request head; requests here have no body.
            let mut any = false;
            loop {
                line.clear();
                match input.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) if line == "\r\n" || line == "\n" => break,
                    Ok(_) => any = true,
                }
            }
            if !any {
                continue;
            }
            let taken = self.take();
            self.count(taken);
            let answer = if taken {
                self.ok.fetch_add(1, Ordering::Relaxed);
                "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
            } else if self.bare {
                self.refused.fetch_add(1, Ordering::Relaxed);
                "HTTP/1.1 429 Too Many Requests\r\ncontent-length: 2\r\n\r\nno"
            } else {
                self.refused.fetch_add(1, Ordering::Relaxed);
                "HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\ncontent-length: 2\r\n\r\nno"
            };
            if out.write_all(answer.as_bytes()).is_err() {
                return;
            }
        }
    }

    /// Counts an answer in its second.
    fn count(&self, ok: bool) {
        let second = usize::try_from(self.started.elapsed().as_secs()).unwrap_or(usize::MAX);
        let mut seconds = self.seconds.lock().unwrap_or_else(|e| e.into_inner());
        if seconds.len() <= second && second < 3600 {
            seconds.resize(second + 1, (0, 0));
        }
        if let Some(s) = seconds.get_mut(second) {
            if ok {
                s.0 += 1;
            } else {
                s.1 += 1;
            }
        }
    }

    /// The (200s, 429s) of each second so far.
    pub(crate) fn per_second(&self) -> Vec<(u64, u64)> {
        self.seconds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn take(&self) -> bool {
        let mut b = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        b.0 = (b.0 + now.duration_since(b.1).as_secs_f64() * PARTNER_RATE).min(PARTNER_BURST);
        b.1 = now;
        if b.0 >= 1.0 {
            b.0 -= 1.0;
            true
        } else {
            false
        }
    }

    pub(crate) fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// One GET on a keep-alive connection: the status and the headers.
pub(crate) fn get(
    conn: &mut BufReader<TcpStream>,
) -> std::io::Result<(u16, Vec<(String, String)>)> {
    conn.get_mut()
        .write_all(b"GET /v1/items HTTP/1.1\r\nhost: partner\r\n\r\n")?;
    let mut line = String::new();
    conn.read_line(&mut line)?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
    let (mut headers, mut length) = (Vec::new(), 0usize);
    loop {
        line.clear();
        if conn.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            let (k, v) = (k.trim().to_string(), v.trim().to_string());
            if k.eq_ignore_ascii_case("content-length") {
                length = v.parse().unwrap_or(0);
            }
            headers.push((k, v));
        }
    }
    let mut body = vec![0; length];
    std::io::Read::read_exact(conn, &mut body)?;
    Ok((status, headers))
}

/// The limit a worker waits on.
enum Limit {
    /// One bucket in a file, shared by every worker (and process).
    Shared(Arc<SharedLimiter>),
    /// The worker's own bucket: the contrast.
    Local(Box<TokenBucket>),
    /// One bucket in Redis: the engine decides, this runs its calls.
    Redis(Arc<Engine>, redis::Connection),
}

const KEY: &[u8] = b"partner-demo";

impl Limit {
    /// Waits for a token; false when it would come only after `deadline`.
    fn acquire(&mut self, deadline: Instant) -> Result<bool, CliError> {
        let left = deadline.saturating_duration_since(Instant::now());
        match self {
            Limit::Shared(l) => match l.acquire_n(1, Some(left)) {
                Ok(()) => Ok(true),
                Err(ratebound_shm::Error::Limit(ratebound::Error::DeadlineExceeded { .. })) => {
                    Ok(false)
                }
                Err(e) => Err(CliError::new(e.to_string())),
            },
            Limit::Local(b) => match b.reserve_n(1, left) {
                Ok(r) => {
                    thread::sleep(r.delay());
                    Ok(true)
                }
                Err(ratebound::Error::DeadlineExceeded { .. }) => Ok(false),
                Err(e) => Err(e.into()),
            },
            Limit::Redis(engine, conn) => {
                let mut a = engine.acquire(None, KEY, 1, Some(left))?;
                let done = drive_blocking(
                    &mut a,
                    |a| engine.acquire_step(a),
                    |a, call| {
                        let reply = run(conn, &call);
                        engine.acquire_reply(a, outcome(&reply));
                        Ok(())
                    },
                );
                match done {
                    Ok(_) => Ok(true),
                    Err(ratebound::Error::DeadlineExceeded { .. }) => Ok(false),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }

    /// Obeys the partner: empties the bucket for `d`, for everyone sharing it.
    fn pause(&mut self, d: Duration) -> Result<(), CliError> {
        match self {
            Limit::Shared(l) => l.pause(d).map_err(|e| CliError::new(e.to_string())),
            Limit::Local(b) => {
                b.pause(d);
                Ok(())
            }
            Limit::Redis(engine, conn) => {
                let call = engine.begin_pause(None, KEY, d)?;
                let reply = run(conn, &call);
                if let Some((start, shift)) = engine.finish_pause(outcome(&reply)) {
                    // This engine's own waiters (every worker here) move at
                    // once; other processes would hear it on the channel.
                    if let Some(news) = engine.pause_news(&call, start, shift) {
                        let _: redis::RedisResult<i64> = redis::cmd("PUBLISH")
                            .arg(engine.pause_channel())
                            .arg(news)
                            .query(conn);
                    }
                }
                Ok(())
            }
        }
    }
}

fn outcome(reply: &Result<Vec<i64>, String>) -> CallOutcome<'_> {
    match reply {
        Ok(r) => CallOutcome::Reply(r),
        Err(e) => CallOutcome::Failed(e),
    }
}

/// Runs an engine's call on the blocking connection (`EVALSHA`, `EVAL` on
/// `NOSCRIPT`: `Call::run_blocking`).
fn run(conn: &mut redis::Connection, call: &ratebound_redis::Call) -> Result<Vec<i64>, String> {
    call.run_blocking(conn).map_err(|e| e.to_string())
}

/// One worker: calls the partner until `deadline`, waiting on `limit`
/// before each call and obeying the partner's answers.
fn worker(mut limit: Limit, addr: SocketAddr, deadline: Instant) -> Result<(), CliError> {
    let outbound = Outbound::new();
    let stream = TcpStream::connect(addr)
        .map_err(|e| CliError::new(format!("cannot reach the partner: {e}")))?;
    let mut conn = BufReader::new(stream);
    'calls: while limit.acquire(deadline)? {
        let mut attempt = 0;
        loop {
            let (status, headers) =
                get(&mut conn).map_err(|e| CliError::new(format!("partner: {e}")))?;
            let now_unix = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            let advice = outbound.advise(
                "GET",
                status,
                headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                attempt,
                now_unix,
            );
            if let Some(d) = advice.pause {
                limit.pause(d)?;
            }
            if !advice.retry {
                continue 'calls;
            }
            attempt += 1;
            if !limit.acquire(deadline)? {
                break 'calls;
            }
        }
    }
    Ok(())
}

/// Waits for every worker, then stops the partner; the first worker's
/// error, if any.
pub(crate) fn join(
    handles: Vec<thread::JoinHandle<Result<(), CliError>>>,
    partner: &Partner,
) -> Result<(), CliError> {
    let mut first_error = None;
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => first_error = first_error.or(Some(e)),
            Err(_) => first_error = first_error.or(Some(CliError::new("a worker panicked"))),
        }
    }
    partner.shutdown();
    first_error.map_or(Ok(()), Err)
}

/// Runs the fifty workers on limits made by `make`; the partner's counts.
fn fleet(
    make: &dyn Fn() -> Result<Limit, CliError>,
    run_for: Duration,
) -> Result<(u64, u64), CliError> {
    let partner = Partner::start()?;
    let limits = (0..WORKERS)
        .map(|_| make())
        .collect::<Result<Vec<_>, _>>()?;
    let deadline = Instant::now() + run_for;
    let handles: Vec<_> = limits
        .into_iter()
        .map(|limit| {
            let addr = partner.addr;
            thread::spawn(move || worker(limit, addr, deadline))
        })
        .collect();
    join(handles, &partner)?;
    Ok((
        partner.ok.load(Ordering::Relaxed),
        partner.refused.load(Ordering::Relaxed),
    ))
}

/// Scenario 7 as text: the shared-memory fleet, fifty local buckets, and
/// (with `redis`) the Redis fleet, each for `run_for`.
pub fn render(redis_url: Option<&str>, run_for: Duration) -> Result<String, CliError> {
    let quota = Quota::parse(LIMIT)?;
    let secs = run_for.as_secs_f64();
    let mut out = format!(
        "7. The incident, live: {WORKERS} workers call a partner on 127.0.0.1 that allows \
         {PARTNER_RATE}/s with bursts of {PARTNER_BURST} (429 + Retry-After beyond), for {secs} s;\n   \
         each waits for a token of a limit of {LIMIT} (at most {} requests in {secs} s), \
         obeys the partner's 429 and retries through the limit\n",
        15.0 + 9.0 * secs
    );
    let path = std::env::temp_dir().join(format!("ratebound-demo-{}.limit", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let shared = Arc::new(
        SharedLimiter::open(&path, KeyedAlgorithm::TokenBucket(quota))
            .map_err(|e| CliError::new(e.to_string()))?,
    );
    let result = fleet(&|| Ok(Limit::Shared(shared.clone())), run_for);
    let _ = std::fs::remove_file(&path);
    let (ok, refused) = result?;
    out.push_str(&format!(
        "   one limit in shared memory:         partner answered 200 x {ok}, 429 x {refused}\n"
    ));
    let (ok, refused) = fleet(
        &|| Ok(Limit::Local(Box::new(TokenBucket::new(quota)))),
        run_for,
    )?;
    out.push_str(&format!(
        "   fifty local buckets (the contrast): partner answered 200 x {ok}, 429 x {refused}\n"
    ));
    if let Some(url) = redis_url {
        let client =
            redis::Client::open(url).map_err(|e| CliError::new(format!("--redis {url}: {e}")))?;
        let mut config = Config::new(Algorithm::TokenBucket(quota));
        config.prefix = format!("rb-demo-{}:", std::process::id());
        config.on_error = OnError::Closed;
        config.timeout = Duration::from_secs(1);
        let engine = Arc::new(Engine::new(config)?);
        let make = || {
            let conn = client
                .get_connection()
                .map_err(|e| CliError::new(format!("--redis {url}: {e}")))?;
            Ok(Limit::Redis(engine.clone(), conn))
        };
        let (ok, refused) = fleet(&make, run_for)?;
        out.push_str(&format!(
            "   one limit in Redis ({url}): partner answered 200 x {ok}, 429 x {refused}\n"
        ));
    }
    out.push('\n');
    Ok(out)
}
