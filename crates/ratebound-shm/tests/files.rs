//! Every way a table's file can be wrong (another shape, corrupt, open to
//! others, a dangling link, a damaged word), a full table, and a table too
//! large for its tmpfs (in a child process: this test binary re-run).

mod common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{bucket, fixed_window};
use ratebound::KeyedAlgorithm;
use ratebound::any::Key;
use ratebound_shm::{Error, SharedKeyedLimiter, SharedLimiter};

/// A fresh directory for one test.
fn dir(name: &str) -> PathBuf {
    common::dir("shm", name)
}

/// True in the tmpfs test's child process (`RB_SHM_ROLE` set), once it has
/// done its part: the test must return.
fn worked() -> bool {
    if std::env::var_os("RB_SHM_ROLE").is_none() {
        return false;
    }
    let dir = std::env::var("RB_SHM_TMPFS").expect("RB_SHM_TMPFS for the child");
    tmpfs_child(Path::new(&dir));
    true
}

#[test]
fn a_full_table_reuses_only_fresh_slots() {
    let d = dir("full");
    let path = d.join("full.limit");
    let window = fixed_window(1, Duration::from_millis(100));
    // max_keys 1 still makes the smallest table: 64 slots.
    let l = SharedKeyedLimiter::open(&path, window, 1).expect("open");
    assert_eq!(l.slots(), 64);
    for k in 0..64 {
        assert!(l.check(Key::Int(k)).expect("room").is_allowed());
    }
    // Every slot holds a key whose window still counts: no room. The
    // error says how many keys the table holds: 64 (it said 32, half the
    // slots, whatever max_keys was asked for).
    match l.check(Key::Int(1000)) {
        Err(e @ Error::Limit(ratebound::Error::TooManyKeys { max_keys: 64 })) => {
            assert!(e.to_string().contains("maximum of 64 keys"), "{e}");
        }
        other => panic!("expected TooManyKeys with max_keys 64, got {other:?}"),
    }
    // Once their windows are over the slots are fresh and are reused.
    std::thread::sleep(Duration::from_millis(250));
    assert!(l.check(Key::Int(1000)).expect("a fresh slot").is_allowed());
    assert!(!l.check(Key::Int(1000)).expect("same window").is_allowed());
    assert_eq!(l.len(), 64);
}

fn expect_err(r: Result<impl std::fmt::Debug, Error>, what: &str) -> Error {
    match r {
        Ok(v) => panic!("{what}: opened {v:?}"),
        Err(e) => e,
    }
}

#[test]
fn wrong_files_are_clear_errors() {
    let d = dir("errors");
    let path = d.join("x.limit");
    SharedLimiter::open(&path, bucket("10/s burst 10")).expect("create");

    let e = expect_err(
        SharedLimiter::open(&path, bucket("10/s burst 20")),
        "other burst",
    );
    assert!(
        matches!(
            e,
            Error::Mismatch {
                field: "burst",
                stored: 10,
                requested: 20,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("burst 10, not 20"), "{e}");
    let e = expect_err(
        SharedLimiter::open(&path, fixed_window(10, Duration::from_secs(1))),
        "other algorithm",
    );
    assert!(
        matches!(e, Error::Mismatch { field, .. } if field.starts_with("algorithm")),
        "{e}"
    );
    let e = expect_err(
        SharedKeyedLimiter::open(&path, bucket("10/s burst 10"), 10),
        "keyed on single",
    );
    assert!(
        matches!(e, Error::Mismatch { field, .. } if field.starts_with("mode")),
        "{e}"
    );

    // Corrupt: the magic, the version, the size.
    let bytes = std::fs::read(&path).expect("read");
    let write = |b: &[u8]| {
        std::fs::write(&path, b).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    };
    let mut magic = bytes.clone();
    magic[..8].copy_from_slice(b"GARBAGE!");
    let mut version = bytes.clone();
    // Version 2, four-word slots without the learned word: refused, never
    // read with the new layout.
    version[8..16].copy_from_slice(&2u64.to_le_bytes());
    // (the file, what it is, what the error says, whether it is `Corrupt`)
    for (file, what, says, corrupt) in [
        (&magic[..], "bad magic", "magic", true),
        (
            &version[..],
            "version 2",
            "layout version 2, this build reads version 3",
            true,
        ),
        (&bytes[..bytes.len() - 8], "truncated", "truncated", true),
        (&bytes[..20], "header cut", "shorter than the header", false),
    ] {
        write(file);
        let e = expect_err(SharedLimiter::open(&path, bucket("10/s burst 10")), what);
        assert!(e.to_string().contains(says), "{what}: {e}");
        assert!(
            !corrupt || matches!(e, Error::Corrupt { .. }),
            "{what}: {e}"
        );
    }
    write(&bytes);
    SharedLimiter::open(&path, bucket("10/s burst 10")).expect("whole again");

    // Permissions: readable by others, then another owner.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let e = expect_err(
        SharedLimiter::open(&path, bucket("10/s burst 10")),
        "mode 644",
    );
    assert!(
        matches!(e, Error::Permissions { .. }) && e.to_string().contains("mode 644"),
        "{e}"
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    if rustix::process::geteuid().is_root() {
        std::os::unix::fs::chown(&path, Some(65534), None).expect("chown");
        let e = expect_err(
            SharedLimiter::open(&path, bucket("10/s burst 10")),
            "other owner",
        );
        assert!(e.to_string().contains("owned by uid 65534"), "{e}");
    }

    // A path in a directory that does not exist.
    let missing = d.join("no-such-dir").join("x.limit");
    let e = expect_err(SharedLimiter::open(&missing, bucket("10/s")), "missing dir");
    assert!(
        matches!(e, Error::Io { .. }) && e.to_string().contains("does not exist"),
        "{e}"
    );
    // Bad parameters are the core's errors.
    let e = expect_err(
        SharedKeyedLimiter::open(d.join("k"), bucket("10/s"), 0),
        "max_keys 0",
    );
    assert!(e.to_string().contains("max_keys"), "{e}");
    assert!(
        !Path::new(&d.join("k")).exists(),
        "nothing made for a bad call"
    );
}

#[test]
fn a_dangling_symlink_is_a_clear_error() {
    let d = dir("symlink");
    let link = d.join("x.limit");
    let target = d.join("missing").join("x.limit");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let e = expect_err(SharedLimiter::open(&link, bucket("10/s")), "dangling link");
    assert_eq!(e.code(), "shm_io", "{e}");
    assert!(
        matches!(&e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{e:?}"
    );
    let message = e.to_string();
    assert!(
        message.contains("a dangling symbolic link")
            && message.contains(&target.display().to_string())
            && message.starts_with(&link.display().to_string()),
        "{message}"
    );
    let e = expect_err(
        SharedKeyedLimiter::open(&link, bucket("10/s"), 10),
        "dangling link, keyed",
    );
    assert!(e.to_string().contains("a dangling symbolic link"), "{e}");
    // Nothing was made: only the link is in the directory.
    let names: Vec<_> = std::fs::read_dir(&d)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["x.limit"], "{names:?}");
    // A link to a table is followed, as before: both paths share a limit.
    let real = d.join("real.limit");
    let good = d.join("good.limit");
    std::os::unix::fs::symlink(&real, &good).expect("symlink");
    let a = SharedLimiter::open(&real, bucket("1/h burst 1")).expect("open the target");
    let b = SharedLimiter::open(&good, bucket("1/h burst 1")).expect("open through a link");
    assert!(a.check().expect("check").is_allowed());
    assert!(!b.check().expect("check").is_allowed());
}

#[test]
fn a_damaged_word_over_the_limit_leaves_nothing_available() {
    // A fixed window of 5 keeps its count in 3 bits: a damaged file can say
    // 7. The window (2^59 ns, 18 years) makes every reading window 0.
    let d = dir("damaged");
    let path = d.join("w.limit");
    let window = fixed_window(5, Duration::from_nanos(1 << 59));
    let l = SharedLimiter::open(&path, window).expect("create");
    assert_eq!(l.available(), 5);
    // The state word follows the 16 header words and the slot's fingerprint.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open to write");
    std::os::unix::fs::FileExt::write_all_at(&file, &7u64.to_le_bytes(), 17 * 8).expect("write");
    // It said 2^64 − 2 (5 − 7, wrapped).
    assert_eq!(l.available(), 0);
    let d = l.check().expect("check");
    assert!(!d.is_allowed());
    assert_eq!(d.remaining(), 0);
}

/// Mounts a tmpfs of `size` on `dir` for as long as it lives (we run as
/// root in CI); `None` with the reason when it cannot.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Result<Tmpfs, String> {
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if out.status.success() {
            Ok(Tmpfs(dir.to_path_buf()))
        } else {
            Err(format!(
                "mount -t tmpfs failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Files in `dir` whose names end in `.tmp`.
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

/// The error opening a table of `keys` keys at `path`; one that opens
/// anyway is used for every key (where a lazily backed file would die of
/// SIGBUS), then the test fails saying `what`.
fn open_refused(path: &Path, alg: KeyedAlgorithm, keys: u64, what: &str) -> Error {
    match SharedKeyedLimiter::open(path, alg, keys) {
        Ok(l) => {
            for k in 0..keys {
                let _ = l.check(Key::Int(k.into()));
            }
            panic!("{what}");
        }
        Err(e) => e,
    }
}

/// The tmpfs test's part in a child process (so that a `SIGBUS` is the
/// child's death, which the parent reports, not the test binary's).
fn tmpfs_child(dir: &Path) {
    let alg = bucket("10/s burst 10");
    // 200 000 slots of 64 bytes and the header: 12 800 128 bytes, on 1 MiB.
    let big = dir.join("big.limit");
    // Before the fix it opened (the file was sparse); its first thousands
    // of keys then killed the process with SIGBUS.
    let e = open_refused(
        &big,
        alg,
        100_000,
        "a 12 800 128-byte table opened on a 1 MiB tmpfs",
    );
    println!("too large: {e}");
    assert_eq!(e.code(), "shm_io", "{e}");
    let message = e.to_string();
    assert!(
        message.starts_with(&big.display().to_string()) && message.contains("12800128 bytes"),
        "{message}"
    );
    assert!(
        matches!(&e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::StorageFull),
        "{e:?}"
    );
    assert!(!big.exists(), "no table is left");
    assert_eq!(leftovers(dir), Vec::<String>::new());

    // A table whose file has lost its blocks (made sparse: by an older
    // build, by hand): its slots' pages are holes, which read as zeros —
    // empty slots — so the file is valid, but on a full filesystem the
    // first write to a hole raises SIGBUS.
    let sparse = dir.join("sparse.limit");
    let len = {
        // 10 000 slots of 64 bytes: 640 KB of the 1 MiB.
        let l = SharedKeyedLimiter::open(&sparse, alg, 5_000).expect("room for 640 KB");
        assert!(l.check(Key::Int(1)).expect("check").is_allowed());
        std::fs::metadata(&sparse).expect("meta").len()
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&sparse)
        .expect("open");
    rustix::fs::fallocate(
        &file,
        rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
        4096,
        len - 4096,
    )
    .expect("punch a hole");
    drop(file);
    let meta = std::fs::metadata(&sparse).expect("meta");
    assert!(
        std::os::unix::fs::MetadataExt::blocks(&meta) * 512 < len,
        "sparse now"
    );

    // A full tmpfs: even a one-slot table has no page left. Before the fix
    // the constructor died with SIGBUS writing the header, leaving its
    // temporary file.
    let mut filler = std::fs::File::create(dir.join("filler")).expect("filler");
    let chunk = vec![1u8; 64 << 10];
    loop {
        match filler.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("filling the tmpfs: {e}"),
        }
    }
    let small = dir.join("small.limit");
    let e = expect_err(SharedLimiter::open(&small, alg), "a full tmpfs");
    println!("full: {e}");
    assert_eq!(e.code(), "shm_io", "{e}");
    assert!(e.to_string().contains("cannot allocate"), "{e}");
    assert!(!small.exists(), "no table is left");
    assert_eq!(leftovers(dir), Vec::<String>::new());
    // The sparse table is given its blocks on open, which fails now.
    let e = open_refused(&sparse, alg, 5_000, "a sparse table opened on a full tmpfs");
    println!("sparse: {e}");
    assert_eq!(e.code(), "shm_io", "{e}");
    assert!(e.to_string().contains("cannot allocate"), "{e}");

    // With room again, the same calls make tables that work.
    drop(filler);
    std::fs::remove_file(dir.join("filler")).expect("remove filler");
    let l = SharedKeyedLimiter::open(&sparse, alg, 5_000).expect("room again");
    let meta = std::fs::metadata(&sparse).expect("meta");
    assert!(
        std::os::unix::fs::MetadataExt::blocks(&meta) * 512 >= len,
        "allocated on open"
    );
    for k in 2..1000 {
        assert!(l.check(Key::Int(k)).expect("check").is_allowed());
    }
    drop(l);
    std::fs::remove_file(&sparse).expect("remove");
    let l = SharedKeyedLimiter::open(&small, alg, 1000).expect("room again");
    for k in 0..500 {
        assert!(l.check(Key::Int(k)).expect("check").is_allowed());
    }
    println!("tmpfs-child-done");
}

#[test]
fn a_table_too_large_for_its_tmpfs_is_an_error_not_sigbus() {
    if worked() {
        return;
    }
    let d = dir("tmpfs");
    let _mounted = match Tmpfs::mount(&d, "1m") {
        Ok(m) => m,
        // Mounting needs root (or CAP_SYS_ADMIN). Where the runner must
        // have it (ci/test sets RATEBOUND_REQUIRE_TMPFS=1 when it runs as
        // root), a failed mount fails the test instead of passing it unseen.
        Err(reason) if std::env::var_os("RATEBOUND_REQUIRE_TMPFS").is_some() => {
            panic!("RATEBOUND_REQUIRE_TMPFS is set but no tmpfs could be mounted: {reason}")
        }
        Err(reason) => {
            eprintln!("skipped: this test needs a tmpfs of its own: {reason}");
            return;
        }
    };
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "a_table_too_large_for_its_tmpfs_is_an_error_not_sigbus",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RB_SHM_ROLE", "worker")
        .env("RB_SHM_TMPFS", &d)
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("tmpfs-child-done"),
        "the child failed ({}, signal {:?}; 7 is SIGBUS):\n{stdout}\n{stderr}",
        out.status,
        std::os::unix::process::ExitStatusExt::signal(&out.status)
    );
    assert_eq!(leftovers(&d), Vec::<String>::new());
}
