//! Finding the first element that fails a check, on every host thread, at the speed of a
//! plain loop: the input is cut into chunks of [`SCAN_CHUNK`] elements, each chunk is checked
//! with a branch-free fold (which the compiler vectorises), and only the first failing chunk
//! is scanned again for the position. Per-element parallel searches (rayon's `position_first`)
//! cost several times a sequential loop on inputs of tens of millions of elements; these
//! checks run on every upload and value update.
use rayon::prelude::*;

/// Elements per chunk of a scan.
pub const SCAN_CHUNK: usize = 1 << 16;

/// Scans of at most this many elements run on the calling thread: handing work to the thread
/// pool from outside it costs more than such a scan (tenths of a millisecond were measured on
/// the GPU host, where a warm setup of a small matrix takes about two).
pub const SEQUENTIAL_SCAN: usize = 2 * SCAN_CHUNK;

/// The first `k < n` with `bad(k)`.
pub fn first_index_where(n: usize, bad: impl Fn(usize) -> bool + Sync) -> Option<usize> {
    if n <= SEQUENTIAL_SCAN {
        return (0..n).find(|&k| bad(k));
    }
    let chunks = n.div_ceil(SCAN_CHUNK);
    let range = |c: usize| c * SCAN_CHUNK..((c + 1) * SCAN_CHUNK).min(n);
    let c = (0..chunks)
        .into_par_iter()
        .find_first(|&c| range(c).fold(false, |acc, k| acc | bad(k)))?;
    range(c).find(|&k| bad(k))
}

/// The position of the first element of `v` with `bad`.
pub fn first_where<T: Sync>(v: &[T], bad: impl Fn(&T) -> bool + Sync) -> Option<usize> {
    first_index_where(v.len(), |k| bad(&v[k]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_across_chunks() {
        const { assert!(5 * SCAN_CHUNK > SEQUENTIAL_SCAN) };
        let n = 5 * SCAN_CHUNK + 17;
        let mut v = vec![0u32; n];
        assert_eq!(first_where(&v, |&x| x > 0), None);
        for at in [n - 1, 3 * SCAN_CHUNK, SCAN_CHUNK - 1, 0] {
            v[at] = 1;
            assert_eq!(first_where(&v, |&x| x > 0), Some(at), "{at}");
        }
        assert_eq!(first_index_where(0, |_| true), None);
        assert_eq!(first_index_where(10, |k| k >= 7), Some(7));
    }
}
