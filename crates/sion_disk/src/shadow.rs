//! A file as a process that must not change it sees it — one reading a memory on read-only
//! media, on a full disk, or while a writer in another process holds it: reads come from the
//! file as it was when opened, and what the process writes past that (a ledger replaying its
//! last Pulses, an index folding the log's tail) stays in its memory and goes with it.
//!
//! Writable, it is the file itself. The lock a writer takes on a directory is here too.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

/// A file, or its shadow.
#[derive(Debug)]
pub struct DiskFile(Kind);

#[derive(Debug)]
enum Kind {
    Real(crate::File),
    Shadow { file: Option<File>, tail: Mutex<Tail> },
}

/// What the shadow changed: the file is read below `base`, `bytes` hold what follows.
#[derive(Debug)]
struct Tail {
    base: u64,
    bytes: Vec<u8>,
}

fn read_only() -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, "the file was opened to be read, not changed")
}

impl DiskFile {
    pub fn real(file: crate::File) -> Self {
        Self(Kind::Real(file))
    }

    /// The shadow of the file at `path` (of an empty file if there is none).
    pub fn shadow(path: &Path) -> io::Result<Self> {
        let file = match File::open(path) {
            Ok(f) => Some(f),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let base = match &file {
            Some(f) => f.metadata()?.len(),
            None => 0,
        };
        Ok(Self(Kind::Shadow { file, tail: Mutex::new(Tail { base, bytes: Vec::new() }) }))
    }

    /// The shadow of an empty file.
    pub fn empty() -> Self {
        Self(Kind::Shadow { file: None, tail: Mutex::new(Tail { base: 0, bytes: Vec::new() }) })
    }

    pub fn len(&self) -> io::Result<u64> {
        match &self.0 {
            Kind::Real(f) => Ok(f.metadata()?.len()),
            Kind::Shadow { tail, .. } => {
                let t = tail.lock().unwrap_or_else(PoisonError::into_inner);
                Ok(t.base + t.bytes.len() as u64)
            }
        }
    }

    pub fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }

    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        match &self.0 {
            Kind::Real(f) => f.read_exact_at(buf, offset),
            Kind::Shadow { file, tail } => {
                let t = tail.lock().unwrap_or_else(PoisonError::into_inner);
                let end = offset.checked_add(buf.len() as u64).ok_or(io::ErrorKind::InvalidInput)?;
                if end > t.base + t.bytes.len() as u64 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                // The part below `base` from the file, the rest from what was written.
                let below = (t.base.saturating_sub(offset) as usize).min(buf.len());
                if below > 0 {
                    file.as_ref()
                        .ok_or(io::ErrorKind::UnexpectedEof)?
                        .read_exact_at(&mut buf[..below], offset)?;
                }
                if below < buf.len() {
                    let from = (offset + below as u64 - t.base) as usize;
                    let rest = buf.len() - below;
                    buf[below..].copy_from_slice(&t.bytes[from..from + rest]);
                }
                Ok(())
            }
        }
    }

    /// Read what there is at `offset`, up to `buf`'s length; 0 at the end.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if let Kind::Real(f) = &self.0 {
            return f.read_at(buf, offset);
        }
        let n = (self.len()?.saturating_sub(offset)).min(buf.len() as u64) as usize;
        if n == 0 {
            return Ok(0);
        }
        self.read_exact_at(&mut buf[..n], offset)?;
        Ok(n)
    }

    /// Write at `offset`; what a shadow takes stays in memory.
    pub fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        match &self.0 {
            Kind::Real(f) => f.write_all_at(bytes, offset),
            Kind::Shadow { file, tail } => {
                let mut t = tail.lock().unwrap_or_else(PoisonError::into_inner);
                if offset < t.base {
                    // Over what the file holds (a checkpoint rewritten in place): from here on
                    // the shadow holds those bytes itself. Derived files are cut and appended
                    // to, so this copies little.
                    let mut moved = vec![0u8; (t.base - offset) as usize];
                    file.as_ref().ok_or_else(read_only)?.read_exact_at(&mut moved, offset)?;
                    moved.extend_from_slice(&t.bytes);
                    t.bytes = moved;
                    t.base = offset;
                }
                let at = (offset - t.base) as usize;
                if t.bytes.len() < at + bytes.len() {
                    t.bytes.resize(at + bytes.len(), 0);
                }
                t.bytes[at..at + bytes.len()].copy_from_slice(bytes);
                Ok(())
            }
        }
    }

    /// Cut or extend (with zeros); a shadow cut below the file's length reads no further.
    pub fn set_len(&self, len: u64) -> io::Result<()> {
        match &self.0 {
            Kind::Real(f) => f.set_len(len),
            Kind::Shadow { tail, .. } => {
                let mut t = tail.lock().unwrap_or_else(PoisonError::into_inner);
                if len <= t.base {
                    t.base = len;
                    t.bytes.clear();
                } else {
                    let n = (len - t.base) as usize;
                    t.bytes.resize(n, 0);
                }
                Ok(())
            }
        }
    }

    /// Make what was written durable (a shadow's never is: nothing is written).
    pub fn sync_data(&self) -> io::Result<()> {
        match &self.0 {
            Kind::Real(f) => f.sync_data(),
            Kind::Shadow { .. } => Ok(()),
        }
    }
}

/// The exclusive lock of the directory `dir` (its `LOCK` file, made if missing), held while
/// the file is; `None` if another process holds it. Waits up to half a second: a process
/// forking another holds a copy of every open file until the child executes, so a lock just
/// let go can look held for a moment.
pub fn lock_dir(dir: &Path) -> io::Result<Option<File>> {
    use std::os::unix::fs::OpenOptionsExt as _;
    // Private as every file of a memory is (sion_disk): an empty file, but its name is not theirs.
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(crate::FILE_MODE)
        .open(dir.join("LOCK"))?;
    for _ in 0..50 {
        if file.try_lock().is_ok() {
            return Ok(Some(file));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shadow_reads_the_file_and_keeps_its_writes_to_itself() {
        let tmp = tempfile::tempdir().expect("tmp");
        let path = tmp.path().join("f");
        std::fs::write(&path, b"0123456789").expect("write");
        let shadow = DiskFile::shadow(&path).expect("shadow");
        shadow.set_len(6).expect("cut");
        shadow.write_all_at(b"abc", 6).expect("append");
        shadow.write_all_at(b"XY", 10).expect("past the end, a gap of zeros");
        assert_eq!(shadow.len().expect("len"), 12);
        let mut all = [0u8; 12];
        shadow.read_exact_at(&mut all, 0).expect("read across");
        assert_eq!(&all, b"012345abc\0XY");
        let mut head = [0u8; 3];
        shadow.read_exact_at(&mut head, 1).expect("from the file alone");
        assert_eq!(&head, b"123");
        shadow.write_all_at(b"!", 2).expect("over what the file holds");
        shadow.read_exact_at(&mut all, 0).expect("read across");
        assert_eq!(&all, b"01!345abc\0XY");
        let mut past = [0u8; 2];
        assert!(shadow.read_exact_at(&mut past, 11).is_err());
        assert_eq!(std::fs::read(&path).expect("read"), b"0123456789", "the file is as it was");
        let none = DiskFile::shadow(&tmp.path().join("none")).expect("no file: empty");
        assert_eq!(none.len().expect("len"), 0);
    }
}
