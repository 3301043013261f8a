//! tests/conformance/seal.json (made by examples/seal_vectors.rs) holds: the key tree computed
//! here by hand from docs/SEAL.md, and the crates' sealed bytes, covers, wraps and archive
//! objects reproduced or opened exactly — what another implementation checks itself against.

use std::path::Path;

use serde_json::Value;
use sion_archive::{ArchiveKeys, Kind as ObjectKind};
use sion_seal::{Cover, MemberKey, SealKind, Sealed, Wrapped};
use sion_verify::atom::Atom;

fn h(v: &Value) -> Vec<u8> {
    hex::decode(v.as_str().expect("hex string")).expect("hex")
}

fn h32(v: &Value) -> [u8; 32] {
    h(v).try_into().expect("32 bytes")
}

#[test]
fn every_sealing_vector_holds() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance/seal.json");
    let v: Value = serde_json::from_slice(&std::fs::read(path).expect("seal.json")).expect("JSON");

    let seed = h32(&v["tree"]["seed"]);
    for l in v["tree"]["leaves"].as_array().expect("leaves") {
        let leaf = l["leaf"].as_u64().expect("leaf") as u32;
        let key = sion_testkit::leaf_key(seed, leaf);
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
            .open_with_key(kind, &sion_testkit::leaf_key(seed, leaf), atom.parts())
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
                .open_with_key(kind, &sion_testkit::leaf_key(seed, leaf), &other)
                .is_err()
        );
    }

    let c = &v["cover"];
    let cover = Cover::decode(&h(&c["cover"])).expect("SIONCOV1");
    let cseed = h32(&c["seed"]);
    for l in c["opens"].as_array().expect("opens") {
        let leaf = l.as_u64().expect("leaf") as u32;
        assert_eq!(cover.leaf_key(leaf).expect("held"), sion_testkit::leaf_key(cseed, leaf), "leaf {leaf}");
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

/// `blob_layout`: sealed blobs whose plaintext is docs/SEAL.md's blob layout (`u8` codec, `str8`
/// media type, 32 BLAKE3 of the blob as given, the content under the codec), one per codec.
/// Checked the way another implementation would: open with the hand-made leaf key, read the
/// layout by hand, and let an opener decompress (zstd bytes differ between compressors, so the
/// vector is for opening); the three `refused` plaintexts open from SIONSEAL but are refused.
#[test]
fn the_blob_layout_vectors_open() {
    use sion_store::memory::Opened;
    use sion_store::memory::space::opened;

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance/seal.json");
    let v: Value = serde_json::from_slice(&std::fs::read(path).expect("seal.json")).expect("JSON");
    let seed = h32(&v["tree"]["seed"]);
    let b = &v["blob_layout"];
    let (space, epoch) = (h32(&b["space"]), b["epoch"].as_u64().expect("epoch") as u32);
    let atom = Atom::from_json(b["atom"].as_str().expect("atom")).expect("atom");
    let open = |c: &Value| {
        let leaf = c["leaf"].as_u64().expect("leaf") as u32;
        let plain = Sealed::decode(&h(&c["sealed"]))
            .expect("SIONSEAL")
            .open_with_key(SealKind::Blob, &sion_testkit::leaf_key(seed, leaf), atom.parts())
            .expect("opens with the hand-made leaf key");
        assert_eq!(plain, h(&c["plaintext"]), "leaf {leaf}");
        let again =
            Sealed::seal(SealKind::Blob, &space, &Cover::new(epoch, seed), leaf, atom.parts(), &plain)
                .expect("seal");
        assert_eq!(again, h(&c["sealed"]), "sealing is deterministic");
        (leaf, plain)
    };
    let cases = b["opens"].as_array().expect("opens");
    let codecs: Vec<u64> = cases.iter().map(|c| c["codec"].as_u64().expect("codec")).collect();
    assert_eq!(codecs, [0, 1, 2], "a case per codec");
    for c in cases {
        let (leaf, plain) = open(c);
        let (given, media_type) = (h(&c["given"]), c["media_type"].as_str().expect("media_type"));
        // The layout, by hand.
        let n = usize::from(plain[1]);
        assert_eq!(u64::from(plain[0]), c["codec"].as_u64().expect("codec"));
        assert_eq!(&plain[2..2 + n], media_type.as_bytes());
        assert_eq!(plain[2 + n..34 + n], h(&c["given_hash"]));
        assert_eq!(plain[2 + n..34 + n], *blake3::hash(&given).as_bytes());
        assert_eq!(plain[34 + n..], h(&c["content"]));
        match plain[0] {
            0 => assert_eq!(h(&c["content"]), given, "codec 0 holds the blob as given"),
            2 => assert_eq!(sion_seal::sub3(&given), h(&c["filtered"]), "the Sub filter, stride 3"),
            _ => {}
        }
        // An opener decompresses (and unfilters) to exactly the blob as given.
        match opened(SealKind::Blob, &plain).expect("an opener reads the layout") {
            Opened::Blob { media_type: m, content } => assert_eq!((m.as_str(), content), (media_type, given)),
            other => panic!("leaf {leaf}: {other:?}"),
        }
        assert_eq!(
            c["payload_media_type"].as_str().expect("payload_media_type"),
            format!("application/x-sion-sealed; epoch={epoch}; leaf={leaf}")
        );
    }
    let refused = b["refused"].as_array().expect("refused");
    assert_eq!(refused.len(), 3);
    // Each refused for its own fault, not another one.
    for (c, said) in refused.iter().zip(["codec 3", "hash differs", "zstd content does not decode"]) {
        let (leaf, plain) = open(c);
        match opened(SealKind::Blob, &plain) {
            Ok(_) => panic!("leaf {leaf} ({}) was opened", c["why"]),
            Err(e) => assert!(e.to_string().contains(said), "leaf {leaf} ({}): {e}", c["why"]),
        }
    }
}
