//! What sealing costs (docs/SEAL.md), beside the raw cipher measured in the same run:
//! sealing and opening payloads and camera frames (MB/s), against ChaCha20-Poly1305 alone
//! (the `chacha20poly1305` crate, the same one); wrapping an epoch's cover or a leaf key to a
//! member's X-Wing key and unwrapping it; a forget (the forget atom durable, then the key store
//! punctured and replaced, fsynced).
//!
//!     cargo run --release --example seal_bench [-- --seconds 1]
//!
//! A camera frame here is a 640 × 480 rgb8 image as a camera gives it: smooth shading with
//! sensor noise in the low bits (so zstd gains what it would on a real frame, not the
//! thousandfold of a constant image).

use std::time::{Duration, Instant};

use anyhow::Result;
use chacha20poly1305::aead::{Aead as _, KeyInit as _, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use sion_memory::atom::{AtomParts, BoxMm, Interval, Kind, Payload as AtomPayload, Permille};
use sion_memory::memory::Memory;
use sion_memory::sim::SplitMix64;
use sion_seal::{Cover, MemberKey, SealKind, Sealed, Wrapped, WrappedLeaf, bare_id};

const FRAME: usize = 640 * 480 * 3;

fn frame(i: u64) -> Vec<u8> {
    let mut rng = SplitMix64::new(i);
    let mut out = Vec::with_capacity(FRAME);
    for y in 0..480u32 {
        for x in 0..640u32 {
            let base = ((x / 3 + y / 2 + i as u32) % 200) as u8;
            for c in 0..3u8 {
                out.push(base.wrapping_add(c * 20).wrapping_add((rng.next_u64() % 6) as u8));
            }
        }
    }
    out
}

fn atom(i: i64) -> AtomParts {
    AtomParts::new(
        Kind::Observation,
        "map",
        BoxMm { min_mm: [i, 0, 0], max_mm: [i + 1000, 1000, 1000] },
        Interval { from_ns: 1_800_000_000_000_000_000 + i, to_ns: 1_800_000_000_000_000_001 + i },
        Permille(900),
    )
}

/// Run `f` for at least `min` (and at least 3 times); the time a call took, on average.
fn time(min: Duration, mut f: impl FnMut(u64)) -> Duration {
    let start = Instant::now();
    let mut n = 0u64;
    while n < 3 || start.elapsed() < min {
        f(n);
        n += 1;
    }
    start.elapsed() / n as u32
}

fn mbps(bytes: usize, per: Duration) -> f64 {
    bytes as f64 / per.as_secs_f64() / 1e6
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let seconds: f64 = args
        .iter()
        .position(|a| a == "--seconds")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let min = Duration::from_secs_f64(seconds);
    let tmp = tempfile::tempdir()?;
    let frames: Vec<Vec<u8>> = (0..8).map(frame).collect();
    let payload = vec![0x5au8; 64 << 10];
    let mut rows: Vec<(String, String, String)> = Vec::new();

    // The peer: the cipher alone, on the same bytes.
    let cipher = ChaCha20Poly1305::new(&Key::from([7u8; 32]));
    let raw_frame = time(min, |i| {
        let f = &frames[(i % 8) as usize];
        let _ = cipher.encrypt(&Nonce::default(), Payload { msg: f, aad: b"aad" });
    });
    let sealed_raw =
        cipher.encrypt(&Nonce::default(), Payload { msg: &frames[0], aad: b"aad" }).expect("seal");
    let raw_open = time(min, |_| {
        let _ = cipher.decrypt(&Nonce::default(), Payload { msg: &sealed_raw, aad: b"aad" });
    });
    rows.push((
        "ChaCha20-Poly1305 alone (crate chacha20poly1305 0.11), a 900 KiB frame: encrypt / decrypt".into(),
        format!("{:.0} / {:.0} MB/s", mbps(FRAME, raw_frame), mbps(FRAME, raw_open)),
        "the peer".into(),
    ));

    // Sealed bytes: leaf key from the cover (a GGM path), AAD from the atom, the cipher.
    let cover = Cover::new(0, [9u8; 32]);
    let space = [3u8; 32];
    let parts = atom(1);
    let seal_frame = time(min, |i| {
        let _ = Sealed::seal(SealKind::Blob, &space, &cover, i as u32, &parts, &frames[(i % 8) as usize]);
    });
    let sealed = Sealed::seal(SealKind::Blob, &space, &cover, 5, &parts, &frames[0])?;
    let decoded = Sealed::decode(&sealed)?;
    let open_frame = time(min, |_| {
        let _ = decoded.open(SealKind::Blob, &space, &cover, &parts);
    });
    rows.push((
        "sealed bytes (SIONSEAL), the same frame uncompressed: seal / open".into(),
        format!("{:.0} / {:.0} MB/s", mbps(FRAME, seal_frame), mbps(FRAME, open_frame)),
        format!(
            "{:.2} / {:.2}× the cipher alone",
            seal_frame.as_secs_f64() / raw_frame.as_secs_f64(),
            open_frame.as_secs_f64() / raw_open.as_secs_f64()
        ),
    ));
    let seal_inline = time(min, |i| {
        let _ = Sealed::seal(SealKind::Payload, &space, &cover, i as u32, &parts, &payload);
    });
    rows.push((
        "an inline payload of 64 KiB: seal".into(),
        format!(
            "{:.0} MB/s ({:.1} µs each)",
            mbps(payload.len(), seal_inline),
            seal_inline.as_secs_f64() * 1e6
        ),
        String::new(),
    ));

    // A sealed memory: Sub filter and zstd, seal, keep in the blob store (not fsynced per frame here: the node
    // makes a batch durable at once), and open (decompress, check the published hash).
    let memory = Memory::options(tmp.path().join("m")).sealed(true).create()?;
    let space_handle = memory.space().expect("sealed").clone();
    let mut sealed_frames = Vec::new();
    let seal_compressed = time(min, |i| {
        let f = &frames[(i % 8) as usize];
        let mut p = atom(i as i64);
        p.payload = AtomPayload::None;
        let (a, s) = space_handle
            .seal_blob(memory.log(), p, "application/cdr; type=sensor_msgs/msg/Image", f, true)
            .expect("seal");
        if sealed_frames.len() < 8 {
            sealed_frames.push((a, s));
        }
    });
    let ratio = sealed_frames[0].1.len() as f64 / FRAME as f64;
    let open_compressed = time(min, |i| {
        let (a, s) = &sealed_frames[(i % sealed_frames.len() as u64) as usize];
        let _ = space_handle.open_payload(0, a.parts(), s, SealKind::Blob).expect("open");
    });
    rows.push((
        "a sealed memory's frame: Sub filter and zstd level 1, then sealed (what the node keeps) / opened and checked"
            .into(),
        format!("{:.0} / {:.0} MB/s of frames", mbps(FRAME, seal_compressed), mbps(FRAME, open_compressed)),
        format!(
            "kept at {:.0} % of its size; 30 frames a second cost {:.0} % of a core",
            ratio * 100.0,
            30.0 * seal_compressed.as_secs_f64() * 100.0
        ),
    ));

    // Sharing: wrapping a cover, a leaf key; unwrapping.
    let member = MemberKey::generate()?;
    let public = member.public();
    let mut punctured = Cover::new(0, [1u8; 32]);
    for leaf in (0..1000u64).step_by(10) {
        punctured.forget(leaf, leaf + 1);
    }
    let wrap = time(min, |_| {
        let _ = Wrapped::wrap(&space, &punctured, &public);
    });
    let w = Wrapped::wrap(&space, &punctured, &public)?;
    let unwrap = time(min, |_| {
        let _ = w.unwrap_for(&member);
    });
    rows.push((
        format!(
            "share: an epoch's cover ({} nodes, {} bytes) wrapped to a member / unwrapped",
            punctured.nodes().len(),
            w.encode().len()
        ),
        format!("{:.3} / {:.3} ms", wrap.as_secs_f64() * 1e3, unwrap.as_secs_f64() * 1e3),
        "X-Wing (ML-KEM-768 + X25519)".into(),
    ));
    let id = bare_id(&parts)?;
    let key = cover.leaf_key(5)?;
    let wrap_leaf = time(min, |_| {
        let _ = WrappedLeaf::wrap(&space, 0, 5, &id, &key, &public);
    });
    let wl = WrappedLeaf::wrap(&space, 0, 5, &id, &key, &public)?;
    let unwrap_leaf = time(min, |_| {
        let _ = wl.unwrap_for(&member);
    });
    rows.push((
        "the payload service's answer: a leaf key wrapped to a member / unwrapped".into(),
        format!("{:.3} / {:.3} ms", wrap_leaf.as_secs_f64() * 1e3, unwrap_leaf.as_secs_f64() * 1e3),
        "1,281 bytes".into(),
    ));

    // A forget, durable: the forget atom appended and fsynced, the key store replaced.
    let memory2 = Memory::options(tmp.path().join("f")).sealed(true).create()?;
    let first = memory2.log().size();
    let n = 200u64;
    memory2.remember_sealed(
        (0..n as i64)
            .map(|i| {
                let mut p = atom(i);
                p.payload = AtomPayload::Text(format!("secret {i}"));
                p
            })
            .collect(),
    )?;
    let started = Instant::now();
    for i in 0..n / 2 {
        memory2.forget(&[first + 2 * i], "bench", "measured")?;
    }
    let forget = started.elapsed() / (n / 2) as u32;
    rows.push((
        "forget one payload: forget atom durable, key store punctured and replaced (fsynced)".into(),
        format!("{:.2} ms", forget.as_secs_f64() * 1e3),
        "every other of 200".into(),
    ));

    println!("\n### `examples/seal_bench`: what sealing costs, beside the cipher alone\n");
    println!("| measure | ours | beside |");
    println!("| --- | --- | --- |");
    for (a, b, c) in rows {
        println!("| {a} | {b} | {c} |");
    }
    Ok(())
}
