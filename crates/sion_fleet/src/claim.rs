//! `P/claim` (format 6, docs/FLEET-LEDGER.md "The claim"): which entry took the latest Pulse
//! number, signed together with the place in etcd's history where it must sit.
//!
//! Every condition a compare-and-swap can test by value or by existence, whoever can write
//! etcd can make true again by deleting and putting keys; a key's `create_revision` and
//! `version` they cannot. A key holds one value at each `(create_revision, version)` it ever
//! has: a put moves the version on, a delete and a put make a new `create_revision`, and no
//! revision is used twice. So each swap moves `P/claim` from the version its front-end read
//! to the next, and puts there the ledger key's claim naming that very version; a claim
//! found anywhere else is not one. Two entries can then never both be found claimed for one
//! number, and a front-end signs a header only for the entry claimed for it.

use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};

/// The domain of the ledger key's signature in a claim.
const CLAIM_DOMAIN: &[u8] = b"sion-fleet-claim-v1";

/// A claim's bytes: number, entry hash, create revision, version, signature.
pub(crate) const CLAIM_LEN: usize = 8 + 32 + 8 + 8 + 64;

/// Where `P/claim` must be for a claim put there to be found one: its `create_revision` and
/// the `version` the put gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    pub create: i64,
    pub version: i64,
}

impl Place {
    /// Where the next put leaves it.
    pub fn next(self) -> Self {
        Self { version: self.version + 1, ..self }
    }
}

/// A claim read and checked: Pulse `number`'s entry hashes to `entry`, and it sits where it
/// says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Claim {
    pub number: u64,
    pub entry: [u8; 32],
    pub place: Place,
}

/// What the ledger key signs: the domain, then the 56 bytes before the signature.
fn message(number: u64, entry: &[u8; 32], place: Place) -> Vec<u8> {
    let mut m = Vec::with_capacity(CLAIM_DOMAIN.len() + 56);
    m.extend_from_slice(CLAIM_DOMAIN);
    m.extend_from_slice(&number.to_le_bytes());
    m.extend_from_slice(entry);
    m.extend_from_slice(&(place.create as u64).to_le_bytes());
    m.extend_from_slice(&(place.version as u64).to_le_bytes());
    m
}

/// The claim of `entry` (its bytes) for Pulse `number`, to be put where it leaves `P/claim`.
pub(crate) fn encode(key: &SigningKey, number: u64, entry: &[u8], place: Place) -> Vec<u8> {
    let hash = *blake3::hash(entry).as_bytes();
    let mut m = message(number, &hash, place);
    let signature = key.sign(&m).to_bytes();
    m.drain(..CLAIM_DOMAIN.len());
    m.extend_from_slice(&signature);
    m
}

/// `P/claim` as etcd holds it (`value` at `create_revision` `create`, `version`), checked: the
/// ledger key's claim, naming the place it is at. Why not, otherwise.
pub(crate) fn check(key: &VerifyingKey, value: &[u8], create: i64, version: i64) -> Result<Claim, String> {
    let Ok(bytes) = <&[u8; CLAIM_LEN]>::try_from(value) else {
        return Err(format!("{} bytes, not {CLAIM_LEN}", value.len()));
    };
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let number = u64_at(0);
    let mut entry = [0u8; 32];
    entry.copy_from_slice(&bytes[8..40]);
    let (named_create, named_version) = (u64_at(40), u64_at(48));
    let mut signature = [0u8; 64];
    signature.copy_from_slice(&bytes[56..]);
    let named = Place { create: named_create as i64, version: named_version as i64 };
    if named_create > i64::MAX as u64 || named_version > i64::MAX as u64 {
        return Err("names a revision past etcd's".into());
    }
    key.verify_strict(&message(number, &entry, named), &ed25519_dalek::Signature::from_bytes(&signature))
        .map_err(|_| "not the ledger key's claim".to_string())?;
    if named != (Place { create, version }) {
        return Err(format!(
            "the ledger key's claim for Pulse {number}, made for create revision {named_create}, version \
             {named_version}, found at create revision {create}, version {version}: put again by no front-end"
        ));
    }
    Ok(Claim { number, entry, place: named })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_is_found_only_where_it_was_made_for() {
        let key = SigningKey::from_bytes(&[5; 32]);
        let place = Place { create: 17, version: 4 };
        let value = encode(&key, 9, b"entry", place);
        assert_eq!(value.len(), CLAIM_LEN);
        let claim = check(&key.verifying_key(), &value, 17, 4).expect("where it was made for");
        assert_eq!((claim.number, claim.entry, claim.place), (9, *blake3::hash(b"entry").as_bytes(), place));
        assert!(check(&key.verifying_key(), &value, 17, 5).unwrap_err().contains("put again"));
        assert!(check(&key.verifying_key(), &value, 18, 4).unwrap_err().contains("put again"));
        let other = SigningKey::from_bytes(&[6; 32]);
        assert!(check(&other.verifying_key(), &value, 17, 4).unwrap_err().contains("not the ledger key"));
        let mut changed = value.clone();
        changed[0] ^= 1;
        assert!(check(&key.verifying_key(), &changed, 17, 4).is_err());
        assert!(check(&key.verifying_key(), &value[1..], 17, 4).unwrap_err().contains("bytes"));
        assert_eq!(place.next(), Place { create: 17, version: 5 });
    }
}
