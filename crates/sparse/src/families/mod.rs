//! Seeded generators of symmetric positive definite benchmark matrices.
//!
//! Every generator returns a [`CsrMatrix`] that is symmetric (bit for bit: `A[i][j]` and
//! `A[j][i]` are the same `f64`), has a positive diagonal and is positive definite. Random
//! families draw from `ChaCha8Rng` streams keyed by the seed and by the row (or by the
//! unordered pair of indices), so the result depends on the seed only, never on the number of
//! rayon threads.
//!
//! - Stencils on regular grids with Dirichlet boundaries ([`poisson2d_5pt`], [`poisson2d_9pt`],
//!   [`poisson3d_7pt`], [`poisson3d_27pt`], [`anisotropic2d`]) are built straight into CSR arrays,
//!   in parallel.
//! - Random sparse matrices made SPD by strict diagonal dominance ([`banded_spd`],
//!   [`random_powerlaw_spd`]).
//! - An unstructured P1 finite-element Laplacian on a Delaunay mesh ([`fem_p1_2d`]).
//! - Combinators that keep SPD-ness ([`kron`], [`block_diag`]).
//!
//! [`Family`], [`FamilyParams`], [`generate`] and [`list`] describe the families by name for the
//! command line.
use std::fmt;
use std::str::FromStr;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use crate::{CsrMatrix, Index, SparseError};

mod fem;
mod ops;
mod random;
mod recipe;
mod stencil;

pub use fem::{fem_p1_2d, fem_p1_2d_mesh, Mesh2d};
pub use ops::{block_diag, kron};
pub use random::{banded_spd, random_powerlaw_spd};
pub use recipe::Recipe;
pub use stencil::{anisotropic2d, poisson2d_5pt, poisson2d_9pt, poisson3d_27pt, poisson3d_7pt};

/// Largest row count, column count or number of nonzeros a matrix may have: one value below
/// `u32::MAX` stays free as a padding sentinel (the same limit [`CsrMatrix`] enforces).
pub(crate) const MAX_INDEX: u64 = (u32::MAX - 1) as u64;

/// Checks that a row count and a nonzero count (computed exactly in `u128`) fit 32-bit indices.
pub(crate) fn check_size(what: &str, rows: u128, nnz: u128) -> Result<(), SparseError> {
    if rows > MAX_INDEX as u128 || nnz > MAX_INDEX as u128 {
        return Err(SparseError::TooLarge(format!(
            "{what}: {rows} rows with {nnz} nonzeros (each must be at most {MAX_INDEX})"
        )));
    }
    Ok(())
}

/// A `ChaCha8Rng` keyed by `seed` on its own stream `stream`: independent streams give every
/// row its own random numbers, whatever thread draws them.
pub(crate) fn stream_rng(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

/// Number of consecutive rows one rayon task fills in [`build_rows`].
const ROW_BLOCK: usize = 2048;

/// One block of rows in [`build_rows`]: block number, offset of its first entry, and its pieces
/// of the row pointer (from its second row on), the column indices and the values.
type BlockParts<'a> = (
    usize,
    Index,
    &'a mut [Index],
    &'a mut [Index],
    &'a mut [f64],
);

/// Builds an `nrows x ncols` CSR matrix row by row, in parallel.
///
/// `row_len(i)` is the exact number of entries of row `i`; `fill(i, cols, vals)` writes them
/// (`cols` strictly increasing) into slices of that length. Rows are handled in blocks of
/// [`ROW_BLOCK`]: a first pass sums the row lengths of every block, a second writes the row
/// pointers, column indices and values of each block in one go (so the large arrays are touched
/// once, by the thread that fills them). The result is validated by
/// [`CsrMatrix::try_from_parts`], so a wrong `fill` gives an error, never an invalid matrix.
pub(crate) fn build_rows<L, F>(
    what: &str,
    nrows: usize,
    ncols: usize,
    row_len: L,
    fill: F,
) -> Result<CsrMatrix, SparseError>
where
    L: Fn(usize) -> usize + Sync,
    F: Fn(usize, &mut [Index], &mut [f64]) + Sync,
{
    check_size(what, nrows.max(ncols) as u128, 0)?;
    let nblocks = nrows.div_ceil(ROW_BLOCK);
    let block_rows = |b: usize| b * ROW_BLOCK..((b + 1) * ROW_BLOCK).min(nrows);
    let block_nnz: Vec<u128> = (0..nblocks)
        .into_par_iter()
        .map(|b| block_rows(b).map(|i| row_len(i) as u128).sum())
        .collect();
    let total: u128 = block_nnz.iter().sum();
    check_size(what, nrows as u128, total)?;
    let nnz = total as usize;
    let mut indptr: Vec<Index> = vec![0; nrows + 1];
    let mut indices: Vec<Index> = vec![0; nnz];
    let mut data: Vec<f64> = vec![0.0; nnz];
    {
        // Split the three arrays into one piece per block.
        let mut blocks: Vec<BlockParts<'_>> = Vec::with_capacity(nblocks);
        let mut rp: &mut [Index] = &mut indptr[1..];
        let (mut ri, mut rd): (&mut [Index], &mut [f64]) = (&mut indices, &mut data);
        let mut base = 0usize;
        for (b, &len) in block_nnz.iter().enumerate() {
            let len = len as usize;
            let rows = block_rows(b).len();
            let (hp, tp) = rp.split_at_mut(rows);
            let (hi, ti) = ri.split_at_mut(len);
            let (hd, td) = rd.split_at_mut(len);
            // Cannot overflow: the total was checked above.
            blocks.push((b, base as Index, hp, hi, hd));
            rp = tp;
            ri = ti;
            rd = td;
            base += len;
        }
        let failed = blocks
            .into_par_iter()
            .map(|(b, base, ptr, bi, bd)| {
                let mut at = 0usize;
                for (k, i) in block_rows(b).enumerate() {
                    let len = row_len(i);
                    if at + len > bi.len() {
                        return true;
                    }
                    fill(i, &mut bi[at..at + len], &mut bd[at..at + len]);
                    at += len;
                    ptr[k] = base + at as Index;
                }
                at != bi.len()
            })
            .any(|f| f);
        if failed {
            return Err(SparseError::Structure(format!(
                "{what}: row lengths changed between two passes"
            )));
        }
    }
    CsrMatrix::try_from_parts(nrows, ncols, indptr, indices, data)
}

/// Maps 64 random bits to a double uniform in `[-1, 1)`.
pub(crate) fn bits_to_signed_unit(bits: u64) -> f64 {
    // 53 random bits give every multiple of 2^-52 in [-1, 1) the same chance.
    ((bits >> 11) as f64) * (1.0 / (1u64 << 52) as f64) - 1.0
}

/// The named families the command line offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Family {
    /// [`poisson2d_5pt`] on an n x n grid.
    #[serde(rename = "poisson2d")]
    Poisson2d5,
    /// [`poisson2d_9pt`] on an n x n grid.
    #[serde(rename = "poisson2d-9pt")]
    Poisson2d9,
    /// [`poisson3d_7pt`] on an n x n x n grid.
    #[serde(rename = "poisson3d")]
    Poisson3d7,
    /// [`poisson3d_27pt`] on an n x n x n grid.
    #[serde(rename = "poisson3d-27pt")]
    Poisson3d27,
    /// [`anisotropic2d`] on an n x n grid.
    #[serde(rename = "aniso2d")]
    Anisotropic2d,
    /// [`banded_spd`] with n rows.
    #[serde(rename = "banded")]
    Banded,
    /// [`random_powerlaw_spd`] with n rows.
    #[serde(rename = "powerlaw")]
    PowerLaw,
    /// [`fem_p1_2d`] with n free mesh points (= rows).
    #[serde(rename = "fem2d")]
    FemP1,
}

impl Family {
    /// Every family, in the order [`list`] gives them.
    pub const ALL: [Family; 8] = [
        Family::Poisson2d5,
        Family::Poisson2d9,
        Family::Poisson3d7,
        Family::Poisson3d27,
        Family::Anisotropic2d,
        Family::Banded,
        Family::PowerLaw,
        Family::FemP1,
    ];

    /// The name used on the command line and in records.
    pub fn name(self) -> &'static str {
        match self {
            Family::Poisson2d5 => "poisson2d",
            Family::Poisson2d9 => "poisson2d-9pt",
            Family::Poisson3d7 => "poisson3d",
            Family::Poisson3d27 => "poisson3d-27pt",
            Family::Anisotropic2d => "aniso2d",
            Family::Banded => "banded",
            Family::PowerLaw => "powerlaw",
            Family::FemP1 => "fem2d",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Family::Poisson2d5 => "5-point Laplacian (4, -1) on an n x n grid, Dirichlet; n^2 rows",
            Family::Poisson2d9 => "9-point Laplacian (8, -1) on an n x n grid, Dirichlet; n^2 rows",
            Family::Poisson3d7 => {
                "7-point Laplacian (6, -1) on an n x n x n grid, Dirichlet; n^3 rows"
            }
            Family::Poisson3d27 => {
                "27-point Laplacian (26, -1) on an n x n x n grid, Dirichlet; n^3 rows"
            }
            Family::Anisotropic2d => {
                "rotated anisotropic diffusion, bilinear finite elements on an n x n grid, \
                 Dirichlet; n^2 rows; eps in (0, 1] (default 0.01), theta in radians \
                 (default pi/6)"
            }
            Family::Banded => {
                "random symmetric band |i-j| <= bandwidth (default 8), off-diagonals U[-1,1), \
                 strictly diagonally dominant; n rows; seeded"
            }
            Family::PowerLaw => {
                "random symmetric pattern with power-law row lengths: mean_row_len (default \
                 10), tail exponent alpha (default 1.5), strictly diagonally dominant; n rows; \
                 seeded"
            }
            Family::FemP1 => {
                "P1 finite-element Laplacian on a Delaunay mesh of jittered points in the unit \
                 square, Dirichlet on the square's edges; n free points = n rows; seeded"
            }
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Family {
    type Err = SparseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Family::ALL
            .iter()
            .copied()
            .find(|f| f.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Family::ALL.iter().map(|f| f.name()).collect();
                SparseError::InvalidParameter(format!(
                    "unknown matrix family {s:?} (known: {})",
                    names.join(", ")
                ))
            })
    }
}

/// Parameters of [`generate`]; `None` takes the family's default, and a parameter the family does
/// not use is an error rather than silently ignored.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FamilyParams {
    /// Grid points per side for the stencil families, rows for banded and powerlaw, free mesh
    /// points (= rows) for fem2d.
    pub n: usize,
    /// Seed of the random families (the stencil families ignore it).
    pub seed: u64,
    /// Half bandwidth of `banded` (default 8).
    pub bandwidth: Option<usize>,
    /// Requested mean row length of `powerlaw`, diagonal included (default 10).
    pub mean_row_len: Option<f64>,
    /// Tail exponent of `powerlaw` (default 1.5).
    pub alpha: Option<f64>,
    /// Anisotropy ratio of `aniso2d`, in (0, 1] (default 0.01).
    pub eps: Option<f64>,
    /// Rotation angle of `aniso2d` in radians (default pi/6).
    pub theta: Option<f64>,
}

impl FamilyParams {
    /// Size `n` and seed `seed`, every other parameter at its default.
    pub fn new(n: usize, seed: u64) -> Self {
        FamilyParams {
            n,
            seed,
            bandwidth: None,
            mean_row_len: None,
            alpha: None,
            eps: None,
            theta: None,
        }
    }
}

/// Default half bandwidth of [`Family::Banded`].
pub const DEFAULT_BANDWIDTH: usize = 8;
/// Default mean row length of [`Family::PowerLaw`].
pub const DEFAULT_MEAN_ROW_LEN: f64 = 10.0;
/// Default tail exponent of [`Family::PowerLaw`].
pub const DEFAULT_ALPHA: f64 = 1.5;
/// Default anisotropy ratio of [`Family::Anisotropic2d`].
pub const DEFAULT_EPS: f64 = 0.01;
/// Default rotation angle of [`Family::Anisotropic2d`] (30 degrees).
pub const DEFAULT_THETA: f64 = std::f64::consts::FRAC_PI_6;

/// Builds the matrix of family `f` with parameters `p`.
pub fn generate(f: Family, p: &FamilyParams) -> Result<CsrMatrix, SparseError> {
    let used: &[&str] = match f {
        Family::Anisotropic2d => &["eps", "theta"],
        Family::Banded => &["bandwidth"],
        Family::PowerLaw => &["mean_row_len", "alpha"],
        _ => &[],
    };
    let given = [
        ("bandwidth", p.bandwidth.is_some()),
        ("mean_row_len", p.mean_row_len.is_some()),
        ("alpha", p.alpha.is_some()),
        ("eps", p.eps.is_some()),
        ("theta", p.theta.is_some()),
    ];
    if let Some((name, _)) = given.iter().find(|(n, g)| *g && !used.contains(n)) {
        return Err(SparseError::InvalidParameter(format!(
            "parameter {name} does not apply to family {f}"
        )));
    }
    let n = p.n;
    match f {
        Family::Poisson2d5 => poisson2d_5pt(n, n),
        Family::Poisson2d9 => poisson2d_9pt(n, n),
        Family::Poisson3d7 => poisson3d_7pt(n, n, n),
        Family::Poisson3d27 => poisson3d_27pt(n, n, n),
        Family::Anisotropic2d => anisotropic2d(
            n,
            n,
            p.eps.unwrap_or(DEFAULT_EPS),
            p.theta.unwrap_or(DEFAULT_THETA),
        ),
        Family::Banded => banded_spd(n, p.bandwidth.unwrap_or(DEFAULT_BANDWIDTH), p.seed),
        Family::PowerLaw => random_powerlaw_spd(
            n,
            p.mean_row_len.unwrap_or(DEFAULT_MEAN_ROW_LEN),
            p.alpha.unwrap_or(DEFAULT_ALPHA),
            p.seed,
        ),
        Family::FemP1 => fem_p1_2d(n, p.seed),
    }
}

/// Every family with a one-line description of its parameters.
pub fn list() -> Vec<(Family, &'static str)> {
    Family::ALL.iter().map(|&f| (f, f.description())).collect()
}
