//! A disk that fails when told, for tests: [`Faults`] does what the OS does, on real files,
//! and counts every change; the n-th change can fail with an I/O error or a full disk, or a
//! write can come back short with the disk full after it. It also keeps an account of what
//! the disk holds durably, so a test can cut the power: [`Faults::crash`] puts every file it
//! saw back as it was when last fsynced, and removes every name whose directory was not
//! fsynced since it was made (or puts back one that was removed or renamed over).
//!
//! The account follows the strict POSIX reading (ALICE's, or redb's fuzzer's): a file's bytes
//! are durable once it is fsynced, its name once its directory is. Simplifications: a
//! directory is durable once made and is not itself accounted (renaming one — the memory sets
//! a damaged index aside so — is not undone by a crash, and the names seen under its old path
//! go with it); a file is accounted by its inode, so
//! hard links are not modelled (the memory makes none).

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io;
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::{Open, Os, Storage};

/// What an injected fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The change fails with EIO (a failing disk; for an fsync, the kernel may have dropped
    /// the pages it could not write).
    Io,
    /// The change fails with ENOSPC.
    NoSpace,
    /// A write writes the first half of its bytes and says so; the disk is full from then on
    /// (every later change fails with ENOSPC). Any other change fails with ENOSPC.
    Short,
}

impl Fault {
    fn error(self) -> io::Error {
        // Linux's numbers: EIO and ENOSPC.
        io::Error::from_raw_os_error(if self == Fault::Io { 5 } else { 28 })
    }
}

#[derive(Debug)]
struct Plan {
    at: u64,
    fault: Fault,
    sticky: bool,
}

#[derive(Debug, Default)]
struct State {
    changes: u64,
    injected: u64,
    plan: Option<Plan>,
    /// A sticky fault that fired: every change fails with it.
    broken: Option<Fault>,
    /// Durable bytes of each file seen, by the number this account gave it.
    bytes: HashMap<u64, Vec<u8>>,
    /// The file each live inode is (an inode number is reused once its file is gone).
    files: HashMap<u64, u64>,
    next_file: u64,
    /// Every name seen, and the file the disk holds durably under it (None: no file).
    names: BTreeMap<PathBuf, Option<u64>>,
}

/// What a change may do, once counted.
enum Verdict {
    Go,
    Fail(io::Error),
    Short,
}

/// A test backend: the OS, with faults when told and a power cut on demand.
#[derive(Debug, Default)]
pub struct Faults {
    state: Mutex<State>,
}

fn inode(path: &Path) -> Option<u64> {
    fs::symlink_metadata(path).ok().filter(|m| m.is_file()).map(|m| m.ino())
}

impl State {
    /// The file at `path` now, if any; one not seen before was there before this account
    /// began, so what it holds is durable.
    fn file_at(&mut self, path: &Path) -> io::Result<Option<u64>> {
        let Some(ino) = inode(path) else { return Ok(None) };
        if let Some(&f) = self.files.get(&ino) {
            return Ok(Some(f));
        }
        let bytes = fs::read(path)?;
        Ok(Some(self.new_file(ino, bytes)))
    }

    fn new_file(&mut self, ino: u64, durable: Vec<u8>) -> u64 {
        let f = self.next_file;
        self.next_file += 1;
        self.files.insert(ino, f);
        self.bytes.insert(f, durable);
        f
    }
}

fn read_all(file: &fs::File) -> io::Result<Vec<u8>> {
    let len = file.metadata()?.len() as usize;
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, 0)?;
    Ok(buf)
}

impl Faults {
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Make change number `at` (counted from 0 over every change since this backend was made)
    /// fail as `fault` says; `sticky`: every change after it fails the same way too.
    pub fn fail_at(&self, at: u64, fault: Fault, sticky: bool) {
        self.state().plan = Some(Plan { at, fault, sticky });
    }

    /// Changes asked of the disk so far (failed ones included).
    pub fn changes(&self) -> u64 {
        self.state().changes
    }

    /// Faults injected so far.
    pub fn injected(&self) -> u64 {
        self.state().injected
    }

    /// No more faults: the disk works again (what failed stays as it was left).
    pub fn heal(&self) {
        let mut s = self.state();
        s.plan = None;
        s.broken = None;
    }

    /// Cut the power: every file seen is put back as the disk holds it durably, and the
    /// account starts afresh from what is there. Faults are healed. Call it once nothing has
    /// the files open for writing (drop the memory first), as after a real crash.
    pub fn crash(&self) -> io::Result<()> {
        let mut s = self.state();
        for (path, durable) in std::mem::take(&mut s.names) {
            if path.is_dir() || !path.parent().is_some_and(Path::is_dir) {
                // Directories are outside the account: a rename of one moves what it holds,
                // and a name whose directory was renamed away or removed went with it.
                continue;
            }
            match durable {
                Some(file) => {
                    let bytes = s.bytes.get(&file).cloned().unwrap_or_default();
                    fs::write(&path, bytes)?;
                }
                None => match fs::remove_file(&path) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                },
            }
        }
        s.bytes.clear();
        s.files.clear();
        s.plan = None;
        s.broken = None;
        Ok(())
    }

    /// Take note of `paths` as they are now if they are new to the account (what was there
    /// before is durable).
    fn note(s: &mut State, paths: &[&Path]) -> io::Result<()> {
        for path in paths {
            if !s.names.contains_key(*path) {
                let file = s.file_at(path)?;
                s.names.insert(path.to_path_buf(), file);
            }
        }
        Ok(())
    }

    /// Count a change to `paths` and say what it may do.
    fn change(&self, paths: &[&Path]) -> io::Result<(MutexGuard<'_, State>, Verdict)> {
        let mut s = self.state();
        Self::note(&mut s, paths)?;
        let n = s.changes;
        s.changes += 1;
        if let Some(f) = s.broken {
            return Ok((s, Verdict::Fail(f.error())));
        }
        let verdict = match &s.plan {
            Some(p) if p.at == n => {
                let (fault, sticky) = (p.fault, p.sticky);
                s.injected += 1;
                if fault == Fault::Short {
                    s.broken = Some(Fault::NoSpace);
                    Verdict::Short
                } else {
                    if sticky {
                        s.broken = Some(fault);
                    }
                    Verdict::Fail(fault.error())
                }
            }
            _ => Verdict::Go,
        };
        Ok((s, verdict))
    }

    fn plain(&self, paths: &[&Path]) -> io::Result<MutexGuard<'_, State>> {
        match self.change(paths)? {
            (s, Verdict::Go) => Ok(s),
            (_, Verdict::Fail(e)) => Err(e),
            (_, Verdict::Short) => Err(Fault::NoSpace.error()),
        }
    }
}

impl Storage for Faults {
    fn open(&self, path: &Path, how: Open) -> io::Result<fs::File> {
        if matches!(how, Open::Read | Open::Existing) {
            // Changes nothing; noted so that later writes are accounted.
            Self::note(&mut self.state(), &[path])?;
            return Os.open(path, how);
        }
        let mut s = self.plain(&[path])?;
        let existed = inode(path).is_some();
        let file = Os.open(path, how)?;
        if !existed {
            // A new file: nothing of it is durable, whatever its inode number held before.
            s.new_file(file.metadata()?.ino(), Vec::new());
        }
        Ok(file)
    }

    fn write_at(&self, file: &fs::File, path: &Path, bytes: &[u8], offset: u64) -> io::Result<usize> {
        match self.change(&[path])? {
            (_, Verdict::Go) => Os.write_at(file, path, bytes, offset),
            (_, Verdict::Fail(e)) => Err(e),
            (_, Verdict::Short) if bytes.len() > 1 => {
                Os.write_at(file, path, &bytes[..bytes.len() / 2], offset)
            }
            (_, Verdict::Short) => Err(Fault::NoSpace.error()),
        }
    }

    fn set_len(&self, file: &fs::File, path: &Path, len: u64) -> io::Result<()> {
        let _s = self.plain(&[path])?;
        Os.set_len(file, path, len)
    }

    fn sync(&self, file: &fs::File, path: &Path) -> io::Result<()> {
        let mut s = self.plain(&[path])?;
        Os.sync(file, path)?;
        let ino = file.metadata()?.ino();
        let bytes = read_all(file)?;
        match s.files.get(&ino) {
            Some(&f) => {
                s.bytes.insert(f, bytes);
            }
            None => {
                s.new_file(ino, bytes);
            }
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.plain(&[from, to])?;
        let replaced = inode(to);
        Os.rename(from, to)?;
        // The file renamed over is gone once nothing names it; its inode number may come back.
        if let Some(ino) = replaced {
            s.files.remove(&ino);
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut s = self.plain(&[path])?;
        let ino = inode(path);
        Os.remove_file(path)?;
        if let Some(ino) = ino {
            s.files.remove(&ino);
        }
        Ok(())
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let _s = self.plain(&[])?;
        Os.create_dir_all(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut s = self.plain(&[])?;
        Os.sync_dir(path)?;
        // The names in it are now as they are.
        let names: Vec<PathBuf> = s.names.keys().filter(|p| p.parent() == Some(path)).cloned().collect();
        for name in names {
            let file = s.file_at(&name)?;
            s.names.insert(name, file);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::Disk;

    #[test]
    fn a_crash_keeps_what_was_fsynced_and_the_names_whose_directory_was() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path();
        fs::write(dir.join("old"), b"before").expect("write");
        let faults = Arc::new(Faults::new());
        let disk = Disk::new(faults.clone());

        let old = disk.open(&dir.join("old"), Open::Existing).expect("open");
        old.write_all_at(b"AFTER!", 0).expect("write");
        old.sync_data().expect("sync");
        old.write_all_at(b" and more", 6).expect("write, not synced");

        let synced = disk.open(&dir.join("synced"), Open::New).expect("new");
        synced.write_all_at(b"kept", 0).expect("write");
        synced.sync_data().expect("sync");
        disk.sync_dir(dir).expect("sync dir");

        let nameless = disk.open(&dir.join("nameless"), Open::New).expect("new");
        nameless.write_all_at(b"lost", 0).expect("write");
        nameless.sync_data().expect("synced, but its directory is not");

        disk.write_file(&dir.join("tmp"), b"new").expect("write");
        disk.rename(&dir.join("tmp"), &dir.join("synced")).expect("rename over, dir not synced");
        drop((old, synced, nameless));

        faults.crash().expect("crash");
        assert_eq!(fs::read(dir.join("old")).expect("old"), b"AFTER!");
        assert_eq!(fs::read(dir.join("synced")).expect("synced"), b"kept", "the rename is undone");
        assert!(!dir.join("nameless").exists());
        assert!(!dir.join("tmp").exists());
    }

    #[test]
    fn a_crash_leaves_the_names_of_a_directory_renamed_away_with_it() {
        // The memory sets a damaged index directory aside; if the power goes before the new
        // one is made, the names the account saw under the old path have no directory.
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("index");
        fs::create_dir(&dir).expect("mkdir");
        let faults = Arc::new(Faults::new());
        let disk = Disk::new(faults.clone());
        disk.write_file(&dir.join("checkpoint"), b"v1").expect("write");
        disk.sync_dir(&dir).expect("sync dir");
        disk.rename(&dir, &tmp.path().join("index.damaged")).expect("set aside");
        faults.crash().expect("crash");
        assert!(!dir.exists(), "a directory's rename is not undone");
        assert_eq!(fs::read(tmp.path().join("index.damaged/checkpoint")).expect("moved"), b"v1");
    }

    #[test]
    fn the_nth_change_fails_and_a_short_write_fills_the_disk() {
        let tmp = tempfile::tempdir().expect("tmp");
        let faults = Arc::new(Faults::new());
        let disk = Disk::new(faults.clone());
        let f = disk.open(&tmp.path().join("f"), Open::New).expect("new"); // change 0
        faults.fail_at(2, Fault::Io, false);
        f.write_all_at(b"one", 0).expect("change 1");
        let e = f.sync_data().expect_err("change 2 fails");
        assert_eq!(e.raw_os_error(), Some(5));
        f.sync_data().expect("not sticky: change 3 works");
        faults.fail_at(4, Fault::Short, true);
        let e = f.write_all_at(b"0123456789", 0).expect_err("half written, then the disk is full");
        assert_eq!(e.raw_os_error(), Some(28));
        assert_eq!(fs::read(tmp.path().join("f")).expect("read"), b"01234");
        assert!(f.sync_data().is_err(), "full from then on");
        assert_eq!(faults.injected(), 2);
        faults.heal();
        f.sync_data().expect("healed");
    }
}
