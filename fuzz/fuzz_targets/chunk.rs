//! A chunk whose header lies: any compression name, declared size and checksum over any bytes.
//! Unpacking must cap the declared size before allocating, grow its output only as bytes come,
//! and refuse (never panic or abort) what does not hold together.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcap::records::ChunkHeader;

fuzz_target!(|data: &[u8]| {
    if data.len() < 13 {
        return;
    }
    let compression = match data[0] % 4 {
        0 => "",
        1 => "zstd",
        2 => "lz4",
        _ => "brotli",
    };
    let mut size = [0u8; 8];
    size.copy_from_slice(&data[1..9]);
    let mut crc = [0u8; 4];
    crc.copy_from_slice(&data[9..13]);
    let body = &data[13..];
    let header = ChunkHeader {
        message_start_time: 0,
        message_end_time: 0,
        uncompressed_size: u64::from_le_bytes(size),
        uncompressed_crc: u32::from_le_bytes(crc),
        compression: compression.into(),
        compressed_size: body.len() as u64,
    };
    if let Ok(records) = sion_bag::chunk::unpack(&header, body) {
        assert!(header.uncompressed_size <= sion_bag::chunk::MAX_CHUNK);
        drop(records);
    }
    let _ = sion_bag::chunk::records(body);
});
