//! Every committed corpus and regression file of every fuzz target,
//! through the target's function (on stable, in `ci/test`): a regression
//! fails here without nightly or libFuzzer.

use std::path::{Path, PathBuf};

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_none_or(|x| x != "md"))
        .collect();
    out.sort();
    out
}

#[test]
fn every_corpus_and_regression_file_replays() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut total = 0;
    for (name, target) in ratebound_fuzz::TARGETS {
        let corpus = files(&root.join("corpus").join(name));
        let regressions = files(&root.join("regressions").join(name));
        // Every target has a committed corpus: an empty one would test nothing.
        assert!(
            !corpus.is_empty(),
            "no corpus for {name} in fuzz/corpus/{name}"
        );
        for file in corpus.iter().chain(&regressions) {
            let data = std::fs::read(file).expect("a corpus file");
            let result = std::panic::catch_unwind(|| target(&data));
            assert!(
                result.is_ok(),
                "{name}: {} fails (replay it: cargo +nightly fuzz run {name} {})",
                file.display(),
                file.display()
            );
            total += 1;
        }
    }
    ratebound_fuzz::shm::remove_files();
    println!("{total} files replayed");
}

#[test]
fn every_target_has_a_libfuzzer_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (name, _) in ratebound_fuzz::TARGETS {
        let path = root.join("fuzz_targets").join(format!("{name}.rs"));
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            text.contains(&format!("ratebound_fuzz::{}", module_of(name))),
            "{} does not call the harness",
            path.display()
        );
    }
}

/// The harness module a target's function lives in.
fn module_of(name: &str) -> &str {
    match name {
        "quota_parse" => "quota::",
        "client_ip" | "forwarded" => "client_ip::",
        "gate_options" => "options::",
        "gate" => "gate::",
        "ratelimit_fields" => "fields::",
        "redis_reply" => "redis::",
        "shm_open" => "shm::",
        "outbound" => "outbound::",
        "loose_options" => "loose::",
        "traffic_file" => "traffic::",
        other => other,
    }
}
