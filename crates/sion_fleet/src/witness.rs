//! A witness (docs/FLEET-LEDGER.md, "Witnesses"): follows a fleet ledger's chain and cosigns
//! each header it has checked extends the last one it cosigned. What it cosigned last is made
//! durable before the cosignature leaves, so after any crash it still never cosigns two
//! headers with one number: a ledger that forks its chain for one reader gets no cosignature
//! for the fork from this witness, and a ledger that shows it the fork is caught.

use std::path::{Path, PathBuf};

use ed25519_dalek::{SigningKey, VerifyingKey};
use sion_store::ledger::link::LedgerLink;
use sion_store::ledger::{LedgerError, SignedHeader};
use sion_verify::ledger::Cosignature;
use sion_verify::merkle::Digest;
use sion_verify::wire::{Put as _, Reader};

use crate::client::RemoteLedger;

const MAGIC: &[u8; 8] = b"SIONWIT1";

/// Why a witness did not cosign.
#[derive(Debug, thiserror::Error)]
pub enum WitnessError {
    /// The ledger showed a header for a number the witness already cosigned, with another hash:
    /// the ledger forked its chain (both headers are signed by its key — the evidence).
    #[error(
        "the ledger equivocates: Pulse {number} has header {offered} (hex: {offered_header}), but this witness cosigned {cosigned} for that number"
    )]
    Equivocation {
        /// The Pulse number.
        number: u64,
        /// The hash this witness cosigned, hex.
        cosigned: String,
        /// The hash of the header it was shown, hex.
        offered: String,
        /// The signed header it was shown, hex (89-byte header, 64-byte signature).
        offered_header: String,
    },
    /// A header that does not extend the last cosigned one (its number or its `prev`).
    #[error("Pulse {number} does not extend the last cosigned header (Pulse {last}): {why}")]
    DoesNotExtend {
        /// The header's number.
        number: u64,
        /// The last cosigned number.
        last: u64,
        /// What is wrong.
        why: String,
    },
    /// The ledger's latest Pulse is below one this witness already cosigned: its chain was
    /// rolled back (etcd restored from an older copy, or a ledger started afresh under the same
    /// key), and the Pulses it signs next would take numbers it already gave out.
    #[error(
        "the ledger rolled back: its latest Pulse is {latest}, but this witness already cosigned Pulse {cosigned}; it would sign those numbers again"
    )]
    RolledBack {
        /// The ledger's latest Pulse.
        latest: u64,
        /// The last Pulse this witness cosigned.
        cosigned: u64,
    },
    /// A header not signed by the ledger's key.
    #[error("Pulse {0}'s header is not signed by the ledger's key")]
    Signature(u64),
    /// The state file is for another ledger, or damaged.
    #[error("the witness state {path}: {problem}")]
    State {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The ledger could not be asked, or refused.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// A witness of one ledger: its key, the ledger's, and the last header it cosigned.
pub struct Witness {
    key: SigningKey,
    ledger: VerifyingKey,
    state: PathBuf,
    last: Option<(u64, Digest)>,
}

impl Witness {
    /// A witness with signing key `key` of the ledger whose key is `ledger`, remembering what
    /// it cosigned in the file `state` (made on first use; one file per ledger witnessed).
    pub fn open(key: SigningKey, ledger: VerifyingKey, state: &Path) -> Result<Self, WitnessError> {
        let bad = |problem: String| WitnessError::State { path: state.to_owned(), problem };
        let last = match std::fs::read(state) {
            Ok(bytes) => {
                let (ledger_key, number, hash) = decode_state(&bytes).map_err(bad)?;
                if ledger_key != ledger.to_bytes() {
                    return Err(bad(format!(
                        "it is of the ledger with key {}, not {}",
                        hex::encode(ledger_key),
                        hex::encode(ledger.to_bytes())
                    )));
                }
                Some((number, hash))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(bad(e.to_string())),
        };
        Ok(Self { key, ledger, state: state.to_owned(), last })
    }

    /// This witness's public key.
    pub fn public_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    /// The last header cosigned: its number and hash.
    pub fn last(&self) -> Option<(u64, Digest)> {
        self.last
    }

    /// Cosign `h` if it is the ledger's and extends the last header cosigned (or is the one
    /// cosigned last: the same cosignature again). The new last header is durable before the
    /// cosignature is returned.
    pub fn cosign(&mut self, h: &SignedHeader) -> Result<Cosignature, WitnessError> {
        let number = h.header.number;
        h.verify(&self.ledger).map_err(|_| WitnessError::Signature(number))?;
        let hash = h.header.hash();
        match self.last {
            Some((n, cosigned)) if n == number => {
                if cosigned != hash {
                    return Err(equivocation(number, cosigned, h));
                }
            }
            Some((n, cosigned)) => {
                if number != n + 1 {
                    let why = if number < n {
                        format!("this witness already cosigned up to Pulse {n}")
                    } else {
                        format!("Pulse {} must be cosigned first", n + 1)
                    };
                    return Err(WitnessError::DoesNotExtend { number, last: n, why });
                }
                if h.header.prev != cosigned {
                    return Err(WitnessError::DoesNotExtend {
                        number,
                        last: n,
                        why: format!(
                            "its prev is {}, the cosigned header's hash {}",
                            hex::encode(h.header.prev),
                            hex::encode(cosigned)
                        ),
                    });
                }
                self.remember(number, hash)?;
            }
            None => {
                if number != 0 {
                    return Err(WitnessError::DoesNotExtend {
                        number,
                        last: 0,
                        why: "a new witness starts at the genesis, Pulse 0".into(),
                    });
                }
                self.remember(number, hash)?;
            }
        }
        Ok(Cosignature::sign(&self.key, &self.ledger.to_bytes(), &h.header))
    }

    fn remember(&mut self, number: u64, hash: Digest) -> Result<(), WitnessError> {
        let bytes = encode_state(&self.ledger.to_bytes(), number, hash);
        sion_disk::Disk::os()
            .replace_file(&self.state, &bytes)
            .map_err(|e| WitnessError::State { path: self.state.clone(), problem: e.to_string() })?;
        self.last = Some((number, hash));
        Ok(())
    }

    /// Follow the ledger at `link` up to its latest Pulse: fetch each header after the last
    /// cosigned, cosign it and hand the cosignature back. First the last cosigned number is
    /// asked for again — if the ledger now shows another header there, it forked. Returns how
    /// many Pulses were cosigned; `progress` is told each number.
    pub fn follow(
        &mut self,
        link: &RemoteLedger,
        mut progress: impl FnMut(u64),
    ) -> Result<u64, WitnessError> {
        if link.public_key() != self.ledger {
            return Err(LedgerError::Remote {
                ledger: link.describe(),
                message: format!(
                    "it signs with key {}, not the witnessed {}",
                    hex::encode(link.public_key().to_bytes()),
                    hex::encode(self.ledger.to_bytes())
                ),
            }
            .into());
        }
        let latest = link.latest()?.header.number;
        if let Some((n, _)) = self.last
            && latest < n
        {
            return Err(WitnessError::RolledBack { latest, cosigned: n });
        }
        let mut next = match self.last {
            // Again: a cosignature made durable here may not have reached the ledger.
            Some((n, _)) => n,
            None => 0,
        };
        let mut cosigned = 0;
        while next <= latest {
            let h = link.header(next)?;
            let again = self.last.is_some_and(|(n, _)| n == next);
            let c = self.cosign(&h)?;
            match link.cosign(next, &c) {
                Ok(()) => {}
                // Handing the last one back again is best effort: the ledger may have archived
                // that Pulse meanwhile, and then takes no cosignature of it.
                Err(LedgerError::Refused { .. }) if again => {}
                Err(e) => return Err(e.into()),
            }
            if !again {
                cosigned += 1;
            }
            progress(next);
            next += 1;
        }
        Ok(cosigned)
    }
}

fn equivocation(number: u64, cosigned: Digest, h: &SignedHeader) -> WitnessError {
    let mut offered_header = Vec::new();
    h.put(&mut offered_header);
    WitnessError::Equivocation {
        number,
        cosigned: hex::encode(cosigned),
        offered: hex::encode(h.header.hash()),
        offered_header: hex::encode(offered_header),
    }
}

/// The state file: "SIONWIT1", 32 ledger key, u64 number, 32 hash, u32 CRC-32C (Castagnoli,
/// little-endian) of what precedes it.
fn encode_state(ledger: &[u8; 32], number: u64, hash: Digest) -> Vec<u8> {
    let mut out = Vec::with_capacity(84);
    out.put_bytes(MAGIC);
    out.put_bytes(ledger);
    out.put_u64(number);
    out.put_bytes(&hash);
    let crc = crc32c::crc32c(&out);
    out.put_u32(crc);
    out
}

fn decode_state(bytes: &[u8]) -> Result<([u8; 32], u64, Digest), String> {
    if bytes.len() != 84 {
        return Err(format!("{} bytes, not 84", bytes.len()));
    }
    let (body, crc) = bytes.split_at(80);
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return Err("its checksum fails (damaged): restore it, never start it afresh".into());
    }
    let mut r = Reader::new(body);
    if r.take(8, "magic").map_err(|e| e.to_string())? != MAGIC {
        return Err("not a witness state file (SIONWIT1)".into());
    }
    let ledger = r.array("ledger key").map_err(|e| e.to_string())?;
    let number = r.u64("number").map_err(|e| e.to_string())?;
    let hash = r.array("hash").map_err(|e| e.to_string())?;
    Ok((ledger, number, hash))
}
