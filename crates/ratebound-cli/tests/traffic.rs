//! Traffic files as a user feeds them to `ratebound simulate`: CSV and JSON
//! lines, seeded Poisson traffic, and every kind of bad input (one line on
//! stderr, exit code 2, bounded memory).

use std::path::PathBuf;
use std::process::Command;

#[path = "support/run.rs"]
mod run;

use run::{admitted, assert_usage_error, json, ratebound, stderr, stdout};

/// A file under the target directory, fresh for this test.
fn scratch(name: &str) -> PathBuf {
    run::scratch_in("traffic-tests", name)
}

/// A traffic file under the target directory holding `text`.
fn traffic_file(name: &str, text: impl AsRef<[u8]>) -> PathBuf {
    let path = scratch(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn traffic_files_csv_and_json_lines() {
    // A header, seconds with keys and weights, and RFC 3339 times.
    let csv = traffic_file(
        "log.csv",
        "timestamp,key,n\n0,alice,1\n0,alice,1\n0,alice,1\n0,bob,2\n0.5,bob,1\n",
    );
    let v = simulate_file(&csv, "1/s burst 2").expect("simulated");
    // alice: 2 of 3; bob: 2 tokens then none left at 0.5 s.
    assert_eq!(admitted(&v, "token-bucket", "key"), 3, "{v}");
    assert_eq!(v["algorithms"][0]["keys"], 2);

    let jsonl = traffic_file(
        "log.jsonl",
        concat!(
            "{\"t\": \"2026-12-01T10:00:00Z\", \"key\": \"a\"}\n",
            "{\"t\": \"2026-12-01T10:00:00.5Z\", \"key\": \"a\"}\n",
            "{\"t\": \"2026-12-01T11:00:00+01:00\", \"key\": \"a\"}\n",
        ),
    );
    let v = simulate_file(&jsonl, "1/s burst 1").expect("simulated");
    // The third is the same instant as the first (+01:00): refused too.
    assert_eq!(admitted(&v, "token-bucket", "key"), 1, "{v}");
    assert_eq!(v["requests"], 3);
}

#[test]
fn bad_input_is_one_line_and_exit_code_2() {
    assert_usage_error(
        &[
            "simulate",
            "--traffic",
            "boundary",
            "--algorithm",
            "gcra-ish",
        ],
        "unknown algorithm \"gcra-ish\"",
    );
    assert_usage_error(
        &["simulate", "--traffic", "boundary", "--rate", "-5/s"],
        "--rate",
    );
    assert_usage_error(
        &["simulate", "--traffic", "boundary", "--rate", "0/s"],
        "--rate",
    );
    assert_usage_error(
        &[
            "simulate",
            "--traffic",
            "boundary",
            "--limit",
            "0",
            "--window",
            "60s",
        ],
        "--limit: \"0\"",
    );
    assert_usage_error(
        &[
            "simulate",
            "--traffic",
            "boundary",
            "--limit",
            "-3",
            "--window",
            "60s",
        ],
        "--limit: \"-3\"",
    );
    assert_usage_error(
        &["simulate", "--traffic", "boundary", "--window", "-1s"],
        "--window",
    );
    assert_usage_error(&["simulate", "--traffic", "steady:fast"], "not a rate");
    assert_usage_error(
        &["simulate", "--traffic", "tsunami"],
        "unknown traffic \"tsunami\"",
    );
    assert_usage_error(
        &["simulate", "--traffic", "boundary", "--frobnicate"],
        "--frobnicate",
    );
    assert_usage_error(&["simulate"], "--traffic");
    assert_usage_error(
        &["simulate", "--traffic", "boundary", "--plot", "/tmp/x.gif"],
        "--plot /tmp/x.gif: the file must end in .svg or .png",
    );
    assert_usage_error(
        &[
            "simulate",
            "--traffic",
            "boundary",
            "--plot",
            "/tmp/no-extension",
        ],
        "--plot /tmp/no-extension: the file must end in .svg or .png",
    );
    assert_usage_error(
        &[
            "simulate",
            "--traffic",
            "boundary",
            "--plot",
            "/no/such/dir/x.png",
        ],
        "cannot write the plot /no/such/dir/x.png",
    );
    assert_usage_error(
        &["simulate", "--traffic", "./no/such/file.csv"],
        "cannot read",
    );
    assert_usage_error(&["inspect", "--redis", "redis://127.0.0.1:1", "k"], "redis");

    let bad = traffic_file("bad.csv", "0,a\n1,a\n2,a,many\n");
    assert_usage_error(
        &["simulate", "--traffic", bad.to_str().unwrap()],
        "line 3, column 5: n \"many\" is not a whole number",
    );
    let bad = traffic_file("bad-time.csv", "0,a\nsoon,a\n");
    assert_usage_error(
        &["simulate", "--traffic", bad.to_str().unwrap()],
        "line 2, column 1",
    );
    let bad = traffic_file("bad.jsonl", "{\"t\": 1}\n{\"t\": 2,}\n");
    assert_usage_error(
        &["simulate", "--traffic", bad.to_str().unwrap()],
        "line 2, column",
    );
}

#[test]
fn poisson_is_seeded_and_a_noisy_neighbour_is_contained_per_key() {
    let run = |seed: &str| {
        stdout(&ratebound(&[
            "simulate",
            "--traffic",
            "poisson:30/s",
            "--seed",
            seed,
            "--json",
        ]))
    };
    assert_eq!(run("7"), run("7"), "the same seed replays the same traffic");
    assert_ne!(run("7"), run("8"));
    let v = json(&[
        "simulate",
        "--traffic",
        "poisson:30/s",
        "--seed",
        "7",
        "--json",
    ]);
    let requests = v["requests"].as_u64().unwrap();
    // About 30/s over 60 s.
    assert!((1500..=2100).contains(&requests), "{requests}");

    // 10/s burst 20 per key: the noisy key (50/s) gets its own 20 + 10/s,
    // the nine quiet ones (5/s each) everything they send.
    let per_key = json(&[
        "simulate",
        "--traffic",
        "noisy-neighbour",
        "--algorithm",
        "token-bucket",
        "--json",
    ]);
    let global = json(&[
        "simulate",
        "--traffic",
        "noisy-neighbour",
        "--algorithm",
        "token-bucket",
        "--global",
        "--json",
    ]);
    assert_eq!(per_key["algorithms"][0]["keys"], 10);
    assert_eq!(global["algorithms"][0]["keys"], 1);
    let quiet_total = 9 * 5 * 60;
    // The burst, plus one token a 100 ms up to its last request at 59.98 s.
    let noisy_share = 20 + 599;
    assert_eq!(
        admitted(&per_key, "token-bucket", "key"),
        quiet_total + noisy_share
    );
    assert!(
        admitted(&global, "token-bucket", "global") <= noisy_share,
        "{global}"
    );
}

/// The length of an error message less the path it names: what the test
/// bounds is how much of the *input* a message quotes, which must not depend
/// on where the checkout lives (a fresh clone under a longer path failed the
/// bound when the path counted).
fn without_path(err: &str, path: &std::path::Path) -> usize {
    let path = path.to_str().expect("a UTF-8 scratch path");
    assert!(err.contains(path), "the message names its file: {err:.300}");
    err.replace(path, "").len()
}

/// `simulate --json` of `path` at `rate` with a token bucket: the output,
/// or the error line (exit code 2).
fn simulate_file(path: &std::path::Path, rate: &str) -> Result<serde_json::Value, String> {
    let o = ratebound(&[
        "simulate",
        "--traffic",
        path.to_str().unwrap(),
        "--rate",
        rate,
        "--algorithm",
        "token-bucket",
        "--json",
    ]);
    if o.status.success() {
        Ok(serde_json::from_slice(&o.stdout).expect("JSON output"))
    } else {
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        Err(stderr(&o))
    }
}

#[test]
fn quoted_csv_fields_keep_their_commas_and_quotes() {
    let csv = traffic_file(
        "quoted.csv",
        "timestamp,key,n\n0,\"a,b\",1\n0,\"a,b\"\n0,\"say \"\"hi\"\"\",1\n0,c\n",
    );
    let v = simulate_file(&csv, "1/s burst 1").unwrap_or_else(|e| panic!("{e}"));
    // Three keys ("a,b", `say "hi"`, c); "a,b" sent two at once and got one.
    assert_eq!(v["requests"], 4, "{v}");
    assert_eq!(v["algorithms"][0]["keys"], 3, "{v}");
    assert_eq!(admitted(&v, "token-bucket", "key"), 3, "{v}");
}

#[test]
fn a_line_over_1_mib_is_refused_without_echoing_it() {
    const MIB: usize = 1 << 20;
    // A valid row whose key makes the line one byte too long...
    let long = scratch("long-line.csv");
    let mut text = String::from("0,a\n0,");
    text.push_str(&"k".repeat(MIB - 1));
    text.push('\n');
    std::fs::write(&long, &text).unwrap();
    let err = simulate_file(&long, "1/s").unwrap_err();
    assert!(err.contains("line 2 is longer than 1 MiB"), "{err:.300}");
    let quoted = without_path(&err, &long);
    assert!(quoted < 300, "{quoted} bytes besides the path: {err:.300}");
    // ...while one byte shorter is a row.
    std::fs::write(&long, &text[..text.len() - 2]).unwrap();
    let v = simulate_file(&long, "1/s").unwrap_or_else(|e| panic!("{e:.300}"));
    assert_eq!(v["requests"], 2);

    // A 10 MB bad line, and a bad field just under the bound: the message
    // quotes at most ~80 characters of either.
    for (name, line) in [
        ("bad-10mb.csv", format!("1,a,{}\n", "9x".repeat(5_000_000))),
        ("bad-field.csv", format!("1,a,{}\n", "9x".repeat(500_000))),
        ("bad-time.csv", format!("{},a\n", "9x".repeat(500_000))),
        (
            "bad-n.jsonl",
            format!("{{\"t\": 1, \"n\": \"{}\"}}\n", "9x".repeat(500_000)),
        ),
    ] {
        let bad = traffic_file(name, format!("0,a\n{line}"));
        let err = simulate_file(&bad, "1/s").unwrap_err();
        assert!(err.contains("line 2"), "{name}: {err:.300}");
        let quoted = without_path(&err, &bad);
        assert!(
            quoted < 300,
            "{name}: {quoted} bytes besides the path: {err:.300}"
        );
    }
}

#[test]
fn timestamps_beyond_the_nanosecond_range_are_refused() {
    for (name, rows, needle) in [
        (
            "huge.csv",
            "0,a\n1e300,a\n",
            "line 2, column 1: timestamp \"1e300\"",
        ),
        (
            "minus-huge.csv",
            "0,a\n-1e300,a\n",
            "line 2, column 1: timestamp \"-1e300\"",
        ),
        // 2^63 ns is just past the last representable nanosecond.
        (
            "past-i64.csv",
            "0,a\n9223372036.854775808,a\n",
            "line 2, column 1",
        ),
        (
            "huge.jsonl",
            "{\"t\": 0}\n{\"t\": 1e300}\n",
            "line 2, column 1: timestamp \"1e+300\"",
        ),
        (
            "far.jsonl",
            "{\"t\": 0}\n{\"t\": \"9999-12-31T23:59:59Z\"}\n",
            "line 2",
        ),
    ] {
        let path = traffic_file(name, rows);
        let err = simulate_file(&path, "1/s").unwrap_err();
        assert!(err.contains(needle), "{name}: {err}");
        assert!(err.contains("out of range"), "{name}: {err}");
    }
    // Each time fits, but not the span between them (285 years; the
    // built-in shapes' --duration stops at about 36).
    let far = traffic_file("far-apart.csv", "0,a\n9000000000,a\n");
    let err = simulate_file(&far, "1/s").unwrap_err();
    assert!(err.contains("line 2") && err.contains("line 1"), "{err}");
    assert!(err.contains("36 years"), "{err}");
}

#[test]
fn the_boundary_shape_is_bounded_like_the_others() {
    assert_usage_error(
        &[
            "simulate",
            "--traffic",
            "boundary",
            "--limit",
            "100000000000",
            "--window",
            "60s",
        ],
        "--traffic boundary would make about 200000000000 requests",
    );
}

/// An endless file without a line break ends in an error at its first line,
/// in bounded memory: the binary runs with 4 GiB of address space, and is
/// killed if it is still running after two minutes (it needs milliseconds).
#[cfg(target_os = "linux")]
#[test]
fn dev_zero_is_refused_at_its_first_line() {
    use std::time::{Duration, Instant};
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 4194304 && exec \"$0\" simulate --traffic /dev/zero")
        .arg(env!("CARGO_BIN_EXE_ratebound"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("sh runs");
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still reading /dev/zero after two minutes");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child.wait_with_output().expect("output");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err:.300}");
    assert!(
        err.contains("/dev/zero: line 1 is longer than 1 MiB"),
        "{err:.300}"
    );
}
