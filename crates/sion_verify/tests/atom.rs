//! Atoms: canonical encoding, the JSON form, and validation that names the field at fault.

use proptest::prelude::*;
use sion_verify::atom::{
    Atom, AtomError, AtomId, AtomParts, BlobRef, BoxMm, Evidence, Extractor, Interval, JsonError, Kind, Link,
    LinkRel, Payload, Permille, limits,
};

const EXAMPLE: &str = r#"{"kind":"observation","frame":"map","min":[1000,2000,0],"max":[1500,2600,1200],"from":1700000000000000000,"to":1700000001000000000,"confidence":900,"subject":"pallet-17"}"#;

fn field_of(err: &AtomError) -> &str {
    match err {
        AtomError::Invalid { field, .. } => field,
        other => panic!("expected a field error, got {other:?}"),
    }
}

fn rejected(edit: impl FnOnce(&mut AtomParts)) -> String {
    let mut parts = Atom::from_json(EXAMPLE).expect("example").into_parts();
    edit(&mut parts);
    let err = Atom::new(parts).expect_err("must be rejected");
    field_of(&err).to_owned()
}

#[test]
fn the_issue_example_parses_and_round_trips() {
    let atom = Atom::from_json(EXAMPLE).expect("valid");
    assert_eq!(atom.kind(), Kind::Observation);
    assert_eq!(atom.parts().subject, "pallet-17");
    assert_eq!(atom.parts().bounds.max_mm, [1500, 2600, 1200]);
    assert_eq!(atom.id(), AtomId::of_encoding(atom.bytes()));
    let line = atom.to_json_line(Some(7));
    assert!(line.starts_with(&format!(r#"{{"id":"{}","position":7,"kind":"observation""#, atom.id())));
    let again = Atom::from_json(&line).expect("output parses back");
    assert_eq!(again, atom);
    assert_eq!(Atom::decode(atom.bytes()).expect("decodes"), atom);
}

#[test]
fn a_wrong_id_is_refused() {
    let atom = Atom::from_json(EXAMPLE).expect("valid");
    let line = atom.to_json_line(None).replace("pallet-17", "pallet-18");
    assert!(matches!(Atom::from_json(&line), Err(JsonError::IdMismatch { .. })));
}

#[test]
fn every_limit_names_its_field() {
    assert_eq!(rejected(|p| p.bounds.max_mm[1] = p.bounds.min_mm[1] - 1), "max[1]");
    assert_eq!(rejected(|p| p.bounds.min_mm[2] = limits::MAX_COORD_MM + 1), "min[2]");
    assert_eq!(rejected(|p| p.bounds.max_mm[0] = i64::MAX), "max[0]");
    assert_eq!(rejected(|p| p.bounds.min_mm[0] = i64::MIN), "min[0]");
    assert_eq!(rejected(|p| p.valid.to_ns = p.valid.from_ns), "to");
    assert_eq!(rejected(|p| p.valid.to_ns = p.valid.from_ns - 1), "to");
    assert_eq!(rejected(|p| p.valid.from_ns = -1), "from");
    assert_eq!(rejected(|p| p.confidence = Permille(1001)), "confidence");
    assert_eq!(rejected(|p| p.frame.clear()), "frame");
    assert_eq!(rejected(|p| p.frame = "map frame".into()), "frame");
    assert_eq!(rejected(|p| p.frame = "f".repeat(limits::MAX_FRAME_BYTES + 1)), "frame");
    assert_eq!(rejected(|p| p.subject = "s".repeat(limits::MAX_SUBJECT_BYTES + 1)), "subject");
    assert_eq!(rejected(|p| p.subject = "line\nbreak".into()), "subject");
    assert_eq!(rejected(|p| p.sources = vec![AtomId([1; 32]); 2]), "sources[1]");
    assert_eq!(
        rejected(|p| p.sources = (0..=255u8).chain([0]).map(|i| AtomId([i; 32])).collect()),
        "sources"
    );
    assert_eq!(
        rejected(|p| p.evidence = vec![Evidence { source: AtomId([1; 32]), start: 9, end: 3 }]),
        "evidence[0]"
    );
    assert_eq!(
        rejected(|p| p.extractor = Some(Extractor { model: String::new(), code: String::new() })),
        "extractor"
    );
    assert_eq!(
        rejected(|p| p.extractor = Some(Extractor { model: "m".repeat(300), code: String::new() })),
        "extractor.model"
    );
    let link = Link { rel: LinkRel::Supports, target: AtomId([3; 32]) };
    assert_eq!(rejected(|p| p.links = vec![link, link]), "links[1]");
    assert_eq!(rejected(|p| p.kind = Kind::Revision), "links");
    assert_eq!(
        rejected(|p| {
            p.kind = Kind::Conflict;
            p.links = vec![Link { rel: LinkRel::Contradicts, target: AtomId([3; 32]) }];
        }),
        "links"
    );
    assert_eq!(
        rejected(|p| p.payload = Payload::Public(vec![0; limits::MAX_INLINE_PAYLOAD_BYTES + 1])),
        "payload.public"
    );
    for bad in
        ["jpeg", "image/", "image/jpeg;", "image/jpeg; q", "image/jpeg; =1", "image/jpeg; a=\"b\"", "a b/c"]
    {
        let blob = BlobRef { hash: [0; 32], size: 1, media_type: bad.into() };
        assert_eq!(rejected(|p| p.payload = Payload::Blob(blob)), "payload.blob.media_type", "{bad}");
    }
    for good in
        ["image/jpeg", "application/x-ros2-cdr; type=sensor_msgs/msg/Image", "text/plain;charset=utf-8"]
    {
        let mut parts = Atom::from_json(EXAMPLE).expect("example").into_parts();
        parts.payload = Payload::Blob(BlobRef { hash: [0; 32], size: 1, media_type: good.into() });
        assert!(Atom::new(parts).is_ok(), "{good}");
    }
}

#[test]
fn json_that_is_not_integers_is_refused() {
    for bad in [
        EXAMPLE.replace("[1000,2000,0]", "[1000.5,2000,0]"),
        EXAMPLE.replace("[1000,2000,0]", "[NaN,2000,0]"),
        EXAMPLE.replace("[1000,2000,0]", "[1e400,2000,0]"),
        EXAMPLE.replace("[1000,2000,0]", "[1000,2000]"),
        EXAMPLE.replace("\"confidence\":900", "\"confidence\":-1"),
        EXAMPLE.replace("\"confidence\":900", "\"confidence\":70000"),
        EXAMPLE.replace("1700000001000000000", "99999999999999999999"),
        EXAMPLE.replace("\"subject\"", "\"subjet\""),
        EXAMPLE.replace("observation", "sighting"),
        "{}".to_owned(),
        "not json".to_owned(),
    ] {
        assert!(Atom::from_json(&bad).is_err(), "accepted {bad}");
    }
    let err = Atom::from_json(&EXAMPLE.replace("observation", "sighting")).expect_err("unknown kind");
    assert!(err.to_string().starts_with("kind:"), "{err}");
    let err = Atom::from_json(&EXAMPLE.replace("\"subject\"", "\"subjet\"")).expect_err("unknown field");
    assert!(err.to_string().contains("subjet"), "{err}");
}

#[test]
fn every_kind_has_a_distinct_code_and_name() {
    assert_eq!(Kind::ALL.len(), 17);
    for (i, k) in Kind::ALL.iter().enumerate() {
        assert_eq!(usize::from(k.code()), i);
        assert_eq!(Kind::from_code(k.code()), Some(*k));
        assert_eq!(Kind::from_name(k.as_str()), Some(*k));
    }
    assert_eq!(Kind::from_code(17), None);
}

#[test]
fn the_encoding_is_pinned() {
    // Written by hand from docs/ATOM.md (struct.pack('<6q2qH', ...) reproduces it). A change
    // here changes every atom id: bump the encoding version instead.
    let atom = Atom::from_json(EXAMPLE).expect("valid");
    let expected = concat!(
        "010a03",
        "6d6170", // version, kind, frame
        "e803000000000000",
        "d007000000000000",
        "0000000000000000", // min
        "dc05000000000000",
        "280a000000000000",
        "b004000000000000", // max
        "00002a36fe9c9717",
        "00cac471fe9c9717", // from, to
        "8403",
        "0900",
        "70616c6c65742d3137", // confidence, subject
        "0000",
        "0000",
        "00",
        "0000",
        "00", // sources .. payload
    );
    assert_eq!(hex::encode(atom.bytes()), expected);
    assert_eq!(atom.id().0, *blake3::hash(&hex::decode(expected).expect("hex")).as_bytes());
}

/// The worked example of version 2 (docs/ATOM.md): the example atom disputed by a revision.
#[test]
fn the_version_2_encoding_is_pinned() {
    let target = Atom::from_json(EXAMPLE).expect("valid");
    let line = format!(
        r#"{{"kind":"revision","frame":"map","min":[1000,2000,0],"max":[1500,2600,1200],"from":1700000000000000000,"to":1700000001000000000,"confidence":1000,"links":[{{"rel":"disputes","target":"{}"}}]}}"#,
        target.id()
    );
    let atom = Atom::from_json(&line).expect("a revision");
    let expected = format!(
        "{}{}{}",
        concat!(
            "020803",
            "6d6170", // version 2, revision, frame
            "e803000000000000",
            "d007000000000000",
            "0000000000000000", // min
            "dc05000000000000",
            "280a000000000000",
            "b004000000000000", // max
            "00002a36fe9c9717",
            "00cac471fe9c9717", // from, to
            "e803",
            "0000", // confidence 1000, no subject
            "0000",
            "0000",
            "00", // no sources, evidence, extractor
            "0100",
            "05", // one link: disputes
        ),
        target.id(),
        "00" // no payload
    );
    assert_eq!(hex::encode(atom.bytes()), expected);
    assert_eq!(
        atom.id().to_string(),
        "7f294b17628eafefd177bc1a7c94dc52fc0b4590df5a43ac3f2b3048f8c33f23",
        "the id of docs/ATOM.md's version 2 example"
    );
}

fn arb_id() -> impl Strategy<Value = AtomId> {
    any::<[u8; 32]>().prop_map(AtomId)
}

prop_compose! {
    fn arb_parts()(
        kind in 0u8..17,
        frame in "[A-Za-z0-9_./-]{1,20}",
        a in proptest::array::uniform3(-limits::MAX_COORD_MM..=limits::MAX_COORD_MM),
        b in proptest::array::uniform3(-limits::MAX_COORD_MM..=limits::MAX_COORD_MM),
        from in 0i64..i64::MAX - 1,
        len in 1i64..1_000_000_000_000,
        confidence in 0u16..=1000,
        subject in "\\PC{0,30}",
        sources in proptest::collection::hash_set(arb_id(), 0..4),
        evidence in proptest::collection::vec((arb_id(), any::<u32>(), any::<u32>()), 0..3),
        extractor in proptest::option::of(("[a-z0-9@:]{1,12}", "[a-z0-9 .]{0,12}")),
        links in proptest::collection::hash_set((0u8..4, arb_id()), 2..5),
        payload in prop_oneof![
            Just(Payload::None),
            "\\PC{0,40}".prop_map(Payload::Text),
            proptest::collection::vec(any::<u8>(), 0..64).prop_map(Payload::Public),
            proptest::collection::vec(any::<u8>(), 0..64).prop_map(Payload::Encrypted),
            (any::<[u8; 32]>(), any::<u64>()).prop_map(|(hash, size)| Payload::Blob(BlobRef { hash, size, media_type: "image/jpeg".into() })),
        ],
    ) -> AtomParts {
        let mut links: Vec<Link> = links.into_iter().map(|(r, target)| Link { rel: LinkRel::from_code(r).expect("rel"), target }).collect();
        let kind = Kind::from_code(kind).expect("kind");
        if kind == Kind::Conflict {
            for l in links.iter_mut() { l.rel = LinkRel::Contradicts; }
        }
        let min_mm = [a[0].min(b[0]), a[1].min(b[1]), a[2].min(b[2])];
        let max_mm = [a[0].max(b[0]), a[1].max(b[1]), a[2].max(b[2])];
        AtomParts {
            kind,
            frame,
            bounds: BoxMm { min_mm, max_mm },
            valid: Interval { from_ns: from, to_ns: from.saturating_add(len) },
            confidence: Permille(confidence),
            subject,
            sources: sources.into_iter().collect(),
            evidence: evidence.into_iter().map(|(source, x, y)| Evidence { source, start: u64::from(x.min(y)), end: u64::from(x.max(y)) }).collect(),
            extractor: extractor.map(|(model, code)| Extractor { model, code }),
            links,
            payload,
        }
    }
}

proptest! {
    #[test]
    fn binary_and_json_round_trip(parts in arb_parts()) {
        let atom = Atom::new(parts.clone()).expect("generated parts are valid");
        prop_assert_eq!(atom.parts(), &parts);
        let decoded = Atom::decode(atom.bytes()).expect("decodes");
        prop_assert_eq!(&decoded, &atom);
        let line = atom.to_json_line(None);
        let from_json = Atom::from_json(&line).expect("JSON parses");
        prop_assert_eq!(from_json.bytes(), atom.bytes());
        prop_assert_eq!(from_json.to_json_line(None), line);
    }

    #[test]
    fn damaged_encodings_are_errors_not_panics(parts in arb_parts(), at in any::<prop::sample::Index>(), bit in 0u8..8, cut in any::<prop::sample::Index>()) {
        let atom = Atom::new(parts).expect("valid");
        let mut flipped = atom.bytes().to_vec();
        let i = at.index(flipped.len());
        flipped[i] ^= 1 << bit;
        if let Ok(other) = Atom::decode(&flipped) {
            // A flip can land on another valid atom, never on the same id.
            prop_assert_ne!(other.id(), atom.id());
        }
        let cut = cut.index(atom.bytes().len());
        prop_assert!(Atom::decode(&atom.bytes()[..cut]).is_err());
        let mut longer = atom.bytes().to_vec();
        longer.push(0);
        prop_assert!(matches!(Atom::decode(&longer), Err(AtomError::TrailingBytes(1))));
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = Atom::decode(&bytes);
    }
}

/// Revision states (docs/ATOM.md, "Revisions"): `accepts`, `disputes`, `retracts` and
/// `refutes` need encoding version 2 and are a revision's alone; every other atom keeps
/// version 1, its bytes and its id.
#[test]
fn revision_states_are_version_2_and_a_revision_has_one_state() {
    let target = Atom::from_json(EXAMPLE).expect("example");
    let mut p = target.parts().clone();
    p.kind = Kind::Revision;
    p.subject = String::new();
    for (rel, version) in [
        (LinkRel::Supersedes, 1u8),
        (LinkRel::Accepts, 2),
        (LinkRel::Disputes, 2),
        (LinkRel::Retracts, 2),
        (LinkRel::Refutes, 2),
    ] {
        p.links = vec![Link { rel, target: target.id() }];
        let a = Atom::new(p.clone()).expect("a revision");
        assert_eq!(a.bytes()[0], version, "{rel}");
        assert_eq!(Atom::decode(a.bytes()).expect("decodes"), a);
        let line = a.to_json_line(None);
        assert!(line.contains(&format!(r#""rel":"{rel}""#)), "{line}");
        assert_eq!(Atom::from_json(&line).expect("JSON").bytes(), a.bytes());
        // The other version byte: refused, naming the version.
        let mut other = a.bytes().to_vec();
        other[0] = 3 - version;
        assert_eq!(field_of(&Atom::decode(&other).expect_err("wrong version")), "version");
    }
    // One state a revision: `accepts` beside `refutes` is refused, naming the link.
    p.links = vec![
        Link { rel: LinkRel::Accepts, target: target.id() },
        Link { rel: LinkRel::Supports, target: AtomId([7; 32]) },
        Link { rel: LinkRel::Refutes, target: AtomId([8; 32]) },
    ];
    let e = Atom::new(p.clone()).expect_err("two states");
    assert_eq!(field_of(&e), "links[2]");
    assert!(e.to_string().contains("one state"), "{e}");
    // A state of version 2 on a claim: refused.
    let mut claim = target.parts().clone();
    claim.links = vec![Link { rel: LinkRel::Accepts, target: AtomId([7; 32]) }];
    assert_eq!(rejected(|q| *q = claim), "links[0]");
    // Version 3: unknown.
    let mut three = target.bytes().to_vec();
    three[0] = 3;
    assert!(matches!(Atom::decode(&three), Err(AtomError::Version(3))));
}
