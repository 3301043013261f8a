//! tests/conformance/seal.json (made by examples/seal_vectors.rs) holds: the key tree computed
//! here by hand from docs/SEAL.md, and the crates' sealed bytes, covers, wraps and archive
//! objects reproduced or opened exactly — what another implementation checks itself against.

use std::path::Path;

use serde_json::Value;
use sion_archive::{ArchiveKeys, Kind as ObjectKind};
use sion_memory::atom::Atom;
use sion_seal::{Cover, MemberKey, SealKind, Sealed, Wrapped};

fn h(v: &Value) -> Vec<u8> {
    hex::decode(v.as_str().expect("hex string")).expect("hex")
}

fn h32(v: &Value) -> [u8; 32] {
    h(v).try_into().expect("32 bytes")
}

/// The leaf key by hand: 32 steps down the tree from the epoch seed (docs/SEAL.md).
fn leaf_key(seed: [u8; 32], leaf: u32) -> [u8; 32] {
    let mut s = seed;
    for d in 0..32 {
        let bit = ((leaf >> (31 - d)) & 1) as u8;
        let mut hasher = blake3::Hasher::new_keyed(&s);
        hasher.update(b"sion-seal-ggm-v1");
        hasher.update(&[bit]);
        s = *hasher.finalize().as_bytes();
    }
    s
}

#[test]
fn every_sealing_vector_holds() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/seal.json");
    let v: Value = serde_json::from_slice(&std::fs::read(path).expect("seal.json")).expect("JSON");

    let seed = h32(&v["tree"]["seed"]);
    for l in v["tree"]["leaves"].as_array().expect("leaves") {
        let leaf = l["leaf"].as_u64().expect("leaf") as u32;
        let key = leaf_key(seed, leaf);
        assert_eq!(key, h32(&l["leaf_key"]), "leaf {leaf}");
        assert_eq!(blake3::derive_key("sion-seal-payload-v1", &key), h32(&l["payload_key"]));
        assert_eq!(blake3::derive_key("sion-seal-blob-v1", &key), h32(&l["blob_key"]));
    }

    for s in v["sealed"].as_array().expect("sealed") {
        let kind = if s["kind"] == "blob" { SealKind::Blob } else { SealKind::Payload };
        let (space, epoch, leaf) = (
            h32(&s["space"]),
            s["epoch"].as_u64().expect("epoch") as u32,
            s["leaf"].as_u64().expect("leaf") as u32,
        );
        let atom = Atom::from_json(s["atom"].as_str().expect("atom")).expect("atom");
        let bytes = h(&s["sealed"]);
        let opened = Sealed::decode(&bytes)
            .expect("sealed bytes")
            .open_with_key(kind, &leaf_key(seed, leaf), atom.parts())
            .expect("opens with the hand-made leaf key");
        assert_eq!(opened, h(&s["plaintext"]));
        let again =
            Sealed::seal(kind, &space, &Cover::new(epoch, seed), leaf, atom.parts(), &opened).expect("seal");
        assert_eq!(again, bytes, "sealing is deterministic: the same bytes");
        // Bound to the atom: another subject does not open.
        let mut other = atom.parts().clone();
        other.subject = "someone else".into();
        assert!(
            Sealed::decode(&bytes)
                .expect("decode")
                .open_with_key(kind, &leaf_key(seed, leaf), &other)
                .is_err()
        );
    }

    let c = &v["cover"];
    let cover = Cover::decode(&h(&c["cover"])).expect("SIONCOV1");
    let cseed = h32(&c["seed"]);
    for l in c["opens"].as_array().expect("opens") {
        let leaf = l.as_u64().expect("leaf") as u32;
        assert_eq!(cover.leaf_key(leaf).expect("held"), leaf_key(cseed, leaf), "leaf {leaf}");
    }
    for l in c["does_not_open"].as_array().expect("does_not_open") {
        assert!(cover.leaf_key(l.as_u64().expect("leaf") as u32).is_err(), "leaf {l} was forgotten");
    }

    let w = &v["wrap"];
    let member = MemberKey::from_seed(h32(&w["member_seed"]));
    assert_eq!(member.hash(), h32(&w["member_public_hash"]));
    let unwrapped =
        Wrapped::decode(&h(&w["wrapped"])).expect("SIONWRAP").unwrap_for(&member).expect("unwraps");
    assert_eq!(unwrapped.encode(), h(&w["cover"]));
    assert!(
        Wrapped::decode(&h(&w["wrapped"]))
            .expect("SIONWRAP")
            .unwrap_for(&MemberKey::from_seed([9; 32]))
            .is_err()
    );

    for a in v["archive"].as_array().expect("archive") {
        let writer = ed25519_dalek::SigningKey::from_bytes(&h32(&a["writer_secret"]));
        let keys = ArchiveKeys::of(&writer);
        let kind = match a["kind"].as_u64() {
            Some(1) => ObjectKind::Chunk,
            Some(2) => ObjectKind::Blob,
            Some(3) => ObjectKind::File,
            _ => ObjectKind::Manifest,
        };
        let name = a["name"].as_str().expect("name");
        assert_eq!(keys.open(kind, name, &h(&a["object"])).expect("opens"), h(&a["plaintext"]));
        let (again, bytes) = keys.seal(kind, &h(&a["plaintext"])).expect("seal");
        assert_eq!((again.as_str(), bytes), (name, h(&a["object"])));
    }
}
