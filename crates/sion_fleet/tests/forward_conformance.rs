//! tests/conformance/fleet/forward.json, checked: each valid case's signed bytes are what
//! docs/FLEET-LEDGER.md says (computed here from the spec's words, and by `forward_message`),
//! its signature is the seed's and holds; each refused case is refused.

use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use serde_json::Value;
use sion_fleet::relay::{check_forward_signature, forward_message};

fn vectors() -> Vec<Value> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance/fleet/forward.json");
    let text = std::fs::read_to_string(&path).expect("tests/conformance/fleet/forward.json");
    let v: Value = serde_json::from_str(&text).expect("JSON");
    v["cases"].as_array().expect("cases").clone()
}

fn bytes(v: &Value) -> Vec<u8> {
    hex::decode(v.as_str().expect("a hex string")).expect("hex")
}

/// The signed bytes, written from the spec's sentence rather than from our code.
fn spec_message(time_ns: u64, receiver: &str, txs: &[Vec<u8>]) -> Vec<u8> {
    let mut all = Vec::new();
    for tx in txs {
        all.extend_from_slice(&u32::try_from(tx.len()).expect("small").to_le_bytes());
        all.extend_from_slice(tx);
    }
    let mut m = b"sion-fleet-forward-v1".to_vec();
    m.extend_from_slice(&time_ns.to_le_bytes());
    m.extend_from_slice(blake3::hash(receiver.as_bytes()).as_bytes());
    m.extend_from_slice(blake3::hash(&all).as_bytes());
    m
}

#[test]
fn every_forward_vector_is_taken_or_refused_as_it_says() {
    let cases = vectors();
    assert!(cases.len() >= 10, "the vectors are all there");
    let (mut taken, mut refused) = (0, 0);
    for c in &cases {
        let name = c["name"].as_str().expect("name");
        let seed: [u8; 32] = bytes(&c["seed"]).try_into().expect("a 32-byte seed");
        let signer = SigningKey::from_bytes(&seed);
        let key_bytes: [u8; 32] = bytes(&c["key"]).try_into().expect("a 32-byte key");
        assert_eq!(signer.verifying_key().as_bytes(), &key_bytes, "{name}: the key is the seed's");
        let key = VerifyingKey::from_bytes(&key_bytes).expect("a key");
        let time_ns = c["time_ns"].as_u64().expect("time_ns");
        let receiver = c["receiver"].as_str().expect("receiver");
        let txs: Vec<Vec<u8>> = c["txs"].as_array().expect("txs").iter().map(bytes).collect();
        let signature = bytes(&c["signature"]);
        let verdict = check_forward_signature(&key, time_ns, receiver, &txs, &signature);
        if c["valid"].as_bool().expect("valid") {
            let message = bytes(&c["message"]);
            assert_eq!(message.len(), 93, "{name}");
            assert_eq!(spec_message(time_ns, receiver, &txs), message, "{name}: the spec's bytes");
            assert_eq!(forward_message(time_ns, receiver, &txs), message, "{name}: ours");
            assert_eq!(signer.sign(&message).to_bytes().to_vec(), signature, "{name}: signed by the seed");
            assert_eq!(verdict, Ok(()), "{name}");
            taken += 1;
        } else {
            assert!(verdict.is_err(), "{name}: taken, but {}", c["why"]);
            refused += 1;
        }
    }
    assert!(taken >= 3 && refused >= 7, "{taken} taken, {refused} refused");
}
