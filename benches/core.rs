//! Criterion benchmarks of each layer: atoms, the durable log, range proofs, the index, ingest.
//!
//!     cargo bench --bench core                        # every group
//!     cargo bench --bench core -- proof               # one group (criterion's filter)
//!     SION_BENCH_ATOMS=20000 cargo bench --bench core -- --test   # each once, as CI does
//!
//! The proof and index groups run on the seed's workload (`sim::MonthInAWarehouse`, a
//! 1 km × 1 km × 30 m warehouse over 30 days) with SION_BENCH_ATOMS atoms, 100,000 by default,
//! and the same 25 queries a row as `examples/proof_sizes.rs` asks at that size. The examples
//! keep the tables that compare with the seed and with peers; these are for tracking changes
//! from one run to the next. Setup (atoms generated, logs written, indexes built or cloned)
//! stays outside the timed routines.

use std::hint::black_box;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use criterion::{
    BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use sion_memory::atom::{Atom, AtomParts, BoxMm, Kind};
use sion_memory::index::Index;
use sion_memory::index::geom::Query;
use sion_memory::ingest::cdr::Message;
use sion_memory::ingest::msgs::{
    CameraInfo, Header, Image, Pose, PoseStamped, Quaternion, TfMessage, Time, Transform, TransformStamped,
    Vector3,
};
use sion_memory::ingest::{Ingest, IngestConfig, Stream};
use sion_memory::log::{Log, LogOptions};
use sion_memory::memory::Memory;
use sion_memory::proof::{Expect, Question};
use sion_memory::sim::{MONTH_NS, MonthInAWarehouse, SplitMix64, WAREHOUSE_MM, Warehouse, WarehouseConfig};

/// Atoms in the log the proof and index groups run on, unless SION_BENCH_ATOMS says otherwise.
const DEFAULT_ATOMS: u64 = 100_000;
/// Queries a row, as in examples/proof_sizes.rs.
const QUERIES: usize = 25;
const HOUR_NS: i64 = 3_600_000_000_000;
/// Atoms a durable append hands over at once (examples/log_bench.rs's default).
const APPEND_BATCH: usize = 1024;
/// A fresh log is started once the one being appended to holds this many atoms, so a long
/// run does not fill the disk.
const LOG_ROLLOVER: u64 = 1 << 18;
/// Atoms of one commit folded onto the built index.
const COMMIT: usize = 1_000;

/// The seed's four query rows: box in metres and hours.
const ROWS: [([i64; 3], i64); 4] =
    [([10, 10, 3], 1), ([50, 50, 10], 1), ([100, 100, 30], 6), ([200, 200, 30], 24)];

fn row_name((size_m, hours): ([i64; 3], i64)) -> String {
    format!("{}x{}x{}m_{hours}h", size_m[0], size_m[1], size_m[2])
}

/// The seed's workload: `n` atoms and the 20,000 that follow them, as proof_sizes makes it.
struct Month {
    atoms: Vec<Atom>,
    later: Vec<Atom>,
    /// Each row's queries, drawn as proof_sizes draws them.
    queries: Vec<Vec<Query>>,
}

fn month() -> &'static Month {
    static MONTH: OnceLock<Month> = OnceLock::new();
    MONTH.get_or_init(|| {
        let n: u64 = match std::env::var("SION_BENCH_ATOMS") {
            Ok(v) => v.parse().expect("SION_BENCH_ATOMS: a number of atoms"),
            Err(_) => DEFAULT_ATOMS,
        };
        eprintln!("generating {n} atoms of a month in a warehouse…");
        let mut workload = MonthInAWarehouse::new(n + 20_000, 2026);
        let start_ns = workload.start_ns();
        let mut atoms: Vec<Atom> = workload.by_ref().collect();
        let later = atoms.split_off(n as usize);
        let mut rng = SplitMix64::new(7);
        let queries = ROWS
            .iter()
            .map(|(size_m, hours)| {
                let size_mm = size_m.map(|m| m * 1_000);
                (0..QUERIES)
                    .map(|_| {
                        let min = [
                            rng.range(0, WAREHOUSE_MM[0] - size_mm[0] + 1),
                            rng.range(0, WAREHOUSE_MM[1] - size_mm[1] + 1),
                            rng.range(0, WAREHOUSE_MM[2] - size_mm[2] + 1),
                        ];
                        let bounds = BoxMm {
                            min_mm: min,
                            max_mm: [min[0] + size_mm[0], min[1] + size_mm[1], min[2] + size_mm[2]],
                        };
                        let t0 = start_ns + rng.range(0, MONTH_NS - hours * HOUR_NS);
                        Query::new("map", bounds, t0, t0 + hours * HOUR_NS).expect("a valid query")
                    })
                    .collect()
            })
            .collect();
        Month { atoms, later, queries }
    })
}

/// Atoms of the small warehouse run (poses, observations, map tiles), as a robot makes them.
fn warehouse_atoms(n: usize) -> Vec<Atom> {
    Warehouse::new(WarehouseConfig::default()).take(n).collect()
}

fn atom(c: &mut Criterion) {
    let atoms = warehouse_atoms(1024);
    let parts: Vec<AtomParts> = atoms.iter().map(|a| a.parts().clone()).collect();
    let bytes: Vec<Vec<u8>> = atoms.iter().map(|a| a.bytes().to_vec()).collect();
    let mut group = c.benchmark_group("atom");
    group.throughput(Throughput::Elements(atoms.len() as u64));
    // Atom::new takes its parts: each batch gets its own copy, made before the clock starts.
    group.bench_function("encode", |b| {
        b.iter_batched(
            || parts.clone(),
            |parts| parts.into_iter().map(|p| Atom::new(p).expect("valid parts")).collect::<Vec<_>>(),
            BatchSize::LargeInput,
        )
    });
    group.bench_function("decode", |b| {
        b.iter_with_large_drop(|| {
            bytes.iter().map(|b| Atom::decode(black_box(b)).expect("canonical bytes")).collect::<Vec<_>>()
        })
    });
    group.finish();
}

/// A log being appended to, replaced by a fresh one when it has grown large.
struct Appending {
    // Declared before its directory, so it is closed before the directory is removed.
    log: Log,
    _dir: tempfile::TempDir,
    /// Observations only, like log_bench: every one is new, so none is skipped as a duplicate
    /// (and none of the old log's reaches the fresh one).
    supply: Box<dyn Iterator<Item = Atom>>,
}

fn fresh_log() -> (Log, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (log, _) = Log::create(&dir.path().join("log"), LogOptions::default()).expect("a new log");
    (log, dir)
}

impl Appending {
    fn new() -> Self {
        let (log, _dir) = fresh_log();
        let supply = Warehouse::new(WarehouseConfig::default()).filter(|a| a.kind() == Kind::Observation);
        Self { log, _dir, supply: Box::new(supply) }
    }

    fn next_batch(&mut self) -> (Log, Vec<Atom>) {
        if self.log.size() >= LOG_ROLLOVER {
            (self.log, self._dir) = fresh_log();
        }
        let batch: Vec<Atom> = self.supply.by_ref().take(APPEND_BATCH).collect();
        (self.log.clone(), batch)
    }
}

fn log(c: &mut Criterion) {
    let mut group = c.benchmark_group("log");
    group.throughput(Throughput::Elements(APPEND_BATCH as u64));
    // Milliseconds an append (one fsync each): fewer, flat samples keep the run short.
    group.sampling_mode(SamplingMode::Flat).sample_size(30).measurement_time(Duration::from_secs(5));
    let mut appending: Option<Appending> = None;
    group.bench_function(BenchmarkId::new("durable_append", APPEND_BATCH), |b| {
        let appending = appending.get_or_insert_with(Appending::new);
        // One batch at a time: each append is made durable before the next is set up.
        b.iter_batched(
            || appending.next_batch(),
            |(log, batch)| log.append(batch).expect("append"),
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

/// A memory holding the month's atoms, committed, and its ledger's key.
struct Proving {
    memory: Memory,
    key: ed25519_dalek::VerifyingKey,
    _dir: tempfile::TempDir,
}

impl Proving {
    fn new(month: &Month) -> Self {
        eprintln!("writing {} atoms to a memory and committing them…", month.atoms.len());
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut memory = Memory::options(dir.path().join("memory")).create().expect("a memory");
        for chunk in month.atoms.chunks(8192) {
            memory.remember(chunk.to_vec()).expect("remember");
        }
        memory.commit(false).expect("commit");
        let key = memory.ledger().public_key();
        Self { memory, key, _dir: dir }
    }

    /// A row's proofs as a reader receives them.
    fn prove(&mut self, queries: &[Query]) -> Vec<Vec<u8>> {
        queries.iter().map(|q| self.memory.prove_range(q, None).expect("prove").encode()).collect()
    }
}

fn proof(c: &mut Criterion) {
    let mut group = c.benchmark_group("proof");
    // Each iteration answers a row's 25 queries: throughput is queries a second.
    group.throughput(Throughput::Elements(QUERIES as u64));
    let mut proving: Option<Proving> = None;
    for (row, query_row) in ROWS.into_iter().enumerate() {
        let name = row_name(query_row);
        group.bench_function(BenchmarkId::new("build", &name), |b| {
            let month = month();
            let proving = proving.get_or_insert_with(|| Proving::new(month));
            let queries = &month.queries[row];
            // What the node does for a reader: walk the committed index, read the answer's
            // atoms from the log, attach the ledger's attestation, encode the proof file.
            b.iter(|| proving.prove(black_box(queries)))
        });
        group.bench_function(BenchmarkId::new("verify", &name), |b| {
            let month = month();
            let proving = proving.get_or_insert_with(|| Proving::new(month));
            let queries = &month.queries[row];
            let files = proving.prove(queries);
            let expects: Vec<Expect> =
                queries.iter().map(|q| Expect::answer(Question::Range(q.clone()))).collect();
            let key = proving.key;
            // What a reader does: decode, check the attestation's signature by the ledger's key
            // (which examples/proof_sizes leaves out), the walks, and the question asked.
            b.iter(|| {
                for (file, expect) in files.iter().zip(&expects) {
                    black_box(sion_memory::proof::verify(black_box(file), &key, expect).expect("valid"));
                }
            })
        });
    }
    group.finish();
}

fn index(c: &mut Criterion) {
    let mut group = c.benchmark_group("index");
    group.throughput(Throughput::Elements(COMMIT as u64));
    // Every iteration starts from an index built afresh, outside the clock and costlier than
    // what is timed: fewer, flat samples keep the run short.
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(50)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(5));
    // The commit after the month: what a resident index takes in next.
    group.bench_function(BenchmarkId::new("fold", COMMIT), |b| {
        let month = month();
        let commit = &month.later[..COMMIT];
        b.iter_batched(
            || Index::build(&month.atoms).expect("build"),
            |mut index| {
                index.fold_all(black_box(commit)).expect("fold");
                index
            },
            BatchSize::PerIteration,
        )
    });
    group.bench_function(BenchmarkId::new("seal", COMMIT), |b| {
        let month = month();
        let commit = &month.later[..COMMIT];
        b.iter_batched(
            || {
                let mut index = Index::build(&month.atoms).expect("build");
                index.fold_all(commit).expect("fold");
                index
            },
            |mut index| (index.seal().expect("seal"), index),
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

fn header(sec: i32, nanosec: u32, frame: &str) -> Header {
    Header { stamp: Time { sec, nanosec }, frame_id: frame.into() }
}

fn transform(header: Header, child: &str, xyz: [f64; 3], rotation: Quaternion) -> TransformStamped {
    TransformStamped {
        header,
        child_frame_id: child.into(),
        transform: Transform { translation: Vector3 { x: xyz[0], y: xyz[1], z: xyz[2] }, rotation },
    }
}

/// A robot at (10 m, 5 m) in the map facing +y, with a calibrated 640 × 480 camera 1 m up
/// (as tests/ingest.rs sets one up), its odometry stamped at 100 s.
fn robot_with_camera() -> Ingest {
    let mut ingest = Ingest::new(IngestConfig::default());
    let optical = Quaternion { x: -0.5, y: 0.5, z: -0.5, w: 0.5 };
    let half = std::f64::consts::FRAC_PI_4;
    let facing_y = Quaternion { x: 0.0, y: 0.0, z: half.sin(), w: half.cos() };
    let statics = TfMessage {
        transforms: vec![
            transform(header(0, 0, "map"), "odom", [0.0; 3], Quaternion::default()),
            transform(header(0, 0, "base_link"), "camera", [0.0, 0.0, 1.0], optical),
        ],
    };
    let odom = TfMessage {
        transforms: vec![transform(header(100, 0, "odom"), "base_link", [10.0, 5.0, 0.0], facing_y)],
    };
    let info = CameraInfo {
        header: header(0, 0, "camera"),
        width: 640,
        height: 480,
        k: [500.0, 0.0, 320.0, 0.0, 500.0, 240.0, 0.0, 0.0, 1.0],
        ..Default::default()
    };
    for (stream, bytes) in [
        (Stream::TfStatic, statics.to_cdr()),
        (Stream::Tf, odom.to_cdr()),
        (Stream::CameraInfo, info.to_cdr()),
    ] {
        assert!(ingest.take(stream, &bytes).rejected().next().is_none(), "{stream:?} refused");
    }
    ingest
}

/// The odometry a robot broadcasts on /tf at 100 Hz: message `i` of a drive along x, with
/// the localisation's map → odom beside it.
fn tf_message(i: u64) -> Vec<u8> {
    let t_ns = 1_000_000_000_000 + i * 10_000_000;
    let stamp = header((t_ns / 1_000_000_000) as i32, (t_ns % 1_000_000_000) as u32, "odom");
    let x = (i % 100_000) as f64 * 0.01;
    TfMessage {
        transforms: vec![
            transform(
                Header { frame_id: "map".into(), ..stamp.clone() },
                "odom",
                [0.5, -0.25, 0.0],
                Quaternion::default(),
            ),
            transform(stamp, "base_link", [x, 2.0, 0.0], Quaternion::default()),
        ],
    }
    .to_cdr()
}

fn ingest(c: &mut Criterion) {
    let mut group = c.benchmark_group("ingest");

    let pose = PoseStamped {
        header: header(12, 500, "map"),
        pose: Pose {
            position: Vector3 { x: 1.2345, y: -0.0005, z: 0.0 },
            orientation: Quaternion::default(),
        },
    }
    .to_cdr();
    let mut poses = Ingest::new(IngestConfig::default());
    assert_eq!(poses.take(Stream::Pose, &pose).ingested.len(), 1, "a pose becomes an atom");
    group.bench_function("pose_stamped", |b| b.iter(|| poses.take(Stream::Pose, black_box(&pose))));

    // Each message is stamped 10 ms after the last, so the transform buffer stays at its
    // steady size (10 s of history); the messages are encoded before the clock starts.
    let mut transforms = Ingest::new(IngestConfig::default());
    let mut next = 0u64;
    assert_eq!(transforms.take(Stream::Tf, &tf_message(next)).ingested.len(), 2, "two transforms, two atoms");
    group.bench_function("tf_message_2_transforms", |b| {
        b.iter_custom(|iters| {
            let messages: Vec<Vec<u8>> = (0..iters).map(|k| tf_message(next + 1 + k)).collect();
            next += iters;
            let started = Instant::now();
            for m in &messages {
                black_box(transforms.take(Stream::Tf, black_box(m)));
            }
            started.elapsed()
        })
    });

    // A VGA frame: its observation's box is the camera's frustum in the map, and its payload
    // commits to the message's bytes, which are hashed.
    let image = Image {
        header: header(100, 0, "camera"),
        width: 640,
        height: 480,
        encoding: "rgb8".into(),
        is_bigendian: 0,
        step: 640 * 3,
        data: (0..640 * 480 * 3).map(|i| (i % 251) as u8).collect(),
    }
    .to_cdr();
    let mut camera = robot_with_camera();
    let taken = camera.take(Stream::Image, &image);
    assert!(
        taken.rejected().next().is_none() && taken.ingested.len() == 1,
        "the frame becomes an observation"
    );
    group.throughput(Throughput::Bytes(image.len() as u64));
    group.bench_function("image_640x480_rgb8", |b| b.iter(|| camera.take(Stream::Image, black_box(&image))));
    group.finish();
}

criterion_group!(benches, atom, log, proof, index, ingest);
criterion_main!(benches);
