//! Saved plans and the emitted solver, without a GPU:
//! - plan.json round-trips (serialise, parse, equal) and rebuilds the same plan (preconditioner
//!   bit for bit, the same steps);
//! - a plan for another matrix or another device is refused, `force` overrides the
//!   fingerprint, foreign and other-schema files are clear errors;
//! - the emitted kernel files compile with NVRTC and export exactly the plan's entry points
//!   (reported ignored when NVRTC cannot be loaded; failed with AUTOPCG_REQUIRE_GPU=1);
//! - the emitted C, C++ and Fortran host files pass the compilers' syntax checks (each
//!   reported ignored when its compiler is missing; failed with AUTOPCG_REQUIRE_TOOLS=1);
//! - the host-side preconditioner and format conversions of the emitted solver
//!   (host_build.hpp) produce the same bits as the Rust code they mirror;
//! - a plan that hands SpMV steps to cuSPARSE says so in plan.h, its launch functions call
//!   the driver's cuSPARSE product (not a kernel), CMake links cuSPARSE, and no kernel file
//!   (what NVRTC compiles) holds cuSPARSE; a plan without cuSPARSE neither includes nor links
//!   it;
//! - with nvcc and CMake, the emitted solvers of a plan with cuSPARSE and of one without build
//!   (linking cuSPARSE for the first only) and, where a CUDA device is present, solve their
//!   matrix (reported ignored without nvcc and CMake; failed with AUTOPCG_REQUIRE_TOOLS=1).
mod common;
#[path = "support/cusparse_plans.rs"]
mod cusparse_plans;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use autopcg_generator::emit::{self, kernels, plan_files, FileKind};
use autopcg_generator::model_device_props;
use autopcg_generator::saved::{SavedPlan, SavedPlanError, PLAN_SCHEMA};
use autopcg_solver::{PrecondKind, Preconditioner, SsorForm};
use autopcg_sparse::{CooMatrix, CsrMatrix, DiaMatrix, EllMatrix, HybMatrix, PaddingLimits};
use common::harness::{self, Case};
use common::*;
use cusparse_plans::cusparse_plans;

fn main() -> std::process::ExitCode {
    harness::run(vec![
        Case::cpu(
            "plan_json_round_trips_and_rebuilds_the_same_plan",
            plan_json_round_trips_and_rebuilds_the_same_plan,
        ),
        Case::cpu(
            "mismatches_are_refused_and_force_overrides_the_fingerprint",
            mismatches_are_refused_and_force_overrides_the_fingerprint,
        ),
        Case::cpu(
            "split_plans_are_checked_and_share_one_reduction_block_size",
            split_plans_are_checked_and_share_one_reduction_block_size,
        ),
        Case::cpu(
            "emission_holds_exactly_the_plans_kernels_and_fills_every_template",
            emission_holds_exactly_the_plans_kernels_and_fills_every_template,
        ),
        Case::cpu(
            "cusparse_steps_call_cusparse_and_only_their_plans_link_it",
            cusparse_steps_call_cusparse_and_only_their_plans_link_it,
        ),
        Case::nvrtc(
            "emitted_kernels_compile_with_nvrtc",
            emitted_kernels_compile_with_nvrtc,
        ),
        Case::tool(
            "emitted_solvers_build_with_cmake_and_nvcc",
            "nvcc and cmake (the CUDA toolkit)",
            nvcc_with_cmake,
            emitted_solvers_build_with_cmake_and_nvcc,
        ),
        Case::tool(
            "emitted_cpp_files_pass_the_syntax_check",
            "C++ compiler (g++, c++ or clang++)",
            cxx,
            emitted_cpp_files_pass_the_syntax_check,
        ),
        Case::tool(
            "emitted_c_header_passes_the_syntax_check",
            "C compiler (gcc, cc or clang)",
            cc,
            emitted_c_header_passes_the_syntax_check,
        ),
        Case::tool(
            "emitted_fortran_module_passes_the_syntax_check",
            "Fortran compiler (gfortran)",
            gfortran,
            emitted_fortran_module_passes_the_syntax_check,
        ),
        Case::tool(
            "host_build_matches_the_rust_preconditioners_and_conversions_bit_for_bit",
            "C++ compiler (g++, c++ or clang++)",
            cxx,
            host_build_matches_the_rust_preconditioners_and_conversions_bit_for_bit,
        ),
    ])
}

/// [`plans`], the plans with cuSPARSE steps, and [`split_plans`].
fn all_plans() -> Vec<(String, SavedPlan)> {
    let mut v = plans();
    v.extend(cusparse_plans());
    v.extend(split_plans());
    v
}

/// Plans split into row blocks, as `generate --gpus N` makes them.
fn split_plans() -> Vec<(String, SavedPlan)> {
    let b13 = fixture("bcsstk13");
    let p3 = fixture("poisson3d_16");
    vec![
        (
            "bcsstk13 ssor-ai on 2 blocks".into(),
            saved_split("bcsstk13", &b13, ssor(1), 2),
        ),
        (
            "poisson3d_16 jacobi on 3 blocks".into(),
            saved_split("poisson3d_16", &p3, PrecondKind::Jacobi, 3),
        ),
    ]
}

fn plan_json_round_trips_and_rebuilds_the_same_plan() {
    let b13 = fixture("bcsstk13");
    for (name, p) in all_plans() {
        let text = p.to_json().unwrap();
        let back = SavedPlan::parse(&text, Path::new("plan.json")).unwrap();
        assert_eq!(back, p, "{name}");
        assert_eq!(back.schema, PLAN_SCHEMA);
        assert_eq!(back.to_json().unwrap(), text, "{name}: not a fixed point");
    }
    // The saved plan turns back into the plan it came from: the same steps and the same
    // preconditioner, bit for bit, without choosing again.
    let p = saved("bcsstk13", &b13, ssor(1), true);
    let props = model_device_props(&h200());
    let sp = p.to_solve_plan(&b13, &props, false, "plan.json").unwrap();
    assert_eq!(sp.gpu.as_ref(), Some(p.choice()));
    assert_eq!(sp.check_every, p.check_every);
    assert!(sp.explain.is_empty());
    let mut req = autopcg_generator::PlanRequest::new(
        &b13,
        ssor(1),
        autopcg_generator::Target::Gpu(props.clone()),
    );
    let model = h200();
    req.ssor_form_auto = true;
    req.model = Some(autopcg_generator::ModelRef {
        file: &model,
        label: "m",
    });
    let fresh = autopcg_generator::plan(&req).unwrap();
    assert_eq!(sp.preconditioner, fresh.preconditioner);
    assert_eq!(p.precond.applied, "ssor-ai-explicit");
    // The automatic omega asked for is recorded as the value it resolved to, and the plan's
    // kind is the fresh plan's (omega and the form the model chose).
    assert_eq!(p.precond.omega, Some(omega_of(&b13)));
    assert_eq!(sp.kind, fresh.kind);
    assert_eq!(sp.kind.omega(), Some(omega_of(&b13)));
    assert_eq!(sp.kind, sp.kind.resolved_for(&b13));
    assert_eq!(
        p.matrix.pattern_sha256,
        autopcg_generator::saved::pattern_sha256(&b13)
    );
    assert_eq!(p.model.as_ref().map(|m| m.sha256.len()), Some(64));
}

fn mismatches_are_refused_and_force_overrides_the_fingerprint() {
    let b13 = fixture("bcsstk13");
    let p = saved("bcsstk13", &b13, ssor(1), true);
    let props = model_device_props(&h200());
    let other = fixture("bcsstk01");
    let e = p
        .to_solve_plan(&other, &props, false, "plan.json")
        .unwrap_err();
    assert!(
        matches!(e, SavedPlanError::Fingerprint { what: "rows", .. }),
        "{e}"
    );
    // Same shape and nonzero count, another pattern: the hash tells them apart.
    let mut swapped = b13.clone();
    swapped = permute_last_two_rows_and_columns(&swapped);
    if swapped.nnz() == b13.nnz()
        && autopcg_generator::saved::pattern_sha256(&swapped) != p.matrix.pattern_sha256
    {
        let e = p.check_matrix(&swapped, false).unwrap_err();
        assert!(e.to_string().contains("sparsity patterns differ"), "{e}");
    }
    // Forced: the fingerprint is only a note; the plan then fails where it cannot run.
    let note = p.check_matrix(&other, true).unwrap();
    assert!(note.is_some_and(|n| n.contains("forced")));
    // Another device.
    let mut h100 = props.clone();
    h100.name = "NVIDIA H100 80GB HBM3".into();
    let e = p.to_solve_plan(&b13, &h100, true, "plan.json").unwrap_err();
    assert!(
        e.to_string()
            .contains("the plan is for NVIDIA H200 (sm_90) but this device is NVIDIA H100"),
        "{e}"
    );
    // The same GPU under a board name with the same slug is the plan's device.
    let mut nvl = props.clone();
    nvl.name = "NVIDIA H200 NVL".into();
    p.check_device(&nvl).unwrap();
    let mut a100 = props;
    a100.compute_capability = (8, 0);
    assert!(p.check_device(&a100).is_err());

    // Files that are not plans of this schema.
    let text = p.to_json().unwrap();
    let e = SavedPlan::parse(
        &text.replacen("\"schema\": 1", "\"schema\": 99", 1),
        Path::new("x.json"),
    )
    .unwrap_err();
    assert!(matches!(e, SavedPlanError::Schema { found: 99, .. }), "{e}");
    let e = SavedPlan::parse("{\"schema\": 1}", Path::new("m.json")).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("m.json line 1: not an autopcg plan"),
        "{e}"
    );
    let e = SavedPlan::parse(
        &text.replacen("\"check_every\": 16", "\"check_every\": 0", 1),
        Path::new("p.json"),
    )
    .unwrap_err();
    assert!(e.to_string().contains("check_every"), "{e}");
    let e = SavedPlan::parse(
        &text.replacen("\"n\": 2003", "\"n\": \"x\"", 1),
        Path::new("p.json"),
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("p.json line "), "{e}");
}

/// `a` with its last two rows and columns swapped (same n and nnz, usually another pattern).
fn permute_last_two_rows_and_columns(a: &CsrMatrix) -> CsrMatrix {
    let n = a.nrows();
    let perm = |i: usize| match i {
        i if i == n - 1 => n - 2,
        i if i == n - 2 => n - 1,
        i => i,
    };
    let (mut r, mut c, mut v) = (vec![], vec![], vec![]);
    for i in 0..n {
        let (cols, vals) = a.row(i);
        for (&j, &x) in cols.iter().zip(vals) {
            r.push(perm(i) as u32);
            c.push(perm(j as usize) as u32);
            v.push(x);
        }
    }
    CsrMatrix::from_triplets(n, n, &r, &c, &v).unwrap()
}

fn emission_holds_exactly_the_plans_kernels_and_fills_every_template() {
    for (name, p) in all_plans() {
        let files = emit::emit(&p).unwrap();
        let want = kernels::plan_entry_points(&p);
        let mut seen = 0;
        for f in &files {
            assert!(
                !f.text.contains("{{"),
                "{name}: {} has a placeholder left",
                f.path
            );
            assert!(
                !f.text.contains(env!("CARGO_MANIFEST_DIR")),
                "{name}: {} holds a path of this machine",
                f.path
            );
            if f.kind == FileKind::Kernel {
                let file = f.path.trim_start_matches("kernels/");
                let (_, entries) = want
                    .iter()
                    .find(|(s, _)| s.file_name() == file)
                    .unwrap_or_else(|| panic!("{name}: {file} is not a source of the plan"));
                let mut got = kernels::defined_entry_points(&f.text).unwrap();
                got.sort();
                let mut e = entries.clone();
                e.sort();
                assert_eq!(got, e, "{name}: {file}");
                seen += 1;
            }
        }
        assert_eq!(seen, want.len(), "{name}");
        // A split plan's steps name what its blocks run: each kernel a step names is emitted
        // (the update with u in its own vector, Jacobi as its own kernel, the dots into a slot).
        if p.is_split() {
            let emitted: Vec<&String> = want.values().flatten().collect();
            for b in &p.blocks {
                for st in &b.steps {
                    if st.kernel == "copy" || st.kernel.starts_with("cusparse") {
                        continue;
                    }
                    for k in st.kernel.split('+') {
                        assert!(
                            emitted.iter().any(|e| e.as_str() == k.trim()),
                            "{name}: step {} names {k}, not emitted: {emitted:?}",
                            st.step
                        );
                    }
                }
            }
        }
        let paths: BTreeSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
        for must in [
            "plan.json",
            "CMakeLists.txt",
            "README.md",
            "include/autopcg_generated.h",
            "src/solver.cu",
            "src/main.cpp",
            "src/host_build.hpp",
            "src/plan.h",
            "src/plan_kernels.cuh",
            "fortran/autopcg_generated.f90",
            "kernels/common.cuh",
            "kernels/cg_scalars.cuh",
        ] {
            assert!(paths.contains(must), "{name}: {must} missing");
        }
        let cmake = &files
            .iter()
            .find(|f| f.path == "CMakeLists.txt")
            .unwrap()
            .text;
        assert!(cmake.contains("set(CMAKE_CUDA_ARCHITECTURES 90)"));
    }
}

/// The text of the emitted file `path`.
fn text<'a>(files: &'a [emit::EmittedFile], path: &str) -> &'a str {
    &files
        .iter()
        .find(|f| f.path == path)
        .unwrap_or_else(|| panic!("{path} not emitted"))
        .text
}

/// The launch function `apg_spmv_<op>` of plan_kernels.cuh with the comment line above it,
/// through its closing brace.
fn spmv_function<'a>(kernels: &'a str, op: &str) -> &'a str {
    let sig = kernels
        .find(&format!("static void apg_spmv_{op}("))
        .unwrap_or_else(|| panic!("no apg_spmv_{op}"));
    let start = kernels[..sig].rfind("// SpMV with").unwrap_or(sig);
    let end = sig + kernels[sig..].find("\n}\n").unwrap() + 3;
    &kernels[start..end]
}

/// The lines of `source` (C or C++) that name something of the cuSPARSE API (`cusparseX...`,
/// `CUSPARSE_...`, `CUDA_R_64F`, `<cusparse.h>`) outside an `#if APG_USES_CUSPARSE` block:
/// what a build without cuSPARSE would see of it. Comments are not looked at.
fn cusparse_outside_its_guard(source: &str) -> Vec<String> {
    let mut guards: Vec<bool> = Vec::new();
    let mut out = Vec::new();
    for (i, line) in source.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with("#if") {
            guards.push(t.contains("APG_USES_CUSPARSE") && !t.contains('!'));
            continue;
        }
        if t.starts_with("#el") {
            // The other branch of a cuSPARSE guard is what a build without it compiles.
            if let Some(g) = guards.last_mut() {
                *g = false;
            }
            continue;
        }
        if t.starts_with("#endif") {
            guards.pop();
            continue;
        }
        if guards.iter().any(|&g| g) {
            continue;
        }
        let code = line.split("//").next().unwrap_or_default();
        let api = code
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .any(|w| {
                w.strip_prefix("cusparse")
                    .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_uppercase()))
                    || w.starts_with("CUSPARSE_")
                    || w == "CUDA_R_64F"
                    || w == "cusparse.h"
            });
        if api {
            out.push(format!("{}: {line}", i + 1));
        }
    }
    out
}

fn cusparse_steps_call_cusparse_and_only_their_plans_link_it() {
    let link = "target_link_libraries(autopcg_generated PUBLIC CUDA::cusparse)";
    for (name, p) in cusparse_plans() {
        let files = emit::emit(&p).unwrap();
        let (plan_h, kernels_cuh) = (
            text(&files, "src/plan.h"),
            text(&files, "src/plan_kernels.cuh"),
        );
        let (cmake, readme) = (text(&files, "CMakeLists.txt"), text(&files, "README.md"));
        let by_cusparse = plan_files::cusparse_operands(p.choice());
        assert!(!by_cusparse.is_empty(), "{name}");
        assert!(plan_h.contains("\n#define APG_USES_CUSPARSE 1\n"), "{name}");
        for op in ["A", "K", "KT", "M"] {
            if !plan_h.contains(&format!("#define APG_HAS_{op} 1\n")) {
                continue;
            }
            let f = spmv_function(kernels_cuh, op);
            match by_cusparse.iter().find(|(o, _)| *o == op) {
                Some(&(_, alg)) => {
                    let e = plan_files::cusparse_alg_enumerator(alg);
                    for line in [
                        format!("#define APG_FMT_{op} APG_FORMAT_CSR"),
                        format!("#define APG_MERGE_{op} 0"),
                        format!("#define APG_CUSPARSE_{op} 1"),
                        format!("#define APG_CUSPARSE_ALG_{op} {e}"),
                    ] {
                        assert!(plan_h.contains(&format!("{line}\n")), "{name}: {line}");
                    }
                    // The step calls the driver's cuSPARSE product with the plan's algorithm:
                    // no kernel launch, no launch configuration.
                    assert!(
                        f.ends_with(&format!(
                            "static void apg_spmv_{op}(const ApgOperand &m, const double *x, \
                             double *y, cudaStream_t st) {{\n    if (m.nrows == 0) return;\n    \
                             apg_cusparse_spmv(m, {e}, x, y, st);\n}}\n"
                        )),
                        "{name}: {f}"
                    );
                    assert!(
                        f.starts_with(&format!(
                            "// SpMV with {op}: cuSPARSE's cusparseSpMV with {e} ({alg}), CSR"
                        )),
                        "{name}: {f}"
                    );
                }
                None => {
                    assert!(plan_h.contains(&format!("#define APG_CUSPARSE_{op} 0\n")));
                    assert!(plan_h.contains(&format!("#define APG_CUSPARSE_ALG_{op} (-1)\n")));
                    assert!(f.contains("<<<") && !f.contains("cusparse"), "{name}: {f}");
                }
            }
        }
        assert!(cmake.contains(link), "{name}: {cmake}");
        assert!(
            cmake.contains("if(CUDAToolkit_VERSION VERSION_LESS 12.4)"),
            "{name}"
        );
        assert!(
            readme.contains("so the solver includes `cusparse.h` and links cuSPARSE")
                && readme.contains("`CUDA::cudart` and `CUDA::cusparse` in CMake"),
            "{name}: {readme}"
        );
        // cuSPARSE is host code: nothing of it in a file NVRTC compiles.
        for f in &files {
            if matches!(f.kind, FileKind::Kernel | FileKind::KernelHeader) {
                assert!(
                    !f.text.to_ascii_lowercase().contains("cusparse"),
                    "{name}: {}",
                    f.path
                );
            }
        }
    }
    // The A-only plan, pinned whole where it matters.
    let (_, p) = cusparse_plans().swap_remove(0);
    let files = emit::emit(&p).unwrap();
    let plan_h = text(&files, "src/plan.h");
    assert!(plan_h.contains(
        "#define APG_FMT_A APG_FORMAT_CSR\n#define APG_HYB_SPLIT_A (-1LL)\n#define APG_MERGE_A \
         0\n#define APG_CUSPARSE_A 1\n#define APG_CUSPARSE_ALG_A CUSPARSE_SPMV_CSR_ALG2\n"
    ));
    assert!(text(&files, "README.md")
        .contains("The plan hands the SpMV with A (CUSPARSE_SPMV_CSR_ALG2)"));
    assert!(
        text(&files, "README.md").contains("| `cusparse_spmv_csr_alg2` | launched by cuSPARSE |")
    );

    // Plans without cuSPARSE (the forced ones at least; the model may come to choose cuSPARSE
    // for the others): not included (solver.cu names its API only under APG_USES_CUSPARSE,
    // which is 0) and not linked.
    let without: Vec<(String, SavedPlan)> = plans()
        .into_iter()
        .filter(|(_, p)| !plan_files::uses_cusparse(p.choice()))
        .collect();
    assert!(
        without.len() >= 2,
        "{} plans without cuSPARSE",
        without.len()
    );
    for (name, p) in without {
        let files = emit::emit(&p).unwrap();
        let plan_h = text(&files, "src/plan.h");
        assert!(plan_h.contains("\n#define APG_USES_CUSPARSE 0\n"), "{name}");
        assert!(!plan_h.contains("CUSPARSE_SPMV"), "{name}");
        for op in ["A", "K", "KT", "M"] {
            assert!(!plan_h.contains(&format!("#define APG_CUSPARSE_{op} 1")));
        }
        assert!(
            !text(&files, "src/plan_kernels.cuh")
                .to_ascii_lowercase()
                .contains("cusparse"),
            "{name}"
        );
        let cmake = text(&files, "CMakeLists.txt");
        assert!(!cmake.contains("CUDA::cusparse"), "{name}");
        assert!(cmake.contains("cuSPARSE is not linked"), "{name}");
        let readme = text(&files, "README.md");
        assert!(readme.contains("does not use or link cuSPARSE"), "{name}");
        assert!(!readme.contains("CUDA::cusparse"), "{name}");
        for f in &files {
            if f.path.starts_with("src/") || f.path.starts_with("include/") {
                let bad = cusparse_outside_its_guard(&f.text);
                assert!(bad.is_empty(), "{name}: {}: {bad:#?}", f.path);
            }
        }
    }
    // The guard scan itself sees what it must.
    assert_eq!(
        cusparse_outside_its_guard(
            "#if APG_USES_CUSPARSE\n#include <cusparse.h>\n#else\ncusparseSpMV();\n#endif\n\
             // cusparseSpMV in a comment\nint cusparse_alg = APG_CUSPARSE_ALG_A;\n\
             #if X\nCUSPARSE_SPMV_CSR_ALG2;\n#endif\n"
        ),
        ["4: cusparseSpMV();", "9: CUSPARSE_SPMV_CSR_ALG2;"]
    );
}

fn emitted_kernels_compile_with_nvrtc() {
    use autopcg_gpu::compile::{base_options, compile_source, image_has_entry, Target};
    let mut checked = 0;
    for (name, p) in all_plans() {
        let files = emit::emit(&p).unwrap();
        let headers: Vec<(String, String)> = files
            .iter()
            .filter(|f| f.kind == FileKind::KernelHeader)
            .map(|f| {
                (
                    f.path.trim_start_matches("kernels/").to_string(),
                    f.text.clone(),
                )
            })
            .collect();
        let hdr: Vec<(&str, &str)> = headers
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        for f in files.iter().filter(|f| f.kind == FileKind::Kernel) {
            let file = f.path.trim_start_matches("kernels/");
            let entries = kernels::defined_entry_points(&f.text).unwrap();
            for target in [Target::Ptx(90), Target::Cubin(90)] {
                let image = compile_source(
                    &format!("{name}: {}", f.path),
                    file,
                    &f.text,
                    &hdr,
                    &base_options(target),
                    target,
                )
                .unwrap_or_else(|e| panic!("{e}"));
                for e in &entries {
                    assert!(image_has_entry(&image, target, e), "{name}: {e} in {file}");
                }
                if let Target::Ptx(_) = target {
                    let ptx = String::from_utf8_lossy(&image);
                    let exported = ptx.matches(".entry ").count();
                    assert_eq!(
                        exported,
                        entries.len(),
                        "{name}: {file} exports other kernels"
                    );
                }
                checked += 1;
            }
        }
    }
    println!("emitted_kernels_compile_with_nvrtc: {checked} (file, target) compilations");
}

fn write_emitted(p: &SavedPlan, dir: &Path) {
    emit::write(dir, &emit::emit(p).unwrap()).unwrap();
}

/// nvcc (on the PATH, or the toolkit's usual place) when cmake runs too.
fn nvcc_with_cmake() -> Option<String> {
    find_tool(&["cmake"])?;
    find_tool(&["nvcc", "/usr/local/cuda/bin/nvcc"])
}

/// The solver of the plan with A by cuSPARSE, the model's own plan for the same matrix and a
/// plan split into two row blocks, each configured and built by CMake with `nvcc` (no GPU
/// needed): cuSPARSE is on the link line of the first only. Where a CUDA device is present each
/// also solves its matrix (with `--any-device`: the plans are for the H200, another GPU of
/// sm_90 runs them, and the split plan's blocks share the GPUs there are).
fn emitted_solvers_build_with_cmake_and_nvcc(nvcc: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let (cu_label, cu_plan) = cusparse_plans().swap_remove(0);
    // Forced to ELL with Jacobi: no operand the model could hand to cuSPARSE.
    let (label, plan) = plans().swap_remove(2);
    assert!(!plan_files::uses_cusparse(plan.choice()), "{label}");
    let (split_label, split_plan) = split_plans().swap_remove(0);
    let device = autopcg_gpu::testing::Needs::Device.missing();
    for (i, (label, p, cusparse)) in [
        (cu_label, cu_plan, true),
        (label, plan, false),
        (split_label, split_plan, false),
    ]
    .into_iter()
    .enumerate()
    {
        let dir = tmp.path().join(format!("solver{i}"));
        let build = dir.join("build");
        write_emitted(&p, &dir);
        check(
            Command::new("cmake")
                .arg("-S")
                .arg(&dir)
                .arg("-B")
                .arg(&build)
                .args(["-G", "Unix Makefiles", "-DCMAKE_BUILD_TYPE=Release"])
                .arg(format!("-DCMAKE_CUDA_COMPILER={nvcc}")),
            &format!("{label}: cmake configure"),
        );
        check(
            Command::new("cmake")
                .arg("--build")
                .arg(&build)
                .args(["-j", "2"]),
            &format!("{label}: cmake --build"),
        );
        let link = std::fs::read_to_string(build.join("CMakeFiles/autopcg_gen_solve.dir/link.txt"))
            .unwrap();
        assert_eq!(link.contains("cusparse"), cusparse, "{label}: {link}");
        if let Some(why) = &device {
            println!("{label}: built; not run ({why})");
            continue;
        }
        let mtx = fixture_path(label.split(' ').next().unwrap_or_default());
        let o = Command::new(build.join("autopcg_gen_solve"))
            .arg(&mtx)
            .args(["--json", "--any-device"])
            .output()
            .unwrap();
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!(
                "{label}: not JSON ({e}): {}\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        });
        assert_eq!(o.status.code(), Some(0), "{label}: {j}");
        assert_eq!(j["reason"], "converged", "{label}: {j}");
        assert!(
            j["relative_residual"].as_f64().unwrap() <= 1e-8,
            "{label}: {j}"
        );
        let kernels = cusparse_plans::step_kernels(&j);
        assert_eq!(
            kernels.contains(&"cusparse_spmv_csr_alg2"),
            cusparse,
            "{label}: {kernels:?}"
        );
        println!("{label}: {} iterations on {}", j["iterations"], j["device"]);
    }
}

/// The host files of the explicit-SSOR plan over DIA, written to a temporary folder.
fn emitted_host_files() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let (_, p) = plans().swap_remove(4);
    write_emitted(&p, dir.path());
    dir
}

fn emitted_cpp_files_pass_the_syntax_check(cxx: &str) {
    let dir = emitted_host_files();
    let d = dir.path();
    check(
        Command::new(cxx)
            .args(["-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror"])
            .arg(d.join("src/main.cpp")),
        "main.cpp",
    );
    // plan.h of a plan with cuSPARSE too (its algorithm names stay unexpanded here).
    let cu = tempfile::tempdir().unwrap();
    write_emitted(&cusparse_plans().swap_remove(2).1, cu.path());
    for d in [d, cu.path()] {
        let tu = d.join("src/host_check.cpp");
        std::fs::write(&tu, "#include \"host_build.hpp\"\n#include \"plan.h\"\n#include \"../include/autopcg_generated.h\"\nint main() { return APG_PLAN_ARCH > 0 && APG_USES_CUSPARSE >= 0 ? 0 : 1; }\n").unwrap();
        check(
            Command::new(cxx)
                .args(["-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror"])
                .arg(&tu),
            "host_build.hpp, plan.h",
        );
    }
}

fn emitted_c_header_passes_the_syntax_check(cc: &str) {
    let dir = emitted_host_files();
    check(
        Command::new(cc)
            .args([
                "-std=c99",
                "-fsyntax-only",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-x",
                "c",
            ])
            .arg(dir.path().join("include/autopcg_generated.h")),
        "autopcg_generated.h as C",
    );
}

fn emitted_fortran_module_passes_the_syntax_check(fc: &str) {
    let dir = emitted_host_files();
    let d = dir.path();
    check(
        Command::new(fc)
            .args(["-std=f2008", "-fsyntax-only"])
            .current_dir(d)
            .arg(d.join("fortran/autopcg_generated.f90")),
        "autopcg_generated.f90",
    );
}

// ------------------------------------------------------------------- host_build.hpp vs Rust

fn put_u32s(out: &mut Vec<u8>, v: &[u32]) {
    out.extend((v.len() as u64).to_le_bytes());
    v.iter().for_each(|x| out.extend(x.to_le_bytes()));
}

fn put_f64s(out: &mut Vec<u8>, v: &[f64]) {
    out.extend((v.len() as u64).to_le_bytes());
    v.iter().for_each(|x| out.extend(x.to_bits().to_le_bytes()));
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn u64(&mut self) -> u64 {
        let (h, t) = self.0.split_at(8);
        self.0 = t;
        u64::from_le_bytes(h.try_into().unwrap())
    }
    fn u32s(&mut self) -> Vec<u32> {
        let n = self.u64() as usize;
        (0..n)
            .map(|_| {
                let (h, t) = self.0.split_at(4);
                self.0 = t;
                u32::from_le_bytes(h.try_into().unwrap())
            })
            .collect()
    }
    fn f64_bits(&mut self) -> Vec<u64> {
        let n = self.u64() as usize;
        (0..n).map(|_| self.u64()).collect()
    }
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn check_csr(r: &mut Reader, want: &CsrMatrix, what: &str) {
    assert_eq!(r.u32s(), want.indptr(), "{what}: row pointers");
    assert_eq!(r.u32s(), want.indices(), "{what}: columns");
    assert_eq!(r.f64_bits(), bits(want.data()), "{what}: values");
}

fn host_build_matches_the_rust_preconditioners_and_conversions_bit_for_bit(cxx: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (_, p) = plans().swap_remove(0);
    write_emitted(&p, dir.path());
    let harness = root().join("crates/generator/tests/support/host_build_check.cpp");
    let exe = dir.path().join("host_build_check");
    check(
        Command::new(cxx)
            .args(["-std=c++17", "-O1", "-ffp-contract=off", "-o"])
            .arg(&exe)
            .arg("-I")
            .arg(dir.path().join("src"))
            .arg(&harness),
        "host_build_check.cpp",
    );
    let unlimited = PaddingLimits {
        max_fill_ratio: f64::INFINITY,
        max_bytes: u64::MAX,
    };
    for name in ["bcsstk01", "1138_bus", "bcsstk13", "poisson3d_16"] {
        let a = fixture(name);
        let omega = autopcg_solver::auto_omega(&a);
        for (kind_code, order) in [(1u32, 1u32), (2, 1), (3, 1), (2, 2), (3, 2)] {
            let kind = match kind_code {
                1 => PrecondKind::Jacobi,
                2 => PrecondKind::SsorAi {
                    order: order as u8,
                    omega: Some(omega),
                    form: SsorForm::Factored,
                },
                _ => PrecondKind::SsorAi {
                    order: order as u8,
                    omega: Some(omega),
                    form: SsorForm::Explicit,
                },
            };
            let mut input = Vec::new();
            input.extend((a.nrows() as u64).to_le_bytes());
            put_u32s(&mut input, a.indptr());
            put_u32s(&mut input, a.indices());
            put_f64s(&mut input, a.data());
            input.extend(u64::from(kind_code).to_le_bytes());
            input.extend(u64::from(order).to_le_bytes());
            input.extend(omega.to_bits().to_le_bytes());
            let inp = dir.path().join("in.bin");
            let outp = dir.path().join("out.bin");
            std::fs::write(&inp, &input).unwrap();
            check(Command::new(&exe).arg(&inp).arg(&outp), "host_build_check");
            let out = std::fs::read(&outp).unwrap();
            let mut r = Reader(&out);
            let what = format!("{name} {kind}");
            match Preconditioner::build(&a, &kind).unwrap() {
                Preconditioner::Jacobi { inv_diag } => {
                    assert_eq!(r.f64_bits(), bits(&inv_diag), "{what}: 1/d")
                }
                Preconditioner::SsorFactored { k, kt, inv_diag } => {
                    assert_eq!(r.f64_bits(), bits(&inv_diag), "{what}: s");
                    check_csr(&mut r, &k, &format!("{what}: K"));
                    check_csr(&mut r, &kt, &format!("{what}: K^T"));
                }
                Preconditioner::SsorExplicit { m } => {
                    assert_eq!(r.f64_bits(), Vec::<u64>::new(), "{what}: no diagonal");
                    check_csr(&mut r, &m, &format!("{what}: M"));
                }
                Preconditioner::None => unreachable!(),
            }
            // The conversions of A (the same for every preconditioner; checked each time).
            let ell = EllMatrix::from_csr(&a, &unlimited).unwrap();
            assert_eq!(r.u64(), ell.width() as u64, "{what}: ELL width");
            assert_eq!(r.u32s(), ell.cols(), "{what}: ELL columns");
            assert_eq!(r.f64_bits(), bits(ell.vals()), "{what}: ELL values");
            let dia = DiaMatrix::from_csr(&a, &unlimited).unwrap();
            let offs: Vec<u32> = dia.offsets().iter().map(|&o| o as u32).collect();
            assert_eq!(r.u32s(), offs, "{what}: DIA offsets");
            assert_eq!(r.f64_bits(), bits(dia.data()), "{what}: DIA band");
            let coo = CooMatrix::from_csr(&a);
            assert_eq!(r.u32s(), coo.rows(), "{what}: COO rows");
            assert_eq!(r.u32s(), coo.cols(), "{what}: COO columns");
            assert_eq!(r.f64_bits(), bits(coo.vals()), "{what}: COO values");
            let hyb = HybMatrix::from_csr(&a, None, &unlimited).unwrap();
            assert_eq!(r.u64(), hyb.split() as u64, "{what}: HYB split");
            assert_eq!(r.u32s(), hyb.ell().cols(), "{what}: HYB ELL columns");
            assert_eq!(
                r.f64_bits(),
                bits(hyb.ell().vals()),
                "{what}: HYB ELL values"
            );
            assert_eq!(r.u32s(), hyb.coo().rows(), "{what}: HYB COO rows");
            assert_eq!(r.u32s(), hyb.coo().cols(), "{what}: HYB COO columns");
            assert_eq!(
                r.f64_bits(),
                bits(hyb.coo().vals()),
                "{what}: HYB COO values"
            );
            assert!(r.0.is_empty(), "{what}: trailing output");
        }
    }
}

/// A split plan's blocks must cover the rows in order, each with its halo multiply, and reduce
/// with one block size; `from_blocks` gives a block planned with another size block 0's, with a
/// note, and a one-GPU solve refuses a split plan.
fn split_plans_are_checked_and_share_one_reduction_block_size() {
    let a = fixture("bcsstk13");
    let p = saved_split("bcsstk13", &a, ssor(1), 2);
    p.validate().unwrap();
    let bad = |edit: &dyn Fn(&mut SavedPlan), want: &str| {
        let mut q = p.clone();
        edit(&mut q);
        let e = q.validate().unwrap_err().to_string();
        assert!(e.contains(want), "{want:?} not in: {e}");
    };
    bad(&|q| q.blocks[1].rows.0 += 1, "block 1 covers rows");
    bad(
        &|q| q.blocks[1].rows.1 -= 1,
        "the blocks cover rows 0..2002",
    );
    bad(
        &|q| q.blocks[0].halo = None,
        "block 0 of 2 has no multiply for its halo part",
    );
    let t0 = p.blocks[0].choice.dot3.config.threads;
    let other = if t0 == 256 { 512 } else { 256 };
    bad(
        &|q| q.blocks[1].choice.dot3.config.threads = other,
        "share one reduction block size",
    );
    let props = model_device_props(&h200());
    let e = p
        .to_solve_plan(&a, &props, false, "plan.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("runs on the multi-block solver"), "{e}");

    // Planned blocks whose reductions differ: saved with block 0's size and a note.
    let model = h200();
    let mut req = autopcg_generator::PlanRequest::new(
        &a,
        ssor(1),
        autopcg_generator::Target::Gpu(props.clone()),
    );
    req.model = Some(autopcg_generator::ModelRef {
        file: &model,
        label: "m",
    });
    let mut blocks = autopcg_generator::blocks::plan_blocks_balanced(&req, 2).unwrap();
    let g1 = blocks.plans.blocks[1].local.gpu.as_mut().unwrap();
    g1.dot3.config.threads = other;
    let q = SavedPlan::from_blocks(&blocks, &a, &props, None, None).unwrap();
    assert_eq!(q.blocks[1].choice.dot3.config.threads, t0);
    assert!(
        q.notes.iter().any(|n| n.contains(&format!(
            "block 1: the three-dot reduction runs with block 0's {t0} threads"
        ))),
        "{:?}",
        q.notes
    );
}
