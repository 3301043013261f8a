//! sion_store: the writer's side of a sion_memory.
//!
//! The durable append-only atom log and its blobs (docs/LOG.md), the spatio-temporal index
//! kept up to date incrementally (docs/INDEX.md), the embedded ledger (docs/LEDGER.md), and
//! [`memory::Memory`], which ties a writer's log, key and ledger together and builds proofs.
//! What a reader needs to check those proofs is `sion_verify`, which this crate builds on and
//! never the other way round.

#![forbid(unsafe_code)]

pub mod frame;
pub mod index;
pub mod ledger;
pub mod log;
pub mod memory;
mod private;
pub mod shadow;
#[cfg(feature = "sim")]
pub mod sim;
