//! Whoever can write to etcd, on a real etcd: a forged log leaf, a forged agent and nonce, and a
//! head put back to an older Pulse are written straight into etcd with its own client, and no
//! front-end signs a Pulse on them — each refuses, naming the keys (docs/FLEET-LEDGER.md, "What
//! a party with etcd write access can and cannot do"). A robot asking a front-end that refuses
//! is told so, with the keys, and that nothing of its memory is at fault.

mod common;
use common::{commit, commit_cells, free_addr, head};

use ed25519_dalek::SigningKey;
use sion_fleet::client::RemoteLedger;
use sion_fleet::local::Etcd;
use sion_fleet::{FleetError, FleetLedger, Format, agent_value};
use sion_sim::{Warehouse, WarehouseConfig};
use sion_store::index::IndexConfig;
use sion_store::ledger::link::LedgerLink;
use sion_store::ledger::{Agent, AgentStatus, LedgerError, LogId, MemoryLog, SignedTx, Tx, account_of};
use sion_store::memory::Memory;
use sion_verify::merkle::{Blake3, MemoryTree};

/// Commit the next 10 atoms of `log` through `ledger` (its nonce and version read there).
async fn grow(ledger: &mut FleetLedger, writer: &SigningKey, log: LogId) -> Result<u64, FleetError> {
    let nonce = ledger.nonce(&account_of(writer)).await?;
    let current = ledger.log(log).await?.expect("the log exists");
    let size = current.head.size;
    ledger.submit(commit(writer, nonce, log, current.commits, size, size + 10)).await?;
    Ok(size + 10)
}

async fn open_log(ledger: &mut FleetLedger, writer: &SigningKey, agent: Option<&str>) -> LogId {
    let nonce = ledger.nonce(&account_of(writer)).await.expect("nonce");
    let tx =
        SignedTx::sign(writer, nonce, Tx::OpenMemory { agent: agent.map(str::to_owned), policy: [7; 32] });
    ledger.submit(tx).await.expect("open");
    LogId(ledger.log_count().await.expect("count") - 1)
}

fn log_key(prefix: &str, id: LogId) -> String {
    format!("{prefix}log/{:020}", id.0)
}

/// The refusal, or a panic saying what was done instead.
fn mismatch<T: std::fmt::Debug>(what: &str, r: Result<T, FleetError>) -> (Vec<String>, String) {
    match r {
        Err(e @ FleetError::StateMismatch { .. }) => {
            let text = e.to_string();
            let FleetError::StateMismatch { keys, .. } = e else { unreachable!() };
            (keys, text)
        }
        other => panic!("{what}: not refused as a state mismatch: {other:?}"),
    }
}

async fn raw_get(client: &mut etcd_client::Client, key: &str) -> Option<Vec<u8>> {
    client.get(key, None).await.expect("etcd get").kvs().first().map(|kv| kv.value().to_vec())
}

/// The finding of issue 30: a `put` of a log leaf with 10^9 atoms and a made-up root was signed
/// into the next Pulse by the next front-end that read it, and the robot could not even record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_log_leaf_put_into_etcd_is_never_signed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[51; 32]);
    let prefix = "/sion-ledger/tamper/";
    // A ledger that keeps its state key by key (format 3, as every ledger did when this was
    // found); on format 4 no log key is read (`keys_under_the_state_s_old_names_are_never_read`).
    let mut a =
        FleetLedger::init_format(&[etcd.url()], prefix, key.clone(), Format::Keyed).await.expect("init");
    let (w0, w1) = (SigningKey::from_bytes(&[52; 32]), SigningKey::from_bytes(&[53; 32]));
    let (l0, l1) = (open_log(&mut a, &w0, None).await, open_log(&mut a, &w1, None).await);
    grow(&mut a, &w0, l0).await.expect("commit log 0");
    grow(&mut a, &w1, l1).await.expect("commit log 1");

    // A robot whose memory is on the fleet ledger, through a service of its own: log 2.
    let serve = |ledger: FleetLedger| {
        let addr = free_addr();
        tokio::spawn(sion_fleet::service::serve(ledger, addr, std::future::pending()));
        format!("http://{addr}")
    };
    let first = serve(common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect"));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let dir = tmp.path().join("robot");
    let atoms: Vec<_> = Warehouse::new(WarehouseConfig::default()).take(300).collect();
    let (robot_dir, robot_atoms) = (dir.clone(), atoms.clone());
    tokio::task::spawn_blocking(move || {
        let link = RemoteLedger::connect(&first).expect("link");
        let config = IndexConfig::default();
        let mut memory = Memory::options(&robot_dir)
            .index(config.clone())
            .ledger_link(Box::new(link), &first)
            .create()
            .expect("create");
        memory.remember(robot_atoms[..100].to_vec()).expect("remember");
        assert_eq!(memory.commit(false).expect("commit").head.size, 100);
        assert_eq!(memory.log_id(), LogId(2));
    })
    .await
    .expect("the robot's side");
    // Front-end a reads the state again (the robot's Pulses): it holds the latest.
    let signed = a.latest().await.expect("latest").header.number;

    // The attack: log 0's leaf, 10^9 atoms and a made-up root, put with etcd's own client.
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    let true_leaf = raw_get(&mut raw, &log_key(prefix, l0)).await.expect("log 0");
    let mut forged = MemoryLog::decode(&true_leaf).expect("a leaf");
    forged.head.size = 1_000_000_000;
    forged.head.root = [0xEE; 32];
    raw.put(log_key(prefix, l0), forged.encode(), None).await.expect("put the forged leaf");
    let head_before = raw_get(&mut raw, &format!("{prefix}head")).await;

    // A front-end started now (or restarted) reads it, and signs nothing on it.
    let mut b = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect b");
    let (keys, text) = mismatch("a commit through a new front-end", grow(&mut b, &w1, l1).await);
    assert!(keys.contains(&log_key(prefix, l0)), "the forged key is not named: {keys:?}");
    assert!(text.contains(&format!("does not match signed Pulse {signed}")), "{text}");
    assert_eq!(raw_get(&mut raw, &format!("{prefix}head")).await, head_before, "a Pulse was signed");
    // Its reads of the state refuse too: no robot is told it has 10^9 atoms.
    mismatch("a read of log 0", b.log(l0).await);

    // The front-end that held the state before builds on what it checked, not on etcd's leaf:
    // the Pulse it signs has log 0 as it truly stands.
    let before = raw_get(&mut raw, &log_key(prefix, l1)).await;
    grow(&mut a, &w1, l1).await.expect("a builds on the state it held");
    assert_ne!(raw_get(&mut raw, &log_key(prefix, l1)).await, before);
    let latest = a.latest().await.expect("latest").header;
    let mut leaves = vec![true_leaf.clone()];
    for id in 1..3 {
        leaves.push(raw_get(&mut raw, &log_key(prefix, LogId(id))).await.expect("log"));
    }
    let root = MemoryTree::<Blake3>::from_leaves(leaves).root();
    assert_eq!((latest.logs, latest.state_root), (3, root), "a signed the forged leaf");
    let head_before = raw_get(&mut raw, &format!("{prefix}head")).await;

    // Now the forged key is older than the head: a new front-end still finds it, by the signed
    // state root, and names it (it differs from the log's last version record).
    let mut c = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect c");
    let (keys, _) = mismatch("a commit through a third front-end", grow(&mut c, &w0, l0).await);
    assert_eq!(keys, vec![log_key(prefix, l0)], "the forged key is not the one named");
    mismatch("b again", grow(&mut b, &w1, l1).await);
    assert_eq!(raw_get(&mut raw, &format!("{prefix}head")).await, head_before, "a Pulse was signed");

    // The robot restarts through a front-end started after the forgery: the service refuses
    // with its code; the robot opens from its ledger-view, records on, is told its commit waits
    // on the ledger and that nothing of its memory is at fault; a new robot cannot open a log.
    let second = serve(common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect"));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (prefix_owned, url, robot_dir) = (prefix.to_owned(), second.clone(), dir.clone());
    let mut memory = tokio::task::spawn_blocking(move || {
        let link = RemoteLedger::connect(&url).expect("link");
        match link.log(LogId(0)) {
            Err(LedgerError::Remote { message, .. }) => {
                assert!(message.contains("does not match signed Pulse"), "{message}");
                assert!(message.contains(&log_key(&prefix_owned, LogId(0))), "{message}");
                assert!(message.contains("Nothing of this memory is at fault"), "{message}");
            }
            other => panic!("the service served the forged state: {other:?}"),
        }
        let config = IndexConfig::default();
        let created = Memory::options(robot_dir.with_file_name("new-robot"))
            .index(config.clone())
            .ledger_link(Box::new(link), &url)
            .create();
        let e = created.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("does not match signed Pulse"), "opening a log: {e}");

        let connect =
            |_: &str, _: &ed25519_dalek::VerifyingKey| -> Result<Box<dyn LedgerLink>, LedgerError> {
                Ok(Box::new(RemoteLedger::connect(&url)?))
            };
        let mut memory = Memory::options(&robot_dir)
            .index(config.clone())
            .connect(&connect)
            .open()
            .expect("opens from ledger-view");
        memory.remember(atoms[100..].to_vec()).expect("records on");
        let e = memory.commit(false).expect_err("a commit through a front-end that refuses").to_string();
        assert!(
            e.contains("does not match signed Pulse") && e.contains("Nothing of this memory is at fault"),
            "{e}"
        );
        assert!(!e.contains("lost or rewritten"), "the robot is blamed: {e}");
        memory
    })
    .await
    .expect("the robot's side");
    assert_eq!(raw_get(&mut raw, &format!("{prefix}head")).await, head_before, "a Pulse was signed");

    // The operator puts the leaf back as the signed Pulses say: every front-end goes on, and the
    // robot's backlog goes in with one commit.
    raw.put(log_key(prefix, l0), true_leaf, None).await.expect("put back");
    grow(&mut c, &w0, l0).await.expect("c commits once etcd agrees with the signed Pulses");
    grow(&mut b, &w1, l1).await.expect("b too");
    grow(&mut a, &w0, l0).await.expect("and a");
    let committed = tokio::task::spawn_blocking(move || memory.commit(false).expect("the backlog").head.size)
        .await
        .expect("the robot's side");
    assert_eq!(committed, 300);
}

/// Agents and nonces are not in the state root: a front-end that held the state checks the
/// Pulses others made since by replaying them, and names what etcd holds that they did not make.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_agent_and_nonce_are_named_by_a_front_end_that_held_the_state() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[61; 32]);
    let prefix = "/sion-ledger/tamper-agents/";
    // Format 3: agents and nonces kept key by key (on format 4 they are not read from keys).
    let mut a =
        FleetLedger::init_format(&[etcd.url()], prefix, key.clone(), Format::Keyed).await.expect("init");
    let operator = SigningKey::from_bytes(&[62; 32]);
    let robot = SigningKey::from_bytes(&[63; 32]);
    let register = SignedTx::sign(
        &operator,
        0,
        Tx::RegisterAgent { name: "fleet".into(), controller: account_of(&robot) },
    );
    a.submit(register).await.expect("register");
    open_log(&mut a, &robot, Some("fleet")).await;
    let w2 = SigningKey::from_bytes(&[65; 32]);
    let log2 = open_log(&mut a, &w2, None).await;
    // Front-end b reads and checks the state, and commits on it: it holds Pulse 4, a Pulse 3.
    let mut b = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect b");
    grow(&mut b, &w2, log2).await.expect("b commits");

    // The attack: the agent handed to the attacker's key, and the robot's nonce put back to 0
    // (its signed transactions could then be replayed).
    let attacker = SigningKey::from_bytes(&[64; 32]);
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    let stolen = Agent { name: "fleet".into(), controller: account_of(&attacker), status: AgentStatus::Live };
    let agent_key = format!("{prefix}agent/fleet");
    raw.put(agent_key.clone(), agent_value(&stolen), None).await.expect("put agent");
    let nonce_key = format!("{prefix}nonce/{}", hex::encode(account_of(&robot).0));
    raw.put(nonce_key.clone(), 0u64.to_le_bytes().to_vec(), None).await.expect("put nonce");

    // Written after the head: a front-end reading it now refuses, naming both.
    let mut fresh = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    let open = SignedTx::sign(&attacker, 0, Tx::OpenMemory { agent: Some("fleet".into()), policy: [0; 32] });
    let (keys, _) = mismatch("the attacker's log under the stolen agent", fresh.submit(open.clone()).await);
    assert_eq!(keys, vec![agent_key.clone(), nonce_key.clone()]);

    // Front-end b builds on the state it checked (its Pulse takes neither forged value), which
    // moves the head past them; a, which held Pulse 3, replays b's Pulses and names both keys.
    grow(&mut b, &w2, log2).await.expect("b builds on the state it held");
    let (keys, text) = mismatch("a after b's Pulses", a.submit(open).await);
    assert_eq!(keys, vec![agent_key, nonce_key], "{text}");
    assert!(text.contains("made of the state this front-end held at Pulse 3"), "{text}");
}

/// On format 4 the entries are the ledger: what etcd holds under the state's old key names
/// (`log/`, `agent/`, `nonce/`) is never read, so forging it does nothing; the state snapshot a
/// front-end starts from is signed by the ledger key, and one that does not check out is passed
/// over for the entries; and a snapshot signed as of a Pulse past the head is proof that the
/// head was put back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_format_4_forged_state_keys_are_never_read_and_the_snapshot_is_signed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[121; 32]);
    let prefix = "/sion-ledger/tamper-format4/";
    let mut a = FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
    let operator = SigningKey::from_bytes(&[122; 32]);
    let robot = SigningKey::from_bytes(&[123; 32]);
    let register = SignedTx::sign(
        &operator,
        0,
        Tx::RegisterAgent { name: "fleet".into(), controller: account_of(&robot) },
    );
    a.submit(register).await.expect("register");
    let log = open_log(&mut a, &robot, Some("fleet")).await;
    let size = grow(&mut a, &robot, log).await.expect("commit");
    let nonce = a.nonce(&account_of(&robot)).await.expect("nonce");

    // The attack of issue 30 and of agents and nonces, on their old keys: a log with 10^9 atoms,
    // the agent handed to the attacker, the robot's nonce put back to 0.
    let attacker = SigningKey::from_bytes(&[124; 32]);
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    let mut forged = a.log(log).await.expect("log").expect("exists");
    forged.head.size = 1_000_000_000;
    raw.put(log_key(prefix, log), forged.encode(), None).await.expect("put log");
    let stolen = Agent { name: "fleet".into(), controller: account_of(&attacker), status: AgentStatus::Live };
    raw.put(format!("{prefix}agent/fleet"), agent_value(&stolen), None).await.expect("put agent");
    let nonce_key = format!("{prefix}nonce/{}", hex::encode(account_of(&robot).0));
    raw.put(nonce_key, 0u64.to_le_bytes().to_vec(), None).await.expect("put nonce");
    // A front-end started now holds what the entries say, and refuses the attacker by the rules.
    let mut fresh = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    assert_eq!(fresh.log(log).await.expect("log").expect("exists").head.size, size);
    assert_eq!(fresh.nonce(&account_of(&robot)).await.expect("nonce"), nonce);
    assert_eq!(
        fresh.agent("fleet").await.expect("agent").expect("registered").controller,
        account_of(&robot)
    );
    let open = SignedTx::sign(&attacker, 0, Tx::OpenMemory { agent: Some("fleet".into()), policy: [0; 32] });
    match fresh.submit(open).await {
        Err(FleetError::Refused(LedgerError::NotController { .. })) => {}
        other => panic!("the attacker opened a log under the agent: {other:?}"),
    }
    let size = grow(&mut fresh, &robot, log).await.expect("the robot commits on");

    // A snapshot of the state, then a chunk of it edited: passed over for the entries.
    let s = fresh.write_state_snapshot().await.expect("snapshot").expect("written");
    let chunk = format!("{prefix}statechunk/{s:020}/{:020}", 0);
    let honest = raw_get(&mut raw, &chunk).await.expect("the chunk");
    let mut edited = honest.clone();
    let at = edited.len() - 1;
    edited[at] ^= 1;
    raw.put(chunk.clone(), edited, None).await.expect("edit the chunk");
    let mut b = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    assert_eq!(b.log(log).await.expect("from the entries").expect("exists").head.size, size);
    // The last record is the last account's nonce: the edited one is not the one held.
    let truth = fresh.nonce(&account_of(&robot)).await.expect("nonce");
    assert_eq!(b.nonce(&account_of(&robot)).await.expect("nonce"), truth);
    raw.put(chunk, honest, None).await.expect("put back");
    // A pointer whose signature does not hold: passed over too.
    let pointer = format!("{prefix}statesnap");
    let signed = raw_get(&mut raw, &pointer).await.expect("the pointer");
    let mut unsigned = signed.clone();
    let at = unsigned.len() - 1;
    unsigned[at] ^= 1;
    raw.put(pointer.clone(), unsigned, None).await.expect("forge the pointer");
    let mut c = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    assert_eq!(c.log(log).await.expect("from the entries").expect("exists").head.size, size);
    raw.put(pointer.clone(), signed, None).await.expect("put back");

    // The head put back to the Pulse before the snapshot's, the Pulses past it and their version
    // records deleted: the signed snapshot of a later Pulse tells.
    let last = fresh.log(log).await.expect("log").expect("exists").commits;
    let old = fresh.header(s - 1).await.expect("Pulse before").header;
    let mut value = old.number.to_le_bytes().to_vec();
    value.extend_from_slice(&old.hash());
    raw.put(format!("{prefix}head"), value, None).await.expect("put the old head");
    raw.delete(format!("{prefix}pulse/{s:020}"), None).await.expect("delete");
    raw.delete(format!("{prefix}sig/{s:020}"), None).await.expect("delete");
    raw.delete(format!("{prefix}version/{:020}/{last:020}", log.0), None).await.expect("delete");
    let mut d = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    let (keys, text) = mismatch("a commit on the hidden rollback", grow(&mut d, &robot, log).await);
    assert_eq!(keys, vec![format!("{prefix}head"), pointer], "{text}");
    assert!(
        text.contains(&format!("signed a snapshot of the state as of Pulse {s}, past the head")),
        "{text}"
    );
}

/// An agent's transaction (a suspension) taken out of a batched Pulse's entry: no header commits
/// to agents, so the roots do not tell; the ledger key's signature over the entry (`P/esig/N`)
/// does, and a front-end replaying the entry refuses it rather than take the robot as live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_format_4_an_agents_transaction_taken_out_of_an_entry_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[125; 32]);
    let prefix = "/sion-ledger/tamper-entry/";
    let mut a = FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
    let robot = SigningKey::from_bytes(&[126; 32]);
    let register =
        SignedTx::sign(&key, 0, Tx::RegisterAgent { name: "fleet".into(), controller: account_of(&robot) });
    a.submit(register).await.expect("register");
    let log = open_log(&mut a, &robot, Some("fleet")).await;
    // A front-end holding the state before the Pulse, so that it replays it.
    let mut held = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    held.latest().await.expect("held");

    // One Pulse: the robot's commit, then the operator's suspension of its agent.
    let nonce = a.nonce(&account_of(&robot)).await.expect("nonce");
    let current = a.log(log).await.expect("log").expect("exists");
    let size = current.head.size;
    let c = commit(&robot, nonce, log, current.commits, size, size + 10);
    let operator_nonce = a.nonce(&account_of(&key)).await.expect("nonce");
    let suspend = SignedTx::sign(
        &key,
        operator_nonce,
        Tx::SetAgentStatus { name: "fleet".into(), status: AgentStatus::Suspended },
    );
    let taken = a.submit_batch(vec![c, suspend]).await;
    let n = taken[0].as_ref().expect("the commit taken").pulse.header.number;
    assert_eq!(taken[1].as_ref().expect("the suspension taken").pulse.header.number, n, "one Pulse");

    // The entry rewritten by a party with etcd write access, the suspension taken out: the
    // commit alone (kind 1), the header as it was.
    let entry_key = format!("{prefix}pulse/{n:020}");
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    let honest = raw_get(&mut raw, &entry_key).await.expect("the entry");
    assert_eq!((honest[0], u32::from_le_bytes(honest[1..5].try_into().expect("count"))), (2, 2));
    let len = u32::from_le_bytes(honest[5..9].try_into().expect("length")) as usize;
    let second = u32::from_le_bytes(honest[9 + len..13 + len].try_into().expect("length")) as usize;
    let mut rewritten = vec![1];
    rewritten.extend_from_slice(&honest[5..9 + len]);
    rewritten.extend_from_slice(&honest[13 + len + second..]);
    raw.put(entry_key.as_str(), rewritten, None).await.expect("rewrite the entry");

    // A front-end started afresh and the one that held the Pulse before both replay it: refused,
    // naming the entry and its signature — the robot's agent is never taken as live.
    let esig_key = format!("{prefix}esig/{n:020}");
    let mut afresh = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    for (who, refused) in [("afresh", afresh.latest().await), ("held", held.latest().await)] {
        let (keys, text) = mismatch(who, refused);
        assert_eq!(keys, vec![entry_key.clone(), esig_key.clone()], "{who}: {text}");
        assert!(
            text.contains(&format!("Pulse {n}'s entry is not the one the ledger's key signed")),
            "{text}"
        );
    }
    let next = commit(&robot, nonce + 1, log, current.commits + 1, size + 10, size + 20);
    mismatch("a commit of the robot whose suspension was taken out", afresh.submit(next.clone()).await);

    // The entry put back: served again, and the robot's commit refused as contained.
    raw.put(entry_key.as_str(), honest, None).await.expect("put back");
    let mut again = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    assert_eq!(
        again.agent("fleet").await.expect("agent").expect("registered").status,
        AgentStatus::Suspended
    );
    match again.submit(next).await {
        Err(FleetError::Refused(LedgerError::AgentNotLive { .. })) => {}
        other => panic!("a suspended robot's commit: {other:?}"),
    }
}

/// A head put back to an older Pulse would have the next front-end sign a second header for a
/// number already signed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_put_back_to_an_older_pulse_is_not_built_on() {
    head_put_back(false).await;
}

/// The same on a ledger that keeps its state key by key (format 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_put_back_on_a_ledger_of_format_3_is_not_built_on() {
    head_put_back(true).await;
}

async fn head_put_back(keyed: bool) {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[71; 32]);
    let prefix = "/sion-ledger/tamper-head/";
    let mut a = if keyed {
        FleetLedger::init_format(&[etcd.url()], prefix, key.clone(), Format::Keyed).await.expect("init")
    } else {
        FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init")
    };
    let w = SigningKey::from_bytes(&[72; 32]);
    let log = open_log(&mut a, &w, None).await;
    for _ in 0..3 {
        grow(&mut a, &w, log).await.expect("commit");
    }
    let latest = a.latest().await.expect("latest").header.number;
    let old = a.header(2).await.expect("Pulse 2").header;
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    let mut value = old.number.to_le_bytes().to_vec();
    value.extend_from_slice(&old.hash());
    raw.put(format!("{prefix}head"), value.clone(), None).await.expect("put the old head");

    // A new front-end finds Pulse 3 past the head.
    let mut b = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    let (keys, text) = mismatch("a commit on the old head", grow(&mut b, &w, log).await);
    assert!(keys.contains(&format!("{prefix}pulse/{:020}", 3)), "{text}");
    // The front-end that held Pulse `latest` says the chain went back.
    let (keys, text) = mismatch("a commit through a", grow(&mut a, &w, log).await);
    assert_eq!(keys, vec![format!("{prefix}head"), format!("{prefix}pulse/{:020}", 3)], "{text}");
    assert!(raw_get(&mut raw, &format!("{prefix}pulse/{:020}", latest + 1)).await.is_none());

    // The later Pulses deleted as well, to hide them: on format 3 the logs are ahead of Pulse 2's
    // state root; on either, their version records are more than the Pulses up to 2 made.
    for n in 3..=latest {
        raw.delete(format!("{prefix}pulse/{n:020}"), None).await.expect("delete");
        raw.delete(format!("{prefix}sig/{n:020}"), None).await.expect("delete");
    }
    let mut c = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    let (keys, text) = mismatch("a commit on the hidden rollback", grow(&mut c, &w, log).await);
    if keyed {
        assert_eq!(keys, vec![log_key(prefix, log)]);
    } else {
        assert_eq!(keys, vec![format!("{prefix}head"), format!("{prefix}version/")], "{text}");
        assert!(
            text.contains(
                "etcd holds 4 version records, but the signed Pulses up to the head, Pulse 2, made 2"
            ),
            "{text}"
        );
    }
    let (_, text) = mismatch("a, which held the later Pulse", grow(&mut a, &w, log).await);
    assert!(text.contains("rolled back"), "{text}");
    assert_eq!(raw_get(&mut raw, &format!("{prefix}head")).await, Some(value), "a Pulse was signed");
}

/// A fleet ledger whose key holder has signed a Pulse of its own into etcd (the insider's
/// commit of its own log, over a state in which the robot's log also has 10^9 atoms), after a
/// witness cosigned the honest chain up to the Pulse before it.
struct Forged {
    _tmp: tempfile::TempDir,
    etcd: Etcd,
    prefix: &'static str,
    key: SigningKey,
    witness_key: SigningKey,
    state: std::path::PathBuf,
    /// The front-end that held the state before the forgery.
    a: FleetLedger,
    robot: SigningKey,
    victim: LogId,
    own: LogId,
    /// The forged Pulse's number and header.
    number: u64,
    header: sion_store::ledger::PulseHeader,
    /// The honest Pulse before it.
    last: sion_store::ledger::PulseHeader,
    /// The robot's log as it truly stands, and the insider's log after its commit.
    victim_leaf: MemoryLog,
    moved: MemoryLog,
}

fn service_url(ledger: FleetLedger, accepted: &[[u8; 32]]) -> String {
    let addr = free_addr();
    let service = sion_fleet::service::Service::new(ledger).accepting(accepted.to_vec());
    tokio::spawn(sion_fleet::service::serve_service(service, addr, std::future::pending()));
    format!("http://{addr}")
}

async fn forged_pulse(seed: u8, prefix: &'static str) -> Forged {
    use sion_fleet::witness::Witness;
    use sion_store::ledger::{PulseHeader, SignedHeader};

    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[seed; 32]);
    // Format 3, whose front-end started afresh takes the logs as etcd holds them once they hash
    // to the signed root. On format 4 one replays the entries since the last state snapshot, and
    // the key holder would forge a snapshot as well: the witness's check is the same.
    let mut a =
        FleetLedger::init_format(&[etcd.url()], prefix, key.clone(), Format::Keyed).await.expect("init");
    let (robot, insider) = (SigningKey::from_bytes(&[seed + 1; 32]), SigningKey::from_bytes(&[seed + 2; 32]));
    let (victim, own) = (open_log(&mut a, &robot, None).await, open_log(&mut a, &insider, None).await);
    grow(&mut a, &robot, victim).await.expect("commit");
    grow(&mut a, &insider, own).await.expect("commit");
    let last = a.latest().await.expect("latest").header;

    let (ledger_key, witness_key) = (key.verifying_key(), SigningKey::from_bytes(&[seed + 3; 32]));
    let accepted = [witness_key.verifying_key().to_bytes()];
    let url =
        service_url(common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect"), &accepted);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let state = tmp.path().join("witness.state");
    let (state_w, wk) = (state.clone(), witness_key.clone());
    let cosigned = tokio::task::spawn_blocking(move || {
        let mut witness = Witness::open(wk, ledger_key, &state_w).expect("witness");
        let link = RemoteLedger::connect(&url).expect("link");
        witness.follow(&link, |_| {}).expect("the honest chain is cosigned")
    })
    .await
    .expect("witness");
    assert_eq!(cosigned, last.number + 1, "every Pulse of the honest chain, the genesis included");

    // The insider's own commit (a real transaction of its own log), and a Pulse over a state in
    // which the robot's log was also rewritten, signed with the ledger key and put in etcd as a
    // front-end would: one transaction, so nothing in it looks written after the head.
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    let mine =
        MemoryLog::decode(&raw_get(&mut raw, &log_key(prefix, own)).await.expect("own")).expect("leaf");
    let tx = commit(&insider, 2, own, mine.commits, mine.head.size, mine.head.size + 10);
    let victim_leaf =
        MemoryLog::decode(&raw_get(&mut raw, &log_key(prefix, victim)).await.expect("victim")).expect("leaf");
    let mut forged = victim_leaf.clone();
    forged.head.size = 1_000_000_000;
    forged.head.root = [0xEE; 32];
    let number = last.number + 1;
    let moved = MemoryLog {
        head: head(mine.head.size + 10),
        commits: mine.commits + 1,
        committed_at: number,
        ..mine
    };
    let tree = MemoryTree::<Blake3>::from_leaves([forged.encode(), moved.encode()]);
    let header = PulseHeader {
        number,
        time_ns: last.time_ns + 1,
        logs: 2,
        state_root: tree.root(),
        prev: last.hash(),
        cells: last.cells,
    };
    let signature = SignedHeader::sign(&key, header).signature;
    let mut entry = vec![1u8];
    let bytes = tx.encode();
    entry.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    entry.extend_from_slice(&bytes);
    entry.extend_from_slice(&header.encode());
    let mut head_value = number.to_le_bytes().to_vec();
    head_value.extend_from_slice(&header.hash());
    let k = |rest: String| format!("{prefix}{rest}");
    let put = |key: String, value: Vec<u8>| etcd_client::TxnOp::put(key, value, None);
    raw.txn(etcd_client::Txn::new().and_then(vec![
        put(k("head".into()), head_value),
        put(k(format!("pulse/{number:020}")), entry),
        put(k(format!("sig/{number:020}")), signature.to_vec()),
        put(log_key(prefix, victim), forged.encode()),
        put(log_key(prefix, own), moved.encode()),
        put(k(format!("nonce/{}", hex::encode(account_of(&insider).0))), 3u64.to_le_bytes().to_vec()),
    ]))
    .await
    .expect("the insider's transaction");
    Forged {
        _tmp: tmp,
        etcd,
        prefix,
        key,
        witness_key,
        state,
        a,
        robot,
        victim,
        own,
        number,
        header,
        last,
        victim_leaf,
        moved,
    }
}

/// The holder of the ledger key, with etcd write access, signs a Pulse of its own: its own
/// commit's transaction, over a state in which a robot's log also has 10^9 atoms. A front-end
/// started after it cannot tell (the header is signed and the logs hash to its root), but a
/// witness checks the state root against the transaction and the Pulse before, and refuses
/// to cosign it. The entry's transaction is covered by no signature, so this is told as an
/// entry that does not explain its header, not as signed evidence of a fork.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_witness_refuses_a_signed_state_root_that_does_not_follow_from_the_transaction() {
    use sion_fleet::witness::{Witness, WitnessError};

    let mut f = forged_pulse(81, "/sion-ledger/tamper-witness/").await;
    let (prefix, number, header) = (f.prefix, f.number, f.header);
    // A front-end that held the state before replays the Pulse and refuses; one started now
    // serves it (signed, hashing to its root); the witness does not cosign it.
    let (keys, _) = mismatch("a front-end that held Pulse 4", grow(&mut f.a, &f.robot, f.victim).await);
    assert_eq!(keys, vec![log_key(prefix, f.victim)]);
    let accepted = [f.witness_key.verifying_key().to_bytes()];
    let url = service_url(
        common::connect(&[f.etcd.url()], prefix, f.key.clone()).await.expect("connect"),
        &accepted,
    );
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (witness_key, ledger_key, state) = (f.witness_key.clone(), f.key.verifying_key(), f.state.clone());
    tokio::task::spawn_blocking(move || {
        let mut witness = Witness::open(witness_key, ledger_key, &state).expect("witness");
        let link = RemoteLedger::connect(&url).expect("link");
        assert_eq!(link.latest().expect("served").header, header, "the new front-end serves it");
        match witness.follow(&link, |_| {}) {
            Err(e @ WitnessError::Damaged { number: n, .. }) => {
                assert_eq!(n, number);
                assert!(e.to_string().contains("other than log 1"), "{e}");
            }
            other => panic!("the witness cosigned a state that does not follow: {other:?}"),
        }
        assert_eq!(witness.last().map(|l| l.0), Some(number - 1), "it cosigned the forged Pulse");
    })
    .await
    .expect("witness");
}

/// What a lying service tells a witness, about the forged Pulse only (everything else, and the
/// forged Pulse's header and entry, is the honest front-end's answer over the forged etcd).
#[derive(Clone)]
enum Lie {
    /// State proofs of Pulse `number` under another header the key holder signed for it.
    ProofsUnder { number: u64, proof: Vec<u8>, log: LogId },
    /// `Entry(number)` refused as archived.
    Archived { number: u64 },
    /// `Cells` as of Pulse `number − 1` (what a witness asks to check Pulse `number`'s cells
    /// root) with a hash or digest of the proof changed.
    CellsEdited { number: u64 },
    /// No lie: a service whose `Cells` answers are bounded tighter, refusing (`too_large`) any
    /// question naming more than `most` cells; the count of cells each question named, kept.
    CellsAtMost { most: usize, asked: std::sync::Arc<std::sync::Mutex<Vec<usize>>> },
}

/// The key holder's own service: a real front-end behind it, and one lie.
struct Liar {
    inner: sion_fleet::service::Service,
    lie: Lie,
    /// The Pulses a cosignature was handed for.
    cosigned: std::sync::Arc<std::sync::Mutex<Vec<u64>>>,
}

mod liar {
    use sion_fleet::service::pb::ledger_server::Ledger;
    use sion_fleet::service::pb::{
        Blob, CellsAsked, Cosigned, Empty, Forwarded, List, LogAt, Maybe, Name, Number, Outcomes, Sizes,
        VersionsQuery,
    };
    use tonic::{Request, Response, Status};

    use super::{Liar, Lie};

    type R<T> = Result<Response<T>, Status>;

    #[tonic::async_trait]
    impl Ledger for Liar {
        async fn key(&self, r: Request<Empty>) -> R<Blob> {
            self.inner.key(r).await
        }
        async fn submit(&self, r: Request<Blob>) -> R<Blob> {
            self.inner.submit(r).await
        }
        async fn latest(&self, r: Request<Empty>) -> R<Blob> {
            self.inner.latest(r).await
        }
        async fn header(&self, r: Request<Number>) -> R<Blob> {
            self.inner.header(r).await
        }
        async fn log(&self, r: Request<Number>) -> R<Maybe> {
            self.inner.log(r).await
        }
        async fn log_count(&self, r: Request<Empty>) -> R<Number> {
            self.inner.log_count(r).await
        }
        async fn nonce(&self, r: Request<Blob>) -> R<Number> {
            self.inner.nonce(r).await
        }
        async fn agent(&self, r: Request<Name>) -> R<Maybe> {
            self.inner.agent(r).await
        }
        async fn state(&self, r: Request<LogAt>) -> R<Blob> {
            if let Lie::ProofsUnder { number, proof, log } = &self.lie
                && r.get_ref().at == *number
                && r.get_ref().log == log.0
            {
                return Ok(Response::new(Blob { value: proof.clone() }));
            }
            self.inner.state(r).await
        }
        async fn time(&self, r: Request<LogAt>) -> R<Blob> {
            self.inner.time(r).await
        }
        async fn last_commit_at_most(&self, r: Request<LogAt>) -> R<Maybe> {
            self.inner.last_commit_at_most(r).await
        }
        async fn first_commit_over(&self, r: Request<LogAt>) -> R<Maybe> {
            self.inner.first_commit_over(r).await
        }
        async fn versions(&self, r: Request<VersionsQuery>) -> R<List> {
            self.inner.versions(r).await
        }
        async fn cosign(&self, r: Request<Cosigned>) -> R<Empty> {
            self.cosigned.lock().expect("lock").push(r.get_ref().number);
            self.inner.cosign(r).await
        }
        async fn cosignatures(&self, r: Request<Number>) -> R<List> {
            self.inner.cosignatures(r).await
        }
        async fn entry(&self, r: Request<Number>) -> R<Blob> {
            if let Lie::Archived { number } = &self.lie
                && r.get_ref().value == *number
            {
                let mut s = Status::failed_precondition(format!("Pulse {number} is archived"));
                s.metadata_mut().insert(sion_fleet::service::REFUSAL, "archived".parse().expect("ascii"));
                return Err(s);
            }
            self.inner.entry(r).await
        }
        async fn checkpoint(&self, r: Request<Empty>) -> R<Blob> {
            self.inner.checkpoint(r).await
        }
        async fn history_consistency(&self, r: Request<Sizes>) -> R<List> {
            self.inner.history_consistency(r).await
        }
        async fn history_inclusion(&self, r: Request<Sizes>) -> R<List> {
            self.inner.history_inclusion(r).await
        }
        async fn cosigned_checkpoint(&self, r: Request<Number>) -> R<Maybe> {
            self.inner.cosigned_checkpoint(r).await
        }
        async fn forward(&self, r: Request<Forwarded>) -> R<Outcomes> {
            self.inner.forward(r).await
        }
        async fn cells(&self, r: Request<CellsAsked>) -> R<Maybe> {
            use sion_verify::proof::fleet::CellNode;
            let at = r.get_ref().at;
            if let Lie::CellsAtMost { most, asked } = &self.lie
                && let Ok(sion_fleet::cells::AskedCells::Keys(keys)) =
                    sion_fleet::cells::AskedCells::decode(&r.get_ref().asked)
            {
                asked.lock().expect("lock").push(keys.len());
                if keys.len() > *most {
                    let mut refused =
                        Status::out_of_range(format!("{} cells: past this service's bound", keys.len()));
                    refused
                        .metadata_mut()
                        .insert(sion_fleet::service::REFUSAL, "too_large".parse().expect("ascii"));
                    return Err(refused);
                }
            }
            let mut answer = self.inner.cells(r).await?;
            if let Lie::CellsEdited { number } = &self.lie
                && at == Some(number - 1)
                && let Some(bytes) = answer.get_mut().value.as_mut()
            {
                let (header, mut nodes) = sion_fleet::cells::decode_answer(bytes).expect("an answer");
                let edited = nodes.iter_mut().find_map(|n| match n {
                    CellNode::Opaque(d) | CellNode::Other(_, d) => {
                        d[0] ^= 1;
                        Some(())
                    }
                    CellNode::Listed(_, ids) => {
                        ids.push(u64::MAX - 1);
                        Some(())
                    }
                    _ => None,
                });
                assert!(edited.is_some(), "a node to edit");
                *bytes = sion_fleet::cells::encode_answer(&header, &nodes);
            }
            Ok(answer)
        }
    }
}

/// Serve `ledger` behind a [`Liar`] telling `lie`; the URL and the record of cosignatures.
fn serve_liar(
    ledger: FleetLedger,
    accepted: &[[u8; 32]],
    lie: Lie,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<u64>>>) {
    use sion_fleet::service::pb::ledger_server::LedgerServer;
    let addr = free_addr();
    let inner = sion_fleet::service::Service::new(ledger).accepting(accepted.to_vec());
    let cosigned = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let liar = Liar { inner, lie, cosigned: cosigned.clone() };
    tokio::spawn(tonic::transport::Server::builder().add_service(LedgerServer::new(liar)).serve(addr));
    (format!("http://{addr}"), cosigned)
}

/// The review's F1: the key holder signs a second header for the forged Pulse's number, over
/// the state its transaction truly makes, and its own service answers the witness's state
/// proofs under that one while `Header` and `Entry` give the forged one. Each proof holds
/// under a header the key signed, so on the old code the witness cosigned the forged header;
/// now a proof must be under exactly the header it checks, and two signed headers for one
/// number are the ledger equivocating.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_witness_refuses_state_proofs_under_another_signed_header() {
    use sion_fleet::witness::{Witness, WitnessError};
    use sion_store::ledger::{PulseHeader, SignedHeader, StateProof};

    let f = forged_pulse(91, "/sion-ledger/tamper-witness-proofs/").await;
    let number = f.number;
    // The honest-looking second header: the insider's commit over the robot's true log.
    let tree = MemoryTree::<Blake3>::from_leaves([f.victim_leaf.encode(), f.moved.encode()]);
    let second = PulseHeader {
        number,
        time_ns: f.last.time_ns + 2,
        logs: 2,
        state_root: tree.root(),
        prev: f.last.hash(),
        cells: f.last.cells,
    };
    let path = sion_verify::merkle::inclusion_path::<Blake3, _>(&tree, f.own.0, 2).expect("path");
    let proof = StateProof { header: SignedHeader::sign(&f.key, second), log: f.moved.clone(), path };
    let mut bytes = Vec::new();
    proof.put(&mut bytes);
    let accepted = [f.witness_key.verifying_key().to_bytes()];
    let ledger = common::connect(&[f.etcd.url()], f.prefix, f.key.clone()).await.expect("connect");
    let (url, cosigned) =
        serve_liar(ledger, &accepted, Lie::ProofsUnder { number, proof: bytes, log: f.own });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (witness_key, ledger_key, state) = (f.witness_key.clone(), f.key.verifying_key(), f.state.clone());
    let (forged, offered) = (f.header.hash(), second.hash());
    tokio::task::spawn_blocking(move || {
        let mut witness = Witness::open(witness_key, ledger_key, &state).expect("witness");
        let link = RemoteLedger::connect(&url).expect("link");
        match witness.follow(&link, |_| {}) {
            Err(WitnessError::Equivocation { number: n, cosigned, offered: o, .. }) => {
                assert_eq!(n, number);
                assert_eq!((cosigned, o), (hex::encode(forged), hex::encode(offered)), "the evidence");
            }
            other => panic!("the witness cosigned a header its proofs were not under: {other:?}"),
        }
        assert_eq!(witness.last().map(|l| l.0), Some(number - 1), "it took the forged Pulse");
    })
    .await
    .expect("witness");
    assert!(
        !cosigned.lock().expect("lock").contains(&number),
        "a cosignature of the forged Pulse was handed"
    );
}

/// The review's F2: the key holder's service says the forged Pulse's entry is archived. On the
/// old code the witness skipped the check and cosigned it; now it follows the chain past it
/// without a cosignature, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_witness_never_cosigns_a_pulse_it_was_told_is_archived() {
    use sion_fleet::witness::Witness;

    let f = forged_pulse(101, "/sion-ledger/tamper-witness-archived/").await;
    let number = f.number;
    let accepted = [f.witness_key.verifying_key().to_bytes()];
    let ledger = common::connect(&[f.etcd.url()], f.prefix, f.key.clone()).await.expect("connect");
    let (url, cosigned) = serve_liar(ledger, &accepted, Lie::Archived { number });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (witness_key, ledger_key, state) = (f.witness_key.clone(), f.key.verifying_key(), f.state.clone());
    let hash = f.header.hash();
    let link_url = url.clone();
    tokio::task::spawn_blocking(move || {
        let mut witness = Witness::open(witness_key.clone(), ledger_key, &state).expect("witness");
        let link = RemoteLedger::connect(&link_url).expect("link");
        assert_eq!(witness.follow(&link, |_| {}).expect("followed"), 0, "it cosigned the unchecked Pulse");
        assert_eq!(witness.passed(), 1);
        assert_eq!(witness.last(), Some((number, hash)), "it follows the chain past it");
        // Restarted, it asks for the last one again: still unchecked, still not cosigned.
        let mut again = Witness::open(witness_key, ledger_key, &state).expect("reopened");
        assert_eq!(again.follow(&link, |_| {}).expect("again"), 0);
        assert!(link.cosignatures(number).expect("cosignatures").is_empty(), "a cosignature was kept");
    })
    .await
    .expect("witness");
    assert!(
        !cosigned.lock().expect("lock").contains(&number),
        "a cosignature of the unchecked Pulse was handed"
    );
}

/// The review's F4: the entry's transaction is covered by no signature of the ledger's key, so
/// whoever can write etcd can rewrite it under an honest header. A witness must not take that
/// for the key holder's fork (FORK, exit 4, for good): it says the entry does not explain the
/// header, does not cosign, and goes on once the entry is put back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewritten_entry_is_damage_to_a_witness_not_a_fork() {
    use sion_fleet::witness::{Witness, WitnessError};

    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[111; 32]);
    let prefix = "/sion-ledger/tamper-entry/";
    let mut a = FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
    let w = SigningKey::from_bytes(&[112; 32]);
    let log = open_log(&mut a, &w, None).await;
    grow(&mut a, &w, log).await.expect("commit");
    let witness_key = SigningKey::from_bytes(&[113; 32]);
    let url = service_url(
        common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect"),
        &[witness_key.verifying_key().to_bytes()],
    );
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let ledger_key = key.verifying_key();
    let state = tmp.path().join("witness.state");
    let follow = |state: std::path::PathBuf, url: String, wk: SigningKey| {
        tokio::task::spawn_blocking(move || {
            let mut witness = Witness::open(wk, ledger_key, &state).expect("witness");
            let link = RemoteLedger::connect(&url).expect("link");
            let r = witness.follow(&link, |_| {});
            (r, witness.last().map(|l| l.0))
        })
    };
    let (r, _) = follow(state.clone(), url.clone(), witness_key.clone()).await.expect("witness");
    r.expect("the honest chain is cosigned");
    let earlier = a.latest().await.expect("latest").header.number;
    grow(&mut a, &w, log).await.expect("commit");
    let number = a.latest().await.expect("latest").header.number;
    // A state snapshot as of it: a front-end started afresh loads it and replays no entry up to
    // it (without one, it would replay this Pulse from the genesis and refuse it itself).
    assert_eq!(a.write_state_snapshot().await.expect("snapshot"), Some(number));

    // The attack: the head entry's transaction rewritten with etcd's own client, its header left.
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    let entry_key = format!("{prefix}pulse/{number:020}");
    let honest = raw_get(&mut raw, &entry_key).await.expect("the entry");
    let tx_len = u32::from_le_bytes(honest[1..5].try_into().expect("len")) as usize;
    let mut flipped = honest.clone();
    flipped[5 + tx_len - 1] ^= 1;
    // And in its place the same sender's earlier transaction, validly signed.
    let older = raw_get(&mut raw, &format!("{prefix}pulse/{earlier:020}")).await.expect("earlier entry");
    let older_len = u32::from_le_bytes(older[1..5].try_into().expect("len")) as usize;
    let mut replaced = older[..5 + older_len].to_vec();
    replaced.extend_from_slice(&honest[5 + tx_len..]);
    for (what, bytes) in [("a flipped byte", flipped), ("an older transaction", replaced)] {
        raw.put(entry_key.clone(), bytes, None).await.expect("rewrite the entry");
        // A front-end that held Pulse 2 replays Pulse 3 and refuses; one started after the
        // rewrite loads the snapshot of Pulse 3, reads only the head's header bytes, and serves
        // the entry as it is.
        let url = service_url(
            common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect"),
            &[witness_key.verifying_key().to_bytes()],
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let (r, last) = follow(state.clone(), url, witness_key.clone()).await.expect("witness");
        match r {
            Err(e @ WitnessError::Damaged { number: n, .. }) => {
                assert_eq!(n, number, "{what}: {e}");
                assert!(e.to_string().contains("not cosigned"), "{e}");
            }
            other => panic!("{what}: not told as a damaged entry: {other:?}"),
        }
        assert_eq!(last, Some(number - 1), "{what}: cosigned");
    }
    // Put back, the witness goes on.
    raw.put(entry_key, honest, None).await.expect("put back");
    let (r, last) = follow(state, url, witness_key).await.expect("witness");
    assert_eq!(r.expect("cosigned once the entry is put back"), 1);
    assert_eq!(last, Some(number));
}

/// The review's F3: past the replay limit or below the archive's mark a front-end that held the
/// state cannot replay the Pulses since. Whoever can write etcd rolls the chain back to an
/// earlier Pulse, a freshly started front-end extends it past the one front-end a held, and the
/// archive moves that Pulse out of etcd: a still sees its held header is no longer the chain's
/// at its number, and refuses (on the old code it served and signed on the fork). On a ledger
/// of format 5: on format 6 the fresh front-end refuses the rolled-back prefix at once (below).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_end_refuses_a_fork_past_the_pulse_it_held_once_archived() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let archive = tmp.path().join("archive");
    std::fs::create_dir_all(&archive).expect("archive dir");
    let key = SigningKey::from_bytes(&[121; 32]);
    let prefix = "/sion-ledger/tamper-fork/";
    let mut a = FleetLedger::init_format(&[etcd.url()], prefix, key.clone(), Format::Proposed)
        .await
        .expect("init")
        .with_archive(&archive);
    let w = SigningKey::from_bytes(&[122; 32]);
    let log = open_log(&mut a, &w, None).await;
    grow(&mut a, &w, log).await.expect("commit");

    // The etcd writer keeps a copy of the prefix at Pulse K …
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    let copy = copy_prefix(&mut raw, prefix).await;
    // … front-end a goes on to Pulse M …
    for _ in 0..3 {
        grow(&mut a, &w, log).await.expect("commit");
    }
    let held = a.latest().await.expect("latest").header;
    // … and the writer puts the copy back.
    put_back(&mut raw, prefix, copy).await;

    // A front-end started now extends the rolled-back chain past M, and the archive passes M.
    let mut b =
        common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect b").with_archive(&archive);
    while b.latest().await.expect("latest").header.number < held.number + 3 {
        grow(&mut b, &w, log).await.expect("b extends the fork");
    }
    let fork = b.header(held.number).await.expect("the fork's Pulse M").header;
    assert_ne!(fork.hash(), held.hash(), "the fork signed a second header for Pulse M");
    let report = b.archive_before(held.number + 2, 100).await.expect("archive");
    assert!(report.archived_to > held.number);
    let head_before = raw_get(&mut raw, &format!("{prefix}head")).await;

    let (_, text) = mismatch("a, which held Pulse M of the other chain", grow(&mut a, &w, log).await);
    assert!(text.contains("rolled back and extended again"), "{text}");
    assert_eq!(raw_get(&mut raw, &format!("{prefix}head")).await, head_before, "a Pulse was signed");
}

/// Every key under `prefix` with its value, as a party with etcd write access copies them.
async fn copy_prefix(raw: &mut etcd_client::Client, prefix: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let copy = raw.get(prefix, Some(etcd_client::GetOptions::new().with_prefix())).await.expect("copy");
    copy.kvs().iter().map(|kv| (kv.key().to_vec(), kv.value().to_vec())).collect()
}

/// Everything under `prefix` replaced by `copy`, its head put last (so nothing looks written
/// after it).
async fn put_back(raw: &mut etcd_client::Client, prefix: &str, copy: Vec<(Vec<u8>, Vec<u8>)>) {
    raw.delete(prefix, Some(etcd_client::DeleteOptions::new().with_prefix())).await.expect("delete");
    let head_key = format!("{prefix}head").into_bytes();
    let (head, rest): (Vec<_>, Vec<_>) = copy.into_iter().partition(|(k, _)| *k == head_key);
    for (k, v) in rest.into_iter().chain(head) {
        raw.put(k, v, None).await.expect("put back");
    }
}

/// A lying service's answer to the witness's `Cells` call (the proof of the cells a Pulse's
/// commit names, at the Pulse before) is refused, not trusted: the witness computes the cells
/// root from it and the proof no longer leads to the signed root of the Pulse before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_witness_refuses_cells_the_service_edited() {
    use sion_fleet::witness::{Witness, WitnessError};
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[93; 32]);
    let prefix = "/sion-ledger/tamper-witness-cells/";
    let mut a = FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
    let robot = SigningKey::from_bytes(&[94; 32]);
    let log = open_log(&mut a, &robot, None).await;
    let tag = sion_verify::cells::frame_tag("map");
    let with_cells = |nonce: u64, version: u64, from: u64, to: u64, cell: u128| {
        commit_cells(&robot, nonce, log, version, from, to, vec![cell])
    };
    a.submit(with_cells(1, 0, 0, 1, sion_verify::cells::cell_key(tag, 0, 1, 1))).await.expect("commit 1");
    let number = a
        .submit(with_cells(2, 1, 1, 2, sion_verify::cells::cell_key(tag, 0, 1, 2)))
        .await
        .expect("commit 2")
        .header
        .number;
    let witness_key = SigningKey::from_bytes(&[95; 32]);
    let accepted = [witness_key.verifying_key().to_bytes()];
    let ledger = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    let (url, cosigned) = serve_liar(ledger, &accepted, Lie::CellsEdited { number });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (ledger_key, state) = (key.verifying_key(), tmp.path().join("witness.state"));
    tokio::task::spawn_blocking(move || {
        let mut witness = Witness::open(witness_key, ledger_key, &state).expect("witness");
        let link = RemoteLedger::connect(&url).expect("link");
        match witness.follow(&link, |_| {}) {
            Err(e @ WitnessError::Damaged { number: n, .. }) => {
                assert_eq!(n, number);
                assert!(e.to_string().contains("cells"), "{e}");
            }
            other => panic!("the witness took edited cells: {other:?}"),
        }
        assert_eq!(witness.last().map(|l| l.0), Some(number - 1), "it cosigned past the edited cells");
    })
    .await
    .expect("witness");
    assert!(!cosigned.lock().expect("lock").contains(&number), "a cosignature was handed");
}

/// A witness checks a Pulse whose commit names more cells than the service answers at once:
/// each part refused as too large is halved and asked again, down to single cells, and the
/// parts' proofs, merged, give the signed cells root — so it cosigns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_witness_halves_a_cells_question_the_service_refuses_as_too_large() {
    use sion_fleet::witness::Witness;
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[96; 32]);
    let prefix = "/sion-ledger/witness-cells-halved/";
    let mut a = FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
    let robot = SigningKey::from_bytes(&[97; 32]);
    let log = open_log(&mut a, &robot, None).await;
    let tag = sion_verify::cells::frame_tag("map");
    let cells =
        |xs: std::ops::Range<i64>| xs.map(|x| sion_verify::cells::cell_key(tag, 0, x, 3)).collect::<Vec<_>>();
    a.submit(commit_cells(&robot, 1, log, 0, 0, 1, cells(0..3))).await.expect("commit 1");
    // Five cells, two of them listed already.
    let head =
        a.submit(commit_cells(&robot, 2, log, 1, 1, 2, cells(1..6))).await.expect("commit 2").header.number;
    let witness_key = SigningKey::from_bytes(&[98; 32]);
    let accepted = [witness_key.verifying_key().to_bytes()];
    let ledger = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (url, cosigned) = serve_liar(ledger, &accepted, Lie::CellsAtMost { most: 1, asked: asked.clone() });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (ledger_key, state) = (key.verifying_key(), tmp.path().join("witness.state"));
    tokio::task::spawn_blocking(move || {
        let mut witness = Witness::open(witness_key, ledger_key, &state).expect("witness");
        let link = RemoteLedger::connect(&url).expect("link");
        witness.follow(&link, |_| {}).expect("the witness checks every Pulse");
        assert_eq!(witness.last().map(|l| l.0), Some(head));
    })
    .await
    .expect("witness");
    assert!(cosigned.lock().expect("lock").contains(&head), "the Pulse naming five cells was cosigned");
    let asked = asked.lock().expect("lock").clone();
    // Each part past one cell refused and halved, left half first: commit 1's 3 cells, then
    // commit 2's 5 (as 2 and 3), down to single cells.
    assert_eq!(asked, [3, 1, 2, 1, 1, 5, 2, 1, 1, 3, 1, 2, 1, 1], "the cells named in each question");
}

/// On format 6 the same rollback stops at once: the prefix put back from a copy holds
/// `P/claim` at a new place in etcd's history, not where its claim was made for, so a front-end
/// started afterwards builds nothing on it (docs/FLEET-LEDGER.md, "The claim").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_format_6_a_prefix_put_back_from_a_copy_is_not_built_on() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[123; 32]);
    let prefix = "/sion-ledger/tamper-copy/";
    let mut a = FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
    let w = SigningKey::from_bytes(&[124; 32]);
    let log = open_log(&mut a, &w, None).await;
    grow(&mut a, &w, log).await.expect("commit");
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    let copy = copy_prefix(&mut raw, prefix).await;
    for _ in 0..3 {
        grow(&mut a, &w, log).await.expect("commit");
    }
    put_back(&mut raw, prefix, copy).await;
    let mut b = FleetLedger::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect b");
    match b.latest().await {
        Err(FleetError::StateMismatch { keys, problem, .. }) => {
            assert_eq!(keys, vec![format!("{prefix}claim")], "{problem}");
            assert!(problem.contains("put again by no front-end"), "{problem}");
        }
        other => panic!("a prefix put back from a copy was served: {other:?}"),
    }
    assert!(grow(&mut b, &w, log).await.is_err(), "a commit was taken on a prefix put back");
}
