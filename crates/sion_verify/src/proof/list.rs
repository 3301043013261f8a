//! Subject and link proofs: every atom about a subject, or every atom linking to a target
//! (docs/PROOFS.md, "Subject and link proofs"). The answer's atoms travel with the proof; the
//! map path proves which list is committed, and the list's root is recomputed from the atoms.

use super::VerifyError;
use crate::atom::{Atom, AtomId};
use crate::index::critbit;
use crate::index::{
    ListAnswer, ListHasher, MapLeaf, index_root, link_leaf_digest, list_leaf, subject_key,
    subject_leaf_digest,
};
use crate::merkle::{Digest, MemoryTree};
use crate::wire::{Put as _, Reader, WireError};

/// Which list a proof is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListKey {
    /// The atoms with this subject (1 to 256 bytes of UTF-8, no control character).
    Subject(String),
    /// The atoms with a link to this atom, whatever the relation.
    LinksTo(AtomId),
}

/// A subject or link list and its proof (docs/PROOFS.md, "Subject and link proofs").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListProof {
    /// Which list.
    pub key: ListKey,
    /// The answer: (position, atom bytes), ascending by position.
    pub atoms: Vec<(u64, Vec<u8>)>,
    /// The map leaf and path, and the rest of the index root.
    pub answer: ListAnswer,
}

impl ListKey {
    fn map_key(&self) -> [u8; 32] {
        match self {
            ListKey::Subject(s) => subject_key(s),
            ListKey::LinksTo(id) => id.0,
        }
    }
}

impl ListProof {
    /// Append the proof's body (docs/PROOFS.md, kind 4).
    pub fn put(&self, out: &mut Vec<u8>) {
        match &self.key {
            ListKey::Subject(s) => {
                out.put_u8(0);
                out.put_str16(s);
            }
            ListKey::LinksTo(id) => {
                out.put_u8(1);
                out.put_bytes(&id.0);
            }
        }
        out.put_u32(self.atoms.len() as u32);
        for (position, bytes) in &self.atoms {
            out.put_varint(*position);
            out.put_bytes32(bytes);
        }
        let a = &self.answer;
        match &a.leaf {
            None => out.put_u8(0),
            Some(leaf) => {
                out.put_u8(1);
                out.put_bytes(&leaf.key);
                out.put_str16(&leaf.label);
                out.put_varint(leaf.count);
                out.put_bytes(&leaf.root);
            }
        }
        critbit::put_path(out, &a.path);
        out.put_varint(a.frames);
        out.put_bytes(&a.frames_root);
        out.put_bytes(&a.other_root);
    }

    /// Read a body as [`ListProof::put`] writes it; refuses an empty or invalid subject and a
    /// path longer than 256 steps.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let key = match r.u8("list kind")? {
            0 => {
                let subject = r.str16("subject")?;
                if subject.is_empty() {
                    return Err(WireError::Invalid {
                        field: "subject",
                        problem: "an empty subject is no subject: atoms without one are in no list".into(),
                    });
                }
                crate::atom::check_subject(&subject)
                    .map_err(|e| WireError::Invalid { field: "subject", problem: e.to_string() })?;
                ListKey::Subject(subject)
            }
            1 => ListKey::LinksTo(AtomId(r.array("target")?)),
            k => return Err(WireError::Invalid { field: "list kind", problem: format!("unknown kind {k}") }),
        };
        let n = r.u32("atoms")? as usize;
        if n > r.remaining() {
            return Err(WireError::Truncated("atoms"));
        }
        let mut atoms = Vec::with_capacity(n);
        for _ in 0..n {
            atoms.push((
                r.varint("position")?,
                r.bytes32(crate::atom::limits::MAX_ATOM_BYTES, "atom")?.to_vec(),
            ));
        }
        let leaf = if r.flag("leaf")? {
            Some(MapLeaf {
                key: r.array("leaf key")?,
                label: r.str16("label")?,
                count: r.varint("count")?,
                root: r.array("list root")?,
            })
        } else {
            None
        };
        let path = critbit::read_path(r, "path")?;
        let answer = ListAnswer {
            positions: atoms.iter().map(|(p, _)| *p).collect(),
            leaf,
            path,
            frames: r.varint("frames")?,
            frames_root: r.array("frames root")?,
            other_root: r.array("other root")?,
        };
        Ok(Self { key, atoms, answer })
    }

    /// Check the proof against an index root and log size; returns the answer's atoms.
    pub fn verify(
        &self,
        index_root_expected: &Digest,
        log_size: u64,
    ) -> Result<Vec<(u64, Atom)>, VerifyError> {
        let bad = |why: String| Err(VerifyError::List(why));
        let key = self.key.map_key();
        let mut atoms = Vec::with_capacity(self.atoms.len());
        let mut leaves: Vec<[u8; 40]> = Vec::new();
        let mut last = None;
        for (position, bytes) in &self.atoms {
            if last.is_some_and(|l| l >= *position) || *position >= log_size {
                return bad(format!("position {position} is out of order or beyond the head"));
            }
            last = Some(*position);
            let atom = Atom::decode(bytes).map_err(|e| VerifyError::Atom(e.to_string()))?;
            match &self.key {
                ListKey::Subject(s) => {
                    if atom.parts().subject != *s {
                        return bad(format!("the atom at position {position} is not about {s:?}"));
                    }
                }
                ListKey::LinksTo(target) => {
                    if !atom.parts().links.iter().any(|l| l.target == *target) {
                        return bad(format!("the atom at position {position} does not link to {target}"));
                    }
                }
            }
            leaves.push(list_leaf(*position, &atom.id()));
            atoms.push((*position, atom));
        }
        let a = &self.answer;
        let map_root = match &a.leaf {
            None => {
                if !a.path.is_empty() || !atoms.is_empty() {
                    return bad("an empty map has no path and no answer".into());
                }
                critbit::empty_digest()
            }
            Some(leaf) => {
                let digest = match &self.key {
                    ListKey::Subject(_) => {
                        subject_leaf_digest(&leaf.key, leaf.count, &leaf.root, &leaf.label)
                    }
                    ListKey::LinksTo(_) => {
                        if !leaf.label.is_empty() {
                            return bad("a link list has no label".into());
                        }
                        link_leaf_digest(&leaf.key, leaf.count, &leaf.root)
                    }
                };
                if leaf.key == key {
                    let list = MemoryTree::<ListHasher>::from_leaves(&leaves);
                    if list.size() != leaf.count || list.root() != leaf.root {
                        return bad(format!(
                            "the answer's {} entries do not make the committed list of {}",
                            list.size(),
                            leaf.count
                        ));
                    }
                    if let ListKey::Subject(s) = &self.key
                        && leaf.label != *s
                    {
                        return bad("the committed subject differs from the asked one".into());
                    }
                } else if !atoms.is_empty() {
                    return bad("the map holds no such key, yet the answer is not empty".into());
                }
                critbit::root_from_path(&key, &leaf.key, digest, &a.path).ok_or_else(|| {
                    VerifyError::List("the map path is not a crit-bit path for the key".into())
                })?
            }
        };
        let (subjects, links) = match self.key {
            ListKey::Subject(_) => (map_root, a.other_root),
            ListKey::LinksTo(_) => (a.other_root, map_root),
        };
        if index_root(a.frames, &a.frames_root, &subjects, &links) != *index_root_expected {
            return Err(VerifyError::IndexRoot);
        }
        Ok(atoms)
    }
}
