//! Who may use the MCP server over HTTP: bearer tokens read from a file only its owner can
//! read, each with the roles it holds (docs/ROS.md, "Who may call the MCP tools").
//!
//! The file has one token a line, `ROLES TOKEN`: ROLES is `read`, `remember`, `forget`, `share`
//! or `admin` (all of them), or several joined by commas (`remember,forget`); every token
//! reads. A token is at least 32 characters with no space; `#` starts a comment line.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// The shortest token accepted: a token is a password no one types.
pub const MIN_TOKEN_LEN: usize = 32;

/// What a token may do beyond reading (reading — open, recall, verify, believe, audit — is
/// every token's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Grant {
    /// remember, commit, revise
    pub remember: bool,
    /// forget sealed payloads (their keys destroyed for good)
    pub forget: bool,
    /// add members to a sealed memory (who can then open its payloads)
    pub share: bool,
}

/// The role a tool needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Read,
    Remember,
    Forget,
    Share,
    /// Every role: what a tool this table does not know needs (fail closed).
    Admin,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Remember => "remember",
            Role::Forget => "forget",
            Role::Share => "share",
            Role::Admin => "admin",
        }
    }

    /// The role `tool` needs; a tool not listed here needs every role.
    pub fn of_tool(tool: &str) -> Role {
        match tool {
            "sion_memory_open"
            | "sion_memory_recall"
            | "sion_memory_verify"
            | "sion_memory_believe"
            | "sion_memory_audit" => Role::Read,
            "sion_memory_remember" | "sion_memory_commit" | "sion_memory_revise" => Role::Remember,
            "sion_memory_forget" => Role::Forget,
            "sion_memory_share" => Role::Share,
            _ => Role::Admin,
        }
    }
}

impl Grant {
    pub const ALL: Grant = Grant { remember: true, forget: true, share: true };

    pub fn allows(self, role: Role) -> bool {
        match role {
            Role::Read => true,
            Role::Remember => self.remember,
            Role::Forget => self.forget,
            Role::Share => self.share,
            Role::Admin => self == Grant::ALL,
        }
    }

    /// The roles, as the token file spells them (`read`, `read,remember`, `admin`).
    pub fn describe(self) -> String {
        if self == Grant::ALL {
            return "admin".into();
        }
        let mut roles = vec!["read"];
        for (held, name) in [(self.remember, "remember"), (self.forget, "forget"), (self.share, "share")] {
            if held {
                roles.push(name);
            }
        }
        roles.join(",")
    }

    fn parse(roles: &str) -> Result<Grant, String> {
        let mut g = Grant::default();
        for role in roles.split(',') {
            match role {
                "read" => {}
                "remember" => g.remember = true,
                "forget" => g.forget = true,
                "share" => g.share = true,
                "admin" => g = Grant::ALL,
                other => {
                    return Err(format!(
                        "unknown role {other:?} (roles: read, remember, forget, share, admin)"
                    ));
                }
            }
        }
        Ok(g)
    }
}

/// Why the tokens could not be used.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("{0}: {1}")]
    Io(PathBuf, #[source] std::io::Error),
    #[error(
        "{0} can be read or changed by other users (mode {1:04o}): the tokens in it would be anyone's; run `chmod 600 {0}`"
    )]
    Exposed(PathBuf, u32),
    #[error("{0}, line {1}: {2}")]
    Line(PathBuf, usize, String),
    #[error("{0} holds no token (lines `ROLES TOKEN`, e.g. `read <64 hex digits>`)")]
    Empty(PathBuf),
    #[error("no randomness for a new token ({0})")]
    Random(#[source] std::io::Error),
}

/// One token of a [`Tokens`] (not the token itself): what the server's bounds per holder count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Holder(usize);

/// The tokens a server accepts. Only their hashes are kept.
#[derive(Debug)]
pub struct Tokens {
    path: PathBuf,
    entries: Vec<(blake3::Hash, Grant)>,
}

impl Tokens {
    /// Read the tokens in `path`, refusing a file others can read or change.
    pub fn load(path: &Path) -> Result<Tokens, AccessError> {
        let io = |e| AccessError::Io(path.to_path_buf(), e);
        let mut file = std::fs::File::open(path).map_err(io)?;
        let mode = file.metadata().map_err(io)?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(AccessError::Exposed(path.to_path_buf(), mode));
        }
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(io)?;
        let mut entries: Vec<(blake3::Hash, Grant)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: String| AccessError::Line(path.to_path_buf(), i + 1, why);
            let mut words = line.split_whitespace();
            let (Some(roles), Some(token), None) = (words.next(), words.next(), words.next()) else {
                return Err(bad("expected `ROLES TOKEN` (e.g. `read <64 hex digits>`)".into()));
            };
            let grant = Grant::parse(roles).map_err(bad)?;
            if token.len() < MIN_TOKEN_LEN || !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(bad(format!(
                    "a token is at least {MIN_TOKEN_LEN} printable characters (this one has {})",
                    token.chars().count()
                )));
            }
            let hash = blake3::hash(token.as_bytes());
            if entries.iter().any(|(h, _)| *h == hash) {
                return Err(bad("this token is on an earlier line too".into()));
            }
            entries.push((hash, grant));
        }
        if entries.is_empty() {
            return Err(AccessError::Empty(path.to_path_buf()));
        }
        Ok(Tokens { path: path.to_path_buf(), entries })
    }

    /// Read the tokens in `path`, or, when there is no such file, write one with a new token
    /// for each of `read`, `remember` and `admin` (the directory made 0700, the file 0600).
    /// Says whether it wrote the file.
    pub fn load_or_create(path: &Path) -> Result<(Tokens, bool), AccessError> {
        match std::fs::symlink_metadata(path) {
            Ok(_) => return Ok((Tokens::load(path)?, false)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(AccessError::Io(path.to_path_buf(), e)),
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let io = |e| AccessError::Io(dir.to_path_buf(), e);
            if !dir.exists() {
                std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io)?;
                // The umask may have taken bits the mode asked for; it cannot have added any.
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
            }
        }
        let mut text = String::from(
            "# Tokens of this MCP server (docs/ROS.md, \"Who may call the MCP tools\"): `ROLES TOKEN`\n\
             # a line; roles read, remember, forget, share, admin. Give each client the least it needs.\n",
        );
        for role in ["read", "remember", "admin"] {
            text.push_str(&format!("{role} {}\n", new_token()?));
        }
        // Written whole under another name, then renamed: a reader never sees half a file.
        let tmp = path.with_extension("new");
        let io = |e| AccessError::Io(tmp.clone(), e);
        let _ = std::fs::remove_file(&tmp);
        let mut file =
            std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(io)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600)).map_err(io)?;
        file.write_all(text.as_bytes()).map_err(io)?;
        file.sync_all().map_err(io)?;
        drop(file);
        std::fs::rename(&tmp, path).map_err(|e| AccessError::Io(path.to_path_buf(), e))?;
        Ok((Tokens::load(path)?, true))
    }

    /// The roles of the token presented, if it is one of these. Every entry is compared, each
    /// in constant time (blake3's `Hash` equality), so the time taken says nothing of which
    /// bytes matched.
    pub fn grant(&self, presented: &str) -> Option<Grant> {
        self.holder(presented).map(|(_, g)| g)
    }

    /// Which token of these was presented (its line among the tokens, which the server counts
    /// sessions by) and its roles; compared as [`Tokens::grant`] does.
    pub fn holder(&self, presented: &str) -> Option<(Holder, Grant)> {
        let hash = blake3::hash(presented.as_bytes());
        let mut found = None;
        for (i, (h, grant)) in self.entries.iter().enumerate() {
            if *h == hash {
                found = Some((Holder(i), *grant));
            }
        }
        found
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many tokens of each kind (for the operator's log line).
    pub fn summary(&self) -> String {
        let mut kinds: Vec<(String, usize)> = Vec::new();
        for (_, g) in &self.entries {
            let d = g.describe();
            match kinds.iter_mut().find(|(k, _)| *k == d) {
                Some((_, n)) => *n += 1,
                None => kinds.push((d, 1)),
            }
        }
        kinds.iter().map(|(k, n)| format!("{n} {k}")).collect::<Vec<_>>().join(", ")
    }
}

/// 32 bytes from the kernel's random source, as 64 hex digits.
fn new_token() -> Result<String, AccessError> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(AccessError::Random)?;
    Ok(hex::encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str, mode: u32) -> PathBuf {
        let p = dir.join("tokens");
        std::fs::write(&p, text).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        p
    }

    #[test]
    fn roles_are_read_from_the_file_and_checked() {
        let dir = tempfile::tempdir().expect("tmp");
        let (r, w, a) = ("r".repeat(40), "w".repeat(40), "a".repeat(40));
        let p = write(dir.path(), &format!("# c\nread {r}\n\nremember,forget {w}\nadmin {a}\n"), 0o600);
        let t = Tokens::load(&p).expect("load");
        assert_eq!(t.grant(&r), Some(Grant::default()));
        assert_eq!(t.grant(&w), Some(Grant { remember: true, forget: true, share: false }));
        assert_eq!(t.grant(&a), Some(Grant::ALL));
        assert_eq!(t.grant("nope"), None);
        assert_eq!(t.grant(&format!("{r}x")), None);
        assert!(!Grant::default().allows(Role::Remember));
        assert!(Grant::default().allows(Role::Read));
        assert!(!t.grant(&w).expect("w").allows(Role::Share));
        assert!(!t.grant(&w).expect("w").allows(Role::Admin));
        assert_eq!(t.grant(&w).expect("w").describe(), "read,remember,forget");
        assert_eq!(Role::of_tool("sion_memory_forget"), Role::Forget);
        assert_eq!(Role::of_tool("sion_memory_new_tool"), Role::Admin);
    }

    #[test]
    fn a_file_others_can_read_or_a_bad_line_is_refused_naming_it() {
        let dir = tempfile::tempdir().expect("tmp");
        let good = format!("read {}\n", "r".repeat(40));
        let p = write(dir.path(), &good, 0o644);
        let e = Tokens::load(&p).expect_err("0644").to_string();
        assert!(e.contains("chmod 600") && e.contains("0644"), "{e}");
        for (text, says) in [
            ("read short\n".to_string(), "line 1"),
            (format!("reed {}\n", "r".repeat(40)), "unknown role"),
            (format!("{good}admin {}\n", "r".repeat(40)), "line 2"),
            ("# nothing\n".to_string(), "holds no token"),
            (format!("read {} extra\n", "r".repeat(40)), "ROLES TOKEN"),
        ] {
            let p = write(dir.path(), &text, 0o600);
            let e = Tokens::load(&p).expect_err(&text).to_string();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_new_file_is_the_owners_alone_whatever_the_umask() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("mcp").join("tokens");
        let (t, created) = Tokens::load_or_create(&p).expect("create");
        assert!(created);
        assert_eq!(t.summary(), "1 read, 1 read,remember, 1 admin");
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&p), 0o600);
        assert_eq!(mode(p.parent().expect("dir")), 0o700);
        let (again, created) = Tokens::load_or_create(&p).expect("load");
        assert!(!created);
        assert_eq!(again.entries.len(), 3);
    }
}
