//! Decoding and verifying proof files of every kind must never panic, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sion_verify::proof::ProofFile;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = ProofFile::decode(data) {
        let _ = file.verify(None);
        // What decodes re-encodes to the same bytes: the format has one encoding.
        assert_eq!(file.encode(), data);
    }
});
