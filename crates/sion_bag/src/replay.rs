//! A bag into a memory, through the same ingest as the live node: the same message gives the
//! same atoms, byte for byte, whether it came from a topic or from a bag.
//!
//! Messages are taken in the order the bag stores them. Atoms (and the blobs they commit to)
//! are made durable in batches; when something stops the replay, everything before it is made
//! durable first, so what the report counts is what the memory holds.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::{BagError, BagReader, Event, Topic};
use sion_ingest::{Ingest, IngestConfig, Source, SourceId, Stream, Taken, schema};
use sion_store::memory::{Memory, MemoryError};
use sion_verify::atom::Atom;

/// How to replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The ingest's configuration. Every topic of a type the ingest reads is taken in under
    /// its own name (several cameras, several scanners); a topic of another type is taken in
    /// whole (as the node does) when `ingest.sources` names it as a [`Stream::Other`].
    pub ingest: IngestConfig,
    /// Count messages that do not decode, and damaged chunks, and go on.
    pub skip_bad: bool,
    /// Make atoms durable at least every this many bytes of blobs ...
    pub batch_blob_bytes: usize,
    /// ... or this many atoms.
    pub batch_atoms: usize,
    /// A sealed memory's retention, applied after each durable batch (as the node's brain
    /// applies it on schedule): what falls out is forgotten with forget atoms.
    pub retention: Option<sion_store::memory::Retention>,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            ingest: IngestConfig::default(),
            skip_bad: false,
            batch_blob_bytes: 64 << 20,
            batch_atoms: 65_536,
            retention: None,
        }
    }
}

/// What became of one topic of the bag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicReport {
    pub topic: String,
    pub message_type: String,
    /// The stream it was taken in as, or why it was skipped.
    pub taken_as: Result<Stream, String>,
    pub messages: u64,
}

/// What a replay did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplayReport {
    pub topics: Vec<TopicReport>,
    /// Messages read (all topics).
    pub messages: u64,
    /// Atoms made durable.
    pub atoms: u64,
    /// Bytes of the bag read.
    pub bytes: u64,
    /// Refusals by reason, over all streams (as the node counts them).
    pub rejected: BTreeMap<&'static str, u64>,
    /// What `--skip-bad` skipped: messages that do not decode, damaged chunks.
    pub skipped_bad: Vec<String>,
    /// Log times of the first and last message read.
    pub log_times: Option<(u64, u64)>,
    /// The log's size afterwards.
    pub log_size: u64,
    /// Segments of payloads a sealed memory's retention forgot during the replay.
    pub forgotten_segments: usize,
}

/// Where a replay is, for a progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub position: u64,
    pub len: u64,
    pub messages: u64,
    pub atoms: u64,
}

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    #[error(transparent)]
    Bag(#[from] BagError),
    #[error("a message on {topic} at log time {log_time} does not decode as {message_type}: {reason}")]
    BadMessage { topic: String, message_type: String, log_time: u64, reason: String },
    #[error("topic {topic} (first message at log time {log_time}): {reason}")]
    BadTopic { topic: String, log_time: u64, reason: String },
    #[error("a damaged chunk at byte {offset}: {error}")]
    DamagedChunk { offset: u64, error: String },
    #[error("keeping the atoms: {0}")]
    Memory(#[from] MemoryError),
    #[error("keeping the blobs: {0}")]
    Blobs(#[from] sion_store::log::blobs::BlobError),
}

// Each operation's error of a memory, as a `ReplayError::Memory`.
sion_store::from_memory_errors!(ReplayError);

/// A replay that stopped, with what it had done: every atom it counts is durable.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct ReplayFailed {
    pub error: ReplayError,
    pub report: Box<ReplayReport>,
}

/// `pkg/Type` as `pkg/msg/Type`, the ingest's own spelling.
fn full_type(message_type: &str) -> String {
    match message_type.split('/').collect::<Vec<_>>()[..] {
        [package, ty] => format!("{package}/msg/{ty}"),
        _ => message_type.to_owned(),
    }
}

/// What the ingest takes a topic as, or why not.
fn classify(topic: &Topic, config: &IngestConfig) -> Result<Stream, String> {
    if topic.message_encoding != "cdr" {
        return Err(format!("message encoding {:?}, not cdr", topic.message_encoding));
    }
    if topic.message_type.is_empty() {
        return Err("no schema".into());
    }
    let full = full_type(&topic.message_type);
    // A type the memory reads is taken in as such, named by --keep or not (`--keep /tf` must
    // not starve the transform buffer).
    let kept = config.sources.iter().any(|s| s.stream == Stream::Other && s.topic == topic.name);
    let stream = match Stream::of_type(&full) {
        Some(stream) => stream,
        None if kept => return Ok(Stream::Other),
        None => {
            return Err("not a type the memory takes in (name it to keep it whole: --keep TOPIC)".to_owned());
        }
    };
    // /tf and /tf_static share a type; the topic tells them apart.
    let stream = match stream {
        Stream::Tf | Stream::TfStatic if topic.name.ends_with("tf_static") => Stream::TfStatic,
        Stream::Tf | Stream::TfStatic => Stream::Tf,
        other => other,
    };
    Ok(stream)
}

struct Replay<'m> {
    memory: &'m Memory,
    options: ReplayOptions,
    ingest: Ingest,
    report: ReplayReport,
    /// Per channel: the topic's index in the report and the source it feeds, if any.
    topics: HashMap<u16, (usize, Option<SourceId>)>,
    atoms: Vec<Atom>,
    blobs: Vec<Vec<u8>>,
    blob_bytes: usize,
}

impl Replay<'_> {
    fn fail(&mut self, error: ReplayError) -> ReplayFailed {
        // What came before the failure is kept; if even that fails, say so instead.
        let error = match self.flush() {
            Ok(()) => error,
            Err(e) => e,
        };
        self.report.log_size = self.memory.log().size();
        ReplayFailed { error, report: Box::new(std::mem::take(&mut self.report)) }
    }

    fn flush(&mut self) -> Result<(), ReplayError> {
        // Blobs first, then the atoms that commit to them (in a sealed memory, to their sealed
        // bytes).
        let blobs = std::mem::take(&mut self.blobs);
        self.blob_bytes = 0;
        let atoms = std::mem::take(&mut self.atoms);
        let n = atoms.len() as u64;
        if n > 0 || !blobs.is_empty() {
            self.memory.remember_with_blobs(atoms, blobs).map_err(MemoryError::from)?;
            self.report.atoms += n;
        }
        if let (Some(policy), Some(space)) = (&self.options.retention, self.memory.space()) {
            let r = space.retain(self.memory.log(), policy).map_err(MemoryError::from)?;
            self.report.forgotten_segments += r.segments;
        }
        Ok(())
    }

    /// The report's entry and stream of a channel, deciding on first sight.
    fn topic(&mut self, topic: &Arc<Topic>, log_time: u64) -> Result<(usize, Option<SourceId>), ReplayError> {
        if let Some(&known) = self.topics.get(&topic.id) {
            return Ok(known);
        }
        // A topic an earlier part of a split bag declared (under its own channel id there) is
        // the same topic: counted in one row, fed to the same stream.
        if let Some(index) = self
            .report
            .topics
            .iter()
            .position(|t| t.topic == topic.name && t.message_type == topic.message_type)
        {
            let stream = self.report.topics[index].taken_as.as_ref().ok().copied();
            let source = stream.map(|stream| self.source(stream, topic));
            let entry = (index, source);
            self.topics.insert(topic.id, entry);
            return Ok(entry);
        }
        let mut taken_as = classify(topic, &self.options.ingest);
        // A topic kept whole is not decoded: its schema is the bag's business.
        if let Ok(stream) = taken_as
            && stream != Stream::Other
            && !topic.schema.is_empty()
            && topic.schema_encoding == "ros2msg"
            && let Err(e) = schema::check(&topic.message_type, &String::from_utf8_lossy(&topic.schema))
        {
            if !self.options.skip_bad {
                return Err(ReplayError::BadTopic {
                    topic: topic.name.clone(),
                    log_time,
                    reason: e.to_string(),
                });
            }
            self.report.skipped_bad.push(format!("topic {}: {e}", topic.name));
            taken_as = Err(format!("its schema differs: {e}"));
        }
        let source = taken_as.as_ref().ok().map(|&stream| self.source(stream, topic));
        self.report.topics.push(TopicReport {
            topic: topic.name.clone(),
            message_type: topic.message_type.clone(),
            taken_as,
            messages: 0,
        });
        let entry = (self.report.topics.len() - 1, source);
        self.topics.insert(topic.id, entry);
        Ok(entry)
    }

    /// The ingest's source for a topic taken in as `stream`.
    fn source(&mut self, stream: Stream, topic: &Topic) -> SourceId {
        let source = match stream {
            Stream::Other => Source::other(&topic.name, &full_type(&topic.message_type)),
            // /tf and /tf_static share a type; the topic's name told them apart.
            stream => Source::new(stream, &topic.name),
        };
        self.ingest.source(source)
    }

    /// Count what the ingest refused and keep what it gave; returns why a message did not
    /// decode, if one did not.
    fn absorb(&mut self, taken: Taken) -> Option<String> {
        for r in taken.rejected() {
            *self.report.rejected.entry(r.reason()).or_default() += 1;
        }
        let malformed = taken.rejected().find(|r| r.reason() == "malformed_message").map(ToString::to_string);
        for i in taken.ingested {
            if let Some(blob) = i.blob {
                self.blob_bytes += blob.len();
                self.blobs.push(blob);
            }
            self.atoms.push(i.atom);
        }
        malformed
    }

    fn taken(&mut self, taken: Taken, topic: &Topic, log_time: u64) -> Result<(), ReplayError> {
        let malformed = self.absorb(taken);
        if let Some(reason) = malformed {
            if !self.options.skip_bad {
                return Err(ReplayError::BadMessage {
                    topic: topic.name.clone(),
                    message_type: topic.message_type.clone(),
                    log_time,
                    reason,
                });
            }
            self.report
                .skipped_bad
                .push(format!("a message on {} at log time {log_time}: {reason}", topic.name));
        }
        if self.blob_bytes >= self.options.batch_blob_bytes || self.atoms.len() >= self.options.batch_atoms {
            self.flush()?;
        }
        Ok(())
    }
}

/// Replay `bag` into `memory`; `progress` hears where it is now and then.
pub fn replay(
    bag: &[u8],
    memory: &Memory,
    options: ReplayOptions,
    progress: impl FnMut(Progress),
) -> Result<ReplayReport, ReplayFailed> {
    replay_from(BagReader::new(bag), memory, options, progress)
}

/// Replay a bag as it is read (a file of any size: one record is in memory at a time).
pub fn replay_from(
    reader: Result<BagReader<'_>, BagError>,
    memory: &Memory,
    options: ReplayOptions,
    progress: impl FnMut(Progress),
) -> Result<ReplayReport, ReplayFailed> {
    replay_parts(std::iter::once(reader), memory, options, progress)
}

/// Replay the parts of a split bag (rosbag2's `NAME_0.mcap`, `NAME_1.mcap`, … in the order its
/// metadata.yaml lists them) as one: one ingest, so a transform or a camera's calibration from
/// one part serves the frames of the next, and one report. A part that cannot be read stops
/// the replay as a damaged bag does (`--skip-bad` goes on to the next part). Progress counts
/// bytes across the parts.
pub fn replay_parts<'b>(
    parts: impl IntoIterator<Item = Result<BagReader<'b>, BagError>>,
    memory: &Memory,
    options: ReplayOptions,
    mut progress: impl FnMut(Progress),
) -> Result<ReplayReport, ReplayFailed> {
    let ingest = Ingest::new(options.ingest.clone());
    let mut r = Replay {
        memory,
        options,
        ingest,
        report: ReplayReport::default(),
        topics: HashMap::new(),
        atoms: Vec::new(),
        blobs: Vec::new(),
        blob_bytes: 0,
    };
    let mut done_bytes = 0u64;
    let mut undeclared: BTreeMap<u16, (u64, u64)> = BTreeMap::new();
    for part in parts {
        let mut reader = match part {
            Ok(reader) => reader,
            Err(e) if r.options.skip_bad && r.report.messages > 0 => {
                r.report.skipped_bad.push(format!("a part of the bag: {e}"));
                continue;
            }
            Err(e) => return Err(r.fail(e.into())),
        };
        // Channel ids are a part's own.
        r.topics.clear();
        let cut = replay_part(&mut r, &mut reader, done_bytes, &mut undeclared, &mut progress)?;
        // (BagReader is an Iterator too: its own position and len, not the iterator's.)
        done_bytes += if cut { BagReader::position(&reader) } else { BagReader::len(&reader) };
        if cut {
            break;
        }
    }
    r.report.bytes = done_bytes;
    for (channel, (count, first)) in undeclared {
        r.report.skipped_bad.push(format!(
            "{count} message(s) on channel {channel}, which the bag never declared (first at log time {first}; \
             its declaration may have been in a damaged chunk)"
        ));
    }
    // Frames still waiting for a transform will not get one.
    let flushed = r.ingest.flush();
    r.absorb(flushed);
    if let Err(e) = r.flush() {
        return Err(r.fail(e));
    }
    r.report.topics.sort_by(|a, b| a.topic.cmp(&b.topic));
    r.report.log_size = memory.log().size();
    progress(Progress {
        position: done_bytes,
        len: done_bytes,
        messages: r.report.messages,
        atoms: r.report.atoms,
    });
    Ok(r.report)
}

/// One part's messages into the replay; `Ok(true)` when the rest of the bag is to be skipped
/// (a part cut short, with `--skip-bad`).
fn replay_part(
    r: &mut Replay<'_>,
    reader: &mut BagReader<'_>,
    offset: u64,
    undeclared: &mut BTreeMap<u16, (u64, u64)>,
    progress: &mut impl FnMut(Progress),
) -> Result<bool, ReplayFailed> {
    while let Some(event) = reader.next() {
        r.report.bytes = offset + BagReader::position(reader);
        let message = match event {
            Ok(Event::Message(m)) => m,
            Ok(Event::DamagedChunk { offset, error }) => {
                if !r.options.skip_bad {
                    return Err(r.fail(ReplayError::DamagedChunk { offset, error }));
                }
                r.report.skipped_bad.push(format!("a damaged chunk at byte {offset}: {error}"));
                continue;
            }
            // With --skip-bad, a bag cut short (a recorder that died) gives what precedes the cut.
            Err(e @ BagError::Damaged { .. }) if r.options.skip_bad => {
                r.report.skipped_bad.push(format!("the rest of the bag: {e}"));
                return Ok(true);
            }
            // Its channel was declared in a damaged chunk (and the bag has no summary to say
            // it again): counted per channel, and the replay goes on.
            Err(BagError::UnknownChannel { channel, log_time }) if r.options.skip_bad => {
                let seen = undeclared.entry(channel).or_insert((0, log_time));
                seen.0 += 1;
                continue;
            }
            Err(e) => return Err(r.fail(e.into())),
        };
        r.report.messages += 1;
        let t = message.log_time;
        r.report.log_times = Some(r.report.log_times.map_or((t, t), |(a, b)| (a.min(t), b.max(t))));
        let (index, source) = match r.topic(&message.topic, t) {
            Ok(found) => found,
            Err(e) => return Err(r.fail(e)),
        };
        r.report.topics[index].messages += 1;
        if let Some(source) = source {
            // Log time places the messages of topics without stamps of their own.
            let taken = r.ingest.take_from(source, &message.data, i64::try_from(t).unwrap_or(i64::MAX));
            if let Err(e) = r.taken(taken, &message.topic, t) {
                return Err(r.fail(e));
            }
        }
        if r.report.messages.is_multiple_of(1024) {
            let atoms = r.report.atoms + r.atoms.len() as u64;
            progress(Progress {
                position: offset + BagReader::position(reader),
                len: offset + BagReader::len(reader),
                messages: r.report.messages,
                atoms,
            });
        }
    }
    Ok(false)
}
