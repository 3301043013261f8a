//! What `ros2 bag record` leaves: a directory with `metadata.yaml` and the bag's files (split
//! by size or duration: `NAME_0.mcap`, `NAME_1.mcap`, …), or a single `.mcap` file. [`parts`]
//! finds the files to replay, in order, and refuses what is not a bag (or a bag in a storage
//! this reader does not read) before anything is opened for writing.

use std::io::Read as _;
use std::path::{Path, PathBuf};

/// The largest metadata.yaml read (rosbag2 writes a few KiB; one per topic and file).
const MAX_METADATA_BYTES: u64 = 16 << 20;
/// The most files a bag may list.
const MAX_PARTS: usize = 100_000;

/// Where a bag's messages are, in the order they are replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BagParts {
    /// The MCAP files, in order.
    pub files: Vec<PathBuf>,
    /// How the order was found: `metadata.yaml`, the files' numbering, or a single file.
    pub source: PartsSource,
}

/// How [`parts`] found a bag's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PartsSource {
    /// One `.mcap` file.
    File,
    /// A rosbag2 directory's metadata.yaml (`relative_file_paths`).
    Metadata,
    /// A directory without metadata.yaml (a recorder that died before writing it): its `.mcap`
    /// files by the number at the end of their names.
    Numbering,
}

/// Why a path is not a bag this reader replays.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BagPathError {
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{path} is not a bag: {why}")]
    NotABag { path: PathBuf, why: String },
    #[error(
        "{path}: a rosbag2 bag stored as {storage:?}; only MCAP is read (convert it: `ros2 bag convert -i {path} -o out.yaml` with storage_id: mcap)"
    )]
    Storage { path: PathBuf, storage: String },
    #[error(
        "{path}: the bag's files are compressed whole ({mode}, {format}); decompress them first (`ros2 bag decompress`)"
    )]
    Compressed { path: PathBuf, mode: String, format: String },
    #[error("{path}, line {line}: {why}")]
    Metadata { path: PathBuf, line: usize, why: String },
}

/// The MCAP magic: every MCAP file begins with it.
const MAGIC: &[u8; 8] = b"\x89MCAP0\r\n";

/// The files of the bag at `path` (a `.mcap` file, or a rosbag2 directory), each checked to
/// begin as an MCAP file does.
pub fn parts(path: &Path) -> Result<BagParts, BagPathError> {
    let io = |error| BagPathError::Io { path: path.to_owned(), error };
    let meta = std::fs::metadata(path).map_err(io)?;
    let parts = if meta.is_dir() {
        let metadata = path.join("metadata.yaml");
        if metadata.exists() {
            BagParts { files: from_metadata(path, &metadata)?, source: PartsSource::Metadata }
        } else {
            BagParts { files: by_numbering(path)?, source: PartsSource::Numbering }
        }
    } else {
        BagParts { files: vec![path.to_owned()], source: PartsSource::File }
    };
    for file in &parts.files {
        check_magic(file)?;
    }
    Ok(parts)
}

fn check_magic(file: &Path) -> Result<(), BagPathError> {
    let mut head = [0u8; 8];
    let mut f =
        std::fs::File::open(file).map_err(|error| BagPathError::Io { path: file.to_owned(), error })?;
    let n = f.read(&mut head).map_err(|error| BagPathError::Io { path: file.to_owned(), error })?;
    if n < 8 || head != *MAGIC {
        let why = if head.starts_with(b"SQLite format 3") || head.starts_with(b"SQLite f") {
            "it is an SQLite database (rosbag2's sqlite3 storage): convert it to MCAP with `ros2 bag convert`"
                .to_owned()
        } else {
            format!("it does not begin with the MCAP magic bytes (it begins {:02x?})", &head[..n])
        };
        return Err(BagPathError::NotABag { path: file.to_owned(), why });
    }
    Ok(())
}

/// `relative_file_paths` of a rosbag2 metadata.yaml, checked: MCAP storage, no whole-file
/// compression, each path a file inside the bag's directory.
fn from_metadata(dir: &Path, metadata: &Path) -> Result<Vec<PathBuf>, BagPathError> {
    let io = |error| BagPathError::Io { path: metadata.to_owned(), error };
    let len = std::fs::metadata(metadata).map_err(io)?.len();
    if len > MAX_METADATA_BYTES {
        return Err(BagPathError::Metadata {
            path: metadata.to_owned(),
            line: 0,
            why: format!("{len} bytes, more than the {MAX_METADATA_BYTES} read"),
        });
    }
    let text = std::fs::read_to_string(metadata).map_err(io)?;
    let read = Metadata::read(&text).map_err(|(line, why)| BagPathError::Metadata {
        path: metadata.to_owned(),
        line,
        why,
    })?;
    if !read.storage.is_empty() && read.storage != "mcap" {
        return Err(BagPathError::Storage { path: dir.to_owned(), storage: read.storage });
    }
    if !read.compression_mode.is_empty() && read.compression_mode.eq_ignore_ascii_case("file") {
        return Err(BagPathError::Compressed {
            path: dir.to_owned(),
            mode: read.compression_mode,
            format: read.compression_format,
        });
    }
    if read.files.is_empty() {
        return Err(BagPathError::Metadata {
            path: metadata.to_owned(),
            line: read.files_line,
            why: "relative_file_paths lists no file".into(),
        });
    }
    read.files
        .into_iter()
        .map(|(line, name)| {
            // A file of the bag is inside its directory: a hostile metadata.yaml does not send the
            // replay elsewhere.
            if !inside(&name) {
                return Err(BagPathError::Metadata {
                    path: metadata.to_owned(),
                    line,
                    why: format!("{name:?} is not a file name inside the bag's directory"),
                });
            }
            Ok(dir.join(&name))
        })
        .collect()
}

/// Whether a name from metadata.yaml is a file inside the bag's directory: no `..`, no root,
/// not empty.
fn inside(name: &str) -> bool {
    !name.is_empty() && Path::new(name).components().all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// The files a metadata.yaml's text lists, each checked to be inside the bag's directory, or
/// why not (`line N: …`): what `sion replay DIR` reads of it (the fuzz target's entry).
pub fn metadata_files(text: &str) -> Result<Vec<String>, String> {
    let read = Metadata::read(text).map_err(|(line, why)| format!("line {line}: {why}"))?;
    read.files
        .into_iter()
        .map(
            |(line, name)| {
                if inside(&name) { Ok(name) } else { Err(format!("line {line}: {name:?} is outside")) }
            },
        )
        .collect()
}

/// The `.mcap` files of a directory without metadata, by the number their names end in
/// (`run_0.mcap`, `run_1.mcap`, …, `run_10.mcap`), then by name.
fn by_numbering(dir: &Path) -> Result<Vec<PathBuf>, BagPathError> {
    let io = |error| BagPathError::Io { path: dir.to_owned(), error };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "mcap") && path.is_file() {
            files.push(path);
            if files.len() > MAX_PARTS {
                return Err(BagPathError::NotABag {
                    path: dir.to_owned(),
                    why: format!("more than {MAX_PARTS} .mcap files"),
                });
            }
        }
    }
    if files.is_empty() {
        return Err(BagPathError::NotABag {
            path: dir.to_owned(),
            why: "a directory with no metadata.yaml and no .mcap file".into(),
        });
    }
    let number = |p: &PathBuf| -> Option<u64> {
        let stem = p.file_stem()?.to_str()?;
        let digits: String = stem.chars().rev().take_while(char::is_ascii_digit).collect();
        digits.chars().rev().collect::<String>().parse().ok()
    };
    files.sort_by(|a, b| number(a).cmp(&number(b)).then_with(|| a.cmp(b)));
    Ok(files)
}

/// The three things read from a rosbag2 metadata.yaml (rosbag2_bagfile_information, versions
/// 1 to 9): the storage, the whole-file compression, and the files in order.
#[derive(Debug, Default)]
struct Metadata {
    storage: String,
    compression_mode: String,
    compression_format: String,
    files_line: usize,
    files: Vec<(usize, String)>,
}

impl Metadata {
    /// rosbag2 writes this YAML with yaml-cpp: block mappings, `key: value` lines, and block
    /// sequences of plain or quoted scalars. Only the keys named above are read; the rest is
    /// passed over. A key found twice, or a sequence item that is not a scalar, is refused.
    fn read(text: &str) -> Result<Self, (usize, String)> {
        let mut m = Metadata::default();
        let mut list_indent: Option<usize> = None;
        let mut seen = [false; 4];
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let content = raw.trim_end();
            let trimmed = content.trim_start();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let indent = content.len() - trimmed.len();
            if let Some(key_indent) = list_indent {
                if let Some(item) = trimmed.strip_prefix("- ").or_else(|| (trimmed == "-").then_some(""))
                    && indent >= key_indent
                {
                    if item.contains(": ") || item.ends_with(':') {
                        return Err((
                            line,
                            "relative_file_paths holds something other than file names".into(),
                        ));
                    }
                    if m.files.len() >= MAX_PARTS {
                        return Err((line, format!("more than {MAX_PARTS} files")));
                    }
                    m.files.push((line, scalar(item)));
                    continue;
                }
                list_indent = None;
            }
            let Some((key, value)) = trimmed.split_once(':') else { continue };
            let slot = match key.trim() {
                "storage_identifier" => 0,
                "compression_mode" => 1,
                "compression_format" => 2,
                "relative_file_paths" => 3,
                _ => continue,
            };
            if seen[slot] {
                return Err((line, format!("{} is given twice", key.trim())));
            }
            seen[slot] = true;
            let value = value.trim();
            match slot {
                0 => m.storage = scalar(value),
                1 => m.compression_mode = scalar(value),
                2 => m.compression_format = scalar(value),
                _ => {
                    m.files_line = line;
                    if value.starts_with('[') {
                        // A flow sequence: [a.mcap, b.mcap].
                        let inner = value.trim_start_matches('[').trim_end_matches(']');
                        m.files = inner
                            .split(',')
                            .map(str::trim)
                            .filter(|s| !s.is_empty())
                            .map(|s| (line, scalar(s)))
                            .collect();
                    } else if value.is_empty() {
                        list_indent = Some(indent);
                    } else {
                        return Err((line, "relative_file_paths is not a list".into()));
                    }
                }
            }
        }
        Ok(m)
    }
}

/// A plain or quoted YAML scalar's text.
fn scalar(s: &str) -> String {
    let s = s.trim();
    if s.len() >= 2
        && ((s.starts_with('"') && s.ends_with('"')) || (s.starts_with('\'') && s.ends_with('\'')))
    {
        let inner = &s[1..s.len() - 1];
        return if s.starts_with('\'') { inner.replace("''", "'") } else { inner.replace("\\\"", "\"") };
    }
    s.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROSBAG2: &str = r#"rosbag2_bagfile_information:
  version: 9
  storage_identifier: mcap
  duration:
    nanoseconds: 2000000000
  starting_time:
    nanoseconds_since_epoch: 1767225600000000000
  message_count: 20
  topics_with_message_count:
    - topic_metadata:
        name: /pose
        type: geometry_msgs/msg/PoseStamped
        serialization_format: cdr
        offered_qos_profiles:
          []
        type_description_hash: RIHS01_abc
      message_count: 20
  compression_format: ""
  compression_mode: ""
  relative_file_paths:
    - run_0.mcap
    - "run_1.mcap"
  files:
    - path: run_0.mcap
      starting_time:
        nanoseconds_since_epoch: 1767225600000000000
      duration:
        nanoseconds: 1000000000
      message_count: 10
  custom_data: ~
  ros_distro: kilted
"#;

    #[test]
    fn reads_what_rosbag2_writes() {
        let m = Metadata::read(ROSBAG2).expect("reads");
        assert_eq!(m.storage, "mcap");
        assert_eq!(m.compression_mode, "");
        assert_eq!(m.files.iter().map(|(_, f)| f.as_str()).collect::<Vec<_>>(), ["run_0.mcap", "run_1.mcap"]);
    }

    #[test]
    fn refuses_what_it_cannot_replay() {
        let dir = tempfile::tempdir().expect("tmp");
        let write = |text: &str| std::fs::write(dir.path().join("metadata.yaml"), text).expect("write");
        write(&ROSBAG2.replace("storage_identifier: mcap", "storage_identifier: sqlite3"));
        assert!(matches!(parts(dir.path()), Err(BagPathError::Storage { .. })));
        write(&ROSBAG2.replace("compression_mode: \"\"", "compression_mode: FILE"));
        assert!(matches!(parts(dir.path()), Err(BagPathError::Compressed { .. })));
        write(&ROSBAG2.replace("- run_0.mcap", "- ../../etc/passwd"));
        let e = parts(dir.path()).unwrap_err().to_string();
        assert!(e.contains("line 21") && e.contains("inside the bag's directory"), "{e}");
        write(ROSBAG2);
        std::fs::write(dir.path().join("run_0.mcap"), b"SQLite format 3\0").expect("write");
        let e = parts(dir.path()).unwrap_err().to_string();
        assert!(e.contains("sqlite3 storage"), "{e}");
        std::fs::write(dir.path().join("run_0.mcap"), MAGIC).expect("write");
        std::fs::write(dir.path().join("run_1.mcap"), MAGIC).expect("write");
        let p = parts(dir.path()).expect("parts");
        assert_eq!(p.source, PartsSource::Metadata);
        assert_eq!(p.files, [dir.path().join("run_0.mcap"), dir.path().join("run_1.mcap")]);
        // Without metadata: by the number the names end in.
        std::fs::remove_file(dir.path().join("metadata.yaml")).expect("rm");
        std::fs::write(dir.path().join("run_10.mcap"), MAGIC).expect("write");
        let p = parts(dir.path()).expect("parts");
        assert_eq!(p.source, PartsSource::Numbering);
        let names: Vec<_> =
            p.files.iter().map(|f| f.file_name().and_then(|n| n.to_str()).unwrap_or("")).collect();
        assert_eq!(names, ["run_0.mcap", "run_1.mcap", "run_10.mcap"]);
        // A text file is not a bag.
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "hello").expect("write");
        assert!(matches!(parts(&text), Err(BagPathError::NotABag { .. })));
    }
}
