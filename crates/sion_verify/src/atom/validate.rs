//! The validation rules of docs/ATOM.md, "Limits". Field names are the JSON form's.

use super::limits::*;
use super::{AtomError, AtomParts, Kind, LinkRel, Payload};

pub(super) fn check(p: &AtomParts) -> Result<(), AtomError> {
    check_frame(&p.frame)?;
    for axis in 0..3 {
        for (field, v) in [("min", p.bounds.min_mm[axis]), ("max", p.bounds.max_mm[axis])] {
            if !(-MAX_COORD_MM..=MAX_COORD_MM).contains(&v) {
                return Err(AtomError::invalid(
                    format!("{field}[{axis}]"),
                    format!("{v} mm is outside ±{MAX_COORD_MM} mm"),
                ));
            }
        }
        if p.bounds.min_mm[axis] > p.bounds.max_mm[axis] {
            return Err(AtomError::invalid(
                format!("max[{axis}]"),
                format!("{} mm is below min[{axis}] = {} mm", p.bounds.max_mm[axis], p.bounds.min_mm[axis]),
            ));
        }
    }
    if p.valid.from_ns < 0 {
        return Err(AtomError::invalid("from", format!("{} ns is before time zero", p.valid.from_ns)));
    }
    if p.valid.to_ns <= p.valid.from_ns {
        return Err(AtomError::invalid(
            "to",
            format!(
                "{} ns must be after from = {} ns (valid time is [from, to); an instant t is [t, t+1))",
                p.valid.to_ns, p.valid.from_ns
            ),
        ));
    }
    if p.confidence.0 > MAX_CONFIDENCE_PERMILLE {
        return Err(AtomError::invalid(
            "confidence",
            format!("{} is above {MAX_CONFIDENCE_PERMILLE} permille", p.confidence.0),
        ));
    }
    check_text("subject", &p.subject, MAX_SUBJECT_BYTES)?;
    check_count("sources", p.sources.len())?;
    for (i, s) in p.sources.iter().enumerate() {
        if p.sources[..i].contains(s) {
            return Err(AtomError::invalid(format!("sources[{i}]"), "repeats an earlier source"));
        }
    }
    check_count("evidence", p.evidence.len())?;
    for (i, e) in p.evidence.iter().enumerate() {
        if e.start > e.end {
            return Err(AtomError::invalid(
                format!("evidence[{i}]"),
                format!("start {} is after end {}", e.start, e.end),
            ));
        }
    }
    if let Some(x) = &p.extractor {
        check_text("extractor.model", &x.model, MAX_EXTRACTOR_BYTES)?;
        check_text("extractor.code", &x.code, MAX_EXTRACTOR_BYTES)?;
        if x.model.is_empty() && x.code.is_empty() {
            return Err(AtomError::invalid("extractor", "names neither a model nor code"));
        }
    }
    check_count("links", p.links.len())?;
    for (i, l) in p.links.iter().enumerate() {
        if p.links[..i].contains(l) {
            return Err(AtomError::invalid(format!("links[{i}]"), "repeats an earlier link"));
        }
    }
    let mut state: Option<(usize, LinkRel)> = None;
    for (i, l) in p.links.iter().enumerate() {
        if l.rel.needs_version_2() && p.kind != Kind::Revision {
            return Err(AtomError::invalid(
                format!("links[{i}]"),
                format!("`{}` is a revision's state: only a revision carries it", l.rel),
            ));
        }
        if p.kind == Kind::Revision && l.rel.is_state() {
            match state {
                Some((j, first)) if first != l.rel => {
                    return Err(AtomError::invalid(
                        format!("links[{i}]"),
                        format!(
                            "a revision has one state: this link is `{}`, links[{j}] is `{first}`",
                            l.rel
                        ),
                    ));
                }
                None => state = Some((i, l.rel)),
                _ => {}
            }
        }
    }
    match p.kind {
        Kind::Revision if p.links.is_empty() => {
            return Err(AtomError::invalid("links", "a revision names at least one target"));
        }
        Kind::Conflict if p.links.iter().filter(|l| l.rel == LinkRel::Contradicts).count() < 2 => {
            return Err(AtomError::invalid("links", "a conflict names at least two atoms it contradicts"));
        }
        _ => {}
    }
    check_payload(&p.payload)
}

pub(super) fn check_frame(frame: &str) -> Result<(), AtomError> {
    if frame.is_empty() || frame.len() > MAX_FRAME_BYTES {
        return Err(AtomError::invalid("frame", format!("must be 1 to {MAX_FRAME_BYTES} bytes")));
    }
    if let Some(c) = frame.chars().find(|c| !(c.is_ascii_alphanumeric() || "_./-".contains(*c))) {
        return Err(AtomError::invalid("frame", format!("{c:?} is not one of [A-Za-z0-9_./-]")));
    }
    Ok(())
}

pub(super) fn check_text(field: &str, text: &str, max: usize) -> Result<(), AtomError> {
    if text.len() > max {
        return Err(AtomError::invalid(field, format!("{} bytes, more than {max}", text.len())));
    }
    // Control characters are Unicode's category Cc (U+0000–U+001F, U+007F–U+009F).
    if text.chars().any(char::is_control) {
        return Err(AtomError::invalid(field, "contains a control character"));
    }
    Ok(())
}

fn check_count(field: &str, n: usize) -> Result<(), AtomError> {
    if n > MAX_REFERENCES {
        return Err(AtomError::invalid(field, format!("{n} entries, more than {MAX_REFERENCES}")));
    }
    Ok(())
}

fn check_payload(payload: &Payload) -> Result<(), AtomError> {
    let inline = |field: &str, len: usize| {
        if len > MAX_INLINE_PAYLOAD_BYTES {
            return Err(AtomError::invalid(
                field,
                format!("{len} bytes inline, more than {MAX_INLINE_PAYLOAD_BYTES}: keep it as a blob"),
            ));
        }
        Ok(())
    };
    match payload {
        Payload::None => Ok(()),
        Payload::Text(t) => inline("payload.text", t.len()),
        Payload::Public(b) => inline("payload.public", b.len()),
        Payload::Encrypted(b) => inline("payload.encrypted", b.len()),
        Payload::Blob(blob) => {
            let mt = &blob.media_type;
            let token = |s: &str| {
                !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
            };
            // type/subtype, then parameters such as `; type=sensor_msgs/msg/Image` (RFC 6838).
            let mut parts = mt.split(';');
            let essence = parts.next().unwrap_or_default();
            let parameter = |p: &str| {
                p.strip_prefix(' ').unwrap_or(p).split_once('=').is_some_and(|(k, v)| {
                    token(k)
                        && !v.is_empty()
                        && v.bytes().all(|b| b.is_ascii_graphic() && b != b';' && b != b'"')
                })
            };
            let well_formed =
                essence.split_once('/').is_some_and(|(t, s)| token(t) && token(s)) && parts.all(parameter);
            if mt.len() > MAX_MEDIA_TYPE_BYTES || !well_formed {
                return Err(AtomError::invalid(
                    "payload.blob.media_type",
                    format!(
                        "{mt:?} is not a media type such as image/jpeg (at most {MAX_MEDIA_TYPE_BYTES} bytes)"
                    ),
                ));
            }
            Ok(())
        }
    }
}
