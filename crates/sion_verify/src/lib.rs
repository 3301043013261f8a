//! sion_verify: everything a reader needs to check a sion_memory proof from a head alone.
//!
//! A robot hands another robot (or an auditor) a proof file; this crate decodes it and checks
//! it in the reader's own process, against a ledger key the reader chose, and checks that it
//! answers the question the reader asked. It has no runtime, touches no files and spawns no
//! work it does not wait for: atoms and their canonical encoding (docs/ATOM.md), RFC 9162
//! hashing (`merkle`), the log's leaves (docs/LOG.md), the index's commitment
//! (docs/INDEX.md), proof files (docs/PROOFS.md), and ledger headers, state proofs and
//! signatures (docs/LEDGER.md).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod atom;
pub mod belief;
pub mod cells;
pub mod evidence;
pub mod hex32;
pub mod index;
pub mod leaf;
pub mod ledger;
pub mod merkle;
pub mod proof;
pub mod time;
pub mod units;
pub mod wire;
