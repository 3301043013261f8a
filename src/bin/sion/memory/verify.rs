//! `sion memory verify`: a proof file checked against the key and the question a reader chose.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use sion_memory::atom::BoxMm;
use sion_memory::index::geom::Query;
use sion_memory::proof::{Cosigners, Expect, NearQuery, ProofFile, Question, Verified};
use sion_memory::time::rfc3339;

use super::recall::{point_value, print_verified};
use crate::common::{
    NamedWitnesses, box_value, ledger_key_arg, open_memory_read_only, read_witnesses, time_from, time_to,
};

#[derive(Args)]
#[command(group(clap::ArgGroup::new("question").multiple(false)))]
pub(crate) struct VerifyArgs {
    /// The proof file, or an evidence directory (`sion memory evidence`): its answer.sionproof,
    /// and each payload of its blobs/ against the atom it is for (docs/EVIDENCE.md).
    pub(crate) file: PathBuf,
    /// Accept only heads attested by this ledger key (64 hex digits).
    #[arg(long, conflicts_with = "data")]
    pub(crate) ledger_key: Option<String>,
    /// Accept only heads attested by the ledger of this memory directory.
    #[arg(long)]
    pub(crate) data: Option<PathBuf>,
    /// Also ask the fleet ledger service at this URL for the header of the Pulse the proof
    /// names: it must be the very header the proof carries (a header the ledger never gave
    /// out is refused). Without --ledger-key, the service's own key anchors the proof.
    #[arg(long, value_name = "URL", conflicts_with = "data")]
    pub(crate) ledger: Option<String>,
    /// The witnesses you trust: a file of lines `name hex-key` (their ed25519 public keys;
    /// `#` starts a comment). The proof's Pulse must be cosigned by --quorum of them; with
    /// --ledger, cosignatures the file lacks are asked of the service (and checked here).
    #[arg(long, value_name = "FILE")]
    pub(crate) witnesses: Option<PathBuf>,
    /// How many of --witnesses must have cosigned (default: all of them).
    #[arg(long, requires = "witnesses")]
    pub(crate) quorum: Option<usize>,
    /// The C2SP witnesses you trust: a file of lines `VKEY [URL]` (their `cosignature/v1`
    /// verifier keys, as `sion ledger witness` prints them; `#` starts a comment). The proof's
    /// Pulse must be covered by a checkpoint of the ledger's history that --cosigners-quorum of
    /// them cosigned (docs/PROOFS.md, "Covered by a checkpoint"); with --ledger, a file that
    /// carries none gets the first cosigned one from the service (and checks it here).
    #[arg(long, value_name = "FILE")]
    pub(crate) cosigners: Option<PathBuf>,
    /// How many of --cosigners must have cosigned (default: all of them).
    #[arg(long, value_name = "K", requires = "cosigners")]
    pub(crate) cosigners_quorum: Option<usize>,
    /// The question you asked: a range proof must be for exactly this frame (with
    /// --expect-box, --expect-from and --expect-to; or a latest proof with --expect-latest, a
    /// nearest proof with --expect-point). A valid proof for a smaller box or a shorter interval
    /// is complete only for that, so it is refused.
    #[arg(
        long,
        group = "question",
        requires_all = ["expect_from", "expect_to"],
        help_heading = "The question asked"
    )]
    pub(crate) expect_frame: Option<String>,
    /// ... exactly this box, X0,Y0,Z0,X1,Y1,Z1 (corners included), each value with its unit
    /// (0m,0m,-1m,5m,5m,3m) or bare millimetres, as `recall --box` takes it.
    #[arg(
        long,
        requires = "expect_frame",
        value_name = "X0,Y0,Z0,X1,Y1,Z1",
        allow_hyphen_values = true,
        value_parser = box_value,
        help_heading = "The question asked"
    )]
    pub(crate) expect_box: Option<BoxMm>,
    /// ... from this time (RFC 3339, seconds with their unit, or bare nanoseconds, as `recall
    /// --from` takes it).
    #[arg(
        long,
        requires = "expect_frame",
        allow_hyphen_values = true,
        value_parser = time_from,
        help_heading = "The question asked"
    )]
    pub(crate) expect_from: Option<i64>,
    /// ... to this time (exclusive; equal to --expect-from for an instant).
    #[arg(long, requires = "expect_frame", allow_hyphen_values = true, value_parser = time_to, help_heading = "The question asked")]
    pub(crate) expect_to: Option<i64>,
    /// ... about atoms of these kinds only, as `recall --kind` takes them (repeat it or
    /// separate with commas) [default: every kind].
    #[arg(
        long = "expect-kind",
        value_name = "KIND",
        value_delimiter = ',',
        requires = "expect_box",
        value_parser = crate::common::kind_value,
        help_heading = "The question asked"
    )]
    pub(crate) expect_kinds: Vec<u32>,
    /// ... about this subject's atoms only, as `recall --subject` asks [default: every
    /// subject]. (--expect-subject is the other question: every atom about a subject.)
    #[arg(long, value_name = "SUBJECT", requires = "expect_box", help_heading = "The question asked")]
    pub(crate) expect_about: Option<String>,
    /// The question was which atom of --expect-frame, --expect-box and the interval was seen
    /// last (`sion memory last-seen`): a latest proof of exactly that.
    #[arg(long, requires = "expect_box", help_heading = "The question asked")]
    pub(crate) expect_latest: bool,
    /// The question was how many atoms of --expect-frame, --expect-box and the interval (of
    /// --expect-kind) there are (`sion memory count`): a count proof of exactly that.
    #[arg(
        long,
        requires = "expect_box",
        conflicts_with = "expect_latest",
        help_heading = "The question asked"
    )]
    pub(crate) expect_count: bool,
    /// The question was which atoms of --expect-frame, valid during the interval, are nearest
    /// to this point X,Y,Z (each with its unit, or bare millimetres; `sion memory nearest`).
    #[arg(
        long,
        requires = "expect_frame",
        conflicts_with = "expect_box",
        value_name = "X,Y,Z",
        allow_hyphen_values = true,
        value_parser = point_value,
        help_heading = "The question asked"
    )]
    pub(crate) expect_point: Option<[i64; 3]>,
    /// ... how many nearest atoms were asked for [default: 1].
    #[arg(long, requires = "expect_point", help_heading = "The question asked")]
    pub(crate) expect_k: Option<u32>,
    /// A subject proof must be about exactly this subject.
    #[arg(long, group = "question", help_heading = "The question asked")]
    pub(crate) expect_subject: Option<String>,
    /// A link proof must be about exactly the atoms linking to this atom id (64 hex digits).
    #[arg(long, group = "question", help_heading = "The question asked")]
    pub(crate) expect_links_to: Option<String>,
    /// A transaction-time proof must say when exactly this position was recorded.
    #[arg(long, group = "question", help_heading = "The question asked")]
    pub(crate) expect_recorded: Option<u64>,
    /// An inclusion proof must be for exactly the atom at this position.
    #[arg(long, value_name = "POSITION", group = "question", help_heading = "The question asked")]
    pub(crate) expect_position: Option<u64>,
    /// An omission proof must convict the index of leaving out exactly this position.
    #[arg(long, value_name = "POSITION", group = "question", help_heading = "The question asked")]
    pub(crate) expect_omitted: Option<u64>,
    /// A cell omission proof must convict the writer over exactly the atom at this position.
    #[arg(long, value_name = "POSITION", group = "question", help_heading = "The question asked")]
    pub(crate) expect_cell_omitted: Option<u64>,
    /// A consistency proof must show the log extends exactly this earlier head: its size and
    /// root (64 hex digits).
    #[arg(long, value_name = "SIZE:ROOT", group = "question", help_heading = "The question asked")]
    pub(crate) expect_extends: Option<String>,
    /// The proof must be about this log (its id, a number).
    #[arg(long, value_name = "ID", help_heading = "The question asked")]
    pub(crate) expect_log: Option<u64>,
    /// The proof's head must be exactly this one (a head you hold): its size and root (64 hex
    /// digits).
    #[arg(long, value_name = "SIZE:ROOT", help_heading = "The question asked")]
    pub(crate) expect_head: Option<String>,
    /// The proof's head must hold at least this many atoms (an older answer is refused).
    #[arg(long, default_value_t = 0, help_heading = "The question asked")]
    pub(crate) expect_at_least: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

impl VerifyArgs {
    /// What the reader said it asked.
    fn expect(&self, witnesses: Option<&(NamedWitnesses, usize)>) -> Result<Expect> {
        let question = if let Some(frame) = &self.expect_frame {
            let frame = sion_memory::units::frame_name(frame);
            let (Some(from), Some(to)) = (self.expect_from, self.expect_to) else {
                bail!("--expect-frame needs --expect-from and --expect-to");
            };
            if let Some(point) = self.expect_point {
                let k = self.expect_k.unwrap_or(1);
                Some(Question::Nearest(
                    NearQuery::new(frame, point, from, to, k)
                        .map_err(|e| anyhow!("the expected question: {e}"))?,
                ))
            } else {
                let Some(bounds) = self.expect_box else {
                    bail!("--expect-frame needs --expect-box (or --expect-point for a nearest question)");
                };
                let mut query = Query::new(frame, bounds, from, to).context("the expected question")?;
                if !self.expect_kinds.is_empty() {
                    let kinds = self.expect_kinds.iter().fold(0, |m, k| m | k);
                    query = query.with_kinds(kinds).context("the expected question")?;
                }
                if let Some(subject) = &self.expect_about {
                    query = query.with_subject(subject).context("the expected question (--expect-about)")?;
                }
                Some(if self.expect_latest {
                    Question::Latest(query)
                } else if self.expect_count {
                    Question::Count(query)
                } else {
                    Question::Range(query)
                })
            }
        } else if let Some(subject) = &self.expect_subject {
            Some(Question::Subject(subject.clone()))
        } else if let Some(target) = &self.expect_links_to {
            Some(Question::LinksTo(
                target.parse().map_err(|_| anyhow!("--expect-links-to: not 64 hex digits"))?,
            ))
        } else if let Some(position) = self.expect_recorded {
            Some(Question::Recorded { position })
        } else if let Some(position) = self.expect_position {
            Some(Question::Included { position })
        } else if let Some(position) = self.expect_omitted {
            Some(Question::Omitted { position })
        } else if let Some(position) = self.expect_cell_omitted {
            Some(Question::CellOmitted { position })
        } else if let Some(head) = &self.expect_extends {
            let (size, root) = size_and_root(head).context("--expect-extends")?;
            Some(Question::Extends { size, root })
        } else {
            None
        };
        let head = self.expect_head.as_deref().map(size_and_root).transpose().context("--expect-head")?;
        let mut expect = Expect {
            question,
            log: self.expect_log.map(sion_memory::ledger::LogId),
            at_least: self.expect_at_least,
            head,
            ..Expect::default()
        };
        if let Some((named, quorum)) = witnesses {
            expect = expect.cosigned_by(named.iter().map(|(_, k)| *k).collect(), *quorum);
        }
        if let Some(path) = &self.cosigners {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            // The file `sion ledger serve --cosigners` reads, read the same way.
            let named = sion_fleet::c2sp::Cosigner::parse_file(&text)
                .map_err(|e| anyhow!("{}: {e}", path.display()))?;
            if named.is_empty() {
                bail!("{}: names no C2SP witness", path.display());
            }
            let quorum = self.cosigners_quorum.unwrap_or(named.len());
            if quorum == 0 || quorum > named.len() {
                bail!(
                    "--cosigners-quorum {quorum}: between 1 and the {} witnesses {} names",
                    named.len(),
                    path.display()
                );
            }
            let cosigners =
                Cosigners { keys: named.into_iter().map(|c| (c.name, c.key.to_bytes())).collect(), quorum };
            expect = expect.covered_by(cosigners);
        }
        Ok(expect)
    }

    /// The witnesses file, read, and the quorum.
    fn witnesses(&self) -> Result<Option<(NamedWitnesses, usize)>> {
        let Some(path) = &self.witnesses else { return Ok(None) };
        let named = read_witnesses(path)?;
        if named.is_empty() {
            bail!("{}: names no witness", path.display());
        }
        let quorum = self.quorum.unwrap_or(named.len());
        if quorum == 0 || quorum > named.len() {
            bail!("--quorum {quorum}: between 1 and the {} witnesses {} names", named.len(), path.display());
        }
        Ok(Some((named, quorum)))
    }
}

/// A head written `SIZE:ROOT` (the root in 64 hex digits), as `sion memory` prints one.
pub(crate) fn size_and_root(text: &str) -> Result<(u64, [u8; 32])> {
    let (size, root) = text.split_once(':').with_context(|| format!("{text:?}: SIZE:ROOT"))?;
    let size = size.trim().parse().with_context(|| format!("{text:?}: the size is not a count of atoms"))?;
    let mut r = [0u8; 32];
    hex::decode_to_slice(root.trim(), &mut r)
        .with_context(|| format!("{text:?}: the root is not 64 hex digits"))?;
    Ok((size, r))
}

/// Exit status of `sion memory verify` when the proof was not checked at all (its --help).
pub(crate) const NOT_CHECKED: u8 = 2;

/// A refusal: its code (docs/PROOFS.md, "Refusals") and why.
pub(crate) struct Refusal {
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

pub(crate) fn verify(a: VerifyArgs) -> Result<ExitCode> {
    let (result, anchored, witnesses) = match checked(&a) {
        Ok(checked) => checked,
        // Not a verdict on the file: the reader's input, or a service that did not answer.
        Err(e) => {
            if a.json {
                outln!(
                    "{}",
                    serde_json::json!({ "valid": false, "code": "input", "error": format!("{e:#}") })
                );
            } else {
                eprintln!("error: {e:#}");
            }
            return Ok(ExitCode::from(NOT_CHECKED));
        }
    };
    match result {
        Ok(v) => {
            if a.json {
                let claim = v.claim.to_json();
                let v = serde_json::json!({
                    "valid": true,
                    "anchored": anchored,
                    "log": v.log.0,
                    "head": { "size": v.head.size, "root": hex::encode(v.head.root) },
                    "pulse": v.pulse.map(|(n, t, k)| serde_json::json!({"number": n, "time": rfc3339(t), "ledger_key": hex::encode(k)})),
                    "cosigned_by": v.cosigned.iter().map(hex::encode).collect::<Vec<_>>(),
                    "checkpoint": v.checkpoint.as_ref().map(|(cp, note)| serde_json::json!({
                        "size": cp.size,
                        "note": note.encode(),
                    })),
                    "claim": claim,
                });
                outln!("{}", serde_json::to_string_pretty(&v)?);
            } else if anchored {
                outln!("VALID {}", a.file.display());
                print_verified(&v, None)?;
                if a.file.is_dir() {
                    let n = std::fs::read_dir(a.file.join("blobs")).map_or(0, Iterator::count);
                    outln!("  evidence {n} payloads in blobs/, each the one its atom commits to (BLAKE3)");
                }
                if let Some((named, quorum)) = &witnesses {
                    let names: Vec<&str> = named
                        .iter()
                        .filter(|(_, k)| v.cosigned.contains(k))
                        .map(|(n, _)| n.as_str())
                        .collect();
                    outln!(
                        "  cosigned by {} of the {} witnesses named (quorum {quorum}): {}",
                        names.len(),
                        named.len(),
                        names.join(", ")
                    );
                }
                if let Some((cp, _)) = &v.checkpoint {
                    let by = a
                        .cosigners
                        .as_ref()
                        .map_or(String::new(), |_| ", cosigned by your --cosigners' quorum".into());
                    outln!("  covered by the ledger's checkpoint of size {} (C2SP){by}", cp.size);
                }
            } else {
                outln!(
                    "UNANCHORED {}: valid, but only against the ledger key the proof carries itself, \
                     which whoever made the file chose; give --ledger-key or --data to anchor it",
                    a.file.display()
                );
                print_verified(&v, None)?;
            }
            Ok(if anchored { ExitCode::SUCCESS } else { ExitCode::from(3) })
        }
        Err(Refusal { code, message }) => {
            if a.json {
                outln!("{}", serde_json::json!({ "valid": false, "code": code, "error": message }));
            } else {
                outln!("INVALID {} ({code}): {message}", a.file.display());
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

/// The verdict on the file (a refusal with its code), whether a key the reader brought
/// anchors it, and the witnesses named; an error is one before any verdict (`input`).
pub(crate) type Checked = (std::result::Result<Verified, Refusal>, bool, Option<(NamedWitnesses, usize)>);

/// An evidence directory's payloads checked against a verified answer (docs/EVIDENCE.md), each
/// file looked up before it is read: it must be a regular file (not a link, a pipe or a
/// directory) named for an atom of the answer, of the size its blob has, and hash to it. Read
/// as a stream: a directory cannot make this hold more than a buffer. How many were checked,
/// or the refusal; an error is one of reading (`input`).
fn check_evidence_dir(dir: &std::path::Path, v: &Verified) -> Result<std::result::Result<usize, Refusal>> {
    use sion_memory::evidence::{EvidenceError, blob_for};
    let refuse = |e: EvidenceError| Ok(Err(Refusal { code: e.code(), message: e.to_string() }));
    let blobs = dir.join("blobs");
    let mut checked = 0;
    let entries = match std::fs::read_dir(&blobs) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Ok(0)),
        Err(e) => return Err(e).with_context(|| format!("reading {}", blobs.display())),
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", blobs.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let meta =
            std::fs::symlink_metadata(entry.path()).with_context(|| format!("reading blobs/{name}"))?;
        if !meta.is_file() {
            return Ok(Err(Refusal {
                code: "evidence_name",
                message: format!("blobs/{name}: not a regular file (a link, a directory or a device)"),
            }));
        }
        let (position, blob) = match blob_for(v, &name) {
            Ok(found) => found,
            Err(e) => return refuse(e),
        };
        if meta.len() != blob.size {
            return Ok(Err(Refusal {
                code: "evidence_hash",
                message: format!(
                    "blobs/{name}: {} bytes, not the {} bytes the atom at position {position} commits to",
                    meta.len(),
                    blob.size
                ),
            }));
        }
        let mut hasher = blake3::Hasher::new();
        let file = std::fs::File::open(entry.path()).with_context(|| format!("reading blobs/{name}"))?;
        std::io::copy(&mut std::io::Read::take(file, blob.size), &mut hasher)
            .with_context(|| format!("reading blobs/{name}"))?;
        let found = hasher.finalize();
        if *found.as_bytes() != blob.hash {
            return refuse(EvidenceError::HashDiffers {
                position,
                found: found.to_hex().to_string(),
                expected: hex::encode(blob.hash),
            });
        }
        checked += 1;
    }
    Ok(Ok(checked))
}

/// A proof file's bytes, read no further than the largest a verifier reads.
fn read_proof(path: &std::path::Path) -> Result<Vec<u8>> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(sion_memory::proof::MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", path.display()))?;
    if bytes.len() > sion_memory::proof::MAX_FILE_BYTES {
        anyhow::bail!("{}: larger than the 64 MiB a proof file may be", path.display());
    }
    Ok(bytes)
}

pub(crate) fn checked(a: &VerifyArgs) -> Result<Checked> {
    let evidence = a.file.is_dir();
    let proof_path = if evidence { a.file.join("answer.sionproof") } else { a.file.clone() };
    let bytes = read_proof(&proof_path)?;
    let expected = match (&a.ledger_key, &a.data) {
        (Some(hex_key), _) => Some(ledger_key_arg(hex_key)?),
        (None, Some(dir)) => Some(open_memory_read_only(dir)?.ledger().public_key()),
        (None, None) => None,
    };
    // The fleet ledger the reader names: its key, unless the reader brought one (then the two
    // must agree), and the headers it gave out.
    let service = match &a.ledger {
        Some(url) => {
            let link = sion_memory::fleet::RemoteLedger::connect(url)
                .with_context(|| format!("asking the fleet ledger at {url}"))?;
            use sion_memory::ledger::link::LedgerLink as _;
            if let Some(k) = &expected
                && *k != link.public_key()
            {
                anyhow::bail!(
                    "the fleet ledger at {url} signs with key {}, not the --ledger-key given ({}): not using it",
                    hex::encode(link.public_key().to_bytes()),
                    hex::encode(k.to_bytes())
                );
            }
            Some(link)
        }
        None => None,
    };
    let expected = expected.or_else(|| {
        use sion_memory::ledger::link::LedgerLink as _;
        service.as_ref().map(|s| s.public_key())
    });
    let witnesses = a.witnesses()?;
    let expect = a.expect(witnesses.as_ref())?;
    let mut file = ProofFile::decode(&bytes);
    // Cosignatures the file lacks, from the service: each is checked like those it carries.
    if let (Ok(f), Some(service), Some(w)) = (&mut file, &service, &expect.witnesses) {
        add_served_cosignatures(f, service, &w.keys)?;
    }
    // A checkpoint covering its Pulse, from the service, for a file that carries none: the
    // checks below are the same as for one it carries.
    if let (Ok(f), Some(service), Some(_)) = (&mut file, &service, &expect.cosigners)
        && let Some(a) = f.attestation.as_mut()
        && a.checkpoint.is_none()
    {
        use sion_memory::ledger::link::LedgerLink as _;
        let number = a.state.header.header.number;
        a.checkpoint = service
            .covering(number)
            .with_context(|| format!("asking the fleet ledger for a checkpoint covering Pulse {number}"))?;
    }
    let result: Result<Verified, Refusal> = file
        .map_err(sion_memory::proof::VerifyError::from)
        .and_then(|f| f.verify(expected.as_ref()))
        .and_then(|v| expect.check(&v).map(|()| v))
        .map_err(Refusal::from);
    let result = match (result, &service) {
        (Ok(v), Some(service)) => served_header_matches(service, &bytes, &v)?.map_or(Ok(v), Err),
        (other, _) => other,
    };
    // An evidence directory: the payloads beside the proof are the ones its atoms commit to.
    let result = match result {
        Ok(v) if evidence => match sion_memory::evidence::answer_atoms(&v) {
            Err(e) => Err(Refusal { code: e.code(), message: e.to_string() }),
            Ok(_) => check_evidence_dir(&a.file, &v)?.map(|_| v),
        },
        other => other,
    };
    // Anchored only by a key the reader brought; the proof's own key anchors nothing.
    Ok((result, expected.is_some(), witnesses))
}

/// Add to `file` the cosignatures by `witnesses` of its Pulse that the service holds and the
/// file does not carry.
pub(crate) fn add_served_cosignatures(
    file: &mut ProofFile,
    service: &sion_memory::fleet::RemoteLedger,
    witnesses: &[[u8; 32]],
) -> Result<()> {
    use sion_memory::ledger::link::LedgerLink as _;
    let Some(a) = file.attestation.as_mut() else { return Ok(()) };
    let number = a.state.header.header.number;
    let served = service
        .cosignatures(number)
        .with_context(|| format!("asking the fleet ledger for the cosignatures of Pulse {number}"))?;
    for c in served {
        if witnesses.contains(&c.witness) && !a.cosignatures.iter().any(|h| h.witness == c.witness) {
            a.cosignatures.push(c);
        }
    }
    a.cosignatures.sort_by_key(|c| c.witness);
    Ok(())
}

/// Whether the fleet ledger gave out the header the proof carries for its Pulse: a refusal if
/// not (`not_served`, the CLI's own code, docs/PROOFS.md), an error if it could not be asked.
pub(crate) fn served_header_matches(
    service: &sion_memory::fleet::RemoteLedger,
    bytes: &[u8],
    v: &Verified,
) -> Result<Option<Refusal>> {
    use sion_memory::ledger::link::LedgerLink as _;
    let Some((number, _, _)) = v.pulse else {
        // Unreachable while the service's key is required (then `unattested` comes first).
        return Ok(Some(Refusal {
            code: "unattested",
            message: "the proof is not attested by a ledger, so the fleet ledger cannot vouch for it".into(),
        }));
    };
    let file = ProofFile::decode(bytes).context("decoding the proof file again")?;
    let carried = file.attestation.map(|a| a.state.header);
    let served =
        service.header(number).with_context(|| format!("asking the fleet ledger for Pulse {number}"))?;
    if carried != Some(served) {
        return Ok(Some(Refusal {
            code: "not_served",
            message: format!(
                "the fleet ledger at {} gave out another header for Pulse {number}: this proof's header is not the ledger's",
                service.describe()
            ),
        }));
    }
    Ok(None)
}

impl From<sion_memory::proof::VerifyError> for Refusal {
    fn from(e: sion_memory::proof::VerifyError) -> Self {
        Self { code: e.code(), message: e.to_string() }
    }
}
