//! `ratebound serve` as a process: bad flags are one line and exit 2, it
//! serves on the addresses it reports, and SIGTERM stops it gracefully.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn ratebound(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ratebound"))
        .args(args)
        .output()
        .expect("ratebound runs")
}

#[test]
fn bad_flags_are_one_line_and_exit_2() {
    let out = ratebound(&["serve", "--config", "Cargo.toml", "--grpc", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        err,
        "ratebound: --grpc: \"nope\" is not an address such as 0.0.0.0:8081 or [::1]:8081\n"
    );
    let out = ratebound(&["serve", "--config", "/nonexistent/rules.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("/nonexistent/rules.yaml")
    );
}

/// The reference README's example 3, written out here as a test input, in
/// a file of its own under the system's temporary directory.
fn rules_file(name: &str, text: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("ratebound-serve-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

const EXAMPLE3: &str = "\
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
";

#[test]
fn check_reads_the_file_and_names_a_bad_value() {
    let good = rules_file("good.yaml", EXAMPLE3);
    let out = ratebound(&["serve", "--config", good.to_str().unwrap(), "--check"]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains(": OK, 1 domain (edge_proxy_per_ip)"),
        "{stdout}"
    );

    let bad = rules_file(
        "bad.yaml",
        &EXAMPLE3.replace("requests_per_unit: 10", "requests_per_unit: -10"),
    );
    let out = ratebound(&["serve", "--check", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("bad.yaml:6:"), "{err}");
    assert!(err.contains("-10"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // `--check PATH` (as `ratebound serve --check CONFIG`) and `--config
    // PATH --check` say the same.
    let out = ratebound(&["serve", "--check", good.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), stdout);
    let out = ratebound(&["serve"]);
    assert_eq!(out.status.code(), Some(2), "no --config: refused");
    let _ = std::fs::remove_file(good);
    let _ = std::fs::remove_file(bad);
}

fn get(addr: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn workers_must_be_a_count_of_threads() {
    for bad in ["0", "abc", "-1", "1.5", "1025"] {
        let out = ratebound(&["serve", "--config", "Cargo.toml", "--workers", bad]);
        assert_eq!(out.status.code(), Some(2), "--workers {bad}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(
            err,
            format!(
                "ratebound: --workers: \"{bad}\" is not a number of runtime worker threads from 1 to 1024\n"
            )
        );
    }
}

#[cfg(unix)]
#[test]
fn serves_then_stops_on_sigterm() {
    serve_until_sigterm("serve.yaml", &[]);
}

#[cfg(unix)]
#[test]
fn serves_on_one_worker() {
    serve_until_sigterm("one-worker.yaml", &["--workers", "1"]);
}

/// Starts `ratebound serve` with `extra` arguments, checks its
/// `/healthcheck`, sends SIGTERM and checks it stops within 5 s.
#[cfg(unix)]
fn serve_until_sigterm(name: &str, extra: &[&str]) {
    let rules = rules_file(name, EXAMPLE3);
    let mut child = Command::new(env!("CARGO_BIN_EXE_ratebound"))
        .args(["serve", "--config", rules.to_str().unwrap()])
        .args(["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ratebound runs");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut http = None;
    for _ in 0..10 {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if let Some(rest) = line.strip_prefix("ratebound serve: gRPC on ") {
            http = rest.split("HTTP on ").nth(1).map(|a| a.trim().to_string());
            break;
        }
    }
    let Some(http) = http else {
        let _ = child.kill();
        panic!("no bound addresses reported");
    };
    let answer = get(&http, "/healthcheck");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("\r\n\r\nOK"), "{answer}");

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("still running 5 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert_eq!(out, "ratebound serve: stopped\n");
    let _ = std::fs::remove_file(rules);
}
