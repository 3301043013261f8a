//! `sion bag synth` and `sion replay`: ROS 2 bags in, without a ROS install.

use std::fs::File;
use std::io::{BufWriter, Seek as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use sion_memory::bag::BagReader;
use sion_memory::bag::replay::{ReplayOptions, ReplayReport, replay_parts};
use sion_memory::bag::synth::{SynthConfig, synth};
use sion_memory::ingest::{IngestConfig, Source};
use sion_memory::memory::Memory;

use crate::ui;

#[derive(Subcommand)]
pub enum BagCommand {
    /// Write a generated warehouse robot run as a ROS 2 bag (MCAP, CDR): poses, odometry,
    /// TF, occupancy-grid maps, camera frames and camera info; pallets move between visits.
    /// The same options give the same bag, byte for byte.
    Synth(SynthArgs),
}

#[derive(Args)]
pub struct SynthArgs {
    /// The bag to write.
    #[arg(long)]
    out: PathBuf,
    /// Length of the run [s].
    #[arg(long, default_value_t = 90.0)]
    seconds: f64,
    /// The same seed gives the same run.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Camera resolution, WIDTHxHEIGHT.
    #[arg(long, default_value = "160x120")]
    camera: String,
    /// Camera frames per second.
    #[arg(long, default_value_t = 5.0)]
    camera_hz: f64,
    /// Write plain chunks instead of zstd ones: the bag is as large as what it holds (camera
    /// frames at full size), as rosbag2 writes without a compression preset.
    #[arg(long)]
    uncompressed: bool,
}

#[derive(Args)]
pub struct ReplayArgs {
    /// The bag: a rosbag2 directory (metadata.yaml and its MCAP files, split ones replayed as
    /// one, in order) or one .mcap file; CDR messages, as `ros2 bag record` writes them.
    bag: PathBuf,
    /// The memory directory (created if it holds no memory yet; not made for what is not a bag).
    #[arg(long, env = "SION_DATA")]
    data: PathBuf,
    /// Count messages that do not decode, topics whose schema differs and damaged chunks,
    /// and go on; a truncated bag is replayed up to the cut.
    #[arg(long)]
    skip_bad: bool,
    /// The frame camera observations are placed in.
    #[arg(long, default_value = "map")]
    fixed_frame: String,
    /// The robot's name: the subject of its pose atoms.
    #[arg(long, default_value = "robot")]
    robot: String,
    /// Keep this topic's messages whole (a topic of a type the memory does not read), each an
    /// observation at the robot's place (--robot-frame in --fixed-frame) at its log time, as
    /// the node's topics.other does; repeat for more topics. Topics of the types the memory
    /// reads (poses, transforms, maps, cameras, scans, clouds, IMU, GNSS, detections) are taken
    /// in as such, named here or not.
    #[arg(long = "keep", value_name = "TOPIC")]
    keep: Vec<String>,
    /// The robot's own frame, where --keep topics' messages are placed.
    #[arg(long, default_value = "base_link")]
    robot_frame: String,
    /// Do not commit a head after the replay (answers are as of committed heads).
    #[arg(long)]
    no_commit: bool,
    /// Make a new memory sealed (docs/SEAL.md): frames and tiles sealed in its space, and the
    /// retention below applied as it goes (an existing memory keeps what it is).
    #[arg(long)]
    sealed: bool,
    /// A sealed memory keeps at most one frame's image per this many seconds of stamps per
    /// camera (0: every one), as the node's retention.camera.every_s.
    #[arg(long, default_value_t = 1.0, help_heading = "Retention (a sealed memory)")]
    keep_every_s: f64,
    /// ... forgets frames older than this many seconds (0: however old).
    #[arg(long, default_value_t = 604_800.0, help_heading = "Retention (a sealed memory)")]
    keep_s: f64,
    /// ... and the oldest while the frames take more than this many MB (0: no budget).
    #[arg(long, default_value_t = 20_000, help_heading = "Retention (a sealed memory)")]
    keep_mb: u64,
}

#[derive(Args)]
pub struct ExportArgs {
    /// The memory directory.
    #[arg(long, env = "SION_DATA")]
    data: PathBuf,
    /// The MCAP file to write.
    #[arg(long)]
    out: PathBuf,
    /// Also write this answer (a proof file from `recall`, `subject`, `prove` …), verified
    /// against the memory's ledger; may be given again.
    #[arg(long)]
    answer: Vec<PathBuf>,
}

pub fn export_cmd(a: &ExportArgs) -> Result<ExitCode> {
    let memory = Memory::options(&a.data)
        .open()
        .with_context(|| format!("opening the memory at {}", a.data.display()))?;
    let mut answers = Vec::new();
    for path in &a.answer {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        answers.push((path.display().to_string(), bytes));
    }
    let file = File::create(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let bar = ui::bar(memory.log().size(), "atoms");
    let (summary, out) =
        sion_memory::bag::export::export(&memory, BufWriter::new(file), &answers, |n| bar.set_position(n))
            .with_context(|| format!("writing {}", a.out.display()))?;
    bar.finish_and_clear();
    out.into_inner()
        .map_err(|e| e.into_error())
        .and_then(|f| f.sync_all())
        .with_context(|| format!("writing {}", a.out.display()))?;
    let f = &summary.foxglove;
    outln!(
        "wrote {}: {} atoms on /sion/atoms, {} heads on /sion/heads, {} answers on /sion/answers (JSON); \
         for Foxglove's panels: {} transforms on /tf, {} trajectories, {} atoms as boxes on /sion/scene/atoms, \
         {} camera frames on /sion/camera/*, {} answers on /sion/scene/answers and /sion/verdicts",
        a.out.display(),
        ui::count(summary.atoms),
        summary.heads,
        summary.answers,
        ui::count(f.transforms),
        ui::count(f.trajectories),
        ui::count(f.boxes),
        ui::count(f.images),
        f.answers,
    );
    Ok(ExitCode::SUCCESS)
}

pub fn run(cmd: BagCommand) -> Result<ExitCode> {
    match cmd {
        BagCommand::Synth(a) => synth_cmd(&a),
    }
}

fn synth_cmd(a: &SynthArgs) -> Result<ExitCode> {
    let (w, h) = a
        .camera
        .split_once('x')
        .and_then(|(w, h)| Some((w.parse().ok()?, h.parse().ok()?)))
        .with_context(|| format!("--camera takes WIDTHxHEIGHT, like 160x120, not {:?}", a.camera))?;
    let config = SynthConfig {
        seconds: a.seconds,
        seed: a.seed,
        camera_width: w,
        camera_height: h,
        camera_hz: a.camera_hz,
        compress: !a.uncompressed,
        ..SynthConfig::default()
    };
    let file = File::create(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let (summary, out) =
        synth(BufWriter::new(file), &config).with_context(|| format!("writing {}", a.out.display()))?;
    out.into_inner()
        .map_err(|e| e.into_error())
        .and_then(|f| f.sync_all())
        .with_context(|| format!("writing {}", a.out.display()))?;
    let size = std::fs::metadata(&a.out).map(|m| m.len()).unwrap_or(0);
    outln!(
        "wrote {}: {:.0} s of a warehouse robot, {} messages ({} camera frames {w}x{h}, {} maps, {} pallet moves), {:.1} MB",
        a.out.display(),
        a.seconds,
        ui::count(summary.messages),
        ui::count(summary.frames),
        summary.maps,
        summary.moves,
        size as f64 / 1e6
    );
    outln!("log times [{}, {}] ns", summary.first_ns, summary.last_ns);
    Ok(ExitCode::SUCCESS)
}

pub fn replay_cmd(a: &ReplayArgs) -> Result<ExitCode> {
    // What is not a bag is refused here, before a memory is made for it.
    let parts = sion_memory::bag::rosbag2::parts(&a.bag)?;
    if parts.files.len() > 1 {
        let how = match parts.source {
            sion_memory::bag::rosbag2::PartsSource::Metadata => "in the order its metadata.yaml lists them",
            _ => "by the number their names end in (the directory has no metadata.yaml)",
        };
        eprintln!("{}: {} files, replayed as one bag {how}", a.bag.display(), parts.files.len());
    }
    let mut len = 0u64;
    let mut files = Vec::with_capacity(parts.files.len());
    for path in &parts.files {
        let file = File::open(path).with_context(|| format!("reading {}", path.display()))?;
        let size = file.metadata().with_context(|| format!("reading {}", path.display()))?.len();
        len += size;
        files.push((path.clone(), file, size));
    }
    // Each part is streamed, a record at a time: a bag larger than memory replays. Its
    // summary's schemas and channels are read first: a message whose channel was declared
    // inside a chunk that turns out damaged is still read.
    let readers = files.into_iter().map(|(path, mut file, size)| {
        let declared = sion_memory::bag::declarations(&mut file, size);
        file.seek(std::io::SeekFrom::Start(0))
            .map_err(|e| sion_memory::bag::BagError::NotMcap(format!("{}: {e}", path.display())))?;
        BagReader::from_reader(std::io::BufReader::with_capacity(1 << 20, file), size)
            .map(|r| r.with_declarations(declared))
    });
    let mut memory = Memory::options(&a.data)
        .agent(a.robot.as_str())
        .sealed(a.sealed)
        .open_or_create()
        .with_context(|| format!("opening the memory at {}", a.data.display()))?;
    for (name, v, max) in [("--keep-every-s", a.keep_every_s, 86_400.0), ("--keep-s", a.keep_s, 3.0e9)] {
        if !(v.is_finite() && (0.0..=max).contains(&v)) {
            bail!("{name} {v}: from 0 to {max} seconds");
        }
    }
    // Retention is a sealed memory's: one in the clear keeps everything it is given.
    let sealed = memory.space().is_some();
    let retention = sealed.then(|| sion_memory::memory::Retention {
        camera: sion_memory::memory::StreamRetention {
            keep_ns: (a.keep_s * 1e9).round() as i64,
            keep_bytes: a.keep_mb.saturating_mul(1_000_000),
        },
        map: sion_memory::memory::StreamRetention::default(),
    });
    let options = ReplayOptions {
        ingest: IngestConfig {
            fixed_frame: a.fixed_frame.clone(),
            robot: a.robot.clone(),
            robot_frame: a.robot_frame.clone(),
            // The bag names the types of the topics kept whole.
            sources: a.keep.iter().map(|topic| Source::other(topic, "")).collect(),
            keep_frame_every_ns: if sealed { (a.keep_every_s * 1e9).round() as i64 } else { 0 },
            ..IngestConfig::default()
        },
        skip_bad: a.skip_bad,
        retention,
        ..ReplayOptions::default()
    };
    let bar = ui::byte_bar(len);
    let started = Instant::now();
    let outcome = replay_parts(readers, &memory, options, |p| {
        bar.set_position(p.position);
        bar.set_message(format!("{} messages, {} atoms", ui::count(p.messages), ui::count(p.atoms)));
    });
    bar.finish_and_clear();
    let elapsed = started.elapsed().as_secs_f64();
    let (report, failure) = match outcome {
        Ok(report) => (report, None),
        Err(failed) => (*failed.report, Some(failed.error)),
    };
    print_report(&a.bag, &report, elapsed)?;
    if let Some(error) = failure {
        let kept =
            format!("the {} atoms before it are durable in {}", ui::count(report.atoms), a.data.display());
        let hint = if a.skip_bad { "" } else { " (--skip-bad goes on past bad messages and chunks)" };
        bail!("{error}\n{kept}{hint}");
    }
    if !a.no_commit && memory.log().size() > memory.committed().head.size {
        let committed = memory.commit(false).context("committing the head")?;
        outln!(
            "committed: {} atoms at Pulse {}, root {}",
            ui::count(committed.head.size),
            committed.pulse.header.number,
            hex::encode(committed.head.root)
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn print_report(bag: &std::path::Path, r: &ReplayReport, elapsed: f64) -> Result<()> {
    let span_s = r.log_times.map_or(0.0, |(a, b)| (b - a) as f64 / 1e9);
    let speed = if elapsed > 0.0 && span_s > 0.0 {
        format!(", {:.0}× real time", span_s / elapsed)
    } else {
        String::new()
    };
    outln!(
        "replayed {}: {} messages ({:.1} s of log time) in {elapsed:.2} s ({:.0} MB/s{speed}); {} atoms durable, the log holds {}",
        bag.display(),
        ui::count(r.messages),
        span_s,
        r.bytes as f64 / 1e6 / elapsed.max(1e-9),
        ui::count(r.atoms),
        ui::count(r.log_size)
    );
    let width = r.topics.iter().map(|t| t.topic.len()).max().unwrap_or(5).max(5);
    let type_width = r.topics.iter().map(|t| t.message_type.len()).max().unwrap_or(4).max(4);
    outln!("  {:<width$}  {:<type_width$}  {:>9}  taken in as", "topic", "type", "messages");
    for t in &r.topics {
        let taken = match &t.taken_as {
            Ok(stream) => stream.name().to_owned(),
            Err(why) => format!("skipped: {why}"),
        };
        outln!(
            "  {:<width$}  {:<type_width$}  {:>9}  {taken}",
            t.topic,
            t.message_type,
            ui::count(t.messages)
        );
    }
    if !r.rejected.is_empty() {
        let reasons: Vec<String> = r.rejected.iter().map(|(k, n)| format!("{} {k}", ui::count(*n))).collect();
        outln!("  refused: {}", reasons.join(", "));
    }
    for bad in &r.skipped_bad {
        outln!("  skipped as bad: {bad}");
    }
    Ok(())
}
