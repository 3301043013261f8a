//! Checking big proofs on every core with scoped threads of the standard library: the verifier
//! has no runtime and no thread pool, and returns only once every thread it started is done.

use std::sync::OnceLock;
use std::thread;

/// The cores this process may use.
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| thread::available_parallelism().map_or(1, |n| n.get()))
}

/// How deep a walk's subtrees are split between threads: two subtrees a core (they are
/// rarely the same size), none on one core.
pub fn depth() -> usize {
    cores().next_power_of_two().trailing_zeros() as usize + usize::from(cores() > 1)
}

/// `a` on a new thread and `b` on this one; both results.
pub fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB,
    RA: Send,
{
    thread::scope(|scope| {
        let left = scope.spawn(a);
        let right = b();
        match left.join() {
            Ok(left) => (left, right),
            // The closure panicked: carry the panic on, as running it here would have.
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// `f` over every item, the items cut into one run a core; the first error in item order.
pub fn map<T: Sync, R: Send, E: Send>(
    items: &[T],
    f: impl Fn(&T) -> Result<R, E> + Sync,
) -> Result<Vec<R>, E> {
    let run = items.len().div_ceil(cores()).max(1);
    // One run is this thread's: no thread is started for it (where threads cannot start at
    // all, in a browser's WebAssembly, the standard library reports one core).
    if items.len() <= run {
        return items.iter().map(f).collect();
    }
    let runs: Vec<Result<Vec<R>, E>> = thread::scope(|scope| {
        let f = &f;
        let handles: Vec<_> =
            items.chunks(run).map(|chunk| scope.spawn(move || chunk.iter().map(f).collect())).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    });
    let mut out = Vec::with_capacity(items.len());
    for run in runs {
        out.extend(run?);
    }
    Ok(out)
}
