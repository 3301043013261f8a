/// Why bytes or parts are not a valid atom. Every variant names the field at fault, in the
/// JSON form's spelling (`min`, `sources[3]`, `payload.blob.media_type`, …).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AtomError {
    /// A field breaks a rule of docs/ATOM.md ("Limits"), holds an unknown code, tag or flag or
    /// text that is not UTF-8, or (in the JSON form) is not a known name, hex or base64.
    #[error("{field}: {problem}")]
    Invalid {
        /// The field, in the JSON form's spelling (`max[1]`, `payload.blob.media_type`).
        field: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The encoding ends inside a field.
    #[error("{field}: the encoding ends early")]
    Truncated {
        /// The field being read when the bytes ran out.
        field: &'static str,
    },
    /// This many bytes follow the last field.
    #[error("{0} bytes follow the end of the atom")]
    TrailingBytes(usize),
    /// The encoding (this many bytes) is longer than
    /// [`MAX_ATOM_BYTES`](crate::atom::limits::MAX_ATOM_BYTES): refused unread.
    #[error("encoding is {0} bytes, more than any valid atom")]
    TooLong(usize),
    /// The first byte, the encoding version, is this value rather than 1 or 2.
    #[error("unknown encoding version {0}")]
    Version(u8),
}

impl AtomError {
    pub(crate) fn invalid(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self::Invalid { field: field.into(), problem: problem.into() }
    }
}
