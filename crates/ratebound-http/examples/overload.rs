//! The overload figures of the adaptive concurrency limit on a real axum
//! server (README, "Overload on a real server"): p50/p99 and goodput with
//! and without shedding, priorities, and a slowdown and its recovery. A
//! benchmark, run by `ci/bench`: it prints each goal as met or missed and
//! never fails on one (the behaviour is tested in `tests/overload.rs`).
//!
//! Run: `cargo run -p ratebound-http --all-features --example overload`
//! (~45 s).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

#[path = "../tests/open_loop/mod.rs"]
mod open_loop;
#[path = "../tests/serve/mod.rs"]
mod serve;
use open_loop::{Class, adaptive_layer, app, client, open_loop, print, summary, unloaded};

fn goal(name: &str, met: bool) {
    println!("goal {name}: {}", if met { "met" } else { "MISSED" });
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    // No shedding: the contrast.
    let addr = serve::serve(app(Arc::new(AtomicU64::new(20)), None)).await;
    let c = client();
    let base = unloaded(&c, addr).await;
    println!("unloaded: {:.1} ms", ms(base));
    let sent = open_loop(&c, addr, 500, 2.0, |_| Class::Normal).await;
    print(
        "no shedding, 500/s, 2 s (second 2)",
        &summary(&sent, 1.0, 2.0),
    );

    // The adaptive limit, the same overload, then 100/s.
    let layer = adaptive_layer();
    let gate = layer.clone();
    let addr = serve::serve(app(Arc::new(AtomicU64::new(20)), Some(layer))).await;
    let base = unloaded(&c, addr).await;
    let sent = open_loop(&c, addr, 500, 5.0, |_| Class::Normal).await;
    let s = summary(&sent, 1.0, 5.0);
    print("adaptive, 500/s, 5 s (after 1 s)", &s);
    let cap = gate.gate().concurrency().unwrap();
    println!("limit at the end: {} ({:?})", cap.limit(), cap.state());
    goal("p99 <= 3 x unloaded", s.p99 <= base * 3);
    goal("goodput >= 160/s", s.goodput >= 160.0);
    let after = summary(
        &open_loop(&c, addr, 100, 3.0, |_| Class::Normal).await,
        1.0,
        3.0,
    );
    print("after the overload, 100/s (after 1 s)", &after);
    goal("none shed after the overload", after.shed == 0);

    // A slowdown and its end: 40 ms from 2.5 s to 6.5 s.
    let (sent, seen, base) = open_loop::slowdown(12.5, (2.5, 6.5)).await;
    let before = summary(&sent, 1.0, 2.5);
    let during = summary(&sent, 4.5, 6.5);
    let recovered = summary(&sent, 9.5, 12.5);
    println!("slowdown: unloaded {:.1} ms", ms(base));
    print("slowdown: 20 ms, 500/s (1-2.5 s)", &before);
    print("slowdown: 40 ms from 2.5 s, 500/s (4.5-6.5 s)", &during);
    print("slowdown: 20 ms again from 6.5 s (9.5-12.5 s)", &recovered);
    let trace: Vec<_> = seen
        .iter()
        .step_by(2)
        .map(|&(t, l, b)| (t.round(), l, b.round()))
        .collect();
    println!("slowdown: (s, limit, baseline ms) every 0.5 s: {trace:?}");
    // Recovered: from the first half second after which every half second
    // serves 90 % of the goodput before, at a p50 within 1.2 x before.
    let halves: Vec<f64> = (13..25).map(|k| f64::from(k) * 0.5).collect();
    let fine = |from: f64| {
        let s = summary(&sent, from, from + 0.5);
        s.goodput >= 0.9 * before.goodput && s.p50.as_secs_f64() <= 1.2 * before.p50.as_secs_f64()
    };
    let back = (0..halves.len())
        .find(|&k| halves[k..].iter().all(|&t| fine(t)))
        .map(|k| halves[k] - 6.5);
    match back {
        Some(s) => println!("slowdown: recovered {s:.1} s after its end"),
        None => println!("slowdown: not recovered within 6 s of its end"),
    }
    let peak = seen.iter().map(|s| s.2).fold(0.0, f64::max);
    let (.., last) = seen.last().unwrap();
    println!("slowdown: baseline {peak:.1} ms at most, {last:.1} ms at the end");
    goal(
        "goodput >= 80/s 2 s into the slowdown",
        during.goodput >= 80.0,
    );
    goal(
        "p99 after the slowdown within 1.25 x before",
        recovered.p99.as_secs_f64() <= 1.25 * before.p99.as_secs_f64(),
    );
    goal(
        "recovered within 3 s of its end",
        back.is_some_and(|s| s <= 3.0),
    );
}
