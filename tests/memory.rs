//! A memory end to end in one process: remember, commit, prove, verify from the file alone,
//! and refuse to open a log that no longer extends its committed head.

use sion_memory::memory::{Memory, MemoryError};
use sion_memory::proof::{Claim, ProofFile, VerifyError};
use sion_memory::sim::{Warehouse, WarehouseConfig};

#[test]
fn remember_commit_prove_verify() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("m");
    let mut memory = Memory::create(&dir, Some("site/robot-2"), None).expect("create");
    let atoms: Vec<_> = Warehouse::new(WarehouseConfig::default()).take(3000).collect();
    memory.remember(atoms[..1000].to_vec()).expect("remember");
    let first = memory.commit(false).expect("commit");
    memory.remember(atoms[1000..].to_vec()).expect("remember");
    let second = memory.commit(false).expect("commit");
    assert_eq!((first.head.size, second.head.size), (1000, 3000));
    assert_eq!(second.pulse.header.number, first.pulse.header.number + 1);

    let key = memory.ledger().public_key();
    let file = memory.prove_inclusion(2500).expect("prove");
    let bytes = file.encode();
    let verified = ProofFile::decode(&bytes).expect("decode").verify(Some(&key)).expect("valid");
    match verified.claim {
        Claim::Included { position, atom } => assert_eq!((position, *atom), (2500, atoms[2500].clone())),
        other => panic!("unexpected claim {other:?}"),
    }
    assert_eq!(verified.pulse.map(|p| p.0), Some(second.pulse.header.number));
    let file = memory.prove_consistency(1000).expect("prove");
    ProofFile::decode(&file.encode()).expect("decode").verify(Some(&key)).expect("valid");

    // Another ledger's key, or no attestation where one is required: refused.
    let other = ed25519_dalek::SigningKey::from_bytes(&[3; 32]).verifying_key();
    assert!(matches!(file.verify(Some(&other)), Err(VerifyError::WrongLedger { .. })));
    let bare = ProofFile { attestation: None, ..file.clone() };
    assert!(matches!(bare.verify(Some(&key)), Err(VerifyError::Unattested)));
    assert!(bare.verify(None).is_ok(), "without a key, the head is taken on the writer's word");

    // Every single-bit flip of a proof file is refused (or does not decode).
    let bytes = memory.prove_inclusion(7).expect("prove").encode();
    for i in 0..bytes.len() {
        for bit in [0, 3, 7] {
            let mut flipped = bytes.clone();
            flipped[i] ^= 1 << bit;
            let ok = ProofFile::decode(&flipped).map(|f| f.verify(Some(&key)).is_ok()).unwrap_or(false);
            assert!(!ok, "a flip at byte {i} bit {bit} still verified");
        }
    }
    assert!(matches!(memory.prove_inclusion(3000), Err(MemoryError::NotCommitted { .. })));
    drop(memory);

    let memory = Memory::open(&dir).expect("reopen");
    assert_eq!(memory.committed().head, second.head);
    assert_eq!(memory.agent(), Some("site/robot-2"));
}

#[test]
fn a_log_that_lost_committed_atoms_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("m");
    let mut memory = Memory::create(&dir, None, None).expect("create");
    memory.remember(Warehouse::new(WarehouseConfig::default()).take(500).collect()).expect("remember");
    memory.commit(false).expect("commit");
    drop(memory);
    // Cut the log behind the ledger's back: its head now claims atoms the log lacks.
    let segment =
        std::fs::read_dir(dir.join("log/segments")).expect("dir").next().expect("one").expect("e").path();
    let len = std::fs::metadata(&segment).expect("meta").len();
    std::fs::OpenOptions::new().write(true).open(&segment).expect("open").set_len(len / 2).expect("cut");
    std::fs::remove_file(dir.join("log/checkpoint")).expect("rm");
    let err = Memory::open(&dir).err().expect("refused");
    assert!(matches!(err, MemoryError::Diverged { committed: 500, .. }), "{err}");
}
