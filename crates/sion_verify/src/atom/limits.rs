//! Validation limits (docs/ATOM.md, "Limits"). Every limit is inclusive.

/// Longest frame id, in bytes. Frame ids use `[A-Za-z0-9_./-]`, as ROS frame ids do.
pub const MAX_FRAME_BYTES: usize = 128;
/// Largest coordinate magnitude: 10^15 mm is 10^12 m, room for any frame a robot uses while
/// keeping box arithmetic (widths, sums of two coordinates) far from i64 overflow.
pub const MAX_COORD_MM: i64 = 1_000_000_000_000_000;
/// Confidence is in permille.
pub const MAX_CONFIDENCE_PERMILLE: u16 = 1000;
/// Longest subject, in bytes of UTF-8.
pub const MAX_SUBJECT_BYTES: usize = 256;
/// Most sources, evidence spans and links an atom may carry, each.
pub const MAX_REFERENCES: usize = 256;
/// Longest extractor model or code identity, in bytes of UTF-8.
pub const MAX_EXTRACTOR_BYTES: usize = 256;
/// Largest inline payload (text, public bytes or an encrypted blob). Larger data is kept
/// elsewhere and committed to with a blob reference.
pub const MAX_INLINE_PAYLOAD_BYTES: usize = 64 * 1024;
/// Longest media type of a blob reference.
pub const MAX_MEDIA_TYPE_BYTES: usize = 127;
/// Upper bound on any valid atom's encoding; a reader may refuse longer records unread.
pub const MAX_ATOM_BYTES: usize = 128 * 1024;
