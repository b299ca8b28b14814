//! Base64 with the standard alphabet, as gRPC's binary headers
//! (`grpc-status-details-bin`) carry it: written unpadded, read padded or
//! not (receivers must accept both). No dependency: ratebound-http writes
//! it, ratebound-client reads it.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// `data` in base64, standard alphabet, unpadded.
///
/// ```
/// assert_eq!(ratebound::http::base64::encode(b"fooba"), "Zm9vYmE");
/// ```
pub fn encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        // 2 characters for 1 byte, 3 for 2, 4 for 3.
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
        }
    }
    out
}

/// The bytes of base64 `text` (standard alphabet), padded or not; `None`
/// for anything else.
///
/// ```
/// use ratebound::http::base64::decode;
/// assert_eq!(decode(b"Zm9vYmE=").as_deref(), Some(&b"fooba"[..]));
/// assert_eq!(decode(b"Zm9vYmE").as_deref(), Some(&b"fooba"[..]));
/// assert_eq!(decode(b"-_8"), None);
/// ```
pub fn decode(text: &[u8]) -> Option<Vec<u8>> {
    let unpadded = text.strip_suffix(b"==").or_else(|| text.strip_suffix(b"="));
    let text = unpadded.unwrap_or(text);
    if text.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3 + 2);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in text {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_matches_the_rfc_4648_vectors_unpadded() {
        let cases = [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in cases {
            assert_eq!(encode(plain.as_bytes()), encoded, "{plain:?}");
        }
        assert_eq!(encode(&[0xff, 0xfe, 0xfd]), "//79");
    }

    #[test]
    fn decode_reads_the_rfc_4648_vectors_padded_or_not() {
        let cases = [
            ("", ""),
            ("Zg", "f"),
            ("Zg==", "f"),
            ("Zm8", "fo"),
            ("Zm8=", "fo"),
            ("Zm9v", "foo"),
            ("Zm9vYg", "foob"),
            ("Zm9vYmE=", "fooba"),
            ("Zm9vYmFy", "foobar"),
        ];
        for (encoded, plain) in cases {
            assert_eq!(
                decode(encoded.as_bytes()).as_deref(),
                Some(plain.as_bytes()),
                "{encoded:?}"
            );
        }
        assert_eq!(decode(b"//79").as_deref(), Some(&[0xff, 0xfe, 0xfd][..]));
        for bad in ["Z", "Zm9v!", "Zm 9v", "Zm9v===", "-_8"] {
            assert_eq!(decode(bad.as_bytes()), None, "{bad:?}");
        }
    }
}
