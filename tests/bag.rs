//! ROS 2 bags: the generated run is the same every time; replay takes every topic through
//! the live node's ingest; a damaged bag is named where it is damaged, and what came before
//! the damage is durable.

use std::collections::BTreeMap;
use std::io::Cursor;

use sion_memory::bag::replay::{ReplayError, ReplayOptions, replay};
use sion_memory::bag::synth::{SynthConfig, synth};
use sion_memory::bag::{BagReader, BagWriter, Event};
use sion_memory::ingest::cdr::Message as _;
use sion_memory::ingest::msgs::{Header, PoseStamped, Time};
use sion_memory::ingest::{Ingest, IngestConfig, Stream};
use sion_memory::memory::Memory;

#[path = "common/bags.rs"]
mod bags;
use bags::chunks;

fn bag(seconds: f64, seed: u64) -> Vec<u8> {
    let config = SynthConfig { seconds, seed, ..SynthConfig::default() };
    synth(Cursor::new(Vec::new()), &config).expect("synth").1.into_inner()
}

fn fresh() -> (tempfile::TempDir, Memory) {
    let dir = tempfile::tempdir().expect("tempdir");
    let memory = Memory::options(dir.path().join("m")).agent("robot").create().expect("memory");
    (dir, memory)
}

fn log_ids(memory: &Memory) -> Vec<String> {
    memory.log().scan(0).map(|r| r.expect("readable").1.id().to_string()).collect()
}

#[test]
fn the_generated_run_is_the_same_every_time() {
    let a = bag(12.0, 7);
    assert_eq!(a, bag(12.0, 7), "same configuration, same bytes");
    assert_ne!(a, bag(12.0, 8), "another seed, another run");
    let mut topics = BTreeMap::new();
    for event in BagReader::new(&a).expect("a bag") {
        if let Event::Message(m) = event.expect("readable") {
            *topics.entry(m.topic.name.clone()).or_insert(0) += 1;
        }
    }
    let expected: BTreeMap<String, i32> = [
        ("/camera/camera_info", 60),
        ("/camera/image_raw", 60),
        ("/map", 2),
        ("/odom", 600),
        ("/pose", 600),
        ("/tf", 600),
        ("/tf_static", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(topics, expected);
}

#[test]
fn replay_gives_the_atoms_the_live_ingest_gives() {
    let bytes = bag(12.0, 7);
    let (_dir, memory) = fresh();
    let report = replay(&bytes, &memory, ReplayOptions::default(), |_| {}).expect("replay");
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert!(report.skipped_bad.is_empty());
    assert!(report.topics.iter().all(|t| t.taken_as.is_ok()), "{:?}", report.topics);
    assert_eq!(report.messages, 1923);
    // Poses, odometry, TF, the statics (two), maps, frames, and the camera's calibration once
    // (the same camera_info with every frame).
    assert_eq!(report.atoms, 600 * 3 + 2 + 2 + 60 + 1);
    assert_eq!(memory.log().size(), report.atoms);

    // The node's intake: the same messages, one by one, through an Ingest configured as the
    // node's (its default topic names are the bag's).
    let mut ingest = Ingest::new(IngestConfig::default());
    let mut live = Vec::new();
    for event in BagReader::new(&bytes).expect("a bag") {
        let Event::Message(m) = event.expect("readable") else { continue };
        let stream = Stream::ALL
            .into_iter()
            .find(|s| s.default_topic() == m.topic.name)
            .expect("every topic of the run is a default topic");
        live.extend(ingest.take(stream, &m.data).ingested.into_iter().map(|i| i.atom));
    }
    live.extend(ingest.flush().ingested.into_iter().map(|i| i.atom));
    let live_ids: Vec<String> = live.iter().map(|a| a.id().to_string()).collect();
    assert_eq!(log_ids(&memory), live_ids, "atom for atom, in the same order");
    // Remembered as the node remembers them, they give the replayed log's root.
    let (_dir_live, node_memory) = fresh();
    node_memory.remember(live).expect("remember");
    assert_eq!(node_memory.log().head().root, memory.log().head().root, "the same log root both ways");

    // And replaying again into another memory gives the same log root.
    let (_dir2, again) = fresh();
    replay(&bytes, &again, ReplayOptions::default(), |_| {}).expect("replay");
    assert_eq!(again.log().head().root, memory.log().head().root);
}

#[test]
fn a_truncated_bag_keeps_what_came_before_the_cut() {
    let full = bag(12.0, 7);
    let cut = &full[..full.len() * 6 / 10];
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("m");
    let memory = Memory::options(&path).agent("robot").create().expect("memory");
    let failed = replay(cut, &memory, ReplayOptions::default(), |_| {}).expect_err("truncated");
    let message = failed.to_string();
    assert!(matches!(failed.error, ReplayError::Bag(_)), "{message}");
    assert!(message.contains("truncated") && message.contains("after the message on /"), "{message}");
    assert!(message.contains("at log time 1767225"), "{message}");
    let kept = failed.report.atoms;
    assert!(kept > 0, "atoms before the cut are kept");
    assert_eq!(memory.log().size(), kept);
    drop(memory);
    let reopened = Memory::options(&path).open().expect("reopen");
    assert_eq!(reopened.log().size(), kept, "and durable");

    let (_d, memory) = fresh();
    let options = ReplayOptions { skip_bad: true, ..ReplayOptions::default() };
    let report = replay(cut, &memory, options, |_| {}).expect("--skip-bad replays up to the cut");
    assert_eq!(report.atoms, kept);
    assert_eq!(report.skipped_bad.len(), 1, "{:?}", report.skipped_bad);
}

#[test]
fn a_corrupt_chunk_is_named_and_can_be_skipped() {
    // Larger frames, so the run spans several chunks.
    let config =
        SynthConfig { seconds: 12.0, camera_width: 640, camera_height: 480, ..SynthConfig::default() };
    let mut bytes = synth(Cursor::new(Vec::new()), &config).expect("synth").1.into_inner();
    let found = chunks(&bytes);
    assert!(found.len() >= 3, "{} chunks", found.len());
    let (start, end) = found[1];
    bytes[end - 100] ^= 0x55;

    let (_d, memory) = fresh();
    let failed = replay(&bytes, &memory, ReplayOptions::default(), |_| {}).expect_err("a bad chunk");
    assert!(
        matches!(&failed.error, ReplayError::DamagedChunk { offset, .. } if *offset == start as u64),
        "{}",
        failed
    );
    assert!(failed.report.atoms > 0);
    assert_eq!(memory.log().size(), failed.report.atoms);

    let (_d2, memory) = fresh();
    let options = ReplayOptions { skip_bad: true, ..ReplayOptions::default() };
    let report = replay(&bytes, &memory, options, |_| {}).expect("skipped");
    assert_eq!(report.skipped_bad.len(), 1, "{:?}", report.skipped_bad);
    assert!(report.skipped_bad[0].contains(&format!("at byte {start}")), "{:?}", report.skipped_bad);
    let (_d3, whole) = fresh();
    let all = replay(
        &synth(Cursor::new(Vec::new()), &config).expect("synth").1.into_inner(),
        &whole,
        ReplayOptions::default(),
        |_| {},
    )
    .expect("replay");
    assert!(report.atoms < all.atoms && report.atoms > all.atoms / 3, "{} of {}", report.atoms, all.atoms);
}

#[test]
fn bad_messages_and_foreign_schemas_are_named_by_topic_and_log_time() {
    let mut writer = BagWriter::new(Cursor::new(Vec::new())).expect("writer");
    let pose = writer.topic("/pose", PoseStamped::TYPE, false).expect("topic");
    let good = |sec| {
        PoseStamped {
            header: Header { stamp: Time { sec, nanosec: 0 }, frame_id: "map".into() },
            ..Default::default()
        }
        .to_cdr()
    };
    writer.write(pose, 1_000_000_000, &good(1)).expect("write");
    writer.write(pose, 2_000_000_000, &good(2)[..20]).expect("write"); // cut short
    writer.write(pose, 3_000_000_000, &good(3)).expect("write");
    let bytes = writer.finish().expect("finish").into_inner();

    let (_d, memory) = fresh();
    let failed = replay(&bytes, &memory, ReplayOptions::default(), |_| {}).expect_err("a bad message");
    let message = failed.to_string();
    assert!(message.contains("/pose") && message.contains("log time 2000000000"), "{message}");
    assert_eq!(memory.log().size(), 1, "the pose before it is kept");

    let (_d2, memory) = fresh();
    let options = ReplayOptions { skip_bad: true, ..ReplayOptions::default() };
    let report = replay(&bytes, &memory, options, |_| {}).expect("skipped");
    assert_eq!((report.atoms, report.skipped_bad.len()), (2, 1));
    assert_eq!(report.rejected.get("malformed_message"), Some(&1));

    // A schema that calls itself PoseStamped but defines other fields; a type the memory does
    // not take in.
    let mut mcap = mcap::Writer::new(Cursor::new(Vec::new())).expect("mcap");
    let fake = mcap.add_schema("geometry_msgs/msg/PoseStamped", "ros2msg", b"int32 x\n").expect("schema");
    let fake_channel = mcap.add_channel(fake, "/pose", "cdr", &BTreeMap::new()).expect("channel");
    let text = mcap.add_schema("std_msgs/msg/String", "ros2msg", b"string data\n").expect("schema");
    let text_channel = mcap.add_channel(text, "/chatter", "cdr", &BTreeMap::new()).expect("channel");
    for (channel, t) in [(text_channel, 5), (fake_channel, 7)] {
        let header =
            mcap::records::MessageHeader { channel_id: channel, sequence: 0, log_time: t, publish_time: t };
        mcap.write_to_known_channel(&header, &good(1)).expect("write");
    }
    mcap.finish().expect("finish");
    let bytes = mcap.into_inner().into_inner();
    let (_d3, memory) = fresh();
    let failed = replay(&bytes, &memory, ReplayOptions::default(), |_| {}).expect_err("a foreign schema");
    let message = failed.to_string();
    assert!(message.contains("topic /pose") && message.contains("log time 7"), "{message}");
    assert!(message.contains("int32 x"), "{message}");
    let chatter = &failed.report.topics.iter().find(|t| t.topic == "/chatter").expect("listed").taken_as;
    assert!(chatter.as_ref().is_err_and(|why| why.contains("not a type")), "{chatter:?}");
}

#[test]
fn a_file_that_is_not_a_bag_is_refused_as_such() {
    let (_d, memory) = fresh();
    let failed = replay(b"hello, world", &memory, ReplayOptions::default(), |_| {}).expect_err("not a bag");
    assert!(failed.to_string().contains("not an MCAP bag"), "{failed}");
}

#[test]
fn the_demo_bag_is_the_generated_run() {
    let stored =
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/bags/demo.mcap")).expect("bags/demo.mcap");
    let made = synth(Cursor::new(Vec::new()), &SynthConfig::default()).expect("synth").1.into_inner();
    assert!(stored == made, "bags/demo.mcap is not `sion bag synth --out bags/demo.mcap`: regenerate it");
}

#[test]
fn export_writes_atoms_heads_and_verified_answers_as_json_beside_foxglove_schemas() {
    use sion_memory::atom::BoxMm;
    use sion_memory::index::geom::Query;
    let bytes = bag(12.0, 7);
    let (dir, mut memory) = fresh();
    let report = replay(&bytes, &memory, ReplayOptions::default(), |_| {}).expect("replay");
    memory.commit(false).expect("commit");
    let query = Query::new(
        "map",
        BoxMm { min_mm: [0, 0, -1000], max_mm: [10_000, 5_000, 3000] },
        1_767_225_600_000_000_000,
        1_767_225_606_000_000_000,
    )
    .expect("a query");
    let proof = memory.prove_range(&query, None).expect("prove").encode();
    let answers = vec![("first six seconds".to_owned(), proof), ("junk".to_owned(), b"SIONPRF?".to_vec())];
    assert!(sion_memory::bag::export::export(&memory, Cursor::new(Vec::new()), &answers, |_| {}).is_err());
    let (summary, out) =
        sion_memory::bag::export::export(&memory, Cursor::new(Vec::new()), &answers[..1], |_| {})
            .expect("export");
    assert_eq!((summary.atoms, summary.heads, summary.answers), (report.atoms, 2, 1));
    let exported = out.into_inner();
    let mut topics: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    for m in mcap::MessageStream::new(&exported).expect("MCAP") {
        let m = m.expect("readable");
        let schema = m.channel.schema.as_ref().expect("a schema");
        // Foxglove's channels are read back by Foxglove's own packages (tests/viewers).
        if schema.name.starts_with("foxglove.") {
            assert_eq!(
                (schema.encoding.as_str(), m.channel.message_encoding.as_str()),
                ("protobuf", "protobuf")
            );
            continue;
        }
        assert_eq!((schema.encoding.as_str(), m.channel.message_encoding.as_str()), ("jsonschema", "json"));
        serde_json::from_slice::<serde_json::Value>(&schema.data).expect("the schema is JSON");
        topics
            .entry(m.channel.topic.clone())
            .or_default()
            .push(serde_json::from_slice(&m.data).expect("JSON"));
    }
    assert_eq!(topics["/sion/atoms"].len() as u64, report.atoms);
    assert_eq!(topics["/sion/atoms"][0]["position"], 0);
    assert_eq!(topics["/sion/heads"].last().expect("a head")["size"], report.atoms);
    let answer = &topics["/sion/answers"][0];
    assert_eq!(answer["valid"], true, "{answer}");
    assert_eq!(answer["kind"], "range");
    assert!(!answer["positions"].as_array().expect("positions").is_empty());
    drop(dir);
}

/// What `ros2 bag record` leaves: a directory with metadata.yaml and the run split in two
/// files, the second declaring its channels anew in another order (other channel ids).
/// `sion replay DIR` remembers exactly what the one file gives (the same log root); what is not
/// a bag is refused before a memory is made for it.
#[test]
fn a_rosbag2_directory_of_split_files_replays_as_the_one_bag() {
    let sion = env!("CARGO_BIN_EXE_sion");
    let run = |args: &[&str]| {
        let o = std::process::Command::new(sion).args(args).output().expect("sion");
        let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        (o.status.success(), text, o.stdout)
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let one = bag(6.0, 3);
    let single = tmp.path().join("run.mcap");
    std::fs::write(&single, &one).expect("write");
    let mut messages = Vec::new();
    for event in BagReader::new(&one).expect("a bag") {
        if let Event::Message(m) = event.expect("readable") {
            messages.push((m.topic.name.clone(), m.topic.message_type.clone(), m.log_time, m.data.to_vec()));
        }
    }
    let dir = tmp.path().join("run");
    std::fs::create_dir(&dir).expect("mkdir");
    let half = messages.len() / 2;
    for (i, part) in [&messages[..half], &messages[half..]].into_iter().enumerate() {
        let mut w = BagWriter::new(Cursor::new(Vec::new())).expect("writer");
        let mut names: Vec<(&String, &String)> = part.iter().map(|(t, ty, ..)| (t, ty)).collect();
        names.sort();
        names.dedup();
        if i == 1 {
            names.reverse();
        }
        let mut ids = BTreeMap::new();
        for (topic, ty) in names {
            let latched = topic == "/tf_static" || topic == "/map";
            ids.insert(topic.clone(), w.topic(topic, ty, latched).expect("topic"));
        }
        for (topic, _, t, data) in part {
            w.write(ids[topic], *t, data).expect("write");
        }
        std::fs::write(dir.join(format!("run_{i}.mcap")), w.finish().expect("finish").into_inner())
            .expect("write");
    }
    std::fs::write(
        dir.join("metadata.yaml"),
        "rosbag2_bagfile_information:\n  version: 9\n  storage_identifier: mcap\n  compression_format: \"\"\n  \
         compression_mode: \"\"\n  relative_file_paths:\n    - run_0.mcap\n    - run_1.mcap\n  files:\n    - path: run_0.mcap\n",
    )
    .expect("metadata");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let (ok, text, _) = run(&["replay", single.to_str().expect("utf8"), "--data", a.to_str().expect("utf8")]);
    assert!(ok, "{text}");
    let (ok, text, _) = run(&["replay", dir.to_str().expect("utf8"), "--data", b.to_str().expect("utf8")]);
    assert!(ok, "{text}");
    assert!(
        text.contains("2 files, replayed as one bag in the order its metadata.yaml lists them"),
        "{text}"
    );
    let root = |m: &std::path::Path| {
        let (ok, text, out) = run(&["memory", "show", "--data", m.to_str().expect("utf8"), "--json"]);
        assert!(ok, "{text}");
        let v: serde_json::Value = serde_json::from_slice(&out).expect("json");
        (v["committed"]["size"].clone(), v["committed"]["root"].clone())
    };
    assert_eq!(root(&a), root(&b));
    // Not a bag: refused, and no memory made for it.
    let notes = tmp.path().join("notes.txt");
    std::fs::write(&notes, "not a bag").expect("write");
    let c = tmp.path().join("c");
    let (ok, text, _) = run(&["replay", notes.to_str().expect("utf8"), "--data", c.to_str().expect("utf8")]);
    assert!(!ok && text.contains("is not a bag") && text.contains("MCAP magic"), "{text}");
    assert!(!c.exists(), "a memory was made for something that is not a bag");
    let (ok, text, _) = run(&[
        "replay",
        tmp.path().join("nothing").to_str().expect("utf8"),
        "--data",
        c.to_str().expect("utf8"),
    ]);
    assert!(!ok && !c.exists(), "{text}");
}

#[test]
fn a_bag_of_many_sensors_replays_each_topic_under_its_own_name() {
    use sion_memory::ingest::Source;
    use sion_memory::ingest::msgs::*;
    let header = |sec: i32, frame: &str| Header { stamp: Time { sec, nanosec: 0 }, frame_id: frame.into() };
    let tf = |child: &str, xyz: [f64; 3], rotation: Quaternion| TransformStamped {
        header: header(1, "base_link"),
        child_frame_id: child.into(),
        transform: Transform { translation: Vector3 { x: xyz[0], y: xyz[1], z: xyz[2] }, rotation },
    };
    let optical = Quaternion { x: -0.5, y: 0.5, z: -0.5, w: 0.5 };
    let mut statics = TfMessage {
        transforms: vec![
            tf("front", [0.0, 0.0, 1.0], optical),
            tf("rear", [0.0, 0.0, 1.0], Quaternion { x: -0.5, y: -0.5, z: 0.5, w: 0.5 }),
            tf("laser", [0.0, 0.0, 0.2], Quaternion::default()),
        ],
    };
    statics.transforms.push(TransformStamped {
        header: header(1, "map"),
        ..tf("base_link", [0.0; 3], Quaternion::default())
    });
    let info = |frame: &str| CameraInfo {
        header: header(2, frame),
        width: 640,
        height: 480,
        k: [500.0, 0.0, 320.0, 0.0, 500.0, 240.0, 0.0, 0.0, 1.0],
        ..Default::default()
    };
    let image = |frame: &str| Image {
        header: header(3, frame),
        width: 2,
        height: 1,
        encoding: "mono8".into(),
        is_bigendian: 0,
        step: 2,
        data: vec![1, 2],
    };
    let scan = LaserScan {
        header: header(3, "laser"),
        angle_increment: 0.1,
        range_min: 0.1,
        range_max: 8.0,
        ranges: vec![2.0, f32::INFINITY],
        ..Default::default()
    };
    let person = Detection3D {
        results: vec![ObjectHypothesisWithPose {
            hypothesis: ObjectHypothesis { class_id: "person".into(), score: 0.8 },
            ..Default::default()
        }],
        bbox: BoundingBox3D {
            center: Pose { position: Vector3 { x: 3.0, y: 0.0, z: 0.9 }, ..Default::default() },
            size: Vector3 { x: 0.5, y: 0.5, z: 1.8 },
        },
        ..Default::default()
    };
    let detections = Detection3DArray { header: header(3, "base_link"), detections: vec![person] };
    // geometry_msgs/Vector3 is no message the ingest reads: kept whole when named.
    let wind = {
        let mut w = sion_memory::ingest::cdr::Writer::new();
        [1.0, 2.0, 0.0].into_iter().for_each(|x| w.f64(x));
        w.finish()
    };

    let mut w = BagWriter::new(Cursor::new(Vec::new())).expect("writer");
    let put = |w: &mut BagWriter<Cursor<Vec<u8>>>, topic: &str, ty: &str, sec: u64, cdr: Vec<u8>| {
        let channel = w.topic(topic, ty, topic == "/tf_static").expect("topic");
        w.write(channel, sec * 1_000_000_000, &cdr).expect("write");
    };
    put(&mut w, "/tf_static", TfMessage::TYPE, 1, statics.to_cdr());
    for camera in ["front", "rear"] {
        put(&mut w, &format!("/{camera}/camera_info"), CameraInfo::TYPE, 2, info(camera).to_cdr());
        put(&mut w, &format!("/{camera}/image_raw"), Image::TYPE, 3, image(camera).to_cdr());
    }
    put(&mut w, "/scan", LaserScan::TYPE, 3, scan.to_cdr());
    put(&mut w, "/people", Detection3DArray::TYPE, 3, detections.to_cdr());
    put(&mut w, "/wind", "geometry_msgs/msg/Vector3", 3, wind.clone());
    put(&mut w, "/not_kept", "geometry_msgs/msg/Vector3", 3, wind);
    let bytes = w.finish().expect("finish").into_inner();

    let (_dir, memory) = fresh();
    let mut options = ReplayOptions::default();
    // `--keep /scan`: a type the memory reads is still taken in as such.
    options.ingest.sources = vec![Source::other("/wind", ""), Source::other("/scan", "")];
    let report = replay(&bytes, &memory, options, |_| {}).expect("replay");
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    let not_kept = report.topics.iter().find(|t| t.topic == "/not_kept").expect("listed");
    assert!(not_kept.taken_as.as_ref().is_err_and(|e| e.contains("--keep")), "{not_kept:?}");
    assert!(report.topics.iter().filter(|t| t.topic != "/not_kept").all(|t| t.taken_as.is_ok()));
    // Four transforms, two calibrations, two frames, a scan, a person, the wind.
    assert_eq!(report.atoms, 4 + 2 + 2 + 1 + 1 + 1);
    let atoms: Vec<_> = memory.log().scan(0).map(|r| r.expect("readable").1).collect();
    let by_model = |model: &str| {
        atoms
            .iter()
            .find(|a| a.parts().extractor.as_ref().is_some_and(|e| e.model == model))
            .unwrap_or_else(|| panic!("an atom from {model}"))
    };
    let front = by_model("sensor_msgs/msg/Image@/front/image_raw").parts();
    let rear = by_model("sensor_msgs/msg/Image@/rear/image_raw").parts();
    assert!(front.bounds.max_mm[0] > 0 && rear.bounds.min_mm[0] < 0, "one looks ahead, one behind");
    assert_eq!(by_model("sensor_msgs/msg/LaserScan@/scan").parts().kind, sion_memory::atom::Kind::Coverage);
    let seen = by_model("vision_msgs/msg/Detection3DArray@/people").parts();
    assert_eq!(
        (seen.subject.as_str(), seen.bounds.min_mm, seen.bounds.max_mm),
        ("person", [2_750, -250, 0], [3_250, 250, 1_800])
    );
    let kept = by_model("geometry_msgs/msg/Vector3@/wind").parts();
    assert_eq!((kept.subject.as_str(), kept.bounds.min_mm), ("/wind", [0, 0, 0]));
    assert!(matches!(kept.payload, sion_memory::atom::Payload::Blob(_)));
}
