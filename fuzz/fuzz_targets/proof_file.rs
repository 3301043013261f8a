//! Decoding and verifying proof files of every kind must never panic, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sion_verify::proof::ProofFile;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = ProofFile::decode(data) {
        let _ = file.verify(None);
        // What decodes re-encodes to the same bytes: the format has one encoding. A SIONPRF2 or
        // SIONPRF3 file whose body has no range query (kinds 1, 2, 4, 6: the same body under
        // any magic) is written back as the current version, SIONPRF4, and reads back the same.
        let again = file.encode();
        let older = data.starts_with(b"SIONPRF2") || data.starts_with(b"SIONPRF3");
        if older && again.starts_with(b"SIONPRF4") {
            assert_eq!(again[8..], data[8..]);
            assert_eq!(ProofFile::decode(&again).ok(), Some(file));
        } else {
            assert_eq!(again, data);
        }
    }
});
