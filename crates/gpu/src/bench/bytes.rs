//! The byte counts the bandwidth columns divide: the least traffic of a CSR SpMV (the same for
//! every row of the table) and the least traffic of each format's own SpMV.

/// The least bytes a CSR SpMV with 32-bit indices moves: an f64 value and an i32 column per
/// nonzero, an i32 row pointer and an f64 of `y` per row, an f64 of `x` per column (each read
/// once): `12 nnz + 12 nrows + 8 ncols`, which is `12 nnz + 20 n` for a square matrix.
pub fn csr_min_bytes(nrows: usize, ncols: usize, nnz: usize) -> u64 {
    12 * nnz as u64 + 12 * nrows as u64 + 8 * ncols as u64
}

/// The shape of a format's arrays that its traffic depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormatShape {
    /// CSR (also cuSPARSE).
    Csr,
    /// ELL of this width.
    Ell {
        /// Slots per row.
        width: usize,
    },
    /// DIA with this many diagonals.
    Dia {
        /// Stored diagonals.
        ndiag: usize,
    },
    /// COO (y is zeroed, then updated by atomics).
    Coo,
    /// HYB: ELL part of this width, COO part of `coo_nnz` entries in `coo_rows` distinct rows.
    Hyb {
        /// ELL width.
        width: usize,
        /// Entries of the COO part.
        coo_nnz: usize,
        /// Rows the COO part touches.
        coo_rows: usize,
    },
}

/// The least bytes one SpMV in a format moves, each array element read once, `x` read once
/// (`8 ncols`) and `y` written once (`8 nrows`), plus:
/// - CSR: `12 nnz + 4 nrows` (values, columns, row pointers);
/// - ELL: `12 width nrows` (every slot, padding included);
/// - DIA: `8 ndiag nrows + 4 ndiag`;
/// - COO: `16 nnz + 16 nrows` (rows, columns, values; the atomics read and write y again after
///   the zero fill);
/// - HYB: `12 width nrows + 16 coo_nnz + 16 coo_rows`.
pub fn format_bytes(shape: FormatShape, nrows: usize, ncols: usize, nnz: usize) -> u64 {
    let (n, m, z) = (nrows as u64, ncols as u64, nnz as u64);
    let base = 8 * m + 8 * n;
    base + match shape {
        FormatShape::Csr => 12 * z + 4 * n,
        FormatShape::Ell { width } => 12 * width as u64 * n,
        FormatShape::Dia { ndiag } => 8 * ndiag as u64 * n + 4 * ndiag as u64,
        FormatShape::Coo => 16 * z + 16 * n,
        FormatShape::Hyb {
            width,
            coo_nnz,
            coo_rows,
        } => 12 * width as u64 * n + 16 * coo_nnz as u64 + 16 * coo_rows as u64,
    }
}

/// The bandwidth formula in words, for the table and the JSON.
pub const BYTES_FORMULA: &str = "GB/s = (12*nnz + 12*nrows + 8*ncols) / median time, i.e. \
    12*nnz + 20*n for square matrices: the least traffic of CSR SpMV (f64 value + i32 column per \
    nonzero; i32 row pointer + f64 y per row; f64 x per column), the same byte count for every \
    row";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts() {
        // Square: 12 nnz + 20 n.
        assert_eq!(csr_min_bytes(10, 10, 30), 12 * 30 + 20 * 10);
        assert_eq!(
            format_bytes(FormatShape::Csr, 10, 10, 30),
            csr_min_bytes(10, 10, 30)
        );
        // ELL: 12 K n + 16 n.
        assert_eq!(
            format_bytes(FormatShape::Ell { width: 4 }, 10, 10, 30),
            12 * 4 * 10 + 16 * 10
        );
        assert_eq!(
            format_bytes(FormatShape::Dia { ndiag: 3 }, 10, 10, 28),
            8 * 3 * 10 + 4 * 3 + 16 * 10
        );
        assert_eq!(
            format_bytes(FormatShape::Coo, 10, 10, 30),
            16 * 30 + 16 * 10 + 16 * 10
        );
        assert_eq!(
            format_bytes(
                FormatShape::Hyb {
                    width: 2,
                    coo_nnz: 5,
                    coo_rows: 3
                },
                10,
                10,
                25
            ),
            12 * 2 * 10 + 16 * 5 + 16 * 3 + 16 * 10
        );
        // Rectangular: x per column, y per row.
        assert_eq!(csr_min_bytes(4, 6, 0), 12 * 4 + 8 * 6);
    }
}
