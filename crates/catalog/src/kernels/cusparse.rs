//! cuSPARSE's generic SpMV algorithms for CSR, named as the benchmark records them.
use std::fmt;

use super::parse_by_name;

/// The cuSPARSE SpMV algorithms for CSR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CusparseAlg {
    /// `CUSPARSE_SPMV_ALG_DEFAULT`: the library's choice.
    Default,
    /// `CUSPARSE_SPMV_CSR_ALG1`: the library's default CSR kernel, named explicitly.
    CsrAlg1,
    /// `CUSPARSE_SPMV_CSR_ALG2`: the merge-path style kernel, deterministic and balanced for
    /// irregular rows.
    CsrAlg2,
}

impl CusparseAlg {
    /// Every algorithm, in the order the benchmark tries them.
    pub const ALL: [CusparseAlg; 3] = [
        CusparseAlg::Default,
        CusparseAlg::CsrAlg1,
        CusparseAlg::CsrAlg2,
    ];
}

impl fmt::Display for CusparseAlg {
    /// The name the benchmark records: `cusparse_spmv_<alg>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CusparseAlg::Default => "cusparse_spmv_alg_default",
            CusparseAlg::CsrAlg1 => "cusparse_spmv_csr_alg1",
            CusparseAlg::CsrAlg2 => "cusparse_spmv_csr_alg2",
        })
    }
}

parse_by_name!(CusparseAlg, CusparseAlg::ALL, "cuSPARSE algorithm");
