//! sion_memory: a robot's memory it can prove — the ROS 2 package.
//!
//! Data flows one way: sensors (`ingest`) → atoms → log → index → proofs → readers. Each layer
//! is a crate of the workspace (CONTRIBUTING.md), so a lower one cannot import a higher one;
//! this package puts the ROS 2 node (`ros`, feature `ros`) and the `sion` command line on top,
//! and re-exports the layers under one name for its binaries, tests and examples.

#![forbid(unsafe_code)]

pub use sion_bag as bag;
pub mod fleet;
pub mod mcp;
pub mod protocol;
pub use sion_brain as brain;
pub use sion_cognet as cognet;
pub use sion_disk as disk;
pub use sion_ingest as ingest;
#[cfg(feature = "sim")]
pub use sion_sim as sim;
pub use sion_store::{index, ledger, log, memory};
pub use sion_verify::{atom, belief, cells, evidence, leaf, merkle, proof, time, units, wire};
pub use sion_viz as viz;

#[cfg(feature = "ros")]
pub mod ros;
