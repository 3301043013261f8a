//! tests/conformance/fleet/forward.json, checked: each valid case's signed bytes are what
//! docs/FLEET-LEDGER.md says (computed here from the spec's words, and by `forward_message`),
//! its signature is the seed's and holds; each refused case is refused, and the two that only a
//! strict verifier refuses (an `R` or a key of small order) are taken by RFC 8032's equation
//! alone (`verify`), so they do test strictness.

use ed25519_dalek::{Signer as _, SigningKey, Verifier as _, VerifyingKey};
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
    let (mut taken, mut refused, mut strictness) = (0, 0, 0);
    for c in &cases {
        let name = c["name"].as_str().expect("name");
        let key_bytes: [u8; 32] = bytes(&c["key"]).try_into().expect("a 32-byte key");
        let seed = (!c["seed"].is_null())
            .then(|| -> [u8; 32] { bytes(&c["seed"]).try_into().expect("a 32-byte seed") });
        if let Some(seed) = seed {
            assert_eq!(
                SigningKey::from_bytes(&seed).verifying_key().as_bytes(),
                &key_bytes,
                "{name}: the key is the seed's"
            );
        }
        let key = VerifyingKey::from_bytes(&key_bytes).expect("a point");
        let time_ns: u64 = c["time_ns"].as_str().expect("time_ns, a string").parse().expect("a u64");
        let receiver = c["receiver"].as_str().expect("receiver");
        let txs: Vec<Vec<u8>> = c["txs"].as_array().expect("txs").iter().map(bytes).collect();
        let signature = bytes(&c["signature"]);
        let verdict = check_forward_signature(&key, time_ns, receiver, &txs, &signature);
        let message = spec_message(time_ns, receiver, &txs);
        assert_eq!(forward_message(time_ns, receiver, &txs), message, "{name}: ours is the spec's");
        // RFC 8032's equation alone, as a lax verifier checks it.
        let lax = <[u8; 64]>::try_from(signature.as_slice())
            .is_ok_and(|s| key.verify(&message, &ed25519_dalek::Signature::from_bytes(&s)).is_ok());
        assert_eq!(
            lax,
            c["lax_verifier_takes"].as_bool().expect("lax_verifier_takes"),
            "{name}: a lax verifier"
        );
        if c["valid"].as_bool().expect("valid") {
            assert_eq!(bytes(&c["message"]), message, "{name}: the spec's bytes");
            assert_eq!(message.len(), 93, "{name}");
            let seed = seed.expect("a valid case's key has a seed");
            assert_eq!(
                SigningKey::from_bytes(&seed).sign(&message).to_bytes().to_vec(),
                signature,
                "{name}: signed by the seed"
            );
            assert_eq!(verdict, Ok(()), "{name}");
            taken += 1;
        } else {
            assert!(c.get("message").is_none(), "{name}: only valid cases give the signed bytes");
            assert!(verdict.is_err(), "{name}: taken, but {}", c["why"]);
            refused += 1;
            strictness += usize::from(lax);
        }
    }
    assert_eq!((taken, refused, strictness), (3, 10, 2), "taken, refused, refused only by a strict verifier");
}
