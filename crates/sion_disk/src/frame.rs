//! The checksummed frames that log segments, blob packs and the ledger journal are made of
//! (docs/LOG.md, "Records"): u32 length, u32 CRC-32C, bytes.

/// CRC-32C over a frame's length field and its bytes, so a torn or zeroed length is caught as
/// surely as a torn body.
pub fn frame_checksum(len: u32, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&len.to_le_bytes()), bytes)
}

/// Append a frame: u32 length, u32 checksum, bytes (docs/LOG.md, "Records").
pub fn put_frame(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = bytes.len() as u32;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&frame_checksum(len, bytes).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Split a buffer of back-to-back frames into the whole, checksummed ones; the second value is
/// the length of the prefix they cover (anything after it is torn or damaged).
pub fn whole_frames(buf: &[u8], max_len: usize) -> (Vec<&[u8]>, usize) {
    let mut frames = Vec::new();
    let mut at = 0usize;
    while let Some(head) = buf.get(at..at + 8) {
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        let Some(body) = buf.get(at + 8..at + 8 + len as usize) else { break };
        if len == 0 || len as usize > max_len || frame_checksum(len, body) != crc {
            break;
        }
        frames.push(body);
        at += 8 + len as usize;
    }
    (frames, at)
}
