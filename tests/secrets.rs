//! Secrets stay secret on disk (issue 30, finding 3): a memory directory is 0700 and every file
//! in it 0600, whatever the umask, after every command that writes one — create, space, join,
//! seal, forget, archive, restore, a witness's key — and another user on the robot reads none
//! of them. A key file an older version left open to others is mended when its owner opens
//! the memory, with a warning.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SION: &str = env!("CARGO_BIN_EXE_sion");

/// `sion ARGS` under the most permissive umask there is, in `cwd`.
fn sion_umask0(cwd: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write as _;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("umask 000; exec \"$0\" \"$@\"")
        .arg(SION)
        .args(args)
        .current_dir(cwd)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("sion");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin.unwrap_or_default().as_bytes()).expect("write");
    drop(input);
    child.wait_with_output().expect("wait")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).expect("stat").permissions().mode() & 0o7777
}

/// Every file and directory under `root` (itself included) with a group or other bit.
fn open_to_others(root: &Path) -> Vec<(PathBuf, u32)> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_owned()];
    while let Some(p) = todo.pop() {
        let m = mode(&p);
        if m & 0o077 != 0 {
            out.push((p.clone(), m));
        }
        if std::fs::symlink_metadata(&p).expect("stat").is_dir() {
            for e in std::fs::read_dir(&p).expect("read dir").flatten() {
                todo.push(e.path());
            }
        }
    }
    out
}

fn files_under(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_owned()];
    while let Some(p) = todo.pop() {
        if p.is_dir() {
            todo.extend(std::fs::read_dir(&p).expect("read dir").flatten().map(|e| e.path()));
        } else {
            out.push(p);
        }
    }
    out
}

const SECRET: &str = r#"{"kind":"observation","frame":"map","min":[0,0,0],"max":[1000,1000,1000],"from":1767225600000000000,"to":1767225601000000000,"confidence":900,"subject":"visitor","payload":{"text":"the visitor's name is Jo Secret-Smith"}}"#;

#[test]
fn every_command_leaves_the_memory_its_owners_alone_whatever_the_umask() {
    let tmp = tempfile::tempdir().expect("tmp");
    // Where memories usually live is open to every user to pass through (a home, /var/lib):
    // only the memory's own modes keep them out.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let cwd = tmp.path();
    let s = |p: &Path| p.to_str().expect("utf8").to_owned();
    let robot = cwd.join("robot");
    let ana = cwd.join("ana");
    let restored = cwd.join("restored");
    let archive = cwd.join("archive");
    let wrap = cwd.join("ana.sionwrap");
    let ok = |args: &[&str], stdin: Option<&str>| {
        let o = sion_umask0(cwd, args, stdin);
        assert!(o.status.success(), "sion {}: {}", args.join(" "), text(&o));
        text(&o)
    };
    // After each command, nothing of any memory or key directory is open to others.
    let walked = |after: &str| {
        for root in [&robot, &ana, &restored, &cwd.join("witness.key"), &cwd.join("plain")] {
            if root.exists() {
                let open = open_to_others(root);
                assert!(open.is_empty(), "after `{after}`: open to others: {open:?}");
            }
        }
        // An archive directory is an object store (its objects sealed for the writer, written
        // by object_store): the directory keeps others out of their names and sizes.
        if archive.exists() {
            assert_eq!(mode(&archive) & 0o077, 0, "after `{after}`: the archive directory is open to others");
        }
    };
    ok(&["memory", "space", "create", "--data", &s(&robot)], None);
    walked("memory space create");
    ok(&["memory", "open", "--data", &s(&cwd.join("plain"))], None);
    walked("memory open");
    let positions = ok(&["memory", "seal", "--data", &s(&robot), "-"], Some(SECRET));
    walked("memory seal");
    let position =
        positions.lines().find(|l| l.trim().parse::<u64>().is_ok()).expect("a position").trim().to_owned();
    ok(&["memory", "commit", "--data", &s(&robot)], None);
    walked("memory commit");
    ok(&["memory", "space", "keygen", "--keys", &s(&ana)], None);
    walked("memory space keygen");
    let member = s(&ana.join("member.pub"));
    ok(
        &[
            "memory",
            "space",
            "add",
            "--data",
            &s(&robot),
            "--name",
            "ana",
            "--member",
            &member,
            "--out",
            &s(&wrap),
        ],
        None,
    );
    walked("memory space add");
    ok(&["memory", "space", "join", "--keys", &s(&ana), "--wrap", &s(&wrap)], None);
    walked("memory space join");
    ok(&["memory", "archive", "--data", &s(&robot), "--to", &s(&archive)], None);
    walked("memory archive");
    let key = s(&robot.join("writer.key"));
    ok(&["memory", "restore", "--from", &s(&archive), "--data", &s(&restored), "--key", &key], None);
    walked("memory restore");
    ok(&["memory", "forget", "--data", &s(&robot), "--position", &position, "--why", "asked"], None);
    walked("memory forget");
    // A witness's key by a bare file name (finding 8: `--key w.key` could not be written).
    let shown = ok(&["ledger", "witness", "--key", "witness.key", "--show-key"], None);
    assert_eq!(shown.trim().len(), 64, "{shown}");
    walked("ledger witness --show-key");

    // The attack: another user on the robot reads the key files. As root, the test is that
    // user (nobody); otherwise it cannot be, and the walk above is the check.
    if is_root() {
        let secrets: Vec<PathBuf> = [&robot, &ana, &restored]
            .iter()
            .flat_map(|d| files_under(d))
            .chain([cwd.join("witness.key")])
            .collect();
        assert!(
            secrets.iter().any(|p| p.ends_with("space/keys"))
                && secrets.iter().any(|p| p.ends_with("ledger/key"))
        );
        for path in &secrets {
            let o = as_nobody(&["cat", &s(path)]);
            assert!(!o.status.success(), "another user read {}", path.display());
        }
        // Nor can they look inside: not even the names.
        let o = as_nobody(&["ls", &s(&robot)]);
        assert!(!o.status.success(), "another user listed {}", robot.display());
    }
}

#[test]
fn a_key_left_open_to_others_is_mended_when_its_owner_opens_the_memory() {
    let tmp = tempfile::tempdir().expect("tmp");
    let robot = tmp.path().join("robot");
    let d = robot.to_str().expect("utf8");
    let o = sion_umask0(tmp.path(), &["memory", "space", "create", "--data", d], None);
    assert!(o.status.success(), "{}", text(&o));
    // As an older version (or a careless copy) left them.
    for (p, m) in [
        (&robot, 0o755),
        (&robot.join("writer.key"), 0o644),
        (&robot.join("space/keys"), 0o644),
        (&robot.join("ledger/key"), 0o644),
    ] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod");
    }
    // A reader's process changes nothing, but says so.
    let o = sion_umask0(tmp.path(), &["memory", "show", "--data", d], None);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("is open to other users"), "{}", text(&o));
    assert_eq!(mode(&robot.join("writer.key")), 0o644, "a reader changes nothing");
    // Its writer mends them, and says what may have been read.
    let o = sion_umask0(tmp.path(), &["memory", "commit", "--data", d], None);
    assert!(o.status.success(), "{}", text(&o));
    let said = text(&o);
    assert!(said.contains("writer.key was open to other users (mode 644); made private"), "{said}");
    assert!(said.contains("space/keys was open to other users"), "{said}");
    assert!(said.contains("ledger/key was open to other users"), "{said}");
    assert_eq!(open_to_others(&robot), Vec::new());
}

/// Whether this process runs as root (CI does).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Run a command as the user nobody (uid and gid 65534), as root may.
fn as_nobody(argv: &[&str]) -> Output {
    use std::os::unix::process::CommandExt as _;
    Command::new(argv[0]).args(&argv[1..]).uid(65534).gid(65534).output().expect("run as nobody")
}

/// Finding 8: a refused `memory open --agent` (the name is another writer's) leaves neither
/// `log/` nor `writer.key` behind, so the next attempt starts clean rather than half made.
#[test]
fn a_refused_creation_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().expect("tmp");
    let first = tmp.path().join("first");
    let second = tmp.path().join("second");
    let s = |p: &Path| p.to_str().expect("utf8").to_owned();
    let o = sion_umask0(
        tmp.path(),
        &["memory", "open", "--data", &s(&first), "--agent", "warehouse/robot-7"],
        None,
    );
    assert!(o.status.success(), "{}", text(&o));
    // The same name on the same ledger, from another writer key: refused.
    let ledger = s(&first.join("ledger"));
    let o = sion_umask0(
        tmp.path(),
        &["memory", "open", "--data", &s(&second), "--agent", "warehouse/robot-7", "--ledger", &ledger],
        None,
    );
    assert!(!o.status.success(), "a second controller took the name: {}", text(&o));
    for left in ["log", "writer.key", "memory.json"] {
        assert!(!second.join(left).exists(), "the refused creation left {left}: {}", text(&o));
    }
    // The next attempt, under a name of its own, starts clean and succeeds.
    let o = sion_umask0(
        tmp.path(),
        &["memory", "open", "--data", &s(&second), "--agent", "robot-8", "--ledger", &ledger],
        None,
    );
    assert!(o.status.success(), "{}", text(&o));
}
