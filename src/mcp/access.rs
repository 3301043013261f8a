//! Who may use the MCP server over HTTP: bearer tokens read from a file only its owner can
//! read, each with the roles it holds, or, over a Unix socket, the peer's user id as the kernel
//! reports it, with the roles given to that user (docs/ROS.md, "Who may call the MCP tools").
//!
//! The file has one token a line, `ROLES TOKEN`: ROLES is `read`, `remember`, `forget`, `share`
//! or `admin` (all of them), or several joined by commas (`remember,forget`); every token
//! reads. A token is at least 32 characters with no space; `#` starts a comment line. The file
//! is refused, as ssh refuses a private key, when it is a symbolic link, not a plain file, not
//! the server's user's, readable or writable by others, or in a directory others can change:
//! tokens others may have read are not repaired in place but replaced.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
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
            | "sion_memory_last_seen"
            | "sion_memory_count"
            | "sion_memory_nearest"
            | "sion_memory_verify"
            | "sion_memory_believe"
            | "sion_memory_audit"
            | "sion_fleet_recall" => Role::Read,
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

    /// Roles as the token file spells them (`read`, `remember,forget`, `admin`).
    pub fn parse(roles: &str) -> Result<Grant, String> {
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
#[non_exhaustive]
pub enum AccessError {
    #[error("{0}: {1}")]
    Io(PathBuf, #[source] std::io::Error),
    #[error(
        "{0} can be read or changed by other users (mode {1:04o}): the tokens in it would be anyone's; run `chmod 600 {0}` (and, if others may have read it, write new tokens)"
    )]
    Exposed(PathBuf, u32),
    #[error(
        "{0} is a symbolic link: a token file is read only where it is, so that whoever can change the link cannot swap the tokens; name the file itself (`--tokens $(readlink -f {0})`, or `mcp_tokens` for the node)"
    )]
    Symlink(PathBuf),
    #[error("{0} is not a plain file; a token file is a plain file of mode 0600")]
    NotAFile(PathBuf),
    #[error(
        "{0} belongs to uid {1}, not to this server's user (uid {2}): its owner can change the tokens; as root, `chown {2} {0} && chmod 600 {0}`, or write a token file of your own"
    )]
    Owner(PathBuf, u32, u32),
    #[error(
        "{0}, the directory of the token file, can be changed by others (uid {1}, mode {2:04o}): they could replace the file; `chmod go-w {0}` (owned by this server's user or root), or keep the tokens in a directory of their own"
    )]
    Directory(PathBuf, u32, u32),
    #[error("{0} is over {1} bytes: not a token file")]
    TooLarge(PathBuf, u64),
    #[error("which user this server runs as ({0}): /proc/self/status")]
    Whoami(#[source] std::io::Error),
    #[error("{0}, line {1}: {2}")]
    Line(PathBuf, usize, String),
    #[error("{0} holds no token (lines `ROLES TOKEN`, e.g. `read <64 hex digits>`)")]
    Empty(PathBuf),
    #[error("no randomness for a new token ({0})")]
    Random(#[source] std::io::Error),
}

/// Who holds a session: one token of a [`Tokens`] (not the token itself), or one user over a
/// Unix socket; what the server's bounds per holder count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Holder(Who);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Who {
    Token(usize),
    Uid(u32),
}

/// The largest token file read (a token a line: thousands of tokens).
pub const MAX_TOKEN_FILE: u64 = 1 << 20;

/// The tokens a server accepts. Only their hashes are kept.
#[derive(Debug)]
pub struct Tokens {
    path: PathBuf,
    entries: Vec<(blake3::Hash, Grant)>,
}

impl Tokens {
    /// Read the tokens in `path`, refusing a file others can read or change: a symbolic link
    /// (not followed), anything but a plain file, a file of another user, one with any group or
    /// other bit, or one in a directory others can write to.
    pub fn load(path: &Path) -> Result<Tokens, AccessError> {
        let io = |e| AccessError::Io(path.to_path_buf(), e);
        let me = effective_uid()?;
        // O_NOFOLLOW: the check and the read are of the same file, not of what a link named
        // when it was checked; O_NONBLOCK: a FIFO put there cannot hang the open.
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => AccessError::Symlink(path.to_path_buf()),
                _ => io(e),
            })?;
        let meta = file.metadata().map_err(io)?;
        if !meta.file_type().is_file() {
            return Err(AccessError::NotAFile(path.to_path_buf()));
        }
        if meta.uid() != me {
            return Err(AccessError::Owner(path.to_path_buf(), meta.uid(), me));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(AccessError::Exposed(path.to_path_buf(), mode));
        }
        check_directory(path, me)?;
        if meta.len() > MAX_TOKEN_FILE {
            return Err(AccessError::TooLarge(path.to_path_buf(), MAX_TOKEN_FILE));
        }
        let mut text = String::new();
        (&mut file).take(MAX_TOKEN_FILE + 1).read_to_string(&mut text).map_err(io)?;
        if text.len() as u64 > MAX_TOKEN_FILE {
            return Err(AccessError::TooLarge(path.to_path_buf(), MAX_TOKEN_FILE));
        }
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
                found = Some((Holder(Who::Token(i)), *grant));
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

/// The directory holding `path` must be changeable only by this server's user or root: whoever
/// else can write to it can rename another file into the token file's place.
fn check_directory(path: &Path, me: u32) -> Result<(), AccessError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let meta = std::fs::metadata(dir).map_err(|e| AccessError::Io(dir.to_path_buf(), e))?;
    let mode = meta.permissions().mode() & 0o7777;
    // A sticky directory (/tmp) lets no one else rename over a file they do not own.
    let others_write = mode & 0o022 != 0 && mode & 0o1000 == 0;
    if others_write || (meta.uid() != me && meta.uid() != 0) {
        return Err(AccessError::Directory(dir.to_path_buf(), meta.uid(), mode));
    }
    Ok(())
}

/// The user this process runs as (its effective uid), as the kernel reports it: the owner a
/// token file must have and the peer a Unix socket admits by default.
pub fn effective_uid() -> Result<u32, AccessError> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(AccessError::Whoami)?;
    // `Uid:	real	effective	saved	filesystem`
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| AccessError::Whoami(std::io::Error::other("no effective uid in it")))
}

/// Who may use the MCP server over its Unix socket, by the peer's user id (`SO_PEERCRED`, which
/// the kernel fills in and a client cannot choose): this server's own user, with the roles it
/// is given (`read` unless told: every process of that user can reach the socket), and users
/// allowed by uid, each with its roles. Any other peer is refused before its request is read.
#[derive(Clone, Debug)]
pub struct Peers {
    me: u32,
    own: Grant,
    others: Vec<(u32, Grant)>,
}

impl Peers {
    /// This server's user, with the roles `own`.
    pub fn new(own: Grant) -> Result<Peers, AccessError> {
        Ok(Peers { me: effective_uid()?, own, others: Vec::new() })
    }

    /// Admit `uid` too, with `grant` (for this server's own uid: its roles instead).
    pub fn allow(mut self, uid: u32, grant: Grant) -> Peers {
        if uid == self.me {
            self.own = grant;
        } else {
            self.others.retain(|(u, _)| *u != uid);
            self.others.push((uid, grant));
        }
        self
    }

    /// The roles of a peer running as `uid`, if it is admitted.
    pub fn grant(&self, uid: u32) -> Option<Grant> {
        if uid == self.me {
            return Some(self.own);
        }
        self.others.iter().find(|(u, _)| *u == uid).map(|(_, g)| *g)
    }

    /// What sessions of a peer of `uid` count as, against the bounds per holder.
    pub fn holder(uid: u32) -> Holder {
        Holder(Who::Uid(uid))
    }

    /// Whether users other than this server's own are admitted (then the socket is made
    /// reachable by them, and the peer check alone keeps the rest out).
    pub fn admits_others(&self) -> bool {
        !self.others.is_empty()
    }

    /// The uid this server runs as.
    pub fn me(&self) -> u32 {
        self.me
    }

    /// Who is admitted, with which roles (for the operator's log line).
    pub fn summary(&self) -> String {
        let mut all = vec![format!("uid {} (this server's user): {}", self.me, self.own.describe())];
        all.extend(self.others.iter().map(|(u, g)| format!("uid {u}: {}", g.describe())));
        all.join("; ")
    }

    /// One allowed peer as written on the command line or in a parameter: `UID` (role `read`)
    /// or `UID=ROLES` (`1001=remember,forget`).
    pub fn parse_allowed(text: &str) -> Result<(u32, Grant), String> {
        let (uid, roles) = text.trim().split_once('=').unwrap_or((text.trim(), "read"));
        let uid = uid.trim().parse::<u32>().map_err(|_| {
            format!("{text:?}: expected UID or UID=ROLES with a numeric user id (`id -u NAME` says it)")
        })?;
        Ok((uid, Grant::parse(roles.trim()).map_err(|e| format!("{text:?}: {e}"))?))
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

    /// Each way a token file can be another's to read or to change is refused, naming the file
    /// and the fix (issue 30, 4): a symbolic link (not followed, even to a good file), any
    /// group or other bit, something not a plain file, another user's file, a directory others
    /// can write to; and a file too large to be one.
    #[test]
    fn a_token_file_others_could_read_or_swap_is_refused_naming_the_fix() {
        let dir = tempfile::tempdir().expect("tmp");
        let good = format!("read {}\n", "r".repeat(40));
        let real = write(dir.path(), &good, 0o600);
        Tokens::load(&real).expect("a good file");

        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let e = Tokens::load(&link).expect_err("a link").to_string();
        assert!(
            e.contains(&format!("{} is a symbolic link", link.display())) && e.contains("readlink -f"),
            "{e}"
        );

        for mode in [0o640, 0o620, 0o610, 0o604, 0o602, 0o601, 0o644] {
            std::fs::set_permissions(&real, std::fs::Permissions::from_mode(mode)).expect("chmod");
            let e = Tokens::load(&real).expect_err("exposed").to_string();
            assert!(e.contains(&format!("chmod 600 {}", real.display())), "{mode:o}: {e}");
        }
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).expect("chmod");

        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            std::fs::set_permissions(&fifo, std::fs::Permissions::from_mode(0o600)).expect("chmod");
            let e = Tokens::load(&fifo).expect_err("a fifo").to_string();
            assert!(e.contains("not a plain file"), "{e}");
        }

        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).expect("mkdir");
        let inside = write(&shared, &good, 0o600);
        for (mode, refused) in [(0o777, true), (0o770, true), (0o1777, false), (0o755, false)] {
            std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(mode)).expect("chmod");
            match Tokens::load(&inside) {
                Err(e) if refused => {
                    let e = e.to_string();
                    assert!(e.contains(&format!("chmod go-w {}", shared.display())), "{mode:o}: {e}");
                }
                Ok(_) if !refused => {}
                other => panic!("directory mode {mode:o}: {other:?}"),
            }
        }

        let big = write(dir.path(), &format!("{good}#{}\n", "x".repeat(MAX_TOKEN_FILE as usize)), 0o600);
        assert!(matches!(Tokens::load(&big), Err(AccessError::TooLarge(..))));
    }

    /// A file of another user is refused (as root, who can give it away; skipped otherwise).
    #[test]
    fn another_users_token_file_is_refused() {
        let me = effective_uid().expect("uid");
        if me != 0 {
            eprintln!("skipped: needs root, to give a file to another user");
            return;
        }
        let dir = tempfile::tempdir().expect("tmp");
        let p = write(dir.path(), &format!("read {}\n", "r".repeat(40)), 0o600);
        let chown = std::process::Command::new("chown").arg("65534").arg(&p).status();
        if !chown.is_ok_and(|s| s.success()) {
            eprintln!("skipped: chown 65534 failed (a user namespace without that user?)");
            return;
        }
        let e = Tokens::load(&p).expect_err("another's").to_string();
        assert!(e.contains(&format!("{} belongs to uid 65534", p.display())), "{e}");
        assert!(e.contains(&format!("chown 0 {}", p.display())), "{e}");
    }

    #[test]
    fn peers_are_this_user_with_its_roles_and_those_allowed() {
        let me = effective_uid().expect("uid");
        let peers = Peers::new(Grant::default());
        let peers = peers.expect("peers");
        assert_eq!(peers.grant(me), Some(Grant::default()));
        assert_eq!(peers.grant(me.wrapping_add(1)), None);
        assert!(!peers.admits_others());
        let (uid, g) = Peers::parse_allowed("4242=remember,share").expect("parsed");
        let peers = peers.allow(uid, g).allow(me, Grant::ALL);
        assert!(peers.admits_others());
        assert_eq!(peers.grant(4242).map(Grant::describe).as_deref(), Some("read,remember,share"));
        assert_eq!(peers.grant(me), Some(Grant::ALL));
        assert_eq!(Peers::parse_allowed("17"), Ok((17, Grant::default())));
        assert!(Peers::parse_allowed("bob").is_err());
        assert!(Peers::parse_allowed("17=write").expect_err("role").contains("unknown role"));
        assert_ne!(Peers::holder(4242), Peers::holder(4243));
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
