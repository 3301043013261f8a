//! Epoch seeds wrapped to members (docs/SEAL.md, "Spaces, epochs and members"): an X-Wing
//! encapsulation to the member's key, and the seed sealed under the shared secret.

use chacha20poly1305::aead::{Aead as _, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, KeyInit as _, Nonce};
use x_wing::{Decapsulate as _, Decapsulator as _, Encapsulate as _, EncapsulationKey, KeyExport as _};
use zeroize::Zeroize as _;

use crate::SealError;

const MAGIC: &[u8; 8] = b"SIONWRAP";
const HEAD: usize = 8 + 1 + 32 + 4 + 32;
const LEN: usize = HEAD + x_wing::CIPHERTEXT_SIZE + 32 + 16;

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
}

/// BLAKE3 of a member's encapsulation key: how the space and the wraps name the member.
pub fn member_key_hash(public: &[u8]) -> [u8; 32] {
    *blake3::hash(public).as_bytes()
}

/// An epoch seed wrapped to one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wrapped {
    pub space: [u8; 32],
    pub epoch: u32,
    pub member: [u8; 32],
    bytes: Vec<u8>,
}

fn seal_key(shared: &[u8]) -> ChaCha20Poly1305 {
    let mut k = blake3::derive_key("sion-seal-wrap-v1", shared);
    let c = ChaCha20Poly1305::new(&Key::from(k));
    k.zeroize();
    c
}

impl Wrapped {
    /// Wrap `seed` (epoch `epoch` of `space`) to the member whose encapsulation key is `public`.
    pub fn wrap(space: &[u8; 32], epoch: u32, public: &[u8], seed: &[u8; 32]) -> Result<Self, SealError> {
        let ek = EncapsulationKey::try_from(public).map_err(|_| {
            SealError::BadKey(format!("{} bytes are not an X-Wing encapsulation key", public.len()))
        })?;
        let member = member_key_hash(public);
        let mut out = Vec::with_capacity(LEN);
        out.extend_from_slice(MAGIC);
        out.push(1);
        out.extend_from_slice(space);
        out.extend_from_slice(&epoch.to_le_bytes());
        out.extend_from_slice(&member);
        let (ct, shared) = ek.encapsulate();
        let sealed = seal_key(&shared)
            .encrypt(&Nonce::default(), Payload { msg: seed, aad: &out[..HEAD] })
            .map_err(|_| SealError::Format { what: "wrapped key", problem: "cannot seal".into() })?;
        out.extend_from_slice(&ct);
        out.extend_from_slice(&sealed);
        Ok(Self { space: *space, epoch, member, bytes: out })
    }

    /// The wrap's bytes: "SIONWRAP", u8 1, 32 space, u32 epoch, 32 member key hash, 1,120
    /// encapsulation, 48 sealed seed.
    pub fn encode(&self) -> &[u8] {
        &self.bytes
    }

    /// Parse a wrap's bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, SealError> {
        let bad = |problem: String| SealError::Format { what: "wrapped key", problem };
        if bytes.len() != LEN {
            return Err(bad(format!("{} bytes, not {LEN}", bytes.len())));
        }
        if &bytes[..8] != MAGIC || bytes[8] != 1 {
            return Err(bad("no SIONWRAP version 1 header".into()));
        }
        let mut space = [0u8; 32];
        space.copy_from_slice(&bytes[9..41]);
        let epoch = u32::from_le_bytes([bytes[41], bytes[42], bytes[43], bytes[44]]);
        let mut member = [0u8; 32];
        member.copy_from_slice(&bytes[45..77]);
        Ok(Self { space, epoch, member, bytes: bytes.to_vec() })
    }

    /// The epoch seed, for the member holding `key`.
    pub fn unwrap_for(&self, key: &MemberKey) -> Result<[u8; 32], SealError> {
        if member_key_hash(&key.public()) != self.member {
            return Err(SealError::BadKey("this wrap is for another member".into()));
        }
        let ct_bytes = &self.bytes[HEAD..HEAD + x_wing::CIPHERTEXT_SIZE];
        let ct = x_wing::Ciphertext::try_from(ct_bytes)
            .map_err(|_| SealError::Format { what: "wrapped key", problem: "encapsulation".into() })?;
        let shared = key.0.decapsulate(&ct);
        let seed = seal_key(&shared)
            .decrypt(
                &Nonce::default(),
                Payload { msg: &self.bytes[HEAD + x_wing::CIPHERTEXT_SIZE..], aad: &self.bytes[..HEAD] },
            )
            .map_err(|_| SealError::Open { what: "wrapped key" })?;
        let mut out = [0u8; 32];
        out.copy_from_slice(&seed);
        Ok(out)
    }
}
