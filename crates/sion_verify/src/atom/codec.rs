//! The canonical binary encoding (docs/ATOM.md, "Encoding"): fixed-width little-endian
//! integers and length-prefixed strings, in a fixed field order. Every valid atom has exactly
//! one encoding, so its id is well defined.

use super::limits::{MAX_ATOM_BYTES, MAX_INLINE_PAYLOAD_BYTES};
use super::{
    AtomError, AtomId, AtomParts, BlobRef, BoxMm, Evidence, Extractor, Interval, Kind, Link, LinkRel,
    Payload, Permille,
};
use crate::wire::{Put as _, Reader, WireError};

pub(super) const VERSION: u8 = 1;
/// The version of an atom that carries a revision state other than `supersedes` (link codes 4
/// to 7): every other atom keeps version 1, so logs written before it keep their bytes, ids and
/// roots (docs/ATOM.md, "Encoding").
pub(super) const VERSION_STATES: u8 = 2;

/// The one version an atom with these links is encoded with.
pub(super) fn version_of(links: &[Link]) -> u8 {
    if links.iter().any(|l| l.rel.needs_version_2()) { VERSION_STATES } else { VERSION }
}

mod tag {
    pub const NONE: u8 = 0;
    pub const TEXT: u8 = 1;
    pub const PUBLIC: u8 = 2;
    pub const ENCRYPTED: u8 = 3;
    pub const BLOB: u8 = 4;
}

impl From<WireError> for AtomError {
    fn from(e: WireError) -> Self {
        match e {
            WireError::Truncated(field) => AtomError::Truncated { field },
            WireError::Utf8(field) => AtomError::invalid(field, "is not UTF-8"),
            WireError::Invalid { field, problem } => AtomError::invalid(field, problem),
            WireError::Trailing(n) => AtomError::TrailingBytes(n),
        }
    }
}

/// Encode parts that passed validation (so every length fits its prefix).
pub(super) fn encode(p: &AtomParts) -> Vec<u8> {
    let mut out = Vec::with_capacity(160 + p.subject.len());
    out.put_u8(version_of(&p.links));
    out.put_u8(p.kind.code());
    out.put_str8(&p.frame);
    for v in p.bounds.min_mm.iter().chain(&p.bounds.max_mm) {
        out.put_i64(*v);
    }
    out.put_i64(p.valid.from_ns);
    out.put_i64(p.valid.to_ns);
    out.put_u16(p.confidence.0);
    out.put_str16(&p.subject);
    out.put_u16(p.sources.len() as u16);
    for s in &p.sources {
        out.put_bytes(&s.0);
    }
    out.put_u16(p.evidence.len() as u16);
    for e in &p.evidence {
        out.put_bytes(&e.source.0);
        out.put_u64(e.start);
        out.put_u64(e.end);
    }
    match &p.extractor {
        None => out.put_u8(0),
        Some(x) => {
            out.put_u8(1);
            out.put_str16(&x.model);
            out.put_str16(&x.code);
        }
    }
    out.put_u16(p.links.len() as u16);
    for l in &p.links {
        out.put_u8(l.rel.code());
        out.put_bytes(&l.target.0);
    }
    match &p.payload {
        Payload::None => out.put_u8(tag::NONE),
        Payload::Text(t) => {
            out.put_u8(tag::TEXT);
            out.put_bytes32(t.as_bytes());
        }
        Payload::Public(b) => {
            out.put_u8(tag::PUBLIC);
            out.put_bytes32(b);
        }
        Payload::Encrypted(b) => {
            out.put_u8(tag::ENCRYPTED);
            out.put_bytes32(b);
        }
        Payload::Blob(blob) => {
            out.put_u8(tag::BLOB);
            out.put_bytes(&blob.hash);
            out.put_u64(blob.size);
            out.put_str8(&blob.media_type);
        }
    }
    out
}

/// An encoding's frame and box alone (its first fields), for a reader that needs to know only
/// where an atom is; nothing after them is read or checked.
pub(super) fn placement(bytes: &[u8]) -> Result<(String, BoxMm), AtomError> {
    if bytes.len() > MAX_ATOM_BYTES {
        return Err(AtomError::TooLong(bytes.len()));
    }
    let mut r = Reader::new(bytes);
    let version = r.u8("version")?;
    if version != VERSION && version != VERSION_STATES {
        return Err(AtomError::Version(version));
    }
    r.u8("kind")?;
    let frame = r.str8("frame")?;
    let mut bounds = BoxMm { min_mm: [0; 3], max_mm: [0; 3] };
    for v in bounds.min_mm.iter_mut().chain(bounds.max_mm.iter_mut()) {
        *v = r.i64("bounds")?;
    }
    Ok((frame, bounds))
}

pub(super) fn decode(bytes: &[u8]) -> Result<AtomParts, AtomError> {
    if bytes.len() > MAX_ATOM_BYTES {
        return Err(AtomError::TooLong(bytes.len()));
    }
    let mut r = Reader::new(bytes);
    let version = r.u8("version")?;
    if version != VERSION && version != VERSION_STATES {
        return Err(AtomError::Version(version));
    }
    let code = r.u8("kind")?;
    let kind =
        Kind::from_code(code).ok_or_else(|| AtomError::invalid("kind", format!("unknown code {code}")))?;
    let frame = r.str8("frame")?;
    let mut bounds = BoxMm { min_mm: [0; 3], max_mm: [0; 3] };
    for v in bounds.min_mm.iter_mut() {
        *v = r.i64("min")?;
    }
    for v in bounds.max_mm.iter_mut() {
        *v = r.i64("max")?;
    }
    let valid = Interval { from_ns: r.i64("from")?, to_ns: r.i64("to")? };
    let confidence = Permille(r.u16("confidence")?);
    let subject = r.str16("subject")?;
    let sources = r.list16("sources", |r| Ok(AtomId(r.array("sources")?)))?;
    let evidence = r.list16("evidence", |r| {
        Ok(Evidence {
            source: AtomId(r.array("evidence")?),
            start: r.u64("evidence")?,
            end: r.u64("evidence")?,
        })
    })?;
    let extractor = match r.flag("extractor")? {
        false => None,
        true => Some(Extractor { model: r.str16("extractor.model")?, code: r.str16("extractor.code")? }),
    };
    let links = r.list16("links", |r| {
        let code = r.u8("links")?;
        let rel = LinkRel::from_code(code).ok_or_else(|| WireError::Invalid {
            field: "links",
            problem: format!("unknown relation code {code}"),
        })?;
        Ok(Link { rel, target: AtomId(r.array("links")?) })
    })?;
    // One encoding per atom: version 2 exactly when a link needs it.
    if version != version_of(&links) {
        return Err(AtomError::invalid(
            "version",
            if version == VERSION_STATES {
                "is 2, but no link is a revision state of version 2 (accepts, disputes, retracts, refutes)"
            } else {
                "is 1, but a link is a revision state of version 2 (accepts, disputes, retracts, refutes)"
            },
        ));
    }
    // Inline payloads are bounded before allocating, whatever the length prefix claims.
    let max = MAX_INLINE_PAYLOAD_BYTES;
    let payload = match r.u8("payload")? {
        tag::NONE => Payload::None,
        tag::TEXT => {
            let bytes = r.bytes32(max, "payload.text")?;
            Payload::Text(String::from_utf8(bytes.to_vec()).map_err(|_| WireError::Utf8("payload.text"))?)
        }
        tag::PUBLIC => Payload::Public(r.bytes32(max, "payload.public")?.to_vec()),
        tag::ENCRYPTED => Payload::Encrypted(r.bytes32(max, "payload.encrypted")?.to_vec()),
        tag::BLOB => {
            let hash = r.array("payload.blob.hash")?;
            let size = r.u64("payload.blob.size")?;
            Payload::Blob(BlobRef { hash, size, media_type: r.str8("payload.blob.media_type")? })
        }
        t => return Err(AtomError::invalid("payload", format!("unknown payload tag {t}"))),
    };
    r.finish()?;
    Ok(AtomParts {
        kind,
        frame,
        bounds,
        valid,
        confidence,
        subject,
        sources,
        evidence,
        extractor,
        links,
        payload,
    })
}
