//! A C2SP tlog-witness (docs/FLEET-LEDGER.md, "Checkpoints"; c2sp.org/tlog-witness) of a
//! ledger's history: it takes `add-checkpoint` requests, checks each checkpoint is signed by
//! the ledger key and extends the last one it cosigned (an RFC 6962 consistency proof), makes
//! the new one durable, and only then answers its `cosignature/v1`. So it never cosigns two
//! histories that do not extend one another: a ledger that shows one reader a rewritten past
//! gets no cosignature for it. This is the protocol every C2SP witness speaks; what the gRPC
//! witness checks besides (each Pulse's state root from its transactions) it does not.

use std::path::{Path, PathBuf};

use crate::witness::{decode_state, encode_state};
use ed25519_dalek::{SigningKey, VerifyingKey};
use sion_verify::ledger::{AddCheckpoint, CheckpointError, cosign_v1, origin_of};
use sion_verify::merkle::{Digest, Sha256, TreeHasher as _};

/// The state file's magic: otherwise the gRPC witness's layout ([`crate::witness`]), the size and
/// root in place of the number and hash: 84 bytes, replaced atomically.
const MAGIC: &[u8; 8] = b"SIONC2W1";

/// Why an `add-checkpoint` was not cosigned, with the HTTP status C2SP tlog-witness gives it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AddError {
    /// The body does not parse, or its old size is past the checkpoint's (400).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The checkpoint is of a log this witness does not witness (404).
    #[error("unknown log: the checkpoint's origin is {0:?}")]
    UnknownLog(String),
    /// No signature of the ledger's key verifies (403).
    #[error("the checkpoint is not signed by the witnessed ledger's key: {0}")]
    Forbidden(String),
    /// The old size is not the size this witness last cosigned, or the same size with another
    /// root (409, the body the size cosigned last).
    #[error("conflict: this witness last cosigned size {size}{}", if *.same_size_other_root { " with another root" } else { "" })]
    Conflict {
        /// The size it last cosigned.
        size: u64,
        /// The request's size equals it, with another root: the log forked.
        same_size_other_root: bool,
    },
    /// The consistency proof does not verify (422).
    #[error("the consistency proof does not verify: {0}")]
    Unprocessable(String),
    /// The state file could not be written: nothing was cosigned (500).
    #[error("the witness state {path}: {problem}")]
    State {
        /// The file.
        path: PathBuf,
        /// What failed.
        problem: String,
    },
}

impl AddError {
    /// The HTTP status C2SP tlog-witness gives this refusal.
    pub fn status(&self) -> u16 {
        match self {
            AddError::BadRequest(_) => 400,
            AddError::UnknownLog(_) => 404,
            AddError::Forbidden(_) => 403,
            AddError::Conflict { .. } => 409,
            AddError::Unprocessable(_) => 422,
            AddError::State { .. } => 500,
        }
    }
}

/// A C2SP witness of one ledger: its key and name, the ledger's key, and the size and root it
/// last cosigned (durable in its state file).
pub struct C2spWitness {
    key: SigningKey,
    name: String,
    ledger: VerifyingKey,
    state: PathBuf,
    last: (u64, Digest),
    /// `STATE.lock`, locked while this witness lives: a second process on the same state
    /// would check old sizes against a state the first is changing.
    _lock: std::fs::File,
}

/// An `add-checkpoint` request checked against the ledger key alone: what
/// [`C2spWitness::commit`] then checks against the witness's state.
pub struct Checked {
    old: u64,
    proof: Vec<Digest>,
    text: String,
    checkpoint: sion_verify::ledger::Checkpoint,
}

impl C2spWitness {
    /// A witness named `name` (its note key name, e.g. `witness.example/w1`) with signing key
    /// `key`, of the ledger whose key is `ledger`, remembering what it cosigned in `state`
    /// (made on first use; refused if damaged or of another ledger).
    pub fn open(key: SigningKey, name: &str, ledger: VerifyingKey, state: &Path) -> Result<Self, AddError> {
        let bad = |problem: String| AddError::State { path: state.to_owned(), problem };
        if !sion_verify::ledger::valid_key_name(name) {
            return Err(bad(format!("{name:?} cannot name a key (empty, or a space or a plus in it)")));
        }
        let last = match std::fs::read(state) {
            Ok(bytes) => {
                let (ledger_key, size, root) = decode_state(MAGIC, "C2SP witness", &bytes).map_err(bad)?;
                if ledger_key != ledger.to_bytes() {
                    return Err(bad(format!(
                        "it is of the ledger with key {}, not {}",
                        hex::encode(ledger_key),
                        hex::encode(ledger.to_bytes())
                    )));
                }
                (size, root)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (0, Sha256::hash_empty()),
            Err(e) => return Err(bad(e.to_string())),
        };
        let lock_path = PathBuf::from(format!("{}.lock", state.display()));
        let lock = std::fs::File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| bad(format!("{}: {e}", lock_path.display())))?;
        lock.try_lock().map_err(|_| bad(format!("another witness process holds {}", lock_path.display())))?;
        Ok(Self { key, name: name.to_owned(), ledger, state: state.to_owned(), last, _lock: lock })
    }

    /// The witnessed ledger's key.
    pub fn ledger(&self) -> VerifyingKey {
        self.ledger
    }

    /// The size and root last cosigned (0 and the empty tree's root before the first).
    pub fn last(&self) -> (u64, Digest) {
        self.last
    }

    /// This witness's C2SP verifier key (`name+id+base64(0x04 || key)`).
    pub fn vkey(&self) -> String {
        sion_verify::ledger::witness_vkey(&self.name, &self.key.verifying_key().to_bytes())
    }

    /// Answer one `add-checkpoint` request body at POSIX time `now`: [`C2spWitness::check`],
    /// then [`C2spWitness::commit`].
    pub fn add_checkpoint(&mut self, body: &[u8], now: u64) -> Result<String, AddError> {
        let checked = Self::check(&self.ledger, body)?;
        self.commit(&checked, now)
    }

    /// Parse a request body and check it against the ledger's key alone (no state read): its
    /// origin (404 for another log), its signature (403), its old size at most its size
    /// (400). Done before a request takes its turn, so a costly body holds up no other.
    pub fn check(ledger: &VerifyingKey, body: &[u8]) -> Result<Checked, AddError> {
        let request = AddCheckpoint::parse(body).map_err(|e| AddError::BadRequest(e.to_string()))?;
        let origin = origin_of(&ledger.to_bytes());
        let claimed = request.note.text.split('\n').next().unwrap_or_default();
        if claimed != origin {
            return Err(AddError::UnknownLog(claimed.to_owned()));
        }
        let checkpoint = match request.note.verify_checkpoint(ledger) {
            Ok(c) => c,
            Err(e @ CheckpointError::Unsigned { .. }) => return Err(AddError::Forbidden(e.to_string())),
            Err(e) => return Err(AddError::BadRequest(e.to_string())),
        };
        if request.old > checkpoint.size {
            return Err(AddError::BadRequest(format!(
                "old size {} is past the checkpoint's size {}",
                request.old, checkpoint.size
            )));
        }
        Ok(Checked { old: request.old, proof: request.proof, text: request.note.text, checkpoint })
    }

    /// Answer a checked request at POSIX time `now`: its old size must be the size last
    /// cosigned (409), the same size the same root (409), the consistency proof must hold
    /// (422); then the new size and root are made durable and the `cosignature/v1` line
    /// returned. Callers take requests one at a time (the check of the old size and the write
    /// of the new one are one step).
    pub fn commit(&mut self, request: &Checked, now: u64) -> Result<String, AddError> {
        let checkpoint = &request.checkpoint;
        let (size, root) = self.last;
        if request.old != size {
            return Err(AddError::Conflict { size, same_size_other_root: false });
        }
        if checkpoint.size == size {
            if checkpoint.root != root {
                return Err(AddError::Conflict { size, same_size_other_root: true });
            }
            if !request.proof.is_empty() {
                return Err(AddError::Unprocessable(
                    "a consistency proof between equal sizes must be empty".into(),
                ));
            }
        } else if size == 0 {
            if !request.proof.is_empty() {
                return Err(AddError::Unprocessable("a consistency proof from size 0 must be empty".into()));
            }
        } else {
            sion_verify::merkle::verify_consistency::<Sha256, _>(
                size,
                checkpoint.size,
                &root,
                &checkpoint.root,
                &request.proof,
            )
            .map_err(|e| AddError::Unprocessable(e.to_string()))?;
        }
        if (checkpoint.size, checkpoint.root) != self.last {
            let bytes = encode_state(MAGIC, &self.ledger.to_bytes(), checkpoint.size, checkpoint.root);
            sion_disk::Disk::os()
                .replace_file(&self.state, &bytes)
                .map_err(|e| AddError::State { path: self.state.clone(), problem: e.to_string() })?;
            self.last = (checkpoint.size, checkpoint.root);
        }
        Ok(cosign_v1(&self.key, &self.name, now, &request.text).line())
    }
}

/// A C2SP witness the ledger asks for cosignatures: its name and key (from its vkey) and its
/// submission prefix (`https://witness.example/w1`: requests go to `PREFIX/add-checkpoint`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cosigner {
    /// The witness's key name.
    pub name: String,
    /// Its Ed25519 `cosignature/v1` key.
    pub key: VerifyingKey,
    /// Its submission prefix.
    pub url: String,
}

impl Cosigner {
    /// Parse a C2SP `cosignature/v1` verifier key (`name+id+base64(0x04 || key)`), checking
    /// its key ID.
    pub fn from_vkey(vkey: &str, url: &str) -> Result<Self, String> {
        let (name, key) = sion_verify::ledger::parse_witness_vkey(vkey)?;
        if !(url.is_empty() || url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!("{url:?}: a witness's submission prefix is an http:// or https:// URL"));
        }
        Ok(Self { name, key, url: url.trim_end_matches('/').to_owned() })
    }

    /// Parse a file of witnesses: one per line, `VKEY [URL]` (the URL, where the ledger asks
    /// it, is needed by `sion ledger serve --cosigners`, not by readers); `#` starts a comment.
    pub fn parse_file(text: &str) -> Result<Vec<Self>, String> {
        let mut out: Vec<Self> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let mut fields = line.split_whitespace();
            let (Some(vkey), url, None) = (fields.next(), fields.next(), fields.next()) else {
                return Err(format!("line {}: `VKEY [URL]` expected", i + 1));
            };
            let url = url.unwrap_or_default();
            let c = Self::from_vkey(vkey, url).map_err(|e| format!("line {}: {e}", i + 1))?;
            // A cosignature/v1 does not sign the name: one key under two names would count twice.
            if out.iter().any(|o| o.name == c.name || o.key == c.key) {
                return Err(format!("line {}: witness {} (or its key) named twice", i + 1, c.name));
            }
            out.push(c);
        }
        Ok(out)
    }
}

/// What one round of asking witnesses did.
#[derive(Debug, Default)]
pub struct Round {
    /// The checkpoint's size.
    pub size: u64,
    /// The witnesses that cosigned it.
    pub cosigned: Vec<String>,
    /// The witnesses that did not, and why.
    pub failed: Vec<(String, String)>,
}

/// The HTTP client [`cosign_round`] asks witnesses with (HTTPS with the platform's roots, or
/// plain HTTP).
pub fn http_client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(5))
        // A witness answers where it is asked; a redirect is not followed.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| e.to_string())
}

/// The largest answer read from a witness (a few signature lines).
const MAX_ANSWER: usize = 16 * 1024;

/// A witness's answer, read a chunk at a time and refused past [`MAX_ANSWER`].
async fn read_bounded(mut resp: reqwest::Response) -> Result<Vec<u8>, String> {
    if resp.content_length().is_some_and(|n| n > MAX_ANSWER as u64) {
        return Err(format!("an answer of {} bytes", resp.content_length().unwrap_or_default()));
    }
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| format!("its answer was cut: {e}"))? {
        if out.len() + chunk.len() > MAX_ANSWER {
            return Err(format!("an answer over {MAX_ANSWER} bytes"));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// Ask each witness to cosign the ledger's latest checkpoint (C2SP tlog-witness
/// `add-checkpoint`), with a consistency proof from the size it last cosigned (`known`, learnt
/// from its 409 answers when not known), and keep the cosignatures that verify under its key
/// with the checkpoint in etcd (`P/cosigned/SIZE`). At most 10 s a witness.
pub async fn cosign_round(
    checkpoints: &crate::service::Checkpoints,
    witnesses: &[Cosigner],
    known: &mut std::collections::HashMap<String, u64>,
    http: &reqwest::Client,
) -> Result<Round, crate::FleetError> {
    let note = checkpoints.latest().await?;
    let checkpoint = checkpoints.verify(&note)?;
    let mut round = Round { size: checkpoint.size, ..Round::default() };
    let mut lines = Vec::new();
    for w in witnesses {
        if w.url.is_empty() {
            round.failed.push((w.name.clone(), "no submission URL given for it".into()));
            continue;
        }
        let mut tries = 0;
        let answer = loop {
            tries += 1;
            let old = known.get(&w.name).copied().unwrap_or(0).min(checkpoint.size);
            let proof = match checkpoints.consistency(old, checkpoint.size).await {
                Ok(p) => p,
                Err(e) => break Err(format!("no consistency proof from {old}: {e}")),
            };
            let body = AddCheckpoint { old, proof, note: note.clone() }.encode();
            let sent = http
                .post(format!("{}/add-checkpoint", w.url))
                .timeout(std::time::Duration::from_secs(10))
                .body(body)
                .send()
                .await;
            let resp = match sent {
                Ok(r) => r,
                Err(e) => break Err(format!("not reached: {e}")),
            };
            let status = resp.status().as_u16();
            let text = match read_bounded(resp).await {
                Ok(b) => String::from_utf8_lossy(&b).into_owned(),
                Err(e) => break Err(e),
            };
            match status {
                200 => break Ok(text),
                // Its size is not the one we knew: learnt, and asked again once.
                409 if tries < 2 => match text.trim().parse::<u64>() {
                    Ok(size) if size <= checkpoint.size && size != old => {
                        known.insert(w.name.clone(), size);
                    }
                    _ => break Err(format!("409: {}", text.trim())),
                },
                s => break Err(format!("{s}: {}", text.trim())),
            }
        };
        match answer {
            Ok(text) => {
                let mut held = false;
                for line in text.lines() {
                    let Ok(sig) = sion_verify::ledger::NoteSignature::parse_line(line, "cosignature") else {
                        continue;
                    };
                    let mut one = note.clone();
                    one.signatures = vec![sig.clone()];
                    if one.cosigned_by(&w.name, &w.key).is_some() {
                        lines.push(sig);
                        held = true;
                    }
                }
                if held {
                    known.insert(w.name.clone(), checkpoint.size);
                    round.cosigned.push(w.name.clone());
                } else {
                    round.failed.push((w.name.clone(), "no cosignature of its key in its answer".into()));
                }
            }
            Err(e) => round.failed.push((w.name.clone(), e)),
        }
    }
    if !lines.is_empty() {
        checkpoints.keep_cosigned(&note, &checkpoint, lines).await?;
    }
    Ok(round)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cosigners_file_names_each_key_once() {
        let k = SigningKey::from_bytes(&[3; 32]).verifying_key().to_bytes();
        let a = sion_verify::ledger::witness_vkey("a.example/w", &k);
        let b = sion_verify::ledger::witness_vkey("b.example/w", &k);
        let one = Cosigner::parse_file(&format!("{a} http://127.0.0.1:1\n")).expect("one");
        assert_eq!(one[0].name, "a.example/w");
        let twice =
            Cosigner::parse_file(&format!("{a} http://x\n{b} http://y\n")).expect_err("one key, two names");
        assert!(twice.contains("line 2"), "{twice}");
        let bad_id = a.replacen('+', "+0", 1);
        assert!(Cosigner::parse_file(&bad_id).is_err());
        assert!(Cosigner::parse_file(&format!("{a} ftp://x\n")).is_err());
    }
}
