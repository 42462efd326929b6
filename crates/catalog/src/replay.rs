//! When a timed call stands for the solver's: the solver replays its iterations as CUDA
//! graphs, so an iteration whose data fits in L2 keeps it there from one iteration to the
//! next, and its short calls run back to back on the device without the host's launch pacing
//! between them. The profiler times such calls from graph replays too; a call whose
//! iteration does not fit is timed launched alone, since a replayed batch would keep its
//! data in L2 as the solver's iterations do not. The SpMV model keeps one set of time models
//! per regime ([`replays_spmv_at`] says which applies to a matrix).

/// Bytes per row of the vectors a PCG iteration moves beside its matrix (the update's, the
/// reduction's and the preconditioner's, 8 of them).
pub const ITERATION_VECTOR_BYTES_PER_ROW: u64 = 64;

/// Whether calls of an iteration that moves `iteration_bytes` fit the solver's situation when
/// replayed: a replayed batch keeps a call's data in L2 from one call to the next, which the
/// solver's iterations keep too only when the whole iteration fits; half of `l2_bytes` leaves
/// room for what else passes through.
pub fn replays_like_the_solver(iteration_bytes: u64, l2_bytes: u64) -> bool {
    iteration_bytes <= l2_bytes / 2
}

/// The least bytes a CSR SpMV of a square matrix of `n` rows and `nnz` entries moves:
/// `12 nnz + 20 n` (values and column indices, row pointers, `x` and `y`).
pub fn square_csr_bytes(n: u64, nnz: u64) -> u64 {
    nnz.saturating_mul(12).saturating_add(n.saturating_mul(20))
}

/// Whether the SpMV of a matrix of `n` rows whose CSR arrays hold `csr_bytes` runs in the
/// solver as a replayed call: the matrix and an iteration's vectors fit in half of
/// `l2_bytes`. Launched one by one, products of a few microseconds there measure the host's
/// launch pacing, and every format and launch takes about the same time (on an H200,
/// 6.6-8.2 us for the CSR scalar kernel on 2D Poisson 100^2, about 2 us replayed).
pub fn replays_spmv_at(l2_bytes: u32, n: u64, csr_bytes: u64) -> bool {
    replays_like_the_solver(
        csr_bytes.saturating_add(n.saturating_mul(ITERATION_VECTOR_BYTES_PER_ROW)),
        u64::from(l2_bytes),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which of the tune's matrices an H200 (60 MiB of L2) times from replays: 3D Poisson
    /// 50^3 and 2D Poisson 316^2 do, the 2e5-point FEM matrix (33.5 MB with its vectors) and
    /// 2D Poisson 1000^2 do not; the bound is half of L2, inclusive.
    #[test]
    fn products_replay_while_matrix_and_vectors_fit_in_half_of_l2() {
        let l2 = 62_914_560u32;
        let at = |n: u64, nnz: u64| replays_spmv_at(l2, n, square_csr_bytes(n, nnz));
        assert!(at(125_000, 860_000));
        assert!(at(99_856, 498_016));
        assert!(!at(200_000, 1_396_430));
        assert!(!at(1_000_000, 4_996_000));
        let half = u64::from(l2) / 2;
        assert!(replays_spmv_at(l2, 1000, half - 64_000));
        assert!(!replays_spmv_at(l2, 1000, half - 63_999));
        assert!(!replays_spmv_at(l2, u64::MAX, 0));
        assert_eq!(square_csr_bytes(10, 28), 12 * 28 + 20 * 10);
    }
}
