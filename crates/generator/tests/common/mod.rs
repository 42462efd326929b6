//! Shared helpers of the emission tests: fixtures, the committed H200 model, saved plans (as
//! `autopcg generate` makes them, and with steps forced to every format and kernel family), and
//! finding the compilers the checks need.
#![allow(dead_code)]

pub mod harness;

use std::path::{Path, PathBuf};
use std::process::Command;

use autopcg_catalog::{Dot3Kernel, LaunchConfig, Loads, SpmvKernel, SpmvMethod, VectorVariant};
use autopcg_generator::saved::{SavedModel, SavedPlan};
use autopcg_generator::{model_device_props, plan, ModelRef, PlanRequest, Target};
use autopcg_model::file::ModelFile;
use autopcg_solver::gpu::{GpuPlanChoice, PrecondChoice, SpmvChoice};
use autopcg_solver::{auto_omega, PrecondKind, Preconditioner, SsorForm};
use autopcg_sparse::CsrMatrix;

/// The repository root, relative to the package folder (cargo's working directory for tests).
pub fn root() -> PathBuf {
    Path::new("../..").to_path_buf()
}

pub fn fixture_path(name: &str) -> PathBuf {
    root().join("matrices").join(format!("{name}.mtx"))
}

pub fn fixture(name: &str) -> CsrMatrix {
    autopcg_sparse::mm::read_matrix(fixture_path(name), &Default::default())
        .unwrap_or_else(|e| panic!("{e}"))
        .matrix
}

pub fn h200_path() -> PathBuf {
    root().join("models/nvidia-h200.json")
}

pub fn h200() -> ModelFile {
    ModelFile::load(h200_path()).expect("the committed H200 model loads")
}

/// SSOR-AI (first order unless `order` 2) with the automatic omega (resolved for the matrix
/// by the plan, as `solve` and `generate` leave it).
pub fn ssor(order: u8) -> PrecondKind {
    PrecondKind::SsorAi {
        order,
        omega: None,
        form: SsorForm::Factored,
    }
}

/// The omega `auto` resolves to for `a`.
pub fn omega_of(a: &CsrMatrix) -> f64 {
    auto_omega(a)
}

/// The plan `autopcg generate --model models/nvidia-h200.json` saves for `a` with `kind`
/// (SSOR-AI's form chosen by the model when `form_auto`).
pub fn saved(name: &str, a: &CsrMatrix, kind: PrecondKind, form_auto: bool) -> SavedPlan {
    let model = h200();
    let props = model_device_props(&model);
    let mut req = PlanRequest::new(a, kind, Target::Gpu(props.clone()));
    req.ssor_form_auto = form_auto;
    req.model = Some(ModelRef {
        file: &model,
        label: "models/nvidia-h200.json",
    });
    let p = plan(&req).expect("a plan");
    let m = SavedModel::of_file(&h200_path(), "models/nvidia-h200.json").unwrap();
    SavedPlan::from_plan(&p, a, &props, Some(m), Some(format!("matrices/{name}.mtx"))).unwrap()
}

/// The plan `autopcg generate --model models/nvidia-h200.json --gpus <nblocks>` saves for `a`
/// with `kind`: `nblocks` row blocks, each planned by the model.
pub fn saved_split(name: &str, a: &CsrMatrix, kind: PrecondKind, nblocks: usize) -> SavedPlan {
    let model = h200();
    let props = model_device_props(&model);
    let mut req = PlanRequest::new(a, kind, Target::Gpu(props.clone()));
    req.model = Some(ModelRef {
        file: &model,
        label: "models/nvidia-h200.json",
    });
    let blocks = autopcg_generator::blocks::plan_blocks_balanced(&req, nblocks).expect("blocks");
    let m = SavedModel::of_file(&h200_path(), "models/nvidia-h200.json").unwrap();
    SavedPlan::from_blocks(
        &blocks,
        a,
        &props,
        Some(m),
        Some(format!("matrices/{name}.mtx")),
    )
    .unwrap()
}

/// One resident wave for `items` work items with `threads` per block on the H200.
pub fn wave(items: u64, threads: u32) -> LaunchConfig {
    let props = model_device_props(&h200());
    LaunchConfig::grid_stride(items, threads, &props)
}

/// A plan whose steps are forced to the given SpMV methods for A and the preconditioner's
/// operands, update variant and reduction (configurations valid for `a`).
pub struct Forced {
    pub a: SpmvMethod,
    pub pre: Vec<SpmvMethod>,
    pub update: VectorVariant,
    pub update_threads: u32,
    pub dot3: Dot3Kernel,
    pub dot_threads: u32,
    pub loads: Loads,
    pub use_graph: bool,
    pub graph_iters: u32,
}

pub fn force(p: &mut SavedPlan, f: &Forced) {
    let n = p.matrix.n as u64;
    let mut c: GpuPlanChoice = p.choice().clone();
    c = c.with_a(
        SpmvChoice {
            method: f.a,
            predicted_ms: None,
        },
        p.matrix.n,
        &p.device.props,
    );
    let mut pre = f.pre.iter().copied();
    c.precond = match c.precond {
        PrecondChoice::None => PrecondChoice::None,
        PrecondChoice::Jacobi(mut e) => {
            e.loads = f.loads;
            PrecondChoice::Jacobi(e)
        }
        PrecondChoice::Factored { mut k, mut kt } => {
            k.method = pre.next().unwrap_or(k.method);
            kt.method = pre.next().unwrap_or(kt.method);
            PrecondChoice::Factored { k, kt }
        }
        PrecondChoice::Explicit { mut m } => {
            m.method = pre.next().unwrap_or(m.method);
            PrecondChoice::Explicit { m }
        }
    };
    c.update.variant = f.update;
    c.update.config = match f.update.items(n) {
        Some(items) => LaunchConfig::per_item(items, f.update_threads),
        None => wave(f.update.work(n), f.update_threads),
    };
    c.dot3.kernel = f.dot3;
    c.dot3.config = wave(n.div_ceil(2), f.dot_threads);
    c.use_graph = f.use_graph;
    c.graph_iters = f.graph_iters;
    c.source = "forced by a test".into();
    p.set_choice(c).unwrap();
}

/// A SpMV method of `kernel` for a matrix of `nrows` rows and `nnz` entries, one wave of
/// `threads`-thread blocks.
pub fn method(kernel: SpmvKernel, nrows: usize, nnz: usize, threads: u32) -> SpmvMethod {
    let cfg = wave(kernel.work_items(nrows as u64, nnz as u64), threads);
    match kernel {
        SpmvKernel::Ell => SpmvMethod::Ell { config: cfg },
        SpmvKernel::Dia => SpmvMethod::Dia { config: cfg },
        SpmvKernel::CooAtomic | SpmvKernel::CooSegment => SpmvMethod::Coo {
            kernel,
            config: cfg,
        },
        k => SpmvMethod::Csr {
            kernel: k,
            config: cfg,
        },
    }
}

/// HYB with the one-third split and `coo` for the rest.
pub fn hyb(a: &CsrMatrix, coo: SpmvKernel, threads: u32) -> SpmvMethod {
    let h = autopcg_sparse::hyb::one_third_split(a) as u32;
    let coo_nnz: u64 = a
        .indptr()
        .windows(2)
        .map(|w| u64::from((w[1] - w[0]).saturating_sub(h)))
        .sum();
    SpmvMethod::Hyb {
        split: None,
        ell_config: wave(a.nrows() as u64, threads),
        coo_kernel: coo,
        coo_config: wave(coo_nnz.max(1), threads),
    }
}

/// The first of `names` that runs (`--version` exits 0), else `None`.
pub fn find_tool(names: &[&str]) -> Option<String> {
    names.iter().find_map(|n| {
        Command::new(n)
            .arg("--version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|_| n.to_string())
    })
}

/// A C++ compiler.
pub fn cxx() -> Option<String> {
    find_tool(&["g++", "c++", "clang++"])
}

/// A C compiler.
pub fn cc() -> Option<String> {
    find_tool(&["gcc", "cc", "clang"])
}

/// A Fortran compiler.
pub fn gfortran() -> Option<String> {
    find_tool(&["gfortran"])
}

/// Runs `cmd`, panicking with its output when it fails.
pub fn check(cmd: &mut Command, what: &str) -> std::process::Output {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        o.status.success(),
        "{what} failed ({:?}):\n{}\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Plans over every kernel family: the model's own choices on four fixtures, and forced ones
/// for the formats and variants the model did not pick.
pub fn plans() -> Vec<(String, SavedPlan)> {
    let mut out = Vec::new();
    let b13 = fixture("bcsstk13");
    out.push((
        "bcsstk13 ssor-ai auto".into(),
        saved("bcsstk13", &b13, ssor(1), true),
    ));
    let p3 = fixture("poisson3d_16");
    out.push((
        "poisson3d_16 ssor-ai factored".into(),
        saved("poisson3d_16", &p3, ssor(1), false),
    ));
    let fem = fixture("fem2d_3000");
    let mut p = saved("fem2d_3000", &fem, PrecondKind::Jacobi, false);
    force(
        &mut p,
        &Forced {
            a: method(SpmvKernel::Ell, fem.nrows(), fem.nnz(), 128),
            pre: vec![],
            update: VectorVariant::Elem,
            update_threads: 128,
            dot3: Dot3Kernel::TwoPass,
            dot_threads: 256,
            loads: Loads::Scalar,
            use_graph: true,
            graph_iters: 4,
        },
    );
    out.push(("fem2d_3000 jacobi ell elem two-pass".into(), p));
    let bus = fixture("1138_bus");
    let mut p = saved("1138_bus", &bus, PrecondKind::None, false);
    force(
        &mut p,
        &Forced {
            a: hyb(&bus, SpmvKernel::CooSegment, 64),
            pre: vec![],
            update: VectorVariant::ElemV2,
            update_threads: 64,
            dot3: Dot3Kernel::LastBlock,
            dot_threads: 64,
            loads: Loads::Double2,
            use_graph: false,
            graph_iters: 1,
        },
    );
    out.push(("1138_bus none hyb elem_v2 no graphs".into(), p));
    let s3 = fixture("s3rmt3m3");
    let mut p = saved("s3rmt3m3", &s3, ssor(2), false);
    let (knnz, ktnnz) = match &Preconditioner::build(&s3, &ssor(2)).unwrap() {
        Preconditioner::SsorFactored { k, kt, .. } => (k.nnz(), kt.nnz()),
        _ => unreachable!(),
    };
    force(
        &mut p,
        &Forced {
            a: method(SpmvKernel::CsrMerge, s3.nrows(), s3.nnz(), 256),
            pre: vec![
                method(SpmvKernel::CooAtomic, s3.nrows(), knnz, 256),
                method(SpmvKernel::CsrScalar, s3.nrows(), ktnnz, 512),
            ],
            update: VectorVariant::Grid,
            update_threads: 512,
            dot3: Dot3Kernel::TwoPass,
            dot_threads: 1024,
            loads: Loads::Scalar,
            use_graph: true,
            graph_iters: 16,
        },
    );
    out.push(("s3rmt3m3 ssor-ai2 merge coo scalar".into(), p));
    let b1 = fixture("bcsstk01");
    let mut p = saved(
        "bcsstk01",
        &b1,
        ssor(1).with_form(SsorForm::Explicit),
        false,
    );
    force(
        &mut p,
        &Forced {
            a: method(SpmvKernel::Dia, b1.nrows(), b1.nnz(), 32),
            pre: vec![method(SpmvKernel::CsrVector(4), b1.nrows(), 0, 32)],
            update: VectorVariant::GridV2,
            update_threads: 32,
            dot3: Dot3Kernel::LastBlock,
            dot_threads: 512,
            loads: Loads::Double2,
            use_graph: true,
            graph_iters: 1,
        },
    );
    // DIA holds 5.9 times the entries of bcsstk01: past the default limit of 3, so the plan
    // raises its own (the limits travel with the plan).
    let mut c = p.choice().clone();
    c.padding.max_fill_ratio = 8.0;
    p.set_choice(c).unwrap();
    out.push(("bcsstk01 ssor-ai explicit dia vector".into(), p));
    out
}
