//! Segment files and their records (docs/LOG.md, "Segments").
//!
//! A segment starts with a 16-byte header (`SIONSEG1`, then the u64 position of its first
//! record) and holds records back to back: u32 length, u32 CRC-32C of the length bytes and
//! the atom bytes, then the atom's canonical encoding.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use sion_verify::atom::limits::MAX_ATOM_BYTES;

pub(super) const MAGIC: &[u8; 8] = b"SIONSEG1";
pub(super) const HEADER_LEN: u64 = 16;
pub(super) const RECORD_HEADER_LEN: u64 = 8;

pub(super) fn segment_path(dir: &Path, first: u64) -> PathBuf {
    dir.join(format!("{first:020}.seg"))
}

pub(super) fn header(first: u64) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[..8].copy_from_slice(MAGIC);
    h[8..].copy_from_slice(&first.to_le_bytes());
    h
}

pub(super) use sion_disk::frame::{frame_checksum as checksum, put_frame as put_record};

/// What stands at a record's place in a segment.
#[derive(Debug)]
pub(super) enum Record {
    /// A whole record whose checksum holds.
    Good(Vec<u8>),
    /// The segment ends inside the record (or exactly where it would start: `End`).
    Torn,
    /// The length is impossible or the checksum fails.
    Bad(&'static str),
    End,
}

/// Read the record at `offset` of a segment.
pub(super) fn read_record_at(file: &File, offset: u64, segment_len: u64) -> io::Result<Record> {
    if offset == segment_len {
        return Ok(Record::End);
    }
    if offset + RECORD_HEADER_LEN > segment_len {
        return Ok(Record::Torn);
    }
    let mut head = [0u8; 8];
    file.read_exact_at(&mut head, offset)?;
    let (len, crc) = split_header(head);
    if len == 0 || len as usize > MAX_ATOM_BYTES {
        return Ok(Record::Bad("impossible record length"));
    }
    if offset + RECORD_HEADER_LEN + u64::from(len) > segment_len {
        return Ok(Record::Torn);
    }
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, offset + RECORD_HEADER_LEN)?;
    if checksum(len, &bytes) != crc {
        return Ok(Record::Bad("checksum mismatch"));
    }
    Ok(Record::Good(bytes))
}

fn split_header(head: [u8; 8]) -> (u32, u32) {
    let [a, b, c, d, e, f, g, h] = head;
    (u32::from_le_bytes([a, b, c, d]), u32::from_le_bytes([e, f, g, h]))
}

/// Sequential reading of one segment's records, for audits and replays.
pub(super) struct RecordReader<R> {
    inner: R,
    offset: u64,
    len: u64,
}

impl<R: Read> RecordReader<R> {
    /// `inner` is positioned just after the segment header.
    pub(super) fn new(inner: R, len: u64) -> Self {
        Self { inner, offset: HEADER_LEN, len }
    }

    pub(super) fn offset(&self) -> u64 {
        self.offset
    }

    pub(super) fn next_record(&mut self) -> io::Result<Record> {
        if self.offset == self.len {
            return Ok(Record::End);
        }
        if self.offset + RECORD_HEADER_LEN > self.len {
            return Ok(Record::Torn);
        }
        let mut head = [0u8; 8];
        self.inner.read_exact(&mut head)?;
        let (len, crc) = split_header(head);
        if len == 0 || len as usize > MAX_ATOM_BYTES {
            return Ok(Record::Bad("impossible record length"));
        }
        if self.offset + RECORD_HEADER_LEN + u64::from(len) > self.len {
            return Ok(Record::Torn);
        }
        let mut bytes = vec![0u8; len as usize];
        self.inner.read_exact(&mut bytes)?;
        self.offset += RECORD_HEADER_LEN + u64::from(len);
        if checksum(len, &bytes) != crc {
            return Ok(Record::Bad("checksum mismatch"));
        }
        Ok(Record::Good(bytes))
    }
}

impl<R> RecordReader<R> {
    pub(super) fn set_offset(&mut self, offset: u64) {
        self.offset = offset;
    }
}
