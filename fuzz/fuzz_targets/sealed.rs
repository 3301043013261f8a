//! Sealed payloads, wrapped epoch seeds and key covers from bytes (docs/SEAL.md): decoding
//! arbitrary bytes never panics, and a sealed payload with any byte changed never opens to
//! anything but refusal.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sion_seal::{Cover, MemberKey, SealKind, Sealed, Wrapped, WrappedLeaf};
use sion_verify::atom::{AtomParts, BoxMm, Interval, Kind, Permille};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let space = [7u8; 32];
    let atom = AtomParts::new(
        Kind::Observation,
        "map",
        BoxMm { min_mm: [0; 3], max_mm: [1; 3] },
        Interval { from_ns: 0, to_ns: 1 },
        Permille(900),
    );
    let mut cover = Cover::new(1, [3; 32]);
    match mode % 3 {
        0 => {
            // Arbitrary bytes through every decoder, and what decodes through open / unwrap.
            if let Ok(s) = Sealed::decode(rest) {
                let _ = s.open(SealKind::Payload, &space, &cover, &atom);
            }
            if let Ok(w) = Wrapped::decode(rest) {
                let _ = w.unwrap_for(&MemberKey::from_seed([5; 32]));
            }
            if let Ok(w) = WrappedLeaf::decode(rest) {
                let _ = w.unwrap_for(&MemberKey::from_seed([5; 32]));
            }
            let _ = sion_seal::blob_parts(rest);
            let _ = sion_seal::inline_payload(rest);
            let _ = sion_seal::record::SpaceRecord::parse(&String::from_utf8_lossy(rest));
            let _ = sion_seal::record::ForgetRecord::parse(&String::from_utf8_lossy(rest));
            if let Ok(c) = Cover::decode(rest) {
                let _ = c.leaf_key(u32::from_le_bytes([rest.len() as u8, 0, 0, 0]));
            }
        }
        1 => {
            // A real sealed payload with one byte changed: refused, never a wrong plaintext.
            let Some((&at, plaintext)) = rest.split_first() else { return };
            let bytes = Sealed::seal(SealKind::Payload, &space, &cover, 9, &atom, plaintext).expect("seal");
            let mut changed = bytes.clone();
            let i = at as usize % changed.len();
            changed[i] ^= 1 | at;
            if let Ok(s) = Sealed::decode(&changed) {
                assert!(
                    s.open(SealKind::Payload, &space, &cover, &atom).is_err(),
                    "a changed byte {i} opened"
                );
            }
        }
        _ => {
            // Forgetting what the input says, then every leaf asked: kept ones derive as before.
            let whole = cover.clone();
            for pair in rest.chunks_exact(4) {
                let leaf = u32::from(u16::from_le_bytes([pair[0], pair[1]]));
                let len = u64::from(pair[2]) + 1;
                cover.forget(u64::from(leaf), u64::from(leaf) + len);
            }
            let again = Cover::decode(&cover.encode()).expect("a cover round-trips");
            for leaf in (0..70_000u32).step_by(997) {
                if let Ok(k) = again.leaf_key(leaf) {
                    assert_eq!(Ok(k), whole.leaf_key(leaf));
                }
            }
        }
    }
});
