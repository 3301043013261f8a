//! JSON lines as `sion memory remember` reads them: any text must parse to a valid atom or be
//! refused with a reason, and an atom parsed prints to JSON that parses to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sion_verify::atom::Atom;

fuzz_target!(|text: &str| {
    for line in text.lines() {
        if let Ok(atom) = Atom::from_json(line) {
            let again = Atom::from_json(&atom.to_json_line(None)).expect("JSON of a valid atom parses");
            assert_eq!(again, atom);
            assert_eq!(Atom::decode(atom.bytes()).expect("its bytes decode"), atom);
        }
    }
});
