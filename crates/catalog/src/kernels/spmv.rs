//! The SpMV kernels (`spmv_*.cu`) and the constants of the merge-path CSR kernel.
use std::fmt;

use super::parse_by_name;
use crate::{DeviceProps, Format, KernelSource, LaunchConfig, LaunchError};

/// Lanes per row the CSR vector kernel is compiled for.
pub const CSR_LANES: [u32; 5] = [2, 4, 8, 16, 32];

/// Merge-path steps (row ends plus entries) each lane of [`SpmvKernel::CsrMerge`] takes
/// (`MERGE_ITEMS` in spmv_csr.cu). Odd, so that the lanes' shared-memory reads spread over the
/// banks.
pub const MERGE_ITEMS: u32 = 7;

/// Merge-path steps per tile, one warp's share (`MERGE_TILE` in spmv_csr.cu).
pub const MERGE_TILE: u32 = 32 * MERGE_ITEMS;

/// Most threads per block [`SpmvKernel::CsrMerge`] is compiled for (its `__launch_bounds__`,
/// `MERGE_MAX_THREADS` in spmv_csr.cu).
pub const MERGE_MAX_THREADS: u32 = 512;

/// Dynamic shared memory of [`SpmvKernel::CsrMerge`] per warp of a block, bytes: a tile of
/// products (f64) and of row ends (u32).
pub const MERGE_SMEM_PER_WARP: u32 = MERGE_TILE * 12;

/// The kernel that cuts the merge path into tiles, run once per matrix.
pub const MERGE_PARTITION: &str = "spmv_csr_merge_partition";

/// The kernel that adds the carry-outs of rows cut by a tile boundary, run after every
/// [`SpmvKernel::CsrMerge`] launch.
pub const MERGE_FIXUP: &str = "spmv_csr_merge_fixup";

/// Tiles of the merge path of a matrix with `nrows` rows and `nnz` entries:
/// `ceil((nrows + nnz) / MERGE_TILE)`.
pub fn merge_tiles(nrows: usize, nnz: usize) -> u64 {
    (nrows as u64 + nnz as u64).div_ceil(u64::from(MERGE_TILE))
}

/// Dynamic shared memory of a [`SpmvKernel::CsrMerge`] launch with `threads` per block.
pub fn merge_smem_bytes(threads: u32) -> u32 {
    (threads / 32).saturating_mul(MERGE_SMEM_PER_WARP)
}

/// The SpMV kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SpmvKernel {
    /// CSR, one thread per row.
    CsrScalar,
    /// CSR, this many lanes (one of [`CSR_LANES`]) per row.
    CsrVector(u32),
    /// CSR, load-balanced by the merge path (Merrill & Garland, "Merge-based Parallel Sparse
    /// Matrix-Vector Multiplication", SC 2016): one warp per tile of [`MERGE_TILE`] row ends
    /// plus entries, whatever the row lengths. Needs a per-matrix workspace; launches a small
    /// fixup kernel ([`MERGE_FIXUP`]) after the main one.
    CsrMerge,
    /// ELLPACK, one thread per row.
    Ell,
    /// Diagonals, one thread per row.
    Dia,
    /// COO, one atomic add per entry.
    CooAtomic,
    /// COO, warp-segmented reduction, one atomic per row and tile of 32 entries.
    CooSegment,
}

impl SpmvKernel {
    /// Every kernel.
    pub fn all() -> Vec<SpmvKernel> {
        let mut v = vec![SpmvKernel::CsrScalar];
        v.extend(CSR_LANES.iter().map(|&l| SpmvKernel::CsrVector(l)));
        v.extend([
            SpmvKernel::CsrMerge,
            SpmvKernel::Ell,
            SpmvKernel::Dia,
            SpmvKernel::CooAtomic,
            SpmvKernel::CooSegment,
        ]);
        v
    }

    /// The source file it lives in.
    pub fn source(self) -> KernelSource {
        match self {
            SpmvKernel::CsrScalar | SpmvKernel::CsrVector(_) | SpmvKernel::CsrMerge => {
                KernelSource::SpmvCsr
            }
            SpmvKernel::Ell => KernelSource::SpmvEll,
            SpmvKernel::Dia => KernelSource::SpmvDia,
            SpmvKernel::CooAtomic | SpmvKernel::CooSegment => KernelSource::SpmvCoo,
        }
    }

    /// The format it reads.
    pub fn format(self) -> Format {
        match self {
            SpmvKernel::CsrScalar | SpmvKernel::CsrVector(_) | SpmvKernel::CsrMerge => Format::Csr,
            SpmvKernel::Ell => Format::Ell,
            SpmvKernel::Dia => Format::Dia,
            SpmvKernel::CooAtomic | SpmvKernel::CooSegment => Format::Coo,
        }
    }

    /// True when threads per block must be a multiple of 32 (the warp-cooperative kernels).
    pub fn needs_whole_warps(self) -> bool {
        matches!(
            self,
            SpmvKernel::CsrVector(_) | SpmvKernel::CsrMerge | SpmvKernel::CooSegment
        )
    }

    /// True when y must be zeroed before the kernel adds into it (the COO kernels).
    pub fn accumulates(self) -> bool {
        matches!(self, SpmvKernel::CooAtomic | SpmvKernel::CooSegment)
    }

    /// Every entry point one SpMV with this kernel launches, the kernel itself first (the merge
    /// kernel's fixup follows it).
    pub fn entry_points(self) -> Vec<String> {
        let mut v = vec![self.to_string()];
        if self == SpmvKernel::CsrMerge {
            v.push(MERGE_FIXUP.to_string());
        }
        v
    }

    /// The entry point of the variant that adds its product into y (`y += A x`, same launch
    /// rules), for the kernels that have one: CSR scalar (`spmv_csr_scalar_add`) and CSR
    /// vector with a compiled lane count (`spmv_csr_vector_add_L`). Row blocks add their halo
    /// part's product with one of them.
    pub fn add_entry_point(self) -> Option<&'static str> {
        Some(match self {
            SpmvKernel::CsrScalar => "spmv_csr_scalar_add",
            SpmvKernel::CsrVector(2) => "spmv_csr_vector_add_2",
            SpmvKernel::CsrVector(4) => "spmv_csr_vector_add_4",
            SpmvKernel::CsrVector(8) => "spmv_csr_vector_add_8",
            SpmvKernel::CsrVector(16) => "spmv_csr_vector_add_16",
            SpmvKernel::CsrVector(32) => "spmv_csr_vector_add_32",
            _ => return None,
        })
    }

    /// The entry point of the variant whose epilogue adds the three dots of the PCG iteration
    /// ((r, u), (w, u), (r, r) of the rows it writes, w = A u) and runs the recurrence for the
    /// next iteration in its last block, for the kernels that write each row from one thread or
    /// one group of lanes: CSR scalar, CSR vector with a compiled lane count, ELL and DIA. Same
    /// launch rules as the kernel, but whole warps (the block reduction) and a square matrix.
    pub fn dot3_entry_point(self) -> Option<&'static str> {
        Some(match self {
            SpmvKernel::CsrScalar => "spmv_csr_scalar_dot3_next",
            SpmvKernel::CsrVector(2) => "spmv_csr_vector_dot3_next_2",
            SpmvKernel::CsrVector(4) => "spmv_csr_vector_dot3_next_4",
            SpmvKernel::CsrVector(8) => "spmv_csr_vector_dot3_next_8",
            SpmvKernel::CsrVector(16) => "spmv_csr_vector_dot3_next_16",
            SpmvKernel::CsrVector(32) => "spmv_csr_vector_dot3_next_32",
            SpmvKernel::Ell => "spmv_ell_dot3_next",
            SpmvKernel::Dia => "spmv_dia_dot3_next",
            _ => return None,
        })
    }

    /// The kernels with a dot3 variant ([`SpmvKernel::dot3_entry_point`]), in
    /// [`SpmvKernel::all`]'s order.
    pub fn with_dot3_variant() -> Vec<SpmvKernel> {
        SpmvKernel::all()
            .into_iter()
            .filter(|k| k.dot3_entry_point().is_some())
            .collect()
    }

    /// Checks that `cfg` can run the dot3 variant of this kernel on `props`: the kernel has one,
    /// the kernel's own launch rules ([`SpmvKernel::check_launch`]) and whole warps.
    pub fn check_dot3_launch(
        self,
        cfg: LaunchConfig,
        props: &DeviceProps,
    ) -> Result<(), LaunchError> {
        let Some(entry) = self.dot3_entry_point() else {
            return Err(LaunchError::new(
                self,
                "has no variant with the three dots in its epilogue (only CSR scalar, CSR \
                 vector, ELL and DIA)",
            ));
        };
        self.check_launch(cfg, props)?;
        if cfg.threads % 32 != 0 {
            return Err(LaunchError::new(
                entry,
                format!(
                    "needs whole warps: {} threads per block is not a multiple of 32",
                    cfg.threads
                ),
            ));
        }
        Ok(())
    }

    /// The launch of the dot3 variant for vectors of `n` rows when the plain product runs
    /// `cfg`: the same threads, the blocks capped at one resident wave (the variants stride
    /// over the rows, and the last block adds three partial sums per block, so a grid of one
    /// block per few rows makes its finish long). The wave is `resident_per_sm` blocks per SM
    /// where the compiled kernel's residency is known (eq. 3-2 on its registers: the tune's
    /// epilogue stage records it), else the device's threads per SM over the block
    /// ([`LaunchConfig::grid_stride`]). A kernel holding fewer blocks than that count runs a
    /// second, partial wave: the CSR vector variants of 8 and 16 lanes at 40 registers keep 6
    /// blocks of 256 threads per SM on an H200, and at 1056 blocks (8 per SM) took 1.46x the
    /// time they take at 792 (`tools/csr_dot3_bench.py`, 2^24 rows). `None` when the kernel has
    /// no variant, `cfg` is not whole warps, or the residency is 0.
    pub fn dot3_launch(
        self,
        cfg: LaunchConfig,
        n: u64,
        props: &DeviceProps,
        resident_per_sm: Option<u32>,
    ) -> Option<LaunchConfig> {
        self.dot3_entry_point()?;
        let wave = match resident_per_sm {
            Some(0) => return None,
            Some(b) => u64::from(props.sm_count.max(1)) * u64::from(b),
            None => u64::from(
                LaunchConfig::grid_stride(self.work_items(n, 0), cfg.threads, props).blocks,
            ),
        };
        let blocks = u64::from(cfg.blocks).min(wave).max(1);
        let fused = LaunchConfig::new(cfg.threads, blocks as u32);
        self.check_dot3_launch(fused, props).ok()?;
        Some(fused)
    }

    /// The kernels with an add variant ([`SpmvKernel::add_entry_point`]): CSR scalar, then CSR
    /// vector with each of [`CSR_LANES`].
    pub fn with_add_variant() -> Vec<SpmvKernel> {
        SpmvKernel::all()
            .into_iter()
            .filter(|k| k.add_entry_point().is_some())
            .collect()
    }

    /// Threads the kernel wants for a matrix of `nrows` rows and `nnz` entries: one per row
    /// (scalar CSR, ELL, DIA), per row and lane (CSR vector), per entry (COO), or 32 per tile
    /// of the merge path (CSR merge).
    pub fn work_items(self, nrows: u64, nnz: u64) -> u64 {
        match self {
            SpmvKernel::CsrScalar | SpmvKernel::Ell | SpmvKernel::Dia => nrows,
            SpmvKernel::CsrVector(l) => nrows.saturating_mul(u64::from(l)),
            SpmvKernel::CsrMerge => {
                (nrows.saturating_add(nnz)).div_ceil(u64::from(MERGE_TILE)) * 32
            }
            SpmvKernel::CooAtomic | SpmvKernel::CooSegment => nnz,
        }
    }

    /// Dynamic shared memory of a launch with `threads` per block, bytes.
    pub fn dynamic_smem_bytes(self, threads: u32) -> u32 {
        match self {
            SpmvKernel::CsrMerge => merge_smem_bytes(threads),
            _ => 0,
        }
    }

    /// Default configuration: [`crate::DEFAULT_THREADS`] threads, one resident wave, but no
    /// more threads than work items ([`SpmvKernel::work_items`]).
    pub fn default_config(self, nrows: u64, nnz: u64, props: &DeviceProps) -> LaunchConfig {
        LaunchConfig::grid_stride(self.work_items(nrows, nnz), crate::DEFAULT_THREADS, props)
    }

    /// Checks that `cfg` is a launch this kernel can run on `props`: the device's limits, a
    /// compiled lane count, whole warps for the warp-cooperative kernels, and the merge
    /// kernel's block-size and shared-memory bounds.
    pub fn check_launch(self, cfg: LaunchConfig, props: &DeviceProps) -> Result<(), LaunchError> {
        if let SpmvKernel::CsrVector(l) = self {
            if !CSR_LANES.contains(&l) {
                return Err(LaunchError::new(
                    self,
                    format!("{l} lanes per row; compiled for {CSR_LANES:?}"),
                ));
            }
        }
        cfg.check(self, props)?;
        if self.needs_whole_warps() && cfg.threads % 32 != 0 {
            return Err(LaunchError::new(
                self,
                format!(
                    "needs whole warps: {} threads per block is not a multiple of 32",
                    cfg.threads
                ),
            ));
        }
        if self == SpmvKernel::CsrMerge {
            if cfg.threads > MERGE_MAX_THREADS {
                return Err(LaunchError::new(
                    self,
                    format!(
                        "{} threads per block; compiled for at most {MERGE_MAX_THREADS}",
                        cfg.threads
                    ),
                ));
            }
            let smem = merge_smem_bytes(cfg.threads);
            if smem > props.smem_per_block {
                return Err(LaunchError::new(
                    self,
                    format!(
                        "{} threads per block need {smem} bytes of shared memory; the device \
                         allows {} per block",
                        cfg.threads, props.smem_per_block
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl fmt::Display for SpmvKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpmvKernel::CsrScalar => f.write_str("spmv_csr_scalar"),
            SpmvKernel::CsrVector(l) => write!(f, "spmv_csr_vector_{l}"),
            SpmvKernel::CsrMerge => f.write_str("spmv_csr_merge"),
            SpmvKernel::Ell => f.write_str("spmv_ell"),
            SpmvKernel::Dia => f.write_str("spmv_dia"),
            SpmvKernel::CooAtomic => f.write_str("spmv_coo_atomic"),
            SpmvKernel::CooSegment => f.write_str("spmv_coo_segment"),
        }
    }
}

parse_by_name!(SpmvKernel, SpmvKernel::all(), "SpMV kernel");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_variants_are_the_csr_row_kernels_named_after_them() {
        let with: Vec<SpmvKernel> = SpmvKernel::with_add_variant();
        let mut want = vec![SpmvKernel::CsrScalar];
        want.extend(CSR_LANES.iter().map(|&l| SpmvKernel::CsrVector(l)));
        assert_eq!(with, want);
        for k in with {
            let add = k.add_entry_point().unwrap();
            // spmv_csr_scalar -> spmv_csr_scalar_add, spmv_csr_vector_8 -> spmv_csr_vector_add_8.
            let name = k.to_string();
            let expected = match name.rsplit_once('_') {
                Some((stem, lanes)) if lanes.parse::<u32>().is_ok() => {
                    format!("{stem}_add_{lanes}")
                }
                _ => format!("{name}_add"),
            };
            assert_eq!(add, expected);
        }
        for k in [
            SpmvKernel::CsrMerge,
            SpmvKernel::Ell,
            SpmvKernel::Dia,
            SpmvKernel::CooAtomic,
            SpmvKernel::CooSegment,
            SpmvKernel::CsrVector(3),
        ] {
            assert_eq!(k.add_entry_point(), None, "{k:?}");
        }
    }

    #[test]
    fn dot3_variants_are_the_row_kernels_named_after_them() {
        let with = SpmvKernel::with_dot3_variant();
        let mut want = vec![SpmvKernel::CsrScalar];
        want.extend(CSR_LANES.iter().map(|&l| SpmvKernel::CsrVector(l)));
        want.extend([SpmvKernel::Ell, SpmvKernel::Dia]);
        assert_eq!(with, want);
        for k in with {
            // spmv_dia -> spmv_dia_dot3_next, spmv_csr_vector_8 -> spmv_csr_vector_dot3_next_8.
            let name = k.to_string();
            let expected = match name.rsplit_once('_') {
                Some((stem, lanes)) if lanes.parse::<u32>().is_ok() => {
                    format!("{stem}_dot3_next_{lanes}")
                }
                _ => format!("{name}_dot3_next"),
            };
            assert_eq!(k.dot3_entry_point().unwrap(), expected);
        }
        let p = DeviceProps::hopper_like();
        for k in [
            SpmvKernel::CsrMerge,
            SpmvKernel::CooAtomic,
            SpmvKernel::CooSegment,
            SpmvKernel::CsrVector(3),
        ] {
            assert_eq!(k.dot3_entry_point(), None, "{k:?}");
            assert!(k.check_dot3_launch(LaunchConfig::new(256, 4), &p).is_err());
        }
        // One thread per row runs any block size, but its epilogue needs whole warps.
        let odd = LaunchConfig::new(100, 40);
        SpmvKernel::Dia.check_launch(odd, &p).unwrap();
        let e = SpmvKernel::Dia.check_dot3_launch(odd, &p).unwrap_err();
        assert!(e.to_string().contains("spmv_dia_dot3_next"), "{e}");
        SpmvKernel::Dia
            .check_dot3_launch(LaunchConfig::new(128, 40), &p)
            .unwrap();
    }

    #[test]
    fn the_dot3_launch_is_capped_at_the_wave_the_kernel_keeps_resident() {
        let p = DeviceProps::hopper_like();
        let n = 1 << 24;
        let cover = LaunchConfig::per_item(n * 8, 256);
        let v8 = SpmvKernel::CsrVector(8);
        // Unknown residency: the device's threads per SM over the block, 8 x 132.
        assert_eq!(
            v8.dot3_launch(cover, n, &p, None),
            Some(LaunchConfig::new(256, 1056))
        );
        // The compiled kernel keeps 6 blocks per SM: 792.
        assert_eq!(
            v8.dot3_launch(cover, n, &p, Some(6)),
            Some(LaunchConfig::new(256, 792))
        );
        // A grid smaller than the wave stays; no residency, odd threads or no variant: none.
        let small = LaunchConfig::new(256, 40);
        assert_eq!(v8.dot3_launch(small, n, &p, Some(6)), Some(small));
        assert_eq!(v8.dot3_launch(cover, n, &p, Some(0)), None);
        assert_eq!(
            SpmvKernel::Dia.dot3_launch(LaunchConfig::new(100, 40), n, &p, None),
            None
        );
        assert_eq!(SpmvKernel::CsrMerge.dot3_launch(small, n, &p, None), None);
    }

    #[test]
    fn names_round_trip() {
        for k in SpmvKernel::all() {
            assert_eq!(k.to_string().parse::<SpmvKernel>(), Ok(k));
        }
        assert!("spmv_csr_vector_64".parse::<SpmvKernel>().is_err());
        assert!("csr".parse::<SpmvKernel>().is_err());
    }

    #[test]
    fn launch_checks() {
        let p = DeviceProps::hopper_like();
        let ok = LaunchConfig::new(256, 40);
        for k in SpmvKernel::all() {
            k.check_launch(ok, &p).unwrap();
        }
        let odd = LaunchConfig::new(100, 40);
        assert!(SpmvKernel::CsrVector(8)
            .check_launch(odd, &p)
            .unwrap_err()
            .to_string()
            .contains("warps"));
        SpmvKernel::CsrScalar.check_launch(odd, &p).unwrap();
        assert!(SpmvKernel::CsrMerge
            .check_launch(LaunchConfig::new(1024, 4), &p)
            .is_err());
        assert!(SpmvKernel::CsrVector(3).check_launch(ok, &p).is_err());
        assert_eq!(SpmvKernel::CsrMerge.entry_points().len(), 2);
        assert_eq!(SpmvKernel::CsrVector(4).work_items(10, 30), 40);
        assert_eq!(SpmvKernel::CsrMerge.work_items(0, 0), 0);
        assert_eq!(SpmvKernel::CsrMerge.work_items(1, 0), 32);
    }
}
