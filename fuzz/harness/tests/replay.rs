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

/// The other direction: every libFuzzer target, every `[[bin]]` of the fuzz
/// workspace and every corpus or regression folder names a target of
/// `TARGETS`. A target added under `fuzz_targets/` but not to `TARGETS`
/// would otherwise be fuzzed by `ci/fuzz` and never replayed here.
#[test]
fn every_libfuzzer_target_and_corpus_is_replayed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let known: Vec<&str> = ratebound_fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
    let stems = |dir: &str| -> Vec<String> {
        let entries = std::fs::read_dir(root.join(dir)).expect("a fuzz folder");
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_none_or(|x| x != "md"))
            .filter_map(|p| Some(p.file_stem()?.to_str()?.to_owned()))
            .collect();
        names.sort();
        names
    };
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("fuzz/Cargo.toml");
    let mut bins: Vec<String> = manifest
        .lines()
        .filter_map(|l| l.trim().strip_prefix("path = \"fuzz_targets/"))
        .filter_map(|l| l.strip_suffix(".rs\""))
        .map(str::to_owned)
        .collect();
    bins.sort();
    let targets = stems("fuzz_targets");
    assert!(!targets.is_empty(), "no file in fuzz/fuzz_targets");
    assert_eq!(
        bins, targets,
        "fuzz/Cargo.toml's [[bin]]s against fuzz_targets/*.rs"
    );
    for (folder, names) in [
        ("fuzz_targets", targets),
        ("corpus", stems("corpus")),
        ("regressions", stems("regressions")),
    ] {
        for name in names {
            assert!(
                known.contains(&name.as_str()),
                "fuzz/{folder}/{name} is not in ratebound_fuzz::TARGETS (fuzz/harness/src/lib.rs), so ci/test never replays it"
            );
        }
    }
}
