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
    let blob_layout = blob_layout(&space, &cover, &atom)?;
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
        "about": "Vectors for docs/SEAL.md: the key tree, sealed bytes, sealed blobs' plaintext layout (blob_layout: to open, and refusals), a cover after forgets, a wrapped cover (to unwrap), archive objects. Hex throughout; `atom` is docs/ATOM.md's JSON form (its payload is what the sealed bytes stand for). Made by examples/seal_vectors.rs, checked by tests/seal_conformance.rs.",
        "tree": {"seed": hex::encode(seed), "leaves": tree},
        "sealed": sealed,
        "blob_layout": blob_layout,
        "cover": covers,
        "wrap": wrap,
        "archive": archive,
    });
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/seal.json");
    std::fs::write(&path, serde_json::to_string_pretty(&out)? + "\n")?;
    println!("wrote {}", path.display());
    Ok(())
}

/// A zstd frame (RFC 8878) made by hand of raw and RLE blocks, so the vector needs no
/// compressor: single segment, its content size given, no checksum. A decoder reads it as any
/// frame; a sealer's own zstd bytes differ, and the layout is checked by opening.
fn zstd_frame(blocks: &[(&[u8], usize)]) -> Vec<u8> {
    let size: usize = blocks.iter().map(|(b, n)| if b.len() == 1 && *n > 0 { *n } else { b.len() }).sum();
    let mut out = 0xFD2F_B528u32.to_le_bytes().to_vec();
    if size < 256 {
        out.extend([0x20, size as u8]); // single segment, 1-byte content size
    } else {
        out.push(0x60); // single segment, 2-byte content size (less 256)
        out.extend(((size - 256) as u16).to_le_bytes());
    }
    for (i, (bytes, repeat)) in blocks.iter().enumerate() {
        let last = u32::from(i + 1 == blocks.len());
        // A byte and a count is an RLE block (type 1); anything else a raw block (type 0).
        let (kind, n) = if *repeat > 0 { (1u32, *repeat) } else { (0, bytes.len()) };
        out.extend(&(last | kind << 1 | (n as u32) << 3).to_le_bytes()[..3]);
        out.extend_from_slice(bytes);
    }
    out
}

/// docs/SEAL.md "What is sealed", blobs: one blob per codec, sealed under a leaf of its lane,
/// and three plaintexts an opener refuses.
fn blob_layout(space: &[u8; 32], cover: &Cover, atom: &Atom) -> Result<Value> {
    const CDR: [u8; 4] = [0, 1, 0, 0];
    let raw: Vec<u8> = (0..16u8).map(|i| i.wrapping_mul(151).wrapping_add(7)).collect();
    let mut grid = CDR.to_vec();
    grid.extend([0xFF; 596]);
    // An 8 × 4 rgb8 gradient: each pixel 2 brighter than the one before, in every channel.
    let mut image = CDR.to_vec();
    image.extend((0..96u32).map(|k| ([10u32, 20, 30][(k % 3) as usize] + k / 3 * 2) as u8));
    let filtered = sion_seal::sub3(&image);
    let cases = [
        ("application/octet-stream", sion_seal::Codec::None, 3u32 << 30 | 6, raw.clone(), raw),
        (
            "application/cdr; type=nav_msgs/msg/OccupancyGrid",
            sion_seal::Codec::Zstd,
            2 << 30 | 7,
            grid,
            zstd_frame(&[(&CDR, 0), (&[0xFF], 596)]),
        ),
        (
            "application/cdr; type=sensor_msgs/msg/Image",
            sion_seal::Codec::Sub3Zstd,
            1 << 30 | 8,
            image,
            zstd_frame(&[(&filtered[..7], 0), (&filtered[7..8], 93)]),
        ),
    ];
    let mut out = Vec::new();
    let mut plaintexts = Vec::new();
    for (media_type, codec, leaf, given, content) in cases {
        let plain = sion_seal::blob_plaintext(codec, media_type, &given, &content)?;
        let sealed = Sealed::seal(SealKind::Blob, space, cover, leaf, atom.parts(), &plain)?;
        let mut case = json!({
            "codec": codec as u8,
            "media_type": media_type,
            "given": hex::encode(&given),
            "given_hash": hex::encode(blake3::hash(&given).as_bytes()),
            "content": hex::encode(&content),
            "leaf": leaf,
            "plaintext": hex::encode(&plain),
            "sealed": hex::encode(&sealed),
            "payload_media_type": sion_seal::sealed_media_type(cover.epoch, leaf),
        });
        if codec == sion_seal::Codec::Sub3Zstd {
            case["filtered"] = json!(hex::encode(&filtered));
        }
        out.push(case);
        plaintexts.push(plain);
    }
    // Refused when opened: a codec the layout has not, a hash of other bytes, a frame cut short.
    let mut codec_3 = plaintexts[0].clone();
    codec_3[0] = 3;
    let mut hash_flipped = plaintexts[0].clone();
    hash_flipped[2 + "application/octet-stream".len()] ^= 1;
    let mut cut = plaintexts[1].clone();
    cut.pop();
    let mut refused = Vec::new();
    for (why, leaf, plain) in [
        ("codec 3", 3u32 << 30 | 9, codec_3),
        ("the content hash with one bit flipped", 3 << 30 | 10, hash_flipped),
        ("a zstd frame cut one byte short", 2 << 30 | 11, cut),
    ] {
        let sealed = Sealed::seal(SealKind::Blob, space, cover, leaf, atom.parts(), &plain)?;
        refused.push(json!({"why": why, "leaf": leaf, "plaintext": hex::encode(&plain), "sealed": hex::encode(&sealed)}));
    }
    Ok(json!({
        "space": hex::encode(space),
        "epoch": cover.epoch,
        "atom": ATOM,
        "opens": out,
        "refused": refused,
    }))
}
