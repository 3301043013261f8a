//! Sealed bytes (docs/SEAL.md, "Sealed bytes"): "SIONSEAL", version, space, epoch, leaf, then
//! ChaCha20-Poly1305 under the leaf's key, the atom's other fields bound as associated data.

use chacha20poly1305::aead::{Aead as _, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, KeyInit as _, Nonce};
use sion_verify::atom::{Atom, AtomParts, Payload as AtomPayload};
use zeroize::Zeroize as _;

use crate::{Cover, SealError};

const MAGIC: &[u8; 8] = b"SIONSEAL";
const HEADER: usize = 8 + 1 + 32 + 4 + 4;

/// What a leaf's key seals: an atom's inline payload or a blob it commits to (each its own
/// derived key, so one leaf never seals two messages under one key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealKind {
    Payload,
    Blob,
}

impl SealKind {
    fn context(self) -> &'static str {
        match self {
            SealKind::Payload => "sion-seal-payload-v1",
            SealKind::Blob => "sion-seal-blob-v1",
        }
    }
}

/// The associated data: "sion-seal-aad-v1", space, epoch, leaf, and the id of the atom with
/// its payload removed — every field but the payload, so a ciphertext moved to another atom
/// does not open.
pub fn aad(space: &[u8; 32], epoch: u32, leaf: u32, atom: &AtomParts) -> Result<Vec<u8>, SealError> {
    let mut bare = atom.clone();
    bare.payload = AtomPayload::None;
    let id = Atom::new(bare).map_err(|e| SealError::Format { what: "atom", problem: e.to_string() })?.id();
    let mut out = Vec::with_capacity(16 + 32 + 8 + 32);
    out.extend_from_slice(b"sion-seal-aad-v1");
    out.extend_from_slice(space);
    out.extend_from_slice(&epoch.to_le_bytes());
    out.extend_from_slice(&leaf.to_le_bytes());
    out.extend_from_slice(&id.0);
    Ok(out)
}

/// Sealed bytes, parsed: where they were sealed, and the ciphertext with its tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    pub space: [u8; 32],
    pub epoch: u32,
    pub leaf: u32,
    pub ciphertext: Vec<u8>,
}

fn cipher(kind: SealKind, leaf_key: &[u8; 32]) -> ChaCha20Poly1305 {
    let mut key = blake3::derive_key(kind.context(), leaf_key);
    let c = ChaCha20Poly1305::new(&Key::from(key));
    key.zeroize();
    c
}

impl Sealed {
    /// Seal `plaintext` as leaf `leaf` of the cover's epoch in `space`, for the atom `atom`
    /// (its payload is ignored: it is to become these bytes).
    pub fn seal(
        kind: SealKind,
        space: &[u8; 32],
        cover: &Cover,
        leaf: u32,
        atom: &AtomParts,
        plaintext: &[u8],
    ) -> Result<Vec<u8>, SealError> {
        let mut key = cover.leaf_key(leaf)?;
        let c = cipher(kind, &key);
        key.zeroize();
        let aad = aad(space, cover.epoch, leaf, atom)?;
        // Each derived key seals one message: a fixed nonce is safe.
        let ct = c
            .encrypt(&Nonce::default(), Payload { msg: plaintext, aad: &aad })
            .map_err(|_| SealError::Format { what: "plaintext", problem: "too long to seal".into() })?;
        let mut out = Vec::with_capacity(HEADER + ct.len());
        out.extend_from_slice(MAGIC);
        out.push(1);
        out.extend_from_slice(space);
        out.extend_from_slice(&cover.epoch.to_le_bytes());
        out.extend_from_slice(&leaf.to_le_bytes());
        out.extend_from_slice(&ct);
        Ok(out)
    }

    /// Parse sealed bytes (nothing is opened yet).
    pub fn decode(bytes: &[u8]) -> Result<Self, SealError> {
        let bad = |problem: String| SealError::Format { what: "sealed payload", problem };
        if bytes.len() < HEADER + 16 {
            return Err(bad(format!(
                "{} bytes, shorter than a header and a tag ({})",
                bytes.len(),
                HEADER + 16
            )));
        }
        if &bytes[..8] != MAGIC {
            return Err(bad("no SIONSEAL header".into()));
        }
        if bytes[8] != 1 {
            return Err(bad(format!("version {}, not 1", bytes[8])));
        }
        let mut space = [0u8; 32];
        space.copy_from_slice(&bytes[9..41]);
        let epoch = u32::from_le_bytes([bytes[41], bytes[42], bytes[43], bytes[44]]);
        let leaf = u32::from_le_bytes([bytes[45], bytes[46], bytes[47], bytes[48]]);
        Ok(Self { space, epoch, leaf, ciphertext: bytes[HEADER..].to_vec() })
    }

    /// Open these bytes for the atom `atom` with the cover of their epoch.
    pub fn open(
        &self,
        kind: SealKind,
        space: &[u8; 32],
        cover: &Cover,
        atom: &AtomParts,
    ) -> Result<Vec<u8>, SealError> {
        if self.space != *space || self.epoch != cover.epoch {
            return Err(SealError::OtherEpoch {
                found: format!("space {}…, epoch {}", hex8(&self.space), self.epoch),
                expected: format!("space {}…, epoch {}", hex8(space), cover.epoch),
            });
        }
        let mut key = cover.leaf_key(self.leaf)?;
        let c = cipher(kind, &key);
        key.zeroize();
        let aad = aad(space, self.epoch, self.leaf, atom)?;
        c.decrypt(&Nonce::default(), Payload { msg: &self.ciphertext, aad: &aad })
            .map_err(|_| SealError::Open { what: "sealed payload" })
    }
}

fn hex8(b: &[u8; 32]) -> String {
    b[..4].iter().map(|x| format!("{x:02x}")).collect()
}
