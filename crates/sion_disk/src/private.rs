//! Secrets stay secret on disk: a memory directory is 0700 and every file holding key material
//! 0600 (sion_disk makes them so). What an older version or a careless copy left open to other
//! users is mended when its owner opens it, with a warning that says what may have been read,
//! as ssh does with keys; a reader's process, which changes nothing, only warns.

use std::path::Path;

/// A file or directory that must be its owner's alone, and what reading it gives away.
pub struct Secret<'a> {
    pub path: &'a Path,
    pub holds: &'static str,
}

/// Check each of `secrets`; mend (`mend`) or only report those open to other users.
pub fn keep_private(secrets: &[Secret<'_>], mend: bool) {
    use std::os::unix::fs::MetadataExt as _;
    for s in secrets {
        let open = match std::fs::symlink_metadata(s.path) {
            Ok(m) if m.mode() & 0o077 != 0 && !m.file_type().is_symlink() => m.mode() & 0o7777,
            _ => continue,
        };
        if !mend {
            tracing::warn!(
                "{} is open to other users (mode {open:o}) and holds {}: its owner should run \
                 `chmod go-rwx {}` (opening the memory to write does it)",
                s.path.display(),
                s.holds,
                s.path.display()
            );
            continue;
        }
        match crate::tighten(s.path) {
            Ok(_) => tracing::warn!(
                "{} was open to other users (mode {open:o}); made private. It holds {}: anyone \
                 on this machine may have read it until now",
                s.path.display(),
                s.holds
            ),
            Err(e) => tracing::warn!(
                "{} is open to other users (mode {open:o}) and could not be made private ({e}); \
                 it holds {}",
                s.path.display(),
                s.holds
            ),
        }
    }
}

/// The secrets of a memory directory.
pub fn of_memory(dir: &Path) -> [(std::path::PathBuf, &'static str); 4] {
    [
        (dir.to_owned(), "the memory: its atoms, payloads and keys"),
        (
            dir.join("writer.key"),
            "the writer's key: whoever reads it can record and sign as this memory's writer",
        ),
        (dir.join("space"), "a sealed memory's key store"),
        (dir.join("space/keys"), "the space's epoch seeds: whoever reads them can open every sealed payload"),
    ]
}

/// Check the secrets of the memory at `dir` (see [`keep_private`]).
pub fn keep_memory_private(dir: &Path, mend: bool) {
    let secrets = of_memory(dir);
    let list: Vec<Secret<'_>> = secrets.iter().map(|(p, h)| Secret { path: p, holds: h }).collect();
    keep_private(&list, mend);
}
