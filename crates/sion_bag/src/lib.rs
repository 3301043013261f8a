//! ROS 2 bags in MCAP (CDR messages, `ros2msg` schemas), read and written without a ROS
//! install. Reading goes record by record, so a damaged bag gives up what precedes the damage
//! and names where it is; a chunk whose checksum fails is reported whole, never half-decoded.
//!
//! - [`BagReader`]: the messages of a bag in file order, with their topics;
//! - [`BagWriter`]: a bag as rosbag2 writes one (used by [`synth`] and the tests);
//! - [`synth`]: a deterministic warehouse robot run;
//! - [`replay`]: a bag into a memory through the live node's ingest;
//! - [`rosbag2`]: what `ros2 bag record` leaves (a directory, split files) as the parts to replay;
//! - [`export`]: a memory out as MCAP with JSON messages (atoms, heads, answers).

#![forbid(unsafe_code)]

pub mod chunk;
pub mod export;
pub mod foxglove;
pub mod replay;
pub mod rosbag2;
pub mod synth;
mod write;

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use mcap::records::Record;

pub use write::BagWriter;

/// A topic of a bag: its channel as the bag declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic {
    pub id: u16,
    pub name: String,
    /// The schema's name (`geometry_msgs/msg/PoseStamped`), empty without a schema.
    pub message_type: String,
    pub schema_encoding: String,
    /// The schema's text (for `ros2msg`, the message definition).
    pub schema: Vec<u8>,
    pub message_encoding: String,
}

/// One message of a bag.
#[derive(Debug, Clone)]
pub struct BagMessage<'a> {
    pub topic: Arc<Topic>,
    pub log_time: u64,
    pub data: Cow<'a, [u8]>,
}

/// What reading a bag met.
#[derive(Debug)]
pub enum Event<'a> {
    Message(BagMessage<'a>),
    /// A chunk that cannot be read (its checksum fails, its compression is unknown, it ends
    /// early); the messages in it are lost, those after it are read.
    DamagedChunk {
        offset: u64,
        error: String,
    },
}

/// Why a bag cannot be read on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BagError {
    #[error("not an MCAP bag: {0}")]
    NotMcap(String),
    #[error("the bag is damaged at byte {offset}: {error}{}", after_text(after))]
    Damaged { offset: u64, after: Option<(String, u64)>, error: String },
    #[error("message at log time {log_time} names channel {channel}, which the bag never declared")]
    UnknownChannel { channel: u16, log_time: u64 },
}

fn after_text(after: &Option<(String, u64)>) -> String {
    match after {
        Some((topic, t)) => format!(" (after the message on {topic} at log time {t})"),
        None => " (before any message)".into(),
    }
}

/// The messages of a bag, in the order they are stored. Records are framed here (opcode,
/// length, body) so that every problem has a byte offset, and parsed by the `mcap` crate.
pub struct BagReader<'a> {
    source: Source<'a>,
    /// Where the next record begins.
    position: usize,
    schemas: HashMap<u16, (String, String, Vec<u8>)>,
    channels: HashMap<u16, Arc<Topic>>,
    /// Records unpacked from the current chunk, not yet handed out.
    pending: VecDeque<Record<'static>>,
    last: Option<(String, u64)>,
    done: bool,
}

const FOOTER: u8 = 0x02;
/// A summary is read only if it is at most this long.
const MAX_SUMMARY: u64 = 64 << 20;

/// The schemas and channels a bag's summary section declares, read through its footer; none
/// if the bag has no summary, or one that is damaged (a summary is an index: the data section
/// alone is the bag). `read` is left anywhere.
pub fn declarations(read: &mut (impl std::io::Read + std::io::Seek), len: u64) -> Vec<Record<'static>> {
    use std::io::SeekFrom;
    // The footer record (opcode, length 20, summary start, summary offset start, CRC) and the
    // closing magic.
    const TAIL: u64 = 1 + 8 + 20 + 8;
    let Some(footer_at) = len.checked_sub(TAIL) else { return Vec::new() };
    let mut tail = [0u8; TAIL as usize];
    if read.seek(SeekFrom::Start(footer_at)).is_err() || read.read_exact(&mut tail).is_err() {
        return Vec::new();
    }
    let u64_at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&tail[i..i + 8]);
        u64::from_le_bytes(b)
    };
    if tail[0] != FOOTER || u64_at(1) != 20 || tail[29..] != *mcap::MAGIC {
        return Vec::new();
    }
    let (start, crc) = (u64_at(9), u32::from_le_bytes([tail[25], tail[26], tail[27], tail[28]]));
    if start < mcap::MAGIC.len() as u64 || start >= footer_at || footer_at - start > MAX_SUMMARY {
        return Vec::new();
    }
    let mut summary = vec![0u8; (footer_at - start) as usize];
    if read.seek(SeekFrom::Start(start)).is_err() || read.read_exact(&mut summary).is_err() {
        return Vec::new();
    }
    // The CRC covers the summary and the footer up to its own field (zero: none written).
    if crc != 0 {
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&summary);
        hasher.update(&tail[..25]);
        if hasher.finalize() != crc {
            return Vec::new();
        }
    }
    chunk::records(&summary)
        .map(|records| {
            records.into_iter().filter(|r| matches!(r, Record::Schema { .. } | Record::Channel(_))).collect()
        })
        .unwrap_or_default()
}
/// A record is read only if it is at most this long (a bag's chunks are a few MiB): a length
/// read from the file is bounded before anything is allocated for it.
const MAX_RECORD: u64 = 1 << 30;

/// Where a bag's bytes come from: all in memory, or read as the bag is (a bag larger than
/// memory replays).
enum Source<'a> {
    Bytes(&'a [u8]),
    Stream { read: Box<dyn std::io::Read + Send + 'a>, len: u64 },
}

impl<'a> BagReader<'a> {
    /// Read a bag held in memory; the schemas and channels its summary declares are known from
    /// the start.
    pub fn new(bytes: &'a [u8]) -> Result<Self, BagError> {
        if !bytes.starts_with(mcap::MAGIC) {
            return Err(BagError::NotMcap("it does not begin with the MCAP magic bytes".into()));
        }
        let mut cursor = std::io::Cursor::new(bytes);
        let declared = declarations(&mut cursor, bytes.len() as u64);
        Ok(Self::at_start(Source::Bytes(bytes)).with_declarations(declared))
    }

    /// Know these schemas and channels (from [`declarations`]) before reading: a message whose
    /// channel was declared in a chunk that turns out damaged is still read.
    pub fn with_declarations(mut self, records: Vec<Record<'static>>) -> Self {
        let (schemas, channels): (Vec<_>, Vec<_>) =
            records.into_iter().partition(|r| matches!(r, Record::Schema { .. }));
        for record in schemas.into_iter().chain(channels) {
            let _ = self.record(record);
        }
        self
    }

    /// Read a bag of `len` bytes as it is read from `read` (a file), one record at a time.
    pub fn from_reader(mut read: impl std::io::Read + Send + 'a, len: u64) -> Result<Self, BagError> {
        let mut magic = [0u8; 8];
        if read.read_exact(&mut magic).is_err() || magic != *mcap::MAGIC {
            return Err(BagError::NotMcap("it does not begin with the MCAP magic bytes".into()));
        }
        Ok(Self::at_start(Source::Stream { read: Box::new(read), len }))
    }

    fn at_start(source: Source<'a>) -> Self {
        Self {
            source,
            position: mcap::MAGIC.len(),
            schemas: HashMap::new(),
            channels: HashMap::new(),
            pending: VecDeque::new(),
            last: None,
            done: false,
        }
    }

    /// Every topic declared so far.
    pub fn topics(&self) -> impl Iterator<Item = &Arc<Topic>> {
        self.channels.values()
    }

    /// How many bytes of the bag have been read.
    pub fn position(&self) -> u64 {
        self.position as u64
    }

    /// The bag's size in bytes.
    pub fn len(&self) -> u64 {
        match &self.source {
            Source::Bytes(b) => b.len() as u64,
            Source::Stream { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next record's opcode and body, or an error naming where the bag is damaged.
    fn next_body(&mut self) -> Result<(u8, Cow<'a, [u8]>), BagError> {
        let at = self.position;
        let left = self.len().saturating_sub(at as u64);
        if left < 9 {
            return Err(self.damaged(at, "the file ends in the middle of a record (truncated)".into()));
        }
        let mut head = [0u8; 9];
        match &mut self.source {
            Source::Bytes(b) => head.copy_from_slice(&b[at..at + 9]),
            Source::Stream { read, .. } => {
                if let Err(e) = read.read_exact(&mut head) {
                    return Err(self.damaged(at, format!("reading a record: {e}")));
                }
            }
        }
        let opcode = head[0];
        let mut length = [0u8; 8];
        length.copy_from_slice(&head[1..9]);
        let length = u64::from_le_bytes(length);
        if length > left - 9 {
            let error =
                format!("a record of {length} bytes begins here but only {} remain (truncated)", left - 9);
            return Err(self.damaged(at, error));
        }
        if length > MAX_RECORD {
            return Err(
                self.damaged(at, format!("a record of {length} bytes, more than any bag's ({MAX_RECORD})"))
            );
        }
        let body = match &mut self.source {
            Source::Bytes(b) => Cow::Borrowed(&b[at + 9..at + 9 + length as usize]),
            Source::Stream { read, .. } => {
                let mut body = vec![0u8; length as usize];
                if let Err(e) = read.read_exact(&mut body) {
                    return Err(self.damaged(at, format!("reading a record: {e}")));
                }
                Cow::Owned(body)
            }
        };
        self.position = at + 9 + length as usize;
        Ok((opcode, body))
    }

    fn damaged(&mut self, offset: usize, error: String) -> BagError {
        self.done = true;
        BagError::Damaged { offset: offset as u64, after: self.last.clone(), error }
    }

    /// Take a declaration or turn a message record into a message; other records are None.
    fn record(&mut self, record: Record<'_>) -> Option<Result<BagMessage<'a>, BagError>> {
        match record {
            Record::Schema { header, data } => {
                self.schemas.insert(header.id, (header.name, header.encoding, data.into_owned()));
                None
            }
            Record::Channel(c) => {
                let (message_type, schema_encoding, schema) =
                    self.schemas.get(&c.schema_id).cloned().unwrap_or_default();
                let topic = Topic {
                    id: c.id,
                    name: c.topic,
                    message_type,
                    schema_encoding,
                    schema,
                    message_encoding: c.message_encoding,
                };
                self.channels.insert(c.id, Arc::new(topic));
                None
            }
            Record::Message { header, data } => {
                let Some(topic) = self.channels.get(&header.channel_id).cloned() else {
                    return Some(Err(BagError::UnknownChannel {
                        channel: header.channel_id,
                        log_time: header.log_time,
                    }));
                };
                self.last = Some((topic.name.clone(), header.log_time));
                Some(Ok(BagMessage { topic, log_time: header.log_time, data: Cow::Owned(data.into_owned()) }))
            }
            _ => None,
        }
    }
}

impl<'a> Iterator for BagReader<'a> {
    type Item = Result<Event<'a>, BagError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(record) = self.pending.pop_front() {
                match self.record(record) {
                    Some(Ok(m)) => return Some(Ok(Event::Message(m))),
                    Some(Err(e)) => return Some(Err(e)),
                    None => continue,
                }
            }
            if self.done || self.position as u64 == self.len() {
                // A file that simply stops between records (a recorder killed before its
                // footer) has given everything it has.
                self.done = true;
                return None;
            }
            let at = self.position;
            let (opcode, body) = match self.next_body() {
                Ok(next) => next,
                Err(e) => return Some(Err(e)),
            };
            if opcode == FOOTER {
                self.done = true;
                return None;
            }
            let record = match chunk::parse_record(opcode, &body) {
                Ok(r) => r,
                Err(e) => return Some(Err(self.damaged(at, format!("a record does not parse: {e}")))),
            };
            if let Record::Chunk { header, data } = record {
                // Unpack the whole chunk before handing out any of it: its checksum is only
                // known at its end.
                match chunk::unpack(&header, &data) {
                    Ok(records) => self.pending.extend(records),
                    Err(error) => return Some(Ok(Event::DamagedChunk { offset: at as u64, error })),
                }
                continue;
            }
            match self.record(record) {
                Some(Ok(m)) => return Some(Ok(Event::Message(m))),
                Some(Err(e)) => return Some(Err(e)),
                None => continue,
            }
        }
    }
}
