//! `sion memory …`: the commands on one memory, one module per group.

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Subcommand;
use sion_memory::atom::AtomId;
use sion_memory::proof::ListKey;

use self::audit::{RepairArgs, audit, repair};
use self::commit::{CommitArgs, commit};
use self::open::{OpenArgs, open};
use self::recall::{
    ListArgs, NearestArgs, ProveCommand, RecallArgs, count, last_seen, list, nearest, prove, recall,
};
use self::remember::{RememberArgs, remember};
use self::show::{DumpArgs, ShowArgs, dump, show};
use self::verify::{VerifyArgs, verify};
use crate::common::DataArg;

mod archive;
mod audit;
mod belief;
mod commit;
mod evidence;
pub(crate) mod open;
mod recall;
mod remember;
mod show;
mod space;
mod verify;

#[derive(Subcommand)]
pub(crate) enum MemoryCommand {
    /// Create a memory: a writer key, an empty log, the embedded ledger, and the log opened on
    /// the ledger (for an agent identity, with `--agent`).
    Open(OpenArgs),
    /// Print this memory's writer key (its account, 64 hex digits), making the key (0600) if
    /// the directory has none yet. For a robot whose agent sits under a fleet's name: give it to
    /// the fleet's operator, who registers the agent for it (`sion ledger agent register
    /// fleet/robot-7 --controller HEX`), then `sion memory open --agent fleet/robot-7` with the
    /// same --data.
    Key(DataArg),
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
    /// head alone, an empty answer included. --kind asks about some kinds only (the proof
    /// passes over the others whole); --subject about one subject's atoms only (the proof
    /// walks that subject's own tree).
    Recall(RecallArgs),
    /// How many atoms in this box, during this interval (of --kind, about --subject, if given), for how long in
    /// all, the first and the last when: `recall`'s question answered with numbers and a proof
    /// whose size does not grow with the count (subtrees wholly inside the question are taken by
    /// the counts their nodes commit to; docs/PROOFS.md, kind 9). The time in all is each
    /// atom's valid time cut to the interval, summed (two atoms valid at once count twice).
    Count(RecallArgs),
    /// Which atom in this box, during this interval, was seen last: of the atoms `recall`
    /// would answer, the one whose valid time ends last (the later log position on a tie),
    /// with the proof that nothing later answers (docs/PROOFS.md, kind 7). --kind asks about
    /// some kinds only ("where was a person last seen"), --subject about one subject's atoms
    /// ("where was pallet-17 last seen").
    LastSeen(RecallArgs),
    /// The K atoms nearest to a point at an instant (or during an interval): of the frame's
    /// atoms valid then, those whose boxes are nearest to the point (distance in millimetres
    /// from the point to the box, 0 inside it; ties by log position), nearest first, with the
    /// proof that nothing nearer exists (docs/PROOFS.md, kind 8).
    Nearest(NearestArgs),
    /// One answer out as a directory a colleague or an auditor checks and looks at: the proof,
    /// the answer's atoms as JSON, the payloads they commit to (checked by hash), the camera
    /// frames as pictures (opened, for a sealed memory: as the writer or --keys a member), and
    /// the answer drawn for Foxglove (answer.mcap) and Rerun (answer.rrd). `sion memory verify
    /// DIR` checks it (docs/EVIDENCE.md).
    Evidence(evidence::EvidenceArgs),
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
    Space(space::SpaceCommand),
    /// Append atoms given as JSON lines with their payloads (text or bytes) sealed in the
    /// memory's space: only the writer and the space's members can open them; proofs and
    /// audits work on them without any key. Prints the durable positions.
    Seal(space::SealArgs),
    /// Print (or write to --out) the payload of an atom — a camera frame, a map tile, a note:
    /// from a sealed memory opened with the writer's keys or a member's (--keys), refused,
    /// saying so, if it was forgotten; from a memory in the clear as it was given.
    OpenPayload(space::OpenPayloadArgs),
    /// Forget the payloads of sealed atoms: a forget atom (who, when, why, which) is recorded,
    /// then the keys that open them are destroyed, so nothing left derives them — every other
    /// atom still opens. The atoms stay in the log and in its proofs; their payloads do not
    /// open again. Then commits (members honour it with `sion memory space honour`).
    Forget(space::ForgetArgs),
    /// Archive the memory's committed head (committing first what the log holds past it): its
    /// atoms, the blobs it keeps and its key stores, as content-addressed objects encrypted
    /// for its writer, in a directory or an S3-compatible bucket; the archive's root is
    /// committed as the head's manifest. Writing again sends only what is new and deletes
    /// what the new state no longer names (so a forget reaches the archive too).
    Archive(archive::ArchiveArgs),
    /// Rebuild a memory directory from an archive with the writer's key, and check it against
    /// the head the ledger committed with the archive's root (size, root, index root,
    /// manifest) before putting it in place.
    Restore(archive::RestoreArgs),
    /// Revise an atom: append a revision naming it with a state (supersedes, accepts,
    /// disputes, retracts, refutes; docs/ATOM.md "Revisions and conflicts") and commit it.
    /// Nothing is deleted: what readers believe is computed from revisions (`believe`).
    Revise(belief::ReviseArgs),
    /// What a reader believes about atoms under its policy (docs/BELIEF.md): a bundle of proofs
    /// from the revisers' logs (complete link proofs, transaction times) is made — or read with
    /// --bundle — checked in this process against the ledger key you give, and the fold
    /// recomputed from it.
    Believe(belief::BelieveArgs),
}

pub(crate) fn run(cmd: MemoryCommand) -> Result<ExitCode> {
    match cmd {
        MemoryCommand::Open(a) => open(a),
        MemoryCommand::Key(a) => open::key(&a),
        MemoryCommand::Space(c) => space::run(c),
        MemoryCommand::Seal(a) => space::seal(a),
        MemoryCommand::OpenPayload(a) => space::open_payload(a),
        MemoryCommand::Forget(a) => space::forget(a),
        MemoryCommand::Archive(a) => archive::archive(a),
        MemoryCommand::Restore(a) => archive::restore(a),
        MemoryCommand::Revise(a) => belief::revise(a),
        MemoryCommand::Believe(a) => belief::believe(a),
        MemoryCommand::Remember(a) => remember(a),
        MemoryCommand::Commit(a) => commit(a),
        MemoryCommand::Show(a) => show(a),
        MemoryCommand::Dump(a) => dump(&a),
        MemoryCommand::Prove(p) => prove(p),
        MemoryCommand::Verify(a) => verify(*a),
        MemoryCommand::Audit(a) => audit(&a.data),
        MemoryCommand::Repair(a) => repair(&a.data, a.new_log),
        MemoryCommand::Recall(a) => recall(a),
        MemoryCommand::LastSeen(a) => last_seen(a),
        MemoryCommand::Count(a) => count(a),
        MemoryCommand::Nearest(a) => nearest(a),
        MemoryCommand::Evidence(a) => evidence::evidence(a),
        MemoryCommand::Subject(a) => list(ListKey::Subject(a.key.clone()), a.answer),
        MemoryCommand::Links(a) => {
            let id: AtomId = a.key.parse().context("an atom id is 64 hex digits")?;
            list(ListKey::LinksTo(id), a.answer)
        }
    }
}
