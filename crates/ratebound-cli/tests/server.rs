//! `ratebound simulate --service-time`: the server model behind no cap, a
//! fixed cap and the adaptive limit, as a user runs it.

use std::path::PathBuf;

use serde_json::Value;

#[path = "support/png.rs"]
mod png_image;
#[path = "support/run.rs"]
mod run;
#[path = "support/svg.rs"]
mod svg_chart;

use run::{assert_usage_error, ratebound, stderr, stdout};

/// A file under the target directory, fresh for this test.
fn scratch(name: &str) -> PathBuf {
    run::scratch_in("server-tests", name)
}

fn run_ok(args: &[&str]) -> String {
    let o = ratebound(args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    stdout(&o)
}

fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    serde_json::from_str(&run_ok(&all)).expect("JSON output")
}

/// The variant named `name` of a JSON result.
fn variant<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["variants"]
        .as_array()
        .expect("variants")
        .iter()
        .find(|x| x["concurrency"] == name)
        .unwrap_or_else(|| panic!("no variant {name} in {v}"))
}

fn num(v: &Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} is not a number in {v}"))
}

/// The issue's overload: 4 workers of 20 ms (200/s) under 500 requests/s
/// for 4 s, measured after a 1 s warm-up.
const OVERLOAD: [&str; 14] = [
    "simulate",
    "--traffic",
    "steady:500/s",
    "--duration",
    "4s",
    "--service-time",
    "20ms",
    "--workers",
    "4",
    "--warmup",
    "1s",
    "--concurrency",
    "none,fixed:4,auto",
    "--seed",
];

fn overload() -> Vec<&'static str> {
    let mut args = OVERLOAD.to_vec();
    args.push("1");
    args
}

#[test]
fn overload_no_cap_grows_without_bound_while_the_adaptive_limit_stays_fast() {
    let v = json(&overload());
    let service = 0.020;
    assert_eq!(v["requests"], 2000, "{v}");
    assert_eq!(num(&v["server"], "capacity_per_s"), 200.0);

    let none = variant(&v, "none");
    assert_eq!(none["shed"], 0, "{none}");
    // Every request waits behind all before it: seconds, not milliseconds.
    assert!(num(none, "latency_p99_s") > 30.0 * service, "{none}");
    assert!(num(none, "queue_max") > 1000.0, "{none}");

    let auto = variant(&v, "auto");
    let p99 = num(auto, "latency_p99_s");
    let goodput = num(auto, "goodput_per_s");
    println!(
        "auto: p50 {} p99 {p99} goodput {goodput}/s; none: p99 {}",
        num(auto, "latency_p50_s"),
        num(none, "latency_p99_s")
    );
    assert!(p99 <= 3.0 * service, "{auto}");
    assert!(goodput >= 0.8 * 200.0, "{auto}");
    assert!(num(auto, "shed") > 0.0, "{auto}");
    // It learned its limit from 20 down toward the 4 workers.
    assert_eq!(auto["limit_over_time"][0][1], 20, "{auto}");
    let limit = num(auto, "limit");
    assert!((4.0..=10.0).contains(&limit), "{auto}");

    let fixed = variant(&v, "fixed:4");
    // Four in flight on four workers: nobody queues.
    assert!(
        (service..=1.05 * service).contains(&num(fixed, "latency_p99_s")),
        "{fixed}"
    );
    assert_eq!(fixed["queue_max"], 0, "{fixed}");
    assert!(num(fixed, "goodput_per_s") >= 0.95 * 200.0, "{fixed}");
    assert_eq!(fixed["limit_min"], 4);
    assert_eq!(fixed["limit_max"], 4);
}

/// Whitespace-separated cells of the table's row for `name`.
fn row(text: &str, name: &str) -> Vec<String> {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no row {name} in {text}"))
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn the_table_numbers_parse_back_to_the_json_ones() {
    let text = run_ok(&overload());
    let v = json(&overload());
    let header = row(&text, "concurrency");
    assert_eq!(
        header.join(" "),
        "concurrency admitted shed served/s p50 ms p99 ms max ms queue max limit min..max"
    );
    for name in ["none", "fixed:4", "auto"] {
        let cells = row(&text, name);
        assert_eq!(cells.len(), 10, "{cells:?}");
        let j = variant(&v, name);
        let n = |i: usize| -> f64 {
            cells[i]
                .parse()
                .unwrap_or_else(|_| panic!("{name}: cell {i} {:?} is a number", cells[i]))
        };
        assert_eq!(n(1), num(j, "admitted"), "{name}");
        assert_eq!(n(2), num(j, "shed"), "{name}");
        assert!((n(3) - num(j, "goodput_per_s")).abs() <= 0.05, "{name}");
        for (i, field) in [
            (4, "latency_p50_s"),
            (5, "latency_p99_s"),
            (6, "latency_max_s"),
        ] {
            assert!(
                (n(i) - 1e3 * num(j, field)).abs() <= 0.05,
                "{name} {field}: {} vs {}",
                cells[i],
                j[field]
            );
        }
        assert_eq!(n(7), num(j, "queue_max"), "{name}");
        if name == "none" {
            assert_eq!(&cells[8..], ["-", "-"], "{name}");
        } else {
            assert_eq!(n(8), num(j, "limit"), "{name}");
            assert_eq!(
                cells[9],
                format!("{}..{}", j["limit_min"], j["limit_max"]),
                "{name}"
            );
        }
    }
    // The adaptive limit over time, as printed, starts at 20 and ends at
    // the JSON's last limit.
    let at = text.find("auto limit over time:").expect("the limit's row");
    let limits: Vec<u64> = text[at..]
        .lines()
        .find(|l| l.trim_start().starts_with("limit"))
        .expect("limit line")
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().expect("a limit"))
        .collect();
    assert_eq!(limits.len(), 11, "{text}");
    assert_eq!(limits[0], 20);
    let auto = variant(&v, "auto");
    assert_eq!(limits[10] as f64, num(auto, "limit"), "{text}");
}

/// The auto variant's limit over time: `(t in s, limit)`.
fn limits(v: &Value) -> Vec<(f64, u64)> {
    variant(v, "auto")["limit_over_time"]
        .as_array()
        .expect("limit_over_time")
        .iter()
        .map(|p| (p[0].as_f64().unwrap(), p[1].as_u64().unwrap()))
        .collect()
}

#[test]
fn a_slowdown_makes_the_adaptive_limit_fall() {
    // 150 requests/s fit 4 workers of 20 ms (200/s) but not of 40 ms.
    let base = [
        "simulate",
        "--traffic",
        "steady:150/s",
        "--duration",
        "8s",
        "--service-time",
        "20ms",
        "--workers",
        "4",
        "--concurrency",
        "auto",
    ];
    let steady = json(&base);
    assert_eq!(limits(&steady), [(0.0, 20)], "no overload, no move");
    assert_eq!(variant(&steady, "auto")["shed"], 0);

    let mut slowed = base.to_vec();
    slowed.extend(["--slowdown", "4s:2x"]);
    let v = json(&slowed);
    assert_eq!(v["server"]["slowdown"][0]["factor"], 2.0);
    let moves = limits(&v);
    assert!(
        moves.iter().all(|&(t, l)| t >= 4.0 || l == 20),
        "the limit moved before the slowdown: {moves:?}"
    );
    let lowest = moves.iter().map(|m| m.1).min().unwrap();
    assert!(lowest <= 10, "the limit did not fall: {moves:?}");
    let auto = variant(&v, "auto");
    assert!(num(auto, "shed") > 0.0, "{auto}");
    // Deterministic: the same flags give the same numbers.
    assert_eq!(json(&slowed), v);
}

#[test]
fn jitter_is_seeded() {
    let args = |seed: &'static str| {
        [
            "simulate",
            "--traffic",
            "poisson:150/s",
            "--duration",
            "3s",
            "--service-time",
            "20ms",
            "--workers",
            "4",
            "--jitter",
            "0.5",
            "--seed",
            seed,
        ]
    };
    let a = json(&args("7"));
    assert_eq!(json(&args("7")), a);
    let b = json(&args("8"));
    assert_ne!(a["variants"], b["variants"]);
    assert_eq!(a["server"]["jitter"], 0.5);
    // Services of 10 to 30 ms; some requests queue at 150/s on 4 workers.
    let none = variant(&a, "none");
    let p50 = num(none, "latency_p50_s");
    assert!((0.010..=0.030).contains(&p50), "{none}");
    assert!(num(none, "latency_max_s") > 0.030, "{none}");
}

#[test]
fn a_traffic_file_goes_to_the_server_model_too() {
    let csv = scratch("burst.csv");
    // Ten requests at once, then one a second later.
    let mut rows = String::from("timestamp,key\n");
    for _ in 0..10 {
        rows.push_str("0,a\n");
    }
    rows.push_str("1,a\n");
    std::fs::write(&csv, rows).unwrap();
    let v = json(&[
        "simulate",
        "--traffic",
        csv.to_str().unwrap(),
        "--service-time",
        "100ms",
        "--workers",
        "2",
        "--concurrency",
        "none,fixed:4",
    ]);
    let none = variant(&v, "none");
    // Five rounds of two: the last pair answers after 500 ms.
    assert_eq!(none["admitted"], 11);
    assert_eq!(none["queue_max"], 8);
    assert_eq!(num(none, "latency_max_s"), 0.5);
    let fixed = variant(&v, "fixed:4");
    assert_eq!(
        (fixed["admitted"].as_u64(), fixed["shed"].as_u64()),
        (Some(5), Some(6))
    );
    assert_eq!(num(fixed, "latency_max_s"), 0.2);
}

/// The overload example charted to a fresh file `name`, which must succeed
/// and say where it drew the chart: the chart's path.
fn chart_overload(name: &str) -> PathBuf {
    let path = scratch(name);
    let mut args = overload();
    args.extend(["--chart", path.to_str().unwrap()]);
    let out = run_ok(&args);
    assert!(out.contains(&format!("plot: {}", path.display())), "{out}");
    path
}

#[test]
fn the_chart_has_one_panel_per_variant() {
    let svg = chart_overload("server.svg");
    let chart = svg_chart::read(&svg);
    chart.assert_panels(&["none:", "fixed:4:", "auto:"]);
    assert!(chart.says("1198 shed") || chart.says(" shed,"));
    let polylines = chart.polylines;
    // Per panel: 3x the service time, p99, in flight; a limit for two.
    assert!(polylines >= 11, "{polylines} lines drawn");
}

#[test]
fn the_chart_is_a_png_too() {
    let png = chart_overload("server.png");
    let image = png_image::decode(&png);
    // 1000 wide; a 62 px heading and one 230 px panel per variant (3).
    assert_eq!((image.width, image.height), (1000, 62 + 230 * 3));
    // The p99 lines (red) and the limits (blue: fixed:4 and auto).
    image.assert_drawn(&[(0, "red"), (2, "blue")]);
    // The heading's two lines of text, in the embedded font.
    let ink = image.dark_in_rows(0..62);
    assert!(ink > 500, "{ink} dark pixels in the heading");
}

#[test]
fn background_requests_are_shed_first_and_critical_ones_never() {
    let mut args = overload();
    args.extend(["--priorities", "background=50%,critical=5%"]);
    let v = json(&args);
    assert_eq!(v["server"]["priorities"]["background"], 0.5);
    for name in ["fixed:4", "auto"] {
        let by = &variant(&v, name)["by_priority"];
        let count = |p: &str, f: &str| num(&by[p], f);
        let total: f64 = ["critical", "normal", "background"]
            .iter()
            .map(|p| count(p, "requests"))
            .sum();
        assert_eq!(total, 2000.0, "{by}");
        // Drawn with the seed: about half background, a twentieth critical.
        assert!(
            (900.0..1100.0).contains(&count("background", "requests")),
            "{by}"
        );
        assert!(
            (60.0..140.0).contains(&count("critical", "requests")),
            "{by}"
        );
        assert_eq!(count("critical", "shed"), 0.0, "{name}: {by}");
        assert_eq!(count("critical", "admitted"), count("critical", "requests"));
        let rate = |p: &str| count(p, "admitted") / count(p, "requests");
        assert!(
            rate("normal") >= 2.0 * rate("background"),
            "{name}: normal {} vs background {}",
            rate("normal"),
            rate("background")
        );
    }
    let auto = variant(&v, "auto");
    assert!(num(auto, "latency_p99_s") <= 3.0 * 0.020, "{auto}");
    // Without a cap nothing is shed, whatever its priority.
    assert_eq!(variant(&v, "none")["shed"], 0);
    // The table shows the same breakdown.
    let text = run_ok(&args);
    let line = text
        .lines()
        .find(|l| l.starts_with("auto") && l.contains("critical"))
        .unwrap_or_else(|| panic!("no auto critical row in {text}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    let critical = &variant(&v, "auto")["by_priority"]["critical"];
    assert_eq!(cells[2].parse::<f64>().unwrap(), num(critical, "requests"));
    assert_eq!(cells[4], "0", "{line}");
    // A background share of the limit of 0 sheds every background request.
    args.extend(["--background-fraction", "0"]);
    let v = json(&args);
    let bg = &variant(&v, "auto")["by_priority"]["background"];
    assert_eq!(bg["admitted"], 0, "{bg}");
}

#[test]
fn the_help_names_the_server_model() {
    let help = run_ok(&["simulate", "--help"]);
    for flag in [
        "Server model",
        "--service-time",
        "--workers",
        "--concurrency",
        "--slowdown",
        "--jitter",
        "--warmup",
        "--priorities",
        "--background-fraction",
    ] {
        assert!(help.contains(flag), "{flag} missing from {help}");
    }
}

#[test]
fn bad_server_input_is_one_line_naming_the_value() {
    let with = |extra: &[&'static str]| {
        let mut a = vec!["simulate", "--traffic", "steady:10/s", "--duration", "2s"];
        a.extend_from_slice(extra);
        a
    };
    // Bad values of the server model's other flags, after a good
    // `--service-time 20ms`.
    for (extra, needle) in [
        (
            &["--workers", "0"][..],
            "--workers: \"0\" must be a whole number of at least 1",
        ),
        (&["--workers", "-3"], "\"-3\""),
        (
            &["--concurrency", "none,magic"],
            "unknown variant \"magic\"",
        ),
        (&["--concurrency", "fixed:0"], "\"fixed:0\""),
        (&["--concurrency", "auto:max=1,min=5"], "max_limit"),
        (&["--slowdown", "4s:-1x"], "factor \"-1x\""),
        (&["--jitter", "1.5"], "--jitter: \"1.5\""),
        (
            &["--warmup", "5s"],
            "--warmup \"5s\": must be shorter than the traffic's 2s",
        ),
        (&["--rate", "10/s"], "--rate is for the rate limits"),
        (
            &["--algorithm", "token-bucket"],
            "--algorithm is for the rate limits",
        ),
        (
            &["--plot", "out.jpeg"],
            "--plot out.jpeg: the file must end in .svg or .png",
        ),
        (
            &["--priorities", "normal=5%"],
            "\"normal\" is not critical or background",
        ),
        (
            &["--priorities", "background=150%"],
            "\"150%\" must be a share",
        ),
        (
            &["--priorities", "background=NaN"],
            "\"NaN\" must be a share",
        ),
        (
            &["--priorities", "critical=60%,background=0.6"],
            "adds up to more than 100 %",
        ),
        (
            &["--background-fraction", "2"],
            "--background-fraction: \"2\"",
        ),
    ] {
        assert_usage_error(
            &with(&[&["--service-time", "20ms"], extra].concat()),
            needle,
        );
    }
    // Bad service times, and the server model's flags without one.
    for (extra, needle) in [
        (
            &["--service-time", "-20ms"][..],
            "--service-time: \"-20ms\" must be more than 0",
        ),
        (&["--service-time", "NaN"], "--service-time: \"NaN\""),
        (&["--service-time", "0ms"], "--service-time: \"0ms\""),
        (
            &["--workers", "4"],
            "--workers is part of the server model: give --service-time too",
        ),
        (
            &["--concurrency", "auto"],
            "--concurrency is part of the server model",
        ),
        (
            &["--priorities", "background=50%"],
            "--priorities is part of the server model",
        ),
    ] {
        assert_usage_error(&with(extra), needle);
    }
}

/// The code block of the README that follows the paragraph containing
/// `after`.
fn readme_block(after: &str) -> String {
    let readme = include_str!("../README.md");
    let at = readme
        .find(after)
        .unwrap_or_else(|| panic!("{after:?} not in the README"));
    let start = at + readme[at..].find("```\n").expect("a block") + 4;
    let end = start + readme[start..].find("```").expect("its end");
    readme[start..end].to_string()
}

#[test]
fn the_readme_shows_what_the_overload_example_prints() {
    let svg = scratch("readme.svg");
    let mut args = overload();
    args.pop();
    args.pop();
    args.extend(["--chart", svg.to_str().unwrap()]);
    let out = run_ok(&args).replace(&svg.display().to_string(), "server.svg");
    assert_eq!(
        readme_block("The issue's overload"),
        out,
        "the README's server-model example changed; if on purpose, paste the new output"
    );
}
