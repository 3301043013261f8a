//! Pictures of a memory, an answer and its proof. [`scene`] is what every picture shows of an
//! answer (the question, the answer by kind, the verdict, the proof's walk in layers, and a
//! legend): the node's RViz markers and `sion export`'s Foxglove scene are drawn from it. With
//! the feature `rerun`, the Rerun recording of `sion viz` (docs/VIZ.md lists what each entity
//! shows). A reader at the top of the data flow: it reads the log, the blob store and proof
//! files.

#![forbid(unsafe_code)]

pub mod frames;
pub mod scene;

#[cfg(feature = "rerun")]
mod recording;
#[cfg(feature = "rerun")]
pub use recording::*;
