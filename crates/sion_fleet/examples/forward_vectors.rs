//! Writes tests/conformance/fleet/forward.json: vectors for the signature over a forwarded
//! batch (docs/FLEET-LEDGER.md, "One sequencer at a time"), for another implementation of a
//! front-end. Each case: the ledger key (with its 32-byte ed25519 seed where there is one, so
//! signing can be checked, ed25519 being deterministic), the batch's time, the receiver's
//! advertised address, the transactions, the signature, and whether a front-end takes it; a
//! valid case also gives the 93 signed bytes. Two refused cases are signatures a lax ed25519
//! verifier takes (an `R` of small order, a key of small order): a strict one refuses them.
//! Checked by crates/sion_fleet/tests/forward_conformance.rs.
//!
//!     cargo run -p sion_fleet --example forward_vectors > tests/conformance/fleet/forward.json

use curve25519_dalek::scalar::Scalar;
use ed25519_dalek::{Signer as _, SigningKey};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha512};
use sion_fleet::relay::forward_message;

/// The order of ed25519's group, little-endian: a signature's `S` must be below it.
const L: [u8; 32] = [
    0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
];

/// The encoding of the identity point: a point of small order (order 1).
const IDENTITY: [u8; 32] = {
    let mut b = [0u8; 32];
    b[0] = 1;
    b
};

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

/// A signature of `message` by `seed`'s key whose `R` is the identity: `S = k·a` with
/// `k = SHA-512(R || A || M)` and `a` the key's secret scalar, so `[S]B = R + [k]A` holds
/// (RFC 8032's equation, without the cofactor) while `R` is of small order.
fn small_order_r(seed: &[u8; 32], message: &[u8]) -> [u8; 64] {
    let h = Sha512::digest(seed);
    let mut a = [0u8; 32];
    a.copy_from_slice(&h[..32]);
    a[0] &= 248;
    a[31] &= 127;
    a[31] |= 64;
    let public = SigningKey::from_bytes(seed).verifying_key().to_bytes();
    let k: [u8; 64] =
        Sha512::new().chain_update(IDENTITY).chain_update(public).chain_update(message).finalize().into();
    let s = Scalar::from_bytes_mod_order_wide(&k) * Scalar::from_bytes_mod_order(a);
    let mut out = [0u8; 64];
    out[..32].copy_from_slice(&IDENTITY);
    out[32..].copy_from_slice(&s.to_bytes());
    out
}

struct Case<'a> {
    name: &'a str,
    seed: Option<&'a [u8; 32]>,
    key: [u8; 32],
    batch: (u64, &'a str, &'a [Vec<u8>]),
    signature: Vec<u8>,
    valid: bool,
    /// Whether a verifier that is not strict (RFC 8032's equation alone) takes it.
    lax_takes: bool,
    why: &'a str,
}

fn to_json(c: Case<'_>) -> Value {
    let (time_ns, receiver, txs) = c.batch;
    let mut v = json!({
        "name": c.name,
        "seed": c.seed.map(hex::encode),
        "key": hex::encode(c.key),
        // A string: past 2^53, as these are, a JSON number is not exact in every parser.
        "time_ns": time_ns.to_string(),
        "receiver": receiver,
        "txs": txs.iter().map(hex::encode).collect::<Vec<_>>(),
        "signature": hex::encode(&c.signature),
        "valid": c.valid,
        "lax_verifier_takes": c.lax_takes,
        "why": c.why,
    });
    if c.valid {
        v["message"] = json!(hex::encode(forward_message(time_ns, receiver, txs)));
    }
    v
}

fn main() {
    let seed = [7u8; 32];
    let key = SigningKey::from_bytes(&seed);
    let public = key.verifying_key().to_bytes();
    let other = SigningKey::from_bytes(&[9u8; 32]);
    let time_ns = 1_796_601_600_000_000_000u64; // 2026-12-07T00:00:00Z
    let receiver = "10.0.0.2:50051";
    let txs: Vec<Vec<u8>> = vec![b"first signed transaction".to_vec(), vec![0, 1, 2, 255]];
    let sign = |k: &SigningKey, t: u64, r: &str, x: &[Vec<u8>]| k.sign(&forward_message(t, r, x)).to_bytes();
    let good = sign(&key, time_ns, receiver, &txs);
    let none: Vec<Vec<u8>> = Vec::new();
    let empty_first = vec![Vec::new(), b"x".to_vec()];
    let host = "front-end-b.fleet.example:7000";
    let mut flipped = txs.clone();
    flipped[1][3] ^= 1;
    let swapped = vec![txs[1].clone(), txs[0].clone()];
    let joined = vec![b"ab".to_vec(), b"c".to_vec()];
    let split = vec![b"a".to_vec(), b"bc".to_vec()];
    let small_r = small_order_r(&seed, &forward_message(time_ns, receiver, &txs));
    // With a key of small order (the identity), R the identity and S zero satisfy the
    // equation for every message.
    let mut weak = [0u8; 64];
    weak[..32].copy_from_slice(&IDENTITY);

    let ok = |name, batch, signature, why| Case {
        name,
        seed: Some(&seed),
        key: public,
        batch,
        signature,
        valid: true,
        lax_takes: true,
        why,
    };
    let no = |name, batch, signature, lax_takes, why| Case {
        name,
        seed: Some(&seed),
        key: public,
        batch,
        signature,
        valid: false,
        lax_takes,
        why,
    };
    let cases = vec![
        ok("two transactions", (time_ns, receiver, &txs), good.to_vec(), "signed as specified"),
        ok(
            "no transactions",
            (time_ns, receiver, &none),
            sign(&key, time_ns, receiver, &none).to_vec(),
            "the transactions' hash is BLAKE3 of no bytes",
        ),
        ok(
            "an empty transaction first, a host name",
            (time_ns, host, &empty_first),
            sign(&key, time_ns, host, &empty_first).to_vec(),
            "an empty transaction is its u32 length 0 alone",
        ),
        no(
            "for another front-end",
            (time_ns, "10.0.0.3:50051", &txs),
            good.to_vec(),
            false,
            "the receiver's address is signed: a batch is for one front-end",
        ),
        no("a nanosecond later", (time_ns + 1, receiver, &txs), good.to_vec(), false, "the time is signed"),
        no(
            "a transaction's byte flipped",
            (time_ns, receiver, &flipped),
            good.to_vec(),
            false,
            "the transactions are signed",
        ),
        no(
            "transactions swapped",
            (time_ns, receiver, &swapped),
            good.to_vec(),
            false,
            "their order is signed",
        ),
        no(
            "the same bytes cut elsewhere",
            (time_ns, receiver, &split),
            sign(&key, time_ns, receiver, &joined).to_vec(),
            false,
            "each transaction's u32 length is hashed before it: [ab, c] is not [a, bc]",
        ),
        no(
            "S + L",
            (time_ns, receiver, &txs),
            s_plus_l(&good).to_vec(),
            false,
            "a non-canonical S (at least the group order) is refused",
        ),
        no(
            "R of small order",
            (time_ns, receiver, &txs),
            small_r.to_vec(),
            true,
            "R is the identity, S made so that RFC 8032's equation holds: a strict verifier refuses an R of small order",
        ),
        Case {
            name: "a key of small order",
            seed: None,
            key: IDENTITY,
            batch: (time_ns, receiver, &txs),
            signature: weak.to_vec(),
            valid: false,
            lax_takes: true,
            why: "the key is the identity, R the identity and S zero: the equation holds for any message; a strict verifier refuses a key of small order",
        },
        no(
            "another key's signature",
            (time_ns, receiver, &txs),
            sign(&other, time_ns, receiver, &txs).to_vec(),
            false,
            "only the ledger's key signs forwarded batches",
        ),
        no("63 bytes", (time_ns, receiver, &txs), good[..63].to_vec(), false, "a signature is 64 bytes"),
    ];

    let out = json!({
        "about": "Vectors for the signature over a forwarded batch (docs/FLEET-LEDGER.md, \"One sequencer at a time\"). The signed bytes (93): sion-fleet-forward-v1 (21 bytes of ASCII), time_ns as a u64 little-endian, BLAKE3 of the receiver's advertised address (its UTF-8 bytes), and one BLAKE3 over all the transactions, each written as its u32 little-endian length then its bytes. The signature is ed25519 (RFC 8032) by the ledger's key, checked strictly: S below the group order, R and the key not of small order. Fields: key, seed (the key's 32-byte secret seed, test keys only; null where the key has none), txs and signature in hex; receiver as text; time_ns as a decimal string (past 2^53); message (hex, the signed bytes) in valid cases only. A case with valid false must be refused; lax_verifier_takes says whether RFC 8032's equation alone holds (those cases test strictness). The time is not checked against a clock here. Made by crates/sion_fleet/examples/forward_vectors.rs, checked by crates/sion_fleet/tests/forward_conformance.rs.",
        "cases": cases.into_iter().map(to_json).collect::<Vec<_>>(),
    });
    println!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
}
