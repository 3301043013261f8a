//! A bag as rosbag2 writes one: `ros2` profile, one `ros2msg` schema per type with its full
//! definition, one `cdr` channel per topic, zstd chunks with indexes and a summary.

use std::collections::{BTreeMap, HashMap};
use std::io::{Seek, Write};

use mcap::records::MessageHeader;

use sion_ingest::schema;

/// Writes ROS 2 messages (CDR bytes) into an MCAP bag.
pub struct BagWriter<W: Write + Seek> {
    mcap: mcap::Writer<W>,
    schemas: HashMap<String, u16>,
    channels: HashMap<String, u16>,
    sequence: u32,
}

impl<W: Write + Seek> BagWriter<W> {
    /// A writer of zstd-compressed chunks.
    pub fn new(out: W) -> Result<Self, mcap::McapError> {
        Self::with_compression(out, true)
    }

    /// A writer of zstd-compressed chunks (`compress`) or of plain ones, as rosbag2 writes
    /// without a compression preset: a plain bag is as large as what it holds.
    pub fn with_compression(out: W, compress: bool) -> Result<Self, mcap::McapError> {
        let mcap = mcap::WriteOptions::new()
            .profile("ros2")
            .library(concat!("sion_memory ", env!("CARGO_PKG_VERSION")))
            .compression(compress.then_some(mcap::Compression::Zstd))
            .chunk_size(Some(4 << 20))
            .create(out)?;
        Ok(Self { mcap, schemas: HashMap::new(), channels: HashMap::new(), sequence: 0 })
    }

    /// Declare a topic of a message type this package knows (`sensor_msgs/msg/Image`);
    /// `latched` marks it transient local, as rosbag2 records `/tf_static` and `/map`.
    pub fn topic(&mut self, name: &str, message_type: &str, latched: bool) -> Result<u16, mcap::McapError> {
        if let Some(&id) = self.channels.get(name) {
            return Ok(id);
        }
        let schema_id = match self.schemas.get(message_type) {
            Some(&id) => id,
            None => {
                // Only types the ingest reads are written; an unknown one is a programming error
                // in the caller, reported as an I/O error rather than a panic.
                let text = schema::definition(message_type)
                    .map_err(|e| mcap::McapError::Io(std::io::Error::other(e.to_string())))?;
                let id = self.mcap.add_schema(message_type, "ros2msg", text.as_bytes())?;
                self.schemas.insert(message_type.to_owned(), id);
                id
            }
        };
        let durability = if latched { "transient_local" } else { "volatile" };
        let qos = format!(
            "- history: keep_last\n  depth: {}\n  reliability: reliable\n  durability: {durability}\n",
            if latched { 1 } else { 10 }
        );
        let metadata = BTreeMap::from([("offered_qos_profiles".to_owned(), qos)]);
        let id = self.mcap.add_channel(schema_id, name, "cdr", &metadata)?;
        self.channels.insert(name.to_owned(), id);
        Ok(id)
    }

    /// Write one message; `log_time` in nanoseconds since the epoch.
    pub fn write(&mut self, channel: u16, log_time: u64, cdr: &[u8]) -> Result<(), mcap::McapError> {
        self.sequence = self.sequence.wrapping_add(1);
        let header =
            MessageHeader { channel_id: channel, sequence: self.sequence, log_time, publish_time: log_time };
        self.mcap.write_to_known_channel(&header, cdr)
    }

    /// Write the summary and the footer.
    pub fn finish(mut self) -> Result<W, mcap::McapError> {
        self.mcap.finish()?;
        Ok(self.mcap.into_inner())
    }
}
