//! Sealed payloads (docs/SEAL.md): per-leaf keys from a puncturable tree over an epoch's
//! seed, ChaCha20-Poly1305 under them with the atom's other fields as associated data, and
//! epoch seeds wrapped to members' X-Wing (ML-KEM-768 + X25519) keys. Forgetting a leaf is
//! puncturing the tree: no key left derives it, every other leaf still derives.

#![forbid(unsafe_code)]

mod cover;
pub mod record;
mod sealed;
mod store;
mod wrap;

pub use cover::{Cover, DEPTH, Node};
pub use sealed::{
    BlobParts, Codec, SEALED_MEDIA_TYPE, SealKind, Sealed, aad, bare_id, blob_parts, blob_plaintext,
    inline_payload, inline_plaintext, sealed_leaf, sealed_media_type, sub3, unsub3,
};
pub use store::KeyStore;
pub use wrap::{MAX_COVER_BYTES, MEMBER_PUBLIC_BYTES, MemberKey, Wrapped, WrappedLeaf, member_key_hash};

/// Why something would not seal, open, wrap or unwrap. Each names what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// The bytes are not the format they claim (which field, why).
    #[error("not a well-formed {what}: {problem}")]
    Format { what: &'static str, problem: String },
    /// The ciphertext does not open under this key and associated data: tampered with, moved
    /// to another atom, epoch or space, or the wrong key.
    #[error("the {what} does not open: tampered with, moved to another atom, or the wrong key")]
    Open { what: &'static str },
    /// The leaf's key was forgotten (its tree punctured), or never held here.
    #[error("leaf {leaf} of epoch {epoch}: its key is forgotten (or was never given here)")]
    Forgotten { epoch: u32, leaf: u32 },
    /// Sealed under another space or epoch than the key at hand.
    #[error("sealed under {found}, not {expected}")]
    OtherEpoch { found: String, expected: String },
    /// A member key that is not one.
    #[error("not a member key: {0}")]
    BadKey(String),
    /// The key store has no such epoch.
    #[error("epoch {epoch} was never begun here ({epochs} epochs so far)")]
    NoEpoch { epoch: u32, epochs: u32 },
    /// The key store's file could not be read or written (the OS's words).
    #[error("{what} {}: {message}", path.display())]
    Io { path: std::path::PathBuf, what: String, message: String },
}
