//! A bag of any bytes: reading it (summary first, then record by record, going on past errors
//! as `sion replay --skip-bad` does) must never panic, abort or allocate what the file only
//! claims; a message handed out must lie inside the file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sion_bag::{BagReader, declarations};

fuzz_target!(|data: &[u8]| {
    let declared = declarations(&mut std::io::Cursor::new(data), data.len() as u64);
    let Ok(reader) = BagReader::new(data) else { return };
    let reader = reader.with_declarations(declared);
    // Each step consumes input or ends, so this bound is generous, not a limit on the reader.
    for event in reader.take(data.len() + 16) {
        if let Ok(sion_bag::Event::Message(m)) = event {
            assert!(m.data.len() as u64 <= sion_bag::chunk::MAX_CHUNK);
        }
    }
});
