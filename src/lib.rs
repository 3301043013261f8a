//! sion_memory: a robot's memory it can prove.
//!
//! Data flows one way: sensors (`ingest`) → `atom` → `log` → (index, proofs) → readers;
//! `ledger` keeps heads.
//! Lower layers never import higher ones.

pub mod atom;
pub mod bag;
pub mod brain;
pub mod cognet;
pub mod index;
pub mod ingest;
pub mod ledger;
pub mod log;
pub mod memory;
pub mod merkle;
pub mod proof;
#[cfg(feature = "ros")]
pub mod ros;
pub mod sim;
pub mod time;
#[cfg(feature = "viz")]
pub mod viz;
pub mod wire;
