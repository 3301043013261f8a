//! `sion memory space …`, `seal`, `open-payload`, `forget`: a sealed memory's space and its
//! members, sealing atoms' payloads, opening them (as the writer or a member), forgetting them
//! (docs/SEAL.md).

use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use sion_memory::atom::{Atom, Payload};
use sion_memory::memory::{MemberKeys, Memory, Opened, Space};
use sion_memory::proof::ListKey;
use sion_seal::record::{FORGET_SUBJECT, SPACE_SUBJECT, SpaceRecord, record_text};
use sion_seal::{MEMBER_PUBLIC_BYTES, Sealed, member_key_hash};

use crate::common::{DataArg, open_memory, open_memory_read_only};

#[derive(Subcommand)]
pub enum SpaceCommand {
    /// Create a sealed memory: a memory whose log's policy commits to a new space of its own
    /// (epoch 0, no members yet). The same as `sion memory open --sealed`: a space belongs to
    /// one log from its start, so a memory in the clear cannot be given one later.
    Create(super::open::OpenArgs),
    /// The space of a sealed memory: its id, epochs, members, and how many leaves were sealed.
    Show {
        #[command(flatten)]
        data: DataArg,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Make a member's key (X-Wing: ML-KEM-768 + X25519) in a directory of their own:
    /// `member.key` (secret, mode 0600) and `member.pub` (1,216 bytes, to give the writer).
    Keygen {
        /// The member's key directory (their key stores go there too).
        #[arg(long)]
        keys: PathBuf,
    },
    /// Add a member to the current epoch; writes the epoch's keys wrapped to them (only their
    /// key opens the file).
    Add {
        #[command(flatten)]
        data: DataArg,
        /// A name for people (`operator-ana`).
        #[arg(long)]
        name: String,
        /// The member's public key file (their `member.pub`).
        #[arg(long)]
        member: PathBuf,
        /// Where to write the wrapped keys for them [default: NAME.sionwrap].
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Remove a member: a new epoch begins without them, so nothing sealed from now on opens
    /// with their keys. Writes the new epoch's keys wrapped to each member left, one file each.
    Remove {
        #[command(flatten)]
        data: DataArg,
        /// The member's key hash (64 hex digits, as `show` lists it).
        #[arg(long)]
        member: String,
        /// The directory for the members' new wraps [default: the current directory].
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// The current epoch's keys wrapped to a member again (after an epoch the writer began on
    /// its own, or for a member who lost their wrap).
    Wrap {
        #[command(flatten)]
        data: DataArg,
        /// The member's key hash (64 hex digits, as `show` lists it).
        #[arg(long)]
        member: String,
        /// Where to write the wrap [default: MEMBER.sionwrap].
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// A member takes the keys a writer wrapped for them into their key store.
    Join {
        /// The member's key directory (from `keygen`).
        #[arg(long)]
        keys: PathBuf,
        /// The wrap file the writer gave them.
        #[arg(long)]
        wrap: PathBuf,
    },
    /// A member honours the writer's forgets: every forget atom the memory's committed log
    /// holds punctures the member's keys the same way, so the forgotten payloads no longer open
    /// with them either.
    Honour {
        #[command(flatten)]
        data: DataArg,
        /// The member's key directory.
        #[arg(long)]
        keys: PathBuf,
    },
}

#[derive(Args)]
pub struct SealArgs {
    #[command(flatten)]
    data: DataArg,
    /// JSON lines of atoms whose payload is text or bytes (docs/ATOM.md), or `-` for standard
    /// input; each is appended with its payload sealed in the memory's space.
    #[arg(default_value = "-")]
    input: PathBuf,
}

#[derive(Args)]
pub struct OpenPayloadArgs {
    /// The memory directory (not with --wrapped).
    #[arg(long, env = "SION_DATA", required_unless_present = "wrapped")]
    data: Option<PathBuf>,
    /// The atom's position in the log.
    #[arg(long, required_unless_present = "wrapped")]
    position: Option<u64>,
    /// Open as this member (their key directory) instead of with the writer's keys.
    #[arg(long)]
    keys: Option<PathBuf>,
    /// A payload service's answer (`/sion_memory/payload`), opened with the member's key
    /// (--keys): the file of its `wrapped_key`, with --atom and --sealed.
    #[arg(long, requires_all = ["atom", "sealed", "keys"], conflicts_with_all = ["data", "position"])]
    wrapped: Option<PathBuf>,
    /// ... the file of its `atom` (the atom's canonical bytes).
    #[arg(long, requires = "wrapped")]
    atom: Option<PathBuf>,
    /// ... the file of its `sealed` (the sealed bytes).
    #[arg(long, requires = "wrapped")]
    sealed: Option<PathBuf>,
    /// Write the payload here instead of standard output.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Args)]
pub struct ForgetArgs {
    #[command(flatten)]
    data: DataArg,
    /// The atoms whose payloads to forget (positions; repeat, or comma-separated).
    #[arg(long, value_delimiter = ',', required = true)]
    position: Vec<u64>,
    /// Why (recorded in the forget atom).
    #[arg(long, default_value = "asked")]
    why: String,
    /// Who asked (recorded in the forget atom).
    #[arg(long, default_value = "operator")]
    who: String,
    /// Do not commit after forgetting (members honour a forget once it is committed).
    #[arg(long)]
    no_commit: bool,
}

fn space_of(memory: &Memory) -> Result<&Space> {
    memory.space().map(|s| &**s).with_context(|| {
        format!(
            "the memory at {} is not sealed (make one with `sion memory open --sealed`)",
            memory.dir().display()
        )
    })
}

pub fn run(cmd: SpaceCommand) -> Result<ExitCode> {
    match cmd {
        SpaceCommand::Create(mut a) => {
            a.sealed = true;
            super::open::open(a)
        }
        SpaceCommand::Show { data, json } => show(&data.data, json),
        SpaceCommand::Keygen { keys } => {
            let m = MemberKeys::create(&sion_disk::Disk::os(), &keys)
                .with_context(|| format!("making a member key in {}", keys.display()))?;
            outln!(
                "member key {} (its hash; `sion memory space show` lists members by it)",
                hex::encode(m.key().hash())
            );
            outln!("  secret  {} (keep it)", keys.join("member.key").display());
            outln!(
                "  public  {} (give it to the writer: `sion memory space add --member`)",
                keys.join("member.pub").display()
            );
            Ok(ExitCode::SUCCESS)
        }
        SpaceCommand::Add { data, name, member, out } => {
            let public = std::fs::read(&member).with_context(|| format!("reading {}", member.display()))?;
            if public.len() != MEMBER_PUBLIC_BYTES {
                bail!(
                    "{}: {} bytes, not a member's public key ({MEMBER_PUBLIC_BYTES})",
                    member.display(),
                    public.len()
                );
            }
            let memory = open_memory(&data.data)?;
            let space = space_of(&memory)?;
            let (at, wrap) = space.add_member(memory.log(), &name, &public).context("adding the member")?;
            let out = out.unwrap_or_else(|| PathBuf::from(format!("{name}.sionwrap")));
            std::fs::write(&out, wrap.encode()).with_context(|| format!("writing {}", out.display()))?;
            outln!(
                "added {name} ({}) to epoch {} at position {}; their keys: {} (`sion memory space join --wrap`)",
                hex::encode(member_key_hash(&public)),
                wrap.epoch,
                at.position,
                out.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        SpaceCommand::Remove { data, member, out } => {
            let mut hash = [0u8; 32];
            hex::decode_to_slice(&member, &mut hash).context("--member is 64 hex digits")?;
            let memory = open_memory(&data.data)?;
            let space = space_of(&memory)?;
            let (at, wraps) = space.remove_member(memory.log(), &hash).context("removing the member")?;
            let out = out.unwrap_or_else(|| PathBuf::from("."));
            std::fs::create_dir_all(&out).with_context(|| format!("making {}", out.display()))?;
            outln!(
                "removed {member}: epoch {} begins at position {} without them",
                space.epoch(),
                at.position
            );
            for (m, w) in wraps {
                let path = out.join(format!("{}.sionwrap", hex::encode(m)));
                std::fs::write(&path, w.encode()).with_context(|| format!("writing {}", path.display()))?;
                outln!("  keys of epoch {} for {}: {}", w.epoch, hex::encode(m), path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        SpaceCommand::Wrap { data, member, out } => {
            let mut hash = [0u8; 32];
            hex::decode_to_slice(&member, &mut hash).context("--member is 64 hex digits")?;
            let memory = open_memory_read_only(&data.data)?;
            let wrap = space_of(&memory)?.wrap_for(&hash).context("wrapping the epoch's keys")?;
            let out = out.unwrap_or_else(|| PathBuf::from(format!("{member}.sionwrap")));
            std::fs::write(&out, wrap.encode()).with_context(|| format!("writing {}", out.display()))?;
            outln!("the keys of epoch {} for {member}: {}", wrap.epoch, out.display());
            Ok(ExitCode::SUCCESS)
        }
        SpaceCommand::Join { keys, wrap } => {
            let m = MemberKeys::open(&sion_disk::Disk::os(), &keys)
                .with_context(|| format!("opening the member key in {}", keys.display()))?;
            let bytes = std::fs::read(&wrap).with_context(|| format!("reading {}", wrap.display()))?;
            let (space, epoch) =
                m.join(&bytes).with_context(|| format!("taking the keys of {}", wrap.display()))?;
            outln!("holding epoch {epoch} of space {} in {}", hex::encode(space), keys.display());
            Ok(ExitCode::SUCCESS)
        }
        SpaceCommand::Honour { data, keys } => {
            let memory = open_memory_read_only(&data.data)?;
            let id = space_of(&memory)?.id();
            let m = MemberKeys::open(&sion_disk::Disk::os(), &keys)
                .with_context(|| format!("opening the member key in {}", keys.display()))?;
            let forgets = committed_records(&memory, FORGET_SUBJECT)?;
            let n = m.honour(&id, &forgets).context("puncturing the member's keys")?;
            outln!(
                "honoured {} forget atom(s): {n} leaf range(s) of epochs held here forgotten",
                forgets.len()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The texts of the committed record atoms about `subject`, in log order (a complete list:
/// the subject proof the index gives).
fn committed_records(memory: &Memory, subject: &str) -> Result<Vec<String>> {
    if memory.committed().head.size == 0 {
        return Ok(Vec::new());
    }
    let file = memory.prove_list(ListKey::Subject(subject.into()), None).context("listing the records")?;
    let verified = file.verify(None).context("the list just proved does not verify (a bug)")?;
    let mut out = Vec::new();
    if let sion_memory::proof::Claim::List { atoms, .. } = verified.claim {
        for (_, atom) in atoms {
            if let Some(t) = record_text(atom.parts(), subject) {
                out.push(t.to_owned());
            }
        }
    }
    Ok(out)
}

fn show(dir: &Path, json: bool) -> Result<ExitCode> {
    let memory = open_memory_read_only(dir)?;
    let space = space_of(&memory)?;
    let membership = space.membership();
    let records = space.records();
    if json {
        let epochs: Vec<serde_json::Value> = (0..=membership.current().unwrap_or(0))
            .map(|e| {
                serde_json::json!({
                    "epoch": e,
                    "members": membership.members(e).iter().map(|m| serde_json::json!({
                        "key_hash": hex::encode(m.key_hash), "name": m.name})).collect::<Vec<_>>(),
                })
            })
            .collect();
        let v = serde_json::json!({
            "space": hex::encode(space.id()),
            "policy": hex::encode(sion_seal::record::policy(&space.id())),
            "epoch": space.epoch(),
            "epochs": epochs,
            "records": records.iter().map(|(p, t)| serde_json::json!({"position": p, "text": t})).collect::<Vec<_>>(),
        });
        outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "space {} (the log's policy {})",
        hex::encode(space.id()),
        hex::encode(sion_seal::record::policy(&space.id()))
    );
    for e in 0..=membership.current().unwrap_or(0) {
        let members = membership.members(e);
        outln!(
            "  epoch {e}: {} member(s){}",
            members.len(),
            if e == space.epoch() { " (current)" } else { "" }
        );
        for m in members {
            outln!("    {} {}", hex::encode(m.key_hash), m.name);
        }
    }
    outln!(
        "  {} record(s) of the space in the log ({SPACE_SUBJECT}), the last at position {}",
        records.len(),
        records.last().map_or(0, |r| r.0)
    );
    for (p, t) in &records {
        if let Ok(SpaceRecord::Epoch { epoch, why, .. }) = SpaceRecord::parse(t) {
            outln!("    {p:>10}  epoch {epoch}: {why}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn seal(a: SealArgs) -> Result<ExitCode> {
    let memory = open_memory(&a.data.data)?;
    space_of(&memory)?;
    let reader: Box<dyn BufRead> = if a.input.as_os_str() == "-" {
        Box::new(BufReader::new(std::io::stdin()))
    } else {
        Box::new(BufReader::new(
            std::fs::File::open(&a.input).with_context(|| format!("opening {}", a.input.display()))?,
        ))
    };
    let mut parts = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("reading line {}", i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let atom = Atom::from_json(&line).with_context(|| format!("line {}", i + 1))?;
        match &atom.parts().payload {
            Payload::Text(_) | Payload::Public(_) => parts.push(atom.into_parts()),
            _ => bail!("line {}: payload: only text or bytes are sealed inline", i + 1),
        }
    }
    let n = parts.len();
    let appended = memory.remember_sealed(parts).context("sealing and appending")?;
    for a in &appended {
        outln!("{}", a.position);
    }
    eprintln!("sealed {n} payload(s) in epoch {}; durable", space_of(&memory)?.epoch());
    Ok(ExitCode::SUCCESS)
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

pub fn open_payload(a: OpenPayloadArgs) -> Result<ExitCode> {
    let member = |keys: &Path| {
        MemberKeys::open(&sion_disk::Disk::os(), keys)
            .with_context(|| format!("opening the member key in {}", keys.display()))
    };
    let opened = match (&a.wrapped, &a.keys, &a.data, a.position) {
        (Some(wrapped), Some(keys), _, _) => {
            let (Some(atom), Some(sealed)) = (&a.atom, &a.sealed) else {
                bail!("--wrapped needs --atom and --sealed")
            };
            let atom = Atom::decode(&read(atom)?).context("--atom: not an atom's canonical bytes")?;
            let kind = match &atom.parts().payload {
                Payload::Encrypted(_) => sion_seal::SealKind::Payload,
                Payload::Blob(_) => sion_seal::SealKind::Blob,
                _ => bail!("--atom: its payload is not sealed"),
            };
            let sealed = read(sealed)?;
            if let Payload::Blob(r) = &atom.parts().payload
                && *blake3::hash(&sealed).as_bytes() != r.hash
            {
                bail!("--sealed: not the blob the atom commits to (its hash differs)");
            }
            member(keys)?
                .open_with_leaf(atom.parts(), &sealed, kind, &read(wrapped)?)
                .context("opening the payload with the key the service wrapped")?
        }
        (None, None, Some(data), Some(position)) => {
            let memory = open_memory_read_only(data)?;
            memory
                .open_payload(position)
                .with_context(|| format!("opening the payload of atom {position}"))?
        }
        (None, Some(keys), Some(data), Some(position)) => {
            let memory = open_memory_read_only(data)?;
            let Some((atom, bytes, kind)) = memory.sealed_bytes(position)? else {
                bail!("atom {position} has no sealed payload");
            };
            member(keys)?
                .open_payload(atom.parts(), &bytes, kind)
                .with_context(|| format!("opening the payload of atom {position} as a member"))?
        }
        _ => bail!(
            "name the atom (--data and --position) or a service's answer (--wrapped, --atom, --sealed, --keys)"
        ),
    };
    let bytes = match &opened {
        Opened::Inline(Payload::Text(t)) => t.as_bytes().to_vec(),
        Opened::Inline(Payload::Public(b)) => b.clone(),
        Opened::Inline(_) => Vec::new(),
        Opened::Blob { media_type, content } => {
            eprintln!("a blob of {media_type}, {} bytes", content.len());
            content.clone()
        }
    };
    match &a.out {
        Some(path) => std::fs::write(path, &bytes).with_context(|| format!("writing {}", path.display()))?,
        None => std::io::stdout().lock().write_all(&bytes).map_err(crate::stdout_failed)?,
    }
    Ok(ExitCode::SUCCESS)
}

pub fn forget(a: ForgetArgs) -> Result<ExitCode> {
    let mut memory = open_memory(&a.data.data)?;
    let at = memory.forget(&a.position, &a.who, &a.why).context("forgetting")?;
    outln!(
        "forgot the payloads of {} atom(s): forget atom(s) at {}; the writer's keys no longer derive them",
        a.position.len(),
        at.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
    );
    if !a.no_commit {
        let c = memory.commit(false).context("committing the forget")?;
        outln!(
            "committed {} atoms at Pulse {} (members honour it now: `sion memory space honour`)",
            c.head.size,
            c.pulse.header.number
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// How a sealed atom's payload stands, for an answer's listing: `None` for an atom that is not
/// sealed.
pub fn payload_state(memory: &Memory, atom: &Atom) -> Option<String> {
    let p = atom.parts();
    // (space, epoch, leaf): a blob's atom names its epoch and leaf; an inline payload's
    // sealed bytes do.
    let (space, epoch, leaf) = match &p.payload {
        Payload::Encrypted(b) => match Sealed::decode(b) {
            Ok(s) => (Some(s.space), s.epoch, s.leaf),
            Err(_) => return Some("encrypted (not sealed bytes this memory reads)".into()),
        },
        Payload::Blob(r) => match sion_seal::sealed_leaf(&r.media_type)? {
            Some((e, l)) => (None, e, l),
            None => return Some("sealed".into()),
        },
        _ => return None,
    };
    let ours = memory.space().filter(|s| space.is_none_or(|id| id == s.id()));
    Some(match ours {
        Some(s) if s.holds(epoch, leaf) => format!("sealed (epoch {epoch}, leaf {leaf})"),
        Some(_) => format!("payload forgotten (epoch {epoch}, leaf {leaf})"),
        None => format!("sealed in another space (epoch {epoch}, leaf {leaf})"),
    })
}
