//! A memory out as MCAP, which Foxglove and other MCAP tools open without anything of ours:
//! Foxglove's well-known schemas (crate::foxglove: transforms, trajectories, atoms as boxes,
//! camera frames, answers and their verdicts), and beside them JSON messages with JSON Schemas:
//!
//! - `/sion/atoms`: every atom of the log in its JSON form (docs/ATOM.md) with id and
//!   position, at the log time of its valid-time start;
//! - `/sion/heads`: every head the ledger committed, at the time of its Pulse;
//! - `/sion/answers`: answers given as proof files, each verified here, with what it proves,
//!   its atoms' positions and the proof's bytes (base64) for `sion memory verify`.
//!
//! One timeline, the atoms' valid time: each atom at the start of its valid interval (one valid
//! since before the memory's first stamp, or from the beginning of time, at that first stamp),
//! each head at the valid time of the latest atom it holds (its Pulse's own time is its
//! publish time), each answer at the start of its question's interval within the memory's.

use std::collections::BTreeMap;
use std::io::{Seek, Write};

use base64::Engine as _;
use serde_json::{Value, json};

use sion_store::memory::Memory;
use sion_verify::atom::Payload;
use sion_verify::proof::ProofFile;
use sion_viz::scene::Scene;

/// What an export wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportSummary {
    pub atoms: u64,
    pub heads: u64,
    pub answers: u64,
    /// What the Foxglove channels hold.
    pub foxglove: crate::foxglove::FoxgloveSummary,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    #[error("writing the MCAP file: {0}")]
    Write(#[from] mcap::McapError),
    #[error("reading the log: {0}")]
    Log(#[from] sion_store::log::LogError),
    #[error("reading the ledger: {0}")]
    Ledger(#[from] sion_store::ledger::LedgerError),
    #[error("answer {name}: not a proof file: {error}")]
    Answer { name: String, error: String },
}

fn schema(title: &str, properties: Value) -> Vec<u8> {
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": title,
        "type": "object",
        "properties": properties,
    });
    serde_json::to_vec_pretty(&schema).unwrap_or_default()
}

fn atom_schema() -> Vec<u8> {
    let int = json!({"type": "integer"});
    let corner = json!({"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 3});
    schema(
        "sion_memory.Atom",
        json!({
            "id": {"type": "string", "description": "BLAKE3 of the canonical encoding"},
            "position": int,
            "kind": {"type": "string"},
            "frame": {"type": "string"},
            "min": corner,
            "max": corner,
            "from": {"type": "integer", "description": "valid from, ns since the epoch"},
            "to": {"type": "integer", "description": "valid until (excluded), ns"},
            "confidence": {"type": "integer", "description": "permille"},
            "subject": {"type": "string"},
        }),
    )
}

fn head_schema() -> Vec<u8> {
    let hex = json!({"type": "string", "description": "hex"});
    schema(
        "sion_memory.Head",
        json!({
            "log": {"type": "integer"}, "size": {"type": "integer"}, "root": hex, "index": hex,
            "manifest": hex, "commits": {"type": "integer"}, "pulse": {"type": "integer"},
            "pulse_time_ns": {"type": "integer"},
        }),
    )
}

fn answer_schema() -> Vec<u8> {
    schema(
        "sion_memory.Answer",
        json!({
            "name": {"type": "string"}, "kind": {"type": "string"}, "valid": {"type": "boolean"},
            "statement": {"type": "string"}, "error": {"type": "string"},
            "head_size": {"type": "integer"},
            "positions": {"type": "array", "items": {"type": "integer"}},
            "proof_base64": {"type": "string"},
        }),
    )
}

/// Write `memory`'s atoms and heads, and `answers` (name, proof file bytes), into `out`.
pub fn export<W: Write + Seek>(
    memory: &Memory,
    out: W,
    answers: &[(String, Vec<u8>)],
    mut progress: impl FnMut(u64),
) -> Result<(ExportSummary, W), ExportError> {
    let mut mcap = mcap::WriteOptions::new()
        .library(concat!("sion_memory ", env!("CARGO_PKG_VERSION")))
        .compression(Some(mcap::Compression::Zstd))
        .create(out)?;
    let none = BTreeMap::new();
    let channel = |mcap: &mut mcap::Writer<W>, topic: &str, title: &str, text: Vec<u8>| {
        let schema = mcap.add_schema(title, "jsonschema", &text)?;
        mcap.add_channel(schema, topic, "json", &none)
    };
    let atoms_channel = channel(&mut mcap, "/sion/atoms", "sion_memory.Atom", atom_schema())?;
    let heads_channel = channel(&mut mcap, "/sion/heads", "sion_memory.Head", head_schema())?;
    let answers_channel = channel(&mut mcap, "/sion/answers", "sion_memory.Answer", answer_schema())?;
    let mut summary = ExportSummary::default();
    let mut sequence = 0u32;
    let mut write = |mcap: &mut mcap::Writer<W>, channel: u16, time: i64, publish: i64, value: &Value| {
        sequence = sequence.wrapping_add(1);
        let t = |ns: i64| u64::try_from(ns.max(0)).unwrap_or(0);
        let header = mcap::records::MessageHeader {
            channel_id: channel,
            sequence,
            log_time: t(time),
            publish_time: t(publish),
        };
        mcap.write_to_known_channel(&header, &serde_json::to_vec(value).unwrap_or_default())
    };

    // The timeline's span, and the valid time each head reaches, before anything is written.
    let ledger = memory.ledger();
    let mut heads = Vec::new();
    for version in ledger.versions_from(memory.log_id(), 0) {
        heads.push(version?);
    }
    let mut head_sizes: Vec<u64> = heads.iter().map(|v| v.head.size).collect();
    head_sizes.sort_unstable();
    let (mut first, mut last) = (i64::MAX, i64::MIN);
    let mut reached: BTreeMap<u64, i64> = BTreeMap::new();
    let mut next_head = 0;
    for entry in memory.log().scan(0) {
        let (position, atom) = entry?;
        while next_head < head_sizes.len() && head_sizes[next_head] <= position {
            reached.insert(head_sizes[next_head], last);
            next_head += 1;
        }
        let from = atom.parts().valid.from_ns;
        if from > 0 {
            first = first.min(from);
            last = last.max(from);
        }
    }
    for size in &head_sizes[next_head..] {
        reached.insert(*size, last);
    }
    let (first, last) = if first <= last { (first, last) } else { (0, 0) };
    let on_timeline = |ns: i64| ns.clamp(first, last);

    let mut fox = crate::foxglove::Channels::new();
    for entry in memory.log().scan(0) {
        let (position, atom) = entry?;
        let time = on_timeline(atom.parts().valid.from_ns);
        let value = serde_json::to_value(atom.to_json(Some(position))).unwrap_or(Value::Null);
        write(&mut mcap, atoms_channel, time, time, &value)?;
        let blob = match &atom.parts().payload {
            Payload::Blob(b) => memory.blobs().get(&b.hash).ok().map(|bytes| (b.media_type.clone(), bytes)),
            _ => None,
        };
        fox.atom(&mut mcap, position, &atom, time, blob.as_ref().map(|(m, b)| (m.as_str(), b.as_slice())))?;
        summary.atoms += 1;
        if summary.atoms.is_multiple_of(4096) {
            progress(summary.atoms);
        }
    }

    for version in &heads {
        let pulse_time = ledger.header(version.committed_at).map_or(0, |h| h.header.time_ns);
        let h = &version.head;
        let value = json!({
            "log": version.id.0, "size": h.size, "root": hex::encode(h.root), "index": hex::encode(h.index),
            "manifest": hex::encode(h.manifest), "commits": version.commits, "pulse": version.committed_at,
            "pulse_time_ns": pulse_time,
        });
        let time = reached.get(&h.size).copied().map_or(first, on_timeline);
        write(&mut mcap, heads_channel, time, pulse_time, &value)?;
        summary.heads += 1;
    }

    for (name, bytes) in answers {
        let file = ProofFile::decode(bytes)
            .map_err(|e| ExportError::Answer { name: name.clone(), error: e.to_string() })?;
        let checked = file.verify(Some(&ledger.public_key()));
        let (valid, statement, error, head_size, positions, pulse_time) = match &checked {
            Ok(v) => {
                let positions = v.claim.positions();
                (true, v.statement(), String::new(), v.head.size, positions, v.pulse.map_or(0, |(_, t, _)| t))
            }
            Err(e) => (false, String::new(), e.to_string(), 0, Vec::new(), 0),
        };
        let kind = checked.as_ref().map_or("", |v| v.claim.kind());
        let scene = Scene::of(&file, Some(&ledger.public_key()));
        let time = match &scene.question {
            Some(q) => on_timeline(q.from_ns),
            None => reached.get(&scene.head_size).copied().map_or(first, on_timeline),
        };
        let value = json!({
            "name": name, "kind": kind, "valid": valid, "statement": statement, "error": error,
            "head_size": head_size, "positions": positions,
            "proof_base64": base64::engine::general_purpose::STANDARD.encode(bytes),
        });
        write(&mut mcap, answers_channel, time, pulse_time, &value)?;
        fox.answer(&mut mcap, name, &scene, time)?;
        summary.answers += 1;
    }
    summary.foxglove = fox.summary.clone();
    mcap.finish()?;
    Ok((summary, mcap.into_inner()))
}
