//! The writer's key store (docs/SEAL.md, "Key stores"): one file per space holding, per epoch,
//! the cover of the leaves not forgotten — never a forgotten leaf's key or a node above it.
//! Every change replaces the file whole (written beside, fsynced, renamed, the directory
//! fsynced), so after a power cut the store is the one before the change or the one after.

use std::path::{Path, PathBuf};

use sion_disk::{Disk, Open};
use zeroize::Zeroizing;

use crate::{Cover, SealError};

const MAGIC: &[u8; 8] = b"SIONKEYS";
/// 2: a flag per epoch says whether it was ever given here (a member holds only the epochs
/// it was given; version 1 could not tell "never given" from "all forgotten").
const VERSION: u8 = 2;
const CHECK: &str = "sion-keys-check-v1";
/// The largest key store read: 2^16 epochs of fully punctured covers is far below it; a
/// length beyond it is damage, not a store.
const MAX_BYTES: u64 = 256 << 20;

/// The covers of one space's epochs, as one file.
#[derive(Debug)]
pub struct KeyStore {
    disk: Disk,
    path: PathBuf,
    space: [u8; 32],
    /// Epoch `i` is `covers[i]`; `None` if it was never given here.
    covers: Vec<Option<Cover>>,
}

fn io(path: &Path, what: &str) -> impl FnOnce(std::io::Error) -> SealError {
    let path = path.to_path_buf();
    let what = what.to_owned();
    move |e| SealError::Io { path, what, message: e.to_string() }
}

fn check(body: &[u8]) -> [u8; 32] {
    *blake3::Hasher::new_derive_key(CHECK).update(body).finalize().as_bytes()
}

impl KeyStore {
    /// A new store for `space`, with no epoch yet; refused if a file is already at `path`
    /// (a key store is never overwritten by a new one).
    pub fn create(disk: &Disk, path: &Path, space: [u8; 32]) -> Result<Self, SealError> {
        if path.exists() {
            return Err(SealError::Io {
                path: path.to_path_buf(),
                what: "creating the key store".into(),
                message: "a file is already there".into(),
            });
        }
        let store = Self { disk: disk.clone(), path: path.to_path_buf(), space, covers: Vec::new() };
        store.save()?;
        Ok(store)
    }

    /// The store at `path`, its bytes checked (magic, version, lengths, each cover, the check).
    pub fn open(disk: &Disk, path: &Path) -> Result<Self, SealError> {
        let file = disk.open(path, Open::Read).map_err(io(path, "opening the key store"))?;
        let len = file.metadata().map_err(io(path, "reading the key store"))?.len();
        if len > MAX_BYTES {
            return Err(SealError::Format {
                what: "key store",
                problem: format!("{len} bytes, more than the {MAX_BYTES} a key store can be"),
            });
        }
        let mut bytes = Zeroizing::new(vec![0u8; len as usize]);
        std::os::unix::fs::FileExt::read_exact_at(&*file, &mut bytes, 0)
            .map_err(io(path, "reading the key store"))?;
        let (space, covers) = Self::decode(&bytes)?;
        Ok(Self { disk: disk.clone(), path: path.to_path_buf(), space, covers })
    }

    /// The space this store holds keys of.
    pub fn space(&self) -> &[u8; 32] {
        &self.space
    }

    /// The epochs begun so far (the current one is the last).
    pub fn epochs(&self) -> u32 {
        self.covers.len() as u32
    }

    /// Epoch `epoch`'s cover (refused if it was never begun or never given here).
    pub fn cover(&self, epoch: u32) -> Result<&Cover, SealError> {
        self.covers
            .get(epoch as usize)
            .and_then(Option::as_ref)
            .ok_or(SealError::NoEpoch { epoch, epochs: self.epochs() })
    }

    /// Whether any leaf of `from..to` of `epoch` still derives from this store.
    pub fn holds_any(&self, epoch: u32, from: u64, to: u64) -> bool {
        self.cover(epoch).is_ok_and(|c| c.holds_any(from, to))
    }

    /// Whether epoch `epoch` is held here (begun by this writer, or given to this member).
    pub fn holds(&self, epoch: u32) -> bool {
        self.covers.get(epoch as usize).is_some_and(Option::is_some)
    }

    /// Begin the next epoch with `seed` (fresh random bytes: `MemberKey`-independent); durable
    /// before it returns. Its number is returned.
    pub fn begin_epoch(&mut self, seed: [u8; 32]) -> Result<u32, SealError> {
        let epoch = self.epochs();
        self.covers.push(Some(Cover::new(epoch, seed)));
        if let Err(e) = self.save() {
            self.covers.pop();
            return Err(e);
        }
        Ok(epoch)
    }

    /// Hold `cover` for its epoch, as a member does when given it (epochs before it that were
    /// never given stay empty). A cover of an epoch already held is restricted to the leaves
    /// both cover, so receiving an older wrap again never brings back a forgotten leaf. Durable
    /// before it returns.
    pub fn hold(&mut self, cover: Cover) -> Result<(), SealError> {
        let epoch = cover.epoch;
        let before = self.covers.clone();
        while self.covers.len() <= epoch as usize {
            self.covers.push(None);
        }
        let held = &mut self.covers[epoch as usize];
        *held = Some(match held.take() {
            None => cover,
            Some(old) => {
                let mut new = cover;
                new.restrict_to(&old);
                new
            }
        });
        if let Err(e) = self.save() {
            self.covers = before;
            return Err(e);
        }
        Ok(())
    }

    /// Forget leaves `from..to` of `epoch` (end exclusive): the cover is punctured and the
    /// store replaced; once this returns no file of the store derives their keys. On an error
    /// the store in memory is left as the disk holds it (the old one, unless the rename landed
    /// — then reopening finds the new one, never a mixture).
    pub fn forget(&mut self, epoch: u32, from: u64, to: u64) -> Result<(), SealError> {
        let before = self.cover(epoch)?.clone();
        let mut after = before.clone();
        after.forget(from, to);
        if after == before {
            return Ok(()); // nothing held there: nothing to replace
        }
        self.covers[epoch as usize] = Some(after);
        if let Err(e) = self.save() {
            self.covers[epoch as usize] = Some(before);
            return Err(e);
        }
        Ok(())
    }

    /// The store's bytes (docs/SEAL.md, "Key stores").
    pub fn encode(&self) -> Zeroizing<Vec<u8>> {
        let mut out = Zeroizing::new(Vec::new());
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.space);
        out.extend_from_slice(&self.epochs().to_le_bytes());
        for c in &self.covers {
            match c {
                None => out.push(0),
                Some(c) => {
                    out.push(1);
                    let bytes = Zeroizing::new(c.encode());
                    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                    out.extend_from_slice(&bytes);
                }
            }
        }
        let sum = check(&out);
        out.extend_from_slice(&sum);
        out
    }

    fn decode(bytes: &[u8]) -> Result<([u8; 32], Vec<Option<Cover>>), SealError> {
        let bad = |problem: String| SealError::Format { what: "key store", problem };
        if bytes.len() < 8 + 1 + 32 + 4 + 32 || &bytes[..8] != MAGIC {
            return Err(bad("no SIONKEYS header".into()));
        }
        if bytes[8] != VERSION {
            return Err(bad(format!("version {} (this build reads {VERSION})", bytes[8])));
        }
        let (body, sum) = bytes.split_at(bytes.len() - 32);
        if check(body) != sum {
            return Err(bad("the check at its end does not match: the file is damaged".into()));
        }
        let mut space = [0u8; 32];
        space.copy_from_slice(&body[9..41]);
        let n = u32::from_le_bytes([body[41], body[42], body[43], body[44]]);
        let mut rest = &body[45..];
        // Each epoch takes at least its flag byte: a count beyond that is refused before any
        // allocation follows it.
        if u64::from(n) > rest.len() as u64 {
            return Err(bad(format!("{n} epochs cannot fit in {} bytes", rest.len())));
        }
        let mut covers = Vec::with_capacity(n as usize);
        for epoch in 0..n {
            let Some((&given, after)) = rest.split_first() else {
                return Err(bad(format!("epoch {epoch}: cut off")));
            };
            rest = after;
            match given {
                0 => {
                    covers.push(None);
                    continue;
                }
                1 => {}
                f => return Err(bad(format!("epoch {epoch}: flag {f}, not 0 (never given) or 1 (held)"))),
            }
            if rest.len() < 4 {
                return Err(bad(format!("epoch {epoch}: its length is cut off")));
            }
            let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            rest = &rest[4..];
            if len > rest.len() {
                return Err(bad(format!("epoch {epoch}: {len} bytes, {} left", rest.len())));
            }
            let cover = Cover::decode(&rest[..len])?;
            if cover.epoch != epoch {
                return Err(bad(format!("epoch {epoch}'s cover says epoch {}", cover.epoch)));
            }
            covers.push(Some(cover));
            rest = &rest[len..];
        }
        if !rest.is_empty() {
            return Err(bad(format!("{} bytes after the last epoch", rest.len())));
        }
        Ok((space, covers))
    }

    fn save(&self) -> Result<(), SealError> {
        self.disk.replace_file(&self.path, &self.encode()).map_err(io(&self.path, "replacing the key store"))
    }
}
