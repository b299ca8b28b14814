//! Reading files and directories, and `check`'s summary.

mod common;

use std::path::{Path, PathBuf};

use ratebound_server::check;
use ratebound_server::config::ConfigErrorKind;
use ratebound_server::model::Config;

/// A fresh directory under the system's temporary one.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ratebound-config-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

#[test]
fn a_directory_loads_every_yaml_file_sorted() {
    let dir = scratch("dir");
    write(&dir, "b.yaml", common::EXAMPLE1);
    write(&dir, "a.yml", common::EXAMPLE5);
    write(&dir, "notes.txt", "not yaml: [");
    write(&dir, ".editor.yaml", "broken: [");
    std::fs::create_dir(dir.join("sub")).unwrap();
    write(&dir.join("sub"), "c.yaml", "broken: [");
    let config = Config::load(&dir).unwrap();
    let names: Vec<&str> = config.domains.keys().map(String::as_str).collect();
    assert_eq!(names, ["internal", "mongo_cps"]);
    assert_eq!(config.domains["mongo_cps"].place.file, dir.join("b.yaml"));
    assert_eq!(
        (
            config.domains["mongo_cps"].place.line,
            config.domains["mongo_cps"].place.column
        ),
        (1, 9)
    );
    // What is passed over is listed, for `--check` to say.
    let summary = check(&dir).unwrap();
    assert_eq!(summary.files, [dir.join("a.yml"), dir.join("b.yaml")]);
    assert_eq!(
        summary.skipped,
        [
            dir.join(".editor.yaml"),
            dir.join("notes.txt"),
            dir.join("sub")
        ]
    );
    // One file alone.
    assert_eq!(Config::load(dir.join("a.yml")).unwrap().domains.len(), 1);
    // An error names the file it is in.
    write(
        &dir,
        "c.yaml",
        "domain: x\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: eon\n",
    );
    let e = Config::load(&dir).unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&format!("{}:5:13: ", dir.join("c.yaml").display())),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn two_files_with_one_domain_are_refused() {
    let dir = scratch("dup");
    write(&dir, "1.yaml", "domain: shared\n");
    write(&dir, "2.yaml", "# the same domain\ndomain: shared\n");
    let e = Config::load(&dir).unwrap_err();
    assert_eq!(e.kind, ConfigErrorKind::DuplicateDomain);
    assert_eq!(e.place.file, dir.join("2.yaml"));
    assert_eq!((e.place.line, e.place.column), (2, 9));
    let shown = e.to_string();
    assert!(
        shown.contains("'shared'") && shown.contains("1.yaml"),
        "{shown}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unreadable_paths_and_empty_directories_are_refused() {
    let dir = scratch("empty");
    let e = Config::load(&dir).unwrap_err();
    assert_eq!((e.kind, e.place.line), (ConfigErrorKind::Missing, 0));
    assert!(
        e.to_string().starts_with(&format!("{}: ", dir.display())),
        "{e}"
    );
    let e = Config::load(dir.join("absent.yaml")).unwrap_err();
    assert_eq!(e.kind, ConfigErrorKind::Io);
    assert!(e.to_string().contains("absent.yaml"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_counts_a_fixture_directory() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/configs/gateway");
    let summary = check(&dir).unwrap();
    assert_eq!(summary.domains, ["api", "edge"]);
    assert_eq!(
        (
            summary.descriptors,
            summary.rules,
            summary.limits,
            summary.unlimited
        ),
        (5, 5, 5, 1)
    );
    assert_eq!(
        summary.files,
        [dir.join("10-edge.yaml"), dir.join("20-api.yaml")]
    );
    assert!(summary.skipped.is_empty(), "{:?}", summary.skipped);
    assert_eq!(
        summary.to_string(),
        "2 domains (api, edge): 5 descriptors, 5 rules (1 unlimited), 5 limits"
    );
}
