//! An evidence directory's payloads checked against the answer its proof proves
//! (docs/EVIDENCE.md): each file of `blobs/` is named by the log position of an atom of the
//! answer and holds exactly the bytes that atom commits to (their BLAKE3 is the atom's blob
//! hash). The proof itself is checked first, by [`crate::proof::ProofFile::verify`]; this adds
//! only what the proof does not cover: the files beside it.

use crate::atom::{Atom, Payload};
use crate::proof::{Claim, Verified};

/// Why an evidence directory's payloads do not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EvidenceError {
    /// A file of `blobs/` whose name is not a log position.
    #[error("blobs/{0}: not named by a log position (a decimal number)")]
    BadName(String),
    /// A file for an atom the answer does not hold.
    #[error("blobs/{0}: the atom at position {0} is not in the answer the proof proves")]
    NotInAnswer(u64),
    /// A file for an atom of the answer that commits to no blob.
    #[error("blobs/{0}: the atom at position {0} commits to no blob")]
    NoBlob(u64),
    /// A file that is not the blob its atom commits to.
    #[error("blobs/{position}: not the bytes the atom commits to (BLAKE3 {found}, the atom says {expected})")]
    HashDiffers {
        /// The atom's log position.
        position: u64,
        /// The file's BLAKE3, hex.
        found: String,
        /// The atom's blob hash, hex.
        expected: String,
    },
    /// The proof is not of an answer (an inclusion or consistency proof, say).
    #[error("the proof proves no answer (a {0} proof): an evidence directory holds a range or list answer")]
    NotAnAnswer(&'static str),
}

impl EvidenceError {
    /// A stable code for scripts, as a proof's refusal has (docs/EVIDENCE.md).
    pub fn code(&self) -> &'static str {
        match self {
            EvidenceError::BadName(_) => "evidence_name",
            EvidenceError::NotInAnswer(_) => "evidence_not_in_answer",
            EvidenceError::NoBlob(_) => "evidence_no_blob",
            EvidenceError::HashDiffers { .. } => "evidence_hash",
            EvidenceError::NotAnAnswer(_) => "evidence_not_an_answer",
        }
    }
}

/// The answer's atoms of a verified proof.
pub fn answer_atoms(verified: &Verified) -> Result<&[(u64, Atom)], EvidenceError> {
    match &verified.claim {
        Claim::Range { atoms, .. } | Claim::List { atoms, .. } => Ok(atoms),
        other => Err(EvidenceError::NotAnAnswer(other.kind())),
    }
}

/// The atom a file of `blobs/` is for, by its name: its position and the blob it commits to
/// (whose `size` a reader compares with the file's before reading it).
pub fn blob_for<'a>(
    verified: &'a Verified,
    name: &str,
) -> Result<(u64, &'a crate::atom::BlobRef), EvidenceError> {
    let atoms = answer_atoms(verified)?;
    // Only digits: "+1", " 1" or "01" would name a position two ways.
    let position: u64 = match name.parse() {
        Ok(p) if name.bytes().all(|b| b.is_ascii_digit()) && (name == "0" || !name.starts_with('0')) => p,
        _ => return Err(EvidenceError::BadName(name.to_owned())),
    };
    let atom = atoms
        .binary_search_by_key(&position, |(p, _)| *p)
        .map(|i| &atoms[i].1)
        .map_err(|_| EvidenceError::NotInAnswer(position))?;
    match &atom.parts().payload {
        Payload::Blob(blob) => Ok((position, blob)),
        _ => Err(EvidenceError::NoBlob(position)),
    }
}

/// Check each `(file name, bytes)` of `blobs/` against the verified answer; returns how many
/// were checked.
pub fn check_blobs<'a>(
    verified: &Verified,
    blobs: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> Result<usize, EvidenceError> {
    answer_atoms(verified)?;
    let mut checked = 0;
    for (name, bytes) in blobs {
        let (position, blob) = blob_for(verified, name)?;
        let found = blake3::hash(bytes);
        if *found.as_bytes() != blob.hash {
            return Err(EvidenceError::HashDiffers {
                position,
                found: found.to_hex().to_string(),
                expected: hex::encode(blob.hash),
            });
        }
        checked += 1;
    }
    Ok(checked)
}
