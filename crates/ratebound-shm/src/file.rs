//! The file: its header words, and making, opening and checking it (every
//! block allocated, `fallocate`) into a [`Table`].

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

use ratebound::any::Fingerprinter;
use ratebound::fingerprint::Seed;
use ratebound::{Clock, KeyedAlgorithm, WordRule};

use crate::clock::SystemClock;
use crate::error::Error;
use crate::map::Region;
use crate::sync::Ordering;
use crate::table::{Table, words_for};

// The header, in words.
const MAGIC: u64 = u64::from_le_bytes(*b"RBSHMTAB");
/// The layout version: 3 since slots gained the learned word (eight words
/// a slot); a file of version 2 (four-word slots) or 1 is refused, never
/// read with another layout.
const VERSION: u64 = 3;
pub(crate) const HEADER: usize = 16;
const W_MAGIC: usize = 0;
const W_VERSION: usize = 1;
const W_MODE: usize = 2;
const W_ALGORITHM: usize = 3;
const W_A: usize = 4;
const W_B: usize = 5;
const W_CLOCK: usize = 6;
const W_CAPACITY: usize = 7;
const W_SEED0: usize = 8;
const W_SEED1: usize = 9;
const W_BOOT: usize = 10;

pub(crate) const MODE_SINGLE: u64 = 1;
pub(crate) const MODE_KEYED: u64 = 2;
const CLOCK_MONOTONIC: u64 = 1;

/// `(algorithm, a, b)` as the header stores them.
fn encode(algorithm: KeyedAlgorithm) -> (u64, u64, u64) {
    let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    match algorithm {
        KeyedAlgorithm::TokenBucket(q) => (1, q.emission_interval_nanos(), q.burst()),
        KeyedAlgorithm::FixedWindow { limit, window } => (2, limit, nanos(window)),
        KeyedAlgorithm::SlidingWindow { limit, window } => (3, limit, nanos(window)),
        // A future algorithm: refused by `WordRule::new` before this runs.
        _ => (0, 0, 0),
    }
}

/// This boot's identity (Linux), hashed; 0 where unknown.
fn boot_id() -> u64 {
    match std::fs::read("/proc/sys/kernel/random/boot_id") {
        Ok(bytes) => Seed::from_keys(0, 0).fingerprint(0, &bytes)[0] | 1,
        Err(_) => 0,
    }
}

impl Table {
    pub(crate) fn open(
        path: &Path,
        algorithm: KeyedAlgorithm,
        mode: u64,
        capacity: u64,
    ) -> Result<Table, Error> {
        let rule = WordRule::new(algorithm)?;
        let (alg, a, b) = encode(algorithm);
        let slots = usize::try_from(capacity).map_err(|_| {
            Error::Limit(ratebound::Error::InvalidNumber {
                name: "max_keys",
                value: capacity.to_string(),
                reason: "needs more slots than this machine can address",
            })
        })?;
        let expected: [(usize, &'static str, u64); 6] = [
            (W_MODE, "mode (1 single, 2 keyed)", mode),
            (
                W_ALGORITHM,
                "algorithm (1 token bucket, 2 fixed window, 3 sliding window)",
                alg,
            ),
            (W_A, if alg == 1 { "period (ns)" } else { "limit" }, a),
            (W_B, if alg == 1 { "burst" } else { "window (ns)" }, b),
            (W_CLOCK, "clock (1 CLOCK_MONOTONIC)", CLOCK_MONOTONIC),
            (W_CAPACITY, "capacity (slots)", capacity),
        ];
        let io_err = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        for _ in 0..8 {
            let file = match OpenOptions::new().read(true).write(true).open(path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    // A symbolic link is followed, as any path is (the
                    // owner and mode checked are its target's); one whose
                    // target is missing is not made: linking the new file
                    // into place would fail on the link itself, forever.
                    if let Ok(target) = std::fs::read_link(path) {
                        return Err(io_err(io::Error::new(
                            io::ErrorKind::NotFound,
                            format!(
                                "a dangling symbolic link: its target {} does not exist \
                                 (create the target or remove the link)",
                                target.display()
                            ),
                        )));
                    }
                    match create(path, &expected, slots) {
                        Ok(()) => continue,
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(io_err(e)),
            };
            return verify(path, &file, &expected, slots).map(|(region, seed)| Table {
                region,
                path: path.to_path_buf(),
                rule,
                algorithm,
                slots,
                fingerprints: Fingerprinter::with_seed(seed),
            });
        }
        Err(io_err(io::Error::other(
            "the file kept appearing and disappearing while being opened",
        )))
    }
}

/// Gives the first `bytes` of `file` their blocks (and the file that
/// length): a sparse file maps fine, but on a full filesystem (a small
/// tmpfs) the first write to a page with no block behind it raises
/// `SIGBUS`, which kills the process. `fallocate` reserves them or fails
/// with `ENOSPC` now, as an error. Where the filesystem cannot
/// (`EOPNOTSUPP`), a new file (`zero_fill`) is written with zeros, which
/// allocates as well; an existing one, whose words may be in use, is left
/// as it is.
fn allocate(file: &File, bytes: u64, zero_fill: bool) -> io::Result<()> {
    use rustix::io::Errno;
    loop {
        match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, bytes) {
            Ok(()) => return Ok(()),
            Err(Errno::INTR) => continue,
            Err(Errno::OPNOTSUPP | Errno::NOSYS) if zero_fill => break,
            Err(Errno::OPNOTSUPP | Errno::NOSYS) => return Ok(()),
            Err(e) => return Err(allocation_error(bytes, e.into())),
        }
    }
    use std::os::unix::fs::FileExt;
    let zeros = vec![0u8; 1 << 16];
    let mut at = 0;
    while at < bytes {
        let n = (bytes - at).min(zeros.len() as u64);
        file.write_all_at(&zeros[..n as usize], at)
            .map_err(|e| allocation_error(bytes, e))?;
        at += n;
    }
    Ok(())
}

/// The error of a failed allocation: the system's kind (`StorageFull` for
/// `ENOSPC`), with the size that did not fit.
fn allocation_error(bytes: u64, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("cannot allocate the table's {bytes} bytes: {e}"),
    )
}

/// Makes the file: written whole under a temporary name, mode 0600, then
/// linked into place (never over an existing file).
fn create(path: &Path, expected: &[(usize, &'static str, u64)], slots: usize) -> Result<(), Error> {
    let io_err = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(io_err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("directory {} does not exist", dir.display()),
        )));
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        SystemClock.now()
    ));
    let words = words_for(slots).ok_or_else(|| io_err(io::Error::other("table too large")))?;
    let result = (|| -> io::Result<()> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        allocate(&file, words as u64 * 8, true)?;
        let region = Region::map(&file, HEADER)?;
        let w = region.words();
        let (k0, k1) = Seed::random().keys();
        for &(i, _, v) in expected {
            w[i].store(v, Ordering::Relaxed);
        }
        w[W_SEED0].store(k0, Ordering::Relaxed);
        w[W_SEED1].store(k1, Ordering::Relaxed);
        w[W_BOOT].store(boot_id(), Ordering::Relaxed);
        w[W_VERSION].store(VERSION, Ordering::Relaxed);
        // The magic last: a header without it is not a table.
        w[W_MAGIC].store(MAGIC, Ordering::Release);
        drop(region);
        file.sync_all()?;
        std::fs::hard_link(&tmp, path)
    })();
    let _ = std::fs::remove_file(&tmp);
    match result {
        Ok(()) => Ok(()),
        // Another process made it first: open theirs.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io_err(e)),
    }
}

/// Checks an existing file and maps it.
fn verify(
    path: &Path,
    file: &File,
    expected: &[(usize, &'static str, u64)],
    slots: usize,
) -> Result<(Region, Seed), Error> {
    let p = || path.to_path_buf();
    let meta = file
        .metadata()
        .map_err(|source| Error::Io { path: p(), source })?;
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(Error::Permissions {
            path: p(),
            reason: format!(
                "owned by uid {}, not by this process's uid {me}",
                meta.uid()
            ),
        });
    }
    if meta.mode() & 0o077 != 0 {
        return Err(Error::Permissions {
            path: p(),
            reason: format!(
                "mode {:o} lets other users read or change the limits; it must be 600",
                meta.mode() & 0o777
            ),
        });
    }
    let corrupt = |reason: String| Error::Corrupt { path: p(), reason };
    if meta.len() < HEADER as u64 * 8 {
        return Err(corrupt(format!(
            "{} bytes, shorter than the header",
            meta.len()
        )));
    }
    let header = Region::map(file, HEADER).map_err(|source| Error::Io { path: p(), source })?;
    let h = header.words();
    let word = |i: usize| h[i].load(Ordering::Acquire);
    if word(W_MAGIC) != MAGIC {
        return Err(corrupt("no ratebound magic number".to_string()));
    }
    if word(W_VERSION) != VERSION {
        return Err(corrupt(format!(
            "layout version {}, this build reads version {VERSION} (a table made by \
             another version of ratebound-shm: remove the file once no process has it open, \
             and it is made again)",
            word(W_VERSION)
        )));
    }
    for &(i, field, requested) in expected {
        if word(i) != requested {
            return Err(Error::Mismatch {
                path: p(),
                field,
                stored: word(i),
                requested,
            });
        }
    }
    if word(W_BOOT) != boot_id() {
        return Err(Error::StaleBoot { path: p() });
    }
    let seed = Seed::from_keys(word(W_SEED0), word(W_SEED1));
    drop(header);
    let words = words_for(slots).ok_or_else(|| corrupt("capacity too large".to_string()))?;
    if meta.len() != words as u64 * 8 {
        return Err(corrupt(format!(
            "{} bytes where its capacity needs {} (truncated or damaged)",
            meta.len(),
            words * 8
        )));
    }
    // Fewer blocks than bytes (a file made sparse, by an older build or by
    // hand): allocate them now, or fail now, rather than fault later.
    // Allocating changes no word, so processes using the file are unaware.
    if meta.blocks().saturating_mul(512) < meta.len() {
        allocate(file, meta.len(), false).map_err(|source| Error::Io { path: p(), source })?;
    }
    let region = Region::map(file, words).map_err(|source| Error::Io { path: p(), source })?;
    Ok((region, seed))
}
