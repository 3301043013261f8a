//! The storage seam of sion_memory. Every change the memory makes to its files — the log's
//! segments and derived files, the blob packs, the ledger's journal and the files beside it,
//! the index store, the loop's private store — goes through one small trait, [`Storage`]:
//! open, write, cut, fsync, rename, remove, make a directory, fsync a directory. Reads go to
//! the file directly; faults that matter are the ones that lose or refuse what was written.
//!
//! Two backends: [`Os`], the operating system, which every memory uses; and [`Faults`], for
//! tests, which fails the n-th change with an I/O error or a full disk, writes short, and cuts
//! the power — puts every file back as the disk would hold it after a crash, keeping only what
//! was fsynced (and only the names whose directory was fsynced). The crate has no
//! dependencies and knows nothing of atoms, logs or ledgers.

use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod faults;

pub use faults::{Fault, Faults};

/// How a file is opened: to read only, or to read and write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Open {
    /// To read only; the file must exist. Changes nothing.
    Read,
    /// The file must exist.
    Existing,
    /// Made empty if missing, kept as it is otherwise.
    Create,
    /// Made empty, whether it existed or not.
    Truncate,
    /// Made; an error if it exists.
    New,
    /// Made, readable by its owner only (a key); an error if it exists.
    NewPrivate,
}

/// Every change to the memory's files. `path` names the file each call is about: the OS
/// backend ignores it, a test backend keeps its account of the disk by it.
pub trait Storage: Send + Sync + fmt::Debug {
    fn open(&self, path: &Path, how: Open) -> io::Result<fs::File>;
    /// Write at `offset`; may write fewer bytes than given (as `pwrite` may).
    fn write_at(&self, file: &fs::File, path: &Path, bytes: &[u8], offset: u64) -> io::Result<usize>;
    fn set_len(&self, file: &fs::File, path: &Path, len: u64) -> io::Result<()>;
    /// Make the file's bytes and length durable (`fdatasync`).
    fn sync(&self, file: &fs::File, path: &Path) -> io::Result<()>;
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Make the directory's entries durable: files made, renamed or removed in it.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
}

/// The operating system.
#[derive(Debug, Default, Clone, Copy)]
pub struct Os;

impl Storage for Os {
    fn open(&self, path: &Path, how: Open) -> io::Result<fs::File> {
        let mut o = fs::OpenOptions::new();
        o.read(true).write(how != Open::Read);
        match how {
            Open::Read | Open::Existing => {}
            Open::Create => {
                o.create(true).truncate(false);
            }
            Open::Truncate => {
                o.create(true).truncate(true);
            }
            Open::New => {
                o.create_new(true);
            }
            Open::NewPrivate => {
                o.create_new(true).mode(0o600);
            }
        }
        o.open(path)
    }

    fn write_at(&self, file: &fs::File, _: &Path, bytes: &[u8], offset: u64) -> io::Result<usize> {
        file.write_at(bytes, offset)
    }

    fn set_len(&self, file: &fs::File, _: &Path, len: u64) -> io::Result<()> {
        file.set_len(len)
    }

    fn sync(&self, file: &fs::File, _: &Path) -> io::Result<()> {
        file.sync_data()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::create_dir_all(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        fs::File::open(path)?.sync_all()
    }
}

/// A handle on a [`Storage`], cheap to clone; [`Disk::os`] unless a test says otherwise.
#[derive(Clone, Debug)]
pub struct Disk(Arc<dyn Storage>);

impl Default for Disk {
    fn default() -> Self {
        Self::os()
    }
}

impl Disk {
    pub fn os() -> Self {
        Self(Arc::new(Os))
    }

    pub fn new(storage: Arc<dyn Storage>) -> Self {
        Self(storage)
    }

    pub fn open(&self, path: &Path, how: Open) -> io::Result<File> {
        let file = self.0.open(path, how)?;
        Ok(File { file, path: path.to_owned(), disk: self.clone() })
    }

    pub fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.0.rename(from, to)
    }

    pub fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.0.remove_file(path)
    }

    pub fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.0.create_dir_all(path)
    }

    pub fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.0.sync_dir(path)
    }

    /// Make the file at `path` durable, bytes and name (its directory fsynced): what a
    /// creation cut short may have left only in the page cache, a writer makes durable
    /// before it builds on it.
    pub fn make_durable(&self, path: &Path) -> io::Result<()> {
        self.open(path, Open::Existing)?.sync_all()?;
        self.sync_dir(path.parent().unwrap_or(Path::new(".")))
    }

    /// `bytes` as the whole of the file at `path`, fsynced (its directory is not).
    pub fn write_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let f = self.open(path, Open::Truncate)?;
        f.write_all_at(bytes, 0)?;
        f.sync_data()
    }

    /// Replace the file at `path` by `bytes` all at once: written beside it, fsynced, renamed
    /// over it, and the directory fsynced — after a crash the file is the old one or the new.
    pub fn replace_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        self.write_file(&tmp, bytes)?;
        self.rename(&tmp, path)?;
        self.sync_dir(path.parent().unwrap_or(Path::new(".")))
    }
}

/// A file opened through a [`Disk`]: reads go to it directly (it derefs to the `fs::File` to
/// read), changes through the storage — its own `write_all_at`, `set_len` and `sync_*`, which
/// are the ones method calls find.
#[derive(Debug)]
pub struct File {
    file: fs::File,
    path: PathBuf,
    disk: Disk,
}

impl std::ops::Deref for File {
    type Target = fs::File;

    fn deref(&self) -> &fs::File {
        &self.file
    }
}

impl File {
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    pub fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }

    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.file.read_at(buf, offset)
    }

    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    /// Write all of `bytes` at `offset`, however short each write is.
    pub fn write_all_at(&self, mut bytes: &[u8], mut offset: u64) -> io::Result<()> {
        while !bytes.is_empty() {
            match self.disk.0.write_at(&self.file, &self.path, bytes, offset) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    bytes = &bytes[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// `io::Write` from `at` on, through the storage (wrap it in a `BufWriter`).
    pub fn writer(&self, at: u64) -> WriteAt<'_> {
        WriteAt { file: self, at }
    }

    pub fn set_len(&self, len: u64) -> io::Result<()> {
        self.disk.0.set_len(&self.file, &self.path, len)
    }

    pub fn sync_data(&self) -> io::Result<()> {
        self.disk.0.sync(&self.file, &self.path)
    }

    /// The same as [`File::sync_data`]: the length is data here.
    pub fn sync_all(&self) -> io::Result<()> {
        self.disk.0.sync(&self.file, &self.path)
    }
}

/// Sequential writes to a [`File`] from an offset: see [`File::writer`].
#[derive(Debug)]
pub struct WriteAt<'a> {
    file: &'a File,
    at: u64,
}

impl io::Write for WriteAt<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write_all_at(buf, self.at)?;
        self.at += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_os_backend_writes_and_replaces() {
        let tmp = tempfile::tempdir().expect("tmp");
        let disk = Disk::os();
        let path = tmp.path().join("f");
        disk.write_file(&path, b"hello").expect("write");
        disk.replace_file(&path, b"world!").expect("replace");
        assert_eq!(fs::read(&path).expect("read"), b"world!");
        let f = disk.open(&path, Open::Existing).expect("open");
        f.write_all_at(b"W", 0).expect("write at");
        f.set_len(3).expect("cut");
        assert_eq!(fs::read(&path).expect("read"), b"Wor");
        assert!(disk.open(&path, Open::New).is_err(), "New refuses a file that exists");
    }
}
