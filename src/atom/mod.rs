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

    pub fn parts(&self) -> &AtomParts {
        &self.parts
    }

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

    pub fn kind(&self) -> Kind {
        self.parts.kind
    }
}
