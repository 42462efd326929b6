//! `autopcg matgen`: write a generated SPD benchmark matrix.
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{anyhow, bail, Result};
use clap::Args;

use autopcg::sparse::families::{self, Family, FamilyParams};
use autopcg::sparse::mm::{self, WriteSymmetry};

#[derive(Args)]
pub(crate) struct MatgenArgs {
    /// Family name (see --list).
    #[arg(required_unless_present = "list")]
    family: Option<String>,
    /// List the families and their parameters.
    #[arg(long)]
    list: bool,
    /// Size: grid points per side for stencil families, rows for banded/powerlaw, points for fem2d.
    #[arg(long, default_value_t = 32)]
    n: usize,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Half bandwidth (banded).
    #[arg(long)]
    bandwidth: Option<usize>,
    /// Mean nonzeros per row (powerlaw).
    #[arg(long)]
    mean_row_len: Option<f64>,
    /// Power-law exponent (powerlaw).
    #[arg(long)]
    alpha: Option<f64>,
    /// Anisotropy ratio in (0, 1] (aniso2d).
    #[arg(long)]
    eps: Option<f64>,
    /// Anisotropy angle in radians (aniso2d).
    #[arg(long)]
    theta: Option<f64>,
    /// Write the full matrix (`general`) instead of the lower triangle (`symmetric`).
    #[arg(long)]
    general: bool,
    /// Output file (.mtx, or .mtx.gz to compress).
    #[arg(long, required_unless_present = "list")]
    out: Option<PathBuf>,
}

pub(crate) fn matgen(a: MatgenArgs) -> Result<()> {
    if a.list {
        for (f, desc) in families::list() {
            println!("{:<16} {desc}", f.to_string());
        }
        return Ok(());
    }
    let (Some(name), Some(out)) = (a.family.as_deref(), a.out.as_ref()) else {
        bail!("matgen needs a FAMILY and --out (see autopcg matgen --list)");
    };
    let family: Family = name
        .parse()
        .map_err(|e| anyhow!("{e} (see autopcg matgen --list)"))?;
    let p = FamilyParams {
        n: a.n,
        seed: a.seed,
        bandwidth: a.bandwidth,
        mean_row_len: a.mean_row_len,
        alpha: a.alpha,
        eps: a.eps,
        theta: a.theta,
    };
    let t0 = Instant::now();
    let m = families::generate(family, &p)?;
    let t_gen = t0.elapsed().as_secs_f64();
    let sym = if a.general {
        WriteSymmetry::General
    } else {
        WriteSymmetry::SymmetricLower
    };
    mm::write_matrix(out, &m, sym)?;
    eprintln!(
        "{}: {family} n = {}, nnz = {} (generated in {:.2} s, written in {:.2} s)",
        out.display(),
        m.nrows(),
        m.nnz(),
        t_gen,
        t0.elapsed().as_secs_f64() - t_gen
    );
    Ok(())
}
