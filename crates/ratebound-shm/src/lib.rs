//! Cross-process rate limits on one host: ratebound's one-word limiter
//! state in a file-backed shared memory map.
//!
//! Every process that opens the same file — gunicorn or uWSGI workers, a
//! Node cluster, several Rust services — updates the same 64-bit words with
//! compare-exchange, which is as atomic across processes as across threads.
//! So the processes share one limit at the speed of an in-process check, and
//! there is no lock anywhere: a process killed at any instant leaves every
//! word a valid state (at worst, an admission it made stays counted).
//!
//! - [`SharedLimiter`]: one limit (token bucket, fixed window or sliding
//!   window counter) for all processes.
//! - [`SharedKeyedLimiter`]: one limit per key, in a table whose size is
//!   fixed when the file is made; a full table reuses only slots whose state
//!   is fresh again, else refuses the new key with
//!   [`ratebound::Error::TooManyKeys`].
//! - [`SystemClock`]: `CLOCK_MONOTONIC`, which is one clock for every
//!   process on a Linux host (the core's default clock reads the TSC with a
//!   per-process calibration, so it is not shared).
//!
//! # The file
//! A header of 16 words — magic, layout version, mode (single or keyed),
//! algorithm and its two parameters, clock, capacity, the secret seed that
//! fingerprints keys, the boot it was made in — then slots of four words:
//! `(fingerprint, state, pause end, pause shifts)` (layout version 2; a
//! token bucket's pause words let a pause move the reservations already
//! made, see [`ratebound::pause`]). It is created with mode 0600 under a temporary name and linked
//! into place whole, so no process ever sees a half-written header. Opening
//! checks the owner and mode, the magic, the version, every parameter and
//! the size: a mismatch is an [`Error`], never a silently different limit.
//! A path that is a symbolic link opens its target (whose owner and mode
//! are checked); a dangling one is an [`Error::Io`].
//!
//! Every block of the file is allocated when it is made (`fallocate`), so
//! a table too large for its filesystem — a small `/dev/shm` — is an
//! [`Error::Io`] (`shm_io`: "cannot allocate the table's N bytes: No space
//! left on device") and leaves no temporary file behind, rather than a
//! process killed by `SIGBUS` when it first touches a page the filesystem
//! has no room for. An existing file with unallocated blocks gets them on
//! open.
//!
//! What no check can catch: a process of the same user that truncates the
//! file while others have it mapped makes them die of `SIGBUS` at their
//! next decision on a word past the new end. Only the file's owner can do
//! that (mode 0600); never truncate or rewrite a table in use, and remove
//! one only when no process has it open.
//!
//! # Examples
//! ```
//! use ratebound::{KeyedAlgorithm, Quota};
//! use ratebound_shm::SharedLimiter;
//!
//! let dir = std::env::temp_dir().join(format!("rb-shm-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let path = dir.join("api.limit");
//! let algorithm = KeyedAlgorithm::TokenBucket(Quota::parse("10/s burst 2")?);
//! let a = SharedLimiter::open(&path, algorithm)?;
//! let b = SharedLimiter::open(&path, algorithm)?; // another process, in real life
//! assert!(a.check()?.is_allowed());
//! assert!(b.check()?.is_allowed());
//! assert!(!a.check()?.is_allowed()); // the two share one burst of 2
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod map;
#[cfg(all(test, ratebound_loom))]
mod model;
mod sync;

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ratebound::any::{Acquire, Fingerprinter, Key, Wait, Waiter};
use ratebound::fingerprint::Seed;
use ratebound::pause;
use ratebound::{Clock, Decision, KeyedAlgorithm, Permit, WordRule};

use map::Region;
use sync::{AtomicU64, Ordering};

/// `CLOCK_MONOTONIC` in nanoseconds: the same clock in every process on the
/// host (it counts from boot, so a file made before a reboot is refused).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> u64 {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        (t.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(t.tv_nsec as u64)
    }
}

/// Why a shared limiter could not be opened or used.
#[derive(Debug)]
pub enum Error {
    /// The file or its directory could not be created, opened or mapped.
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// The file holds a limiter with another parameter.
    Mismatch {
        /// The file.
        path: PathBuf,
        /// Which parameter.
        field: &'static str,
        /// The file's value.
        stored: u64,
        /// The value asked for.
        requested: u64,
    },
    /// Not a ratebound table, another layout version, or a damaged or
    /// truncated one.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The file belongs to another user, or others may read or write it.
    Permissions {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The file was made before the host's last boot: its times are of a
    /// clock that has since restarted.
    StaleBoot {
        /// The file.
        path: PathBuf,
    },
    /// A limiter error: a bad quota, `n` over the limit, a full table.
    Limit(ratebound::Error),
}

impl From<ratebound::Error> for Error {
    fn from(e: ratebound::Error) -> Error {
        Error::Limit(e)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io { path, source } => write!(f, "{}: {source}", path.display()),
            Error::Mismatch {
                path,
                field,
                stored,
                requested,
            } => write!(
                f,
                "{}: holds a limiter with {field} {stored}, not {requested} (remove the file to change the limit)",
                path.display()
            ),
            Error::Corrupt { path, reason } => {
                write!(
                    f,
                    "{}: not a usable ratebound table: {reason}",
                    path.display()
                )
            }
            Error::Permissions { path, reason } => write!(f, "{}: {reason}", path.display()),
            Error::StaleBoot { path } => write!(
                f,
                "{}: made before the host's last boot, its times are void; remove it",
                path.display()
            ),
            Error::Limit(e) => e.fmt(f),
        }
    }
}

impl Error {
    /// A stable, machine-readable identifier, the same in Rust, Python and
    /// Node: `shm_io`, `shm_mismatch`, `shm_corrupt`, `shm_permissions`,
    /// `shm_stale_boot`, or the core's code for [`Error::Limit`].
    pub fn code(&self) -> &'static str {
        match self {
            Error::Io { .. } => "shm_io",
            Error::Mismatch { .. } => "shm_mismatch",
            Error::Corrupt { .. } => "shm_corrupt",
            Error::Permissions { .. } => "shm_permissions",
            Error::StaleBoot { .. } => "shm_stale_boot",
            Error::Limit(e) => e.code(),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::Limit(e) => Some(e),
            _ => None,
        }
    }
}

// The header, in words.
const MAGIC: u64 = u64::from_le_bytes(*b"RBSHMTAB");
const VERSION: u64 = 2;
const HEADER: usize = 16;
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

const MODE_SINGLE: u64 = 1;
const MODE_KEYED: u64 = 2;
const CLOCK_MONOTONIC: u64 = 1;

/// The room for keys a keyed limiter gets when none is asked for (the
/// Python and Node constructors' default).
pub const DEFAULT_MAX_KEYS: u64 = 10_000;

/// A slot's fingerprint word when no key has claimed it.
const EMPTY: u64 = 0;
/// Set in a fingerprint word while a process reuses the slot for another
/// key: the other 63 bits are still the old key's, which owns the slot
/// until the reuse completes. Anyone may clear it (cancelling that reuse);
/// see `SharedKeyedLimiter::reclaim`. Fingerprints are 63 bits.
const RECLAIMING: u64 = 1 << 63;
/// How far from its home slot a key may live.
const WINDOW: usize = 64;

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

/// The mapped file: header and slots.
struct Table {
    region: Region,
    path: PathBuf,
    rule: WordRule,
    algorithm: KeyedAlgorithm,
    /// Slots (of [`SLOT_WORDS`] words) after the header.
    slots: usize,
    fingerprints: Fingerprinter,
}

impl Table {
    fn open(
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

    #[inline]
    fn words(&self) -> &[AtomicU64] {
        self.region.words()
    }

    #[inline]
    fn fingerprint(&self, i: usize) -> &AtomicU64 {
        &self.words()[HEADER + SLOT_WORDS * i]
    }

    #[inline]
    fn state(&self, i: usize) -> &AtomicU64 {
        &self.words()[HEADER + SLOT_WORDS * i + 1]
    }

    /// Slot `i`'s pause words: written by a pause, read by waiters when
    /// they wake (see [`ratebound::pause`]); checks never touch them.
    #[inline]
    fn pause(&self, i: usize) -> pause::Words<'_> {
        let w = &self.words()[HEADER + SLOT_WORDS * i + 2..HEADER + SLOT_WORDS * i + 4];
        pause::Words {
            end: &w[0],
            shifted: &w[1],
        }
    }
}

/// A slot's words: the key's fingerprint, its state, and a token bucket's
/// two pause words (the end of the latest pause, the sum of its shifts).
const SLOT_WORDS: usize = 4;

fn words_for(slots: usize) -> Option<usize> {
    slots.checked_mul(SLOT_WORDS)?.checked_add(HEADER)
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
            "layout version {}, this build reads version {VERSION}",
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

/// One limit shared by every process that opens the same file.
pub struct SharedLimiter {
    table: Table,
    clock: SystemClock,
    /// This handle's name on the permits it issues (see
    /// [`release`](Self::release)).
    id: u64,
}

/// A process-wide id for each shared limiter handle.
fn next_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    // Ordering: Relaxed — a fetch_add is unique whatever the ordering.
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Runs `waiter` to its end on this thread, sleeping what it says: `Ok`
/// once the tokens are the caller's.
fn drive(
    waiter: &mut Waiter,
    mut step: impl FnMut(&mut Waiter) -> Result<Wait, Error>,
) -> Result<(), Error> {
    loop {
        match step(waiter)? {
            Wait::Done => return Ok(()),
            Wait::Sleep(ns) => std::thread::sleep(Duration::from_nanos(ns)),
        }
    }
}

/// A wait in progress on tokio's timer: dropped before it is over (the
/// caller's future was dropped), it gives back what its waiter holds.
#[cfg(feature = "tokio")]
struct Pending<A: FnMut(&mut Waiter)> {
    waiter: Waiter,
    abandon: A,
    over: bool,
}

#[cfg(feature = "tokio")]
impl<A: FnMut(&mut Waiter)> Drop for Pending<A> {
    fn drop(&mut self) {
        if !self.over {
            (self.abandon)(&mut self.waiter);
        }
    }
}

/// The longest single sleep of an async wait (it steps again after it).
#[cfg(feature = "tokio")]
const ASYNC_MAX_SLEEP_NANOS: u64 = 3_600_000_000_000;

/// [`drive`] on tokio's timer, giving back what is held if dropped.
#[cfg(feature = "tokio")]
async fn drive_async<A: FnMut(&mut Waiter)>(
    mut pending: Pending<A>,
    mut step: impl FnMut(&mut Waiter) -> Result<Wait, Error>,
) -> Result<(), Error> {
    loop {
        match step(&mut pending.waiter) {
            Ok(Wait::Sleep(ns)) => tokio::time::sleep(Duration::from_nanos(ns)).await,
            done => {
                pending.over = true;
                return done.map(|_| ());
            }
        }
    }
}

/// Tokens taken ahead of time on the shared word by
/// [`reserve_n`](SharedLimiter::reserve_n): act after
/// [`delay`](Self::delay). Dropped or [`cancel`](Self::cancel)led, it gives
/// them back (as a Redis reservation does), as far as no later taker depends
/// on them; [`consume`](Self::consume) keeps them.
#[derive(Debug)]
#[must_use = "a reservation dropped at once gives its tokens back"]
pub struct SharedReservation<'a> {
    limiter: &'a SharedLimiter,
    /// Until consumed, cancelled or handed out.
    permit: Option<Permit>,
    wait: u64,
}

impl SharedReservation<'_> {
    /// How long to wait, from the moment of the reservation, before acting.
    pub fn delay(&self) -> Duration {
        Duration::from_nanos(self.wait)
    }

    /// Gives the tokens back, as far as no later taker depends on them.
    pub fn cancel(mut self) {
        self.give_back();
    }

    /// Keeps the tokens: the caller acts after [`delay`](Self::delay).
    pub fn consume(mut self) {
        self.permit = None;
    }

    /// The permit, for [`SharedLimiter::release`] later (a binding's
    /// reservation object keeps it); the reservation no longer gives it back.
    pub fn into_permit(mut self) -> Permit {
        // Made with one, and taken only by the methods that consume self.
        self.permit
            .take()
            .unwrap_or_else(|| unreachable!("a reservation's permit is taken once"))
    }

    fn give_back(&mut self) {
        if let Some(p) = self.permit.take() {
            // Our own permit: never foreign.
            let _ = self.limiter.release(p);
        }
    }
}

impl Drop for SharedReservation<'_> {
    fn drop(&mut self) {
        self.give_back();
    }
}

impl std::fmt::Debug for SharedLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLimiter")
            .field("path", &self.table.path)
            .field("rule", &self.table.rule)
            .finish()
    }
}

impl SharedLimiter {
    /// Opens the limiter at `path`, making the file (mode 0600) if there is
    /// none.
    ///
    /// # Errors
    /// [`Error::Mismatch`] when the file holds another algorithm or
    /// parameters; [`Error::Corrupt`], [`Error::Permissions`],
    /// [`Error::StaleBoot`], [`Error::Io`] (a missing directory, say);
    /// [`Error::Limit`] for a bad algorithm.
    pub fn open(path: impl AsRef<Path>, algorithm: KeyedAlgorithm) -> Result<SharedLimiter, Error> {
        Ok(SharedLimiter {
            table: Table::open(path.as_ref(), algorithm, MODE_SINGLE, 1)?,
            clock: SystemClock,
            id: next_id(),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.table.path
    }

    /// The most one check can take.
    pub fn limit(&self) -> u64 {
        self.table.rule.limit()
    }

    /// The algorithm and its parameters.
    pub fn algorithm(&self) -> KeyedAlgorithm {
        self.table.algorithm
    }

    /// Takes one now if there is one.
    ///
    /// # Errors
    /// None in practice (`n = 1` never exceeds a limit); the signature is
    /// that of [`check_n`](Self::check_n).
    pub fn check(&self) -> Result<Decision, Error> {
        self.check_n(1)
    }

    /// Takes `n` now if all `n` are there.
    ///
    /// # Errors
    /// [`Error::Limit`] with `InsufficientCapacity` when `n` exceeds the
    /// limit.
    pub fn check_n(&self, n: u64) -> Result<Decision, Error> {
        self.check_n_at(n, self.clock.now())
    }

    /// Takes `n` at `now` (ns of `CLOCK_MONOTONIC`).
    ///
    /// # Errors
    /// As [`check_n`](Self::check_n).
    pub fn check_n_at(&self, n: u64, now: u64) -> Result<Decision, Error> {
        Ok(self.table.rule.check_n_at(self.table.state(0), n, now)?.0)
    }

    /// The clock reading decisions are made at (ns of `CLOCK_MONOTONIC`).
    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    /// Takes `n` tokens of a token bucket now, possibly ahead of time, for
    /// every process: see [`reserve_n_at`](Self::reserve_n_at).
    ///
    /// # Errors
    /// As [`reserve_n_at`](Self::reserve_n_at).
    pub fn reserve_n(&self, n: u64, max_wait: Duration) -> Result<SharedReservation<'_>, Error> {
        self.reserve_n_at(n, max_wait, self.clock.now())
    }

    /// Takes `n` tokens at `now` on the shared word even if they are not
    /// there yet, as long as they will be within `max_wait`; every later
    /// caller, in any process, queues behind them (as
    /// [`TokenBucket::reserve_n_at`](ratebound::TokenBucket::reserve_n_at)).
    ///
    /// # Errors
    /// [`Error::Limit`] with `InsufficientCapacity` when `n` exceeds the
    /// burst, `DeadlineExceeded` (nothing taken) when the wait would be
    /// longer than `max_wait`, `Unsupported` for a window.
    pub fn reserve_n_at(
        &self,
        n: u64,
        max_wait: Duration,
        now: u64,
    ) -> Result<SharedReservation<'_>, Error> {
        let rule = &self.table.rule;
        let (wait, mark) = rule.reserve_n_at(self.table.state(0), n, nanos(max_wait), now)?;
        Ok(SharedReservation {
            limiter: self,
            permit: Some(rule.permit(n, mark, self.id)),
            wait,
        })
    }

    /// Gives back the tokens of a permit this handle issued (a
    /// reservation's, an abandoned waiter's), as far as no later taker
    /// depends on them.
    ///
    /// # Errors
    /// [`Error::Limit`] with `ForeignPermit` for another handle's permit:
    /// nothing is given back.
    pub fn release(&self, permit: Permit) -> Result<(), Error> {
        let t = &self.table;
        Ok(t.rule.release_permit_paused(
            t.state(0),
            t.pause(0),
            permit,
            self.id,
            self.clock.now(),
        )?)
    }

    /// Empties a token bucket for every process until `d` from now; see
    /// [`pause_at`](Self::pause_at).
    ///
    /// # Errors
    /// As [`pause_at`](Self::pause_at).
    pub fn pause(&self, d: Duration) -> Result<(), Error> {
        self.pause_at(d, self.clock.now())
    }

    /// Empties a token bucket for every process until `now + d`; it
    /// refills at the rate from then on. Reservations already made, by any
    /// process, move past the pause in their order, as in the Redis
    /// limiter (see [`ratebound::pause`] for the rule): a waiter
    /// ([`acquire_n`](Self::acquire_n), [`wait_step`](Self::wait_step))
    /// finds its move in the file when it wakes and sleeps on; a
    /// [`SharedReservation`] already handed out keeps its delay. A pause
    /// that ends no later than one already on changes nothing, so every
    /// process obeying one `Retry-After` pauses once.
    ///
    /// # Errors
    /// [`Error::Limit`] with `Unsupported` for a window.
    pub fn pause_at(&self, d: Duration, now: u64) -> Result<(), Error> {
        let t = &self.table;
        t.rule.pause_at(t.state(0), t.pause(0), nanos(d), now)?;
        Ok(())
    }

    /// A wait for `n` starting now, failing at once (taking nothing) if it
    /// cannot end within `timeout` seconds (`None`: no deadline), sleeping
    /// at most `host_max_sleep` ns at a time: the core's
    /// [`Waiter`], for a binding's event loop to drive with
    /// [`wait_step`](Self::wait_step).
    ///
    /// # Errors
    /// [`Error::Limit`] with `InvalidNumber` for a bad `timeout`.
    pub fn waiter(
        &self,
        n: u64,
        timeout: Option<f64>,
        host_max_sleep: u64,
    ) -> Result<Waiter, Error> {
        Ok(Waiter::new(n, timeout, self.clock.now(), host_max_sleep)?)
    }

    /// Advances `waiter` now: [`Wait::Done`] or how long to sleep. A token
    /// bucket reserves on the shared word at the first step (one order for
    /// every process); a window says to sleep its exact `retry_after` and
    /// decides again.
    ///
    /// # Errors
    /// [`Error::Limit`] with `DeadlineExceeded` at once, taking nothing,
    /// when the wait would end after the deadline; `InsufficientCapacity`
    /// when `n` exceeds the limit.
    pub fn wait_step(&self, waiter: &mut Waiter) -> Result<Wait, Error> {
        let (rule, word) = (&self.table.rule, self.table.state(0));
        // Read before the step reserves (see `Waiter::step_paused`).
        let shifted = self.table.pause(0).shifted();
        let now = self.clock.now();
        Ok(waiter.step_paused(now, shifted, |n, deadline| {
            rule.acquire_step(word, n, deadline, now, self.id)
                .map(|(step, _)| step)
        })?)
    }

    /// Ends `waiter` early (cancelled, timed out): the tokens it holds go
    /// back, as far as no later taker depends on them.
    ///
    /// # Errors
    /// [`Error::Limit`] with `ForeignPermit` for another handle's waiter.
    pub fn abandon(&self, waiter: &mut Waiter) -> Result<(), Error> {
        match waiter.abandon() {
            Some(permit) => self.release(permit),
            None => Ok(()),
        }
    }

    /// Waits on this thread until `n` tokens are the caller's, or fails at
    /// once, taking nothing, if that would take longer than `timeout`
    /// (`None`: as long as it takes). A token bucket reserves on the shared
    /// word and sleeps once; a window sleeps its exact `retry_after` and
    /// decides again.
    ///
    /// # Examples
    /// ```
    /// use ratebound::{KeyedAlgorithm, Quota};
    /// use ratebound_shm::SharedLimiter;
    /// use std::time::{Duration, Instant};
    ///
    /// let dir = std::env::temp_dir().join(format!("rb-shm-acq-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let algorithm = KeyedAlgorithm::TokenBucket(Quota::parse("20/s burst 1")?);
    /// let lim = SharedLimiter::open(dir.join("partner.limit"), algorithm)?;
    /// let start = Instant::now();
    /// lim.acquire_n(1, None)?; // the burst
    /// lim.acquire_n(1, Some(Duration::from_secs(1)))?; // 50 ms later
    /// assert!(start.elapsed() >= Duration::from_millis(50));
    /// // A wait beyond the timeout fails at once, taking nothing.
    /// assert!(lim.acquire_n(1, Some(Duration::from_millis(1))).is_err());
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`wait_step`](Self::wait_step).
    pub fn acquire_n(&self, n: u64, timeout: Option<Duration>) -> Result<(), Error> {
        let mut waiter = Waiter::start(n, timeout, self.clock.now(), u64::MAX);
        drive(&mut waiter, |w| self.wait_step(w))
    }

    /// [`acquire_n`](Self::acquire_n) without blocking the thread (feature
    /// `tokio`): the task sleeps on tokio's timer. Dropped before it is
    /// over, the future gives back the tokens it holds.
    ///
    /// # Errors
    /// As [`acquire_n`](Self::acquire_n).
    #[cfg(feature = "tokio")]
    pub async fn acquire(&self, n: u64, timeout: Option<Duration>) -> Result<(), Error> {
        let pending = Pending {
            waiter: Waiter::start(n, timeout, self.clock.now(), ASYNC_MAX_SLEEP_NANOS),
            abandon: |w: &mut Waiter| {
                let _ = self.abandon(w);
            },
            over: false,
        };
        drive_async(pending, |w| self.wait_step(w)).await
    }

    /// How many could be taken now.
    pub fn available(&self) -> u64 {
        let state = self.table.state(0).load(Ordering::Acquire);
        self.table.rule.available(state, self.clock.now())
    }
}

/// One limit per key, shared by every process that opens the same file; a
/// table of fixed size.
pub struct SharedKeyedLimiter {
    table: Table,
    clock: SystemClock,
}

impl std::fmt::Debug for SharedKeyedLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedKeyedLimiter")
            .field("path", &self.table.path)
            .field("slots", &self.table.slots)
            .finish()
    }
}

/// Where a key's state is: its slot and that slot's place in the key's
/// probe window.
#[derive(Clone, Copy)]
struct Found {
    slot: usize,
    place: usize,
}

impl SharedKeyedLimiter {
    /// Opens the keyed limiter at `path` with room for `max_keys` keys
    /// (the table has `2 × max_keys` slots, at least 64), making the file if
    /// there is none.
    ///
    /// # Errors
    /// As [`SharedLimiter::open`]; [`Error::Limit`] for `max_keys = 0`.
    pub fn open(
        path: impl AsRef<Path>,
        algorithm: KeyedAlgorithm,
        max_keys: u64,
    ) -> Result<SharedKeyedLimiter, Error> {
        if max_keys == 0 {
            return Err(Error::Limit(ratebound::Error::InvalidNumber {
                name: "max_keys",
                value: "0".to_string(),
                reason: "must be at least 1",
            }));
        }
        let slots = max_keys.saturating_mul(2).max(WINDOW as u64);
        Ok(SharedKeyedLimiter {
            table: Table::open(path.as_ref(), algorithm, MODE_KEYED, slots)?,
            clock: SystemClock,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.table.path
    }

    /// The most one check can take.
    pub fn limit(&self) -> u64 {
        self.table.rule.limit()
    }

    /// The algorithm and its parameters.
    pub fn algorithm(&self) -> KeyedAlgorithm {
        self.table.algorithm
    }

    /// Slots in the table.
    pub fn slots(&self) -> usize {
        self.table.slots
    }

    /// Slots held by a key (fresh or not).
    pub fn len(&self) -> usize {
        (0..self.table.slots)
            .filter(|&i| self.table.fingerprint(i).load(Ordering::Relaxed) != EMPTY)
            .count()
    }

    /// True if no key was ever seen.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn fingerprint_of(&self, key: Key<'_>) -> u64 {
        match self.table.fingerprints.key(key)[0] & !RECLAIMING {
            EMPTY => 1,
            fp => fp,
        }
    }

    #[inline]
    fn slot_at(&self, fp: u64, place: usize) -> usize {
        ((fp % self.table.slots as u64) as usize + place) % self.table.slots
    }

    fn window(&self) -> usize {
        WINDOW.min(self.table.slots)
    }

    /// The key's slot: the first in its window holding it, else the first
    /// empty one (claimed), else the first whose state is fresh (reused).
    fn locate(&self, fp: u64, now: u64) -> Result<Found, Error> {
        let t = &self.table;
        for place in 0..self.window() {
            let slot = self.slot_at(fp, place);
            // Ordering: Acquire — pairs with the Release of the exchange
            // that wrote this fingerprint (the key's claim, or a reuse),
            // after which that process's view of the slot is ours too.
            let held = t.fingerprint(slot).load(Ordering::Acquire);
            if held & !RECLAIMING == fp {
                if held == fp || self.cancel(slot, fp) {
                    return Ok(Found { slot, place });
                }
                // Reused for another key just now: go on.
                continue;
            }
            if held == EMPTY {
                // Ordering: AcqRel/Acquire — Release publishes the claim to
                // whoever next reads the fingerprint, Acquire as for the load.
                match t.fingerprint(slot).compare_exchange(
                    EMPTY,
                    fp,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Ok(Found { slot, place }),
                    Err(now_held) if now_held == fp => return Ok(Found { slot, place }),
                    // Another key took it: slots never become empty again,
                    // so go on.
                    Err(_) => continue,
                }
            }
        }
        // No empty slot left in the window: reuse the first fresh one. Its
        // old key, if a process is deciding for it right now, notices and
        // gives back (see `reclaim` and `check_n_at`).
        for place in 0..self.window() {
            let slot = self.slot_at(fp, place);
            // Ordering: Acquire, as above.
            let held = t.fingerprint(slot).load(Ordering::Acquire);
            if held & !RECLAIMING == fp {
                if held == fp || self.cancel(slot, fp) {
                    return Ok(Found { slot, place });
                }
                continue;
            }
            // Ordering: Acquire — a first look; `reclaim` decides on a
            // read-modify-write of the state.
            let state = t.state(slot).load(Ordering::Acquire);
            if held != EMPTY && t.rule.is_fresh(state, now) && self.reclaim(slot, held, fp, now) {
                return Ok(Found { slot, place });
            }
        }
        // The table holds one key per slot: that is its capacity, whatever
        // `max_keys` it was opened with (the slots are twice as many).
        Err(Error::Limit(ratebound::Error::TooManyKeys {
            max_keys: self.table.slots,
        }))
    }

    /// Clears the reclaiming bit of `slot` held by `fp`'s key: true if the
    /// slot is then surely `fp`'s (a reuse that had not completed fails).
    fn cancel(&self, slot: usize, fp: u64) -> bool {
        // Ordering: AcqRel/Acquire, as for a claim.
        match self.table.fingerprint(slot).compare_exchange(
            fp | RECLAIMING,
            fp,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => true,
            Err(now_held) => now_held == fp,
        }
    }

    /// Reuses `slot`, whose fingerprint word was `held` (another key, or a
    /// reuse of it that some process began), for `fp`'s key, if its state
    /// is fresh; true if it is now `fp`'s.
    ///
    /// Three steps: announce (set `RECLAIMING` on the old key's
    /// fingerprint), read the state by a read-modify-write and give up
    /// unless it is fresh, then swap the old key's fingerprint for `fp`.
    ///
    /// Invariant: an admission of the old key is never forgotten. A
    /// process deciding for it writes the state (the decision's exchange)
    /// and then reads the fingerprint (`still_home`). If that decision's
    /// write comes before our read-modify-write of the state, we read its
    /// (not fresh) state and give up. Otherwise our read-modify-write
    /// (Release) is read by the decision's exchange (Acquire): our
    /// announcement happens before its fingerprint read, which sees the
    /// bit or our key, and either cancels us or gives the admission back.
    /// (A plain load of the state would not do: two processes' store then
    /// load on two words may each miss the other's store.) A fresh state
    /// forgets nothing that matters: it decides as a new key's does. Any
    /// process may cancel an announcement, so one left by a killed process
    /// holds nothing: the old key's next check clears it, another reuse
    /// takes it over.
    fn reclaim(&self, slot: usize, held: u64, fp: u64, now: u64) -> bool {
        let t = &self.table;
        let word = t.fingerprint(slot);
        let owner = held & !RECLAIMING;
        // Ordering: AcqRel/Acquire — a read-modify-write (also when the bit
        // was already set): it is what the decision's exchange on the state
        // will have to come after, below.
        if word
            .compare_exchange(
                held,
                owner | RECLAIMING,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return false;
        }
        // Ordering: AcqRel — Release so that a decision whose exchange
        // reads this value (or a later one) sees our announcement; Acquire
        // so that we see every decision written before it.
        let state = t.state(slot).fetch_or(0, Ordering::AcqRel);
        if !t.rule.is_fresh(state, now) {
            self.cancel(slot, owner);
            return false;
        }
        // Ordering: AcqRel/Acquire, as for a claim.
        match word.compare_exchange(owner | RECLAIMING, fp, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            // Another process of the same key completed the same reuse.
            Err(now_held) => now_held == fp,
        }
    }

    /// True if `found` is still where the key lives: the slot still holds
    /// it (a reuse of it begun meanwhile is cancelled) and no slot before it
    /// in the window does.
    fn still_home(&self, fp: u64, found: Found) -> bool {
        let t = &self.table;
        // Ordering: Acquire — after the decision's exchange on the state
        // (see `reclaim`'s invariant for why that suffices).
        let held = t.fingerprint(found.slot).load(Ordering::Acquire);
        (held == fp || (held == fp | RECLAIMING && self.cancel(found.slot, fp)))
            && (0..found.place).all(|place| {
                // Ordering: Acquire, as above. A slot of this key earlier
                // in the window, even one being reused, is where it lives.
                t.fingerprint(self.slot_at(fp, place))
                    .load(Ordering::Acquire)
                    & !RECLAIMING
                    != fp
            })
    }

    /// Takes one for `key` now.
    ///
    /// # Errors
    /// As [`check_n_at`](Self::check_n_at).
    pub fn check(&self, key: Key<'_>) -> Result<Decision, Error> {
        self.check_n_at(key, 1, self.clock.now())
    }

    /// Takes `n` for `key` now.
    ///
    /// # Errors
    /// As [`check_n_at`](Self::check_n_at).
    pub fn check_n(&self, key: Key<'_>, n: u64) -> Result<Decision, Error> {
        self.check_n_at(key, n, self.clock.now())
    }

    /// Takes `n` for `key` at `now` (ns of `CLOCK_MONOTONIC`).
    ///
    /// A decision is made on the key's slot and then checked: if meanwhile
    /// the slot went to another key (it was fresh and reused) or the key
    /// turned up earlier in its window (two processes placed it at once),
    /// an admission is given back and the check is made again where the
    /// key lives. Never more than the limit; at worst, a process killed in
    /// between leaves an admission counted against a fresh key, and a new
    /// key that decides on a slot while another key's admission there is
    /// being given back is refused once.
    ///
    /// # Errors
    /// [`Error::Limit`] with `InsufficientCapacity` when `n` exceeds the
    /// limit, or `TooManyKeys` when the key has no slot (also when, eight
    /// times in a row, other processes took the slot it had decided on).
    pub fn check_n_at(&self, key: Key<'_>, n: u64, now: u64) -> Result<Decision, Error> {
        let fp = self.fingerprint_of(key);
        let t = &self.table;
        // Bounded: two keys contending for the last fresh slot could take
        // it from each other indefinitely (each gives back, then reuses it
        // again); a refusal for want of a slot ends that.
        for _ in 0..8 {
            let found = self.locate(fp, now)?;
            let (decision, mark) = t.rule.check_n_at(t.state(found.slot), n, now)?;
            if self.still_home(fp, found) {
                return Ok(decision);
            }
            if let Some(mark) = mark {
                t.rule.release(t.state(found.slot), mark, n);
            }
        }
        Err(Error::Limit(ratebound::Error::TooManyKeys {
            max_keys: t.slots,
        }))
    }

    /// The clock reading decisions are made at (ns of `CLOCK_MONOTONIC`).
    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    /// Empties `key`'s token bucket for every process until `d` from now;
    /// see [`pause_at`](Self::pause_at).
    ///
    /// # Errors
    /// As [`pause_at`](Self::pause_at).
    pub fn pause(&self, key: Key<'_>, d: Duration) -> Result<(), Error> {
        self.pause_at(key, d, self.clock.now())
    }

    /// Empties `key`'s token bucket for every process until `now + d`,
    /// refilling at the rate from then on (see
    /// [`SharedLimiter::pause_at`]); a key with no slot gets one.
    ///
    /// # Errors
    /// [`Error::Limit`] with `Unsupported` for a window, `TooManyKeys`
    /// when the key has no slot.
    pub fn pause_at(&self, key: Key<'_>, d: Duration, now: u64) -> Result<(), Error> {
        let t = &self.table;
        if !matches!(t.algorithm, KeyedAlgorithm::TokenBucket(_)) {
            // The rule's own error, without claiming a slot.
            let (end, shifted) = (AtomicU64::new(0), AtomicU64::new(0));
            let words = pause::Words {
                end: &end,
                shifted: &shifted,
            };
            return Ok(t.rule.pause_at(&end, words, 0, now).map(|_| ())?);
        }
        let fp = self.fingerprint_of(key);
        for _ in 0..8 {
            let found = self.locate(fp, now)?;
            t.rule
                .pause_at(t.state(found.slot), t.pause(found.slot), nanos(d), now)?;
            // A pause only adds debt: if the slot went to another key
            // meanwhile, that key is paused too (harmlessly late), and the
            // pause is made again where this key lives.
            if self.still_home(fp, found) {
                return Ok(());
            }
        }
        Err(Error::Limit(ratebound::Error::TooManyKeys {
            max_keys: t.slots,
        }))
    }

    /// A wait for `n` for any key starting now (see
    /// [`SharedLimiter::waiter`]), driven with [`wait_step`](Self::wait_step).
    ///
    /// # Errors
    /// [`Error::Limit`] with `InvalidNumber` for a bad `timeout`.
    pub fn waiter(
        &self,
        n: u64,
        timeout: Option<f64>,
        host_max_sleep: u64,
    ) -> Result<Waiter, Error> {
        Ok(Waiter::new(n, timeout, self.clock.now(), host_max_sleep)?)
    }

    /// Advances `waiter` for `key` now (see [`SharedLimiter::wait_step`]):
    /// a token bucket reserves in the key's slot (a reserved state is not
    /// fresh, so the slot stays the key's), a window sleeps its exact
    /// `retry_after` and decides again.
    ///
    /// # Errors
    /// As [`SharedLimiter::wait_step`]; `TooManyKeys` when the key has no
    /// slot.
    pub fn wait_step(&self, waiter: &mut Waiter, key: Key<'_>) -> Result<Wait, Error> {
        let fp = self.fingerprint_of(key);
        let now = self.clock.now();
        let t = &self.table;
        // As `check_n_at`: if the slot went to another key meanwhile, what
        // was taken there is given back and the step made again.
        for _ in 0..8 {
            let found = self.locate(fp, now)?;
            // Read before the step reserves (see `Waiter::step_at`).
            let shifted = t.pause(found.slot).shifted();
            let mut moved = false;
            let step = waiter.step_at(now, found.slot as u64, shifted, |n, deadline| {
                let (step, mark) =
                    t.rule
                        .acquire_step(t.state(found.slot), n, deadline, now, fp)?;
                if self.still_home(fp, found) {
                    return Ok(step);
                }
                if let Some(mark) = mark {
                    t.rule.release(t.state(found.slot), mark, n);
                }
                moved = true;
                // Nothing held: the waiter is as it was.
                Ok(Acquire::Retry { wait_nanos: 1 })
            })?;
            if !moved {
                return Ok(step);
            }
        }
        Err(Error::Limit(ratebound::Error::TooManyKeys {
            max_keys: t.slots,
        }))
    }

    /// Ends `key`'s `waiter` early: the tokens it holds go back to the
    /// key's slot, as far as no later taker depends on them (nothing if the
    /// key no longer has a slot).
    ///
    /// # Errors
    /// [`Error::Limit`] with `ForeignPermit` for a waiter of another key.
    pub fn abandon(&self, waiter: &mut Waiter, key: Key<'_>) -> Result<(), Error> {
        let Some(permit) = waiter.abandon() else {
            return Ok(());
        };
        let fp = self.fingerprint_of(key);
        let t = &self.table;
        for place in 0..self.window() {
            let slot = self.slot_at(fp, place);
            // Ordering: Acquire, as in `locate`.
            let held = t.fingerprint(slot).load(Ordering::Acquire);
            if held & !RECLAIMING == fp {
                return Ok(t.rule.release_permit_paused(
                    t.state(slot),
                    t.pause(slot),
                    permit,
                    fp,
                    self.clock.now(),
                )?);
            }
            if held == EMPTY {
                break;
            }
        }
        Ok(())
    }

    /// Waits on this thread until `n` are the caller's for `key`, or fails
    /// at once, taking nothing, if that would take longer than `timeout`
    /// (see [`SharedLimiter::acquire_n`]).
    ///
    /// # Errors
    /// As [`wait_step`](Self::wait_step).
    pub fn acquire_n(&self, key: Key<'_>, n: u64, timeout: Option<Duration>) -> Result<(), Error> {
        let mut waiter = Waiter::start(n, timeout, self.clock.now(), u64::MAX);
        drive(&mut waiter, |w| self.wait_step(w, key))
    }

    /// [`acquire_n`](Self::acquire_n) without blocking the thread (feature
    /// `tokio`). Dropped before it is over, the future gives back the
    /// tokens it holds.
    ///
    /// # Errors
    /// As [`acquire_n`](Self::acquire_n).
    #[cfg(feature = "tokio")]
    pub async fn acquire(
        &self,
        key: Key<'_>,
        n: u64,
        timeout: Option<Duration>,
    ) -> Result<(), Error> {
        let pending = Pending {
            waiter: Waiter::start(n, timeout, self.clock.now(), ASYNC_MAX_SLEEP_NANOS),
            abandon: |w: &mut Waiter| {
                let _ = self.abandon(w, key);
            },
            over: false,
        };
        drive_async(pending, |w| self.wait_step(w, key)).await
    }

    /// How many `key` could take now (the full limit if it has no slot).
    pub fn available(&self, key: Key<'_>) -> u64 {
        let fp = self.fingerprint_of(key);
        let t = &self.table;
        let now = self.clock.now();
        for place in 0..self.window() {
            let slot = self.slot_at(fp, place);
            // Ordering: Acquire, as in `locate`.
            let held = t.fingerprint(slot).load(Ordering::Acquire);
            if held & !RECLAIMING == fp {
                // Ordering: Acquire, as for a decision's first load.
                return t.rule.available(t.state(slot).load(Ordering::Acquire), now);
            }
            if held == EMPTY {
                break;
            }
        }
        t.rule.limit()
    }
}

/// The README's examples, compiled as doctests (`no_run`: they open files
/// under /dev/shm).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
