//! tests/conformance/belief (made by examples/belief_vectors.rs): every bundle gets the verdict
//! its manifest states — the beliefs, or the refusal — from the verifier crate alone.

use std::path::Path;

use serde_json::Value;
use sion_verify::belief::{Policy, bundle};

#[test]
fn every_bundle_gets_its_verdict() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/belief");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).expect("manifest")).expect("JSON");
    let cases = manifest["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 6);
    for case in cases {
        let file = case["file"].as_str().expect("file");
        let bytes = std::fs::read(dir.join(file)).expect("bundle");
        let mut key = [0u8; 32];
        hex::decode_to_slice(case["ledger_key"].as_str().expect("key"), &mut key).expect("hex");
        let key = ed25519_dalek::VerifyingKey::from_bytes(&key).expect("key");
        let targets: Vec<_> = case["targets"]
            .as_array()
            .expect("targets")
            .iter()
            .map(|t| t.as_str().expect("id").parse().expect("atom id"))
            .collect();
        let policy: Policy = serde_json::from_value(case["policy"].clone()).expect("policy");
        let got = bundle::check(&bytes, &key, &targets, &policy, case["as_of"].as_u64());
        match (&case["verdict"]["states"], case["verdict"]["refused"].as_str()) {
            (Value::Array(states), None) => {
                let checked =
                    got.unwrap_or_else(|e| panic!("{file}: refused ({e}), the manifest says valid"));
                let found: Vec<&str> = checked.beliefs.iter().map(|b| b.state.as_str()).collect();
                let expected: Vec<&str> = states.iter().map(|s| s.as_str().expect("state")).collect();
                assert_eq!(found, expected, "{file} under {:?}", policy.prefer);
            }
            (_, Some("stale")) => {
                assert!(matches!(got, Err(bundle::BundleError::Stale { .. })), "{file}: {got:?}")
            }
            (_, Some("missing links")) => {
                assert!(matches!(got, Err(bundle::BundleError::MissingLinks { .. })), "{file}: {got:?}")
            }
            (_, Some("no log")) => {
                assert!(matches!(got, Err(bundle::BundleError::NoLog(_))), "{file}: {got:?}")
            }
            other => panic!("{file}: unknown verdict {other:?}"),
        }
    }
}
