//! The `ratebound` binary as a user runs it: output, exit codes, files (the
//! traffic files and bad input are `traffic.rs`'s).

use std::path::{Path, PathBuf};

#[path = "support/png.rs"]
mod png_image;
#[path = "support/run.rs"]
mod run;
#[path = "support/svg.rs"]
mod svg_chart;

use run::{admitted, json, ratebound, stderr, stdout};

/// A file under the target directory, fresh for this test.
fn scratch(name: &str) -> PathBuf {
    run::scratch_in("cli-tests", name)
}

/// `simulate --traffic boundary --plot <path>`, which must succeed and say
/// where it wrote the plot.
fn plot_boundary(path: &Path) {
    let o = ratebound(&[
        "simulate",
        "--traffic",
        "boundary",
        "--plot",
        path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("plot: {}", path.display())),
        "{}",
        stdout(&o)
    );
}

/// `200 x N, 429 x M` of the line of scenario 7 that starts with `what`.
fn answered(out: &str, what: &str) -> (u64, u64) {
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with(what))
        .unwrap_or_else(|| panic!("no {what:?} line in {out}"));
    let numbers: Vec<u64> = line
        .rsplit("answered")
        .next()
        .expect("answered")
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("a count"))
        .collect();
    // "200 x N, 429 x M"
    assert_eq!(numbers.len(), 4, "{line}");
    (numbers[1], numbers[3])
}

#[test]
fn demo_scenario_7_the_shared_limit_keeps_the_partner_from_refusing() {
    let o = ratebound(&["demo", "--live-only", "--seconds", "2s", "--no-learning"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with("7. The incident, live: 50 workers"),
        "{out}"
    );
    let (ok, refused) = answered(&out, "one limit in shared memory");
    // At most 15 + 9 x 2 = 33 tokens; the partner refuses none.
    assert_eq!(refused, 0, "{out}");
    assert!((28..=34).contains(&ok), "{out}");
    let (_, local_refused) = answered(&out, "fifty local buckets");
    assert!(local_refused >= 30, "{out}");
    assert!(!out.contains("DESIGN.md"), "{out}");
}

/// Scenario 8's "second half" line after `name`'s row: (200s, 429s,
/// changes learned).
fn second_half(out: &str, name: &str) -> (u64, u64, u64) {
    let mut lines = out.lines().skip_while(|l| !l.contains(name));
    let row = lines.next().unwrap_or_else(|| panic!("no {name} in {out}"));
    let half = lines
        .next()
        .unwrap_or_else(|| panic!("no second half after {row}"));
    let numbers: Vec<u64> = half
        .split(|c: char| !c.is_ascii_digit() && c != '.')
        .filter(|s| !s.is_empty() && !s.contains('.'))
        .map(|s| s.parse().expect("a count"))
        .collect();
    // "200 x N, 429 x M (P % refused); K changes learned"
    assert!(numbers.len() >= 6, "{half}");
    (numbers[1], numbers[3], numbers[5])
}

#[test]
fn demo_scenario_8_learning_keeps_a_wrong_limit_from_drawing_429s() {
    let o = ratebound(&[
        "demo",
        "--live-only",
        "--seconds",
        "1s",
        "--learning-seconds",
        "8s",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("8. A wrong limit, live"), "{out}");
    let (off_ok, off_refused, off_changes) = second_half(&out, "learning off");
    let (on_ok, on_refused, on_changes) = second_half(&out, "learning (the default)");
    assert_eq!(off_changes, 0, "{out}");
    assert!(on_changes > 0, "{out}");
    // Without learning the partner refuses two of every three; with it, a
    // small share.
    let share = |ok: u64, no: u64| no as f64 / (ok + no).max(1) as f64;
    assert!(share(off_ok, off_refused) > 0.5, "{out}");
    assert!(
        share(on_ok, on_refused) < share(off_ok, off_refused) / 2.0,
        "{out}"
    );
}

#[test]
fn demo_rejects_bad_seconds() {
    for bad in ["0s", "61s", "soon"] {
        let o = ratebound(&["demo", "--live-only", "--seconds", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        assert!(stderr(&o).contains("--seconds"), "{bad}: {}", stderr(&o));
    }
    for bad in ["0s", "61s", "soon", "500ms"] {
        let o = ratebound(&[
            "demo",
            "--live-only",
            "--seconds",
            "1s",
            "--learning-seconds",
            bad,
        ]);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        assert!(
            stderr(&o).contains("--learning-seconds"),
            "{bad}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn demo_matches_the_golden_file() {
    let o = ratebound(&["demo", "--no-live"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let golden = include_str!("golden/demo.txt");
    assert_eq!(
        stdout(&o),
        golden,
        "demo output changed; if on purpose, regenerate tests/golden/demo.txt"
    );
    // The scenarios' numbers, in the golden file itself.
    for expected in [
        "7 admitted, 3 refused",
        "429 (1s)",
        "2 removed (alice, bob), 1 left",
        "14 admitted, 6 refused",
        "fixed window: 100 + 100 = 200 admitted",
        "sliding window: 100 + 0 = 100 admitted",
        "sliding log: 100 + 0 = 100 admitted",
        "18 of 18 at 75 s",
    ] {
        assert!(golden.contains(expected), "{expected}");
    }
}

#[test]
fn boundary_burst_doubles_a_fixed_window_only() {
    let v = json(&[
        "simulate",
        "--traffic",
        "boundary",
        "--limit",
        "100",
        "--window",
        "60s",
        "--json",
    ]);
    assert_eq!(v["requests"], 200);
    assert_eq!(admitted(&v, "fixed-window", "key"), 200);
    assert_eq!(admitted(&v, "sliding-window", "key"), 100);
    assert_eq!(admitted(&v, "sliding-log", "key"), 100);
    assert_eq!(admitted(&v, "token-bucket", "key"), 100);
}

#[test]
fn incident_shows_fifty_local_limits_overshooting_the_partner() {
    let v = json(&[
        "simulate",
        "--traffic",
        "incident",
        "--rate",
        "10/s burst 20",
        "--algorithm",
        "token-bucket",
        "--duration",
        "30s",
        "--json",
    ]);
    let local = admitted(&v, "token-bucket", "key");
    let global = admitted(&v, "token-bucket", "global");
    // The partner's limit: 20 + 10/s over the run's 30 s.
    assert!(global <= 20 + 10 * 30, "{global}");
    assert!(global >= 10 * 30, "{global}");
    // Each of the 50 instances admits its own 20 + 10/s.
    assert!(local >= 45 * global, "local {local} vs global {global}");
    let text = stdout(&ratebound(&[
        "simulate",
        "--traffic",
        "incident",
        "--algorithm",
        "token-bucket",
        "--duration",
        "30s",
    ]));
    assert!(text.contains("The partner allows 320"), "{text}");
}

#[test]
fn leaky_bucket_reports_added_delay() {
    let v = json(&[
        "simulate",
        "--traffic",
        "burst:30@1s",
        "--rate",
        "10/s burst 20",
        "--algorithm",
        "leaky-bucket",
        "--json",
    ]);
    let a = &v["algorithms"][0];
    // 20 fit in a 2 s queue (one every 100 ms, the first at once) plus one
    // exactly at its end.
    assert_eq!(a["admitted"], 21, "{v}");
    assert_eq!(a["delay_p99_s"], 2.0, "{v}");
    assert_eq!(a["delay_p50_s"], 1.0, "{v}");
}

#[test]
fn the_plot_is_a_png_of_the_svg_with_its_text_drawn() {
    let (svg, png) = (scratch("same.svg"), scratch("same.PNG"));
    for path in [&svg, &png] {
        plot_boundary(path);
    }
    // The PNG has the SVG's size, one pixel per unit.
    let size = svg_chart::read(&svg)
        .size
        .expect("the SVG's width and height");
    let image = png_image::decode(&png);
    assert_eq!((image.width, image.height), size);
    assert_eq!(image.width, 1000);
    // One panel of 230 px per algorithm and scope below a 40 px title.
    assert!(
        image.height >= 40 + 230 * 5 && (image.height - 40).is_multiple_of(230),
        "height {}",
        image.height
    );
    // Not blank: a white background with the series drawn in green
    // (admitted), red (refused) and blue (level) and anti-aliased edges.
    image.assert_drawn(&[(0, "red"), (1, "green"), (2, "blue")]);
    // The title, alone in the top 40 px, is drawn: text needs the embedded
    // font (without one resvg drops text and this band stays white).
    let ink = image.dark_in_rows(0..40);
    assert!(ink > 300, "{ink} dark pixels in the title band");
}

#[test]
fn the_plot_is_an_svg_with_one_panel_per_algorithm() {
    let svg = scratch("plot.svg");
    plot_boundary(&svg);
    let chart = svg_chart::read(&svg);
    assert!(chart.len > 10_000, "{} bytes", chart.len);
    chart.assert_panels(&[
        "token-bucket",
        "fixed-window",
        "sliding-window",
        "sliding-log",
        "leaky-bucket",
    ]);
    assert!(chart.says("200 admitted"), "the fixed window's 200");
    let polylines = chart.polylines;
    assert!(polylines >= 10, "{polylines} lines drawn");
}

#[test]
fn bench_prints_ns_per_check() {
    let o = ratebound(&["bench", "--seconds", "0.05"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(out.matches("ns per check").count(), 3, "{out}");
    for line in out.lines().skip(1) {
        // "<row name>   <ns> ns per check[ (each thread: ...)]"
        let before = line.split(" ns per check").next().unwrap_or_default();
        let ns: f64 = before
            .split_whitespace()
            .last()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no number in {line:?}"));
        assert!(ns > 0.0 && ns < 100_000.0, "{line}");
    }
}

#[path = "../../ratebound-redis/tests/support/mod.rs"]
mod support;

#[test]
fn inspect_reads_a_token_bucket_in_a_real_redis() {
    let server = support::Server::start();
    let client = redis::Client::open(server.url()).expect("url");
    let mut con = client.get_connection().expect("connect");
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut con).expect("TIME");
    let now_us = secs * 1_000_000 + micros;
    // As gcra.lua leaves it: TAT in µs of Redis' clock, 1.5 s ahead (1/s
    // burst 3: 1.5 tokens used, 1 whole token left), expiring then.
    let tat = now_us + 1_500_000;
    redis::cmd("SET")
        .arg("rb:alice")
        .arg(tat.to_string())
        .arg("PX")
        .arg(1500)
        .query::<()>(&mut con)
        .expect("SET");
    let o = ratebound(&[
        "inspect",
        "--redis",
        &server.url(),
        "rb:alice",
        "--rate",
        "1/s burst 3",
    ]);
    let out = stdout(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.contains("type string"), "{out}");
    assert!(out.contains(&format!("value: {tat}")), "{out}");
    assert!(out.contains("1 of 3 tokens"), "{out}");
    // A key that is not there: a full bucket.
    let o = ratebound(&["inspect", "--redis", &server.url(), "rb:nobody"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("absent"), "{}", stdout(&o));
}

#[test]
fn demo_scenario_7_on_redis_keeps_the_partner_from_refusing() {
    let server = support::Server::start();
    let o = ratebound(&[
        "demo",
        "--live-only",
        "--seconds",
        "2s",
        "--no-learning",
        "--redis",
        &server.url(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let (ok, refused) = answered(&out, "one limit in Redis");
    assert_eq!(refused, 0, "{out}");
    assert!((28..=34).contains(&ok), "{out}");
}
