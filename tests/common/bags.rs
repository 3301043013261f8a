//! Where a bag's chunks are, for tests that damage them.

/// The byte ranges of the bag's chunk records (MCAP opcode 0x06), up to its footer.
pub fn chunks(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 8;
    while at + 9 <= bytes.len() {
        let op = bytes[at];
        let len = u64::from_le_bytes(bytes[at + 1..at + 9].try_into().expect("8 bytes")) as usize;
        if op == 0x06 {
            out.push((at, at + 9 + len));
        }
        if op == 0x02 {
            break;
        }
        at += 9 + len;
    }
    out
}
