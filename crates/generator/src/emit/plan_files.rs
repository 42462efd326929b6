//! The two plan-specific files of the emitted solver, generated from a [`SavedPlan`]:
//!
//! - `src/plan.h`: the plan as C preprocessor constants (device, matrix fingerprint,
//!   preconditioner, omega, the format of every operand, padding limits, block sizes, polling
//!   and graph lengths) and the JSON members the emitted command prints;
//! - `src/plan_kernels.cuh`: the chosen kernel files, included, and one launch function per
//!   step with the chosen kernel and its launch configuration as literals.
//!
//! An operand the plan hands to cuSPARSE (`SpmvMethod::Cusparse`) is stored in CSR; plan.h
//! says so and names its `cusparseSpMVAlg_t` (`APG_CUSPARSE_<op>`, `APG_CUSPARSE_ALG_<op>`,
//! and `APG_USES_CUSPARSE` for the whole plan), and its launch function calls
//! `apg_cusparse_spmv` of the driver, which runs `cusparseSpMV` with that algorithm. cuSPARSE
//! calls are host code: they are never written into a kernel file (the files NVRTC compiles).
//!
//! The host driver template (`templates/solver.cu`) includes both and is otherwise the same
//! for every plan.
use std::fmt::Write as _;

use autopcg_catalog::kernels::{
    merge_smem_bytes, MERGE_FIXUP, MERGE_PARTITION, MERGE_SMEM_PER_WARP, MERGE_TILE,
};
use autopcg_catalog::{CusparseAlg, Dot3Kernel};
use autopcg_catalog::{
    LaunchConfig, PrecondKernel, SpmvKernel, SpmvMethod, VectorOp, VectorVariant, DEFAULT_THREADS,
};
use autopcg_solver::gpu::{Dot3Choice, GpuPlanChoice, PrecondChoice, GPU_POLL_GROWTH};

use super::kernels::{AUX_DOT, AUX_XPAY};
use super::{c_string, json_string, EmitError};
use crate::saved::SavedPlan;

/// The operands a plan may store, with their names in the emitted code.
const OPERANDS: [&str; 4] = ["A", "K", "KT", "M"];

/// The SpMV method of each operand the plan stores.
fn operands(choice: &GpuPlanChoice) -> Vec<(&'static str, SpmvMethod)> {
    let mut v = vec![("A", choice.a.method)];
    match &choice.precond {
        PrecondChoice::Factored { k, kt, .. } => {
            v.push(("K", k.method));
            v.push(("KT", kt.method));
        }
        PrecondChoice::Explicit { m } => v.push(("M", m.method)),
        PrecondChoice::None | PrecondChoice::Jacobi(_) => {}
    }
    v
}

/// The `APG_FORMAT_*` constant of the format `m` stores its operand in (CSR for cuSPARSE).
fn format_const(m: &SpmvMethod) -> &'static str {
    match m {
        SpmvMethod::Csr { .. } | SpmvMethod::Cusparse { .. } => "APG_FORMAT_CSR",
        SpmvMethod::Ell { .. } => "APG_FORMAT_ELL",
        SpmvMethod::Dia { .. } => "APG_FORMAT_DIA",
        SpmvMethod::Coo { .. } => "APG_FORMAT_COO",
        SpmvMethod::Hyb { .. } => "APG_FORMAT_HYB",
    }
}

/// True when `m` is the pool's merge-path CSR kernel (it needs a partition workspace).
fn uses_merge(m: &SpmvMethod) -> bool {
    matches!(
        m,
        SpmvMethod::Csr {
            kernel: SpmvKernel::CsrMerge,
            ..
        }
    )
}

/// The `cusparseSpMVAlg_t` enumerator (cusparse.h) of `alg`.
pub fn cusparse_alg_enumerator(alg: CusparseAlg) -> &'static str {
    match alg {
        CusparseAlg::Default => "CUSPARSE_SPMV_ALG_DEFAULT",
        CusparseAlg::CsrAlg1 => "CUSPARSE_SPMV_CSR_ALG1",
        CusparseAlg::CsrAlg2 => "CUSPARSE_SPMV_CSR_ALG2",
    }
}

/// The cuSPARSE algorithm of `m`, or `None` when one of the pool's kernels runs it.
fn cusparse_alg(m: &SpmvMethod) -> Option<CusparseAlg> {
    match *m {
        SpmvMethod::Cusparse { alg } => Some(alg),
        _ => None,
    }
}

/// True when cuSPARSE multiplies at least one operand of `choice`: the emitted solver then
/// includes cusparse.h and links cuSPARSE (and only then).
pub fn uses_cusparse(choice: &GpuPlanChoice) -> bool {
    operands(choice).iter().any(|(_, m)| m.is_cusparse())
}

/// The operands of `choice` that cuSPARSE multiplies, with their algorithms, in the order of
/// [`OPERANDS`] (names as in the emitted code: `A`, `K`, `KT`, `M`).
pub fn cusparse_operands(choice: &GpuPlanChoice) -> Vec<(&'static str, CusparseAlg)> {
    operands(choice)
        .into_iter()
        .filter_map(|(name, m)| cusparse_alg(&m).map(|alg| (name, alg)))
        .collect()
}

/// A C double literal that reads back as exactly `x` (shortest round trip).
fn c_double(x: f64) -> String {
    format!("{x:?}")
}

/// Appends `#define name value` to `h`.
fn def(h: &mut String, name: &str, value: String) {
    let _ = writeln!(h, "#define {name} {value}");
}

/// `src/plan.h`.
pub fn plan_header(plan: &SavedPlan, banner: &str) -> Result<String, EmitError> {
    let c = plan.choice();
    let mut h = String::new();
    let mut out = format!(
        "// plan.h: {banner}\n// The plan as constants. Generated from plan.json: edit the plan \
         and generate again rather than editing this file.\n#ifndef AUTOPCG_GENERATED_PLAN_H\n\
         #define AUTOPCG_GENERATED_PLAN_H\n\n"
    );
    def(&mut h, "APG_FORMAT_CSR", "0".into());
    def(&mut h, "APG_FORMAT_ELL", "1".into());
    def(&mut h, "APG_FORMAT_DIA", "2".into());
    def(&mut h, "APG_FORMAT_COO", "3".into());
    def(&mut h, "APG_FORMAT_HYB", "4".into());
    def(&mut h, "APG_PRECOND_NONE", "0".into());
    def(&mut h, "APG_PRECOND_JACOBI", "1".into());
    def(&mut h, "APG_PRECOND_SSOR_FACTORED", "2".into());
    def(&mut h, "APG_PRECOND_SSOR_EXPLICIT", "3".into());
    h.push('\n');
    let d = &plan.device;
    def(&mut h, "APG_PLAN_DEVICE_NAME", c_string(&d.name));
    def(&mut h, "APG_PLAN_DEVICE_SLUG", c_string(&d.slug));
    def(&mut h, "APG_PLAN_ARCH", d.arch.to_string());
    let m = &plan.matrix;
    def(&mut h, "APG_PLAN_N", format!("{}LL", m.n));
    def(&mut h, "APG_PLAN_NCOLS", format!("{}LL", m.ncols));
    def(&mut h, "APG_PLAN_NNZ", format!("{}LL", m.nnz));
    def(
        &mut h,
        "APG_PLAN_PATTERN_SHA256",
        c_string(&m.pattern_sha256),
    );
    h.push('\n');
    let p = &plan.precond;
    let kind = match c.precond {
        PrecondChoice::None => "APG_PRECOND_NONE",
        PrecondChoice::Jacobi(_) => "APG_PRECOND_JACOBI",
        PrecondChoice::Factored { .. } => "APG_PRECOND_SSOR_FACTORED",
        PrecondChoice::Explicit { .. } => "APG_PRECOND_SSOR_EXPLICIT",
    };
    def(&mut h, "APG_PRECOND", kind.into());
    def(&mut h, "APG_SSOR_ORDER", p.order.unwrap_or(0).to_string());
    def(&mut h, "APG_SSOR_OMEGA", c_double(p.omega.unwrap_or(1.0)));
    def(&mut h, "APG_PRECOND_NAME", c_string(&p.kind));
    def(&mut h, "APG_PRECOND_APPLIED", c_string(&p.applied));
    h.push('\n');
    h.push_str(
        "// Per operand the plan stores: APG_CUSPARSE_<op> is 1 where cuSPARSE's SpMV multiplies \
         it\n// (stored in CSR), with the cusparseSpMVAlg_t APG_CUSPARSE_ALG_<op>; (-1) where a \
         kernel of\n// the plan does. APG_USES_CUSPARSE: whether the solver includes and links \
         cuSPARSE.\n",
    );
    let ops: Vec<(&str, SpmvMethod)> = if plan.is_split() {
        Vec::new()
    } else {
        operands(c)
    };
    if plan.is_split() {
        h.push_str(
            "// A plan split into row blocks: the operands of every block are in plan_kernels.cuh \
             (kApgBlocks).\n",
        );
    }
    for name in OPERANDS {
        if plan.is_split() {
            break;
        }
        let found = ops.iter().find(|(n, _)| *n == name);
        def(
            &mut h,
            &format!("APG_HAS_{name}"),
            u8::from(found.is_some()).to_string(),
        );
        if let Some((_, m)) = found {
            def(&mut h, &format!("APG_FMT_{name}"), format_const(m).into());
            let split = match m {
                SpmvMethod::Hyb { split: Some(s), .. } => format!("{s}LL"),
                _ => "(-1LL)".into(),
            };
            def(&mut h, &format!("APG_HYB_SPLIT_{name}"), split);
            def(
                &mut h,
                &format!("APG_MERGE_{name}"),
                u8::from(uses_merge(m)).to_string(),
            );
            let alg = cusparse_alg(m);
            def(
                &mut h,
                &format!("APG_CUSPARSE_{name}"),
                u8::from(alg.is_some()).to_string(),
            );
            def(
                &mut h,
                &format!("APG_CUSPARSE_ALG_{name}"),
                alg.map_or("(-1)", cusparse_alg_enumerator).into(),
            );
        }
    }
    let blocks_ops: Vec<(&str, SpmvMethod)> = plan
        .blocks
        .iter()
        .flat_map(|b| operands(&b.choice))
        .collect();
    def(
        &mut h,
        "APG_USES_CUSPARSE",
        u8::from(blocks_ops.iter().any(|(_, m)| m.is_cusparse())).to_string(),
    );
    def(
        &mut h,
        "APG_ANY_MERGE",
        u8::from(blocks_ops.iter().any(|(_, m)| uses_merge(m))).to_string(),
    );
    if let Some(b) = plan.blocks.iter().find(|b| b.choice.padding != c.padding) {
        return Err(EmitError::Plan(crate::saved::SavedPlanError::Invalid(
            format!(
                "the block of rows {}..{} converts with other padding limits than block 0: the \
             emitted solver has one set",
                b.rows.0, b.rows.1
            ),
        )));
    }
    def(
        &mut h,
        "APG_PAD_MAX_FILL",
        c_double(c.padding.max_fill_ratio),
    );
    def(
        &mut h,
        "APG_PAD_MAX_BYTES",
        format!("{}ULL", c.padding.max_bytes),
    );
    h.push('\n');
    def(&mut h, "APG_DOT_THREADS", c.dot3.config.threads.to_string());
    // The reduction's partial sums serve the SpMV with the dots too, when the plan fuses them.
    let dot3_blocks = c
        .dot3
        .config
        .blocks
        .max(c.fused_dots.map_or(0, |f| f.blocks));
    def(&mut h, "APG_DOT3_BLOCKS", dot3_blocks.to_string());
    def(&mut h, "APG_AUX_THREADS", DEFAULT_THREADS.to_string());
    def(&mut h, "APG_MERGE_TILE", MERGE_TILE.to_string());
    def(
        &mut h,
        "APG_MERGE_SMEM_PER_WARP",
        MERGE_SMEM_PER_WARP.to_string(),
    );
    def(&mut h, "APG_CHECK_EVERY", plan.check_every.to_string());
    def(&mut h, "APG_POLL_GROWTH", GPU_POLL_GROWTH.to_string());
    def(
        &mut h,
        "APG_PACING_SAFETY",
        format!("{:?}", autopcg_solver::PACING_SAFETY),
    );
    def(&mut h, "APG_NBLOCKS", plan.blocks.len().to_string());
    def(&mut h, "APG_USE_GRAPH", u8::from(c.use_graph).to_string());
    def(&mut h, "APG_GRAPH_ITERS", c.graph_iters.to_string());
    h.push('\n');
    def(
        &mut h,
        "APG_PLAN_JSON_MEMBERS",
        c_string(&json_members(plan)?),
    );
    out.push_str(&h);
    out.push_str("\n#endif // AUTOPCG_GENERATED_PLAN_H\n");
    Ok(out)
}

/// The members of the solve report that come from the plan (`precond`, `omega`,
/// `precond_applied`, `check_every`, `plan`, `model`, `predicted_ms_per_iteration`), as the
/// text between the braces of a JSON object, in the field names of `autopcg solve --json`.
pub fn json_members(plan: &SavedPlan) -> Result<String, EmitError> {
    let mut steps = Vec::new();
    let split = plan.is_split();
    for (i, b) in plan.blocks.iter().enumerate() {
        for s in &b.steps {
            let step = if split {
                format!("block {i} (GPU {}): {}", b.gpu, s.step)
            } else {
                s.step.clone()
            };
            steps.push(format!(
                "{{\"step\":{},\"format\":{},\"kernel\":{},\"config\":{},\"predicted_ms\":{}}}",
                json_string(&step),
                json_string(&s.format),
                json_string(&s.kernel),
                json_string(&s.config),
                json_number(s.predicted_ms)
            ));
        }
    }
    let source = format!("generated solver of {}", plan.source);
    Ok(format!(
        "\"precond\":{},\"omega\":{},\"precond_applied\":{},\"check_every\":{},\
         \"plan\":{{\"steps\":[{}],\"source\":{}}},\"model\":{},\"predicted_ms_per_iteration\":{}",
        json_string(&plan.precond.kind),
        json_number(plan.precond.omega),
        json_string(&plan.precond.applied),
        plan.check_every,
        steps.join(","),
        json_string(&source),
        plan.model
            .as_ref()
            .map_or_else(|| "null".to_string(), |m| json_string(&m.file)),
        json_number(plan.predicted_ms_per_iteration),
    ))
}

/// A JSON number of `x`, `null` when absent or not finite.
fn json_number(x: Option<f64>) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:?}"),
        _ => "null".into(),
    }
}

/// `<<<blocks, threads, smem, st>>>`.
fn launch(cfg: LaunchConfig, smem: u32) -> String {
    format!("<<<{}u, {}u, {smem}u, st>>>", cfg.blocks, cfg.threads)
}

/// The launch of a vector update of `variant` over the `n` (a C expression) elements the
/// solver holds: the plan's blocks for a grid-stride variant; for a variant of one work item
/// per thread, the blocks that cover `n` at the plan's threads, counted at run time (the plan's
/// count covers the plan's matrix; a matrix run with the fingerprint check forced may be
/// longer).
fn update_launch(variant: VectorVariant, cfg: LaunchConfig, n: &str) -> String {
    if variant.is_grid_stride() {
        return launch(cfg, 0);
    }
    let per = u64::from(cfg.threads) * variant.elements_per_load();
    format!(
        "<<<(uint32_t)(((uint64_t)({n}) + {}u) / {per}u), {}u, 0u, st>>>",
        per - 1,
        cfg.threads
    )
}

/// The body of `y = B x` for the operand `m` (an `ApgOperand`) with `method`. For cuSPARSE it
/// is a call of the driver's `apg_cusparse_spmv` (templates/solver.cu): `cusparseSpMV` with the
/// plan's algorithm on the stream `st` (alpha 1, beta 0, f64, not transposed), over the
/// descriptors and the preprocessed buffer made when the operand was placed.
fn spmv_body(method: &SpmvMethod) -> String {
    match *method {
        SpmvMethod::Cusparse { alg } => format!(
            "    apg_cusparse_spmv(m, {}, x, y, st);\n",
            cusparse_alg_enumerator(alg)
        ),
        SpmvMethod::Csr { kernel, config } if kernel == SpmvKernel::CsrMerge => format!(
            "    {kernel}{l}(m.nrows, m.nnz, m.indptr, m.indices, m.vals, x, y, m.tile_rows, \
             m.carry_rows, m.carry_vals);\n    \
             {MERGE_FIXUP}<<<m.fix_blocks, {DEFAULT_THREADS}u, 0u, st>>>(m.nrows, m.ntiles, \
             m.carry_rows, m.carry_vals, y);\n",
            l = launch(config, merge_smem_bytes(config.threads)),
        ),
        SpmvMethod::Csr { kernel, config } => format!(
            "    {kernel}{}(m.nrows, m.indptr, m.indices, m.vals, x, y);\n",
            launch(config, 0)
        ),
        SpmvMethod::Ell { config } => format!(
            "    {}{}(m.nrows, m.ell_width, m.ell_cols, m.ell_vals, x, y);\n",
            SpmvKernel::Ell,
            launch(config, 0)
        ),
        SpmvMethod::Dia { config } => format!(
            "    {}{}(m.nrows, m.ncols, m.ndiag, m.dia_offsets, m.dia_data, x, y);\n",
            SpmvKernel::Dia,
            launch(config, 0)
        ),
        SpmvMethod::Coo { kernel, config } => format!(
            "    APG_LAUNCH(cudaMemsetAsync(y, 0, sizeof(double) * (size_t)m.nrows, st));\n    \
             if (m.coo_nnz == 0) return;\n    \
             {kernel}{}(m.coo_nnz, m.coo_rows, m.coo_cols, m.coo_vals, x, y);\n",
            launch(config, 0)
        ),
        SpmvMethod::Hyb {
            ell_config,
            coo_kernel,
            coo_config,
            ..
        } => format!(
            "    {}{}(m.nrows, m.ell_width, m.ell_cols, m.ell_vals, x, y);\n    \
             if (m.coo_nnz == 0) return;\n    \
             {coo_kernel}{}(m.coo_nnz, m.coo_rows, m.coo_cols, m.coo_vals, x, y);\n",
            SpmvKernel::Ell,
            launch(ell_config, 0),
            launch(coo_config, 0)
        ),
    }
}

/// The body of `apg_spmv_dots_next`, A's product and the three dots of an iteration: A's SpMV
/// then the reduction, or the one launch of the SpMV's variant with the dots in its epilogue
/// when the plan fuses them ([`GpuPlanChoice::fused_dots`]).
fn spmv_dots_body(c: &GpuPlanChoice) -> String {
    let fused = c
        .fused_dots
        .and_then(|cfg| Some((c.a.method.dot3_variant()?, cfg)));
    let Some(((kernel, _), cfg)) = fused else {
        return "    apg_spmv_A(S.A, APG_U, S.w, st);\n    apg_dot3_next(S, st);\n".to_string();
    };
    let entry = kernel.dot3_entry_point().unwrap_or_default();
    let matrix = match kernel {
        SpmvKernel::Ell => "m.nrows, m.ell_width, m.ell_cols, m.ell_vals",
        SpmvKernel::Dia => "m.nrows, m.ndiag, m.dia_offsets, m.dia_data",
        _ => "m.nrows, m.indptr, m.indices, m.vals",
    };
    format!(
        "    const ApgOperand &m = S.A;\n    {entry}{}({matrix}, APG_U, S.w, S.r, S.dot3_partial, \
         S.dot3_counter, S.scalars, S.history, S.hist_cap);\n",
        launch(cfg, 0)
    )
}

/// The body of the fused three-dot reduction `d`: the start's (the iteration given) or the
/// next iterations' (read from the scalars).
fn dot3_body(d: &Dot3Choice, next: bool) -> String {
    let cfg = d.config;
    let t = cfg.threads;
    let names = if next {
        d.kernel.next_entry_points()
    } else {
        d.kernel.entry_points()
    };
    let iteration = if next { "" } else { ", 0u" };
    match d.kernel {
        Dot3Kernel::LastBlock => format!(
            "    {}{}(S.n, S.r, APG_U, S.w, S.dot3_partial, S.dot3_counter, S.scalars, S.history, \
             S.hist_cap{iteration});\n",
            names[0],
            launch(cfg, 0)
        ),
        Dot3Kernel::TwoPass => format!(
            "    {}{}(S.n, S.r, APG_U, S.w, S.dot3_partial);\n    \
             {}<<<1u, {t}u, 0u, st>>>({}u, S.dot3_partial, S.scalars, S.history, \
             S.hist_cap{iteration});\n",
            names[0],
            launch(cfg, 0),
            names[1],
            cfg.blocks
        ),
    }
}

/// The comment line above a step's launch function: what it does, the kernel, its launch and
/// the model's prediction when there is one.
fn step_comment(what: &str, kernel: &str, cfg: &str, predicted: Option<f64>) -> String {
    let p = predicted
        .map(|p| format!(", predicted {p:.4} ms"))
        .unwrap_or_default();
    format!("// {what}: {kernel}, {cfg}{p}\n")
}

/// `src/plan_kernels.cuh`.
pub fn plan_kernels(
    plan: &SavedPlan,
    kernel_files: &[String],
    banner: &str,
) -> Result<String, EmitError> {
    if plan.is_split() {
        return plan_kernels_blocks(plan, kernel_files, banner);
    }
    let c = plan.choice();
    let mut s = format!(
        "// plan_kernels.cuh: {banner}\n// The kernels of this plan and one launch function per \
         step, kernels and launch configurations\n// as the plan chose them. Included once, by \
         solver.cu (it needs the ApgSolver and ApgOperand types).\n\n"
    );
    for f in kernel_files {
        let _ = writeln!(s, "#include \"../kernels/{f}\"");
    }
    s.push('\n');
    if uses_cusparse(c) {
        s.push_str(
            "// cuSPARSE multiplies the operands whose SpMV says so, through apg_cusparse_spmv \
             (solver.cu):\n// the library chooses and launches its own kernels.\n\n",
        );
    }
    for (name, m) in operands(c) {
        s.push_str(&spmv_function(name, &m));
    }
    for name in OPERANDS {
        if !operands(c).iter().any(|(n, _)| *n == name) {
            let _ = write!(
                s,
                "// {name} is not stored by this plan.\n[[maybe_unused]] static void apg_spmv_{name}(const \
                 ApgOperand &, const double *, double *, cudaStream_t) {{}}\n\n"
            );
        }
    }
    let n = "S.n";
    let precond = match &c.precond {
        PrecondChoice::None => {
            "    APG_LAUNCH(cudaMemcpyAsync(u, r, sizeof(double) * (size_t)S.n, \
             cudaMemcpyDeviceToDevice, st));\n"
                .to_string()
        }
        PrecondChoice::Jacobi(e) => format!(
            "    {}{}({n}, S.inv_diag, r, u);\n",
            PrecondKernel::Jacobi(e.loads),
            launch(e.config, 0)
        ),
        // K^T is stored with its columns scaled (K^T diag(s)): two products, no scaling pass.
        PrecondChoice::Factored { .. } => {
            "    apg_spmv_K(S.K, r, S.t, st);\n    apg_spmv_KT(S.KT, S.t, u, st);\n".to_string()
        }
        PrecondChoice::Explicit { .. } => "    apg_spmv_M(S.M, r, u, st);\n".to_string(),
    };
    let steps = &plan.block().steps;
    let step_of = |name: &str| steps.iter().find(|st| st.step.starts_with(name));
    if let Some(st) = step_of("precond") {
        s.push_str(&step_comment(
            "preconditioner",
            &st.kernel,
            &st.config,
            st.predicted_ms,
        ));
    }
    // Without a preconditioner u is r (no copy: the update, the SpMV and the dots read r);
    // Jacobi is fused into the update, which writes the next u. Both apply the preconditioner
    // from r only at the start (and at a residual replacement), as the GPU backend does.
    let op = c.update_op();
    let (precond_iter, u_ptr) = match op {
        VectorOp::CgUpdateNoPre => ("", "S.r"),
        VectorOp::CgUpdateJacobi => ("", "S.u"),
        _ => (precond.as_str(), "S.u"),
    };
    let precond_start = if op == VectorOp::CgUpdateNoPre {
        ""
    } else {
        precond.as_str()
    };
    let _ = write!(
        s,
        "// u: r itself without a preconditioner.\n#define APG_U {u_ptr}\n\n\
         // u = M^-1 r from r (the start, a residual replacement).\n\
         [[maybe_unused]] static void apg_precond_start(ApgSolver &S, const double *r, double *u, \
         cudaStream_t st) {{\n{precond_start}}}\n\n\
         // The preconditioner step of an iteration (empty where the update makes u).\n\
         [[maybe_unused]] static void apg_precond(ApgSolver &S, const double *r, double *u, \
         cudaStream_t st) {{\n{precond_iter}}}\n\n"
    );
    let u = c.update;
    let update_kernel = op.kernel(u.variant);
    s.push_str(&step_comment(
        "fused update",
        &update_kernel.to_string(),
        &u.config.words(),
        u.predicted_ms,
    ));
    let update_args = match op {
        VectorOp::CgUpdateNoPre => "S.w, S.p, S.s, S.x, S.r",
        VectorOp::CgUpdateJacobi => "S.inv_diag, S.u, S.w, S.p, S.s, S.x, S.r",
        _ => "S.u, S.w, S.p, S.s, S.x, S.r",
    };
    let _ = write!(
        s,
        "static void apg_update(ApgSolver &S, cudaStream_t st) {{\n    {update_kernel}{}(S.n, \
         S.scalars, {update_args});\n}}\n\n",
        update_launch(u.variant, u.config, "S.n")
    );
    s.push_str(&step_comment(
        "three dots and the recurrence",
        &c.dot3.kernel.to_string(),
        &c.dot3.config.words(),
        c.dot3.predicted_ms,
    ));
    let _ = write!(
        s,
        "static void apg_dot3_start(ApgSolver &S, cudaStream_t st) {{\n{}}}\n\n\
         [[maybe_unused]] static void apg_dot3_next(ApgSolver &S, cudaStream_t st) {{\n{}}}\n\n",
        dot3_body(&c.dot3, false),
        dot3_body(&c.dot3, true)
    );
    let spmv_dots = match (c.fused_dots, c.a.method.dot3_variant()) {
        (Some(cfg), Some((k, _))) => step_comment(
            "A's SpMV with the three dots and the recurrence in its epilogue",
            k.dot3_entry_point().unwrap_or_default(),
            &cfg.words(),
            None,
        ),
        _ => "// A's SpMV, then the three dots and the recurrence.\n".to_string(),
    };
    let _ = write!(
        s,
        "{spmv_dots}static void apg_spmv_dots_next(ApgSolver &S, cudaStream_t st) {{\n{}}}\n\n",
        spmv_dots_body(c)
    );
    let _ = write!(
        s,
        "// The start and the residual checks: y = b - y ({xpay}) and one dot product \
         ({dot}),\n// {aux} threads and BLOCK_SIZE threads per block, one wave of blocks on the \
         device.\nstatic void apg_b_minus(ApgSolver &S, double *y, cudaStream_t st) {{\n    \
         xpay_{xs}<<<S.aux_xpay_blocks, {aux}u, 0u, st>>>(S.n, -1.0, S.b, y);\n}}\n\n\
         static void apg_dot(ApgSolver &S, const double *x, const double *y, cudaStream_t st) \
         {{\n    {dot}<<<S.aux_dot_blocks, {bs}u, 0u, st>>>(S.n, x, y, S.dot_partial, \
         S.dot_counter, S.dot_out);\n}}\n\n",
        xpay = format_args!("xpay_{}", AUX_XPAY.suffix()),
        xs = AUX_XPAY.suffix(),
        dot = AUX_DOT,
        aux = DEFAULT_THREADS,
        bs = c.dot3.config.threads,
    );
    s.push_str(&preload_function(plan));
    let any_merge = operands(c).iter().any(|(_, m)| uses_merge(m));
    s.push_str(&merge_partition_function(any_merge));
    Ok(s)
}

/// The preface of `plan_kernels.cuh`: what it is, and the kernel files it includes.
fn kernels_preface(kernel_files: &[String], banner: &str, what: &str) -> String {
    let mut s = format!(
        "// plan_kernels.cuh: {banner}\n// The kernels of this plan and {what}, kernels and launch \
         configurations as the plan chose them.\n// Included once, by solver.cu.\n\n"
    );
    for f in kernel_files {
        let _ = writeln!(s, "#include \"../kernels/{f}\"");
    }
    s.push('\n');
    s
}

/// The launch function `apg_spmv_<name>` of an operand multiplied with `m`, with its comment.
fn spmv_function(name: &str, m: &SpmvMethod) -> String {
    let (kernel, cfg) = match cusparse_alg(m) {
        Some(alg) => (
            format!(
                "cuSPARSE's cusparseSpMV with {} ({})",
                cusparse_alg_enumerator(alg),
                m.kernel_name()
            ),
            "CSR, launched by cuSPARSE".to_string(),
        ),
        None => (m.kernel_name(), m.config_text()),
    };
    format!(
        "{}static void apg_spmv_{name}(const ApgOperand &m, const double *x, double *y, \
         cudaStream_t st) {{\n    if (m.nrows == 0) return;\n{}}}\n\n",
        step_comment(&format!("SpMV with {name}"), &kernel, &cfg, None),
        spmv_body(m)
    )
}

/// `src/plan_kernels.cuh` of a plan split into row blocks: per block (namespace `apg_b<i>`)
/// the launch functions of its operands' products, its preconditioner, its update (u in its
/// own vector), its halo part's multiply and its three dots into its slot; the table
/// `kApgBlocks` of every block's rows, GPU, operand formats and functions; and the functions
/// every block shares (pack, sum of the slots with the recurrence, the start's and the
/// residual checks' update and dot, the kernels' preload).
fn plan_kernels_blocks(
    plan: &SavedPlan,
    kernel_files: &[String],
    banner: &str,
) -> Result<String, EmitError> {
    let mut s = kernels_preface(
        kernel_files,
        banner,
        "per row block one launch function per step (namespace apg_b<block>)",
    );
    let threads = plan.choice().dot3.config.threads;
    let mut table = String::new();
    for (i, b) in plan.blocks.iter().enumerate() {
        let c = &b.choice;
        let _ = writeln!(
            s,
            "// ------------------------------------------------ block {i}: rows {}..{} on GPU {}\n\
             namespace apg_b{i} {{\n",
            b.rows.0, b.rows.1, b.gpu
        );
        let ops = operands(c);
        for (name, m) in &ops {
            s.push_str(&spmv_function(name, m));
        }
        let precond = match &c.precond {
            PrecondChoice::None => "    APG_LAUNCH(cudaMemcpyAsync(u, r, sizeof(double) * \
                                    (size_t)S.n, cudaMemcpyDeviceToDevice, st));\n"
                .to_string(),
            PrecondChoice::Jacobi(e) => format!(
                "    {}{}(S.n, S.inv_diag, r, u);\n",
                PrecondKernel::Jacobi(e.loads),
                launch(e.config, 0)
            ),
            PrecondChoice::Factored { .. } => {
                "    apg_spmv_K(S.K, r, S.t, st);\n    apg_spmv_KT(S.KT, S.t, u, st);\n".into()
            }
            PrecondChoice::Explicit { .. } => "    apg_spmv_M(S.M, r, u, st);\n".into(),
        };
        let _ = write!(
            s,
            "// u = M^-1 r ({}).\nstatic void apg_precond(ApgBlock &S, const double *r, double *u, \
             cudaStream_t st) {{\n{precond}}}\n\n",
            c.precond.kind_name()
        );
        let update = VectorOp::CgUpdate.kernel(c.update.variant);
        s.push_str(&step_comment(
            "fused update (u in its own vector)",
            &update.to_string(),
            &c.update.config.words(),
            c.update.predicted_ms,
        ));
        let _ = write!(
            s,
            "static void apg_update(ApgBlock &S, cudaStream_t st) {{\n    {update}{}(S.n, \
             S.scalars, S.u, S.w, S.p, S.s, S.x, S.r);\n}}\n\n",
            update_launch(c.update.variant, c.update.config, "S.n")
        );
        let halo = b.halo.ok_or_else(|| {
            EmitError::Plan(crate::saved::SavedPlanError::Invalid(format!(
                "block {i} has no multiply for its halo part"
            )))
        })?;
        let halo_entry = halo.entry_point().ok_or_else(|| {
            EmitError::Plan(crate::saved::SavedPlanError::Invalid(format!(
                "block {i}: {} has no add variant for the halo part",
                halo.kernel
            )))
        })?;
        s.push_str(&step_comment(
            "halo part, added: y += H h",
            halo_entry,
            &halo.config.words(),
            None,
        ));
        let _ = write!(
            s,
            "static void apg_halo_add(const ApgOperand &m, const double *x, double *y, \
             cudaStream_t st) {{\n    if (m.nrows == 0 || m.nnz == 0) return;\n    \
             {halo_entry}{}(m.nrows, m.indptr, m.indices, m.vals, x, y);\n}}\n\n",
            launch(halo.config, 0)
        );
        let d = c.dot3.config;
        s.push_str(&step_comment(
            "the block's three dots into its slot",
            "dot3_slot",
            &d.words(),
            None,
        ));
        let _ = write!(
            s,
            "static void apg_dot3_slot(ApgBlock &S, double *slots, uint32_t slot, cudaStream_t \
             st) {{\n    ::dot3_slot{}(S.n, S.r, S.u, S.w, S.dot3_partial, S.dot3_counter, slots, \
             slot);\n}}\n\n}} // namespace apg_b{i}\n\n",
            launch(d, 0)
        );
        // The table row.
        let mut fmt = Vec::new();
        let mut split = Vec::new();
        let mut merge = Vec::new();
        let mut alg = Vec::new();
        let mut fns = Vec::new();
        for name in OPERANDS {
            match ops.iter().find(|(n, _)| *n == name) {
                Some((_, m)) => {
                    fmt.push(format_const(m).to_string());
                    split.push(match m {
                        SpmvMethod::Hyb { split: Some(v), .. } => format!("{v}LL"),
                        _ => "-1LL".into(),
                    });
                    merge.push(u8::from(uses_merge(m)).to_string());
                    alg.push(
                        cusparse_alg(m)
                            .map_or("-1", cusparse_alg_enumerator)
                            .to_string(),
                    );
                    fns.push(format!("&apg_b{i}::apg_spmv_{name}"));
                }
                None => {
                    fmt.push("-1".into());
                    split.push("-1LL".into());
                    merge.push("0".into());
                    alg.push("-1".into());
                    fns.push("nullptr".into());
                }
            }
        }
        let kind = match c.precond {
            PrecondChoice::None => "APG_PRECOND_NONE",
            PrecondChoice::Jacobi(_) => "APG_PRECOND_JACOBI",
            PrecondChoice::Factored { .. } => "APG_PRECOND_SSOR_FACTORED",
            PrecondChoice::Explicit { .. } => "APG_PRECOND_SSOR_EXPLICIT",
        };
        let _ = writeln!(
            table,
            "    {{{}ULL, {}ULL, {}, {kind}, {{{}}}, {{{}}}, {{{}}}, {{(int){}}}, {}u, {{{}}}, \
             &apg_b{i}::apg_precond, &apg_b{i}::apg_update, &apg_b{i}::apg_halo_add, \
             &apg_b{i}::apg_dot3_slot}},",
            b.rows.0,
            b.rows.1,
            b.gpu,
            fmt.join(", "),
            split.join(", "),
            merge.join(", "),
            alg.join(", (int)"),
            d.blocks,
            fns.join(", ")
        );
    }
    let _ = write!(
        s,
        "// Every block: rows, GPU, preconditioner, the format, HYB split, merge workspace and \
         cuSPARSE\n// algorithm of A, K, K^T and M (format -1: not stored), the grid of its \
         three-dot reduction,\n// and its launch functions.\nstatic const ApgBlockPlan \
         kApgBlocks[APG_NBLOCKS] = {{\n{table}}};\n\n"
    );
    let _ = write!(
        s,
        "// The pack of a block's send buffer: out[k] = src[idx[k]] (256 threads per block, \
         grid-stride).\nstatic void apg_gather(uint32_t n, const uint32_t *idx, const double \
         *src, double *out, uint32_t blocks,\n                       cudaStream_t st) {{\n    \
         if (n == 0) return;\n    gather_f64<<<blocks, 256u, 0u, st>>>(n, idx, src, out);\n}}\n\n\
         // The sum of the m blocks' slots in block order and the recurrence for `iteration` \
         (start)\n// or the next one (one block of {threads} threads).\nstatic void \
         apg_slots_advance(uint32_t m, const double *slots, double *scalars, double *history,\n  \
         uint32_t cap, bool start, uint32_t iteration, cudaStream_t st) {{\n    if (start) {{\n  \
               dot3_slots_advance<<<1u, {threads}u, 0u, st>>>(m, slots, scalars, history, cap, \
         iteration);\n    }} else {{\n        dot3_slots_advance_next<<<1u, {threads}u, 0u, \
         st>>>(m, slots, scalars, history, cap);\n    }}\n}}\n\n"
    );
    let _ = write!(
        s,
        "// The start and the residual checks: y = b - y ({xpay}) and one dot product ({dot}),\n\
         // {aux} and {threads} threads per block, one wave of blocks on the device.\n\
         static void apg_b_minus(ApgBlock &S, double *y, cudaStream_t st) {{\n    \
         xpay_{xs}<<<S.aux_xpay_blocks, {aux}u, 0u, st>>>(S.n, -1.0, S.b, y);\n}}\n\n\
         static void apg_dot(ApgBlock &S, const double *x, const double *y, cudaStream_t st) \
         {{\n    {dot}<<<S.aux_dot_blocks, {threads}u, 0u, st>>>(S.n, x, y, S.dot_partial, \
         S.dot_counter, S.dot_out);\n}}\n\n",
        xpay = format_args!("xpay_{}", AUX_XPAY.suffix()),
        xs = AUX_XPAY.suffix(),
        dot = AUX_DOT,
        aux = DEFAULT_THREADS,
    );
    s.push_str(&preload_function(plan));
    let any_merge = plan
        .blocks
        .iter()
        .any(|b| operands(&b.choice).iter().any(|(_, m)| uses_merge(m)));
    s.push_str(&merge_partition_function(any_merge));
    Ok(s)
}

/// `apg_preload`: loads every kernel of `plan` on the current device (the runtime loads
/// modules lazily otherwise, inside the first solve's time).
fn preload_function(plan: &SavedPlan) -> String {
    let mut preload = String::new();
    for entries in super::kernels::plan_entry_points(plan).values() {
        for e in entries {
            let _ = writeln!(
                preload,
                "    APG_CUDA(cudaFuncGetAttributes(&attr, (const void *){e}));"
            );
        }
    }
    format!(
        "// Loads every kernel of the plan on the current device (the runtime loads modules \
         lazily otherwise).\nstatic void apg_preload() {{\n    cudaFuncAttributes attr;\n{preload}}}\n\n"
    )
}

/// `apg_merge_partition`: the merge-path partition of a CSR operand, or an empty function when
/// no operand uses the merge kernel.
fn merge_partition_function(any_merge: bool) -> String {
    if any_merge {
        format!(
            "// The merge-path partition of a CSR operand (once per pattern).\nstatic void \
             apg_merge_partition(ApgOperand &m, uint32_t blocks, cudaStream_t st) {{\n    \
             {MERGE_PARTITION}<<<blocks, {DEFAULT_THREADS}u, 0u, st>>>(m.nrows, m.nnz, m.indptr, \
             m.ntiles, m.tile_rows);\n}}\n"
        )
    } else {
        "// No operand of this plan uses the merge-path kernel.\n[[maybe_unused]] static void \
         apg_merge_partition(ApgOperand &, uint32_t, cudaStream_t) {}\n"
            .to_string()
    }
}
