//! A chunk unpacked here rather than by the `mcap` crate, which sizes its output buffer from
//! the chunk's declared uncompressed size before decompressing: one flipped bit there asks for
//! exabytes and aborts the process. Here the declared size is bounded first, the output grows
//! only as the decompressor actually produces bytes, and the records inside are framed with
//! every length checked against what remains.

use std::io::Read;

use mcap::records::{ChunkHeader, Record};

/// The largest chunk unpacked (declared uncompressed size). rosbag2 writes chunks of about
/// 4 MiB by default; a chunk that says it is larger than this is damaged or hostile.
pub const MAX_CHUNK: u64 = 1 << 30;

/// Why a chunk cannot be read; the reader reports it with the chunk's offset.
pub type ChunkError = String;

/// MCAP's attachment opcode: files stored beside the messages, which replay does not read.
const ATTACHMENT: u8 = 0x09;

/// One record parsed by the `mcap` crate, except an attachment, which is passed over unread:
/// the crate slices an attachment's body before checking its length and panics on a short one
/// (found by the `chunk` fuzz target), and replay has no use for attachments.
pub fn parse_record(opcode: u8, body: &[u8]) -> Result<Record<'_>, mcap::McapError> {
    if opcode == ATTACHMENT {
        return Ok(Record::Unknown { opcode, data: std::borrow::Cow::Borrowed(body) });
    }
    mcap::read::parse_record(opcode, body)
}

/// The records of a chunk, in order, or why the chunk cannot be read. Nothing of a chunk is
/// handed out unless all of it unpacks and its checksum (when it has one) holds.
pub fn unpack(header: &ChunkHeader, data: &[u8]) -> Result<Vec<Record<'static>>, ChunkError> {
    let declared = header.uncompressed_size;
    if declared > MAX_CHUNK {
        return Err(format!(
            "it declares {declared} bytes uncompressed, more than any bag's chunk ({MAX_CHUNK})"
        ));
    }
    let bytes = decompress(&header.compression, data, declared)?;
    if bytes.len() as u64 != declared {
        return Err(format!("it unpacks to {} bytes, not the {declared} its header declares", bytes.len()));
    }
    // A zero checksum means none was written (MCAP's convention).
    if header.uncompressed_crc != 0 {
        let crc = crc32fast::hash(&bytes);
        if crc != header.uncompressed_crc {
            return Err(format!(
                "its checksum fails (the header says {:08x}, the bytes give {crc:08x})",
                header.uncompressed_crc
            ));
        }
    }
    records(&bytes)
}

/// Decompress at most `declared + 1` bytes (one more tells a chunk that unpacks to more than it
/// says): the output grows as bytes arrive, so a lying header costs nothing.
fn decompress(compression: &str, data: &[u8], declared: u64) -> Result<Vec<u8>, ChunkError> {
    let limit = declared + 1;
    let mut out = Vec::new();
    let read = match compression {
        "" => {
            out.extend_from_slice(&data[..data.len().min(limit as usize)]);
            Ok(out.len())
        }
        "zstd" => zstd::stream::read::Decoder::new(data)
            .map_err(|e| format!("its zstd stream cannot be read: {e}"))?
            .take(limit)
            .read_to_end(&mut out),
        "lz4" => lz4::Decoder::new(data)
            .map_err(|e| format!("its lz4 stream cannot be read: {e}"))?
            .take(limit)
            .read_to_end(&mut out),
        other => return Err(format!("its compression {other:?} is not one MCAP defines (zstd, lz4)")),
    };
    match read {
        Ok(_) => Ok(out),
        Err(e) => Err(format!("its {compression} stream is damaged after {} bytes: {e}", out.len())),
    }
}

/// Frame the records of an unpacked chunk (or of a summary section): opcode, u64 length,
/// body, each length checked.
pub fn records(bytes: &[u8]) -> Result<Vec<Record<'static>>, ChunkError> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let Some(head) = bytes.get(at..at + 9) else {
            return Err(format!("it ends in the middle of a record's header (at byte {at} of it)"));
        };
        let opcode = head[0];
        let mut length = [0u8; 8];
        length.copy_from_slice(&head[1..9]);
        let length = u64::from_le_bytes(length);
        let left = (bytes.len() - at - 9) as u64;
        if length > left {
            return Err(format!("a record at byte {at} of it claims {length} bytes, but only {left} remain"));
        }
        let body = &bytes[at + 9..at + 9 + length as usize];
        let record = parse_record(opcode, body)
            .map_err(|e| format!("the record at byte {at} of it does not parse: {e}"))?;
        out.push(record.into_owned());
        at += 9 + length as usize;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `chunk` fuzz target: an attachment record whose body is shorter than its
    /// header made the `mcap` crate slice out of bounds and panic.
    #[test]
    fn a_short_attachment_is_passed_over_not_a_panic() {
        // log_time, create_time, an empty name and media type, a data length, and no CRC.
        let mut body = vec![0u8; 16];
        body.extend_from_slice(&0u32.to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes());
        body.extend_from_slice(&0u64.to_le_bytes());
        let mut bytes = vec![ATTACHMENT];
        bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&body);
        let records = records(&bytes).expect("an attachment is passed over");
        assert!(matches!(records[..], [Record::Unknown { opcode: ATTACHMENT, .. }]));
    }
}
