//! Damaged bags, as a disk or a recorder leaves them, through `sion replay` as a user runs it:
//! whatever a chunk's bytes say, the process never aborts or panics, names the damaged chunk
//! by byte offset, keeps what came before it durable and, with `--skip-bad`, what comes after.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::{Command, Output};

use sion_memory::bag::replay::{ReplayOptions, replay};
use sion_memory::bag::synth::{SynthConfig, synth};
use sion_memory::ingest::cdr::Message as _;
use sion_memory::ingest::msgs::{Header, Odometry, PoseStamped, Time};
use sion_memory::memory::Memory;

#[path = "common/bags.rs"]
mod bags;
use bags::chunks;

fn sion(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sion")).args(args).output().expect("sion runs")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn log_size(data: &Path) -> u64 {
    Memory::options(data).open().map(|m| m.log().size()).unwrap_or(0)
}

/// A chunk's body: start and end times (16 bytes), uncompressed size (8), CRC (4), the
/// compression's name (4 + 4 for "zstd"), the records' length (8), the records.
const UNCOMPRESSED_SIZE: usize = 9 + 16;
const COMPRESSION: usize = 9 + 28;
const RECORDS: usize = 9 + 44;

/// What is damaged, the byte's offset in the bag, and what the byte becomes.
type Damage = (String, usize, fn(u8) -> u8);

#[test]
fn no_byte_of_a_chunk_aborts_or_panics_a_replay_and_the_good_chunks_are_kept() {
    let config =
        SynthConfig { seconds: 12.0, camera_width: 640, camera_height: 480, ..SynthConfig::default() };
    let good = synth(Cursor::new(Vec::new()), &config).expect("synth").1.into_inner();
    let found = chunks(&good);
    assert!(found.len() >= 3, "{} chunks", found.len());
    let (start, end) = found[1];
    let dir = tempfile::tempdir().expect("tempdir");

    // What the chunks before the damaged one hold: the bag cut just before it.
    let prefix = dir.path().join("prefix.mcap");
    std::fs::write(&prefix, &good[..start]).expect("write");
    let data = dir.path().join("m-prefix");
    let out = sion(&[
        "replay",
        "--skip-bad",
        "--data",
        data.to_str().expect("utf-8"),
        prefix.to_str().expect("utf-8"),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let before = log_size(&data);
    let data = dir.path().join("m-whole");
    let whole = dir.path().join("whole.mcap");
    std::fs::write(&whole, &good).expect("write");
    let out = sion(&["replay", "--data", data.to_str().expect("utf-8"), whole.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", text(&out));
    let all = log_size(&data);
    assert!(before > 0 && before < all, "{before} of {all}");

    // Each way a chunk can lie: a declared size of exabytes, a size a little off, an unknown
    // compression, and flips through the zstd frame (its header, its blocks, its end). Before
    // chunks were unpacked by chunk.rs, zstd bytes 6 and 12 aborted the process (an allocation
    // of exabytes, sized from the frame's header).
    let mut damages: Vec<Damage> = vec![
        ("declares exabytes".into(), start + UNCOMPRESSED_SIZE + 7, |_| 0x40),
        ("declares 1 TB".into(), start + UNCOMPRESSED_SIZE + 5, |b| b ^ 0x01),
        ("declares a byte more".into(), start + UNCOMPRESSED_SIZE, |b| b ^ 0x01),
        ("compression zstx".into(), start + COMPRESSION + 7, |_| b'x'),
    ];
    for k in [0usize, 4, 5, 6, 9, 12, 40, 200, 5_000] {
        damages.push((format!("zstd byte {k} flipped"), start + RECORDS + k, |b| b ^ 0xff));
    }
    for k in [1usize, 4, 9, 100] {
        damages.push((format!("the chunk's byte {k} from its end"), end - k, |b| b ^ 0x5a));
    }
    for (i, (what, at, damage)) in damages.iter().enumerate() {
        let mut bytes = good.clone();
        bytes[*at] = damage(bytes[*at]);
        let bag = dir.path().join(format!("damaged-{i}.mcap"));
        std::fs::write(&bag, &bytes).expect("write");

        // Without --skip-bad: stops at the chunk, names it, keeps what came before.
        let data = dir.path().join(format!("m-{i}"));
        let out = sion(&["replay", "--data", data.to_str().expect("utf-8"), bag.to_str().expect("utf-8")]);
        let said = text(&out);
        assert_eq!(out.status.signal(), None, "{what}: killed by a signal: {said}");
        assert!(!said.contains("panicked"), "{what}: {said}");
        assert_eq!(out.status.code(), Some(1), "{what}: {said}");
        assert!(said.contains(&format!("chunk at byte {start}")), "{what}: the chunk is named: {said}");
        assert!(log_size(&data) >= before, "{what}: the chunks before it are kept: {said}");

        // With it: goes on past the chunk, keeps what comes after.
        let data = dir.path().join(format!("m-{i}-skip"));
        let out = sion(&[
            "replay",
            "--skip-bad",
            "--data",
            data.to_str().expect("utf-8"),
            bag.to_str().expect("utf-8"),
        ]);
        let said = text(&out);
        assert_eq!(out.status.signal(), None, "{what}: killed by a signal: {said}");
        assert!(!said.contains("panicked"), "{what}: {said}");
        assert!(out.status.success(), "{what}: {said}");
        assert!(said.contains(&format!("chunk at byte {start}")), "{what}: the skip is reported: {said}");
        let kept = log_size(&data);
        assert!(kept > before && kept < all, "{what}: {kept} atoms kept of {all}, {before} before the chunk");
    }
}

fn schema(message_type: &str) -> Vec<u8> {
    sion_memory::ingest::schema::definition(message_type).expect("a known type").into_bytes()
}

/// Poses for 200 s; odometry from 100 s, its channel declared in the chunk of its first
/// message. Small chunks, so the run spans many.
fn two_topics() -> Vec<u8> {
    let options = mcap::WriteOptions::new()
        .profile("ros2")
        .compression(Some(mcap::Compression::Zstd))
        .chunk_size(Some(2048));
    let mut mcap = options.create(Cursor::new(Vec::new())).expect("mcap");
    let pose_schema =
        mcap.add_schema(PoseStamped::TYPE, "ros2msg", &schema(PoseStamped::TYPE)).expect("schema");
    let pose = mcap.add_channel(pose_schema, "/pose", "cdr", &BTreeMap::new()).expect("channel");
    let mut odom = None;
    for s in 1..=200u32 {
        let t = u64::from(s) * 1_000_000_000;
        let header = Header { stamp: Time { sec: s as i32, nanosec: 0 }, frame_id: "map".into() };
        let mut message = PoseStamped { header: header.clone(), ..Default::default() };
        message.pose.position.x = f64::from(s);
        let h = mcap::records::MessageHeader { channel_id: pose, sequence: s, log_time: t, publish_time: t };
        mcap.write_to_known_channel(&h, &message.to_cdr()).expect("write");
        if s >= 100 {
            let channel = match odom {
                Some(c) => c,
                None => {
                    let id =
                        mcap.add_schema(Odometry::TYPE, "ros2msg", &schema(Odometry::TYPE)).expect("schema");
                    let c = mcap.add_channel(id, "/odom", "cdr", &BTreeMap::new()).expect("channel");
                    odom = Some(c);
                    c
                }
            };
            let mut message = Odometry { header, child_frame_id: "base_link".into(), ..Default::default() };
            message.pose.pose.position.y = f64::from(s);
            let h = mcap::records::MessageHeader {
                channel_id: channel,
                sequence: s,
                log_time: t,
                publish_time: t,
            };
            mcap.write_to_known_channel(&h, &message.to_cdr()).expect("write");
        }
    }
    mcap.finish().expect("finish");
    mcap.into_inner().into_inner()
}

#[test]
fn a_channel_declared_in_a_damaged_chunk_does_not_stop_the_replay() {
    let mut bytes = two_topics();
    // The chunk that declares /odom.
    let (start, end) = chunks(&bytes)
        .into_iter()
        .find(|&(s, e)| {
            let body = &bytes[s + 9..e];
            let Ok(mcap::records::Record::Chunk { header, data }) = mcap::read::parse_record(0x06, body)
            else {
                return false;
            };
            sion_memory::bag::chunk::unpack(&header, &data).is_ok_and(|records| {
                records.iter().any(|r| matches!(r, mcap::records::Record::Channel(c) if c.topic == "/odom"))
            })
        })
        .expect("a chunk declares /odom");
    bytes[end - 20] ^= 0x5a;
    let skip = || ReplayOptions { skip_bad: true, ..ReplayOptions::default() };

    // The summary declares /odom again: its later messages are read.
    let dir = tempfile::tempdir().expect("tempdir");
    let memory = Memory::options(dir.path().join("a")).agent("robot").create().expect("memory");
    let report = replay(&bytes, &memory, skip(), |_| {}).expect("replayed");
    let odom = report.topics.iter().find(|t| t.topic == "/odom").map_or(0, |t| t.messages);
    assert!(odom > 50, "odometry after the damaged chunk is read: {odom}; {:?}", report.skipped_bad);
    assert_eq!(report.skipped_bad.len(), 1, "{:?}", report.skipped_bad);
    assert!(report.skipped_bad[0].contains(&format!("chunk at byte {start}")), "{:?}", report.skipped_bad);

    // Without a summary it can trust (its CRC fails), the messages on /odom are counted and
    // skipped, and the poses after the chunk are still kept.
    let footer = bytes.len() - 8 - 29;
    let summary_start =
        u64::from_le_bytes(bytes[footer + 9..footer + 17].try_into().expect("8 bytes")) as usize;
    assert!(summary_start > end);
    bytes[summary_start + 12] ^= 0x01;
    let memory = Memory::options(dir.path().join("b")).agent("robot").create().expect("memory");
    let report = replay(&bytes, &memory, skip(), |_| {}).expect("replayed");
    assert!(
        report.skipped_bad.iter().any(|s| s.contains("never declared") && s.contains("damaged chunk")),
        "{:?}",
        report.skipped_bad
    );
    let poses = report.topics.iter().find(|t| t.topic == "/pose").map_or(0, |t| t.messages);
    assert!(poses > 150, "the poses after the damaged chunk are kept: {poses}");
    assert_eq!(memory.log().size(), report.atoms);
}
