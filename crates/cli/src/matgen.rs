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
    #[arg(required_unless_present_any = ["list", "kron"])]
    family: Option<String>,
    /// Instead of a family: this Matrix Market file Kronecker-multiplied by the 5-point
    /// Poisson matrix of an n x n grid (a real matrix scaled up, n^2 times the rows, about 5 n^2
    /// times the entries; SPD when the file's matrix is).
    #[arg(long, value_name = "FILE", conflicts_with = "family")]
    kron: Option<PathBuf>,
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
    let Some(out) = a.out.as_ref() else {
        bail!("matgen needs --out (and a FAMILY or --kron FILE; see autopcg matgen --list)");
    };
    if let Some(file) = &a.kron {
        let t0 = Instant::now();
        let recipe = families::Recipe::FileKron {
            path: file.to_string_lossy().into_owned(),
            poisson2d: a.n,
        };
        autopcg::sparse::io::check_output(out, [file.as_path()])?;
        let m = recipe.build(std::path::Path::new(""))?;
        let t_gen = t0.elapsed().as_secs_f64();
        return write_out(out, &m, a.general, &recipe.to_string(), t_gen);
    }
    let Some(name) = a.family.as_deref() else {
        bail!("matgen needs a FAMILY or --kron FILE (see autopcg matgen --list)");
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
    write_out(out, &m, a.general, &family.to_string(), t_gen)
}

fn write_out(
    out: &std::path::Path,
    m: &autopcg::sparse::CsrMatrix,
    general: bool,
    what: &str,
    t_gen: f64,
) -> Result<()> {
    let t0 = Instant::now();
    let sym = if general {
        WriteSymmetry::General
    } else {
        WriteSymmetry::SymmetricLower
    };
    mm::write_matrix(out, m, sym)?;
    eprintln!(
        "{}: {what} n = {}, nnz = {} (generated in {t_gen:.2} s, written in {:.2} s)",
        out.display(),
        m.nrows(),
        m.nnz(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
