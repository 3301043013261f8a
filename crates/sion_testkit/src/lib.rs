//! What the tests of sion_memory's crates share, in one place: formats written from docs/ by
//! hand (so a test checks the crates' code against the page, not against itself), random logs
//! that crowd queries, and directory copies as a backup makes them. A dev-dependency only;
//! nothing here is for the product.

#![forbid(unsafe_code)]

use sion_sim::SplitMix64;
use sion_verify::atom::{Atom, AtomParts, BoxMm, Interval, Kind, Link, LinkRel, Permille};

/// An hour in nanoseconds.
const HOUR_NS: i64 = 3_600_000_000_000;

/// The seeds on the path of a sealed memory's key tree from the epoch seed to `leaf`
/// (docs/SEAL.md, "The key tree"), written from the page: the epoch seed, then depth 1 … 32,
/// the last being the leaf key.
pub fn ggm_path(epoch_seed: [u8; 32], leaf: u32) -> Vec<[u8; 32]> {
    let mut out = vec![epoch_seed];
    let mut seed = epoch_seed;
    for d in 0..32 {
        let bit = ((leaf >> (31 - d)) & 1) as u8;
        let mut h = blake3::Hasher::new_keyed(&seed);
        h.update(b"sion-seal-ggm-v1");
        h.update(&[bit]);
        seed = *h.finalize().as_bytes();
        out.push(seed);
    }
    out
}

/// The leaf key of `leaf` ([`ggm_path`]'s last seed).
pub fn leaf_key(epoch_seed: [u8; 32], leaf: u32) -> [u8; 32] {
    ggm_path(epoch_seed, leaf)[32]
}

/// Every secret that opens the payload of `leaf`: [`ggm_path`], then the payload and blob
/// keys sealing derives from the leaf key (docs/SEAL.md). A test that forgets a payload looks
/// for each of them on disk.
pub fn path_secrets(epoch_seed: [u8; 32], leaf: u32) -> Vec<[u8; 32]> {
    let mut out = ggm_path(epoch_seed, leaf);
    let leaf_key = out[32];
    out.push(blake3::derive_key("sion-seal-payload-v1", &leaf_key));
    out.push(blake3::derive_key("sion-seal-blob-v1", &leaf_key));
    out
}

pub const FRAMES: [&str; 3] = ["map", "odom", "site/b"];

/// Atoms crowded into a small space and a few hours, so queries hit, touch and miss.
pub fn random_atoms(rng: &mut SplitMix64, n: usize) -> Vec<Atom> {
    let mut atoms: Vec<Atom> = Vec::with_capacity(n);
    while atoms.len() < n {
        let frame = FRAMES[(rng.next_u64() % 3) as usize];
        let min = [rng.range(-5_000, 5_000), rng.range(-5_000, 5_000), rng.range(0, 3_000)];
        let size = [rng.range(0, 2_000), rng.range(0, 2_000), rng.range(0, 1_000)];
        let max = [min[0] + size[0], min[1] + size[1], min[2] + size[2]];
        let from = rng.range(0, 6 * HOUR_NS);
        let len = match rng.next_u64() % 10 {
            0 => Interval::OPEN_END_NS - from,
            1 => rng.range(HOUR_NS + 1, 5 * HOUR_NS),
            2 => HOUR_NS,
            _ => rng.range(1, 600_000_000_000),
        };
        // Any kind but revision and conflict, whose links these random atoms do not have.
        let kinds: Vec<Kind> =
            Kind::ALL.iter().copied().filter(|k| !matches!(k, Kind::Revision | Kind::Conflict)).collect();
        let kind = kinds[(rng.next_u64() % kinds.len() as u64) as usize];
        let mut p = AtomParts::new(
            kind,
            frame,
            BoxMm { min_mm: min, max_mm: max },
            Interval { from_ns: from, to_ns: from + len },
            Permille((rng.next_u64() % 1001) as u16),
        );
        if rng.chance(700) {
            p.subject = format!("pallet-{}", rng.next_u64() % 12);
        }
        if !atoms.is_empty() && rng.chance(300) {
            let target = atoms[(rng.next_u64() % atoms.len() as u64) as usize].id();
            p.links.push(Link { rel: LinkRel::from_code((rng.next_u64() % 4) as u8).expect("rel"), target });
            let second = Link { rel: LinkRel::Supports, target: atoms[0].id() };
            if rng.chance(200) && p.links[0] != second {
                p.links.push(second);
            }
        }
        p.payload = sion_verify::atom::Payload::Text(format!("{}", atoms.len()));
        atoms.push(Atom::new(p).expect("valid"));
    }
    atoms
}

/// Copy a memory or ledger directory (its `LOCK` left behind), as a backup would.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else if entry.file_name() != "LOCK" {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}
