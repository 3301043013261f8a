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
    assert_eq!(cases.len(), 12);
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
        let log_set = match case["trust_log_set"].as_bool() {
            Some(true) => bundle::LogSet::Trusted,
            _ => bundle::LogSet::Proved,
        };
        let ask = bundle::Ask { as_of: case["as_of"].as_u64(), log_set };
        let got = bundle::check_with(&bytes, &key, &targets, &policy, ask);
        match (&case["verdict"]["states"], case["verdict"]["refused"].as_str()) {
            (Value::Array(states), None) => {
                let checked =
                    got.unwrap_or_else(|e| panic!("{file}: refused ({e}), the manifest says valid"));
                let found: Vec<&str> = checked.beliefs.iter().map(|b| b.state.as_str()).collect();
                let expected: Vec<&str> = states.iter().map(|s| s.as_str().expect("state")).collect();
                assert_eq!(found, expected, "{file} under {:?}", policy.prefer);
            }
            // The refusal's code, spelled as docs/BELIEF.md "Checking" spells it.
            (_, Some(code)) => {
                let e = got
                    .err()
                    .unwrap_or_else(|| panic!("{file}: believed, the manifest says refused ({code})"));
                assert_eq!(e.code(), code, "{file}: {e}");
            }
            other => panic!("{file}: unknown verdict {other:?}"),
        }
    }
}

fn le(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes")) as usize
}

/// A version 2 or 3 bundle's files: (attestation index, body).
type Bodies = Vec<(u32, Vec<u8>)>;

/// A version 2 or 3 bundle's parts: its attestations and its files.
fn parts(b: &[u8]) -> (Vec<Vec<u8>>, Bodies) {
    assert!(&b[..8] == bundle::MAGIC || &b[..8] == bundle::MAGIC_V2);
    let mut at = 8;
    let mut table = Vec::new();
    for _ in 0..le(b, at) {
        at += 4;
        let n = le(b, at);
        table.push(b[at + 4..at + 4 + n].to_vec());
        at += n;
    }
    at += 4;
    let mut files = Vec::new();
    for _ in 0..le(b, at) {
        at += 4;
        let a = le(b, at) as u32;
        let n = le(b, at + 4);
        files.push((a, b[at + 8..at + 8 + n].to_vec()));
        at += 4 + n;
    }
    assert_eq!(at + 4, b.len());
    (table, files)
}

fn assemble(table: &[Vec<u8>], files: &[(u32, Vec<u8>)]) -> Vec<u8> {
    let mut out = bundle::MAGIC.to_vec();
    out.extend_from_slice(&(table.len() as u32).to_le_bytes());
    for t in table {
        out.extend_from_slice(&(t.len() as u32).to_le_bytes());
        out.extend_from_slice(t);
    }
    out.extend_from_slice(&(files.len() as u32).to_le_bytes());
    for (a, body) in files {
        out.extend_from_slice(&a.to_le_bytes());
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(body);
    }
    out
}

#[test]
fn versions_3_and_2_share_attestations_have_one_encoding_and_read_like_version_1() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/belief");
    let v3 = std::fs::read(dir.join("disputed.sionbelief")).expect("v3");
    let v2 = std::fs::read(dir.join("disputed-v2.sionbelief")).expect("v2");
    let v1 = std::fs::read(dir.join("disputed-v1.sionbelief")).expect("v1");
    let files = bundle::decode(&v3).expect("v3 decodes");
    assert_eq!(files, bundle::decode(&v2).expect("v2 decodes"), "the same proof files");
    assert_eq!(files, bundle::decode(&v1).expect("v1 decodes"), "the same proof files");
    assert_eq!(bundle::encode(&files), v3, "one encoding");
    assert_eq!(bundle::encode_v2(&files), v2, "one encoding");
    // Version 1 holds whole proof files: written now they are SIONPRF4 files (the stored one's,
    // SIONPRF2, read above as the same files), and read back the same.
    assert_eq!(bundle::decode(&bundle::encode_v1(&files)).expect("reads back"), files);
    assert_eq!(v3[8..], v2[8..], "without attestations alone, version 3 is version 2's bytes");
    let v2 = v3;
    let (table, bodies) = parts(&v2);
    assert!(table.len() < bodies.len(), "{} attestations for {} files", table.len(), bodies.len());
    assert!(v2.len() < v1.len() * 3 / 4, "v2 {} bytes, v1 {}", v2.len(), v1.len());

    let format = |b: &[u8], what: &str| match bundle::decode(b) {
        Err(e @ bundle::BundleError::Format(_)) => assert_eq!(e.code(), "format"),
        other => panic!("{what}: {other:?}"),
    };
    // An attestation twice, one no file uses, an index past the table, bytes after, cut short.
    let mut twice = table.clone();
    twice.push(table[0].clone());
    format(&assemble(&twice, &bodies), "an attestation repeated");
    let mut unused = table.clone();
    unused.push(vec![0]);
    format(&assemble(&unused, &bodies), "an entry no file uses that is not an attestation");
    let mut past = bodies.clone();
    past[0].0 = table.len() as u32;
    format(&assemble(&table, &past), "an index past the table");
    // The split between an attestation and its bodies moved (the kind byte into the entry):
    // the same files, but the entry is not one attestation.
    let mut split = table.clone();
    split[0].push(bodies[0].1[0]);
    let moved_split: Bodies =
        bodies.iter().map(|(a, b)| (*a, if *a == 0 { b[1..].to_vec() } else { b.clone() })).collect();
    format(&assemble(&split, &moved_split), "an attestation entry with a body's first byte");
    // The table in another order than first use.
    let mut swapped = table.clone();
    swapped.swap(0, 1);
    let renamed: Bodies = bodies.iter().map(|(a, b)| (if *a < 2 { 1 - *a } else { *a }, b.clone())).collect();
    format(&assemble(&swapped, &renamed), "attestations out of the order first used");
    let mut after = v2.clone();
    after.push(0);
    format(&after, "a byte after the last file");
    format(&v2[..v2.len() - 1], "cut short");
    format(b"SIONBEL9\0\0\0\0", "another magic");
    // A body moved under another log's attestation is refused: the head it names is not the
    // one that attestation holds.
    // (A link proof: its log's other link proofs keep its attestation in use.)
    let log_of = |i: usize| files[i].attestation.as_ref().expect("attested").state.log.id;
    // A link proof whose attestation an earlier file uses too, and an earlier file of another
    // log: the move keeps the table in the order first used, and every entry used.
    let list = (0..files.len())
        .find(|&i| {
            matches!(files[i].proof, sion_verify::proof::Proof::List { .. })
                && (0..i).any(|j| bodies[j].0 == bodies[i].0)
                && (0..i).any(|k| log_of(k) != log_of(i))
        })
        .expect("a link proof");
    let other = (0..list).find(|&i| log_of(i) != log_of(list)).expect("two logs");
    let mut moved = bodies.clone();
    moved[list].0 = bodies[other].0;
    let key = files[0].attestation.as_ref().expect("attested").ledger_key;
    let key = ed25519_dalek::VerifyingKey::from_bytes(&key).expect("key");
    let policy: Policy =
        serde_json::from_value(serde_json::json!({"revisers": [], "prefer": "latest"})).expect("policy");
    match bundle::check(&assemble(&table, &moved), &key, &[], &policy, None) {
        Err(e) => assert_eq!(e.code(), "proof", "{e}"),
        Ok(_) => panic!("a body moved under another log's attestation was accepted"),
    }
}
