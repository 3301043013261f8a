//! Repairing a log whose segments are damaged (docs/LOG.md, "Repair"): everything before the
//! first damaged record is kept; the damaged record and all after it are moved aside into
//! `log/torn/`, never deleted; the derived files are made again from what is kept.

use std::fs;
use std::path::{Path, PathBuf};

use sion_disk::{Disk, Open};

use super::segment::{self, HEADER_LEN};
use super::{LogError, Survey, copy_tail, io_err, survey, sync_dir};

/// What [`repair`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogRepair {
    /// Atoms kept: positions `0..kept`.
    pub kept: u64,
    /// The first damage, as [`survey`] found it: the segment, the byte in it and what is wrong.
    pub damage: Option<(PathBuf, u64, String)>,
    /// Files moved aside, with the bytes each holds: the damaged segment's tail from the
    /// damage on (copied, then cut off the segment), and every later segment (moved whole).
    pub set_aside: Vec<(PathBuf, u64)>,
    /// Whole records among what was set aside (read by each record's length past the damage,
    /// and in the later segments): what a person could still take back from `log/torn/`.
    pub whole_set_aside: u64,
}

/// What repairing would do, changing nothing: the survey of the segments.
pub fn plan(dir: &Path) -> Result<Survey, LogError> {
    survey(dir)
}

/// Repair the log in `dir` (see the module's comment). The log must not be open; its lock is
/// taken for the while. Opening the log afterwards derives `offsets`, `nodes`, the checkpoint
/// and the duplicate filter again from the segments kept.
pub fn repair(dir: &Path, disk: &Disk) -> Result<LogRepair, LogError> {
    let _lock = sion_disk::shadow::lock_dir(dir)
        .map_err(io_err("opening the log's lock file"))?
        .ok_or_else(|| LogError::Locked(dir.to_owned()))?;
    let found = survey(dir)?;
    let mut out = LogRepair { kept: found.whole, damage: found.damage.clone(), ..LogRepair::default() };
    let Some((damaged, byte, _)) = found.damage else {
        return Ok(out);
    };
    out.whole_set_aside = found.whole_after;
    let segments = dir.join("segments");
    let torn = dir.join("torn");
    disk.create_dir_all(&torn).map_err(io_err(format!("creating {}", torn.display())))?;
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut past_damage = false;
    for first in super::segment_firsts(&segments)? {
        let path = segment::segment_path(&segments, first);
        let len = fs::metadata(&path).map_err(io_err(format!("reading {}", path.display())))?.len();
        if path == damaged && byte > HEADER_LEN {
            // Its records before the damage stay; the rest is copied aside, then cut.
            let aside = super::unused_name(torn.join(format!("{}-at-{byte}", name(&path))));
            let file =
                disk.open(&path, Open::Existing).map_err(io_err(format!("opening {}", path.display())))?;
            copy_tail(disk, &file, byte, len, &aside)
                .map_err(io_err(format!("writing {}", aside.display())))?;
            sync_dir(disk, &torn)?;
            file.set_len(byte)
                .and_then(|()| file.sync_all())
                .map_err(io_err(format!("cutting {}", path.display())))?;
            out.set_aside.push((aside, len - byte));
            past_damage = true;
        } else if path == damaged || past_damage {
            // Damaged at its header (or its first record), or after the damage: moved whole.
            let aside = super::unused_name(torn.join(name(&path)));
            disk.rename(&path, &aside).map_err(io_err(format!("moving {} aside", path.display())))?;
            out.set_aside.push((aside, len));
            past_damage = true;
        }
    }
    sync_dir(disk, &torn)?;
    sync_dir(disk, &segments)?;
    // A log needs its first segment: if that went aside, an empty one begins it again.
    if !segment::segment_path(&segments, 0).exists() {
        super::new_segment(disk, &segments, 0)?;
        sync_dir(disk, &segments)?;
    }
    // The derived files describe what was set aside too: made again at the next open.
    for derived in ["offsets", "nodes", "checkpoint"] {
        let path = dir.join(derived);
        if path.exists() {
            disk.remove_file(&path).map_err(io_err(format!("removing {}", path.display())))?;
        }
    }
    sync_dir(disk, dir)?;
    Ok(out)
}
