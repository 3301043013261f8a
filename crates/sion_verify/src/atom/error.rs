/// Why bytes or parts are not a valid atom. Every variant names the field at fault, in the
/// JSON form's spelling (`min`, `sources[3]`, `payload.blob.media_type`, …).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AtomError {
    #[error("{field}: {problem}")]
    Invalid { field: String, problem: String },
    #[error("{field}: the encoding ends early")]
    Truncated { field: &'static str },
    #[error("{0} bytes follow the end of the atom")]
    TrailingBytes(usize),
    #[error("encoding is {0} bytes, more than any valid atom")]
    TooLong(usize),
    #[error("unknown encoding version {0}")]
    Version(u8),
}

impl AtomError {
    pub(crate) fn invalid(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self::Invalid { field: field.into(), problem: problem.into() }
    }
}
