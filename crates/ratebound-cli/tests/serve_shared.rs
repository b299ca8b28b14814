//! Several `ratebound serve` processes keeping one limit: over one Redis,
//! over a three-master Redis Cluster, and in shared memory on one host —
//! together they admit exactly the limit. Redis killed: the fail policy
//! answers (counted in `/metrics`), and decisions come from Redis again
//! once it is back, without a restart.
//!
//! The limits are token buckets of N per day with a burst of N: once the
//! burst is spent, the next token is due hours later, so "exactly N" holds
//! however long the test takes on a loaded machine.

#[path = "../../ratebound-redis/tests/support/mod.rs"]
mod redis_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis_support::{Cluster, Server};

/// A `ratebound serve` child process, killed on drop.
struct Serve {
    child: Child,
    http: String,
    /// What it logged after its addresses.
    log: Arc<Mutex<String>>,
}

impl Serve {
    /// Starts `ratebound serve --config rules` with `args`, on free ports,
    /// and waits for the addresses it reports.
    fn start(rules: &Path, args: &[&str]) -> Serve {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ratebound"))
            .args(["serve", "--config", rules.to_str().unwrap()])
            .args(["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ratebound runs");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut seen = String::new();
        for _ in 0..20 {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            seen.push_str(&line);
            let http = match line.strip_prefix("ratebound serve: gRPC on ") {
                Some(rest) => rest.split("HTTP on ").nth(1).map(|a| a.trim().to_string()),
                // `--log-format json`: the event's own field.
                None => serde_json::from_str::<serde_json::Value>(&line)
                    .ok()
                    .and_then(|v| Some(v.get("http")?.as_str()?.to_string())),
            };
            if let Some(http) = http {
                // Keep reading its log so that it never blocks on a full pipe.
                let log = Arc::new(Mutex::new(String::new()));
                let kept = Arc::clone(&log);
                std::thread::spawn(move || {
                    let mut line = String::new();
                    while stderr.read_line(&mut line).unwrap_or(0) > 0 {
                        kept.lock().unwrap().push_str(&line);
                        line.clear();
                    }
                });
                return Serve { child, http, log };
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("ratebound serve did not report its addresses: {seen}");
    }

    /// `POST /json` of one descriptor `key=value` in `domain`: the HTTP
    /// status (200 admitted, 429 over the limit) and the body.
    fn ask(&self, domain: &str, key: &str, value: &str) -> (u16, String) {
        let body = format!(
            r#"{{"domain":"{domain}","descriptors":[{{"entries":[{{"key":"{key}","value":"{value}"}}]}}]}}"#
        );
        let mut stream = TcpStream::connect(&self.http).expect("connects");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        let status = answer
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP answer: {answer}"));
        (status, answer)
    }

    /// `GET /metrics`.
    fn metrics(&self) -> String {
        let mut stream = TcpStream::connect(&self.http).expect("connects");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of the metric line that starts with `series` (0 if absent).
fn metric(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

/// A scratch directory of this test process.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "ratebound-serve-shared-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Rules of `per_day` per user (a token bucket, burst `per_day`).
fn rules(dir: &std::path::Path, per_day: u32) -> PathBuf {
    let path = dir.join("fleet.yaml");
    std::fs::write(
        &path,
        format!(
            "domain: fleet\n\
             descriptors:\n  \
               - key: user\n    \
                 rate_limit:\n      \
                   algorithm: token_bucket\n      \
                   unit: day\n      \
                   requests_per_unit: {per_day}\n"
        ),
    )
    .unwrap();
    path
}

/// Sends `each` requests for every user in `users` to every server, from
/// one thread per server at once; the admissions per user.
fn admitted_per_user(servers: &[Serve], users: &[String], each: usize) -> Vec<usize> {
    std::thread::scope(|s| {
        let per_server: Vec<_> = servers
            .iter()
            .map(|server| {
                s.spawn(move || {
                    let mut admitted = vec![0; users.len()];
                    for _ in 0..each {
                        for (i, u) in users.iter().enumerate() {
                            let (status, answer) = server.ask("fleet", "user", u);
                            match status {
                                200 => admitted[i] += 1,
                                429 => {}
                                _ => panic!("neither admitted nor over the limit: {answer}"),
                            }
                        }
                    }
                    admitted
                })
            })
            .collect();
        let mut total = vec![0; users.len()];
        for h in per_server {
            for (t, a) in total.iter_mut().zip(h.join().unwrap()) {
                *t += a;
            }
        }
        total
    })
}

#[test]
fn three_servers_over_one_redis_admit_exactly_the_limit() {
    let redis = Server::start();
    let dir = scratch("redis");
    let rules = rules(&dir, 30);
    let url = redis.url();
    let args = ["--redis", url.as_str(), "--redis-timeout", "5s"];
    let servers: Vec<Serve> = (0..3).map(|_| Serve::start(&rules, &args)).collect();
    let users = vec!["ann".to_string(), "bob".to_string()];
    // 3 servers × 20 requests per user: 60 asked, 30 each admitted.
    assert_eq!(admitted_per_user(&servers, &users, 20), vec![30, 30]);
    for s in &servers {
        let m = s.metrics();
        assert!(
            metric(
                &m,
                "ratebound_backend_answers_total{backend=\"redis\",source=\"redis\"}"
            ) >= 40,
            "{m}"
        );
        assert_eq!(
            metric(&m, "ratebound_backend_errors_total{backend=\"redis\"}"),
            0
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn three_servers_over_a_three_master_cluster_admit_exactly_the_limit() {
    let cluster = Cluster::start();
    let dir = scratch("cluster");
    let rules = rules(&dir, 5);
    let mut args: Vec<String> = Vec::new();
    for url in cluster.urls() {
        args.push("--redis".to_string());
        args.push(url);
    }
    args.extend(["--redis-timeout".to_string(), "5s".to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let servers: Vec<Serve> = (0..3).map(|_| Serve::start(&rules, &args)).collect();
    // Twelve users: their keys fall on every master.
    let users: Vec<String> = (0..12).map(|i| format!("user-{i}")).collect();
    assert_eq!(admitted_per_user(&servers, &users, 3), vec![5; 12]);
    let mut masters_used = 0;
    for node in &cluster.nodes {
        let keys = redis_support::raw(node.port, "DBSIZE").unwrap_or_default();
        if !keys.starts_with(":0") {
            masters_used += 1;
        }
    }
    assert_eq!(masters_used, 3, "every master holds some of the keys");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn three_servers_in_shared_memory_admit_exactly_the_limit() {
    let dir = scratch("shm");
    let rules = rules(&dir, 30);
    let shm = dir.join("state");
    let args = ["--shm", shm.to_str().unwrap(), "--max-keys", "1000"];
    let servers: Vec<Serve> = (0..3).map(|_| Serve::start(&rules, &args)).collect();
    let users = vec!["ann".to_string(), "bob".to_string()];
    assert_eq!(admitted_per_user(&servers, &users, 20), vec![30, 30]);
    assert_eq!(
        std::fs::read_dir(&shm).unwrap().count(),
        1,
        "one file per limit"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn redis_killed_the_fail_policy_answers_and_redis_decides_again_once_back() {
    let mut redis = Server::start();
    let dir = scratch("killed");
    let rules = rules(&dir, 1000);
    let url = redis.url();
    let closed = Serve::start(
        &rules,
        &[
            "--redis",
            &url,
            "--redis-on-error",
            "closed",
            "--redis-timeout",
            "200ms",
        ],
    );
    let open = Serve::start(
        &rules,
        &[
            "--redis",
            &url,
            "--redis-on-error",
            "open",
            "--redis-timeout",
            "200ms",
            "--log-format",
            "json",
        ],
    );
    assert_eq!(closed.ask("fleet", "user", "ann").0, 200);
    assert_eq!(open.ask("fleet", "user", "ann").0, 200);

    redis.kill();
    // Answered, by each server's policy: closed refuses, open admits.
    for _ in 0..3 {
        assert_eq!(closed.ask("fleet", "user", "ann").0, 429);
        assert_eq!(open.ask("fleet", "user", "ann").0, 200);
    }
    let series = "ratebound_backend_answers_total{backend=\"redis\",source=";
    assert!(metric(&closed.metrics(), &format!("{series}\"fail_closed\"}}")) >= 3);
    assert!(metric(&open.metrics(), &format!("{series}\"fail_open\"}}")) >= 3);
    assert!(
        metric(
            &open.metrics(),
            "ratebound_backend_errors_total{backend=\"redis\"}"
        ) >= 3
    );
    // And logged: a JSON line from the Redis driver, at warn; a text line.
    let warned = |s: &Serve| {
        s.log.lock().unwrap().lines().any(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            v["target"] == "ratebound_redis" && v["level"] == "warn" && v["ts"].is_string()
        })
    };
    let texted = |s: &Serve| {
        s.log
            .lock()
            .unwrap()
            .contains("ratebound serve: warn ratebound_redis: ")
    };
    // The lines are read from the processes' stderr by threads of ours:
    // give them a moment (bounded).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(warned(&open) && texted(&closed)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(warned(&open), "{}", open.log.lock().unwrap());
    assert!(texted(&closed), "{}", closed.log.lock().unwrap());

    // Back (empty): within the breaker's cool-down and a reconnect, Redis
    // decides again — no restart of the servers.
    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(30);
    let from_redis = |s: &Serve| metric(&s.metrics(), &format!("{series}\"redis\"}}"));
    let before = (from_redis(&closed), from_redis(&open));
    loop {
        let a = closed.ask("fleet", "user", "ann").0;
        let b = open.ask("fleet", "user", "ann").0;
        if a == 200 && from_redis(&closed) > before.0 && from_redis(&open) > before.1 {
            assert_eq!(b, 200);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Redis did not decide again within 30 s of coming back"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_backend_flags_are_one_line_naming_the_value_and_exit_2() {
    let dir = scratch("flags");
    let rules = rules(&dir, 1);
    let rules = rules.to_str().unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_ratebound"))
            .args(["serve", "--config", rules, "--grpc", "127.0.0.1:0"])
            .args(["--http", "127.0.0.1:0"])
            .args(args)
            .output()
            .expect("ratebound runs");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        String::from_utf8(out.stderr).unwrap()
    };
    let url = ["--redis", "redis://127.0.0.1:1/"];
    for (args, says) in [
        (
            vec!["--redis-on-error", "maybe"],
            "--redis-on-error: \"maybe\" is not open or closed",
        ),
        (
            vec!["--redis-timeout", "0ms"],
            "--redis-timeout: \"0ms\" must be more than 0",
        ),
        (
            vec!["--max-keys", "0"],
            "--max-keys: \"0\" is not a whole number above 0",
        ),
        (
            vec!["--log-format", "xml"],
            "--log-format: \"xml\" is not text or json",
        ),
    ] {
        let err = run(&[&url[..], &args[..]].concat());
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    let err = run(&["--redis", "nope://x"]);
    assert!(
        err.contains("--redis: ") && err.contains("nope://x"),
        "{err}"
    );
    // One backend: Redis or shared memory.
    let err = run(&["--redis", "redis://127.0.0.1:1/", "--shm", "/tmp/x"]);
    assert!(err.contains("--shm"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}
