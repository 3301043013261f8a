//! A memory directory whose files a disk, a crash or a person changed: bytes overwritten,
//! files cut short, replaced by anything or deleted (log segments, offsets, nodes, checkpoints,
//! the ledger journal, the index store, blob packs). Opening it must recover or refuse with a
//! reason, never panic; a memory that opens must audit and read back without panicking.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sion_store::memory::Memory;

/// A small committed memory made once; each input damages a copy of it.
fn template() -> &'static (tempfile::TempDir, Vec<PathBuf>) {
    static T: OnceLock<(tempfile::TempDir, Vec<PathBuf>)> = OnceLock::new();
    T.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tmp");
        let data = dir.path().join("m");
        let mut memory = Memory::options(&data).create().expect("create");
        let config = sion_sim::WarehouseConfig { seed: 7, ..Default::default() };
        let atoms: Vec<_> = sion_sim::Warehouse::new(config).take(300).collect();
        memory.remember(atoms).expect("remember");
        memory.commit(false).expect("commit");
        drop(memory);
        let mut files = Vec::new();
        walk(&data, &data, &mut files);
        files.sort();
        (dir, files)
    })
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(root, &path, out);
        } else if path.file_name().is_some_and(|n| n != "LOCK") {
            out.push(path.strip_prefix(root).expect("under root").to_owned());
        }
    }
}

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir").flatten() {
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if src.is_dir() {
            copy(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).expect("copy");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // A damaged duplicate filter can make redb panic; the store catches that and rebuilds the
    // filter (log/dedup.rs). libFuzzer's hook aborts on any panic, caught or not, so it is
    // replaced by one that only reports: a panic that escapes still aborts the run (libfuzzer-sys
    // checks the input's result), one the store catches does not.
    static HOOK: OnceLock<()> = OnceLock::new();
    HOOK.get_or_init(|| std::panic::set_hook(Box::new(|info| eprintln!("caught or not: {info}"))));
    let (template, files) = template();
    let work = tempfile::tempdir().expect("tmp");
    let dir = work.path().join("m");
    copy(&template.path().join("m"), &dir);
    // Operations of 7 bytes plus payload: file, kind, offset (u32), payload length.
    let mut rest = data;
    while rest.len() >= 7 {
        let path = dir.join(&files[usize::from(rest[0]) % files.len()]);
        let kind = rest[1] % 4;
        let at = u64::from(u32::from_le_bytes([rest[2], rest[3], rest[4], rest[5]]));
        let n = usize::from(rest[6]).min(rest.len() - 7);
        let payload = &rest[7..7 + n];
        rest = &rest[7 + n..];
        let Ok(bytes) = std::fs::read(&path) else { continue };
        let changed = match kind {
            0 if !bytes.is_empty() => {
                let mut b = bytes.clone();
                let at = (at as usize) % b.len();
                for (i, x) in payload.iter().enumerate() {
                    if let Some(y) = b.get_mut(at + i) {
                        *y ^= x | 1;
                    }
                }
                Some(b)
            }
            1 => Some(bytes[..(at as usize).min(bytes.len())].to_vec()),
            2 => Some(payload.to_vec()),
            3 => {
                let _ = std::fs::remove_file(&path);
                None
            }
            _ => None,
        };
        if let Some(b) = changed {
            std::fs::write(&path, b).expect("write");
        }
    }
    let Ok(memory) = Memory::options(&dir).open() else { return };
    let _ = memory.audit(|_| {});
    for item in memory.log().scan(0) {
        if item.is_err() {
            break;
        }
    }
});
