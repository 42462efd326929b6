//! The kernels of `convert.cu`: row-length histogram, scans, and the ELL, DIA and HYB
//! conversions from CSR on the device.
use std::fmt;

use super::parse_by_name;

/// The kernels of `convert.cu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConvertKernel {
    /// Row-length histogram with per-block shared-memory bins.
    HistRowLengths,
    /// Entries per row of a COO matrix.
    CooRowCounts,
    /// Scan stage 1: tile sums.
    ScanTileSums,
    /// Scan stage 2: exclusive scan of the tile sums.
    ScanTileOffsets,
    /// Scan stage 3: scan inside tiles plus tile offsets.
    ScanApply,
    /// Row-length histogram of the rows at least `base` long.
    HistRowLengthsFrom,
    /// The longest row.
    RowLengthMax,
    /// ELL (or HYB's ELL part) from CSR.
    EllFromCsr,
    /// Entries per row past the HYB split.
    HybOverflowCounts,
    /// HYB's COO part from CSR.
    HybCooFromCsr,
    /// Flags of the diagonals holding an entry.
    DiaMark,
    /// DIA offsets from the scanned flags.
    DiaOffsets,
    /// The DIA band from CSR.
    DiaFromCsr,
}

impl ConvertKernel {
    /// Every kernel of the file.
    pub const ALL: [ConvertKernel; 13] = [
        ConvertKernel::HistRowLengths,
        ConvertKernel::CooRowCounts,
        ConvertKernel::ScanTileSums,
        ConvertKernel::ScanTileOffsets,
        ConvertKernel::ScanApply,
        ConvertKernel::HistRowLengthsFrom,
        ConvertKernel::RowLengthMax,
        ConvertKernel::EllFromCsr,
        ConvertKernel::HybOverflowCounts,
        ConvertKernel::HybCooFromCsr,
        ConvertKernel::DiaMark,
        ConvertKernel::DiaOffsets,
        ConvertKernel::DiaFromCsr,
    ];
}

impl fmt::Display for ConvertKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConvertKernel::HistRowLengths => "hist_row_lengths",
            ConvertKernel::CooRowCounts => "coo_row_counts",
            ConvertKernel::ScanTileSums => "scan_tile_sums",
            ConvertKernel::ScanTileOffsets => "scan_tile_offsets",
            ConvertKernel::ScanApply => "scan_apply",
            ConvertKernel::HistRowLengthsFrom => "hist_row_lengths_from",
            ConvertKernel::RowLengthMax => "row_length_max",
            ConvertKernel::EllFromCsr => "ell_from_csr",
            ConvertKernel::HybOverflowCounts => "hyb_overflow_counts",
            ConvertKernel::HybCooFromCsr => "hyb_coo_from_csr",
            ConvertKernel::DiaMark => "dia_mark",
            ConvertKernel::DiaOffsets => "dia_offsets",
            ConvertKernel::DiaFromCsr => "dia_from_csr",
        })
    }
}

parse_by_name!(ConvertKernel, ConvertKernel::ALL, "conversion kernel");
