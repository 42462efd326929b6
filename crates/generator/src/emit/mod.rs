//! Emission of a tuned standalone solver: a [`SavedPlan`] becomes a folder of CUDA C++
//! sources that build with CMake and nvcc and need no Rust.
//!
//! What is emitted ([`emit`]), relative to the output folder:
//!
//! | file | what |
//! |---|---|
//! | `plan.json` | the plan ([`SavedPlan::to_json`]) |
//! | `kernels/*.cu`, `kernels/*.cuh` | the kernel files of the plan, from the GPU crate's embedded copy of `kernels/`, cut down to the entry points the plan launches, compile-time values fixed ([`kernels`]) |
//! | `src/plan.h`, `src/plan_kernels.cuh` | the plan as constants and one launch function per step ([`plan_files`]) |
//! | `src/solver.cu` | the host driver: Chronopoulos–Gear PCG with the fused update, device scalars, CUDA graphs, the true-residual check and residual replacement (template `solver.cu` for a plan of one block; `solver_blocks.cu` for a plan split into row blocks, one per GPU, with halo exchanges and one all-reduce of the dots per iteration) |
//! | `src/driver.cuh`, `src/driver_api.cuh` | what both drivers share: errors, device memory and the operands; the solve loop with its stopping rule and the layout-independent C API functions (templates) |
//! | `src/host_build.hpp` | SSOR-AI / Jacobi construction and the format conversions on the host (template) |
//! | `include/autopcg_generated.h` | the C API: setup, solve, update_values, destroy (template) |
//! | `fortran/autopcg_generated.f90` | Fortran interfaces to the C API (template) |
//! | `src/main.cpp` | a command that reads a `.mtx` and prints the JSON of `autopcg solve --json` (template) |
//! | `CMakeLists.txt`, `README.md` | the build for the plan's `sm_XX`, and how to build and call it (templates) |
//!
//! Emission is templates plus the plan: the templates (`crates/generator/templates/`) are the
//! same for every plan, and the only plan-specific text is generated here from the plan.
//!
//! cuSPARSE: a plan that hands an operand's SpMV to cuSPARSE gets `APG_USES_CUSPARSE 1` in
//! plan.h (solver.cu then includes cusparse.h and keeps the cuSPARSE state of that operand),
//! a CMake line linking `CUDA::cusparse` (the `{{CUSPARSE_LINK}}` placeholder, see
//! [`cmake_cusparse_link`]) and a README that says so; any other plan neither includes nor
//! links cuSPARSE. The kernel files, which NVRTC compiles, never hold cuSPARSE calls.
use std::path::{Path, PathBuf};

use crate::saved::{SavedPlan, SavedPlanError};

pub mod kernels;
pub mod plan_files;
pub mod template;

/// Why a solver could not be emitted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmitError {
    /// A kernel source could not be cut down to the plan's entry points.
    #[error("kernels/{file}: {reason}")]
    Kernels {
        /// The source file.
        file: String,
        /// What went wrong.
        reason: String,
    },
    /// A template and its values disagree (an internal error).
    #[error("template {template}: {reason}")]
    Template {
        /// The template.
        template: String,
        /// What is wrong.
        reason: String,
    },
    /// The plan cannot be written.
    #[error(transparent)]
    Plan(#[from] SavedPlanError),
    /// A file cannot be written.
    #[error("{path}: {source}", path = path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// What kind of file an emitted file is (what can check it without a GPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A kernel file: compiles alone with NVRTC (with the emitted headers).
    Kernel,
    /// A header of the kernel files.
    KernelHeader,
    /// Host code that needs nvcc (kernel launches).
    Cuda,
    /// Plain C++17 (checkable by any C++ compiler).
    Cxx,
    /// A C header (C99 and C++).
    CHeader,
    /// Fortran 2003.
    Fortran,
    /// Anything else (JSON, CMake, Markdown).
    Other,
}

/// One emitted file.
#[derive(Debug, Clone, PartialEq)]
pub struct EmittedFile {
    /// Path relative to the output folder, `/`-separated.
    pub path: String,
    /// Contents.
    pub text: String,
    /// What it is.
    pub kind: FileKind,
}

/// A C string literal of `s`: quotes and backslashes escaped, bytes outside printable ASCII
/// as three-digit octal escapes.
pub fn c_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for b in s.bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'?' => out.push_str("\\?"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\{b:03o}")),
        }
    }
    out.push('"');
    out
}

/// A JSON string literal of `s`.
pub fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string())
}

/// The first line of every generated file.
fn banner(plan: &SavedPlan) -> String {
    format!(
        "emitted by {} for {} from a plan of {}",
        plan.generated_by,
        plan.device.words(),
        plan.model
            .as_ref()
            .map_or("the fallback rule", |m| m.file.as_str())
    )
}

/// A Markdown table of the plan's steps (with the block of every step in a split plan).
fn steps_table(plan: &SavedPlan) -> String {
    let split = plan.is_split();
    let mut t = String::from(if split {
        "| block (rows, GPU) | step | format | kernel | launch | predicted ms |\n|---|---|---|---|---|---|\n"
    } else {
        "| step | format | kernel | launch | predicted ms |\n|---|---|---|---|---|\n"
    });
    for (i, b) in plan.blocks.iter().enumerate() {
        for s in &b.steps {
            if split {
                t.push_str(&format!(
                    "| {i} ({}..{}, GPU {}) ",
                    b.rows.0, b.rows.1, b.gpu
                ));
            }
            t.push_str(&format!(
                "| {} | {} | `{}` | {} | {} |\n",
                s.step,
                s.format,
                s.kernel,
                s.config,
                s.predicted_ms
                    .map_or_else(|| "-".to_string(), |p| format!("{p:.4}"))
            ));
        }
    }
    t
}

/// The operands whose SpMV `plan` hands to cuSPARSE, with their algorithms, in words
/// (`A (CUSPARSE_SPMV_CSR_ALG2) and K (...)`), or `None` when it hands none.
fn cusparse_words(plan: &SavedPlan) -> Option<String> {
    let split = plan.is_split();
    let mut each: Vec<String> = Vec::new();
    for (i, b) in plan.blocks.iter().enumerate() {
        for (name, alg) in plan_files::cusparse_operands(&b.choice) {
            let name = if name == "KT" { "K^T" } else { name };
            let alg = plan_files::cusparse_alg_enumerator(alg);
            each.push(if split {
                format!("{name} of block {i} ({alg})")
            } else {
                format!("{name} ({alg})")
            });
        }
    }
    if each.is_empty() {
        None
    } else {
        Some(each.join(" and "))
    }
}

/// The oldest CUDA toolkit whose cuSPARSE has everything the emitted solver calls
/// (`cusparseSpMV_preprocess` came with 12.4).
pub const CUSPARSE_MIN_CUDA: &str = "12.4";

/// The text of the `{{CUSPARSE_LINK}}` placeholder of `CMakeLists.txt`: for a plan that hands
/// an operand to cuSPARSE, a check of the toolkit's version and the line linking
/// `CUDA::cusparse`; otherwise a comment saying that cuSPARSE is not linked.
pub fn cmake_cusparse_link(plan: &SavedPlan) -> String {
    match cusparse_words(plan) {
        Some(words) => format!(
            "# The plan hands the SpMV with {words} to cuSPARSE: link it.\n\
             if(CUDAToolkit_VERSION VERSION_LESS {CUSPARSE_MIN_CUDA})\n  \
             message(FATAL_ERROR \"this plan runs cuSPARSE's SpMV with cusparseSpMV_preprocess, \
             which needs CUDA {CUSPARSE_MIN_CUDA} or newer; found CUDA ${{CUDAToolkit_VERSION}}\")\n\
             endif()\n\
             target_link_libraries(autopcg_generated PUBLIC CUDA::cusparse)"
        ),
        None => "# Every SpMV of the plan is a kernel of its own: cuSPARSE is not linked.".into(),
    }
}

/// The files every solver holds that are filled from a template with nothing but the
/// generator's version, in the order [`emit`] writes them (after `src/solver.cu`, filled from
/// the driver template of the plan's layout): the path in the output folder, the template's
/// name and text, and the kind of file.
pub const VERSION_TEMPLATES: [(&str, &str, &str, FileKind); 6] = [
    (
        "src/driver.cuh",
        "driver.cuh",
        template::DRIVER_CUH,
        FileKind::Cuda,
    ),
    (
        "src/driver_api.cuh",
        "driver_api.cuh",
        template::DRIVER_API_CUH,
        FileKind::Cuda,
    ),
    (
        "src/host_build.hpp",
        "host_build.hpp",
        template::HOST_BUILD_HPP,
        FileKind::Cxx,
    ),
    (
        "src/main.cpp",
        "main.cpp",
        template::MAIN_CPP,
        FileKind::Cxx,
    ),
    (
        "include/autopcg_generated.h",
        "autopcg_generated.h",
        template::C_HEADER,
        FileKind::CHeader,
    ),
    (
        "fortran/autopcg_generated.f90",
        "autopcg_generated.f90",
        template::FORTRAN_MODULE,
        FileKind::Fortran,
    ),
];

/// Every file of the solver of `plan`, `plan.json` first.
pub fn emit(plan: &SavedPlan) -> Result<Vec<EmittedFile>, EmitError> {
    plan.validate()?;
    let banner = banner(plan);
    let choice = plan.choice();
    let mut files = vec![EmittedFile {
        path: "plan.json".into(),
        text: plan.to_json()?,
        kind: FileKind::Other,
    }];
    let kfiles = kernels::kernel_files(plan, &banner)?;
    let mut kernel_list = String::new();
    for k in &kfiles {
        kernel_list.push_str(&format!(
            "- `kernels/{}`: {}\n",
            k.name,
            k.entries.join(", ")
        ));
    }
    for h in kernels::headers() {
        files.push(EmittedFile {
            path: format!("kernels/{}", h.name),
            text: h.text,
            kind: FileKind::KernelHeader,
        });
    }
    let names: Vec<String> = kfiles.iter().map(|k| k.name.clone()).collect();
    for k in kfiles {
        files.push(EmittedFile {
            path: format!("kernels/{}", k.name),
            text: k.text,
            kind: FileKind::Kernel,
        });
    }
    files.push(EmittedFile {
        path: "src/plan.h".into(),
        text: plan_files::plan_header(plan, &banner)?,
        kind: FileKind::Cxx,
    });
    files.push(EmittedFile {
        path: "src/plan_kernels.cuh".into(),
        text: plan_files::plan_kernels(plan, &names, &banner)?,
        kind: FileKind::Cuda,
    });
    let version = [("VERSION", plan.generated_by.clone())];
    let (driver_name, driver_text) = if plan.is_split() {
        ("solver_blocks.cu", template::SOLVER_BLOCKS_CU)
    } else {
        ("solver.cu", template::SOLVER_CU)
    };
    files.push(EmittedFile {
        path: "src/solver.cu".into(),
        text: template::fill(driver_name, driver_text, &version)?,
        kind: FileKind::Cuda,
    });
    for (path, name, text, kind) in VERSION_TEMPLATES {
        files.push(EmittedFile {
            path: path.into(),
            text: template::fill(name, text, &version)?,
            kind,
        });
    }
    files.push(EmittedFile {
        path: "CMakeLists.txt".into(),
        text: template::fill(
            "CMakeLists.txt",
            template::CMAKE_LISTS,
            &[
                ("VERSION", plan.generated_by.clone()),
                ("ARCH", plan.device.arch.to_string()),
                ("CUSPARSE_LINK", cmake_cusparse_link(plan)),
            ],
        )?,
        kind: FileKind::Other,
    });
    let m = &plan.matrix;
    let cusparse = cusparse_words(plan);
    let readme = template::fill(
        "README.md",
        template::README_MD,
        &[
            ("VERSION", plan.generated_by.clone()),
            ("DEVICE", plan.device.words()),
            ("ARCH", plan.device.arch.to_string()),
            (
                "MODEL",
                plan.model.as_ref().map_or_else(
                    || "none (the fallback rule chose)".to_string(),
                    |mm| format!("`{}` (SHA-256 `{}`)", mm.file, mm.sha256),
                ),
            ),
            (
                "MATRIX",
                format!(
                    "{}n = {}, nnz = {}, pattern SHA-256 `{}`",
                    plan.matrix_file
                        .as_ref()
                        .map(|f| format!("`{f}`, "))
                        .unwrap_or_default(),
                    m.n,
                    m.nnz,
                    m.pattern_sha256
                ),
            ),
            (
                "PRECOND",
                match plan.precond.omega {
                    Some(w) => format!(
                        "{} (omega {w}), applied as {}",
                        plan.precond.kind, plan.precond.applied
                    ),
                    None => plan.precond.applied.clone(),
                },
            ),
            ("CHECK_EVERY", plan.check_every.to_string()),
            (
                "POLL_GROWTH",
                autopcg_solver::gpu::GPU_POLL_GROWTH.to_string(),
            ),
            (
                "GRAPHS",
                if plan.is_split() {
                    format!(
                        "run over {} row blocks, one per GPU (block i on GPU i), kernel by \
                         kernel, with a halo exchange and one all-reduce of the three dots per \
                         iteration (setup refuses a host with fewer GPUs than the plan's {} \
                         unless given AUTOPCG_GEN_ANY_DEVICE, the command's --any-device: then \
                         block i runs on GPU i modulo the GPUs there are)",
                        plan.blocks.len(),
                        plan.blocks.iter().map(|b| b.gpu + 1).max().unwrap_or(1)
                    )
                } else if choice.use_graph {
                    format!(
                        "replayed from CUDA graphs of {} iteration(s)",
                        choice.graph_iters
                    )
                } else {
                    "launched kernel by kernel".to_string()
                },
            ),
            ("STEPS", steps_table(plan)),
            (
                "TITLE_GPUS",
                if plan.is_split() {
                    format!("{} GPUs", plan.blocks.len())
                } else {
                    "one GPU".to_string()
                },
            ),
            (
                "ON_GPUS",
                if plan.is_split() {
                    format!(
                        "{} NVIDIA GPUs of one host (the matrix split into {} row blocks, one \
                         per GPU; SSOR-AI, where it is the preconditioner, built per block on \
                         the block's own rows and columns)",
                        plan.blocks.len(),
                        plan.blocks.len()
                    )
                } else {
                    "one NVIDIA GPU".to_string()
                },
            ),
            (
                "ITERATION",
                if plan.is_split() {
                    "iterations in which every block, on its own GPU and stream, runs one fused \
                     update and its preconditioner, packs the entries of u the other blocks need, \
                     multiplies its local part while a copy stream pulls the entries it needs \
                     from the others, adds its halo part, and writes its three dots into its slot \
                     of a small array; every GPU then gathers the other blocks' slots and runs the \
                     scalar recurrence on their sum in block order (the same numbers on every \
                     GPU), events ordering the streams. Kernels are launched one by one."
                        .to_string()
                } else {
                    "iterations of one fused update, the preconditioner, the SpMV with A and one \
                     fused reduction whose last block runs the scalar recurrence, replayed from \
                     CUDA graphs."
                        .to_string()
                },
            ),
            ("KERNELS", kernel_list),
            (
                "CUSPARSE_BUILD",
                match &cusparse {
                    Some(words) => format!(
                        "The plan hands the SpMV with {words} to cuSPARSE (`cusparseSpMV`, \
                         preprocessed once at setup) instead of a kernel of its own, so the \
                         solver includes `cusparse.h` and links cuSPARSE (`CUDA::cusparse`); it \
                         needs CUDA {CUSPARSE_MIN_CUDA} or newer."
                    ),
                    None => "Every SpMV of the plan is a kernel of its own: the solver does not \
                             use or link cuSPARSE."
                        .to_string(),
                },
            ),
            (
                "LINK_LIBRARIES",
                if cusparse.is_some() {
                    "the CUDA runtime and cuSPARSE (`CUDA::cudart` and `CUDA::cusparse` in CMake)"
                        .to_string()
                } else {
                    "the CUDA runtime (`CUDA::cudart` in CMake)".to_string()
                },
            ),
        ],
    )?;
    files.push(EmittedFile {
        path: "README.md".into(),
        text: readme,
        kind: FileKind::Other,
    });
    Ok(files)
}

/// Writes `files` under `dir` (created if missing; files of the same names are replaced).
pub fn write(dir: &Path, files: &[EmittedFile]) -> Result<(), EmitError> {
    for f in files {
        let path = f.path.split('/').fold(dir.to_path_buf(), |p, c| p.join(c));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| EmitError::Io {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        std::fs::write(&path, &f.text).map_err(|source| EmitError::Io { path, source })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_strings_escape_what_c_needs() {
        assert_eq!(c_string("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(c_string("é\n"), "\"\\303\\251\\012\"");
        assert_eq!(c_string("??="), "\"\\?\\?=\"");
    }
}
