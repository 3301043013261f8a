//! The conformance suite (tests/conformance/manifest.json): every proof file gets the verdict
//! the manifest states, from the verifier crate alone — valid with exactly the stated answer,
//! or refused for the stated reason. `cargo run --example conformance` regenerates the files.

use std::path::Path;

use ed25519_dalek::VerifyingKey;
use serde_json::Value;
use sion_verify::proof::{self, Expect};

#[test]
fn every_case_gets_its_verdict() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).expect("manifest")).expect("JSON");
    let cases = manifest["cases"].as_array().expect("cases");
    assert!(cases.len() >= 30, "the suite has {} cases", cases.len());
    let (mut valid, mut invalid) = (0, 0);
    for case in cases {
        let file = case["file"].as_str().expect("file");
        let bytes = std::fs::read(dir.join(file)).expect("proof file");
        let mut key = [0u8; 32];
        hex::decode_to_slice(case["ledger_key"].as_str().expect("key"), &mut key).expect("hex key");
        let key = VerifyingKey::from_bytes(&key).expect("ed25519 key");
        let expect = Expect::from_json(&case["expect"]).expect("expectation");
        let got = proof::verify(&bytes, &key, &expect);
        match case["verdict"].as_str() {
            Some("valid") => {
                let v = got.unwrap_or_else(|e| panic!("{file}: refused ({e}), the manifest says valid"));
                assert_eq!(v.statement(), case["statement"].as_str().expect("statement"), "{file}");
                assert_eq!(v.head.size, case["head_size"].as_u64().expect("size"), "{file}");
                let positions = v.claim.positions();
                let stated: Vec<u64> =
                    case["atoms"].as_array().expect("atoms").iter().filter_map(Value::as_u64).collect();
                assert_eq!(positions, stated, "{file}");
                valid += 1;
            }
            Some("invalid") => {
                let e = match got {
                    Ok(v) => panic!("{file}: accepted ({}), the manifest says invalid", v.statement()),
                    Err(e) => e,
                };
                assert_eq!(e.code(), case["error"].as_str().expect("error"), "{file}: {e}");
                invalid += 1;
            }
            other => panic!("{file}: verdict {other:?}"),
        }
    }
    assert!(valid >= 10 && invalid >= 20, "{valid} valid and {invalid} invalid cases");
}
