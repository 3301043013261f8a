//! The operator's and the robot's commands against a real etcd, as a person runs them:
//! `sion ledger init`, `sion ledger serve`, `sion memory open --ledger URL`, remember, commit,
//! `prove time`, `verify --ledger URL` (which fetches the Pulse's header from the service and
//! compares), and a forged header refused. The `sion` binary is the workspace's (built with
//! the tests: `cargo test --workspace --all-targets`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use sion_fleet::local::Etcd;

fn sion_binary() -> PathBuf {
    // target/<profile>/deps/<this test> → target/<profile>/sion
    let exe = std::env::current_exe().expect("exe");
    let bin = exe.parent().and_then(Path::parent).expect("target dir").join("sion");
    assert!(
        bin.exists(),
        "{} is built with the workspace's tests (cargo test --workspace --all-targets)",
        bin.display()
    );
    bin
}

/// Run `sion` as a person would, under the most careless umask (000): every secret it writes
/// must still be private (issue 30, requirement 3).
fn sion(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut c = Command::new("sh");
    c.arg("-c").arg("umask 000 && exec \"$0\" \"$@\"").arg(sion_binary()).args(args);
    c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().expect("sion");
    if let Some(input) = stdin {
        use std::io::Write as _;
        child.stdin.take().expect("stdin").write_all(input).expect("write");
    }
    drop(child.stdin.take());
    child.wait_with_output().expect("wait")
}

/// Every file under `path` (or `path` itself) readable by its owner only, every directory
/// 0700.
fn private(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let meta = std::fs::symlink_metadata(path).expect("stat");
    let mode = meta.permissions().mode() & 0o777;
    assert_eq!(mode & 0o077, 0, "{} is {mode:o}: others can reach it", path.display());
    if meta.is_dir() {
        for e in std::fs::read_dir(path).expect("read dir") {
            private(&e.expect("entry").path());
        }
    }
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// `sion ledger serve` with these arguments, once it listens on `listen`.
fn serving(args: &[&str], listen: &str) -> impl Future<Output = Serving> + use<> {
    let args: Vec<String> = args.iter().map(ToString::to_string).collect();
    let listen = listen.to_string();
    async move { serving_owned(args, listen).await }
}

async fn serving_owned(args: Vec<String>, listen: String) -> Serving {
    let s = Serving(
        Command::new(sion_binary())
            .args(["ledger", "serve"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&listen).is_err() {
        assert!(Instant::now() < deadline, "sion ledger serve did not listen on {listen}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    s
}

struct Serving(Child);
impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_and_robot_commands_on_a_fleet_ledger() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = tmp.path().join("ledger.key");
    let k = key.to_str().expect("utf8");
    let o = sion(&["ledger", "init", "--etcd", etcd.url(), "--key", k], None);
    assert!(o.status.success(), "{}", text(&o));
    let init = text(&o);
    let ledger_key =
        init.split("key ").nth(1).and_then(|s| s.get(..64)).expect("init prints the key").to_owned();

    // A witness's key, and the file naming it (readers' and the service's).
    let wkey = tmp.path().join("witness.key");
    std::fs::write(&wkey, [7u8; 32]).expect("witness key");
    let wpub = hex::encode(ed25519_dalek::SigningKey::from_bytes(&[7; 32]).verifying_key().to_bytes());
    let wfile = tmp.path().join("witnesses");
    std::fs::write(&wfile, format!("# who we trust\nwitness-1 {wpub}\n")).expect("witnesses file");
    let wf = wfile.to_str().expect("utf8");

    let archive = tmp.path().join("archive");
    let port = sion_fleet::local::free_port().expect("a free loopback port");
    let listen = format!("127.0.0.1:{port}");
    let url = format!("http://{listen}");
    let archived = archive.to_str().expect("utf8");
    let serve = || {
        serving(
            &[
                "--etcd",
                etcd.url(),
                "--key",
                k,
                "--listen",
                &listen,
                "--witnesses",
                wf,
                "--archive",
                archived,
            ],
            &listen,
        )
    };
    let serving = serve().await;

    let d = tmp.path().join("robot");
    let d = d.to_str().expect("utf8");
    let o = sion(&["memory", "open", "--data", d, "--agent", "fleet/robot-1", "--ledger", &url], None);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains(&format!("fleet ledger at {url}")), "{}", text(&o));
    assert!(!Path::new(d).join("ledger").exists(), "the robot holds a ledger of its own");
    let atoms = sion(&["sim", "--atoms", "400"], None).stdout;
    let lines: Vec<&[u8]> = atoms.split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
    for part in [&lines[..200], &lines[200..300]] {
        let input: Vec<u8> = part.iter().flat_map(|l| l.iter().copied().chain([b'\n'])).collect();
        let o = sion(&["memory", "remember", "--data", d, "-"], Some(&input));
        assert!(o.status.success(), "{}", text(&o));
        let o = sion(&["memory", "commit", "--data", d], None);
        assert!(o.status.success(), "{}", text(&o));
    }
    // An agent name taken first by the wrong account, given back by the operator: the
    // squatter's log under it takes no more atoms; only the ledger's key may do it.
    let squat = tmp.path().join("squatter");
    let sq = squat.to_str().expect("utf8");
    let o = sion(&["memory", "open", "--data", sq, "--agent", "depot", "--ledger", &url], None);
    assert!(o.status.success(), "{}", text(&o));
    let owner = "22".repeat(32);
    let give = |key: &str| {
        sion(&["ledger", "agent", "give", "depot", "--ledger", &url, "--key", key, "--to", &owner], None)
    };
    let o = give(squat.join("writer.key").to_str().expect("utf8"));
    assert!(!o.status.success() && text(&o).contains("not_controller"), "{}", text(&o));
    assert!(text(&o).contains("sign with the ledger's key"), "{}", text(&o));
    let o = give(k);
    assert!(
        o.status.success() && text(&o).contains(&format!("agent depot: live (controller {owner})")),
        "{}",
        text(&o)
    );
    let input: Vec<u8> = lines[300..310].iter().flat_map(|l| l.iter().copied().chain([b'\n'])).collect();
    let o = sion(&["memory", "remember", "--data", sq, "-"], Some(&input));
    assert!(o.status.success(), "{}", text(&o));
    let o = sion(&["memory", "commit", "--data", sq], None);
    assert!(!o.status.success() && text(&o).contains("depot"), "the squatter committed: {}", text(&o));

    contained_robots(tmp.path(), &url, k, &lines[310..400]);

    let proof = tmp.path().join("t.sionproof");
    let f = proof.to_str().expect("utf8");
    let o = sion(&["memory", "prove", "time", "--data", d, "--position", "250", "--out", f], None);
    assert!(o.status.success(), "{}", text(&o));

    // A reader who names the ledger: its header fetched and compared; anchored by its key.
    let o = sion(&["memory", "verify", "--ledger", &url, "--expect-recorded", "250", f], None);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("was recorded at Pulse"), "{}", text(&o));
    let o = sion(&["memory", "verify", "--ledger", &url, "--ledger-key", &ledger_key, f], None);
    assert!(o.status.success(), "{}", text(&o));
    // Another key than the service's: refused before anything is checked.
    let other = "11".repeat(32);
    let o = sion(&["memory", "verify", "--ledger", &url, "--ledger-key", &other, f], None);
    assert!(!o.status.success() && text(&o).contains("not the --ledger-key given"), "{}", text(&o));
    // A proof whose header was not the ledger's (its time changed: the signature no longer
    // holds, and the ledger holds another header for that Pulse) is refused.
    let mut bytes = std::fs::read(&proof).expect("read");
    let n = bytes.len();
    bytes[n - 100] ^= 1;
    let forged = tmp.path().join("forged.sionproof");
    std::fs::write(&forged, &bytes).expect("write");
    let o = sion(&["memory", "verify", "--ledger", &url, forged.to_str().expect("utf8")], None);
    assert!(!o.status.success(), "a changed proof verified: {}", text(&o));
    // A header the ledger key did sign but the ledger never gave out (its holder backdating a
    // Pulse by an hour, off the chain): the file alone checks out against the key; a reader who
    // names the service is told the ledger holds another header for that Pulse.
    let mut file =
        sion_verify::proof::ProofFile::decode(&std::fs::read(&proof).expect("read")).expect("decode");
    let operator = sion_store::ledger::read_key(&key).expect("the ledger key");
    if let Some(a) = file.attestation.as_mut() {
        let mut h = a.state.header.header;
        h.time_ns -= 3_600_000_000_000;
        a.state.header = sion_verify::ledger::SignedHeader::sign(&operator, h);
    }
    let backdated = tmp.path().join("backdated.sionproof");
    std::fs::write(&backdated, file.encode()).expect("write");
    let b = backdated.to_str().expect("utf8");
    let o = sion(&["memory", "verify", "--ledger-key", &ledger_key, b], None);
    assert!(o.status.success(), "signed by the ledger key, it verifies from the file: {}", text(&o));
    let o = sion(&["memory", "verify", "--ledger", &url, b], None);
    assert!(
        !o.status.success() && text(&o).contains("gave out another header"),
        "a header the ledger never gave out was accepted: {}",
        text(&o)
    );

    // Witnesses: the proof was made before any cosigned its Pulse, so a reader requiring one
    // refuses it from the file alone …
    let o = sion(&["memory", "verify", "--ledger-key", &ledger_key, "--witnesses", wf, f], None);
    assert!(!o.status.success() && text(&o).contains("0 of the 1 witnesses"), "{}", text(&o));
    // … the witness follows the chain once and cosigns every Pulse …
    let state = tmp.path().join("witness.state");
    let witness = |once: bool| {
        let mut args = vec!["ledger", "witness", "--ledger", &url, "--ledger-key", &ledger_key];
        args.extend(["--key", wkey.to_str().expect("utf8"), "--state", state.to_str().expect("utf8")]);
        if once {
            args.push("--once");
        }
        sion(&args, None)
    };
    let o = witness(true);
    assert!(o.status.success() && text(&o).contains(&wpub), "{}", text(&o));
    // The ledger's key, the witness's key (written 0644 by this test: mended, with a warning)
    // and its state, and the robot's whole memory: private, under umask 000.
    for secret in [key.as_path(), wkey.as_path(), state.as_path(), Path::new(d)] {
        private(secret);
    }
    assert!(text(&o).contains("Pulse(s), up to Pulse"), "{}", text(&o));
    // … a reader who names the service gets the cosignature from it (and checks it) …
    let o = sion(&["memory", "verify", "--ledger", &url, "--witnesses", wf, "--quorum", "1", f], None);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("cosigned by 1 of the 1 witnesses named (quorum 1): witness-1"),
        "{}",
        text(&o)
    );
    // … and a proof made now carries it, for a reader offline.
    let cosigned = tmp.path().join("cosigned.sionproof");
    let c = cosigned.to_str().expect("utf8");
    let o = sion(&["memory", "prove", "time", "--data", d, "--position", "250", "--out", c], None);
    assert!(o.status.success(), "{}", text(&o));
    let o = sion(&["memory", "verify", "--ledger-key", &ledger_key, "--witnesses", wf, c], None);
    assert!(o.status.success(), "{}", text(&o));
    // Old Pulses archived out of etcd: the service reads their headers from the archive, so the
    // first proof still verifies against the header it serves; the witness follows on.
    let o = sion(
        &[
            "ledger",
            "archive",
            "--etcd",
            etcd.url(),
            "--key",
            k,
            "--archive",
            archive.to_str().expect("utf8"),
            "--keep",
            "1",
        ],
        None,
    );
    assert!(o.status.success() && text(&o).contains("Pulse(s) in 1 segment(s)"), "{}", text(&o));
    // Atom 100 was recorded by the first commit, whose Pulse is archived now: its proof is
    // built from the archive and the version records, and checked against the served header.
    let early = tmp.path().join("early.sionproof");
    let e = early.to_str().expect("utf8");
    let o = sion(&["memory", "prove", "time", "--data", d, "--position", "100", "--out", e], None);
    assert!(o.status.success(), "{}", text(&o));
    let o = sion(&["memory", "verify", "--ledger", &url, "--expect-recorded", "100", e], None);
    assert!(o.status.success(), "an archived Pulse's header: {}", text(&o));
    let o = witness(true);
    assert!(o.status.success(), "{}", text(&o));
    // A witness with another ledger's key refuses to start on this one.
    let o = sion(
        &[
            "ledger",
            "witness",
            "--ledger",
            &url,
            "--ledger-key",
            &other,
            "--key",
            wkey.to_str().expect("utf8"),
            "--state",
            state.to_str().expect("utf8"),
            "--once",
        ],
        None,
    );
    assert!(!o.status.success() && text(&o).contains("witness state"), "{}", text(&o));

    // The service stopped: the robot goes on recording; its commit fails, saying where to
    // look; when the service is back, one commit takes the whole backlog.
    drop(serving);
    let input: Vec<u8> = lines[300..].iter().flat_map(|l| l.iter().copied().chain([b'\n'])).collect();
    let o = sion(&["memory", "remember", "--data", d, "-"], Some(&input));
    assert!(o.status.success(), "recording stopped with the ledger: {}", text(&o));
    let o = sion(&["memory", "commit", "--data", d], None);
    assert!(!o.status.success(), "committed without a ledger: {}", text(&o));
    assert!(text(&o).contains("sion ledger serve"), "{}", text(&o));
    let _serving = serve().await;
    let o = sion(&["memory", "commit", "--data", d], None);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("committed 400 atoms (+100)"), "{}", text(&o));
    let show = sion(&["memory", "show", "--data", d, "--json"], None);
    let v: serde_json::Value = serde_json::from_slice(&show.stdout).expect("json");
    assert_eq!(v["committed"]["commits"], 3, "{v}");
}

/// The operator's agents (issue 35, requirement 6; seed 004: "while an agent, or any agent above
/// it, is suspended or revoked, its log cannot grow"): a fleet's name registered with a key of
/// its own, a robot's agent registered under it for the robot's writer key, then suspended,
/// reinstated and revoked — each through `sion ledger agent`, each commit of the robot's checked.
fn contained_robots(tmp: &Path, url: &str, ledger_key: &str, atoms: &[&[u8]]) {
    let fleet_key = tmp.join("yard.key");
    let fk = fleet_key.to_str().expect("utf8");
    let agent = |verb: &str, name: &str, key: &str, more: &[&str]| {
        let mut args = vec!["ledger", "agent", verb, name, "--ledger", url, "--key", key];
        args.extend(more);
        sion(&args, None)
    };
    let o = agent("register", "yard", fk, &[]);
    assert!(o.status.success() && text(&o).contains("agent yard: registered, live"), "{}", text(&o));
    private(&fleet_key);

    // The robot's key first, so the operator can register its agent for it.
    let robot = tmp.join("robot-9");
    let rd = robot.to_str().expect("utf8");
    let o = sion(&["memory", "key", "--data", rd], None);
    assert!(o.status.success(), "{}", text(&o));
    let robot_key = String::from_utf8_lossy(&o.stdout).trim().to_owned();
    assert_eq!(robot_key.len(), 64, "{}", text(&o));
    private(&robot);
    let open = || sion(&["memory", "open", "--data", rd, "--agent", "yard/robot-9", "--ledger", url], None);
    // Unregistered, it cannot take a name under the yard's: the yard's controller must register it.
    let o = open();
    assert!(!o.status.success() && text(&o).contains("not_controller"), "{}", text(&o));
    assert!(text(&o).contains("sion ledger agent register yard/robot-9 --controller KEY"), "{}", text(&o));
    let o = sion(&["memory", "key", "--data", rd], None);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), robot_key, "the refused open lost the robot's key");
    // Nor may anyone but the yard's controller register it.
    let stranger = tmp.join("stranger.key");
    let o =
        agent("register", "yard/robot-9", stranger.to_str().expect("utf8"), &["--controller", &robot_key]);
    assert!(!o.status.success() && text(&o).contains("not_controller"), "{}", text(&o));
    let o = agent("register", "yard/robot-9", fk, &["--controller", &robot_key]);
    assert!(
        o.status.success() && text(&o).contains(&format!("registered, live (controller {robot_key})")),
        "{}",
        text(&o)
    );
    let o = open();
    assert!(o.status.success(), "{}", text(&o));

    let remember_and_commit = |part: &[&[u8]]| {
        let input: Vec<u8> = part.iter().flat_map(|l| l.iter().copied().chain([b'\n'])).collect();
        let o = sion(&["memory", "remember", "--data", rd, "-"], Some(&input));
        assert!(o.status.success(), "{}", text(&o));
        sion(&["memory", "commit", "--data", rd], None)
    };
    let o = remember_and_commit(&atoms[..30]);
    assert!(o.status.success() && text(&o).contains("committed 30 atoms"), "{}", text(&o));

    // The yard suspended: the robot below it records on, its commits refused `contained`.
    let o = agent("suspend", "yard", fk, &[]);
    assert!(o.status.success() && text(&o).contains("agent yard: suspended"), "{}", text(&o));
    let o = sion(&["ledger", "agent", "show", "yard/robot-9", "--ledger", url], None);
    assert!(o.status.success() && text(&o).contains("yard: suspended"), "{}", text(&o));
    assert!(text(&o).contains("yard/robot-9: live"), "{}", text(&o));
    let o = remember_and_commit(&atoms[30..50]);
    assert!(!o.status.success(), "a robot under a suspended agent committed: {}", text(&o));
    assert!(text(&o).contains("(contained)") && text(&o).contains("\"yard\" is suspended"), "{}", text(&o));
    assert!(text(&o).contains("reinstated"), "the refusal says what happens to the atoms: {}", text(&o));
    // The robot cannot lift it (it controls nothing above), nor reinstate itself once suspended.
    let own = robot.join("writer.key");
    let o = agent("reinstate", "yard", own.to_str().expect("utf8"), &[]);
    assert!(!o.status.success() && text(&o).contains("not_controller"), "{}", text(&o));
    let o = agent("suspend", "yard/robot-9", own.to_str().expect("utf8"), &[]);
    assert!(o.status.success(), "an agent may stop itself: {}", text(&o));
    let o = agent("reinstate", "yard/robot-9", own.to_str().expect("utf8"), &[]);
    assert!(!o.status.success() && text(&o).contains("not_controller"), "{}", text(&o));
    // Reinstated from above — the yard, top-level, by the ledger's operator alone (its own
    // controller may stop it, not restart it) — and the backlog goes in with one commit.
    let o = agent("reinstate", "yard", fk, &[]);
    assert!(!o.status.success() && text(&o).contains("not_controller"), "{}", text(&o));
    for (name, key) in [("yard", ledger_key), ("yard/robot-9", fk)] {
        let o = agent("reinstate", name, key, &[]);
        assert!(o.status.success() && text(&o).contains(&format!("agent {name}: live")), "{}", text(&o));
    }
    let o = sion(&["memory", "commit", "--data", rd], None);
    assert!(o.status.success() && text(&o).contains("committed 50 atoms (+20)"), "{}", text(&o));

    // Revoked: for good.
    let o = agent("revoke", "yard/robot-9", fk, &[]);
    assert!(o.status.success() && text(&o).contains("agent yard/robot-9: revoked"), "{}", text(&o));
    let o = remember_and_commit(&atoms[50..60]);
    assert!(!o.status.success() && text(&o).contains("is revoked"), "{}", text(&o));
    let o = agent("reinstate", "yard/robot-9", fk, &[]);
    assert!(!o.status.success() && text(&o).contains("contained"), "{}", text(&o));
    let o = sion(&["memory", "show", "--data", rd], None);
    assert!(o.status.success() && text(&o).contains("10 atoms not committed yet"), "{}", text(&o));
}

/// One HTTP/1.1 request on loopback, as a C2SP client sends it: the status, the content type
/// and the body.
fn http(addr: &str, method: &str, path: &str, body: &[u8]) -> (u16, String, Vec<u8>) {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).and_then(|()| s.write_all(body)).expect("send");
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n").expect("an HTTP answer");
    let head = String::from_utf8_lossy(&answer[..split]).into_owned();
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("a status");
    let kind = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-type: ").map(str::to_owned))
        .unwrap_or_default();
    (status, kind, answer[split + 4..].to_vec())
}

/// A ledger's checkpoints served over HTTP and cosigned by a C2SP witness run with `sion
/// ledger witness --serve`: the ledger asks it at its cadence, keeps the cosignature, and a
/// reader finds the cosigned checkpoint covering a Pulse and checks the quorum and the Pulse's
/// inclusion. The witness refuses what C2SP says it must, with C2SP's status codes: a
/// checkpoint by another key (403), of another log (404), from a size it did not cosign last
/// (409, its size in `text/x.tlog.size`), a fork at its size (409), a proof that fails (422),
/// and a body over its bound (413).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c2sp_witnesses_cosign_the_ledgers_checkpoints() {
    use sion_verify::ledger::{
        AddCheckpoint, Checkpoint, ledger_vkey, origin_of, sign_checkpoint, witness_vkey,
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = tmp.path().join("ledger.key");
    let k = key.to_str().expect("utf8");
    let o = sion(&["ledger", "init", "--etcd", etcd.url(), "--key", k], None);
    assert!(o.status.success(), "{}", text(&o));
    let ledger = ed25519_dalek::SigningKey::from_bytes(
        &std::fs::read(&key).expect("key").as_slice().try_into().expect("32 bytes"),
    );
    let ledger_hex = hex::encode(ledger.verifying_key().to_bytes());

    // The witness, serving C2SP tlog-witness; its vkey on standard output.
    let wkey = tmp.path().join("w.key");
    std::fs::write(&wkey, [9u8; 32]).expect("witness key");
    let wstate = tmp.path().join("w.state");
    let waddr = format!("127.0.0.1:{}", sion_fleet::local::free_port().expect("port"));
    let mut child = Command::new(sion_binary())
        .args(["ledger", "witness", "--serve", &waddr, "--name", "w.test/1", "--ledger-key", &ledger_hex])
        .args(["--key", wkey.to_str().expect("utf8"), "--state", wstate.to_str().expect("utf8")])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("witness");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("the witness prints its vkey");
    let _witness = Serving(child);
    let wpub = ed25519_dalek::SigningKey::from_bytes(&[9; 32]).verifying_key().to_bytes();
    assert_eq!(line.trim(), witness_vkey("w.test/1", &wpub));
    let cosigners = tmp.path().join("cosigners");
    std::fs::write(&cosigners, format!("# our witness\n{} http://{waddr}\n", line.trim())).expect("file");
    let cf = cosigners.to_str().expect("utf8");

    let listen = format!("127.0.0.1:{}", sion_fleet::local::free_port().expect("port"));
    let haddr = format!("127.0.0.1:{}", sion_fleet::local::free_port().expect("port"));
    let url = format!("http://{listen}");
    let _serving = Serving(
        Command::new(sion_binary())
            .args([
                "ledger",
                "serve",
                "--etcd",
                etcd.url(),
                "--key",
                k,
                "--listen",
                &listen,
                "--http",
                &haddr,
            ])
            .args(["--cosigners", cf, "--cosign-every", "0.3", "--checkpoint-every", "0.1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&listen).is_err() || std::net::TcpStream::connect(&waddr).is_err() {
        assert!(Instant::now() < deadline, "the ledger or the witness did not listen");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for name in ["yard", "depot"] {
        let fk = tmp.path().join(format!("{name}.key"));
        let o = sion(
            &["ledger", "agent", "register", name, "--ledger", &url, "--key", fk.to_str().expect("utf8")],
            None,
        );
        assert!(o.status.success(), "{}", text(&o));
    }

    // GET /checkpoint, read by the independent signed_note under the ledger's vkey.
    let (status, kind, body) = http(&haddr, "GET", "/checkpoint", b"");
    assert_eq!(
        (status, kind.as_str()),
        (200, "text/plain; charset=utf-8"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    let verifier =
        signed_note::StandardVerifier::new(&ledger_vkey(&ledger.verifying_key().to_bytes())).expect("vkey");
    let note = signed_note::Note::from_bytes(&body)
        .unwrap_or_else(|e| panic!("{e:?}: not a signed note: {:?}", String::from_utf8_lossy(&body)));
    note.verify(&signed_note::VerifierList::new(vec![Box::new(verifier)])).expect("signed by the ledger");
    assert_eq!(http(&haddr, "GET", "/other", b"").0, 404);

    // The reader: the first cosigned checkpoint covering Pulse 2, its quorum and inclusion.
    let deadline = Instant::now() + Duration::from_secs(30);
    let out = loop {
        let o = sion(
            &[
                "ledger",
                "checkpoint",
                "--ledger",
                &url,
                "--ledger-key",
                &ledger_hex,
                "--pulse",
                "2",
                "--cosigners",
                cf,
            ],
            None,
        );
        if o.status.success() {
            break text(&o);
        }
        assert!(Instant::now() < deadline, "never cosigned: {}", text(&o));
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(out.contains("cosigned by w.test/1") && out.contains("Pulse 2 ("), "{out}");
    assert!(out.contains(&format!("— {} ", origin_of(&ledger.verifying_key().to_bytes()))), "{out}");
    assert!(out.contains("— w.test/1 "), "the cosignature line is printed: {out}");
    // A quorum the witnesses named cannot meet.
    let o = sion(
        &["ledger", "checkpoint", "--ledger", &url, "--pulse", "2", "--cosigners", cf, "--quorum", "2"],
        None,
    );
    assert!(!o.status.success() && text(&o).contains("--quorum 2"), "{}", text(&o));

    // Attacks on the witness, once it cosigned the whole history (the genesis and the two
    // registrations: 3 Pulses; the ledger's later rounds post the same checkpoint again).
    let deadline = Instant::now() + Duration::from_secs(30);
    let (cosigned, size) = loop {
        let cosigned = std::fs::read(&wstate).expect("the witness keeps its state");
        let size = u64::from_le_bytes(cosigned[40..48].try_into().expect("8 bytes"));
        if size == 3 {
            break (cosigned, size);
        }
        assert!(Instant::now() < deadline, "the witness cosigned size {size}, not 3");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let origin = origin_of(&ledger.verifying_key().to_bytes());
    let post = |c: &Checkpoint, signer: &ed25519_dalek::SigningKey, old: u64, proof: Vec<[u8; 32]>| {
        let body = AddCheckpoint { old, proof, note: sign_checkpoint(signer, c) }.encode();
        http(&waddr, "POST", "/add-checkpoint", body.as_bytes())
    };
    let bigger = Checkpoint { origin: origin.clone(), size: size + 5, root: [1; 32], extensions: vec![] };
    let stranger = ed25519_dalek::SigningKey::from_bytes(&[66; 32]);
    assert_eq!(post(&bigger, &stranger, size, vec![]).0, 403, "signed by another key");
    let elsewhere = Checkpoint { origin: "example.com/log".into(), ..bigger.clone() };
    assert_eq!(post(&elsewhere, &ledger, size, vec![]).0, 404, "another log");
    let (status, kind, body) = post(&bigger, &ledger, 0, vec![]);
    assert_eq!(
        (status, kind.as_str(), String::from_utf8_lossy(&body).into_owned()),
        (409, "text/x.tlog.size", format!("{size}\n"))
    );
    let fork = Checkpoint { size, ..bigger.clone() };
    assert_eq!(post(&fork, &ledger, size, vec![]).0, 409, "a fork at the cosigned size");
    assert_eq!(post(&bigger, &ledger, size, vec![[2; 32]]).0, 422, "a proof that fails");
    let root: [u8; 32] = cosigned[48..80].try_into().expect("32 bytes");
    let same = Checkpoint { root, ..fork.clone() };
    assert_eq!(post(&same, &ledger, size, vec![[2; 32]]).0, 422, "a proof between equal sizes");
    assert_eq!(post(&same, &ledger, size, vec![]).0, 200, "the same checkpoint again is cosigned again");
    // A second witness process on the same state is refused: the state is locked.
    let o =
        sion(&["ledger", "witness", "--serve", "127.0.0.1:0", "--ledger-key", &ledger_hex, "--key"], None);
    assert!(!o.status.success(), "{}", text(&o));
    let o = sion(
        &[
            "ledger",
            "witness",
            "--serve",
            "127.0.0.1:0",
            "--ledger-key",
            &ledger_hex,
            "--key",
            wkey.to_str().expect("utf8"),
            "--state",
            wstate.to_str().expect("utf8"),
        ],
        None,
    );
    assert!(!o.status.success() && text(&o).contains("another witness process holds"), "{}", text(&o));
    // A body that does not come: the connection is answered 408 within the bound, not held.
    {
        use std::io::{Read as _, Write as _};
        let started = Instant::now();
        let mut slow = std::net::TcpStream::connect(&waddr).expect("connect");
        slow.write_all(b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nContent-Length: 1000\r\n\r\nold")
            .expect("head");
        slow.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
        let mut answer = Vec::new();
        let _ = slow.read_to_end(&mut answer);
        assert!(answer.starts_with(b"HTTP/1.1 408"), "{}", String::from_utf8_lossy(&answer));
        assert!(started.elapsed() < Duration::from_secs(20));
    }
    let (status, _, _) = http(&waddr, "POST", "/add-checkpoint", &vec![b'a'; 200_000]);
    assert_eq!(status, 413, "a body over the bound");
    assert_eq!(std::fs::read(&wstate).expect("state"), cosigned, "nothing refused moved the witness");
    proofs_carry_the_cosigned_checkpoint(tmp.path(), &url, &ledger_hex, cf).await;
}

/// A robot's memory on a ledger whose checkpoints a C2SP witness cosigns: once a round covers
/// its commit, its proofs carry that checkpoint (`attested = 3`), and a reader who names the
/// witness (`--cosigners`) accepts them; one naming another witness, or given a file whose
/// witness line was altered, refuses; a file without the checkpoint gets it from the ledger
/// when the reader names it (docs/PROOFS.md, "Covered by a checkpoint").
async fn proofs_carry_the_cosigned_checkpoint(dir: &Path, url: &str, ledger_hex: &str, cosigners: &str) {
    use sion_verify::proof::ProofFile;
    let d = dir.join("rover");
    let d = d.to_str().expect("utf8");
    let o = sion(&["memory", "open", "--data", d, "--agent", "rover", "--ledger", url], None);
    assert!(o.status.success(), "{}", text(&o));
    let o =
        sion(&["memory", "remember", "--data", d, "-"], Some(&sion(&["sim", "--atoms", "50"], None).stdout));
    assert!(o.status.success(), "{}", text(&o));
    let o = sion(&["memory", "commit", "--data", d], None);
    assert!(o.status.success(), "{}", text(&o));
    let f = dir.join("covered.sionproof");
    let fp = f.to_str().expect("utf8");
    let verify = |extra: &[&str], file: &str| {
        let mut args = vec!["memory", "verify", "--ledger-key", ledger_hex, "--expect-position", "10"];
        args.extend_from_slice(extra);
        args.push(file);
        sion(&args, None)
    };
    // The next cosigning round covers the commit's Pulse (every 0.3 s here).
    let deadline = Instant::now() + Duration::from_secs(30);
    let file = loop {
        let o = sion(&["memory", "prove", "inclusion", "--data", d, "--position", "10", "--out", fp], None);
        assert!(o.status.success(), "{}", text(&o));
        let file = ProofFile::decode(&std::fs::read(&f).expect("proof")).expect("decodes");
        if file.attestation.as_ref().is_some_and(|a| a.checkpoint.is_some()) {
            break file;
        }
        assert!(Instant::now() < deadline, "no proof carried a cosigned checkpoint");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let o = verify(&["--cosigners", cosigners], fp);
    assert!(
        o.status.success() && text(&o).contains("covered by the ledger's checkpoint of size"),
        "{}",
        text(&o)
    );
    // A reader who trusts another witness only.
    let other = dir.join("other-cosigners");
    let okey = ed25519_dalek::SigningKey::from_bytes(&[8; 32]).verifying_key().to_bytes();
    std::fs::write(&other, format!("{}\n", sion_verify::ledger::witness_vkey("w.test/2", &okey)))
        .expect("file");
    let o = verify(&["--cosigners", other.to_str().expect("utf8")], fp);
    assert!(!o.status.success() && text(&o).contains("(witnesses)"), "{}", text(&o));
    // The witness's line altered: false evidence of a witness the reader names.
    let mut altered = file.clone();
    if let Some(c) = altered.attestation.as_mut().and_then(|a| a.checkpoint.as_mut())
        && let Some(line) = c.note.signatures.iter_mut().find(|l| l.name == "w.test/1")
    {
        line.signature[12] ^= 1;
    }
    let a = dir.join("altered.sionproof");
    std::fs::write(&a, altered.encode()).expect("write");
    let o = verify(&["--cosigners", cosigners], a.to_str().expect("utf8"));
    assert!(!o.status.success() && text(&o).contains("(attestation)"), "{}", text(&o));
    // Without the checkpoint: refused, unless the reader asks the ledger for it.
    let mut bare = file.clone();
    if let Some(at) = bare.attestation.as_mut() {
        at.checkpoint = None;
    }
    let b = dir.join("bare.sionproof");
    std::fs::write(&b, bare.encode()).expect("write");
    let b = b.to_str().expect("utf8");
    let o = verify(&["--cosigners", cosigners], b);
    assert!(!o.status.success() && text(&o).contains("(witnesses)"), "{}", text(&o));
    let o = verify(&["--cosigners", cosigners, "--ledger", url], b);
    assert!(o.status.success(), "{}", text(&o));
}

/// Two `sion ledger serve --peer` processes, one elected to make the Pulses: a robot commits
/// through the one that forwards; the sequencer is killed with SIGKILL and the robot's next commit, through the
/// other, lands (forwarded nowhere, it is made there); restarted, the killed one answers for
/// the robot's proof; a wildcard --listen without --advertise is refused with what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_front_ends_one_sequencing_and_one_killed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = tmp.path().join("ledger.key");
    let k = key.to_str().expect("utf8");
    let o = sion(&["ledger", "init", "--etcd", etcd.url(), "--key", k], None);
    assert!(o.status.success(), "{}", text(&o));
    let listens: Vec<String> = (0..2)
        .map(|_| format!("127.0.0.1:{}", sion_fleet::local::free_port().expect("a free loopback port")))
        .collect();
    let serve = |i: usize| {
        let (me, other) = (&listens[i], &listens[1 - i]);
        serving(&["--etcd", etcd.url(), "--key", k, "--listen", me, "--peer", other], me)
    };
    let mut serving = [Some(serve(0).await), Some(serve(1).await)];
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Who sequences, as etcd says.
    let mut client = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    let got = client.get("/sion-ledger/seq", None).await.expect("get");
    let holder = String::from_utf8(got.kvs().first().expect("a sequencer is elected").value().to_vec())
        .expect("an address");
    let seq = listens.iter().position(|l| *l == holder).expect("one of the two");

    let d = tmp.path().join("robot");
    let d = d.to_str().expect("utf8");
    let url = |i: usize| format!("http://{}", listens[i]);
    // Opened through the one that forwards.
    let o = sion(&["memory", "open", "--data", d, "--ledger", &url(1 - seq)], None);
    assert!(o.status.success(), "{}", text(&o));
    let atoms = sion(&["sim", "--atoms", "40"], None).stdout;
    let lines: Vec<&[u8]> = atoms.split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
    let commit = |part: &[&[u8]]| {
        let input: Vec<u8> = part.iter().flat_map(|l| l.iter().copied().chain([b'\n'])).collect();
        let o = sion(&["memory", "remember", "--data", d, "-"], Some(&input));
        assert!(o.status.success(), "{}", text(&o));
        let o = sion(&["memory", "commit", "--data", d], None);
        assert!(o.status.success(), "{}", text(&o));
    };
    commit(&lines[..10]);
    // SIGKILL: no lease given up, no goodbye.
    if let Some(mut s) = serving[seq].take() {
        s.0.kill().expect("kill -9");
        let _ = s.0.wait();
    }
    commit(&lines[10..20]);
    serving[seq] = Some(serve(seq).await);
    commit(&lines[20..30]);
    // The robot's last commit is the ledger's, checked through the one restarted.
    let proof = tmp.path().join("t.sionproof");
    let f = proof.to_str().expect("utf8");
    let o = sion(&["memory", "prove", "time", "--data", d, "--position", "25", "--out", f], None);
    assert!(o.status.success(), "{}", text(&o));
    let o = sion(&["memory", "verify", "--ledger", &url(seq), "--expect-recorded", "25", f], None);
    assert!(o.status.success() && text(&o).contains("was recorded at Pulse"), "{}", text(&o));
    let got = client.get("/sion-ledger/seq", None).await.expect("get");
    assert!(!got.kvs().is_empty(), "a sequencer is elected again");

    // A wildcard address cannot be advertised to peers.
    let o = sion(
        &[
            "ledger",
            "serve",
            "--etcd",
            etcd.url(),
            "--key",
            k,
            "--listen",
            "0.0.0.0:0",
            "--peer",
            &listens[0],
        ],
        None,
    );
    assert!(!o.status.success() && text(&o).contains("--advertise"), "{}", text(&o));
    // A peer not written as HOST:PORT is refused before anything starts, naming the flag.
    for (bad, says) in [
        ("http://127.0.0.1:7", "no scheme"),
        ("127.0.0.1", "no port"),
        ("127.0.0.1:0", "port"),
        ("127.0.0.1:07", "port"),
        ("::1:7", "brackets"),
        ("[::1]", "no port"),
        ("-x:7", "host"),
        ("a..b:7", "host"),
    ] {
        let o = sion(&["ledger", "serve", "--etcd", etcd.url(), "--key", k, &format!("--peer={bad}")], None);
        let t = text(&o);
        assert!(!o.status.success() && t.contains("--peer") && t.contains(says), "{bad}: {t}");
    }
}
