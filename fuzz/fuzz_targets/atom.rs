//! Decoding atoms (binary and JSON) must never panic, and what decodes round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sion_verify::atom::Atom;

fuzz_target!(|data: &[u8]| {
    if let Ok(atom) = Atom::decode(data) {
        assert_eq!(atom.bytes(), data);
        let again = Atom::from_json(&atom.to_json_line(None)).expect("JSON of a valid atom parses");
        assert_eq!(again, atom);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Atom::from_json(text);
    }
});
