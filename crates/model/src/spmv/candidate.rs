//! The SpMV candidates the model fits and predicts — the catalogue's [`SpmvCandidate`]: a
//! format, a kernel (or HYB's pair, or a cuSPARSE algorithm), threads per block and a grid
//! policy — and the order the model lists them in.
use std::cmp::Ordering;

pub use autopcg_catalog::SpmvCandidate;

/// The order of SpMV candidates in the model: in model files, among the classifier's labels,
/// and between equal times or predictions. By format name, kernel name, threads per block and
/// grid-policy name (`cover` before `wave`; a missing part first): the order the candidates
/// had when they were strings, kept so that re-fitting a committed profile reproduces the
/// committed model (label indices and tie-breaks included). It is not the catalogue's `Ord`
/// (the declaration order of its enums).
pub fn model_order(a: &SpmvCandidate, b: &SpmvCandidate) -> Ordering {
    order_key(a).cmp(&order_key(b))
}

/// The key of [`model_order`].
pub fn order_key(c: &SpmvCandidate) -> (&'static str, String, Option<u32>, Option<String>) {
    (
        c.format.name(),
        c.kernel.to_string(),
        c.threads,
        c.grid.map(|g| g.to_string()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use autopcg_catalog::{CusparseAlg, GridPolicy, SpmvImpl, SpmvKernel};

    #[test]
    fn the_model_order_is_that_of_the_names() {
        let own =
            |k: SpmvKernel, t: u32, g: GridPolicy| SpmvCandidate::own(SpmvImpl::Kernel(k), t, g);
        let mut v = [
            own(SpmvKernel::CsrVector(2), 64, GridPolicy::Wave),
            own(SpmvKernel::CsrVector(16), 64, GridPolicy::Wave),
            own(SpmvKernel::CsrScalar, 256, GridPolicy::Wave),
            own(SpmvKernel::CsrScalar, 64, GridPolicy::Wave),
            own(SpmvKernel::CsrScalar, 64, GridPolicy::Cover),
            own(SpmvKernel::CooAtomic, 1024, GridPolicy::Wave),
            SpmvCandidate::cusparse(CusparseAlg::CsrAlg1),
        ];
        v.sort_by(model_order);
        let names: Vec<String> = v.iter().map(SpmvCandidate::name).collect();
        assert_eq!(
            names,
            [
                "coo/spmv_coo_atomic/t1024/wave",
                "csr/cusparse_spmv_csr_alg1/-/-",
                "csr/spmv_csr_scalar/t64/cover",
                "csr/spmv_csr_scalar/t64/wave",
                "csr/spmv_csr_scalar/t256/wave",
                "csr/spmv_csr_vector_16/t64/wave",
                "csr/spmv_csr_vector_2/t64/wave",
            ]
        );
    }
}
