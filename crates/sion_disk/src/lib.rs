//! The storage seam of sion_memory. Every change the memory makes to its files — the log's
//! segments and derived files, the blob packs, the ledger's journal and the files beside it,
//! the index store, the loop's private store — goes through one small trait, [`Storage`]:
//! open, write, cut, fsync, rename, remove, make a directory, fsync a directory. Reads go to
//! the file directly; faults that matter are the ones that lose or refuse what was written.
//!
//! Two backends: [`Os`], the operating system, which every memory uses; and [`Faults`], for
//! tests, which fails the n-th change with an I/O error or a full disk, writes short, and cuts
//! the power — puts every file back as the disk would hold it after a crash, keeping only what
//! was fsynced (and only the names whose directory was fsynced). Beside it, what the log, the
//! index and the ledger each write with: checksummed frames ([`frame`]), a file that a test
//! can shadow in memory and the directory lock ([`shadow`]), and the check that secrets stay
//! their owner's ([`private`]). It depends on crc32c and tracing alone and knows nothing of
//! atoms, logs or ledgers.
//!
//! What it makes is its owner's alone, whatever the umask: files 0600 and directories 0700
//! (a memory holds key material and people's faces; another user on the robot reads nothing).
//! [`tighten`] mends a file or directory an older version, or a careless copy, left open to
//! others, as ssh does with keys.

#![forbid(unsafe_code)]

use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::{
    DirBuilderExt as _, FileExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod faults;
pub mod frame;
pub mod private;
pub mod shadow;

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
    /// Made; an error if it exists. The same as [`Open::New`], now that every file is made
    /// readable by its owner only; kept so that a key's creation says what it needs.
    NewPrivate,
}

/// The mode of every file this crate makes: its owner reads and writes it, nobody else.
pub const FILE_MODE: u32 = 0o600;
/// The mode of every directory this crate makes.
pub const DIR_MODE: u32 = 0o700;

/// Take group and other permissions off `path` (a file or a directory), as ssh insists of
/// keys. Returns the mode it had when it was open to others (and is not any more), `None`
/// when it was already private or does not exist. Fails if it cannot be mended (it belongs
/// to someone else, say): the caller decides whether that is fatal.
pub fn tighten(path: &Path) -> io::Result<Option<u32>> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 == 0 || meta.file_type().is_symlink() {
        return Ok(None);
    }
    fs::set_permissions(path, fs::Permissions::from_mode(mode & 0o700))?;
    Ok(Some(mode))
}

/// The directory a path names a file in: `.` for a bare file name (whose `parent()` is the
/// empty path, which cannot be opened to be fsynced).
pub fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// `mkdir -p` with every directory it makes 0700 whatever the umask, and the last one (made
/// or found) made private if it was open to others: it is where secrets go.
pub fn create_private_dir_all(path: &Path) -> io::Result<()> {
    fs::DirBuilder::new().recursive(true).mode(DIR_MODE).create(path)?;
    tighten(path).map(drop)
}

/// Make an open file private (0600) if the umask or an older version left it open to others.
fn private_file(file: &fs::File) -> io::Result<()> {
    let mode = file.metadata()?.mode() & 0o7777;
    if mode & 0o077 != 0 {
        file.set_permissions(fs::Permissions::from_mode(mode & 0o700 | FILE_MODE))?;
    }
    Ok(())
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
        o.read(true).write(how != Open::Read).mode(FILE_MODE);
        match how {
            Open::Read | Open::Existing => {}
            Open::Create => {
                o.create(true).truncate(false);
            }
            Open::Truncate => {
                o.create(true).truncate(true);
            }
            Open::New | Open::NewPrivate => {
                o.create_new(true);
            }
        }
        let file = o.open(path)?;
        // `mode` applies to a file made now, less the umask; a file found (left by an older
        // version, or a copy) is made private here too, before anything is written to it.
        if !matches!(how, Open::Read | Open::Existing) {
            private_file(&file)?;
        }
        Ok(file)
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
        create_private_dir_all(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let path = if path.as_os_str().is_empty() { Path::new(".") } else { path };
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
        self.sync_dir(dir_of(path))
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
        self.sync_dir(dir_of(path))
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

    #[test]
    fn what_it_makes_is_private_and_what_it_finds_open_is_mended() {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |p: &Path| fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        let tmp = tempfile::tempdir().expect("tmp");
        let disk = Disk::os();
        let dir = tmp.path().join("a/b");
        disk.create_dir_all(&dir).expect("mkdir");
        assert_eq!(mode(&tmp.path().join("a")), 0o700);
        assert_eq!(mode(&dir), 0o700);
        let key = dir.join("key");
        disk.replace_file(&key, b"secret").expect("write");
        assert_eq!(mode(&key), 0o600);
        // Left open by an older version: opening it to write mends it first.
        fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).expect("chmod");
        drop(disk.open(&key, Open::Create).expect("open"));
        assert_eq!(mode(&key), 0o600);
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_eq!(tighten(&dir).expect("tighten"), Some(0o755));
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(tighten(&dir).expect("tighten"), None, "already private");
        assert_eq!(tighten(&dir.join("absent")).expect("tighten"), None);
    }

    #[test]
    fn a_bare_file_name_is_in_the_current_directory() {
        assert_eq!(dir_of(Path::new("w.key")), Path::new("."));
        assert_eq!(dir_of(Path::new("d/w.key")), Path::new("d"));
        Disk::os().sync_dir(Path::new("")).expect("the empty path is the current directory");
    }
}
