//! The fuzz targets' logic: one plain function over bytes per target, each
//! asserting what must hold for every input (a panic is a finding). The
//! libFuzzer targets in `fuzz/fuzz_targets/` are one line each calling
//! these; `tests/replay.rs` feeds every committed corpus and regression file
//! to the same function on the stable toolchain, so a regression fails
//! `ci/test` without nightly.
//!
//! Structured targets read their input through [`Input`], a small reader
//! that never fails (past the end it reads zeros), so that every byte
//! string is a valid test case and libFuzzer's mutations stay meaningful.

pub mod client_ip;
pub mod fields;
pub mod gate;
pub mod loose;
pub mod options;
pub mod outbound;
pub mod quota;
pub mod redis;
pub mod shm;
pub mod traffic;

/// A target: its name (the libFuzzer target's and its corpus folder's) and
/// its function.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, in the order of `fuzz/README.md`.
pub const TARGETS: &[Target] = &[
    ("quota_parse", quota::quota_parse),
    ("client_ip", client_ip::client_ip),
    ("forwarded", client_ip::forwarded),
    ("gate_options", options::gate_options),
    ("gate", gate::gate),
    ("ratelimit_fields", fields::ratelimit_fields),
    ("redis_reply", redis::redis_reply),
    ("shm_open", shm::shm_open),
    ("outbound", outbound::outbound),
    ("loose_options", loose::loose_options),
    ("traffic_file", traffic::traffic_file),
];

/// A reader of fuzz input that never fails: past the end every number is 0
/// and every slice empty.
#[derive(Clone, Debug)]
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// Reads `data` from its start.
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }

    /// Whether everything was read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The next byte (0 past the end).
    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    /// A boolean from the next byte's low bit.
    pub fn bool(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    /// The next `N` bytes as a little-endian number (missing bytes are 0).
    fn le<const N: usize>(&mut self) -> [u8; 16] {
        let mut out = [0u8; 16];
        for b in out.iter_mut().take(N) {
            *b = self.byte();
        }
        out
    }

    /// The next two bytes, little-endian.
    pub fn u16(&mut self) -> u16 {
        let b = self.le::<2>();
        u16::from_le_bytes([b[0], b[1]])
    }

    /// The next four bytes, little-endian.
    pub fn u32(&mut self) -> u32 {
        let b = self.le::<4>();
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    /// The next eight bytes, little-endian.
    pub fn u64(&mut self) -> u64 {
        let b = self.le::<8>();
        u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    }

    /// The next sixteen bytes, little-endian.
    pub fn u128(&mut self) -> u128 {
        u128::from_le_bytes(self.le::<16>())
    }

    /// A number below `n` (0 for `n` = 0), from one byte when `n` ≤ 256.
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        if n <= 256 {
            usize::from(self.byte()) % n
        } else {
            (self.u64() % n as u64) as usize
        }
    }

    /// One of `choices` (the first past the end).
    pub fn pick<T: Copy>(&mut self, choices: &[T]) -> T {
        choices[self.below(choices.len())]
    }

    /// A number that is small more often than not: a byte picks the kind
    /// (tiny, a byte, 16 bits, 32 bits, 64 bits, near `u64::MAX`).
    pub fn number(&mut self) -> u64 {
        match self.byte() % 6 {
            0 => u64::from(self.byte() % 8),
            1 => u64::from(self.byte()),
            2 => u64::from(self.u16()),
            3 => u64::from(self.u32()),
            4 => self.u64(),
            _ => u64::MAX - u64::from(self.byte()),
        }
    }

    /// Up to `max` bytes: a length byte, then that many.
    pub fn bytes(&mut self, max: usize) -> &'a [u8] {
        let want = self.below(max.saturating_add(1));
        let n = want.min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head
    }

    /// Up to `max` bytes as text: the longest UTF-8 prefix of
    /// [`bytes`](Self::bytes).
    pub fn text(&mut self, max: usize) -> &'a str {
        let raw = self.bytes(max);
        match std::str::from_utf8(raw) {
            Ok(s) => s,
            Err(e) => std::str::from_utf8(&raw[..e.valid_up_to()]).unwrap_or(""),
        }
    }

    /// Everything not yet read.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }
}

#[cfg(test)]
mod tests {
    use super::Input;

    #[test]
    fn input_reads_zeros_past_the_end() {
        let mut i = Input::new(&[1, 2, 3]);
        assert_eq!(i.u16(), 0x0201);
        assert_eq!(i.u32(), 3);
        assert!(i.is_empty());
        assert_eq!(i.byte(), 0);
        assert_eq!(i.bytes(10), b"");
    }

    #[test]
    fn input_text_keeps_the_utf8_prefix() {
        // A length byte of 4, then "ab" and an invalid byte.
        let mut i = Input::new(&[4, b'a', b'b', 0xff, b'c']);
        assert_eq!(i.text(10), "ab");
        assert!(i.is_empty());
    }
}
