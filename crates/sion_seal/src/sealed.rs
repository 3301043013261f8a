//! Sealed bytes (docs/SEAL.md, "Sealed bytes"): "SIONSEAL", version, space, epoch, leaf, then
//! ChaCha20-Poly1305 under the leaf's key, the atom's other fields bound as associated data.

use chacha20poly1305::aead::{Aead as _, AeadInOut as _, Payload};
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

/// The id of the atom with its payload removed (tag 0): what binds a sealed payload to every
/// other field of its atom.
pub fn bare_id(atom: &AtomParts) -> Result<[u8; 32], SealError> {
    let mut bare = atom.clone();
    bare.payload = AtomPayload::None;
    Ok(Atom::new(bare).map_err(|e| SealError::Format { what: "atom", problem: e.to_string() })?.id().0)
}

/// The associated data: "sion-seal-aad-v1", space, epoch, leaf, and the id of the atom with
/// its payload removed — every field but the payload, so a ciphertext moved to another atom
/// does not open.
pub fn aad(space: &[u8; 32], epoch: u32, leaf: u32, atom: &AtomParts) -> Result<Vec<u8>, SealError> {
    let id = bare_id(atom)?;
    let mut out = Vec::with_capacity(16 + 32 + 8 + 32);
    out.extend_from_slice(b"sion-seal-aad-v1");
    out.extend_from_slice(space);
    out.extend_from_slice(&epoch.to_le_bytes());
    out.extend_from_slice(&leaf.to_le_bytes());
    out.extend_from_slice(&id);
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
        let mut out = Vec::with_capacity(HEADER + plaintext.len() + 16);
        out.extend_from_slice(MAGIC);
        out.push(1);
        out.extend_from_slice(space);
        out.extend_from_slice(&cover.epoch.to_le_bytes());
        out.extend_from_slice(&leaf.to_le_bytes());
        out.extend_from_slice(plaintext);
        // In place, behind the header: one copy of a frame, not two. Each derived key seals one
        // message: a fixed nonce is safe.
        let tag = c
            .encrypt_inout_detached(&Nonce::default(), &aad, (&mut out[HEADER..]).into())
            .map_err(|_| SealError::Format { what: "plaintext", problem: "too long to seal".into() })?;
        out.extend_from_slice(&tag);
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
        let opened = self.open_with_key(kind, &key, atom);
        key.zeroize();
        opened
    }

    /// Open these bytes for the atom `atom` with their leaf's key (as a member gets it from the
    /// payload service).
    pub fn open_with_key(
        &self,
        kind: SealKind,
        leaf_key: &[u8; 32],
        atom: &AtomParts,
    ) -> Result<Vec<u8>, SealError> {
        let c = cipher(kind, leaf_key);
        let aad = aad(&self.space, self.epoch, self.leaf, atom)?;
        c.decrypt(&Nonce::default(), Payload { msg: &self.ciphertext, aad: &aad })
            .map_err(|_| SealError::Open { what: "sealed payload" })
    }
}

/// What an inline payload holds before it is sealed: `u8` 1 and UTF-8 text, or `u8` 2 and
/// bytes — the payload it stands for, so opening gives back the same kind.
pub fn inline_plaintext(payload: &AtomPayload) -> Result<Vec<u8>, SealError> {
    let (tag, bytes) = match payload {
        AtomPayload::Text(t) => (1u8, t.as_bytes()),
        AtomPayload::Public(b) => (2u8, b.as_slice()),
        other => {
            return Err(SealError::Format {
                what: "payload to seal",
                problem: format!("{} (only text or bytes are sealed inline)", payload_kind(other)),
            });
        }
    };
    let mut out = Vec::with_capacity(1 + bytes.len());
    out.push(tag);
    out.extend_from_slice(bytes);
    Ok(out)
}

/// The payload an opened inline plaintext stands for.
pub fn inline_payload(plain: &[u8]) -> Result<AtomPayload, SealError> {
    let bad = |problem: &str| SealError::Format { what: "opened payload", problem: problem.into() };
    match plain.split_first() {
        Some((1, text)) => Ok(AtomPayload::Text(
            String::from_utf8(text.to_vec()).map_err(|_| bad("text that is not UTF-8"))?,
        )),
        Some((2, bytes)) => Ok(AtomPayload::Public(bytes.to_vec())),
        Some((t, _)) => Err(bad(&format!("kind {t}, not 1 (text) or 2 (bytes)"))),
        None => Err(bad("empty")),
    }
}

fn payload_kind(p: &AtomPayload) -> &'static str {
    match p {
        AtomPayload::None => "no payload",
        AtomPayload::Text(_) => "text",
        AtomPayload::Public(_) => "bytes",
        AtomPayload::Encrypted(_) => "an already sealed payload",
        AtomPayload::Blob(_) => "a blob reference",
    }
}

/// The media type of a sealed blob in its atom: what it was is inside the seal. It names the
/// epoch and leaf that sealed it (`application/x-sion-sealed; epoch=E; leaf=L`), which the
/// sealed bytes' header says too: a reader, and retention, know which key opens a blob from
/// its atom alone.
pub const SEALED_MEDIA_TYPE: &str = "application/x-sion-sealed";

/// The media type of a blob sealed by leaf `leaf` of `epoch`.
pub fn sealed_media_type(epoch: u32, leaf: u32) -> String {
    format!("{SEALED_MEDIA_TYPE}; epoch={epoch}; leaf={leaf}")
}

/// Whether a media type is a sealed blob's, and if it names them, its epoch and leaf.
pub fn sealed_leaf(media_type: &str) -> Option<Option<(u32, u32)>> {
    let rest = media_type.strip_prefix(SEALED_MEDIA_TYPE)?;
    if rest.is_empty() {
        return Some(None);
    }
    let rest = rest.strip_prefix("; epoch=")?;
    let (epoch, leaf) = rest.split_once("; leaf=")?;
    Some(epoch.parse().ok().zip(leaf.parse().ok()))
}

/// How a sealed blob's content was compressed before sealing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// As published.
    None,
    /// zstd (RFC 8878), one frame.
    Zstd,
    /// Each byte less the byte three before it (mod 256; the first three as they are: PNG's
    /// Sub filter for 3-byte pixels), then zstd: raw rgb8/bgr8 images.
    Sub3Zstd,
}

/// The Sub filter at a stride of 3: `out[i] = b[i] - b[i-3]` (mod 256).
pub fn sub3(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    out.extend(bytes.iter().take(3));
    out.extend(bytes.iter().skip(3).zip(bytes.iter()).map(|(b, a)| b.wrapping_sub(*a)));
    out
}

/// Undo [`sub3`], in place.
pub fn unsub3(bytes: &mut [u8]) {
    for i in 3..bytes.len() {
        bytes[i] = bytes[i].wrapping_add(bytes[i - 3]);
    }
}

/// What a blob holds before it is sealed: `u8` codec (0 none, 1 zstd, 2 Sub3 + zstd), `str8` the blob's own
/// media type, 32 BLAKE3 of the blob as it was given (so the opened content is checked to be
/// exactly it), then its bytes under that codec.
pub fn blob_plaintext(
    codec: Codec,
    media_type: &str,
    given: &[u8],
    content: &[u8],
) -> Result<Vec<u8>, SealError> {
    let mt = media_type.as_bytes();
    if mt.len() > 255 {
        return Err(SealError::Format {
            what: "blob to seal",
            problem: "a media type over 255 bytes".into(),
        });
    }
    let mut out = Vec::with_capacity(2 + mt.len() + 32 + content.len());
    out.push(match codec {
        Codec::None => 0,
        Codec::Zstd => 1,
        Codec::Sub3Zstd => 2,
    });
    out.push(mt.len() as u8);
    out.extend_from_slice(mt);
    out.extend_from_slice(blake3::hash(given).as_bytes());
    out.extend_from_slice(content);
    Ok(out)
}

/// An opened blob's parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobParts<'a> {
    pub codec: Codec,
    /// The blob's own media type.
    pub media_type: &'a str,
    /// BLAKE3 of the blob as it was given.
    pub given: [u8; 32],
    /// The blob, still under its codec.
    pub content: &'a [u8],
}

/// Read an opened blob's parts.
pub fn blob_parts(plain: &[u8]) -> Result<BlobParts<'_>, SealError> {
    let bad = |problem: String| SealError::Format { what: "opened blob", problem };
    let [codec, n, rest @ ..] = plain else { return Err(bad("shorter than its header".into())) };
    let codec = match codec {
        0 => Codec::None,
        1 => Codec::Zstd,
        2 => Codec::Sub3Zstd,
        c => return Err(bad(format!("codec {c}, not 0 (none), 1 (zstd) or 2 (Sub filter and zstd)"))),
    };
    let n = usize::from(*n);
    if rest.len() < n + 32 {
        return Err(bad("its media type and hash run past its end".into()));
    }
    let mt = std::str::from_utf8(&rest[..n]).map_err(|_| bad("a media type that is not UTF-8".into()))?;
    let mut hash = [0u8; 32];
    hash.copy_from_slice(&rest[n..n + 32]);
    Ok(BlobParts { codec, media_type: mt, given: hash, content: &rest[n + 32..] })
}

fn hex8(b: &[u8; 32]) -> String {
    b[..4].iter().map(|x| format!("{x:02x}")).collect()
}
