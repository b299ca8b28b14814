//! Keys as the tables store them: SipHash-2-4 with its 128-bit output
//! (Aumasson & Bernstein's reference `siphash.c` with `outlen == 16`), keyed
//! with 128 random bits, over a namespace byte followed by the key's bytes.
//! One pass gives both halves — half the work of two 64-bit passes of std's
//! hasher, with the same 128 bits of output.

use std::hash::{BuildHasher, RandomState};

/// A 128-bit keyed hash of a namespace byte and a key's bytes.
pub type Fingerprint = [u64; 2];

/// The secret SipHash key.
#[derive(Clone, Copy)]
pub struct Seed {
    k0: u64,
    k1: u64,
}

impl std::fmt::Debug for Seed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a secret: never printed.
        f.write_str("Seed(..)")
    }
}

impl Seed {
    /// 128 random bits, from std's randomly keyed hasher (which is seeded
    /// from the operating system's random source).
    pub fn random() -> Seed {
        let state = RandomState::new();
        Seed {
            k0: state.hash_one(0u8),
            k1: state.hash_one(1u8),
        }
    }

    /// A seed from its two 64-bit halves — for state shared between
    /// processes, which must all fingerprint keys alike (a shared-memory
    /// table stores its seed in its header).
    pub fn from_keys(k0: u64, k1: u64) -> Seed {
        Seed { k0, k1 }
    }

    /// The seed's two halves (a secret: store it where only the owner of
    /// the state can read it).
    pub fn keys(self) -> (u64, u64) {
        (self.k0, self.k1)
    }

    /// The fingerprint of `namespace` followed by `bytes`.
    #[inline]
    pub fn fingerprint(self, namespace: u8, bytes: &[u8]) -> Fingerprint {
        let mut s = Sip::new(self.k0, self.k1);
        // The message is `namespace` then `bytes`: its first 8-byte block
        // holds the namespace and up to 7 bytes of the key.
        let (head, rest) = bytes.split_at(bytes.len().min(7));
        let mut first = [0u8; 8];
        first[0] = namespace;
        first[1..=head.len()].copy_from_slice(head);
        let tail = if head.len() == 7 {
            s.compress(u64::from_le_bytes(first));
            let mut blocks = rest.chunks_exact(8);
            for block in &mut blocks {
                let mut b = [0u8; 8];
                b.copy_from_slice(block);
                s.compress(u64::from_le_bytes(b));
            }
            let mut last = [0u8; 8];
            last[..blocks.remainder().len()].copy_from_slice(blocks.remainder());
            u64::from_le_bytes(last)
        } else {
            u64::from_le_bytes(first)
        };
        // The message length mod 256 goes in the last block's top byte.
        let len = (bytes.len() as u64).wrapping_add(1);
        s.finish(tail | (len << 56))
    }
}

struct Sip {
    v: [u64; 4],
}

impl Sip {
    #[inline]
    fn new(k0: u64, k1: u64) -> Sip {
        Sip {
            v: [
                k0 ^ 0x736f_6d65_7073_6575,
                // The 128-bit variant's domain separation.
                k1 ^ 0x646f_7261_6e64_6f6d ^ 0xee,
                k0 ^ 0x6c79_6765_6e65_7261,
                k1 ^ 0x7465_6462_7974_6573,
            ],
        }
    }

    #[inline]
    fn round(&mut self) {
        let [v0, v1, v2, v3] = &mut self.v;
        *v0 = v0.wrapping_add(*v1);
        *v1 = v1.rotate_left(13) ^ *v0;
        *v0 = v0.rotate_left(32);
        *v2 = v2.wrapping_add(*v3);
        *v3 = v3.rotate_left(16) ^ *v2;
        *v0 = v0.wrapping_add(*v3);
        *v3 = v3.rotate_left(21) ^ *v0;
        *v2 = v2.wrapping_add(*v1);
        *v1 = v1.rotate_left(17) ^ *v2;
        *v2 = v2.rotate_left(32);
    }

    /// One message block, two rounds (the "2" of SipHash-2-4).
    #[inline]
    fn compress(&mut self, m: u64) {
        self.v[3] ^= m;
        self.round();
        self.round();
        self.v[0] ^= m;
    }

    /// The last block (tail bytes and length), then two outputs of four
    /// finalization rounds each.
    #[inline]
    fn finish(mut self, last: u64) -> Fingerprint {
        self.compress(last);
        self.v[2] ^= 0xee;
        for _ in 0..4 {
            self.round();
        }
        let lo = self.v.iter().fold(0, |acc, v| acc ^ v);
        self.v[1] ^= 0xdd;
        for _ in 0..4 {
            self.round();
        }
        let hi = self.v.iter().fold(0, |acc, v| acc ^ v);
        [lo, hi]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `vectors_sip128` of the SipHash reference implementation: key
    /// 00 01 .. 0f, message 00 01 .. (len - 1), for these lengths; each
    /// output's 16 bytes in order, read as one big-endian number.
    const VECTORS: [(usize, u128); 9] = [
        (1, 0xda87_c1d8_6b99_af44_3476_5911_9b22_fc45),
        (2, 0x8177_228d_a4a4_5dc7_fca3_8bde_f60a_ffe4),
        (7, 0xa1f1_ebbe_d8db_c153_c0b8_4aa6_1ff0_8239),
        (8, 0x3b62_a9ba_6258_f561_0f83_e264_f314_97b4),
        (9, 0x2644_9906_0ad9_baab_c47f_8b02_bb6d_71ed),
        (15, 0x5493_e999_33b0_a811_7e08_ec0f_97cf_c3d9),
        (16, 0x6ee2_a4ca_67b0_54bb_fd33_15bf_8523_0577),
        (17, 0x473d_06e8_738d_b898_54c0_66c4_7ae4_7740),
        (63, 0x5150_d177_2f50_834a_503e_069a_973f_bd7c),
    ];

    #[test]
    fn matches_the_reference_siphash_2_4_128_vectors() {
        let seed = Seed {
            k0: 0x0706_0504_0302_0100,
            k1: 0x0f0e_0d0c_0b0a_0908,
        };
        let message: Vec<u8> = (0..64).collect();
        for (len, want) in VECTORS {
            // The namespace byte is the message's first byte (here 0).
            let [lo, hi] = seed.fingerprint(message[0], &message[1..len]);
            let mut got = [0u8; 16];
            got[..8].copy_from_slice(&lo.to_le_bytes());
            got[8..].copy_from_slice(&hi.to_le_bytes());
            assert_eq!(got, want.to_be_bytes(), "message of {len} bytes");
        }
    }

    #[test]
    fn namespaces_and_seeds_separate_keys() {
        let seed = Seed::random();
        assert_ne!(seed.fingerprint(0, b"k"), seed.fingerprint(1, b"k"));
        assert_ne!(seed.fingerprint(0, b""), seed.fingerprint(0, b"\0"));
        assert_ne!(
            seed.fingerprint(0, b"k"),
            Seed::random().fingerprint(0, b"k")
        );
        assert_eq!(seed.fingerprint(0, b"k"), seed.fingerprint(0, b"k"));
    }
}
