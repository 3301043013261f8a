//! Checking big proofs on every core with scoped threads of the standard library: the verifier
//! has no runtime and no thread pool, and returns only once every thread it started is done.

use std::sync::OnceLock;
use std::thread;

/// The cores this process may use.
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| thread::available_parallelism().map_or(1, |n| n.get()))
}

/// `f` over every item, the items cut into one run a core; the first error in item order.
pub fn map<T: Sync, R: Send, E: Send>(
    items: &[T],
    f: impl Fn(&T) -> Result<R, E> + Sync,
) -> Result<Vec<R>, E> {
    // Collected at their final size: a `collect` of results cannot know it, and grows (and
    // copies) its list as it goes.
    let all = |items: &[T]| -> Result<Vec<R>, E> {
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            out.push(f(item)?);
        }
        Ok(out)
    };
    let run = items.len().div_ceil(cores()).max(1);
    // One run is this thread's: no thread is started for it (where threads cannot start at
    // all, in a browser's WebAssembly, the standard library reports one core).
    if items.len() <= run {
        return all(items);
    }
    let runs: Vec<Result<Vec<R>, E>> = thread::scope(|scope| {
        let all = &all;
        // The first run on this thread, the others each on a thread of its own (a thread
        // started and joined costs 40-50 us on this project's 2-core VM).
        let (first, rest) = items.split_at(run);
        let handles: Vec<_> = rest.chunks(run).map(|chunk| scope.spawn(move || all(chunk))).collect();
        let mine = all(first);
        std::iter::once(mine)
            .chain(
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))),
            )
            .collect()
    });
    let mut out = Vec::with_capacity(items.len());
    for run in runs {
        out.extend(run?);
    }
    Ok(out)
}
