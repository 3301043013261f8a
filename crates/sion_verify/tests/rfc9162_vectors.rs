//! The public RFC 9162 test vectors (transparency-dev/merkle testdata), SHA-256: every happy
//! path must verify and every mutated proof must be rejected.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;
use sion_verify::merkle::{Sha256, verify_consistency, verify_inclusion};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Inclusion {
    leaf_idx: u64,
    tree_size: u64,
    root: String,
    leaf_hash: String,
    proof: Option<Vec<String>>,
    desc: String,
    want_err: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Consistency {
    size1: u64,
    size2: u64,
    root1: String,
    root2: String,
    proof: Option<Vec<String>>,
    desc: String,
    want_err: bool,
}

fn b64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(s).expect("vector is valid base64")
}

fn vector_files(kind: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/rfc9162").join(kind);
    let mut files = Vec::new();
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("vector dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "json") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn inclusion_vectors() {
    let files = vector_files("inclusion");
    assert!(files.len() > 50, "expected the whole vector set, found {}", files.len());
    let (mut accepted, mut rejected) = (0, 0);
    for path in files {
        let v: Inclusion = serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
        let proof: Vec<Vec<u8>> = v.proof.unwrap_or_default().iter().map(|p| b64(p)).collect();
        let got =
            verify_inclusion::<Sha256, _>(v.leaf_idx, v.tree_size, &b64(&v.leaf_hash), &proof, &b64(&v.root));
        assert_eq!(got.is_err(), v.want_err, "{}: {} gave {got:?}", path.display(), v.desc);
        if v.want_err { rejected += 1 } else { accepted += 1 }
    }
    assert!(accepted > 0 && rejected > 0);
}

#[test]
fn consistency_vectors() {
    let files = vector_files("consistency");
    assert!(files.len() > 50, "expected the whole vector set, found {}", files.len());
    let (mut accepted, mut rejected) = (0, 0);
    for path in files {
        let v: Consistency = serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
        let proof: Vec<Vec<u8>> = v.proof.unwrap_or_default().iter().map(|p| b64(p)).collect();
        let got = verify_consistency::<Sha256, _>(v.size1, v.size2, &b64(&v.root1), &b64(&v.root2), &proof);
        assert_eq!(got.is_err(), v.want_err, "{}: {} gave {got:?}", path.display(), v.desc);
        if v.want_err { rejected += 1 } else { accepted += 1 }
    }
    assert!(accepted > 0 && rejected > 0);
}
