//! The kernels of `vector.cu`: axpy, xpay and the fused Chronopoulos–Gear update, each in four
//! thread mappings.
use std::fmt;

use super::parse_by_name;
use crate::{DeviceProps, LaunchConfig, DEFAULT_THREADS};

/// Entry point of the triad kernel in `vector.cu` (the bandwidth measurement).
pub const TRIAD_KERNEL: &str = "triad";

/// How a vector kernel maps elements to threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum VectorVariant {
    /// One element per thread; blocks x threads must cover n.
    Elem,
    /// One double2 (two elements) per thread; blocks x threads must cover ceil(n / 2).
    ElemV2,
    /// Grid-stride loop; any block count.
    Grid,
    /// Grid-stride loop over double2; any block count.
    GridV2,
}

impl VectorVariant {
    /// Every variant.
    pub const ALL: [VectorVariant; 4] = [
        VectorVariant::Elem,
        VectorVariant::ElemV2,
        VectorVariant::Grid,
        VectorVariant::GridV2,
    ];

    /// The suffix of the entry points (`elem`, `elem_v2`, `grid`, `grid_v2`).
    pub fn suffix(self) -> &'static str {
        match self {
            VectorVariant::Elem => "elem",
            VectorVariant::ElemV2 => "elem_v2",
            VectorVariant::Grid => "grid",
            VectorVariant::GridV2 => "grid_v2",
        }
    }

    /// Elements per load: 2 for the double2 variants, else 1.
    pub fn elements_per_load(self) -> u64 {
        match self {
            VectorVariant::ElemV2 | VectorVariant::GridV2 => 2,
            VectorVariant::Elem | VectorVariant::Grid => 1,
        }
    }

    /// Work items for n elements: `ceil(n / elements per load)`.
    pub fn work(self, n: u64) -> u64 {
        n.div_ceil(self.elements_per_load())
    }

    /// The launch that runs the configuration `cfg` on `n` elements: its blocks capped at
    /// those that cover the work ([`LaunchConfig::capped_at_work`]). The plan launches an
    /// update so, and the profile times it so (see [`crate::Reduction::launch_at`]).
    pub fn launch_at(self, cfg: LaunchConfig, n: u64) -> LaunchConfig {
        cfg.capped_at_work(self.work(n))
    }

    /// True for the grid-stride variants (any block count).
    pub fn is_grid_stride(self) -> bool {
        matches!(self, VectorVariant::Grid | VectorVariant::GridV2)
    }

    /// Elements one thread handles for the variants whose launch must cover n one item per
    /// thread (`Some(1)`, `Some(2)`); `None` for grid-stride variants.
    pub fn elements_per_thread(self) -> Option<u32> {
        match self {
            VectorVariant::Elem => Some(1),
            VectorVariant::ElemV2 => Some(2),
            VectorVariant::Grid | VectorVariant::GridV2 => None,
        }
    }

    /// Threads needed to cover n elements: `Some(items)` for the one-item-per-thread variants,
    /// `None` for grid-stride ones.
    pub fn items(self, n: u64) -> Option<u64> {
        self.elements_per_thread().map(|e| n.div_ceil(u64::from(e)))
    }

    /// Default configuration for n elements: [`DEFAULT_THREADS`] threads; exactly covering
    /// blocks for the per-element variants, one resident wave for grid-stride ones.
    pub fn default_config(self, n: u64, props: &DeviceProps) -> LaunchConfig {
        match self.items(n) {
            Some(items) => LaunchConfig::per_item(items, DEFAULT_THREADS),
            None => LaunchConfig::grid_stride(self.work(n), DEFAULT_THREADS, props),
        }
    }
}

impl fmt::Display for VectorVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.suffix())
    }
}

parse_by_name!(VectorVariant, VectorVariant::ALL, "vector variant");

/// The operation of a vector kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum VectorOp {
    /// `y = y + a x`.
    Axpy,
    /// `y = x + a y`.
    Xpay,
    /// The fused Chronopoulos–Gear update of four vectors, u read from its own vector.
    CgUpdate,
    /// The update without a preconditioner: u is r (no copy, one vector fewer read).
    CgUpdateNoPre,
    /// The update with Jacobi fused: also writes the next u = D^-1 r.
    CgUpdateJacobi,
}

impl VectorOp {
    /// Every operation.
    pub const ALL: [VectorOp; 5] = [
        VectorOp::Axpy,
        VectorOp::Xpay,
        VectorOp::CgUpdate,
        VectorOp::CgUpdateNoPre,
        VectorOp::CgUpdateJacobi,
    ];

    /// The name (`axpy`, `xpay`, `cg_update`, `cg_update_nopre`, `cg_update_jacobi`).
    pub fn name(self) -> &'static str {
        match self {
            VectorOp::Axpy => "axpy",
            VectorOp::Xpay => "xpay",
            VectorOp::CgUpdate => "cg_update",
            VectorOp::CgUpdateNoPre => "cg_update_nopre",
            VectorOp::CgUpdateJacobi => "cg_update_jacobi",
        }
    }

    /// Vectors of n doubles read and written per call (the bytes a launch moves, over 8n):
    /// the update reads u, w, p, s, x, r and writes p, s, x, r; without a preconditioner u is
    /// r; with Jacobi fused it also reads D^-1 and writes u.
    pub fn vectors_moved(self) -> u32 {
        match self {
            VectorOp::Axpy | VectorOp::Xpay => 3,
            VectorOp::CgUpdate => 10,
            VectorOp::CgUpdateNoPre => 9,
            VectorOp::CgUpdateJacobi => 12,
        }
    }

    /// The kernel of this operation in `variant`.
    pub fn kernel(self, variant: VectorVariant) -> VectorKernel {
        match self {
            VectorOp::Axpy => VectorKernel::Axpy(variant),
            VectorOp::Xpay => VectorKernel::Xpay(variant),
            VectorOp::CgUpdate => VectorKernel::CgUpdate(variant),
            VectorOp::CgUpdateNoPre => VectorKernel::CgUpdateNoPre(variant),
            VectorOp::CgUpdateJacobi => VectorKernel::CgUpdateJacobi(variant),
        }
    }
}

impl fmt::Display for VectorOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

parse_by_name!(VectorOp, VectorOp::ALL, "vector operation");

/// The kernels of `vector.cu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum VectorKernel {
    /// `y = y + a x`.
    Axpy(VectorVariant),
    /// `y = x + a y`.
    Xpay(VectorVariant),
    /// The fused Chronopoulos–Gear update.
    CgUpdate(VectorVariant),
    /// The update without a preconditioner (u is r).
    CgUpdateNoPre(VectorVariant),
    /// The update with Jacobi fused (writes the next u).
    CgUpdateJacobi(VectorVariant),
}

impl VectorKernel {
    /// Every kernel of the file.
    pub fn all() -> Vec<VectorKernel> {
        VectorVariant::ALL
            .iter()
            .flat_map(|&v| VectorOp::ALL.map(|op| op.kernel(v)))
            .collect()
    }

    /// The variant.
    pub fn variant(self) -> VectorVariant {
        match self {
            VectorKernel::Axpy(v)
            | VectorKernel::Xpay(v)
            | VectorKernel::CgUpdate(v)
            | VectorKernel::CgUpdateNoPre(v)
            | VectorKernel::CgUpdateJacobi(v) => v,
        }
    }

    /// The operation.
    pub fn op(self) -> VectorOp {
        match self {
            VectorKernel::Axpy(_) => VectorOp::Axpy,
            VectorKernel::Xpay(_) => VectorOp::Xpay,
            VectorKernel::CgUpdate(_) => VectorOp::CgUpdate,
            VectorKernel::CgUpdateNoPre(_) => VectorOp::CgUpdateNoPre,
            VectorKernel::CgUpdateJacobi(_) => VectorOp::CgUpdateJacobi,
        }
    }
}

impl fmt::Display for VectorKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.op(), self.variant().suffix())
    }
}

parse_by_name!(VectorKernel, VectorKernel::all(), "vector kernel");
