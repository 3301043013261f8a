//! Pictures for the Rerun viewer: a recording of a memory and an answer holds the trajectory,
//! the atoms, the map, the camera, the query, the proof's tree nodes and whether the proof
//! verified, and reads back as such; a tampered proof is drawn as one that does not verify.
#![cfg(feature = "viz")]

use std::collections::BTreeMap;
use std::io::{BufReader, Cursor};
use std::path::Path;
use std::process::Command;

use re_log_encoding::DecoderApp;
use rerun::archetypes::TextDocument;
use rerun::log::{Chunk, LogMsg};
use sion_memory::atom::BoxMm;
use sion_memory::bag::replay::{ReplayOptions, replay};
use sion_memory::bag::synth::{SynthConfig, synth};
use sion_memory::index::geom::Query;
use sion_memory::memory::Memory;
use sion_memory::proof::{Proof, ProofFile};
use sion_memory::viz::{draw_answer, draw_memory};

const START_NS: i64 = 1_767_225_600_000_000_000;

/// A memory of a short generated run, committed, and a proved answer over its first seconds.
fn memory_and_answer(dir: &Path) -> (Memory, ProofFile) {
    let config = SynthConfig { seconds: 12.0, seed: 7, ..SynthConfig::default() };
    let bag = synth(Cursor::new(Vec::new()), &config).expect("synth").1.into_inner();
    let mut memory = Memory::options(dir.join("m")).agent("robot").create().expect("memory");
    replay(&bag, &memory, ReplayOptions::default(), |_| {}).expect("replay");
    memory.commit(false).expect("commit");
    let query = Query::new(
        "map",
        BoxMm { min_mm: [0, 0, -1000], max_mm: [6_000, 5_000, 3000] },
        START_NS,
        START_NS + 4_000_000_000,
    )
    .expect("a query");
    let file = memory.prove_range(&query, None).expect("prove");
    (memory, file)
}

/// Each entity path in an .rrd with its row count (the layout's entities prefixed
/// `blueprint:`), and the text of its text documents.
fn read_back(path: &Path) -> (BTreeMap<String, usize>, BTreeMap<String, String>) {
    let file = std::fs::File::open(path).expect("the recording");
    let (mut rows, mut texts) = (BTreeMap::new(), BTreeMap::new());
    for msg in DecoderApp::decode_lazy(BufReader::new(file)) {
        let LogMsg::ArrowMsg(store, arrow) = msg.expect("a well-formed .rrd") else { continue };
        let chunk = Chunk::from_arrow_msg(&arrow).expect("a chunk");
        let mut entity = chunk.entity_path().to_string().trim_start_matches('/').to_owned();
        if store.kind() == rerun::StoreKind::Blueprint {
            entity = format!("blueprint:{entity}");
        }
        *rows.entry(entity.clone()).or_default() += chunk.num_rows();
        for batch in
            chunk.iter_component::<rerun::components::Text>(TextDocument::descriptor_text().component)
        {
            for text in batch.iter() {
                texts.insert(entity.clone(), text.as_str().to_owned());
            }
        }
    }
    (rows, texts)
}

fn record(
    path: &Path,
    memory: &Memory,
    file: &ProofFile,
) -> (sion_memory::viz::MemoryDrawn, sion_memory::viz::AnswerDrawn) {
    let rec = rerun::RecordingStreamBuilder::new("sion_memory_test").save(path).expect("a recording");
    let memory_drawn =
        draw_memory(&rec, memory.log(), memory.blobs(), "map", u64::MAX, |_| {}).expect("draw the memory");
    let drawn = draw_answer(&rec, file, Some(&memory.ledger().public_key()), &|_, b| {
        memory.blobs().get(&b.hash).ok().map(|bytes| (b.media_type.clone(), bytes))
    })
    .expect("draw the answer");
    sion_memory::viz::send_blueprint(&rec, &drawn.cameras, true).expect("the layout");
    rec.flush_blocking().expect("flush");
    drop(rec);
    (memory_drawn, drawn)
}

#[test]
fn a_recording_holds_the_run_the_answer_and_the_proof() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (memory, file) = memory_and_answer(dir.path());
    let verified = file.verify(None).expect("the answer verifies");
    let sion_memory::proof::Claim::Range { atoms, .. } = &verified.claim else { panic!("a range claim") };
    assert!(!atoms.is_empty());

    let path = dir.path().join("answer.rrd");
    let (drawn_memory, drawn) = record(&path, &memory, &file);
    assert_eq!(drawn.rejected, None);
    assert!(drawn.frames > 0 && drawn.cameras == ["camera"], "{drawn:?}");
    assert_eq!(drawn.answer, atoms.len() as u64);
    assert!(drawn.expanded > 0 && drawn.pruned > 0, "{drawn:?}");

    let (rows, texts) = read_back(&path);
    for entity in [
        "world/trajectory/robot",
        "world/atoms/pose/robot",
        "world/atoms/observation/_",
        "world/atoms/map_tile/map",
        "world/map",
        "map/tile",
        "frames/camera",
        "world/cameras/camera",
        "world/cameras/camera/image",
        "answer/frames/camera",
        "world/query",
        "world/answer",
        "world/proof/short_lived/opened",
        "world/proof/short_lived/passed_over",
        "proof/summary",
        "legend",
        "memory/summary",
        "blueprint:viewport",
    ] {
        assert!(rows.contains_key(entity), "{entity} is missing from {:?}", rows.keys().collect::<Vec<_>>());
    }
    // Every pose is on the timeline (12 s at 50 Hz): those in the map, and those in odom drawn
    // through the memory's transforms; every camera frame too, each in its frustum.
    assert_eq!(rows["world/atoms/pose/robot"], 1200);
    assert_eq!(rows["frames/camera"], 60);
    assert_eq!((drawn_memory.images, drawn_memory.frusta), (60, 60));
    // One atom is listed as not drawn, with why: the static transform from base_link to the
    // camera, recorded before base_link was connected to the map.
    assert_eq!(
        drawn_memory.not_drawn.iter().map(|((f, why), n)| (f.as_str(), why.as_str(), *n)).collect::<Vec<_>>(),
        [("base_link", "no transform connects it to \"map\" at its time", 1)]
    );
    assert!(drawn_memory.through_transforms >= 600, "{drawn_memory:?}");
    // The layout: a 3D view without the proof and one with it, the verdict, the frames that
    // answered, the legend; the time panel on valid time.
    let views =
        rows.keys().filter(|k| k.starts_with("blueprint:view/") && !k.contains("/ViewContents")).count();
    assert!(views >= 5, "{:?}", rows.keys().filter(|k| k.starts_with("blueprint:")).collect::<Vec<_>>());
    assert!(
        texts["legend"].contains("amber") && texts["legend"].contains("passed over"),
        "{}",
        texts["legend"]
    );
    assert!(texts["memory/summary"].contains("through the transforms"), "{}", texts["memory/summary"]);
    let summary = &texts["proof/summary"];
    assert!(summary.contains("The proof verifies"), "{summary}");
    assert!(summary.contains(&format!("answer: {} atoms", atoms.len())), "{summary}");
}

#[test]
fn a_tampered_proof_is_drawn_as_one_that_does_not_verify() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (memory, mut file) = memory_and_answer(dir.path());
    let Proof::Range { range, .. } = &mut file.proof else { panic!("a range proof") };
    range.atoms.pop().expect("an answer to drop from");
    let path = dir.path().join("tampered.rrd");
    let (_, drawn) = record(&path, &memory, &file);
    assert!(drawn.rejected.is_some(), "{drawn:?}");
    let (_, texts) = read_back(&path);
    assert!(texts["proof/summary"].contains("does NOT verify"), "{}", texts["proof/summary"]);
}

#[test]
fn sion_viz_writes_a_recording_of_the_demo_bag_and_says_how_to_open_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("m");
    let sion = env!("CARGO_BIN_EXE_sion");
    let bag = Path::new(env!("CARGO_MANIFEST_DIR")).join("bags/demo.mcap");
    let replayed = Command::new(sion).arg("replay").arg(&bag).arg("--data").arg(&data).output().expect("run");
    assert!(replayed.status.success(), "{}", String::from_utf8_lossy(&replayed.stderr));
    let out = dir.path().join("demo.rrd");
    let viz = Command::new(sion)
        .args(["viz", "--box", "0,0,-1000,10000,8000,3000", "--out"])
        .arg(&out)
        .arg("--data")
        .arg(&data)
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&viz.stdout);
    assert!(viz.status.success(), "{stdout}{}", String::from_utf8_lossy(&viz.stderr));
    assert!(stdout.contains("verified"), "{stdout}");
    assert!(stdout.contains("rerun "), "{stdout}");
    let (rows, _) = read_back(&out);
    assert!(rows.contains_key("world/answer") && rows.contains_key("world/trajectory/robot"));
}
