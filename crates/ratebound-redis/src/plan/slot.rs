//! Redis Cluster hash slots: which node a key lives on, and which keys
//! may share one script run.

/// CRC16/XMODEM (polynomial 0x1021, initial 0), the hash of Redis
/// Cluster's key slots, one table lookup a byte.
const CRC16: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// The Redis Cluster hash slot of `key`: of the part between the first
/// `{` and the next `}` if that part is not empty (a hash tag), else of
/// the whole key.
pub fn hash_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    let mut crc = 0u16;
    for &b in hashed {
        crc = (crc << 8) ^ CRC16[usize::from(((crc >> 8) as u8) ^ b)];
    }
    crc % 16384
}
