//! The JSON form users write, one atom per line (docs/ATOM.md, "JSON form"):
//!
//! ```json
//! {"kind":"observation","frame":"map","min":[0,0,0],"max":[500,500,1200],"from":0,"to":1000,"confidence":900,"subject":"pallet-17"}
//! ```
//!
//! Optional: `subject`, `sources`, `evidence`, `extractor`, `links`, `payload`. Output adds
//! `id` and, once the atom is in a log, `position`. On input an `id` must match the content
//! and a `position` is ignored, so output lines can be fed back in.

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::{
    Atom, AtomError, AtomId, AtomParts, BlobRef, BoxMm, Evidence, Extractor, Interval, Kind, Link, LinkRel,
    Payload, Permille,
};

/// One line of the JSON form as serde reads and writes it: ids and hashes as hex, byte payloads
/// as base64, unknown fields refused, empty optional fields left out of the output. Not yet
/// validated: [`AtomJson::to_parts`] and [`Atom::new`] make it an atom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AtomJson {
    /// The atom id, 64 hex digits: always written; on input, if given, it must match the content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The atom's position in its log, when printed from one; ignored on input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u64>,
    /// The kind's name (`observation`, `map_tile`, …).
    pub kind: String,
    /// The frame the box is in.
    pub frame: String,
    /// The box's minimum corner, x, y, z in mm.
    pub min: [i64; 3],
    /// The box's maximum corner, x, y, z in mm.
    pub max: [i64; 3],
    /// Start of valid time, ns, included.
    pub from: i64,
    /// End of valid time, ns, excluded (`9223372036854775807`: until further notice).
    pub to: i64,
    /// Confidence in permille, 0 to 1000.
    pub confidence: u16,
    /// What the atom is about; may be empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subject: String,
    /// Ids of the atoms it rests on, 64 hex digits each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    /// Spans of sources' payloads that support it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<EvidenceJson>,
    /// The model and code that produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extractor: Option<ExtractorJson>,
    /// Its relations to other atoms.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkJson>,
    /// One of `text`, `public`, `encrypted` (base64) or `blob`; absent for no payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<PayloadJson>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceJson {
    pub source: String,
    pub start: u64,
    pub end: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtractorJson {
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub code: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkJson {
    pub rel: String,
    pub target: String,
}

/// Byte payloads are standard base64 with padding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum PayloadJson {
    Text(String),
    Public(String),
    Encrypted(String),
    Blob(BlobJson),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlobJson {
    pub hash: String,
    pub size: u64,
    pub media_type: String,
}

/// Why a line is not an atom in the JSON form.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JsonError {
    /// The line is not JSON, or not an object of the form's fields and types (an unknown field,
    /// a missing required one, a number that is not an integer in range).
    #[error("not an atom in JSON form: {0}")]
    Syntax(#[from] serde_json::Error),
    /// The fields do not make a valid atom.
    #[error(transparent)]
    Atom(#[from] AtomError),
    /// The line's `id` is not the id of its content (or not an id at all).
    #[error("id: {given} does not match the content, whose id is {computed}")]
    IdMismatch {
        /// The `id` as the line gives it.
        given: String,
        /// The id of the content.
        computed: AtomId,
    },
}

fn id(field: impl FnOnce() -> String, hex: &str) -> Result<AtomId, AtomError> {
    hex.parse().map_err(|_| AtomError::invalid(field(), format!("{hex:?} is not 64 hex digits")))
}

fn base64(field: &str, text: &str) -> Result<Vec<u8>, AtomError> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| AtomError::invalid(field, format!("is not standard padded base64: {e}")))
}

fn encode_base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

impl AtomJson {
    /// Convert to parts; the result still needs [`Atom::new`] to be valid.
    pub fn to_parts(&self) -> Result<AtomParts, AtomError> {
        let kind = Kind::from_name(&self.kind).ok_or_else(|| {
            let names: Vec<_> = Kind::ALL.iter().map(|k| k.as_str()).collect();
            AtomError::invalid("kind", format!("{:?} is not one of {}", self.kind, names.join(", ")))
        })?;
        let sources = self
            .sources
            .iter()
            .enumerate()
            .map(|(i, s)| id(|| format!("sources[{i}]"), s))
            .collect::<Result<_, _>>()?;
        let evidence = self
            .evidence
            .iter()
            .enumerate()
            .map(|(i, e)| {
                Ok(Evidence {
                    source: id(|| format!("evidence[{i}].source"), &e.source)?,
                    start: e.start,
                    end: e.end,
                })
            })
            .collect::<Result<_, AtomError>>()?;
        let links = self
            .links
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let rel = LinkRel::from_name(&l.rel).ok_or_else(|| {
                    AtomError::invalid(
                        format!("links[{i}].rel"),
                        format!("{:?} is not one of supersedes, contradicts, supports, derived_from", l.rel),
                    )
                })?;
                Ok(Link { rel, target: id(|| format!("links[{i}].target"), &l.target)? })
            })
            .collect::<Result<_, AtomError>>()?;
        let payload = match &self.payload {
            None => Payload::None,
            Some(PayloadJson::Text(t)) => Payload::Text(t.clone()),
            Some(PayloadJson::Public(b)) => Payload::Public(base64("payload.public", b)?),
            Some(PayloadJson::Encrypted(b)) => Payload::Encrypted(base64("payload.encrypted", b)?),
            Some(PayloadJson::Blob(b)) => {
                let mut hash = [0u8; 32];
                hex::decode_to_slice(&b.hash, &mut hash)
                    .map_err(|_| AtomError::invalid("payload.blob.hash", "is not 64 hex digits"))?;
                Payload::Blob(BlobRef { hash, size: b.size, media_type: b.media_type.clone() })
            }
        };
        Ok(AtomParts {
            kind,
            frame: self.frame.clone(),
            bounds: BoxMm { min_mm: self.min, max_mm: self.max },
            valid: Interval { from_ns: self.from, to_ns: self.to },
            confidence: Permille(self.confidence),
            subject: self.subject.clone(),
            sources,
            evidence,
            extractor: self
                .extractor
                .as_ref()
                .map(|x| Extractor { model: x.model.clone(), code: x.code.clone() }),
            links,
            payload,
        })
    }
}

impl Atom {
    /// Parse one line of the JSON form. A given `id` must match; `position` is ignored.
    pub fn from_json(line: &str) -> Result<Self, JsonError> {
        let json: AtomJson = serde_json::from_str(line)?;
        let atom = Atom::new(json.to_parts()?)?;
        if let Some(given) = json.id
            && given.parse::<AtomId>().ok() != Some(atom.id())
        {
            return Err(JsonError::IdMismatch { given, computed: atom.id() });
        }
        Ok(atom)
    }

    /// The JSON form, with the id and, if given, the atom's position in its log.
    pub fn to_json(&self, position: Option<u64>) -> AtomJson {
        let p = &self.parts;
        AtomJson {
            id: Some(self.id.to_string()),
            position,
            kind: p.kind.as_str().to_owned(),
            frame: p.frame.clone(),
            min: p.bounds.min_mm,
            max: p.bounds.max_mm,
            from: p.valid.from_ns,
            to: p.valid.to_ns,
            confidence: p.confidence.0,
            subject: p.subject.clone(),
            sources: p.sources.iter().map(AtomId::to_string).collect(),
            evidence: p
                .evidence
                .iter()
                .map(|e| EvidenceJson { source: e.source.to_string(), start: e.start, end: e.end })
                .collect(),
            extractor: p
                .extractor
                .as_ref()
                .map(|x| ExtractorJson { model: x.model.clone(), code: x.code.clone() }),
            links: p
                .links
                .iter()
                .map(|l| LinkJson { rel: l.rel.as_str().to_owned(), target: l.target.to_string() })
                .collect(),
            payload: match &p.payload {
                Payload::None => None,
                Payload::Text(t) => Some(PayloadJson::Text(t.clone())),
                Payload::Public(b) => Some(PayloadJson::Public(encode_base64(b))),
                Payload::Encrypted(b) => Some(PayloadJson::Encrypted(encode_base64(b))),
                Payload::Blob(b) => Some(PayloadJson::Blob(BlobJson {
                    hash: hex::encode(b.hash),
                    size: b.size,
                    media_type: b.media_type.clone(),
                })),
            },
        }
    }

    /// One line of the JSON form.
    pub fn to_json_line(&self, position: Option<u64>) -> String {
        // Serializing plain strings and integers cannot fail.
        serde_json::to_string(&self.to_json(position)).unwrap_or_default()
    }
}
