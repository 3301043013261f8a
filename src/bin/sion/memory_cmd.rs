//! `sion memory …`: open, remember, commit, show, prove, verify, audit.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use ed25519_dalek::VerifyingKey;
use sion_memory::atom::{Atom, AtomId, BoxMm};
use sion_memory::index::geom::Query;
use sion_memory::memory::Memory;
use sion_memory::proof::{Claim, Expect, ListKey, ProofFile, Question, Verified};
use sion_memory::time::rfc3339;

use crate::ui;

#[derive(Subcommand)]
pub enum MemoryCommand {
    /// Create a memory: a writer key, an empty log, the embedded ledger, and the log opened on
    /// the ledger (for an agent identity, with `--agent`).
    Open(OpenArgs),
    /// Append atoms given as JSON lines (docs/ATOM.md) durably; prints the durable positions.
    ///
    /// Each batch is fsynced before it is reported. An atom the log already holds is not
    /// written again (its position is reported). A line that is not a valid atom stops the
    /// run with its line number and field; everything before it stays durable.
    Remember(RememberArgs),
    /// Commit the log's durable head to the ledger and print the Pulse that stamps it.
    Commit(CommitArgs),
    /// Show the log, its committed head and the ledger.
    Show(ShowArgs),
    /// Write a proof file for the committed head.
    #[command(subcommand)]
    Prove(ProveCommand),
    /// Check a proof file against the head it names, and that head against a ledger key you
    /// chose (--ledger-key or --data).
    ///
    /// Exit status: 0 when the proof is valid and its head is signed by your key; 1 when it is
    /// invalid (refused: the refusal's code, docs/PROOFS.md "Refusals", is printed with it);
    /// 2 when it was not checked (a bad option, an unreadable file, a --ledger-key that is not
    /// a key, a fleet ledger that does not answer: code `input`); 3 when it is valid but
    /// anchored by nothing outside it (no key given: the proof checks out against the key it
    /// carries itself, which anyone who forged it could have made).
    Verify(Box<VerifyArgs>),
    /// Re-read every record, recompute every tree hash and check the root against the
    /// ledger's head; names the first bad position, if any.
    Audit(DataArg),
    /// Keep everything before the log's first damaged record and go on: the damaged record
    /// and all after it are moved into log/torn/ (never deleted), damaged blob packs are cut
    /// the same way into blobs/torn/, and the derived files and the index are made again.
    ///
    /// Prints what was kept, what was set aside and which atoms' blobs are now missing. If the
    /// damage is inside the committed head, the ledger committed atoms that are lost: nothing
    /// is changed unless --new-log, which keeps the atoms before the damage as a new log on the
    /// same ledger, committed at once (the old log stays at its head; its proofs still verify).
    Repair(RepairArgs),
    /// What was seen in this box, during this interval: every atom, proved complete.
    ///
    /// An atom answers when its frame is FRAME, its box meets the query box (corners included:
    /// boxes that only touch do meet) and its valid time [from, to) overlaps [FROM, TO)
    /// (intervals that only touch do not). FROM = TO asks about the instant FROM. The answer
    /// is as of a committed head (the latest unless --as-of), and the proof checks from that
    /// head alone, an empty answer included.
    Recall(RecallArgs),
    /// Every atom about a subject, proved complete.
    Subject(ListArgs),
    /// Every atom that links to an atom (its revisions, contradictions, supports,
    /// derivations), proved complete.
    Links(ListArgs),
    /// Print the log's atoms as JSON lines (docs/ATOM.md) with their ids and positions, in log
    /// order: what `remember` takes, so a log can be copied or compared.
    Dump(DumpArgs),
    /// A sealed memory's space and its members (docs/SEAL.md): create, show, keygen, add,
    /// remove, wrap, join, honour.
    #[command(subcommand)]
    Space(crate::space_cmd::SpaceCommand),
    /// Append atoms given as JSON lines with their payloads (text or bytes) sealed in the
    /// memory's space: only the writer and the space's members can open them; proofs and
    /// audits work on them without any key. Prints the durable positions.
    Seal(crate::space_cmd::SealArgs),
    /// Print (or write to --out) the payload of a sealed atom, opened with the writer's keys or
    /// a member's (--keys). Refused, saying so, if it was forgotten.
    OpenPayload(crate::space_cmd::OpenPayloadArgs),
    /// Forget the payloads of sealed atoms: a forget atom (who, when, why, which) is recorded,
    /// then the keys that open them are destroyed, so nothing left derives them — every other
    /// atom still opens. The atoms stay in the log and in its proofs; their payloads do not
    /// open again. Then commits (members honour it with `sion memory space honour`).
    Forget(crate::space_cmd::ForgetArgs),
    /// Archive the memory's committed head (committing first what the log holds past it): its
    /// atoms, the blobs it keeps and its key stores, as content-addressed objects encrypted
    /// for its writer, in a directory or an S3-compatible bucket; the archive's root is
    /// committed as the head's manifest. Writing again sends only what is new and deletes
    /// what the new state no longer names (so a forget reaches the archive too).
    Archive(crate::archive_cmd::ArchiveArgs),
    /// Rebuild a memory directory from an archive with the writer's key, and check it against
    /// the head the ledger committed with the archive's root (size, root, index root,
    /// manifest) before putting it in place.
    Restore(crate::archive_cmd::RestoreArgs),
    /// Revise an atom: append a revision naming it with a state (supersedes, accepts,
    /// disputes, retracts, refutes; docs/ATOM.md "Revisions and conflicts") and commit it.
    /// Nothing is deleted: what readers believe is computed from revisions (`believe`).
    Revise(crate::belief_cmd::ReviseArgs),
    /// What a reader believes about atoms under its policy (docs/BELIEF.md): a bundle of proofs
    /// from the revisers' logs (complete link proofs, transaction times) is made — or read with
    /// --bundle — checked in this process against the ledger key you give, and the fold
    /// recomputed from it.
    Believe(crate::belief_cmd::BelieveArgs),
}

#[derive(Args)]
pub struct DumpArgs {
    #[command(flatten)]
    data: DataArg,
    /// The first position to print.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Print at most this many atoms.
    #[arg(long)]
    limit: Option<u64>,
}

#[derive(Args)]
pub struct AnswerArgs {
    #[command(flatten)]
    data: DataArg,
    /// Answer as of the committed head with this many atoms [default: the latest].
    #[arg(long)]
    as_of: Option<u64>,
    /// Also write the answer with its proof to this file (for `sion memory verify`). Was
    /// `--proof`, still taken for this release.
    #[arg(long = "out", alias = "proof", value_name = "FILE")]
    proof: Option<PathBuf>,
    /// Print JSON: the head and the atoms in their JSON form (docs/ATOM.md).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct RecallArgs {
    /// The frame the box is in.
    #[arg(long)]
    frame: String,
    /// The box, millimetres: X0,Y0,Z0,X1,Y1,Z1 (min corner, then max corner).
    #[arg(long, value_name = "X0,Y0,Z0,X1,Y1,Z1", allow_hyphen_values = true)]
    r#box: String,
    /// Start of the interval, nanoseconds.
    #[arg(long, allow_hyphen_values = true)]
    from: i64,
    /// End of the interval (excluded), nanoseconds.
    #[arg(long, allow_hyphen_values = true)]
    to: i64,
    #[command(flatten)]
    answer: AnswerArgs,
}

#[derive(Args)]
pub struct ListArgs {
    /// The subject (for `subject`) or the atom id, 64 hex digits (for `links`).
    key: String,
    #[command(flatten)]
    answer: AnswerArgs,
}

#[derive(Args)]
pub struct RepairArgs {
    /// The memory directory.
    #[arg(long, env = "SION_DATA")]
    data: PathBuf,
    /// When the damage is inside the committed head: keep the atoms before it as a new log on
    /// the same ledger.
    #[arg(long)]
    new_log: bool,
}

#[derive(Args)]
pub struct DataArg {
    /// The memory directory.
    #[arg(long, env = "SION_DATA")]
    pub(crate) data: PathBuf,
}

#[derive(Args)]
pub struct OpenArgs {
    #[command(flatten)]
    data: DataArg,
    /// Agent identity the log belongs to, as a path (`warehouse/robot-7`); agents that do
    /// not exist yet are registered, controlled by this memory's writer key.
    #[arg(long)]
    agent: Option<String>,
    /// The ledger to open the log on: a fleet ledger service's URL (`http://HOST:PORT`, run by
    /// `sion ledger serve`; this machine then holds no ledger key), or an existing embedded
    /// ledger's directory. Default: a new embedded ledger inside the memory directory.
    #[arg(long, value_name = "URL|DIR")]
    ledger: Option<String>,
    /// A sealed memory: its log's policy commits to a new space, whose keys seal payloads and
    /// blobs so that only the writer and the space's members open them, and which can forget
    /// them (docs/SEAL.md; `sion memory space`, `seal`, `forget`).
    #[arg(long)]
    pub(crate) sealed: bool,
}

#[derive(Args)]
pub struct RememberArgs {
    #[command(flatten)]
    data: DataArg,
    /// JSON lines to read, or `-` for standard input.
    #[arg(default_value = "-")]
    input: PathBuf,
    /// Atoms per durable batch (one fsync each).
    #[arg(long, default_value_t = 4096)]
    batch: usize,
    /// Print each atom as JSON with its id and position once it is durable.
    #[arg(long)]
    echo: bool,
    /// Skip lines that are not valid atoms (counted and reported) instead of stopping.
    #[arg(long)]
    skip_bad: bool,
}

#[derive(Args)]
pub struct CommitArgs {
    #[command(flatten)]
    data: DataArg,
    /// Close the log for good: the ledger will refuse any further growth.
    #[arg(long)]
    seal: bool,
}

#[derive(Args)]
pub struct ShowArgs {
    #[command(flatten)]
    data: DataArg,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
pub enum ProveCommand {
    /// Prove that the atom at a position is in the committed head.
    Inclusion {
        #[command(flatten)]
        data: DataArg,
        #[arg(long)]
        position: u64,
        /// Where to write the proof [default: inclusion-POSITION.sionproof].
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Prove that the committed index leaves out the atom at a position (convicting the
    /// writer); fails if the index holds it, as an honest index does.
    Omission {
        #[command(flatten)]
        data: DataArg,
        #[arg(long)]
        position: u64,
        /// Where to write the proof [default: omission-POSITION.sionproof].
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Prove when the atom at a position was recorded: the Pulse whose commit first covered
    /// it, and the log's state at the Pulse before (the ledger's clock, not the writer's).
    Time {
        #[command(flatten)]
        data: DataArg,
        #[arg(long)]
        position: u64,
        /// Where to write the proof [default: recorded-POSITION.sionproof].
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Prove that the log's first N atoms are a prefix of the committed head.
    Consistency {
        #[command(flatten)]
        data: DataArg,
        /// The older size N.
        #[arg(long)]
        from: u64,
        /// Where to write the proof [default: consistency-N.sionproof].
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

/// Witnesses as a witnesses file names them: name and public key.
pub(crate) type NamedWitnesses = Vec<(String, [u8; 32])>;

#[derive(Args)]
#[command(group(clap::ArgGroup::new("question").multiple(false)))]
pub struct VerifyArgs {
    /// The proof file.
    file: PathBuf,
    /// Accept only heads attested by this ledger key (64 hex digits).
    #[arg(long, conflicts_with = "data")]
    ledger_key: Option<String>,
    /// Accept only heads attested by the ledger of this memory directory.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Also ask the fleet ledger service at this URL for the header of the Pulse the proof
    /// names: it must be the very header the proof carries (a header the ledger never gave
    /// out is refused). Without --ledger-key, the service's own key anchors the proof.
    #[arg(long, value_name = "URL", conflicts_with = "data")]
    ledger: Option<String>,
    /// The witnesses you trust: a file of lines `name hex-key` (their ed25519 public keys;
    /// `#` starts a comment). The proof's Pulse must be cosigned by --quorum of them; with
    /// --ledger, cosignatures the file lacks are asked of the service (and checked here).
    #[arg(long, value_name = "FILE")]
    witnesses: Option<PathBuf>,
    /// How many of --witnesses must have cosigned (default: all of them).
    #[arg(long, requires = "witnesses")]
    quorum: Option<usize>,
    /// The question you asked: a range proof must be for exactly this frame (with
    /// --expect-box, --expect-from and --expect-to). A valid proof for a smaller box or a
    /// shorter interval is complete only for that, so it is refused.
    #[arg(
        long,
        group = "question",
        requires_all = ["expect_box", "expect_from", "expect_to"],
        help_heading = "The question asked"
    )]
    expect_frame: Option<String>,
    /// ... exactly this box, X0,Y0,Z0,X1,Y1,Z1 in mm (corners included).
    #[arg(
        long,
        requires = "expect_frame",
        value_name = "X0,Y0,Z0,X1,Y1,Z1",
        allow_hyphen_values = true,
        help_heading = "The question asked"
    )]
    expect_box: Option<String>,
    /// ... from this time [ns].
    #[arg(
        long,
        requires = "expect_frame",
        allow_negative_numbers = true,
        help_heading = "The question asked"
    )]
    expect_from: Option<i64>,
    /// ... to this time [ns] (exclusive; equal to --expect-from for an instant).
    #[arg(long, requires = "expect_frame", help_heading = "The question asked")]
    expect_to: Option<i64>,
    /// A subject proof must be about exactly this subject.
    #[arg(long, group = "question", help_heading = "The question asked")]
    expect_subject: Option<String>,
    /// A link proof must be about exactly the atoms linking to this atom id (64 hex digits).
    #[arg(long, group = "question", help_heading = "The question asked")]
    expect_links_to: Option<String>,
    /// A transaction-time proof must say when exactly this position was recorded.
    #[arg(long, group = "question", help_heading = "The question asked")]
    expect_recorded: Option<u64>,
    /// An inclusion proof must be for exactly the atom at this position.
    #[arg(long, value_name = "POSITION", group = "question", help_heading = "The question asked")]
    expect_position: Option<u64>,
    /// An omission proof must convict the index of leaving out exactly this position.
    #[arg(long, value_name = "POSITION", group = "question", help_heading = "The question asked")]
    expect_omitted: Option<u64>,
    /// A consistency proof must show the log extends exactly this earlier head: its size and
    /// root (64 hex digits).
    #[arg(long, value_name = "SIZE:ROOT", group = "question", help_heading = "The question asked")]
    expect_extends: Option<String>,
    /// The proof must be about this log (its id, a number).
    #[arg(long, value_name = "ID", help_heading = "The question asked")]
    expect_log: Option<u64>,
    /// The proof's head must be exactly this one (a head you hold): its size and root (64 hex
    /// digits).
    #[arg(long, value_name = "SIZE:ROOT", help_heading = "The question asked")]
    expect_head: Option<String>,
    /// The proof's head must hold at least this many atoms (an older answer is refused).
    #[arg(long, default_value_t = 0, help_heading = "The question asked")]
    expect_at_least: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

impl VerifyArgs {
    /// What the reader said it asked.
    fn expect(&self, witnesses: Option<&(NamedWitnesses, usize)>) -> Result<Expect> {
        let question = if let Some(frame) = &self.expect_frame {
            let (Some(b), Some(from), Some(to)) = (&self.expect_box, self.expect_from, self.expect_to) else {
                bail!("--expect-frame needs --expect-box, --expect-from and --expect-to");
            };
            let bounds = parse_box(b).context("--expect-box")?;
            Some(Question::Range(Query::new(frame, bounds, from, to).context("the expected question")?))
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

/// A witnesses file (lines `name hex-key`), read and parsed; errors name the file and line.
pub(crate) fn read_witnesses(path: &Path) -> Result<NamedWitnesses> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    sion_memory::ledger::Witnesses::parse_file(&text).map_err(|e| anyhow!("{}: {e}", path.display()))
}

pub fn run(cmd: MemoryCommand) -> Result<ExitCode> {
    match cmd {
        MemoryCommand::Open(a) => open(a),
        MemoryCommand::Space(c) => crate::space_cmd::run(c),
        MemoryCommand::Seal(a) => crate::space_cmd::seal(a),
        MemoryCommand::OpenPayload(a) => crate::space_cmd::open_payload(a),
        MemoryCommand::Forget(a) => crate::space_cmd::forget(a),
        MemoryCommand::Archive(a) => crate::archive_cmd::archive(a),
        MemoryCommand::Restore(a) => crate::archive_cmd::restore(a),
        MemoryCommand::Revise(a) => crate::belief_cmd::revise(a),
        MemoryCommand::Believe(a) => crate::belief_cmd::believe(a),
        MemoryCommand::Remember(a) => remember(a),
        MemoryCommand::Commit(a) => commit(a),
        MemoryCommand::Show(a) => show(a),
        MemoryCommand::Dump(a) => dump(&a),
        MemoryCommand::Prove(p) => prove(p),
        MemoryCommand::Verify(a) => verify(*a),
        MemoryCommand::Audit(a) => audit(&a.data),
        MemoryCommand::Repair(a) => repair(&a.data, a.new_log),
        MemoryCommand::Recall(a) => recall(a),
        MemoryCommand::Subject(a) => list(ListKey::Subject(a.key.clone()), a.answer),
        MemoryCommand::Links(a) => {
            let id: AtomId = a.key.parse().context("an atom id is 64 hex digits")?;
            list(ListKey::LinksTo(id), a.answer)
        }
    }
}

/// A head written `SIZE:ROOT` (the root in 64 hex digits), as `sion memory` prints one.
fn size_and_root(text: &str) -> Result<(u64, [u8; 32])> {
    let (size, root) = text.split_once(':').with_context(|| format!("{text:?}: SIZE:ROOT"))?;
    let size = size.trim().parse().with_context(|| format!("{text:?}: the size is not a count of atoms"))?;
    let mut r = [0u8; 32];
    hex::decode_to_slice(root.trim(), &mut r)
        .with_context(|| format!("{text:?}: the root is not 64 hex digits"))?;
    Ok((size, r))
}

pub(crate) fn parse_box(text: &str) -> Result<BoxMm> {
    let v: Vec<i64> = text
        .split(',')
        .map(|s| s.trim().parse::<i64>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("--box {text:?}: six integers in millimetres, X0,Y0,Z0,X1,Y1,Z1"))?;
    let [x0, y0, z0, x1, y1, z1] = v[..] else {
        bail!("--box {text:?}: six integers in millimetres, X0,Y0,Z0,X1,Y1,Z1");
    };
    Ok(BoxMm { min_mm: [x0, y0, z0], max_mm: [x1, y1, z1] })
}

fn recall(a: RecallArgs) -> Result<ExitCode> {
    let query = Query::new(&a.frame, parse_box(&a.r#box)?, a.from, a.to).context("the query")?;
    let memory = open_memory_read_only(&a.answer.data.data)?;
    let started = Instant::now();
    let file = memory.prove_range(&query, a.answer.as_of).context("answering the query")?;
    answer(file, &a.answer, started, Some(&memory))
}

fn list(key: ListKey, a: AnswerArgs) -> Result<ExitCode> {
    let memory = open_memory_read_only(&a.data.data)?;
    let started = Instant::now();
    let file = memory.prove_list(key, a.as_of).context("answering")?;
    answer(file, &a, started, Some(&memory))
}

/// Print an answer (checked, as a reader would) and write its proof if asked.
fn answer(file: ProofFile, a: &AnswerArgs, started: Instant, memory: Option<&Memory>) -> Result<ExitCode> {
    let bytes = file.encode();
    if bytes.len() > sion_memory::proof::MAX_FILE_BYTES {
        anyhow::bail!(
            "the answer's proof is {} bytes, over the 64 MiB a verifier reads: ask a smaller box or a shorter interval",
            ui::count(bytes.len() as u64)
        );
    }
    let verified = file.verify(None).context("the answer just proved does not verify (a bug)")?;
    let secs = started.elapsed().as_secs_f64();
    if let Some(path) = &a.proof {
        std::fs::write(path, &bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    if a.json {
        let v = serde_json::json!({
            "head": {
                "log": verified.log.0,
                "size": verified.head.size,
                "root": hex::encode(verified.head.root),
                "index": hex::encode(verified.head.index),
                "pulse": verified.pulse.map(|(n, t, _)| serde_json::json!({"number": n, "time": rfc3339(t)})),
            },
            "claim": verified.claim.to_json(),
            "proof_bytes": bytes.len(),
            "sealed": sealed_states(&verified, memory),
        });
        outln!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_verified(&verified, memory)?;
        outln!(
            "  proof   {} bytes, built in {:.1} ms{}",
            bytes.len(),
            secs * 1e3,
            a.proof.as_ref().map(|p| format!(", written to {}", p.display())).unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn open_memory(dir: &Path) -> Result<Memory> {
    let memory = sion_memory::fleet::options(dir)
        .open()
        .with_context(|| format!("opening the memory at {}", dir.display()))?;
    let r = memory.recovery();
    if r.torn_bytes > 0 {
        let kept = r.set_aside.as_ref().map(|p| format!(" (kept in {})", p.display())).unwrap_or_default();
        eprintln!("recovered: cut {} bytes of a record a crash left unfinished{kept}", r.torn_bytes);
    }
    Ok(memory)
}

/// A `--ledger-key` argument: the ledger key a reader chose, 64 hex digits of an ed25519 key.
pub(crate) fn ledger_key_arg(hex_key: &str) -> Result<VerifyingKey> {
    let mut k = [0u8; 32];
    hex::decode_to_slice(hex_key, &mut k).context("--ledger-key is 64 hex digits")?;
    VerifyingKey::from_bytes(&k).context("--ledger-key is not an ed25519 key")
}

/// Open a memory to read it: nothing in its directory changes, so a memory on read-only
/// media, on a full disk or in use by a running node can be read (docs/RELIABILITY.md).
pub(crate) fn open_memory_read_only(dir: &Path) -> Result<Memory> {
    let memory = sion_memory::fleet::options(dir)
        .open_read_only()
        .with_context(|| format!("opening the memory at {} to read it", dir.display()))?;
    if let sion_memory::memory::IndexBoot::Rebuilt { why, .. } = memory.index_boot() {
        eprintln!(
            "the index could not be used as it is ({why}): folded the log afresh, in a scratch directory"
        );
    }
    Ok(memory)
}

pub(crate) fn open(a: OpenArgs) -> Result<ExitCode> {
    // An embedded ledger's directory is the user's path (relative to where they are, not to
    // the memory), and one that exists: a typo must not make a second ledger.
    let ledger = match a.ledger.as_deref() {
        Some(dir) if !sion_memory::fleet::is_url(dir) => {
            let path = std::path::absolute(dir).with_context(|| format!("--ledger {dir}"))?;
            if !path.join("FORMAT").exists() && !path.join("journal").exists() {
                anyhow::bail!(
                    "--ledger {dir}: no embedded ledger at {} (a fleet ledger is http://HOST:PORT; without --ledger a new one is made inside the memory)",
                    path.display()
                );
            }
            Some(path.to_string_lossy().into_owned())
        }
        other => other.map(str::to_owned),
    };
    let memory = sion_memory::fleet::options_on(&a.data.data, ledger.as_deref())
        .map_err(sion_memory::memory::MemoryError::from)
        .and_then(|o| o.agent(a.agent.as_deref()).sealed(a.sealed).create())
        .with_context(|| format!("creating a memory at {}", a.data.data.display()))?;
    let log = memory.committed();
    outln!("opened memory log {} at {}", log.id, a.data.data.display());
    if let Some(space) = memory.space() {
        outln!(
            "  sealed  space {}, epoch {} (no members yet: `sion memory space add`)",
            hex::encode(space.id()),
            space.epoch()
        );
    }
    outln!("  writer  {}", log.writer);
    if let Some(agent) = &log.agent {
        outln!("  agent   {agent}");
    }
    outln!(
        "  ledger  {} (key {})",
        memory.ledger().describe(),
        hex::encode(memory.ledger().public_key().to_bytes())
    );
    outln!("  opened at Pulse {}", log.committed_at);
    Ok(ExitCode::SUCCESS)
}

enum Input {
    Batch(Vec<Atom>),
}

fn remember(a: RememberArgs) -> Result<ExitCode> {
    let memory = open_memory(&a.data.data)?;
    let batch_size = a.batch.max(1);
    let (reader, len): (Box<dyn BufRead + Send>, Option<u64>) = if a.input.as_os_str() == "-" {
        (Box::new(BufReader::with_capacity(1 << 20, io::stdin())), None)
    } else {
        let f = File::open(&a.input).with_context(|| format!("opening {}", a.input.display()))?;
        let len = f.metadata().map(|m| m.len()).ok();
        (Box::new(BufReader::with_capacity(1 << 20, f)), len)
    };
    let bar = ui::byte_bar(len.unwrap_or(0));
    if len.is_none() {
        bar.set_length(0);
    }
    let started = Instant::now();

    // Parse on this thread while the previous batch is made durable on another.
    let (tx, rx) = mpsc::sync_channel::<Input>(2);
    let echo = a.echo;
    let writer = std::thread::scope(|scope| -> Result<(Stats, Result<u64>)> {
        let bar_ref = &bar;
        let memory_ref = &memory;
        let appender = scope.spawn(move || -> Result<Stats> {
            let mut stats = Stats::default();
            let stdout = io::stdout();
            let mut out = BufWriter::new(stdout.lock());
            for Input::Batch(atoms) in rx {
                let echoed: Vec<Atom> = if echo { atoms.clone() } else { Vec::new() };
                let got = memory_ref.remember(atoms).context("appending to the log")?;
                for (i, ap) in got.iter().enumerate() {
                    stats.note(ap.position, ap.new);
                    if let Some(atom) = echoed.get(i) {
                        writeln!(out, "{}", atom.to_json_line(Some(ap.position)))
                            .map_err(crate::stdout_failed)?;
                    }
                }
                out.flush().map_err(crate::stdout_failed)?;
                bar_ref.set_message(format!("{} atoms durable", ui::count(stats.total)));
            }
            Ok(stats)
        });
        let parsed = parse_lines(reader, batch_size, a.skip_bad, &tx, &bar);
        drop(tx);
        let stats = appender.join().map_err(|_| anyhow::anyhow!("the appending thread panicked"))??;
        Ok((stats, parsed))
    })?;
    bar.finish_and_clear();
    let (stats, parsed) = writer;
    let secs = started.elapsed().as_secs_f64();
    let head = memory.log().head();
    let committed = memory.committed().head.size;
    match (stats.first, stats.last) {
        (Some(first), Some(last)) => eprintln!(
            "remembered {} atoms in {secs:.2} s ({} new, {} already held): durable at positions {first}..={last}",
            ui::count(stats.total),
            ui::count(stats.new),
            ui::count(stats.total - stats.new)
        ),
        _ => eprintln!("remembered no atoms"),
    }
    eprintln!(
        "log holds {} atoms (root {}); {} not committed yet{}",
        ui::count(head.size),
        ui::short(&head.root),
        ui::count(head.size - committed),
        if head.size > committed { ": run `sion memory commit`" } else { "" }
    );
    match parsed {
        Ok(skipped) if skipped > 0 => {
            eprintln!("skipped {skipped} lines that were not valid atoms");
            Ok(ExitCode::SUCCESS)
        }
        Ok(_) => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e),
    }
}

#[derive(Default)]
struct Stats {
    total: u64,
    new: u64,
    first: Option<u64>,
    last: Option<u64>,
}

impl Stats {
    fn note(&mut self, position: u64, new: bool) {
        self.total += 1;
        self.new += u64::from(new);
        self.first = Some(self.first.map_or(position, |f| f.min(position)));
        self.last = Some(self.last.map_or(position, |l| l.max(position)));
    }
}

/// Read JSON lines into batches; returns how many bad lines were skipped.
/// The longest input line taken as an atom. An atom's JSON is far smaller (docs/ATOM.md bounds
/// its parts); a longer line is refused without being held in memory whole.
const MAX_LINE_BYTES: usize = 16 << 20;

/// Reads one line (without its newline) into `buf`, holding at most `MAX_LINE_BYTES` of it.
/// Returns the bytes the line took in the input (0 at the end) and whether it was longer.
fn read_line_bounded(reader: &mut dyn BufRead, buf: &mut Vec<u8>) -> io::Result<(usize, bool)> {
    buf.clear();
    let mut taken = io::Read::take(&mut *reader, MAX_LINE_BYTES as u64 + 1).read_until(b'\n', buf)?;
    if buf.last() == Some(&b'\n') {
        buf.pop();
        return Ok((taken, false));
    }
    if buf.len() <= MAX_LINE_BYTES {
        return Ok((taken, false)); // the last line, without a newline
    }
    // Too long: pass over the rest of the line without keeping it.
    buf.clear();
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok((taken, true));
        }
        match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                return Ok((taken + i + 1, true));
            }
            None => {
                let n = chunk.len();
                reader.consume(n);
                taken += n;
            }
        }
    }
}

fn parse_lines(
    mut reader: Box<dyn BufRead + Send>,
    batch_size: usize,
    skip_bad: bool,
    tx: &mpsc::SyncSender<Input>,
    bar: &indicatif::ProgressBar,
) -> Result<u64> {
    let mut batch = Vec::with_capacity(batch_size);
    let mut skipped = 0u64;
    let mut first_skip_reported = false;
    let mut buf = Vec::new();
    let mut offset = 0u64; // of the line's first byte in the input
    for number in 1u64.. {
        let read = read_line_bounded(&mut *reader, &mut buf);
        let (taken, too_long) = match read {
            Ok(r) => r,
            Err(e) => {
                // What came before is made durable before the run stops.
                if !batch.is_empty() {
                    let _ = tx.send(Input::Batch(std::mem::take(&mut batch)));
                }
                return Err(anyhow::Error::new(e)
                    .context(format!("reading line {number} (the atoms before it are durable)")));
            }
        };
        if taken == 0 {
            break;
        }
        bar.inc(taken as u64);
        let line_offset = offset;
        offset += taken as u64;
        let parsed: std::result::Result<Atom, String> = if too_long {
            Err(format!("the line is longer than {} MiB", MAX_LINE_BYTES >> 20))
        } else {
            match std::str::from_utf8(&buf) {
                Err(e) => Err(format!(
                    "not UTF-8 at byte {} of the input (byte {} of the line)",
                    line_offset + e.valid_up_to() as u64,
                    e.valid_up_to() + 1
                )),
                Ok(line) if line.trim().is_empty() => continue,
                Ok(line) => Atom::from_json(line).map_err(|e| e.to_string()),
            }
        };
        match parsed {
            Ok(atom) => batch.push(atom),
            Err(e) if skip_bad => {
                skipped += 1;
                if !first_skip_reported {
                    bar.suspend(|| eprintln!("skipping line {number}: {e}"));
                    first_skip_reported = true;
                }
            }
            Err(e) => {
                if !batch.is_empty() {
                    let _ = tx.send(Input::Batch(std::mem::take(&mut batch)));
                }
                bail!("line {number}: {e} (the atoms before it are durable; --skip-bad skips such lines)");
            }
        }
        if batch.len() >= batch_size
            && tx.send(Input::Batch(std::mem::replace(&mut batch, Vec::with_capacity(batch_size)))).is_err()
        {
            // The appender stopped (it reports why).
            return Ok(skipped);
        }
    }
    if !batch.is_empty() {
        let _ = tx.send(Input::Batch(batch));
    }
    Ok(skipped)
}

fn commit(a: CommitArgs) -> Result<ExitCode> {
    let mut memory = open_memory(&a.data.data)?;
    let committed = memory.committed().head;
    if committed.size == memory.log().size() && !a.seal {
        outln!(
            "nothing to commit: the head at Pulse {} already covers all {} atoms",
            memory.committed().committed_at,
            ui::count(committed.size)
        );
        return Ok(ExitCode::SUCCESS);
    }
    let c = memory.commit(a.seal).context("committing the head to the ledger")?;
    let h = &c.pulse.header;
    outln!(
        "committed {} atoms (+{}) at Pulse {} ({}){}",
        ui::count(c.head.size),
        ui::count(c.head.size - c.previous.size),
        h.number,
        rfc3339(h.time_ns),
        if a.seal { ", sealed" } else { "" }
    );
    outln!("  root        {}", hex::encode(c.head.root));
    outln!("  state root  {}", hex::encode(h.state_root));
    outln!("  signed by   {}", hex::encode(memory.ledger().public_key().to_bytes()));
    Ok(ExitCode::SUCCESS)
}

fn dump(a: &DumpArgs) -> Result<ExitCode> {
    use std::io::Write as _;
    let memory = open_memory_read_only(&a.data.data)?;
    let mut out = BufWriter::new(io::stdout().lock());
    for entry in memory.log().scan(a.from).take(a.limit.map_or(usize::MAX, |n| n as usize)) {
        let (position, atom) = entry.context("reading the log")?;
        writeln!(out, "{}", atom.to_json_line(Some(position))).map_err(crate::stdout_failed)?;
    }
    out.flush().map_err(crate::stdout_failed)?;
    Ok(ExitCode::SUCCESS)
}

fn show(a: ShowArgs) -> Result<ExitCode> {
    let memory = open_memory_read_only(&a.data.data)?;
    let log = memory.committed();
    let tree = memory.log().head();
    let latest = memory.ledger().latest()?.header;
    let committed_time = memory.ledger().header(log.committed_at).ok().map(|h| h.header.time_ns);
    if a.json {
        let v = serde_json::json!({
            "data": a.data.data,
            "log": log.id.0,
            "writer": log.writer.to_string(),
            "agent": log.agent,
            "size": tree.size,
            "root": hex::encode(tree.root),
            "committed": {
                "size": log.head.size,
                "root": hex::encode(log.head.root),
                "index": hex::encode(log.head.index),
                "manifest": hex::encode(log.head.manifest),
                "commits": log.commits,
                "pulse": log.committed_at,
                "time": committed_time.map(rfc3339),
                "sealed": log.sealed,
            },
            "ledger": {
                "at": memory.ledger().describe(),
                "key": hex::encode(memory.ledger().public_key().to_bytes()),
                "pulse": latest.number,
            },
        });
        outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    outln!("memory {} (log {} on its ledger)", a.data.data.display(), log.id);
    outln!("  writer     {}", log.writer);
    if let Some(agent) = &log.agent {
        outln!("  agent      {agent}");
    }
    outln!("  log        {} atoms, root {}", ui::count(tree.size), hex::encode(tree.root));
    outln!(
        "  committed  {} atoms at Pulse {}{} (commit {}), root {}{}",
        ui::count(log.head.size),
        log.committed_at,
        committed_time.map(|t| format!(" ({})", rfc3339(t))).unwrap_or_default(),
        log.commits,
        hex::encode(log.head.root),
        if log.sealed { ", sealed" } else { "" }
    );
    if tree.size > log.head.size {
        outln!("             {} atoms not committed yet", ui::count(tree.size - log.head.size));
    }
    outln!(
        "  ledger     {}, key {}, latest Pulse {} ({})",
        memory.ledger().describe(),
        hex::encode(memory.ledger().public_key().to_bytes()),
        latest.number,
        rfc3339(latest.time_ns)
    );
    Ok(ExitCode::SUCCESS)
}

fn write_proof(file: &ProofFile, out: &Path) -> Result<()> {
    let bytes = file.encode();
    std::fs::write(out, &bytes).with_context(|| format!("writing {}", out.display()))?;
    let verified = file.verify(None).context("the proof just built does not verify (a bug)")?;
    outln!("wrote {} ({} bytes)", out.display(), bytes.len());
    print_verified(&verified, None)?;
    Ok(())
}

fn prove(cmd: ProveCommand) -> Result<ExitCode> {
    // One path for every kind: open, prove, write where asked or to KIND-N.sionproof.
    let (data, out, name, n) = match &cmd {
        ProveCommand::Inclusion { data, position, out } => (data, out, "inclusion", *position),
        ProveCommand::Omission { data, position, out } => (data, out, "omission", *position),
        ProveCommand::Time { data, position, out } => (data, out, "recorded", *position),
        ProveCommand::Consistency { data, from, out } => (data, out, "consistency", *from),
    };
    let memory = open_memory_read_only(&data.data)?;
    let file = match &cmd {
        ProveCommand::Inclusion { .. } => memory.prove_inclusion(n)?,
        ProveCommand::Omission { .. } => memory.prove_omission(n)?,
        ProveCommand::Time { .. } => memory.prove_recorded(n)?,
        ProveCommand::Consistency { .. } => memory.prove_consistency(n)?,
    };
    let out = out.clone().unwrap_or_else(|| PathBuf::from(format!("{name}-{n}.sionproof")));
    write_proof(&file, &out)?;
    Ok(ExitCode::SUCCESS)
}

/// Where the sealed payloads of an answer's atoms stand (position → state), for --json.
fn sealed_states(v: &Verified, memory: Option<&Memory>) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    if let (Claim::Range { atoms, .. } | Claim::List { atoms, .. }, Some(m)) = (&v.claim, memory) {
        for (position, atom) in atoms {
            if let Some(state) = crate::space_cmd::payload_state(m, atom) {
                out.insert(position.to_string(), state.into());
            }
        }
    }
    out.into()
}

fn print_verified(v: &Verified, memory: Option<&Memory>) -> Result<()> {
    outln!("proves: {}", v.statement());
    if let Claim::Range { atoms, .. } | Claim::List { atoms, .. } = &v.claim {
        print_atoms(atoms, memory)?;
    }
    outln!("  head    {} atoms, root {}", ui::count(v.head.size), hex::encode(v.head.root));
    match v.pulse {
        Some((number, time_ns, key)) => {
            outln!(
                "  ledger  committed at Pulse {number} ({}), signed by {}",
                rfc3339(time_ns),
                hex::encode(key)
            )
        }
        None => outln!("  ledger  not attested: the head is taken on the writer's word"),
    }
    Ok(())
}

fn print_atoms(atoms: &[(u64, Atom)], memory: Option<&Memory>) -> Result<()> {
    for (position, atom) in atoms.iter().take(20) {
        let p = atom.parts();
        let sealed = memory.and_then(|m| crate::space_cmd::payload_state(m, atom)).map(|s| format!("  {s}"));
        outln!(
            "  {position:>10}  {:<12} {:<16} {:?}..={:?} mm  [{}, {}) ns{}",
            p.kind.as_str(),
            p.subject,
            p.bounds.min_mm,
            p.bounds.max_mm,
            p.valid.from_ns,
            p.valid.to_ns,
            sealed.unwrap_or_default()
        );
    }
    if atoms.len() > 20 {
        outln!("  … and {} more (--json lists them all)", atoms.len() - 20);
    }
    Ok(())
}

/// Whether opening failed because the log's records are damaged (not for want of a file or
/// a lock): then the segments alone can still say how far the log is whole.
fn damaged_log(e: &anyhow::Error) -> bool {
    use sion_memory::log::LogError;
    use sion_memory::memory::MemoryError;
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<MemoryError>(),
            Some(
                MemoryError::Log(LogError::Damaged { .. } | LogError::Corrupt { .. })
                    | MemoryError::Unreadable { .. }
            )
        ) || matches!(c.downcast_ref::<LogError>(), Some(LogError::Damaged { .. } | LogError::Corrupt { .. }))
    })
}

/// Audit a memory whose log will not open: read its segments only, and say how far it is
/// whole, where the damage is and what lies past it.
fn survey(dir: &Path, why: &anyhow::Error) -> Result<ExitCode> {
    let survey = sion_memory::log::survey(&dir.join("log")).context("reading the log's segments")?;
    outln!("BAD: the memory does not open: {why:#}");
    match &survey.damage {
        Some((segment, byte, reason)) => {
            outln!("BAD at position {}: {reason} ({}, byte {byte})", survey.whole, segment.display())
        }
        None => outln!("the {} segments read whole ({} atoms)", survey.segments, ui::count(survey.whole)),
    }
    outln!(
        "  {} atoms before it are whole; {} whole records follow the damage (read from the segments \
         alone, nothing was changed)",
        ui::count(survey.whole),
        ui::count(survey.whole_after)
    );
    Ok(ExitCode::FAILURE)
}

/// Exit status of `sion memory verify` when the proof was not checked at all (its --help).
const NOT_CHECKED: u8 = 2;

/// A refusal: its code (docs/PROOFS.md, "Refusals") and why.
struct Refusal {
    code: &'static str,
    message: String,
}

impl From<sion_memory::proof::VerifyError> for Refusal {
    fn from(e: sion_memory::proof::VerifyError) -> Self {
        Self { code: e.code(), message: e.to_string() }
    }
}

fn verify(a: VerifyArgs) -> Result<ExitCode> {
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
                    "claim": claim,
                });
                outln!("{}", serde_json::to_string_pretty(&v)?);
            } else if anchored {
                outln!("VALID {}", a.file.display());
                print_verified(&v, None)?;
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
type Checked = (std::result::Result<Verified, Refusal>, bool, Option<(NamedWitnesses, usize)>);

fn checked(a: &VerifyArgs) -> Result<Checked> {
    let bytes = std::fs::read(&a.file).with_context(|| format!("reading {}", a.file.display()))?;
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
    let result: Result<Verified, Refusal> = file
        .map_err(sion_memory::proof::VerifyError::from)
        .and_then(|f| f.verify(expected.as_ref()))
        .and_then(|v| expect.check(&v).map(|()| v))
        .map_err(Refusal::from);
    let result = match (result, &service) {
        (Ok(v), Some(service)) => served_header_matches(service, &bytes, &v)?.map_or(Ok(v), Err),
        (other, _) => other,
    };
    // Anchored only by a key the reader brought; the proof's own key anchors nothing.
    Ok((result, expected.is_some(), witnesses))
}

/// Add to `file` the cosignatures by `witnesses` of its Pulse that the service holds and the
/// file does not carry.
fn add_served_cosignatures(
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
fn served_header_matches(
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

fn repair(dir: &Path, new_log: bool) -> Result<ExitCode> {
    let r = match Memory::repair(dir, new_log) {
        Ok(r) => r,
        Err(e @ sion_memory::memory::MemoryError::CommittedDamage { .. }) => {
            outln!("NOT REPAIRED: {e}");
            return Ok(ExitCode::FAILURE);
        }
        Err(e) => return Err(e).with_context(|| format!("repairing {}", dir.display())),
    };
    match &r.log.damage {
        None => {
            outln!("the log's segments read whole: {} atoms kept, nothing set aside", ui::count(r.log.kept))
        }
        Some((segment, byte, why)) => {
            outln!(
                "the log was damaged at position {} ({}, byte {byte}: {why}); kept the {} atoms before it",
                r.log.kept,
                segment.display(),
                ui::count(r.log.kept)
            );
            for (path, bytes) in &r.log.set_aside {
                outln!("  set aside {} ({} bytes)", path.display(), ui::count(*bytes));
            }
            outln!(
                "  {} whole records are among what was set aside (not in the log; a copy of this memory may hold them)",
                ui::count(r.log.whole_set_aside)
            );
            if r.new_log.is_none() && r.committed > 0 {
                outln!("  the committed head ({} atoms) is kept whole", ui::count(r.committed));
            }
        }
    }
    if let Some(n) = &r.new_log {
        outln!(
            "the ledger had committed {} atoms of log {}; {} are lost. The {} kept go on as a new log on \
             the same ledger, committed now; log {} stays at its last head",
            ui::count(n.committed),
            n.log,
            ui::count(n.committed - n.kept),
            ui::count(n.kept),
            n.log
        );
    }
    for p in &r.packs {
        outln!(
            "blob pack {} was damaged ({}): kept its first {} bytes, set aside {} ({} bytes)",
            p.pack.display(),
            p.why,
            ui::count(p.kept_bytes),
            p.set_aside.display(),
            ui::count(p.bytes)
        );
    }
    for (position, problem) in &r.lost_blobs {
        outln!("  the atom at position {position}: its payload is missing ({problem})");
    }
    if r.lost_blob_count > 0 {
        outln!("{} atoms commit to blobs that are missing or damaged", ui::count(r.lost_blob_count));
    }
    outln!("repaired: `sion memory audit --data {}` checks it", dir.display());
    Ok(ExitCode::SUCCESS)
}

fn audit(dir: &Path) -> Result<ExitCode> {
    let memory = match open_memory_read_only(dir) {
        Ok(m) => m,
        Err(e) if damaged_log(&e) => return survey(dir, &e),
        Err(e) => return Err(e),
    };
    let size = memory.log().size();
    let bar = ui::bar(size, "atoms");
    let started = Instant::now();
    let (audit, committed) = memory.audit(|n| bar.set_position(n))?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    if let Some((position, reason)) = &audit.first_bad {
        outln!("BAD at position {position}: {reason}");
        return Ok(ExitCode::FAILURE);
    }
    outln!(
        "audited {} atoms in {secs:.2} s: every record, offset and tree hash checks out; root {}",
        ui::count(audit.size),
        audit.root.map(hex::encode).unwrap_or_default()
    );
    match audit.root_at_mark {
        Some(root) if root == committed.head.root => {
            outln!(
                "the committed head ({} atoms, Pulse {}) matches the recomputed root",
                ui::count(committed.head.size),
                committed.committed_at
            );
            // The bytes atoms commit to by hash (map tiles, camera frames) are read back too.
            let bar = ui::bar(size, "atoms (blobs)");
            let blobs = memory.audit_blobs(|n| bar.set_position(n))?;
            bar.finish_and_clear();
            if blobs.bad > 0 {
                for (position, problem) in &blobs.first {
                    outln!("BAD blob of the atom at position {position}: {problem}");
                }
                outln!(
                    "BAD: {} of the {} blobs atoms commit to are missing or damaged ({} missing)",
                    ui::count(blobs.bad),
                    ui::count(blobs.referenced),
                    ui::count(blobs.missing)
                );
                return Ok(ExitCode::FAILURE);
            }
            outln!(
                "every blob atoms commit to that is held here ({}) hashes to its name{}",
                ui::count(blobs.referenced - blobs.elsewhere - blobs.forgotten),
                if blobs.elsewhere > 0 {
                    format!("; {} are kept elsewhere (no pack here is lost)", ui::count(blobs.elsewhere))
                } else {
                    String::new()
                }
            );
            if blobs.forgotten > 0 {
                outln!(
                    "{} sealed payloads were forgotten by retention (forget atoms say when and why)",
                    ui::count(blobs.forgotten)
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        _ => {
            outln!(
                "BAD: the committed head ({} atoms, root {}) does not match the log",
                ui::count(committed.head.size),
                hex::encode(committed.head.root)
            );
            Ok(ExitCode::FAILURE)
        }
    }
}
