//! Writes tests/conformance/fleet/forward.json: vectors for the signature over a forwarded
//! batch (docs/FLEET-LEDGER.md, "One sequencer at a time"), for another implementation of a
//! front-end. Each case: the ledger key (its 32-byte ed25519 seed too, so signing can be
//! checked, ed25519 being deterministic), the batch's time, the receiver's advertised address,
//! the transactions, the signature, and whether a front-end takes it; a valid case also gives
//! the 93 signed bytes. Checked by crates/sion_fleet/tests/forward_conformance.rs.
//!
//!     cargo run -p sion_fleet --example forward_vectors > tests/conformance/fleet/forward.json

use ed25519_dalek::{Signer as _, SigningKey};
use serde_json::{Value, json};
use sion_fleet::relay::forward_message;

/// The order of ed25519's group, little-endian: a signature's `S` must be below it.
const L: [u8; 32] = [
    0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
];

/// `S + L` in place of `S`: the same point equation, a non-canonical encoding.
fn s_plus_l(signature: &[u8; 64]) -> [u8; 64] {
    let mut out = *signature;
    let mut carry = 0u16;
    for i in 0..32 {
        let sum = u16::from(signature[32 + i]) + u16::from(L[i]) + carry;
        out[32 + i] = sum as u8;
        carry = sum >> 8;
    }
    out
}

fn case(
    name: &str,
    seed: &[u8; 32],
    key: &SigningKey,
    (time_ns, receiver, txs): (u64, &str, &[Vec<u8>]),
    signature: &[u8],
    valid: bool,
    why: &str,
) -> Value {
    let mut c = json!({
        "name": name,
        "seed": hex::encode(seed),
        "key": hex::encode(key.verifying_key().as_bytes()),
        "time_ns": time_ns,
        "receiver": receiver,
        "txs": txs.iter().map(hex::encode).collect::<Vec<_>>(),
        "signature": hex::encode(signature),
        "valid": valid,
        "why": why,
    });
    if valid {
        c["message"] = json!(hex::encode(forward_message(time_ns, receiver, txs)));
    }
    c
}

fn main() {
    let seed = [7u8; 32];
    let key = SigningKey::from_bytes(&seed);
    let other_seed = [9u8; 32];
    let other = SigningKey::from_bytes(&other_seed);
    let time_ns = 1_796_601_600_000_000_000u64; // 2026-12-07T00:00:00Z
    let receiver = "10.0.0.2:50051";
    let txs: Vec<Vec<u8>> = vec![b"first signed transaction".to_vec(), vec![0, 1, 2, 255]];
    let sign = |k: &SigningKey, t: u64, r: &str, x: &[Vec<u8>]| k.sign(&forward_message(t, r, x)).to_bytes();
    let good = sign(&key, time_ns, receiver, &txs);

    let mut cases = vec![
        case("two transactions", &seed, &key, (time_ns, receiver, &txs), &good, true, "signed as specified"),
        {
            let none: Vec<Vec<u8>> = Vec::new();
            let s = sign(&key, time_ns, receiver, &none);
            case("no transactions", &seed, &key, (time_ns, receiver, &none), &s, true, "BLAKE3 of no bytes")
        },
        {
            let empty = vec![Vec::new(), b"x".to_vec()];
            let s = sign(&key, time_ns, "front-end-b.fleet.example:7000", &empty);
            case(
                "an empty transaction first, a host name",
                &seed,
                &key,
                (time_ns, "front-end-b.fleet.example:7000", &empty),
                &s,
                true,
                "an empty transaction is its u32 length 0 alone",
            )
        },
    ];
    let refused = |name: &str, batch: (u64, &str, &[Vec<u8>]), signature: &[u8], why: &str| {
        case(name, &seed, &key, batch, signature, false, why)
    };
    cases.push(refused(
        "for another front-end",
        (time_ns, "10.0.0.3:50051", &txs),
        &good,
        "the receiver's address is signed: a batch is for one front-end",
    ));
    cases.push(refused("a nanosecond later", (time_ns + 1, receiver, &txs), &good, "the time is signed"));
    let mut flipped = txs.clone();
    flipped[1][3] ^= 1;
    cases.push(refused(
        "a transaction's byte flipped",
        (time_ns, receiver, &flipped),
        &good,
        "the transactions are signed",
    ));
    let swapped = vec![txs[1].clone(), txs[0].clone()];
    cases.push(refused(
        "transactions swapped",
        (time_ns, receiver, &swapped),
        &good,
        "their order is signed",
    ));
    let joined = vec![b"ab".to_vec(), b"c".to_vec()];
    let split = vec![b"a".to_vec(), b"bc".to_vec()];
    let joined_sig = sign(&key, time_ns, receiver, &joined);
    cases.push(refused(
        "the same bytes cut elsewhere",
        (time_ns, receiver, &split),
        &joined_sig,
        "each transaction's u32 length is hashed before it: [ab, c] is not [a, bc]",
    ));
    cases.push(refused(
        "S + L",
        (time_ns, receiver, &txs),
        &s_plus_l(&good),
        "a non-canonical S (at least the group order) is refused, as verify_strict does",
    ));
    let mut small_r = good;
    small_r[..32].copy_from_slice(&[0; 32]);
    small_r[0] = 1; // the identity: a point of small order
    cases.push(refused(
        "R of small order",
        (time_ns, receiver, &txs),
        &small_r,
        "a small-order R is refused",
    ));
    cases.push(refused(
        "another key's signature",
        (time_ns, receiver, &txs),
        &sign(&other, time_ns, receiver, &txs),
        "only the ledger's key signs forwarded batches",
    ));
    cases.push(refused("63 bytes", (time_ns, receiver, &txs), &good[..63], "a signature is 64 bytes"));

    let out = json!({
        "about": "Vectors for the signature over a forwarded batch (docs/FLEET-LEDGER.md, \"One sequencer at a time\"): the signed bytes are sion-fleet-forward-v1 (21 bytes of ASCII), u64 time_ns little-endian, BLAKE3(receiver's UTF-8), BLAKE3(each transaction as a u32 little-endian length and its bytes), 93 bytes; the signature is ed25519 (RFC 8032) by the ledger's key, checked strictly. Hex throughout; seed is the key's 32-byte secret seed (test keys only). A case with valid false must be refused; the time is not checked against a clock here. Made by crates/sion_fleet/examples/forward_vectors.rs, checked by crates/sion_fleet/tests/forward_conformance.rs.",
        "cases": cases,
    });
    println!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
}
