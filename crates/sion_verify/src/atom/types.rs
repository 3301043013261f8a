//! The parts of an atom. Units are in the names: millimetres (`_mm`), nanoseconds (`_ns`),
//! permille.

use std::fmt;
use std::str::FromStr;

/// BLAKE3 of an atom's canonical encoding.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AtomId(pub [u8; 32]);

impl AtomId {
    /// BLAKE3 of `bytes`, taken to be a canonical encoding (they are not checked).
    pub fn of_encoding(bytes: &[u8]) -> Self {
        Self(*blake3::hash(bytes).as_bytes())
    }

    /// The 32 bytes, as leaves and index entries hash them.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for AtomId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for AtomId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AtomId({self})")
    }
}

/// In JSON (belief outputs, policies): 64 lowercase hex digits.
impl serde::Serialize for AtomId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(self.0))
    }
}

impl<'de> serde::Deserialize<'de> for AtomId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <String as serde::Deserialize>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// An atom id as 64 lowercase or uppercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an atom id is 64 hex digits")]
pub struct BadAtomId;

impl FromStr for AtomId {
    type Err = BadAtomId;

    fn from_str(s: &str) -> Result<Self, BadAtomId> {
        let mut id = [0u8; 32];
        hex::decode_to_slice(s, &mut id).map_err(|_| BadAtomId)?;
        Ok(Self(id))
    }
}

macro_rules! named_codes {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $code:literal, $text:literal;)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $(#[doc = concat!("`", $text, "`, code ", stringify!($code), ".")] $variant,)* }

        impl $name {
            /// Every value, in code order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The byte that stands for this value in the canonical encoding.
            pub fn code(self) -> u8 {
                match self { $($name::$variant => $code,)* }
            }

            /// The value a code of the canonical encoding stands for; `None` if it is unknown.
            pub fn from_code(code: u8) -> Option<Self> {
                match code { $($code => Some($name::$variant),)* _ => None }
            }

            /// The name used in the JSON form.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text,)* }
            }

            /// The value of a JSON-form name; `None` if it is unknown.
            pub fn from_name(name: &str) -> Option<Self> {
                match name { $($text => Some($name::$variant),)* _ => None }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

named_codes! {
    /// The seventeen kinds: the ten agent memory kinds, then the robot kinds.
    ///
    /// As the ROS node writes robot kinds (docs/ROS.md): a `pose` is a robot's position (a
    /// point) at an instant, a `transform` a child frame's origin in its parent frame, a
    /// `map_tile` the box of a map's grid (its payload a blob reference) and an `observation`
    /// the box a camera frame saw. The brain derives `trajectory` and `coverage` atoms from
    /// poses and observations per time window (docs/BRAIN.md). A `revision` has at least one
    /// link and one state, and a `conflict` at least two `contradicts` links (docs/ATOM.md,
    /// "Limits", "Revisions").
    Kind {
        Claim = 0, "claim";
        Episode = 1, "episode";
        Action = 2, "action";
        Outcome = 3, "outcome";
        Goal = 4, "goal";
        Plan = 5, "plan";
        Note = 6, "note";
        Preference = 7, "preference";
        Revision = 8, "revision";
        Conflict = 9, "conflict";
        Observation = 10, "observation";
        Coverage = 11, "coverage";
        MapTile = 12, "map_tile";
        Pose = 13, "pose";
        Trajectory = 14, "trajectory";
        Transform = 15, "transform";
        Skill = 16, "skill";
    }
}

named_codes! {
    /// How an atom relates to another.
    LinkRel {
        Supersedes = 0, "supersedes";
        Contradicts = 1, "contradicts";
        Supports = 2, "supports";
        DerivedFrom = 3, "derived_from";
        Accepts = 4, "accepts";
        Disputes = 5, "disputes";
        Retracts = 6, "retracts";
        Refutes = 7, "refutes";
    }
}

impl LinkRel {
    /// A revision's state carried by this relation, if it is one (docs/ATOM.md,
    /// "Revisions"): `supersedes`, `accepts`, `disputes`, `retracts`, `refutes`.
    pub fn is_state(self) -> bool {
        matches!(self, Self::Supersedes | Self::Accepts | Self::Disputes | Self::Retracts | Self::Refutes)
    }

    /// Relations that need encoding version 2 (codes 4 to 7; a revision's states other than
    /// `supersedes`): only a revision carries them.
    pub fn needs_version_2(self) -> bool {
        self.code() >= 4
    }
}

/// An axis-aligned box in a frame, corners included, in millimetres.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BoxMm {
    /// Minimum corner, x, y, z in mm.
    pub min_mm: [i64; 3],
    /// Maximum corner, x, y, z in mm; `min_mm[i] <= max_mm[i]` in a valid atom.
    pub max_mm: [i64; 3],
}

impl BoxMm {
    /// A box holding one point.
    pub fn point(p_mm: [i64; 3]) -> Self {
        Self { min_mm: p_mm, max_mm: p_mm }
    }
}

/// Valid time `[from_ns, to_ns)`, nanoseconds since the Unix epoch (or since a simulation's
/// start). `to_ns == i64::MAX` means "until further notice".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Interval {
    /// Start, included; at least 0 in a valid atom.
    pub from_ns: i64,
    /// End, excluded; above `from_ns` in a valid atom.
    pub to_ns: i64,
}

impl Interval {
    /// The `to_ns` of a statement that holds until further notice.
    pub const OPEN_END_NS: i64 = i64::MAX;
}

/// Confidence in permille, 0..=1000.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Permille(pub u16);

/// A span of a source's payload that supports the atom: bytes `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Evidence {
    /// The atom whose payload the span is in.
    pub source: AtomId,
    /// First byte of the span.
    pub start: u64,
    /// End of the span, excluded; `start <= end`.
    pub end: u64,
}

/// The model and the code that extracted an atom (for example `yolov8n@sha256:…` and
/// `sion_memory 0.1.0`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Extractor {
    /// The model's identity: at most 256 bytes, no control characters; may be empty.
    pub model: String,
    /// The code's identity, by the same rules; not empty if `model` is.
    pub code: String,
}

/// A relation to another atom. An atom carries no `(rel, target)` pair twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Link {
    /// How this atom relates to the target.
    pub rel: LinkRel,
    /// The atom related to.
    pub target: AtomId,
}

/// A commitment to a blob kept elsewhere (a map tile, a camera frame): BLAKE3 of its bytes,
/// its length and its media type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BlobRef {
    /// BLAKE3 of the blob's bytes.
    pub hash: [u8; 32],
    /// The blob's length in bytes.
    pub size: u64,
    /// At most 127 bytes of docs/ATOM.md's media type grammar (`image/jpeg`,
    /// `application/cdr; type=sensor_msgs/msg/Image`), compared bytewise.
    pub media_type: String,
}

/// The data an atom carries. Inline payloads (text, public, encrypted) are at most 65,536 bytes;
/// larger data is kept elsewhere and committed to by a [`BlobRef`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Payload {
    /// No payload.
    #[default]
    None,
    /// Public UTF-8 text.
    Text(String),
    /// Public bytes.
    Public(Vec<u8>),
    /// A blob encrypted to the members of a memory space (format defined by sealing).
    Encrypted(Vec<u8>),
    /// A commitment to a blob kept elsewhere.
    Blob(BlobRef),
}

/// Everything an atom says, before validation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AtomParts {
    /// What sort of statement the atom is.
    pub kind: Kind,
    /// The frame `bounds` is in: 1 to 128 bytes of `[A-Za-z0-9_./-]`.
    pub frame: String,
    /// Where, in `frame`; each coordinate within ±10^15 mm.
    pub bounds: BoxMm,
    /// When the statement held.
    pub valid: Interval,
    /// How sure the writer was, at most 1000 permille.
    pub confidence: Permille,
    /// What the atom is about (`pallet-17`): at most 256 bytes, no control characters; may be
    /// empty.
    pub subject: String,
    /// The atoms it rests on: at most 256, none repeated.
    pub sources: Vec<AtomId>,
    /// Spans of sources' payloads that support it: at most 256.
    pub evidence: Vec<Evidence>,
    /// The model and code that produced it, if recorded.
    pub extractor: Option<Extractor>,
    /// Relations to other atoms: at most 256, none repeated.
    pub links: Vec<Link>,
    /// The data it carries.
    pub payload: Payload,
}

impl AtomParts {
    /// The required parts; everything else empty.
    pub fn new(kind: Kind, frame: &str, bounds: BoxMm, valid: Interval, confidence: Permille) -> Self {
        Self {
            kind,
            frame: frame.to_owned(),
            bounds,
            valid,
            confidence,
            subject: String::new(),
            sources: Vec::new(),
            evidence: Vec::new(),
            extractor: None,
            links: Vec::new(),
            payload: Payload::None,
        }
    }
}
