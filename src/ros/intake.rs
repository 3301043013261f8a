//! The node's intake: raw messages from every subscription become atoms (`ingest`), their
//! blobs and then the atoms are made durable in batches (whatever arrived while the last batch
//! was being written: one fsync for many messages), and the brain is told. Runs on a thread of
//! its own, so conversion and disk never hold up the ROS executor.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::brain::Intake;
use crate::ingest::{Ingest, SourceId, Stream};

/// A message as it arrived: from which of the ingest's sources (of which stream), its CDR
/// bytes, when (for the latency figures), and the ROS time then (which places messages of
/// topics without stamps of their own).
pub struct Arrival {
    pub source: SourceId,
    pub stream: Stream,
    pub bytes: Vec<u8>,
    pub at: Instant,
    pub received_ns: i64,
}

/// Latencies on a log scale: buckets 1 % wide from 1 µs to ~100 s, so quantiles are within
/// 1 % without keeping every sample.
#[derive(Debug, Clone)]
pub struct Latencies {
    buckets: Vec<u64>,
    count: u64,
}

const GROWTH: f64 = 1.01;

impl Default for Latencies {
    fn default() -> Self {
        Self { buckets: vec![0; 1900], count: 0 }
    }
}

impl Latencies {
    pub fn record(&mut self, d: Duration) {
        let us = d.as_secs_f64() * 1e6;
        let i = if us <= 1.0 { 0 } else { (us.ln() / GROWTH.ln()) as usize };
        let last = self.buckets.len() - 1;
        self.buckets[i.min(last)] += 1;
        self.count += 1;
    }

    /// The `q` quantile (0..=1), in milliseconds; 0 with no samples.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                // The bucket's upper edge: a quantile never reads lower than it was.
                return GROWTH.powi(i as i32 + 1) / 1e3;
            }
        }
        0.0
    }
}

/// What the intake has done, per source (topic): shared with the stats publisher.
#[derive(Debug, Clone, Default)]
pub struct StreamCounters {
    pub received: u64,
    /// Messages the executor dropped because the intake's queue was full.
    pub dropped: u64,
    /// Messages whose every atom is durable (or that gave none but were not refused, like a
    /// camera_info).
    pub remembered: u64,
    pub atoms: u64,
    pub rejected: BTreeMap<&'static str, u64>,
    pub latency: Latencies,
}

pub type Counters = Arc<Mutex<BTreeMap<SourceId, StreamCounters>>>;

/// Logs a rejection reason at most once per interval, with how many were refused meanwhile.
struct RejectLog {
    interval: Duration,
    last: BTreeMap<(SourceId, &'static str), (Option<Instant>, u64)>,
}

impl RejectLog {
    fn note(&mut self, source: SourceId, topic: &str, reason: &'static str, detail: &dyn std::fmt::Display) {
        let now = Instant::now();
        let entry = self.last.entry((source, reason)).or_insert((None, 0));
        entry.1 += 1;
        if entry.0.is_none_or(|last| now.duration_since(last) >= self.interval) {
            tracing::warn!("{topic}: refused {} message(s) for {reason}, e.g. {detail}", entry.1);
            *entry = (Some(now), 0);
        }
    }
}

/// The stamp of a message that begins with a std_msgs/Header (an Image, a CompressedImage),
/// read from its CDR bytes without decoding the rest.
fn stamp_ns(bytes: &[u8]) -> Option<i64> {
    let word = |at: usize| -> Option<[u8; 4]> { bytes.get(at..at + 4)?.try_into().ok() };
    let (sec, nsec) = (word(4)?, word(8)?);
    let (sec, nsec) = match bytes.get(1)? {
        1 => (i32::from_le_bytes(sec), u32::from_le_bytes(nsec)),
        0 => (i32::from_be_bytes(sec), u32::from_be_bytes(nsec)),
        _ => return None,
    };
    Some(i64::from(sec) * 1_000_000_000 + i64::from(nsec))
}

/// Camera frames lost before they reach the node, read from the gaps in their stamps: a
/// driver stamps frames a period apart, so a gap of k periods held k − 1 frames that never
/// came. (DDS does not tell a subscriber what a best-effort writer dropped.)
#[derive(Debug, Default)]
struct FrameGaps {
    last_ns: Option<i64>,
    /// The shortest gap seen: the driver's period.
    period_ns: Option<i64>,
    frames: u64,
    missing: u64,
    warned: bool,
}

impl FrameGaps {
    /// Note a frame; true the first time the losses are clear (at least 60 frames seen, and
    /// 10 or more missing, 5 % of all).
    fn note(&mut self, ns: i64) -> bool {
        self.frames += 1;
        if let Some(last) = self.last_ns {
            let gap = ns - last;
            if gap <= 0 {
                // Out of order, or repeated: no gap to read.
                return false;
            }
            let period = self.period_ns.map_or(gap, |p| p.min(gap));
            self.period_ns = Some(period);
            let periods = (gap + period / 3) / period;
            self.missing += periods.saturating_sub(1) as u64;
        }
        self.last_ns = Some(ns);
        let clear =
            self.frames >= 60 && self.missing >= 10 && self.missing * 20 >= self.frames + self.missing;
        if clear && !self.warned {
            self.warned = true;
            return true;
        }
        false
    }
}

/// The intake's queue: bounded in messages (the channel) and in bytes (`queued`), so a
/// burst the disk cannot take is dropped at the door and counted, not held in memory.
pub struct Queue {
    pub max_bytes: usize,
    pub queued: Arc<std::sync::atomic::AtomicUsize>,
}

impl Queue {
    /// Offer an arrival: `false` when the queue is full (the caller counts the drop).
    pub fn offer(&self, tx: &mpsc::Sender<Arrival>, arrival: Arrival) -> bool {
        use std::sync::atomic::Ordering;
        let len = arrival.bytes.len();
        if self.queued.load(Ordering::Relaxed) + len > self.max_bytes {
            return false;
        }
        self.queued.fetch_add(len, Ordering::Relaxed);
        match tx.try_send(arrival) {
            Ok(()) => true,
            Err(_) => {
                self.queued.fetch_sub(len, Ordering::Relaxed);
                false
            }
        }
    }
}

/// What the log's refusal means for the node: after a failed write or fsync it takes no more
/// appends until reopened, so the node exits and its launcher starts it again (opening
/// recovers the log; nothing acknowledged is lost).
pub const EXIT_LOG_HALTED: i32 = 70;

fn halts(e: &crate::memory::RememberError) -> bool {
    use crate::log::LogError;
    matches!(e, crate::memory::RememberError::Log(LogError::Halted(_) | LogError::Io { .. }))
}

/// Run the intake until every sender is gone. `told` hears the log size after each batch.
#[allow(clippy::too_many_arguments)] // the node's parts, each used once
pub fn run(
    mut ingest: Ingest,
    intake: Intake,
    mut arrivals: mpsc::Receiver<Arrival>,
    queued: Arc<std::sync::atomic::AtomicUsize>,
    counters: Counters,
    told: mpsc::UnboundedSender<u64>,
    log_interval: Duration,
    max_frame_bytes: usize,
    keep_frame_every_ns: Arc<std::sync::atomic::AtomicI64>,
    robot_at: super::markers::RobotAt,
) {
    let mut rejects = RejectLog { interval: log_interval, last: BTreeMap::new() };
    let writer = FrameWriter::start(intake.clone(), counters.clone(), told.clone(), max_frame_bytes);
    let mut gaps: BTreeMap<SourceId, FrameGaps> = BTreeMap::new();
    // When each message still in hand (held by the ingest, or in this batch) arrived.
    let mut arrived: HashMap<u64, Instant> = HashMap::new();
    let mut batch = Vec::new();
    let mut open = true;
    while open {
        match arrivals.blocking_recv() {
            Some(first) => batch.push(first),
            None => open = false,
        }
        while batch.len() < 4096 {
            match arrivals.try_recv() {
                Ok(a) => batch.push(a),
                Err(_) => break,
            }
        }
        // `retention.camera.every_s`, as set now (`ros2 param set` while the node runs).
        ingest.set_keep_frame_every_ns(keep_frame_every_ns.load(std::sync::atomic::Ordering::Relaxed));
        let taken_bytes: usize = batch.iter().map(|a| a.bytes.len()).sum();
        queued.fetch_sub(taken_bytes, std::sync::atomic::Ordering::Relaxed);
        let mut atoms = Vec::new();
        let mut blobs = Vec::new();
        let mut finished = Vec::new();
        let mut received: BTreeMap<SourceId, u64> = BTreeMap::new();
        let mut take =
            |taken: crate::ingest::Taken, at: Option<Instant>, arrived: &mut HashMap<u64, Instant>| {
                if let Some(at) = at {
                    arrived.insert(taken.message, at);
                }
                for i in taken.ingested {
                    atoms.push(i.atom);
                    blobs.extend(i.blob);
                }
                finished.extend(taken.finished);
            };
        // In the order they arrived: the ingest's atoms are then the ones a replay of the same
        // messages makes (a frame sees the transforms and calibrations that came before it).
        for arrival in batch.drain(..) {
            *received.entry(arrival.source).or_default() += 1;
            if is_frame(arrival.stream)
                && let Some(ns) = stamp_ns(&arrival.bytes)
            {
                let g = gaps.entry(arrival.source).or_default();
                if g.note(ns) {
                    tracing::warn!(
                        "{}: camera frames are being lost before they reach the node ({} of about {} so far, \
                         by the gaps in their stamps). A camera driver started without a Fast DDS profile sends \
                         each frame in fragments (its shared-memory segment, 512 KiB by default, is \
                         smaller than a frame), which are lost under load; start it with \
                         FASTDDS_DEFAULT_PROFILES_FILE set to this package's config/fastdds.xml (installed as \
                         share/sion_memory/config/fastdds.xml; the launch file gives it to this node), so frames \
                         travel by shared memory whole",
                        topic(&ingest, arrival.source),
                        g.missing,
                        g.frames + g.missing
                    );
                }
            }
            let taken = ingest.take_from(arrival.source, &arrival.bytes, arrival.received_ns);
            take(taken, Some(arrival.at), &mut arrived);
        }
        if !open {
            // The end: frames still waiting for a transform will not get one.
            take(ingest.flush(), None, &mut arrived);
        }
        // Atoms that commit to no blob (poses, transforms) are made durable here, so they never
        // wait for camera frames to be written; frames' blobs and then their atoms are written
        // by the frame writer, behind them.
        let (framed, plain): (Vec<_>, Vec<_>) =
            atoms.into_iter().partition(|a| matches!(a.parts().payload, crate::atom::Payload::Blob(_)));
        robot_at.note(&plain);
        let plain = append(&intake, plain);
        let plain_durable = Instant::now();
        let (frame_done, done): (Vec<_>, Vec<_>) = finished
            .into_iter()
            .partition(|f| carries_blobs(f.stream) && f.atoms > 0 && f.rejected.is_empty());
        let mut frames = FrameJob { atoms: framed, blobs, finished: Vec::new(), bytes: 0 };
        for f in frame_done {
            let at = arrived.remove(&f.message);
            frames.finished.push((f, at));
        }
        frames.bytes = frames.blobs.iter().map(Vec::len).sum();
        let mut counters = counters.lock().unwrap_or_else(PoisonError::into_inner);
        for (source, n) in received {
            counters.entry(source).or_default().received += n;
        }
        for f in done {
            for r in &f.rejected {
                rejects.note(f.source, topic(&ingest, f.source), r.reason(), r);
            }
            let at = arrived.remove(&f.message);
            let c = counters.entry(f.source).or_default();
            for r in &f.rejected {
                *c.rejected.entry(r.reason()).or_default() += 1;
            }
            // A small message whose atoms could not be made durable.
            if !carries_blobs(f.stream) && plain.is_err() {
                if f.atoms > 0 {
                    *c.rejected.entry("not_durable").or_default() += 1;
                }
                continue;
            }
            c.atoms += f.atoms as u64;
            // Remembered: every atom durable, nothing refused (camera_info gives no atoms).
            if f.rejected.is_empty() {
                c.remembered += 1;
                if let Some(at) = at {
                    c.latency.record(plain_durable.duration_since(at));
                }
            }
        }
        // Frames go on behind the small messages, unless the writer is too far behind (the
        // disk cannot take them): then camera frames are dropped here and counted, not held.
        // (A map tile is never dropped: the next one supersedes it by its id, and tiles come
        // a few a minute.)
        if !frames.finished.is_empty() || !frames.atoms.is_empty() {
            let behind =
                writer.queued.load(std::sync::atomic::Ordering::Relaxed) + frames.bytes > writer.max_bytes;
            let refused = match &plain {
                Err(_) => Some("not_durable"),
                // Every payload but a map tile's may be dropped (a scan or another topic's
                // message beside the frames must not lift the bound).
                Ok(_) if behind && frames.finished.iter().all(|(f, _)| f.stream != Stream::Map) => {
                    Some("frame_writer_behind")
                }
                Ok(_) => None,
            };
            match refused {
                Some(reason) => {
                    for (f, _) in &frames.finished {
                        let why = "the disk is not taking frames, scans and clouds as fast as they come";
                        rejects.note(f.source, topic(&ingest, f.source), reason, &why);
                        *counters.entry(f.source).or_default().rejected.entry(reason).or_default() += 1;
                    }
                }
                None => match &writer.jobs {
                    Some(jobs) => {
                        writer.queued.fetch_add(frames.bytes, std::sync::atomic::Ordering::Relaxed);
                        if jobs.send(frames).is_err() {
                            return;
                        }
                    }
                    None => {
                        for (f, _) in &frames.finished {
                            *counters
                                .entry(f.source)
                                .or_default()
                                .rejected
                                .entry("not_durable")
                                .or_default() += 1;
                        }
                    }
                },
            }
        }
        drop(counters);
        let last_position = plain.as_ref().ok().and_then(|a| a.iter().map(|a| a.position).max());
        if let Err(e) = &plain {
            tracing::error!("could not make a batch's atoms durable: {e}");
        }
        if let Some(position) = last_position
            && told.send(position).is_err()
        {
            return;
        }
    }
    // The end: dropping the writer waits for every frame taken to be written.
}

fn is_frame(stream: Stream) -> bool {
    matches!(stream, Stream::Image | Stream::CompressedImage)
}

/// Streams whose atoms commit to blobs: made durable by the frame writer, after their blobs.
fn carries_blobs(stream: Stream) -> bool {
    is_frame(stream)
        || matches!(stream, Stream::Map | Stream::LaserScan | Stream::PointCloud2 | Stream::Other)
}

fn topic(ingest: &Ingest, source: SourceId) -> &str {
    ingest.sources().get(source).map_or("?", |s| s.topic.as_str())
}

/// Append atoms; after a failed write or fsync the log takes no more, so the node exits for
/// its launcher to start it again.
fn append(intake: &Intake, atoms: Vec<crate::atom::Atom>) -> Result<Vec<crate::log::Appended>, String> {
    if atoms.is_empty() {
        return Ok(Vec::new());
    }
    intake.remember(atoms).map_err(|e| {
        if halts(&e) {
            tracing::error!(
                "the memory's log stopped taking appends after an I/O failure ({e}): exiting with \
                 status {EXIT_LOG_HALTED} so the launcher starts the node again, which recovers the \
                 log (nothing acknowledged is lost)"
            );
            std::process::exit(EXIT_LOG_HALTED);
        }
        e.to_string()
    })
}

/// A batch's camera frames: their blobs, the atoms committing to them, and the messages they
/// finish (with when each arrived).
struct FrameJob {
    atoms: Vec<crate::atom::Atom>,
    blobs: Vec<Vec<u8>>,
    finished: Vec<(crate::ingest::Finished, Option<Instant>)>,
    bytes: usize,
}

/// The thread that writes frames, and the bytes handed to it not yet written (bounded as the
/// intake's queue is).
struct FrameWriter {
    jobs: Option<std::sync::mpsc::Sender<FrameJob>>,
    thread: Option<std::thread::JoinHandle<()>>,
    queued: Arc<std::sync::atomic::AtomicUsize>,
    max_bytes: usize,
}

impl Drop for FrameWriter {
    /// Every frame handed over is written before the intake ends.
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the frame writer panicked");
        }
    }
}

impl FrameWriter {
    fn start(intake: Intake, counters: Counters, told: mpsc::UnboundedSender<u64>, max_bytes: usize) -> Self {
        let queued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (jobs, received) = std::sync::mpsc::channel::<FrameJob>();
        let left = queued.clone();
        let thread = std::thread::Builder::new()
            .name("intake-frames".into())
            .spawn(move || {
                for job in received {
                    // Sealed first in a sealed memory: the atoms then commit to the sealed bytes.
                    let written = intake
                        .keep_blobs_of(job.atoms, job.blobs)
                        .map_err(|e| e.to_string())
                        .and_then(|atoms| append(&intake, atoms));
                    let durable = Instant::now();
                    left.fetch_sub(job.bytes, std::sync::atomic::Ordering::Relaxed);
                    if let Err(e) = &written {
                        tracing::error!("could not make a batch's camera frames durable: {e}");
                    }
                    let mut counters = counters.lock().unwrap_or_else(PoisonError::into_inner);
                    for (f, at) in job.finished {
                        let c = counters.entry(f.source).or_default();
                        if written.is_err() {
                            *c.rejected.entry("not_durable").or_default() += 1;
                            continue;
                        }
                        c.atoms += f.atoms as u64;
                        c.remembered += 1;
                        if let Some(at) = at {
                            c.latency.record(durable.duration_since(at));
                        }
                    }
                    drop(counters);
                    if let Some(position) = written.ok().and_then(|a| a.iter().map(|a| a.position).max()) {
                        let _ = told.send(position);
                    }
                }
            })
            .ok();
        if thread.is_none() {
            tracing::error!("could not start the frame writer thread: camera frames will not be kept");
        }
        Self { jobs: thread.as_ref().map(|_| jobs), thread, queued, max_bytes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_frames_are_read_from_the_gaps_in_their_stamps_and_told_once() {
        const P: i64 = 33_333_333;
        let mut g = FrameGaps::default();
        // Whole for 100 frames: nothing said.
        assert!((0..100).all(|i| !g.note(1_000_000_000 + i * P)));
        assert_eq!(g.missing, 0);
        // Then every other frame lost: said once, when 5 % of all are missing.
        let told: Vec<bool> = (0..200).map(|i| g.note(1_000_000_000 + (100 + 2 * i) * P)).collect();
        assert_eq!(told.iter().filter(|t| **t).count(), 1);
        assert_eq!(g.missing, 199, "one lost in each of the 199 gaps of two periods");
        // Jitter of a third of a period is not a loss; out-of-order frames are passed over.
        let mut g = FrameGaps::default();
        assert!(!g.note(0) && !g.note(P + P / 4) && !g.note(2 * P) && !g.note(P));
        assert_eq!(g.missing, 0);
        let mut cdr = vec![0u8, 1, 0, 0];
        cdr.extend_from_slice(&7i32.to_le_bytes());
        cdr.extend_from_slice(&5u32.to_le_bytes());
        assert_eq!(stamp_ns(&cdr), Some(7_000_000_005));
        assert_eq!(stamp_ns(&cdr[..10]), None);
    }

    #[test]
    fn quantiles_are_within_a_percent() {
        let mut l = Latencies::default();
        for ms in 1..=1000 {
            l.record(Duration::from_millis(ms));
        }
        let p50 = l.quantile_ms(0.5);
        let p99 = l.quantile_ms(0.99);
        assert!((500.0..=505.1).contains(&p50), "{p50}");
        assert!((990.0..=1000.0 * 1.0101).contains(&p99), "{p99}");
        assert_eq!(Latencies::default().quantile_ms(0.5), 0.0);
    }
}
