//! The only `unsafe` in this crate: a file mapped into memory, seen as a
//! slice of `AtomicU64`.
//!
//! Why it is sound:
//! - The mapping is shared (`MAP_SHARED`), readable and writable, page
//!   aligned and a whole number of 8-byte words long (checked), so every
//!   `AtomicU64` in the slice is aligned and in bounds; `AtomicU64` has the
//!   size and alignment of `u64`.
//! - Rust never reads or writes the bytes except through those atomics, in
//!   this process or (by the same code) in any other that maps the file, so
//!   there are no data races: concurrent atomic operations on the same word
//!   from several processes are what the hardware makes atomic.
//! - The slice borrows the [`Region`], which owns the mapping: it cannot
//!   outlive it.
//! - Every page has its blocks: the file is made with `fallocate`, and an
//!   existing file with fewer blocks than bytes is allocated on open
//!   (`allocate` in file.rs), so that touching a page never needs space
//!   the filesystem no longer has — on a full tmpfs, a sparse file's first
//!   write to a page raises `SIGBUS`.
//! - Left to the operating system: another process truncating the file
//!   would make the pages beyond its end fault (`SIGBUS`). The file is the
//!   owner's alone (mode 0600, checked on open), and ratebound never
//!   shrinks one; the size is checked on open, which is all that can be
//!   checked without a system call on every decision.
//!
//! Under `--cfg ratebound_loom` a region is loom's atomics on the heap
//! instead (no `unsafe`, no file): the model checks in src/model.rs build
//! tables with [`Region::heap`].

use std::fs::File;
use std::io;
#[cfg(not(ratebound_loom))]
use std::ptr::NonNull;

use crate::sync::AtomicU64;

/// A file's contents mapped shared, as words.
#[cfg(not(ratebound_loom))]
pub(crate) struct Region {
    /// Keeps the words alive; never touched otherwise.
    _owner: Owner,
    words: NonNull<AtomicU64>,
    len: usize,
}

/// What a [`Region`]'s words live in.
#[cfg(not(ratebound_loom))]
enum Owner {
    Map(#[allow(dead_code)] memmap2::MmapMut),
    /// Words on the heap, for tests that cannot map a file (Miri): the same
    /// pointer and slice code runs over them.
    #[cfg(test)]
    Heap(#[allow(dead_code)] Vec<AtomicU64>),
}

// SAFETY: the region is only ever accessed through `&AtomicU64`, which is
// `Send` and `Sync`; the pointer stays valid while `_map` lives.
#[cfg(not(ratebound_loom))]
#[allow(unsafe_code)]
unsafe impl Send for Region {}
// SAFETY: as for `Send`.
#[cfg(not(ratebound_loom))]
#[allow(unsafe_code)]
unsafe impl Sync for Region {}

#[cfg(not(ratebound_loom))]
impl Region {
    /// Maps the first `words` 8-byte words of `file` (which must be at least
    /// that long) shared, read-write.
    pub(crate) fn map(file: &File, words: usize) -> io::Result<Region> {
        let bytes = words
            .checked_mul(8)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "region too large"))?;
        if file.metadata()?.len() < bytes as u64 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "file shorter than its table",
            ));
        }
        // SAFETY: the file is at least `bytes` long (checked just above) and
        // is mapped shared; its contents are only accessed as atomics (see
        // the module comment). Truncation by another process is excluded by
        // the file's permissions, as documented.
        #[allow(unsafe_code)]
        let mut map = unsafe { memmap2::MmapOptions::new().len(bytes).map_mut(file)? };
        let ptr = NonNull::new(map.as_mut_ptr().cast::<AtomicU64>())
            .ok_or_else(|| io::Error::other("mmap returned a null pointer"))?;
        if !ptr.as_ptr().is_aligned() {
            return Err(io::Error::other("mapping not 8-byte aligned"));
        }
        Ok(Region {
            _owner: Owner::Map(map),
            words: ptr,
            len: words,
        })
    }

    /// `words` words on the heap, all 0 (a fresh file's contents), seen
    /// through the same pointer as a mapping (for tests under Miri, which
    /// cannot map files).
    #[cfg(test)]
    pub(crate) fn heap(words: usize) -> Region {
        // A Vec (not a Box, which a move would retag): the pointer taken
        // from it stays valid when it moves into the region.
        let mut owner: Vec<AtomicU64> = (0..words.max(1)).map(|_| AtomicU64::new(0)).collect();
        let ptr = NonNull::new(owner.as_mut_ptr()).unwrap_or(NonNull::dangling());
        Region {
            _owner: Owner::Heap(owner),
            words: ptr,
            len: words,
        }
    }

    /// The mapped words.
    pub(crate) fn words(&self) -> &[AtomicU64] {
        // SAFETY: `words` points at `len` aligned, initialized (file-backed,
        // or a boxed slice's) 8-byte words that live as long as
        // `self._owner`, which `self` owns; shared access through atomics
        // only (module comment).
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.words.as_ptr(), self.len)
        }
    }
}

/// Under loom: the words on the heap, as loom's atomics.
#[cfg(ratebound_loom)]
pub(crate) struct Region {
    words: Box<[AtomicU64]>,
}

#[cfg(ratebound_loom)]
impl Region {
    /// No file is mapped under loom (its atomics cannot live in one).
    pub(crate) fn map(_file: &File, _words: usize) -> io::Result<Region> {
        Err(io::Error::other(
            "no memory map under --cfg ratebound_loom: the models use Region::heap",
        ))
    }

    /// `words` words, all 0 (a fresh file's contents).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn heap(words: usize) -> Region {
        Region {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The words.
    pub(crate) fn words(&self) -> &[AtomicU64] {
        &self.words
    }
}
