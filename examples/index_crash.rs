//! Test helper for tests/index_store.rs: folds a deterministic warehouse run into an index on
//! disk, sealing and checkpointing every 2,000 atoms, and says on stdout when each checkpoint
//! begins and ends, so the test can SIGKILL it in the middle of one.
//!
//!     cargo run --example index_crash -- DIR

use std::io::Write as _;

use sion_memory::atom::Atom;
use sion_memory::index::{Index, IndexConfig, IndexError};
use sion_memory::sim::{Warehouse, WarehouseConfig};

fn main() -> Result<(), IndexError> {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "index".into()));
    let mut index = match Index::open(&dir, IndexConfig::default()) {
        Ok((index, _)) => index,
        Err(IndexError::Missing(_)) => Index::create(&dir, IndexConfig::default())?,
        Err(e) => return Err(e),
    };
    let mut atoms = Warehouse::new(WarehouseConfig::default()).skip(index.size() as usize);
    let mut out = std::io::stdout();
    loop {
        let batch: Vec<Atom> = atoms.by_ref().take(2000).collect();
        index.fold_all(&batch)?;
        index.seal()?;
        let _ = writeln!(out, "checkpoint {}", index.size());
        let _ = out.flush();
        index.checkpoint()?;
        let _ = writeln!(out, "durable {}", index.size());
        let _ = out.flush();
    }
}
