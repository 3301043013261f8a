//! `sion memory evidence`: one answer out as a directory a colleague or an auditor checks and
//! looks at with nothing of ours but a verifier (docs/EVIDENCE.md): the proof, the answer's
//! atoms, the payloads they commit to, the camera frames as pictures, and the answer drawn for
//! Foxglove (MCAP) and Rerun.

use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Args;
use sion_memory::atom::Payload;
use sion_memory::memory::{MemberKeys, Opened};
use sion_memory::proof::{Claim, ProofFile, Verified};
use sion_memory::time::rfc3339;
use sion_memory::viz::frames::{self, Pixels};
use sion_memory::viz::scene::Scene;

use crate::common::{open_memory_read_only, prove_range_warned};
use crate::ui;

#[derive(Args)]
#[command(group(clap::ArgGroup::new("answer").required(true).args(["proof", "query_box"])))]
pub(crate) struct EvidenceArgs {
    /// The memory directory.
    #[arg(long, env = "SION_DATA")]
    data: PathBuf,
    /// The answer: a proof file (from `recall --out`, `subject --out`) ...
    #[arg(long, value_name = "FILE")]
    proof: Option<PathBuf>,
    /// ... or a question asked now: what was seen in this box, X0,Y0,Z0,X1,Y1,Z1 in --frame,
    /// each value with its unit (0m,0m,-1m,10m,8m,3m) or bare millimetres.
    #[arg(long = "box", value_name = "X0,Y0,Z0,X1,Y1,Z1", allow_hyphen_values = true,
          value_parser = crate::common::box_value, conflicts_with = "proof")]
    query_box: Option<sion_memory::atom::BoxMm>,
    /// The frame the box is in (`/map` is `map`).
    #[arg(long, default_value = "map", value_parser = crate::common::frame_value, requires = "query_box")]
    frame: String,
    /// Start of the interval: RFC 3339, seconds with their unit, or bare nanoseconds [default:
    /// the beginning of time].
    #[arg(long, allow_hyphen_values = true, value_parser = crate::common::time_from, requires = "query_box")]
    from: Option<i64>,
    /// End of the interval (excluded), as --from [default: the end of time].
    #[arg(long, allow_hyphen_values = true, value_parser = crate::common::time_to, requires = "query_box")]
    to: Option<i64>,
    /// Answer as of the committed head with this many atoms [default: the latest].
    #[arg(long, requires = "query_box")]
    as_of: Option<u64>,
    /// The directory to write (made; it must not exist, or be empty).
    #[arg(long)]
    out: PathBuf,
    /// Open a sealed memory's payloads as this member (their key directory) instead of with the
    /// writer's keys.
    #[arg(long, value_name = "DIR")]
    keys: Option<PathBuf>,
}

/// Each payload of the answer opened: its media type and bytes, by position.
type OpenedPayloads = std::collections::HashMap<u64, (String, Vec<u8>)>;

/// What the directory holds, for the summary.
#[derive(Default)]
struct Written {
    not_opened: Vec<(u64, String)>,
    blobs: u64,
    frames: u64,
    scans: u64,
    not_had: Vec<(u64, String)>,
}

pub(crate) fn evidence(a: EvidenceArgs) -> Result<ExitCode> {
    let existed = a.out.exists();
    // Refused before anything is written: a directory that holds something is never touched.
    if existed
        && std::fs::read_dir(&a.out).with_context(|| format!("reading {}", a.out.display()))?.next().is_some()
    {
        bail!("--out {}: the directory is not empty (evidence is written into a new one)", a.out.display());
    }
    let written = write_evidence(&a);
    // A directory half written is no evidence: it goes (one the user made stays, emptied).
    if written.is_err() && a.out.is_dir() {
        if existed {
            for entry in std::fs::read_dir(&a.out).into_iter().flatten().flatten() {
                let p = entry.path();
                let _ = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
            }
        } else {
            let _ = std::fs::remove_dir_all(&a.out);
        }
    }
    written
}

fn write_evidence(a: &EvidenceArgs) -> Result<ExitCode> {
    let memory = open_memory_read_only(&a.data)?;
    let file = match &a.proof {
        Some(path) => {
            let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            ProofFile::decode(&bytes).with_context(|| format!("{} is not a proof file", path.display()))?
        }
        None => {
            let bounds = a.query_box.context("give --proof or --box")?;
            let query = sion_memory::index::geom::Query::new(
                &a.frame,
                bounds,
                a.from.unwrap_or(i64::MIN),
                a.to.unwrap_or(i64::MAX),
            )
            .context("the question")?;
            prove_range_warned(&memory, &query, a.as_of)?.0
        }
    };
    let key = memory.ledger().public_key();
    let verified = file
        .verify(Some(&key))
        .context("the answer does not verify against this memory's ledger: no evidence is written for it")?;
    let atoms = sion_memory::evidence::answer_atoms(&verified).map_err(|e| anyhow::anyhow!("{e}"))?.to_vec();
    if a.keys.is_some() && memory.space().is_none() {
        bail!("--keys: this memory is in the clear; its payloads need no member's key (leave --keys out)");
    }
    make_empty_dir(&a.out)?;
    let member = match &a.keys {
        Some(dir) => Some(
            MemberKeys::open(&sion_disk::Disk::os(), dir)
                .with_context(|| format!("opening the member key in {}", dir.display()))?,
        ),
        None => None,
    };

    let out = &a.out;
    let write = |name: &str, bytes: &[u8]| -> Result<()> {
        let path = out.join(name);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))
    };
    let proof_bytes = file.encode();
    write("answer.sionproof", &proof_bytes)?;

    // Each payload the answer commits to: as committed (checked by its hash), and opened.
    let mut written = Written::default();
    let mut opened_blobs: OpenedPayloads = Default::default();
    let bar = ui::bar(atoms.len() as u64, "atoms");
    for (i, (position, atom)) in atoms.iter().enumerate() {
        bar.set_position(i as u64);
        let Payload::Blob(blob) = &atom.parts().payload else { continue };
        // The bytes the atom commits to: a sealed memory keeps its blobs sealed, in its space.
        let committed = match memory.space() {
            Some(_) => memory
                .sealed_bytes(*position)
                .map_err(|e| e.to_string())
                .and_then(|s| s.map(|(_, bytes, _)| bytes).ok_or_else(|| "it is not sealed".to_owned())),
            None => memory.blobs().get(&blob.hash).map_err(|e| e.to_string()),
        };
        match committed {
            Ok(bytes) => {
                write(&format!("blobs/{position}"), &bytes)?;
                written.blobs += 1;
            }
            Err(e) => {
                written.not_had.push((*position, format!("its payload is not in the memory ({e})")));
                continue;
            }
        }
        let opened = match &member {
            Some(m) => memory
                .sealed_bytes(*position)
                .map_err(anyhow::Error::from)
                .and_then(|s| s.context("no sealed payload"))
                .and_then(|(atom, bytes, kind)| Ok(m.open_payload(atom.parts(), &bytes, kind)?)),
            None => memory.open_payload(*position).map_err(anyhow::Error::from),
        };
        match opened {
            // A sealed blob's own media type says "sealed"; the opened one says what it is.
            Ok(Opened::Blob { media_type, content }) => {
                if memory.space().is_some() || member.is_some() {
                    write(&format!("opened/{position}"), &content)?;
                }
                if let Some(frame) = frames::decode(&media_type, &content) {
                    write_frame(out, "frames", *position, &frame)?;
                    written.frames += 1;
                } else if let Some(scan) = frames::decode_scan(&media_type, &content) {
                    write_frame(out, "scans", *position, &scan)?;
                    written.scans += 1;
                }
                opened_blobs.insert(*position, (media_type, content));
            }
            Ok(Opened::Inline(_)) => {}
            Err(e) => written
                .not_opened
                .push((*position, format!("its payload is here sealed but does not open: {e:#}"))),
        }
    }
    bar.finish_and_clear();

    let scene = Scene::of(&file, Some(&key));
    write(
        "answer.json",
        serde_json::to_string_pretty(&answer_json(&verified, &scene, &key.to_bytes()))?.as_bytes(),
    )?;
    write_mcap(out, &atoms, &scene, &opened_blobs)?;
    let rrd = write_rrd(out, &file, &key, &opened_blobs)?;
    write("README.md", readme(&verified, &scene, &key.to_bytes(), &written, rrd).as_bytes())?;

    outln!(
        "wrote {}: the answer of {} atoms, proved ({} bytes)",
        out.display(),
        atoms.len(),
        proof_bytes.len()
    );
    outln!("  proves  {}", verified.statement());
    if let Some(asked) = scene.asked() {
        outln!("  asked   {asked}");
    }
    outln!(
        "  files   answer.sionproof, answer.json, {} payloads in blobs/, {} frames in frames/, {} scans in scans/, answer.mcap{}, README.md",
        written.blobs,
        written.frames,
        written.scans,
        if rrd { ", answer.rrd" } else { "" }
    );
    for (position, why) in written.not_had.iter().chain(&written.not_opened) {
        outln!("  atom {position}: {why}");
    }
    outln!("  check   sion memory verify --ledger-key {} {}", hex::encode(key.to_bytes()), out.display());
    Ok(ExitCode::SUCCESS)
}

fn make_empty_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        let mut entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
        if entries.next().is_some() {
            bail!("--out {}: the directory is not empty (evidence is written into a new one)", dir.display());
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

/// A camera frame (or a scan's picture) as a picture file in `dir`: raw pixels as PNG, a
/// compressed frame as it came.
fn write_frame(out: &Path, dir: &str, position: u64, frame: &frames::Frame) -> Result<()> {
    let dir = out.join(dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let camera: String = frame
        .camera
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .collect();
    let stem = format!("{position}-{camera}");
    let (path, bytes) = match &frame.pixels {
        Pixels::Encoded { media_type, data } => {
            let ext = if *media_type == "image/png" { "png" } else { "jpg" };
            (dir.join(format!("{stem}.{ext}")), data.clone())
        }
        Pixels::Rgb { width, height, data } => {
            (dir.join(format!("{stem}.png")), png(*width, *height, png::ColorType::Rgb, data)?)
        }
        Pixels::Gray { width, height, data } => {
            (dir.join(format!("{stem}.png")), png(*width, *height, png::ColorType::Grayscale, data)?)
        }
    };
    std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))
}

fn png(width: u32, height: u32, colour: png::ColorType, data: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(colour);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().context("encoding a frame as PNG")?;
    writer.write_image_data(data).context("encoding a frame as PNG")?;
    writer.finish().context("encoding a frame as PNG")?;
    Ok(out)
}

fn answer_json(v: &Verified, scene: &Scene, key: &[u8; 32]) -> serde_json::Value {
    let atoms: Vec<serde_json::Value> = match &v.claim {
        Claim::Range { atoms, .. } | Claim::List { atoms, .. } => atoms
            .iter()
            .map(|(p, a)| serde_json::to_value(a.to_json(Some(*p))).unwrap_or(serde_json::Value::Null))
            .collect(),
        _ => Vec::new(),
    };
    serde_json::json!({
        "format": "sion-evidence/1",
        "kind": v.claim.kind(),
        "statement": v.statement(),
        "asked": scene.asked(),
        "ledger_key": hex::encode(key),
        "head": {
            "log": v.log.0,
            "size": v.head.size,
            "root": hex::encode(v.head.root),
            "index": hex::encode(v.head.index),
        },
        "pulse": v.pulse.map(|(n, t, _)| serde_json::json!({"number": n, "time": rfc3339(t), "time_ns": t})),
        "atoms": atoms,
    })
}

/// The answer for Foxglove: its atoms (with their frames, opened) and its scene, on valid time.
fn write_mcap(
    out: &Path,
    atoms: &[(u64, sion_memory::atom::Atom)],
    scene: &Scene,
    opened: &OpenedPayloads,
) -> Result<()> {
    let path = out.join("answer.mcap");
    let file = std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    let mut mcap = mcap::WriteOptions::new()
        .library(concat!("sion_memory ", env!("CARGO_PKG_VERSION")))
        .compression(Some(mcap::Compression::Zstd))
        .create(BufWriter::new(file))
        .with_context(|| format!("writing {}", path.display()))?;
    let mut fox = sion_memory::bag::foxglove::Channels::new();
    // One timeline, the answer's valid time, as the export's: an atom valid from before the
    // answer's first stamp (or from the beginning of time) at that stamp.
    let stamps = atoms.iter().map(|(_, a)| a.parts().valid.from_ns).filter(|t| *t > 0);
    let (first, last) = (stamps.clone().min().unwrap_or(0), stamps.max().unwrap_or(0));
    let on_timeline = |ns: i64| ns.clamp(first, last);
    for (position, atom) in atoms {
        let time = on_timeline(atom.parts().valid.from_ns);
        let blob = opened.get(position).map(|(media_type, bytes)| (media_type.as_str(), bytes.as_slice()));
        fox.atom(&mut mcap, *position, atom, time, blob)?;
    }
    let time = scene.question.map_or(first, |q| on_timeline(q.from_ns));
    fox.answer(&mut mcap, "answer", scene, time)?;
    mcap.finish().with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(feature = "viz")]
fn write_rrd(
    out: &Path,
    file: &ProofFile,
    key: &ed25519_dalek::VerifyingKey,
    opened: &OpenedPayloads,
) -> Result<bool> {
    let path = out.join("answer.rrd");
    let rec = rerun::RecordingStreamBuilder::new("sion_memory")
        .recording_name("evidence")
        .save(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    rec.log_static("world", &rerun::archetypes::ViewCoordinates::RIGHT_HAND_Z_UP())?;
    let drawn =
        sion_memory::viz::draw_answer(&rec, file, Some(key), &|position, _| opened.get(&position).cloned())
            .context("drawing the answer")?;
    rec.log_static(
        "legend",
        &rerun::archetypes::TextDocument::from_markdown(sion_memory::viz::legend_markdown()),
    )?;
    sion_memory::viz::send_blueprint(&rec, &drawn.cameras, true).context("writing the recording's layout")?;
    rec.flush_blocking().context("writing the recording")?;
    Ok(true)
}

#[cfg(not(feature = "viz"))]
fn write_rrd(_: &Path, _: &ProofFile, _: &ed25519_dalek::VerifyingKey, _: &OpenedPayloads) -> Result<bool> {
    Ok(false)
}

fn readme(v: &Verified, scene: &Scene, key: &[u8; 32], written: &Written, rrd: bool) -> String {
    let key = hex::encode(key);
    let pulse = match v.pulse {
        Some((n, t, _)) => format!("committed at the ledger's Pulse {n} ({})", rfc3339(t)),
        None => "not attested by a ledger".to_owned(),
    };
    let mut out = format!(
        "# Evidence: one answer of a robot's memory\n\n\
         **Proves:** {}\n\n{}\
         The head: {} atoms, log root `{}`, {pulse}, signed by the ledger key `{key}`.\n\n\
         ## Check it\n\n\
         Check it against a ledger key *you* trust (the one above is what this memory's ledger \
         said; compare it with one you had from elsewhere):\n\n\
         ```sh\n\
         sion memory verify --ledger-key {key} .            # this directory\n\
         python3 -c 'import sion_verify; print(sion_verify.check_evidence(\".\", \"{key}\"))'\n\
         ```\n\n\
         Either checks the proof (docs/PROOFS.md: these atoms are everything the memory held in \
         the box and interval asked, as of the head) and that each file of `blobs/` is exactly \
         the payload its atom commits to (BLAKE3; docs/EVIDENCE.md).\n\n\
         ## What is here\n\n\
         | file | what |\n| --- | --- |\n\
         | `answer.sionproof` | the answer with its proof |\n\
         | `answer.json` | the statement, the question in metres and UTC, the head, the answer's atoms (docs/ATOM.md) |\n\
         | `blobs/POSITION` | {} payloads as the atom at POSITION commits to them (a camera frame, a scan: the ROS message as CDR; sealed in a sealed memory) |\n\
         | `opened/POSITION` | a sealed memory's payloads, opened (vouched for by whoever opened them: sealed bytes are checked, opened ones cannot be) |\n\
         | `frames/POSITION-CAMERA.png` (or `.jpg`) | {} camera frames of the answer as pictures |\n\
         | `scans/POSITION-SENSOR.png` | {} scans and point clouds of the answer, from above (the sensor at the centre, x right, y up) |\n\
         | `answer.mcap` | the answer for Foxglove: the question, the answer's atoms, the proof's layers, the frames (no transforms or calibrations: only the answer's atoms) |\n",
        v.statement(),
        scene.asked().map(|a| format!("**Asked:** {a}\n\n")).unwrap_or_default(),
        v.head.size,
        hex::encode(v.head.root),
        written.blobs,
        written.frames,
        written.scans,
    );
    if rrd {
        out.push_str(
            "| `answer.rrd` | the answer for the Rerun viewer (`rerun answer.rrd`), with its layout |\n",
        );
    }
    if !written.not_had.is_empty() {
        out.push_str("\n## Payloads not here\n\n");
        for (position, why) in &written.not_had {
            out.push_str(&format!("- atom {position}: {why}\n"));
        }
    }
    if !written.not_opened.is_empty() {
        out.push_str("\n## Payloads here but not opened\n\n");
        for (position, why) in &written.not_opened {
            out.push_str(&format!("- atom {position}: {why}\n"));
        }
    }
    out
}
