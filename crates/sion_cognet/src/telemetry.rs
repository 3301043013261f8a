//! What a cognet's loop reports about itself: every wake, tick, phase and system brackets its
//! work with start and complete / failed / interrupted events (and continuous mode reports the
//! wakes it skipped). Events go to `tracing`, and on request to an MCAP file (one channel of
//! JSON messages that Foxglove or Rerun can open), and to an in-memory recorder for tests.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// Which bracket an event belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Wake,
    Tick,
    Phase,
    System,
}

/// How the bracketed work went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Start,
    Complete,
    Failed,
    Interrupted,
    /// Continuous mode: wakes that fell due while another ran, and were skipped.
    Skipped,
}

/// One telemetry event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// `cognet:<scope>:<outcome>`, as the seed names them.
    pub name: String,
    pub scope: Scope,
    pub outcome: Outcome,
    pub wake: u64,
    pub tick: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// For `skipped`: how many wakes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    pub time_ns: i64,
}

impl Event {
    /// `"tick:start"`, `"phase:failed(sync)"`, …: compact, for pinning sequences in tests.
    pub fn short(&self) -> String {
        let what = serde_json::to_value(self.scope)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let how = serde_json::to_value(self.outcome)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        match (&self.system, &self.phase, self.count) {
            (_, _, Some(n)) => format!("{what}:{how}({n})"),
            (Some(s), _, _) if self.scope == Scope::System => format!("{what}:{how}({s})"),
            (_, Some(p), _) if self.scope == Scope::Phase => format!("{what}:{how}({p})"),
            _ => format!("{what}:{how}"),
        }
    }
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos().min(i64::MAX as u128) as i64)
        .unwrap_or(0)
}

struct McapSink {
    writer: mcap::Writer<BufWriter<File>>,
    channel: u16,
    sequence: u32,
}

#[derive(Default)]
struct Sinks {
    mcap: Option<McapSink>,
    recorded: Option<Vec<Event>>,
}

/// Where events go. Clones share the sinks.
#[derive(Clone, Default)]
pub struct Telemetry {
    sinks: Arc<Mutex<Sinks>>,
}

/// JSON Schema of an event, for MCAP readers.
const EVENT_SCHEMA: &str = r#"{"type":"object","title":"sion_memory cognet telemetry event","properties":{"name":{"type":"string"},"scope":{"type":"string"},"outcome":{"type":"string"},"wake":{"type":"integer"},"tick":{"type":"integer"},"phase":{"type":"string"},"system":{"type":"string"},"error":{"type":"string"},"count":{"type":"integer"},"time_ns":{"type":"integer"}}}"#;

impl Telemetry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Also keep every event in memory (for tests and status lines).
    pub fn recording(self) -> Self {
        self.sinks.lock().unwrap_or_else(PoisonError::into_inner).recorded = Some(Vec::new());
        self
    }

    /// Also write events to an MCAP file, channel `/cognet/telemetry`, JSON messages.
    pub fn to_mcap(self, path: &Path) -> Result<Self, mcap::McapError> {
        let file = File::create(path).map_err(mcap::McapError::Io)?;
        let mut writer = mcap::Writer::new(BufWriter::new(file))?;
        let schema = writer.add_schema("sion_memory.CognetEvent", "jsonschema", EVENT_SCHEMA.as_bytes())?;
        let channel = writer.add_channel(schema, "/cognet/telemetry", "json", &Default::default())?;
        self.sinks.lock().unwrap_or_else(PoisonError::into_inner).mcap =
            Some(McapSink { writer, channel, sequence: 0 });
        Ok(self)
    }

    /// The events recorded so far (empty unless [`Telemetry::recording`]).
    pub fn recorded(&self) -> Vec<Event> {
        self.sinks.lock().unwrap_or_else(PoisonError::into_inner).recorded.clone().unwrap_or_default()
    }

    pub(crate) fn emit(
        &self,
        scope: Scope,
        outcome: Outcome,
        clock: &super::WorldClock,
        error: Option<String>,
        count: Option<u64>,
    ) {
        let name = format!(
            "cognet:{}:{}",
            serde_json::to_value(scope).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
            serde_json::to_value(outcome)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        );
        let event = Event {
            name,
            scope,
            outcome,
            wake: clock.wake,
            tick: clock.tick,
            phase: clock.phase.clone(),
            system: clock.system.clone(),
            error,
            count,
            time_ns: now_ns(),
        };
        match outcome {
            Outcome::Failed => {
                tracing::warn!(target: "cognet", event = %event.name, wake = event.wake, tick = event.tick, phase = ?event.phase, system = ?event.system, error = ?event.error)
            }
            Outcome::Skipped => {
                tracing::info!(target: "cognet", event = %event.name, wake = event.wake, count = ?event.count)
            }
            _ => {
                tracing::debug!(target: "cognet", event = %event.name, wake = event.wake, tick = event.tick, phase = ?event.phase, system = ?event.system)
            }
        }
        let mut sinks = self.sinks.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sink) = sinks.mcap.as_mut() {
            let header = mcap::records::MessageHeader {
                channel_id: sink.channel,
                sequence: sink.sequence,
                log_time: event.time_ns.max(0) as u64,
                publish_time: event.time_ns.max(0) as u64,
            };
            sink.sequence = sink.sequence.wrapping_add(1);
            let bytes = serde_json::to_vec(&event).unwrap_or_default();
            if let Err(e) = sink.writer.write_to_known_channel(&header, &bytes) {
                tracing::warn!(target: "cognet", "telemetry file dropped: {e}");
                sinks.mcap = None;
            }
        }
        if let Some(recorded) = sinks.recorded.as_mut() {
            recorded.push(event);
        }
    }

    /// Finish the MCAP file (its summary and index); events after this go to tracing only.
    pub fn finish(&self) {
        let mut sinks = self.sinks.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(mut sink) = sinks.mcap.take()
            && let Err(e) = sink.writer.finish()
        {
            tracing::warn!(target: "cognet", "finishing the telemetry file: {e}");
        }
    }
}
