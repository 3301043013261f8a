//! Keys wrapped to members (docs/SEAL.md, "Wrapped keys"): an X-Wing encapsulation to the
//! member's key, and under the shared secret either an epoch's cover (what a member keeps) or
//! one leaf's key (what the payload service hands out).
//!
//! A wrap carries a cover, not the epoch seed: a member added after a forget must not be able
//! to derive what was forgotten, and a wrap kept anywhere must not outlive a forget (a seed
//! would).

use chacha20poly1305::aead::{Aead as _, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, KeyInit as _, Nonce};
use x_wing::{Decapsulate as _, Decapsulator as _, Encapsulate as _, EncapsulationKey, KeyExport as _};
use zeroize::{Zeroize as _, Zeroizing};

use crate::{Cover, SealError};

const MAGIC: &[u8; 8] = b"SIONWRAP";
const VERSION: u8 = 2;
/// "SIONWRAP", version, space, epoch, member key hash, the cover's length.
const HEAD: usize = 8 + 1 + 32 + 4 + 32 + 4;
/// The largest cover a wrap carries: a cover of 453,000 nodes, far beyond what forgetting
/// leaves (at most 32 nodes per forgotten range); anything longer is damage.
pub const MAX_COVER_BYTES: usize = 16 << 20;

const LEAF_MAGIC: &[u8; 8] = b"SIONLKEY";
/// "SIONLKEY", version, space, epoch, leaf, member key hash, atom id.
const LEAF_HEAD: usize = 8 + 1 + 32 + 4 + 4 + 32 + 32;
const LEAF_LEN: usize = LEAF_HEAD + x_wing::CIPHERTEXT_SIZE + 32 + 16;

/// A member's key: an X-Wing decapsulation key (its 32-byte seed). Its public half, the
/// encapsulation key (1,216 bytes), is what the space lists.
pub struct MemberKey(x_wing::DecapsulationKey);

impl MemberKey {
    /// A new key from the system's randomness.
    pub fn generate() -> Result<Self, SealError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| SealError::BadKey(format!("no randomness: {e}")))?;
        let k = Self::from_seed(seed);
        seed.zeroize();
        Ok(k)
    }

    /// The key with this seed (its file's 32 bytes).
    pub fn from_seed(seed: [u8; 32]) -> Self {
        Self(x_wing::DecapsulationKey::from(seed))
    }

    /// The seed, to keep in the member's key file.
    pub fn seed(&self) -> [u8; 32] {
        *self.0.as_bytes()
    }

    /// The public half: the encapsulation key's 1,216 bytes.
    pub fn public(&self) -> Vec<u8> {
        self.0.encapsulation_key().to_bytes().to_vec()
    }

    /// BLAKE3 of the public half: how spaces and wraps name this member.
    pub fn hash(&self) -> [u8; 32] {
        member_key_hash(&self.public())
    }

    fn shared(&self, ct_bytes: &[u8], what: &'static str) -> Result<ChaCha20Poly1305, SealError> {
        let ct = x_wing::Ciphertext::try_from(ct_bytes)
            .map_err(|_| SealError::Format { what, problem: "the encapsulation is not one".into() })?;
        let shared = self.0.decapsulate(&ct);
        Ok(seal_key(&shared))
    }
}

/// The size of a member's public key (an X-Wing encapsulation key).
pub const MEMBER_PUBLIC_BYTES: usize = 1216;

/// BLAKE3 of a member's encapsulation key: how the space and the wraps name the member.
pub fn member_key_hash(public: &[u8]) -> [u8; 32] {
    *blake3::hash(public).as_bytes()
}

fn seal_key(shared: &[u8]) -> ChaCha20Poly1305 {
    let mut k = blake3::derive_key("sion-seal-wrap-v1", shared);
    let c = ChaCha20Poly1305::new(&Key::from(k));
    k.zeroize();
    c
}

/// A fresh encapsulation to `public` and the cipher its shared secret keys.
fn encapsulate(public: &[u8]) -> Result<(Vec<u8>, ChaCha20Poly1305), SealError> {
    let ek = EncapsulationKey::try_from(public).map_err(|_| {
        SealError::BadKey(format!("{} bytes are not an X-Wing encapsulation key", public.len()))
    })?;
    let (ct, shared) = ek.encapsulate();
    Ok((ct.to_vec(), seal_key(&shared)))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn array32(b: &[u8], at: usize) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(&b[at..at + 32]);
    out
}

/// An epoch's cover wrapped to one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wrapped {
    pub space: [u8; 32],
    pub epoch: u32,
    pub member: [u8; 32],
    bytes: Vec<u8>,
}

impl Wrapped {
    /// Wrap `cover` (of `space`) to the member whose encapsulation key is `public`.
    pub fn wrap(space: &[u8; 32], cover: &Cover, public: &[u8]) -> Result<Self, SealError> {
        let (ct, cipher) = encapsulate(public)?;
        let member = member_key_hash(public);
        let plain = Zeroizing::new(cover.encode());
        if plain.len() > MAX_COVER_BYTES {
            return Err(SealError::Format {
                what: "key cover",
                problem: format!("{} bytes, more than a wrap carries ({MAX_COVER_BYTES})", plain.len()),
            });
        }
        let mut out = Vec::with_capacity(HEAD + ct.len() + plain.len() + 16);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(space);
        out.extend_from_slice(&cover.epoch.to_le_bytes());
        out.extend_from_slice(&member);
        out.extend_from_slice(&(plain.len() as u32).to_le_bytes());
        let sealed = cipher
            .encrypt(&Nonce::default(), Payload { msg: &plain, aad: &out[..HEAD] })
            .map_err(|_| SealError::Format { what: "wrapped key", problem: "cannot seal".into() })?;
        out.extend_from_slice(&ct);
        out.extend_from_slice(&sealed);
        Ok(Self { space: *space, epoch: cover.epoch, member, bytes: out })
    }

    /// The wrap's bytes (docs/SEAL.md, "Wrapped keys").
    pub fn encode(&self) -> &[u8] {
        &self.bytes
    }

    /// Parse a wrap's bytes: header, lengths (bounded before anything is allocated).
    pub fn decode(bytes: &[u8]) -> Result<Self, SealError> {
        let bad = |problem: String| SealError::Format { what: "wrapped key", problem };
        if bytes.len() < HEAD {
            return Err(bad(format!("{} bytes, shorter than its {HEAD}-byte header", bytes.len())));
        }
        if &bytes[..8] != MAGIC {
            return Err(bad("no SIONWRAP header".into()));
        }
        if bytes[8] != VERSION {
            return Err(bad(format!("version {} (this build reads {VERSION})", bytes[8])));
        }
        let n = u32_at(bytes, 77) as usize;
        if n > MAX_COVER_BYTES {
            return Err(bad(format!("a cover of {n} bytes, more than a wrap carries ({MAX_COVER_BYTES})")));
        }
        let want = HEAD + x_wing::CIPHERTEXT_SIZE + n + 16;
        if bytes.len() != want {
            return Err(bad(format!("{} bytes, not the {want} its header says", bytes.len())));
        }
        Ok(Self {
            space: array32(bytes, 9),
            epoch: u32_at(bytes, 41),
            member: array32(bytes, 45),
            bytes: bytes.to_vec(),
        })
    }

    /// The cover, for the member holding `key`; refused if the wrap is another member's, was
    /// changed, or carries a cover of another epoch than its header names.
    pub fn unwrap_for(&self, key: &MemberKey) -> Result<Cover, SealError> {
        if key.hash() != self.member {
            return Err(SealError::BadKey("this wrap is for another member".into()));
        }
        let cipher = key.shared(&self.bytes[HEAD..HEAD + x_wing::CIPHERTEXT_SIZE], "wrapped key")?;
        let plain = Zeroizing::new(
            cipher
                .decrypt(
                    &Nonce::default(),
                    Payload { msg: &self.bytes[HEAD + x_wing::CIPHERTEXT_SIZE..], aad: &self.bytes[..HEAD] },
                )
                .map_err(|_| SealError::Open { what: "wrapped key" })?,
        );
        let cover = Cover::decode(&plain)?;
        if cover.epoch != self.epoch {
            return Err(SealError::Format {
                what: "wrapped key",
                problem: format!("its header says epoch {}, its cover {}", self.epoch, cover.epoch),
            });
        }
        Ok(cover)
    }
}

/// One leaf's key wrapped to one member, bound to the atom it opens: what the payload service
/// answers a member with (docs/SEAL.md, "The payload service"). Only the member's key opens
/// it, so handing it to whoever asks shows nothing to anyone else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrappedLeaf {
    pub space: [u8; 32],
    pub epoch: u32,
    pub leaf: u32,
    pub member: [u8; 32],
    pub atom: [u8; 32],
    bytes: Vec<u8>,
}

impl WrappedLeaf {
    /// Wrap `leaf_key` (leaf `leaf` of `epoch` in `space`, sealing the atom whose bare id is
    /// `atom`) to the member whose encapsulation key is `public`.
    pub fn wrap(
        space: &[u8; 32],
        epoch: u32,
        leaf: u32,
        atom: &[u8; 32],
        leaf_key: &[u8; 32],
        public: &[u8],
    ) -> Result<Self, SealError> {
        let (ct, cipher) = encapsulate(public)?;
        let member = member_key_hash(public);
        let mut out = Vec::with_capacity(LEAF_LEN);
        out.extend_from_slice(LEAF_MAGIC);
        out.push(1);
        out.extend_from_slice(space);
        out.extend_from_slice(&epoch.to_le_bytes());
        out.extend_from_slice(&leaf.to_le_bytes());
        out.extend_from_slice(&member);
        out.extend_from_slice(atom);
        let sealed = cipher
            .encrypt(&Nonce::default(), Payload { msg: leaf_key, aad: &out[..LEAF_HEAD] })
            .map_err(|_| SealError::Format { what: "wrapped leaf key", problem: "cannot seal".into() })?;
        out.extend_from_slice(&ct);
        out.extend_from_slice(&sealed);
        Ok(Self { space: *space, epoch, leaf, member, atom: *atom, bytes: out })
    }

    /// Its bytes: "SIONLKEY", u8 1, 32 space, u32 epoch, u32 leaf, 32 member key hash, 32 atom,
    /// 1,120 encapsulation, 48 sealed leaf key (1,281 bytes).
    pub fn encode(&self) -> &[u8] {
        &self.bytes
    }

    /// Parse its bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, SealError> {
        let bad = |problem: String| SealError::Format { what: "wrapped leaf key", problem };
        if bytes.len() != LEAF_LEN {
            return Err(bad(format!("{} bytes, not {LEAF_LEN}", bytes.len())));
        }
        if &bytes[..8] != LEAF_MAGIC || bytes[8] != 1 {
            return Err(bad("no SIONLKEY version 1 header".into()));
        }
        Ok(Self {
            space: array32(bytes, 9),
            epoch: u32_at(bytes, 41),
            leaf: u32_at(bytes, 45),
            member: array32(bytes, 49),
            atom: array32(bytes, 81),
            bytes: bytes.to_vec(),
        })
    }

    /// The leaf key, for the member holding `key`.
    pub fn unwrap_for(&self, key: &MemberKey) -> Result<Zeroizing<[u8; 32]>, SealError> {
        if key.hash() != self.member {
            return Err(SealError::BadKey("this leaf key is wrapped for another member".into()));
        }
        let cipher =
            key.shared(&self.bytes[LEAF_HEAD..LEAF_HEAD + x_wing::CIPHERTEXT_SIZE], "wrapped leaf key")?;
        let plain = Zeroizing::new(
            cipher
                .decrypt(
                    &Nonce::default(),
                    Payload {
                        msg: &self.bytes[LEAF_HEAD + x_wing::CIPHERTEXT_SIZE..],
                        aad: &self.bytes[..LEAF_HEAD],
                    },
                )
                .map_err(|_| SealError::Open { what: "wrapped leaf key" })?,
        );
        let mut out = Zeroizing::new([0u8; 32]);
        out.copy_from_slice(&plain);
        Ok(out)
    }
}
