//! The node's intake: raw messages from every subscription become atoms (`ingest`), their
//! blobs and then the atoms are made durable in batches (whatever arrived while the last batch
//! was being written: one fsync for many messages), and the brain is told. Runs on a thread of
//! its own, so conversion and disk never hold up the ROS executor.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::brain::Sensors;
use crate::ingest::{Ingest, Stream};

/// A message as it arrived: which stream, its CDR bytes, when.
pub struct Arrival {
    pub stream: Stream,
    pub bytes: Vec<u8>,
    pub at: Instant,
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

/// What the intake has done, per stream: shared with the stats publisher.
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

pub type Counters = Arc<Mutex<BTreeMap<Stream, StreamCounters>>>;

/// Logs a rejection reason at most once per interval, with how many were refused meanwhile.
struct RejectLog {
    interval: Duration,
    last: BTreeMap<(Stream, &'static str), (Option<Instant>, u64)>,
}

impl RejectLog {
    fn note(&mut self, stream: Stream, topic: &str, reason: &'static str, detail: &dyn std::fmt::Display) {
        let now = Instant::now();
        let entry = self.last.entry((stream, reason)).or_insert((None, 0));
        entry.1 += 1;
        if entry.0.is_none_or(|last| now.duration_since(last) >= self.interval) {
            tracing::warn!("{topic}: refused {} message(s) for {reason}, e.g. {detail}", entry.1);
            *entry = (Some(now), 0);
        }
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

fn halts(e: &crate::log::LogError) -> bool {
    matches!(e, crate::log::LogError::Halted(_) | crate::log::LogError::Io { .. })
}

/// Run the intake until every sender is gone. `told` hears the log size after each batch.
pub fn run(
    mut ingest: Ingest,
    sensors: Sensors,
    mut arrivals: mpsc::Receiver<Arrival>,
    queued: Arc<std::sync::atomic::AtomicUsize>,
    counters: Counters,
    told: mpsc::UnboundedSender<u64>,
    log_interval: Duration,
) {
    let mut rejects = RejectLog { interval: log_interval, last: BTreeMap::new() };
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
        let taken_bytes: usize = batch.iter().map(|a| a.bytes.len()).sum();
        queued.fetch_sub(taken_bytes, std::sync::atomic::Ordering::Relaxed);
        let mut atoms = Vec::new();
        let mut blobs = Vec::new();
        let mut finished = Vec::new();
        let mut received: BTreeMap<Stream, u64> = BTreeMap::new();
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
        for arrival in batch.drain(..) {
            *received.entry(arrival.stream).or_default() += 1;
            let taken = ingest.take(arrival.stream, &arrival.bytes);
            take(taken, Some(arrival.at), &mut arrived);
        }
        if !open {
            // The end: frames still waiting for a transform will not get one.
            take(ingest.flush(), None, &mut arrived);
        }
        let outcome = sensors.keep_blobs(&blobs).map_err(|e| e.to_string()).and_then(|()| {
            if atoms.is_empty() {
                return Ok(Vec::new());
            }
            sensors.take_in(atoms).map_err(|e| {
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
        });
        let durable = Instant::now();
        let last_position = match &outcome {
            Ok(appended) => appended.iter().map(|a| a.position).max(),
            Err(e) => {
                tracing::error!("could not make {} messages' atoms durable: {e}", finished.len());
                None
            }
        };
        let mut counters = counters.lock().unwrap_or_else(PoisonError::into_inner);
        for (stream, n) in received {
            counters.entry(stream).or_default().received += n;
        }
        for f in finished {
            let topic = ingest.config().topic(f.stream).to_owned();
            for r in &f.rejected {
                rejects.note(f.stream, &topic, r.reason(), r);
            }
            let at = arrived.remove(&f.message);
            let c = counters.entry(f.stream).or_default();
            for r in &f.rejected {
                *c.rejected.entry(r.reason()).or_default() += 1;
            }
            if outcome.is_err() {
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
                    c.latency.record(durable.duration_since(at));
                }
            }
        }
        drop(counters);
        if let Some(position) = last_position
            && told.send(position).is_err()
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
