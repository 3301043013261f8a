//! The canonical binary encoding (docs/ATOM.md, "Encoding"): fixed-width little-endian
//! integers and length-prefixed strings, in a fixed field order. Every valid atom has exactly
//! one encoding, so its id is well defined.

use super::limits::MAX_ATOM_BYTES;
use super::{
    AtomError, AtomId, AtomParts, BlobRef, BoxMm, Evidence, Extractor, Interval, Kind, Link, LinkRel,
    Payload, Permille,
};

pub(super) const VERSION: u8 = 1;

mod tag {
    pub const NONE: u8 = 0;
    pub const TEXT: u8 = 1;
    pub const PUBLIC: u8 = 2;
    pub const ENCRYPTED: u8 = 3;
    pub const BLOB: u8 = 4;
}

/// Encode parts that passed validation (so every length fits its prefix).
pub(super) fn encode(p: &AtomParts) -> Vec<u8> {
    let mut out = Vec::with_capacity(160 + p.subject.len());
    out.push(VERSION);
    out.push(p.kind.code());
    out.push(p.frame.len() as u8);
    out.extend_from_slice(p.frame.as_bytes());
    for v in p.bounds.min_mm.iter().chain(&p.bounds.max_mm) {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&p.valid.from_ns.to_le_bytes());
    out.extend_from_slice(&p.valid.to_ns.to_le_bytes());
    out.extend_from_slice(&p.confidence.0.to_le_bytes());
    put_str16(&mut out, &p.subject);
    out.extend_from_slice(&(p.sources.len() as u16).to_le_bytes());
    for s in &p.sources {
        out.extend_from_slice(&s.0);
    }
    out.extend_from_slice(&(p.evidence.len() as u16).to_le_bytes());
    for e in &p.evidence {
        out.extend_from_slice(&e.source.0);
        out.extend_from_slice(&e.start.to_le_bytes());
        out.extend_from_slice(&e.end.to_le_bytes());
    }
    match &p.extractor {
        None => out.push(0),
        Some(x) => {
            out.push(1);
            put_str16(&mut out, &x.model);
            put_str16(&mut out, &x.code);
        }
    }
    out.extend_from_slice(&(p.links.len() as u16).to_le_bytes());
    for l in &p.links {
        out.push(l.rel.code());
        out.extend_from_slice(&l.target.0);
    }
    match &p.payload {
        Payload::None => out.push(tag::NONE),
        Payload::Text(t) => put_bytes32(&mut out, tag::TEXT, t.as_bytes()),
        Payload::Public(b) => put_bytes32(&mut out, tag::PUBLIC, b),
        Payload::Encrypted(b) => put_bytes32(&mut out, tag::ENCRYPTED, b),
        Payload::Blob(blob) => {
            out.push(tag::BLOB);
            out.extend_from_slice(&blob.hash);
            out.extend_from_slice(&blob.size.to_le_bytes());
            out.push(blob.media_type.len() as u8);
            out.extend_from_slice(blob.media_type.as_bytes());
        }
    }
    out
}

fn put_str16(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u16).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_bytes32(out: &mut Vec<u8>, tag: u8, b: &[u8]) {
    out.push(tag);
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// A cursor over bytes being decoded; each read names the field it is for.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], AtomError> {
        if self.rest.len() < n {
            return Err(AtomError::Truncated { field });
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], AtomError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, field)?);
        Ok(a)
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, AtomError> {
        Ok(self.array::<1>(field)?[0])
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, AtomError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, AtomError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, AtomError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    fn i64(&mut self, field: &'static str) -> Result<i64, AtomError> {
        Ok(i64::from_le_bytes(self.array(field)?))
    }

    fn id(&mut self, field: &'static str) -> Result<AtomId, AtomError> {
        Ok(AtomId(self.array(field)?))
    }

    fn utf8(&mut self, n: usize, field: &'static str) -> Result<String, AtomError> {
        let bytes = self.take(n, field)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| AtomError::invalid(field, "is not UTF-8"))
    }

    fn str16(&mut self, field: &'static str) -> Result<String, AtomError> {
        let n = self.u16(field)?;
        self.utf8(n.into(), field)
    }
}

pub(super) fn decode(bytes: &[u8]) -> Result<AtomParts, AtomError> {
    if bytes.len() > MAX_ATOM_BYTES {
        return Err(AtomError::TooLong(bytes.len()));
    }
    let mut r = Reader { rest: bytes };
    let version = r.u8("version")?;
    if version != VERSION {
        return Err(AtomError::Version(version));
    }
    let code = r.u8("kind")?;
    let kind =
        Kind::from_code(code).ok_or_else(|| AtomError::invalid("kind", format!("unknown code {code}")))?;
    let frame_len = r.u8("frame")?;
    let frame = r.utf8(frame_len.into(), "frame")?;
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
    let n = r.u16("sources")?;
    let sources = (0..n).map(|_| r.id("sources")).collect::<Result<_, _>>()?;
    let n = r.u16("evidence")?;
    let evidence = (0..n)
        .map(|_| {
            Ok(Evidence { source: r.id("evidence")?, start: r.u64("evidence")?, end: r.u64("evidence")? })
        })
        .collect::<Result<_, AtomError>>()?;
    let extractor = match r.u8("extractor")? {
        0 => None,
        1 => Some(Extractor { model: r.str16("extractor.model")?, code: r.str16("extractor.code")? }),
        flag => return Err(AtomError::invalid("extractor", format!("presence flag {flag} is not 0 or 1"))),
    };
    let n = r.u16("links")?;
    let links = (0..n)
        .map(|_| {
            let code = r.u8("links")?;
            let rel = LinkRel::from_code(code)
                .ok_or_else(|| AtomError::invalid("links", format!("unknown relation code {code}")))?;
            Ok(Link { rel, target: r.id("links")? })
        })
        .collect::<Result<_, AtomError>>()?;
    let payload = match r.u8("payload")? {
        tag::NONE => Payload::None,
        tag::TEXT => {
            let n = r.u32("payload.text")?;
            Payload::Text(r.utf8(n as usize, "payload.text")?)
        }
        tag::PUBLIC => {
            let n = r.u32("payload.public")?;
            Payload::Public(r.take(n as usize, "payload.public")?.to_vec())
        }
        tag::ENCRYPTED => {
            let n = r.u32("payload.encrypted")?;
            Payload::Encrypted(r.take(n as usize, "payload.encrypted")?.to_vec())
        }
        tag::BLOB => {
            let hash = r.array("payload.blob.hash")?;
            let size = r.u64("payload.blob.size")?;
            let n = r.u8("payload.blob.media_type")?;
            Payload::Blob(BlobRef { hash, size, media_type: r.utf8(n.into(), "payload.blob.media_type")? })
        }
        t => return Err(AtomError::invalid("payload", format!("unknown payload tag {t}"))),
    };
    if !r.rest.is_empty() {
        return Err(AtomError::TrailingBytes(r.rest.len()));
    }
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
