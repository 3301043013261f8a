//! Witness cosignatures of Pulse headers (docs/FLEET-LEDGER.md, "Witnesses"; docs/PROOFS.md,
//! "Cosignatures"). A witness cosigns a header only after checking it extends the last one it
//! cosigned, so an honest witness never cosigns two headers with one number: a ledger that
//! shows one reader a forked chain gets no cosignature for it.

use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};

use super::pulse::PulseHeader;
use crate::wire::{Put as _, Reader, WireError};

const COSIGN_DOMAIN: &[u8] = b"sion-witness-cosign-v1";

/// The bytes a witness signs: `"sion-witness-cosign-v1" || 32 ledger key || u64 number || 32
/// H(header encoding)` (22 + 32 + 8 + 32 = 94 bytes, docs/PROOFS.md "Cosignatures").
pub fn cosign_message(ledger_key: &[u8; 32], header: &PulseHeader) -> Vec<u8> {
    let mut out = Vec::with_capacity(COSIGN_DOMAIN.len() + 72);
    out.put_bytes(COSIGN_DOMAIN);
    out.put_bytes(ledger_key);
    out.put_u64(header.number);
    out.put_bytes(&header.hash());
    out
}

/// One witness's cosignature of one header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cosignature {
    /// The witness's ed25519 public key.
    pub witness: [u8; 32],
    /// Its signature over [`cosign_message`].
    pub signature: [u8; 64],
}

impl Cosignature {
    /// Cosign `header` of the ledger whose key is `ledger_key`.
    pub fn sign(witness: &SigningKey, ledger_key: &[u8; 32], header: &PulseHeader) -> Self {
        let signature = witness.sign(&cosign_message(ledger_key, header)).to_bytes();
        Self { witness: witness.verifying_key().to_bytes(), signature }
    }

    /// Whether this is the witness's valid cosignature of `header` of that ledger.
    pub fn holds(&self, ledger_key: &[u8; 32], header: &PulseHeader) -> bool {
        let Ok(key) = VerifyingKey::from_bytes(&self.witness) else { return false };
        key.verify(&cosign_message(ledger_key, header), &Signature::from_bytes(&self.signature)).is_ok()
    }

    /// The 96 bytes: witness key, signature.
    pub fn put(&self, out: &mut Vec<u8>) {
        out.put_bytes(&self.witness);
        out.put_bytes(&self.signature);
    }

    /// Read the 96 bytes [`Cosignature::put`] writes.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(Self { witness: r.array("witness key")?, signature: r.array("cosignature")? })
    }
}

/// The witnesses a reader trusts and how many of them must have cosigned.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Witnesses {
    /// Their public keys, each at most once.
    pub keys: Vec<[u8; 32]>,
    /// How many distinct ones of them must have cosigned the attested header (at least 1).
    pub quorum: usize,
}

impl Witnesses {
    /// Parse a witnesses file: one witness a line, `name hex-key` (64 hex digits); blank lines
    /// and lines starting with `#` are skipped. Errors name the line.
    pub fn parse_file(text: &str) -> Result<Vec<(String, [u8; 32])>, String> {
        let mut out: Vec<(String, [u8; 32])> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut parts = line.split_whitespace();
            let (Some(name), Some(hex_key), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(format!("line {}: expected `name hex-key`, got {line:?}", i + 1));
            };
            let mut key = [0u8; 32];
            hex::decode_to_slice(hex_key, &mut key)
                .map_err(|_| format!("line {}: witness {name}: the key is not 64 hex digits", i + 1))?;
            if VerifyingKey::from_bytes(&key).is_err() {
                return Err(format!("line {}: witness {name}: not an ed25519 public key", i + 1));
            }
            if out.iter().any(|(n, k)| *k == key || n == name) {
                return Err(format!("line {}: witness {name} is named twice", i + 1));
            }
            out.push((name.to_owned(), key));
        }
        Ok(out)
    }

    /// Of `cosignatures`, the distinct trusted witnesses whose cosignature of `header` holds.
    pub fn count(
        &self,
        ledger_key: &[u8; 32],
        header: &PulseHeader,
        cosignatures: &[Cosignature],
    ) -> Vec<[u8; 32]> {
        let mut found: Vec<[u8; 32]> = Vec::new();
        for c in cosignatures {
            if self.keys.contains(&c.witness) && !found.contains(&c.witness) && c.holds(ledger_key, header) {
                found.push(c.witness);
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message is the 94 bytes docs/PROOFS.md names, in its order.
    #[test]
    fn the_cosigned_message_is_94_bytes() {
        let header =
            PulseHeader { number: 7, time_ns: 1, logs: 2, state_root: [3; 32], prev: [4; 32], cells: None };
        let m = cosign_message(&[9; 32], &header);
        assert_eq!(m.len(), 94);
        assert_eq!(&m[..22], b"sion-witness-cosign-v1");
        assert_eq!(m[22..54], [9; 32]);
        assert_eq!(m[54..62], 7u64.to_le_bytes());
        assert_eq!(m[62..], header.hash());
    }
}
