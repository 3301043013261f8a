//! Memory atoms: what was observed or asserted, where (a box in a frame, millimetres), when it
//! held (valid time, nanoseconds), how sure the writer was (permille) and what it rests on.
//!
//! An [`Atom`] can only be built through validation ([`Atom::new`], [`Atom::decode`] or the
//! JSON form), so holding one means it is valid and its canonical bytes and id are known.
//! The encoding is specified in `docs/ATOM.md`; this module implements it.

mod codec;
mod error;
mod json;
pub mod limits;
mod types;
mod validate;

pub use error::AtomError;
pub use json::{AtomJson, JsonError};
pub use types::{
    AtomId, AtomParts, BlobRef, BoxMm, Evidence, Extractor, Interval, Kind, Link, LinkRel, Payload, Permille,
};

/// Check a frame name as an atom's (docs/ATOM.md, "Limits"): 1 to 128 bytes of
/// `[A-Za-z0-9_./-]`. Queries name frames by the same rule.
pub fn check_frame(frame: &str) -> Result<(), AtomError> {
    validate::check_frame(frame)
}

/// Check a subject as an atom's (docs/ATOM.md, "Limits"): at most 256 bytes of UTF-8 with no
/// control character (Unicode general category Cc: U+0000–U+001F and U+007F–U+009F).
pub fn check_subject(subject: &str) -> Result<(), AtomError> {
    validate::check_text("subject", subject, limits::MAX_SUBJECT_BYTES)
}

/// A valid atom with its canonical encoding and id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Atom {
    parts: AtomParts,
    bytes: Box<[u8]>,
    id: AtomId,
}

impl Atom {
    /// Validate the parts and encode them canonically.
    pub fn new(parts: AtomParts) -> Result<Self, AtomError> {
        validate::check(&parts)?;
        let bytes = codec::encode(&parts).into_boxed_slice();
        let id = AtomId::of_encoding(&bytes);
        Ok(Self { parts, bytes, id })
    }

    /// Parse canonical bytes; anything but a valid atom's exact encoding is an error.
    pub fn decode(bytes: &[u8]) -> Result<Self, AtomError> {
        Self::decode_owned(bytes.to_vec())
    }

    /// [`Atom::decode`] keeping the buffer it was read into, rather than a copy.
    pub fn decode_owned(bytes: Vec<u8>) -> Result<Self, AtomError> {
        let parts = codec::decode(&bytes)?;
        validate::check(&parts)?;
        let id = AtomId::of_encoding(&bytes);
        Ok(Self { parts, bytes: bytes.into_boxed_slice(), id })
    }

    /// The frame and box of an atom's canonical encoding, read from its first fields alone:
    /// nothing after them is checked (for bytes a log took as a valid atom already).
    pub fn placement(bytes: &[u8]) -> Result<(String, BoxMm), AtomError> {
        codec::placement(bytes)
    }

    /// What the atom says.
    pub fn parts(&self) -> &AtomParts {
        &self.parts
    }

    /// The parts, dropping the encoding and id (to change them and build a new atom).
    pub fn into_parts(self) -> AtomParts {
        self.parts
    }

    /// The canonical encoding (docs/ATOM.md).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// BLAKE3 of the canonical encoding.
    pub fn id(&self) -> AtomId {
        self.id
    }

    /// The atom's kind.
    pub fn kind(&self) -> Kind {
        self.parts.kind
    }
}
