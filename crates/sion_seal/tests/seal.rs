//! Sealing, opening, forgetting and wrapping, and their refusals (docs/SEAL.md).

use sion_seal::{Cover, MemberKey, SealError, SealKind, Sealed, Wrapped};
use sion_verify::atom::{AtomParts, BoxMm, Interval, Kind, Permille};

const SPACE: [u8; 32] = [7; 32];

fn frame_atom(n: i64) -> AtomParts {
    let mut p = AtomParts::new(
        Kind::Observation,
        "map",
        BoxMm { min_mm: [n, 0, 0], max_mm: [n + 100, 100, 100] },
        Interval { from_ns: n, to_ns: n + 1 },
        Permille(900),
    );
    p.subject = "camera".into();
    p
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn a_sealed_payload_opens_for_its_atom_only() {
    let cover = Cover::new(3, [9; 32]);
    let atom = frame_atom(1);
    let bytes =
        Sealed::seal(SealKind::Payload, &SPACE, &cover, 5, &atom, b"a person at the door").expect("seal");
    let sealed = Sealed::decode(&bytes).expect("decode");
    assert_eq!((sealed.epoch, sealed.leaf), (3, 5));
    assert_eq!(sealed.open(SealKind::Payload, &SPACE, &cover, &atom).expect("open"), b"a person at the door");
    assert!(!contains(&bytes, b"a person"), "the plaintext is in the sealed bytes");
    // Moved to another atom, opened as a blob, a byte changed, another epoch or space: refused.
    let other = frame_atom(2);
    assert_eq!(
        sealed.open(SealKind::Payload, &SPACE, &cover, &other),
        Err(SealError::Open { what: "sealed payload" })
    );
    assert!(matches!(sealed.open(SealKind::Blob, &SPACE, &cover, &atom), Err(SealError::Open { .. })));
    let mut tampered = bytes.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    let t = Sealed::decode(&tampered).expect("decode");
    assert!(matches!(t.open(SealKind::Payload, &SPACE, &cover, &atom), Err(SealError::Open { .. })));
    let later = Cover::new(4, [9; 32]);
    assert!(matches!(
        sealed.open(SealKind::Payload, &SPACE, &later, &atom),
        Err(SealError::OtherEpoch { .. })
    ));
    assert!(matches!(
        sealed.open(SealKind::Payload, &[8; 32], &cover, &atom),
        Err(SealError::OtherEpoch { .. })
    ));
    // A leaf byte changed: the associated data differs, so it does not open.
    let mut moved = bytes.clone();
    moved[45] ^= 1;
    let m = Sealed::decode(&moved).expect("decode");
    assert!(matches!(m.open(SealKind::Payload, &SPACE, &cover, &atom), Err(SealError::Open { .. })));
    // Truncated or not sealed bytes at all.
    assert!(matches!(Sealed::decode(&bytes[..40]), Err(SealError::Format { .. })));
    assert!(matches!(
        Sealed::decode(b"SIONSEAX......................................................"),
        Err(SealError::Format { .. })
    ));
}

#[test]
fn forgetting_a_leaf_leaves_no_key_that_derives_it_and_every_other_leaf_readable() {
    let seed = [42u8; 32];
    let full = Cover::new(1, seed);
    let atoms: Vec<AtomParts> = (0..64).map(frame_atom).collect();
    let sealed: Vec<Vec<u8>> = (0..64u32)
        .map(|i| {
            Sealed::seal(
                SealKind::Blob,
                &SPACE,
                &full,
                i,
                &atoms[i as usize],
                format!("frame {i}").as_bytes(),
            )
            .expect("seal")
        })
        .collect();
    let forgotten_key = full.leaf_key(17).expect("key");
    let mut cover = full.clone();
    cover.forget_leaf(17);
    assert!(cover.nodes().len() <= 32, "{} nodes", cover.nodes().len());
    let stored = cover.encode();
    // Nothing the key store keeps derives leaf 17: not its key, not the seed, not any node above it.
    assert!(!contains(&stored, &forgotten_key));
    assert!(!contains(&stored, &seed));
    assert_eq!(cover.leaf_key(17), Err(SealError::Forgotten { epoch: 1, leaf: 17 }));
    let reread = Cover::decode(&stored).expect("decode");
    for i in 0..64u32 {
        let s = Sealed::decode(&sealed[i as usize]).expect("decode");
        let opened = s.open(SealKind::Blob, &SPACE, &reread, &atoms[i as usize]);
        if i == 17 {
            assert!(matches!(opened, Err(SealError::Forgotten { leaf: 17, .. })), "{opened:?}");
        } else {
            assert_eq!(opened.expect("another leaf opens"), format!("frame {i}").as_bytes());
        }
    }
}

#[test]
fn retention_forgets_a_range_in_a_few_nodes() {
    let full = Cover::new(0, [5; 32]);
    let mut cover = full.clone();
    // Every frame before 1,000,000 forgotten, then a few more in the middle.
    cover.forget(0, 1_000_000);
    cover.forget(2_000_000, 2_000_010);
    assert!(cover.nodes().len() <= 64, "{} nodes", cover.nodes().len());
    for leaf in [0u32, 999_999, 2_000_000, 2_000_009] {
        assert!(cover.leaf_key(leaf).is_err(), "leaf {leaf} still derives");
    }
    for leaf in [1_000_000u32, 1_999_999, 2_000_010, u32::MAX] {
        assert_eq!(cover.leaf_key(leaf).expect("kept"), full.leaf_key(leaf).expect("full"), "leaf {leaf}");
    }
    // Random forgets: what is kept derives as from the seed, what is forgotten does not.
    let mut x: u64 = 0x9E37_79B9;
    let mut gone = std::collections::BTreeSet::new();
    let mut c = Cover::new(2, [6; 32]);
    let whole = c.clone();
    for _ in 0..200 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let leaf = (x % 4096) as u32;
        c.forget_leaf(leaf);
        gone.insert(leaf);
    }
    let c = Cover::decode(&c.encode()).expect("round trip");
    for leaf in 0..4096u32 {
        match c.leaf_key(leaf) {
            Ok(k) => {
                assert!(!gone.contains(&leaf));
                assert_eq!(k, whole.leaf_key(leaf).expect("whole"));
            }
            Err(_) => assert!(gone.contains(&leaf), "leaf {leaf} lost without being forgotten"),
        }
    }
}

#[test]
fn a_damaged_key_store_is_refused() {
    let mut c = Cover::new(0, [1; 32]);
    c.forget_leaf(3);
    let bytes = c.encode();
    assert!(matches!(Cover::decode(&bytes[..bytes.len() - 1]), Err(SealError::Format { .. })));
    // Two nodes swapped: out of leaf order.
    let mut swapped = bytes.clone();
    let (a, b) = (16, 16 + 37);
    let first: Vec<u8> = swapped[a..a + 37].to_vec();
    let second: Vec<u8> = swapped[b..b + 37].to_vec();
    swapped[a..a + 37].copy_from_slice(&second);
    swapped[b..b + 37].copy_from_slice(&first);
    assert!(matches!(Cover::decode(&swapped), Err(SealError::Format { .. })));
}

#[test]
fn an_epochs_cover_wrapped_to_a_member_opens_for_that_member_only() {
    let alice = MemberKey::from_seed([11; 32]);
    let bob = MemberKey::generate().expect("key");
    let mut cover = Cover::new(4, [77u8; 32]);
    cover.forget(5, 6);
    let wrapped = Wrapped::wrap(&SPACE, &cover, &alice.public()).expect("wrap");
    let n = cover.encode().len();
    assert_eq!(wrapped.encode().len(), 8 + 1 + 32 + 4 + 32 + 4 + 1120 + n + 16);
    let again = Wrapped::decode(wrapped.encode()).expect("decode");
    assert_eq!(again.epoch, 4);
    let opened = again.unwrap_for(&alice).expect("alice");
    assert_eq!(opened, cover, "the cover, punctured as it was: leaf 5 does not come back");
    assert!(opened.leaf_key(5).is_err());
    // Reopened from its seed file, the same member.
    assert_eq!(again.unwrap_for(&MemberKey::from_seed(alice.seed())).expect("alice again"), cover);
    assert!(matches!(again.unwrap_for(&bob), Err(SealError::BadKey(_))));
    // Truncated (at every length short of whole), tampered, another epoch in the header.
    for cut in [0, 8, 80, 81, 1000, wrapped.encode().len() - 1] {
        assert!(
            matches!(Wrapped::decode(&wrapped.encode()[..cut]), Err(SealError::Format { .. })),
            "cut {cut}"
        );
    }
    let mut t = wrapped.encode().to_vec();
    let len = t.len();
    t[len - 20] ^= 1;
    assert!(matches!(Wrapped::decode(&t).expect("decode").unwrap_for(&alice), Err(SealError::Open { .. })));
    let mut e = wrapped.encode().to_vec();
    e[41] ^= 1; // the epoch is bound
    assert!(matches!(Wrapped::decode(&e).expect("decode").unwrap_for(&alice), Err(SealError::Open { .. })));
    let mut big = wrapped.encode().to_vec();
    big[77..81].copy_from_slice(&u32::MAX.to_le_bytes()); // a length past any cover
    assert!(matches!(Wrapped::decode(&big), Err(SealError::Format { .. })));
    let mut v1 = wrapped.encode().to_vec();
    v1[8] = 1;
    let e = Wrapped::decode(&v1).expect_err("version 1");
    assert!(e.to_string().contains("version 1"), "{e}");
    // Not a key.
    assert!(matches!(Wrapped::wrap(&SPACE, &cover, &[0; 100]), Err(SealError::BadKey(_))));
}

#[test]
fn a_leaf_key_wrapped_to_a_member_opens_that_payload_only() {
    let alice = MemberKey::from_seed([12; 32]);
    let bob = MemberKey::from_seed([13; 32]);
    let cover = Cover::new(0, [5; 32]);
    let atoms: Vec<_> = (0..2).map(frame_atom).collect();
    let sealed = Sealed::seal(SealKind::Payload, &SPACE, &cover, 3, &atoms[0], b"a face").expect("seal");
    let key = cover.leaf_key(3).expect("leaf");
    let id = sion_seal::bare_id(&atoms[0]).expect("id");
    let w = sion_seal::WrappedLeaf::wrap(&SPACE, 0, 3, &id, &key, &alice.public()).expect("wrap");
    assert_eq!(w.encode().len(), 1281);
    let w = sion_seal::WrappedLeaf::decode(w.encode()).expect("decode");
    let got = w.unwrap_for(&alice).expect("alice");
    let s = Sealed::decode(&sealed).expect("decode");
    assert_eq!(s.open_with_key(SealKind::Payload, &got, &atoms[0]).expect("opens"), b"a face");
    assert!(s.open_with_key(SealKind::Payload, &got, &atoms[1]).is_err(), "moved to another atom");
    assert!(matches!(w.unwrap_for(&bob), Err(SealError::BadKey(_))));
    let mut t = w.encode().to_vec();
    t[46] ^= 1; // the leaf number, bound
    assert!(matches!(
        sion_seal::WrappedLeaf::decode(&t).expect("decode").unwrap_for(&alice),
        Err(SealError::Open { .. })
    ));
    assert!(sion_seal::WrappedLeaf::decode(&w.encode()[..1280]).is_err());
}

#[test]
fn the_sub_filter_undoes_itself() {
    for bytes in
        [vec![], vec![1], vec![1, 2, 3], (0..1000u32).map(|i| (i * 7 % 256) as u8).collect::<Vec<_>>()]
    {
        let mut filtered = sion_seal::sub3(&bytes);
        assert_eq!(filtered.len(), bytes.len());
        sion_seal::unsub3(&mut filtered);
        assert_eq!(filtered, bytes);
    }
    assert_eq!(sion_seal::sub3(&[10, 20, 30, 11, 22, 33]), vec![10, 20, 30, 1, 2, 3]);
}
