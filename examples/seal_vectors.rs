//! Writes tests/conformance/seal.json: vectors for the formats of docs/SEAL.md, for another
//! implementation to check itself against — the key tree (a leaf's key, its payload and blob
//! keys), sealed payloads and blobs (SIONSEAL: deterministic, so exact bytes), a key cover
//! after a forget (SIONCOV1), a cover wrapped to a member (SIONWRAP v2: X-Wing encapsulation is
//! randomised, so the vector is for unwrapping: the member's seed, the bytes, the cover they
//! open to), and archive objects (SIONARC1: deterministic). tests/seal_conformance.rs checks
//! every vector, the tree by hand.
//!
//!     cargo run --example seal_vectors

use std::path::Path;

use anyhow::Result;
use serde_json::{Value, json};
use sion_archive::{ArchiveKeys, Kind as ObjectKind};
use sion_memory::atom::Atom;
use sion_seal::{Cover, MemberKey, SealKind, Sealed, Wrapped};

const ATOM: &str = r#"{"kind":"observation","frame":"map","min":[1000,2000,0],"max":[1500,2600,1200],"from":1700000000000000000,"to":1700000001000000000,"confidence":900,"subject":"visitor"}"#;

fn main() -> Result<()> {
    let seed = [0x11u8; 32];
    let space = [0x22u8; 32];
    let epoch = 3u32;
    let cover = Cover::new(epoch, seed);
    let mut tree = Vec::new();
    for leaf in [0u32, 1, 2, 5, 123_456_789, u32::MAX] {
        let key = cover.leaf_key(leaf)?;
        tree.push(json!({
            "leaf": leaf,
            "leaf_key": hex::encode(key),
            "payload_key": hex::encode(blake3::derive_key("sion-seal-payload-v1", &key)),
            "blob_key": hex::encode(blake3::derive_key("sion-seal-blob-v1", &key)),
        }));
    }
    let atom = Atom::from_json(ATOM)?;
    let mut sealed = Vec::new();
    for (kind, name, leaf, plain) in [
        (SealKind::Payload, "payload", 0u32, b"\x01the visitor's name is Jo".to_vec()),
        (SealKind::Payload, "payload", 5, b"\x02\x00\x01\x02\x03".to_vec()),
        (SealKind::Blob, "blob", 2, (0..300u32).map(|i| (i % 251) as u8).collect()),
    ] {
        let bytes = Sealed::seal(kind, &space, &cover, leaf, atom.parts(), &plain)?;
        sealed.push(json!({
            "kind": name,
            "space": hex::encode(space),
            "epoch": epoch,
            "leaf": leaf,
            "atom": ATOM,
            "plaintext": hex::encode(&plain),
            "sealed": hex::encode(&bytes),
        }));
    }
    let mut punctured = cover.clone();
    punctured.forget_leaf(5);
    punctured.forget(100, 200);
    let covers = json!({
        "epoch": epoch,
        "seed": hex::encode(seed),
        "forgotten": ["leaf 5", "leaves 100..200"],
        "cover": hex::encode(punctured.encode()),
        "opens": [0, 4, 6, 99, 200, u32::MAX],
        "does_not_open": [5, 100, 150, 199],
    });
    let member = MemberKey::from_seed([0x33; 32]);
    let wrapped = Wrapped::wrap(&space, &punctured, &member.public())?;
    let wrap = json!({
        "member_seed": hex::encode(member.seed()),
        "member_public_hash": hex::encode(member.hash()),
        "space": hex::encode(space),
        "wrapped": hex::encode(wrapped.encode()),
        "cover": hex::encode(punctured.encode()),
    });
    let writer = ed25519_dalek::SigningKey::from_bytes(&[0x44; 32]);
    let keys = ArchiveKeys::of(&writer);
    let mut archive = Vec::new();
    for (kind, name, plain) in [
        (ObjectKind::File, 3u8, b"{\"log\":0}".to_vec()),
        (ObjectKind::Chunk, 1, {
            let mut c = 0u64.to_le_bytes().to_vec();
            c.extend_from_slice(&1u32.to_le_bytes());
            c.extend_from_slice(&(atom.bytes().len() as u32).to_le_bytes());
            c.extend_from_slice(atom.bytes());
            c
        }),
    ] {
        let (object_name, bytes) = keys.seal(kind, &plain)?;
        archive.push(json!({
            "writer_secret": hex::encode(writer.to_bytes()),
            "kind": name,
            "plaintext": hex::encode(&plain),
            "object": hex::encode(&bytes),
            "name": object_name,
        }));
    }
    let out: Value = json!({
        "about": "Vectors for docs/SEAL.md: the key tree, sealed bytes, a cover after forgets, a wrapped cover (to unwrap), archive objects. Hex throughout; `atom` is docs/ATOM.md's JSON form (its payload is what the sealed bytes stand for). Made by examples/seal_vectors.rs, checked by tests/seal_conformance.rs.",
        "tree": {"seed": hex::encode(seed), "leaves": tree},
        "sealed": sealed,
        "cover": covers,
        "wrap": wrap,
        "archive": archive,
    });
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/seal.json");
    std::fs::write(&path, serde_json::to_string_pretty(&out)? + "\n")?;
    println!("wrote {}", path.display());
    Ok(())
}
