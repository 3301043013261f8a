//! sion_store: the writer's side of a sion_memory.
//!
//! [`memory::Memory`] ties a writer's log (`sion_log`, docs/LOG.md), its index (`sion_index`,
//! docs/INDEX.md), its key and its ledger (`sion_ledger`, docs/LEDGER.md) together, keeps
//! sealed spaces and belief, and builds proofs. The rooms are re-exported under their old
//! names (`sion_store::log`, `::index`, `::ledger`), so a caller reaches them from here.
//! What a reader needs to check those proofs is `sion_verify`, which this crate builds on and
//! never the other way round.

#![forbid(unsafe_code)]

pub use sion_disk::{frame, shadow};
pub use sion_index as index;
pub use sion_ledger as ledger;
pub use sion_log as log;
pub mod memory;

/// `From` each operation's error of a memory ([`memory::OpenError`], [`memory::CommitError`],
/// [`memory::ProveError`], [`memory::RememberError`]) for an error type whose `Memory` variant
/// holds a [`memory::MemoryError`], so `?` works on any of them.
#[macro_export]
macro_rules! from_memory_errors {
    ($target:ty) => {
        $crate::from_memory_errors!(@each $target,
            $crate::memory::OpenError, $crate::memory::CommitError,
            $crate::memory::ProveError, $crate::memory::RememberError);
    };
    (@each $target:ty, $($op:ty),*) => {$(
        impl From<$op> for $target {
            fn from(e: $op) -> Self {
                Self::Memory(e.into())
            }
        }
    )*};
}
