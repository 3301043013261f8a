//! Serde for 32-byte keys and hashes as 64 lowercase hex digits (`#[serde(with =
//! "sion_verify::hex32")]`): belief policies, archive manifests.

use serde::{Deserialize as _, Deserializer, Serializer};

/// Write the 32 bytes as 64 lowercase hex digits.
pub fn serialize<S: Serializer>(v: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex::encode(v))
}

/// Read 64 hex digits (either case) into 32 bytes; anything else is an error.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
    let s = String::deserialize(d)?;
    let mut out = [0u8; 32];
    hex::decode_to_slice(&s, &mut out).map_err(serde::de::Error::custom)?;
    Ok(out)
}
