//! The kernels an emitted solver is made of: which entry points a plan launches, and each
//! source file of the pool (the GPU crate's embedded copy, the only one) cut down to those entry
//! points, with its compile-time knobs fixed by `#define` lines ahead of the original text.
//!
//! Only `extern "C" __global__` definitions are removed (with the comment lines directly above
//! them); macros, device helpers and templates stay, so every emitted file still compiles alone
//! with its headers.
use std::collections::BTreeMap;

use autopcg_catalog::kernels::{MERGE_ITEMS, MERGE_MAX_THREADS, MERGE_PARTITION};
use autopcg_catalog::{
    DotKernel, KernelSource, PrecondKernel, SpmvKernel, SpmvMethod, VectorKernel, VectorOp,
    VectorVariant,
};
use autopcg_gpu::sources::{source_text, HEADERS};
use autopcg_solver::gpu::{GpuPlanChoice, PrecondChoice};

use super::EmitError;
use crate::saved::SavedPlan;

/// The variant of the `r = b - A x` update of the start and the residual checks (as the GPU
/// backend runs it).
pub const AUX_XPAY: VectorVariant = VectorVariant::GridV2;

/// The single dot product of `||b||` and of the true residual (as the GPU backend runs it).
pub const AUX_DOT: DotKernel = DotKernel::LastBlock;

/// Every entry point the solver of `choice` launches, by source file: the plan's steps (A's
/// SpMV variant with the dots in its epilogue where the plan fuses them), the
/// start's reduction (the variant taking the iteration as an argument), the merge-path
/// partition where a CSR operand uses the merge kernel, and the two auxiliary kernels of the
/// start and the residual checks ([`AUX_XPAY`], [`AUX_DOT`]).
pub fn entry_points(choice: &GpuPlanChoice) -> BTreeMap<KernelSource, Vec<String>> {
    let mut out: BTreeMap<KernelSource, Vec<String>> = BTreeMap::new();
    let mut add = |src: KernelSource, name: String| {
        let v = out.entry(src).or_default();
        if !v.contains(&name) {
            v.push(name);
        }
    };
    let spmv = |m: &SpmvMethod, add: &mut dyn FnMut(KernelSource, String)| {
        for (k, _) in m.launches() {
            for e in k.entry_points() {
                add(k.source(), e);
            }
            if k == SpmvKernel::CsrMerge {
                add(k.source(), MERGE_PARTITION.to_string());
            }
        }
    };
    add(
        KernelSource::Vector,
        choice.update_op().kernel(choice.update.variant).to_string(),
    );
    add(
        KernelSource::Vector,
        VectorKernel::Xpay(AUX_XPAY).to_string(),
    );
    spmv(&choice.a.method, &mut add);
    match &choice.precond {
        PrecondChoice::None => {}
        PrecondChoice::Jacobi(e) => add(
            KernelSource::Precond,
            PrecondKernel::Jacobi(e.loads).to_string(),
        ),
        PrecondChoice::Factored { k, kt } => {
            spmv(&k.method, &mut add);
            spmv(&kt.method, &mut add);
        }
        PrecondChoice::Explicit { m } => spmv(&m.method, &mut add),
    }
    if let (Some(_), Some((k, _))) = (choice.fused_dots, choice.a.method.dot3_variant()) {
        if let Some(e) = k.dot3_entry_point() {
            add(k.source(), e.to_string());
        }
    }
    let d = choice.dot3.kernel;
    for e in d.entry_points().iter().chain(d.next_entry_points()) {
        add(KernelSource::Dot, e.to_string());
    }
    add(KernelSource::Dot, AUX_DOT.to_string());
    out
}

/// The entry points of a block's halo multiply, of the pack of its send buffer and of the sum
/// of the blocks' dots ([`autopcg_gpu::kernels::blocks`]).
pub const BLOCK_ENTRY_POINTS: [(KernelSource, &str); 4] = [
    (KernelSource::Vector, "gather_f64"),
    (KernelSource::Dot, "dot3_slot"),
    (KernelSource::Dot, "dot3_slots_advance"),
    (KernelSource::Dot, "dot3_slots_advance_next"),
];

/// Every entry point the solver of `plan` launches, by source file: [`entry_points`] of its
/// one block, or for a plan split into row blocks, per block its update (`cg_update_*`, u in
/// its own vector, as the multi-block solver runs it), its operands' SpMV kernels, its
/// preconditioner's kernel and its halo multiply's add variant, with the kernels every block
/// shares ([`BLOCK_ENTRY_POINTS`], [`AUX_XPAY`], [`AUX_DOT`]).
pub fn plan_entry_points(plan: &SavedPlan) -> BTreeMap<KernelSource, Vec<String>> {
    if !plan.is_split() {
        return entry_points(plan.choice());
    }
    let mut out: BTreeMap<KernelSource, Vec<String>> = BTreeMap::new();
    let mut add = |src: KernelSource, name: String| {
        let v = out.entry(src).or_default();
        if !v.contains(&name) {
            v.push(name);
        }
    };
    for b in &plan.blocks {
        let c = &b.choice;
        add(
            KernelSource::Vector,
            VectorOp::CgUpdate.kernel(c.update.variant).to_string(),
        );
        let mut methods = vec![c.a.method];
        match &c.precond {
            PrecondChoice::None => {}
            PrecondChoice::Jacobi(e) => add(
                KernelSource::Precond,
                PrecondKernel::Jacobi(e.loads).to_string(),
            ),
            PrecondChoice::Factored { k, kt } => methods.extend([k.method, kt.method]),
            PrecondChoice::Explicit { m } => methods.push(m.method),
        }
        for m in methods {
            for (k, _) in m.launches() {
                for e in k.entry_points() {
                    add(k.source(), e);
                }
                if k == SpmvKernel::CsrMerge {
                    add(k.source(), MERGE_PARTITION.to_string());
                }
            }
        }
        if let Some(e) = b.halo.and_then(|h| h.entry_point()) {
            add(KernelSource::SpmvCsr, e.to_string());
        }
    }
    for (src, e) in BLOCK_ENTRY_POINTS {
        add(src, e.to_string());
    }
    add(
        KernelSource::Vector,
        VectorKernel::Xpay(AUX_XPAY).to_string(),
    );
    add(KernelSource::Dot, AUX_DOT.to_string());
    out
}

/// The `#define` lines that fix a source's compile-time knobs for `choice`.
pub fn fixed_defines(src: KernelSource, choice: &GpuPlanChoice) -> Vec<(String, String)> {
    match src {
        KernelSource::Dot => vec![("BLOCK_SIZE".into(), choice.dot3.config.threads.to_string())],
        KernelSource::SpmvCsr => vec![
            ("MERGE_ITEMS".into(), MERGE_ITEMS.to_string()),
            ("MERGE_MAX_THREADS".into(), MERGE_MAX_THREADS.to_string()),
        ],
        _ => Vec::new(),
    }
}

/// A kernel source as emitted: its file name and text.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelFile {
    /// File name (`dot.cu`, `common.cuh`...).
    pub name: String,
    /// The text.
    pub text: String,
    /// The entry points it defines (empty for headers).
    pub entries: Vec<String>,
}

/// The headers every kernel file includes, unchanged.
pub fn headers() -> Vec<KernelFile> {
    HEADERS
        .iter()
        .map(|(name, text)| KernelFile {
            name: name.to_string(),
            text: text.to_string(),
            entries: Vec::new(),
        })
        .collect()
}

/// Every kernel file of `plan`: each source that holds one of its entry points
/// ([`plan_entry_points`]), cut down to them, knobs fixed (every block of a split plan reduces
/// with block 0's block size), with a preface naming what it holds.
pub fn kernel_files(plan: &SavedPlan, banner: &str) -> Result<Vec<KernelFile>, EmitError> {
    let choice = plan.choice();
    let mut out = Vec::new();
    for (src, entries) in plan_entry_points(plan) {
        let text = source_text(src);
        let cut = keep_entry_points(text, &entries).map_err(|reason| EmitError::Kernels {
            file: src.file_name().to_string(),
            reason,
        })?;
        let mut pre = format!(
            "// {file}: {banner}\n// From kernels/{file} of autopcg, cut down to the entry points \
             this plan launches:\n//   {list}\n",
            file = src.file_name(),
            list = entries.join(", ")
        );
        let defines = fixed_defines(src, choice);
        if !defines.is_empty() {
            pre.push_str("// Compile-time values fixed by the plan:\n");
            for (n, v) in &defines {
                pre.push_str(&format!("#define {n} {v}\n"));
            }
        }
        pre.push('\n');
        out.push(KernelFile {
            name: src.file_name().to_string(),
            text: pre + &cut,
            entries,
        });
    }
    Ok(out)
}

/// One `extern "C" __global__` definition found in a source: its name and the byte range to
/// remove (from the start of its first attached comment line to the end of the line holding
/// its closing brace).
#[derive(Debug, Clone, PartialEq)]
struct Definition {
    name: String,
    start: usize,
    end: usize,
}

/// Skips a comment or a string/char literal starting at byte `i` of `b`; returns the index
/// after it, or `None` when nothing is skipped there.
fn skip_non_code(b: &[u8], i: usize) -> Option<usize> {
    match (b[i], b.get(i + 1)) {
        (b'/', Some(b'/')) => Some(
            b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p),
        ),
        (b'/', Some(b'*')) => Some(
            b[i + 2..]
                .windows(2)
                .position(|w| w == b"*/")
                .map_or(b.len(), |p| i + 2 + p + 2),
        ),
        (q @ (b'"' | b'\''), _) => {
            let mut j = i + 1;
            while j < b.len() && b[j] != q {
                if b[j] == b'\\' {
                    j += 1;
                }
                j += 1;
            }
            Some((j + 1).min(b.len()))
        }
        _ => None,
    }
}

/// The `extern "C" __global__` definitions of `text`, in order.
fn definitions(text: &str) -> Result<Vec<Definition>, String> {
    const MARK: &str = "extern \"C\" __global__";
    let b = text.as_bytes();
    let mut defs = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if let Some(next) = skip_non_code(b, i) {
            i = next;
            continue;
        }
        if !text[i..].starts_with(MARK) {
            i += 1;
            continue;
        }
        let start = i;
        // The signature runs to the first `{` outside parentheses; the body to its match.
        let mut j = i + MARK.len();
        let mut paren = 0i32;
        let mut open = None;
        while j < b.len() {
            if let Some(next) = skip_non_code(b, j) {
                j = next;
                continue;
            }
            match b[j] {
                b'(' => paren += 1,
                b')' => paren -= 1,
                b'{' if paren == 0 => {
                    open = Some(j);
                    break;
                }
                b';' if paren == 0 => break,
                _ => {}
            }
            j += 1;
        }
        let Some(open) = open else {
            // A declaration without a body: nothing to cut.
            i = j + 1;
            continue;
        };
        let name = definition_name(&text[start + MARK.len()..open])
            .ok_or_else(|| format!("no kernel name in {:?}", &text[start..open]))?;
        let mut depth = 0i32;
        let mut k = open;
        let mut close = None;
        while k < b.len() {
            if let Some(next) = skip_non_code(b, k) {
                k = next;
                continue;
            }
            match b[k] {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(k);
                        break;
                    }
                }
                _ => {}
            }
            k += 1;
        }
        let close = close.ok_or_else(|| format!("the body of {name} has no closing brace"))?;
        let end = b[close..]
            .iter()
            .position(|&c| c == b'\n')
            .map_or(b.len(), |p| close + p + 1);
        defs.push(Definition {
            name,
            start: attached_comment_start(text, start),
            end,
        });
        i = end;
    }
    Ok(defs)
}

/// The kernel's name in a signature (what follows `extern "C" __global__` up to the body): the
/// first identifier followed by `(` that is not `__launch_bounds__`.
fn definition_name(sig: &str) -> Option<String> {
    let b = sig.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_alphabetic() || b[i] == b'_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let ident = &sig[s..i];
            let rest = sig[i..].trim_start();
            if rest.starts_with('(') && ident != "__launch_bounds__" {
                return Some(ident.to_string());
            }
        } else {
            i += 1;
        }
    }
    None
}

/// The start of the run of `//` comment lines directly above the line at `pos` (no blank line
/// between), or the start of that line.
fn attached_comment_start(text: &str, pos: usize) -> usize {
    let line_start = text[..pos].rfind('\n').map_or(0, |p| p + 1);
    let mut start = line_start;
    while start > 0 {
        let prev_end = start - 1;
        let prev_start = text[..prev_end].rfind('\n').map_or(0, |p| p + 1);
        if text[prev_start..prev_end].trim_start().starts_with("//") {
            start = prev_start;
        } else {
            break;
        }
    }
    start
}

/// `text` without the `extern "C" __global__` definitions not named in `keep`. Every name in
/// `keep` must be defined.
pub fn keep_entry_points(text: &str, keep: &[String]) -> Result<String, String> {
    let defs = definitions(text)?;
    for k in keep {
        if !defs.iter().any(|d| &d.name == k) {
            return Err(format!("entry point {k} is not defined"));
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for d in defs.iter().filter(|d| !keep.contains(&d.name)) {
        out.push_str(&text[at..d.start]);
        at = d.end;
    }
    out.push_str(&text[at..]);
    Ok(out)
}

/// The names of the `extern "C" __global__` definitions of `text`.
pub fn defined_entry_points(text: &str) -> Result<Vec<String>, String> {
    Ok(definitions(text)?.into_iter().map(|d| d.name).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pool_kernel_is_found_with_its_name() {
        for src in KernelSource::ALL {
            let names = defined_entry_points(source_text(src)).unwrap();
            assert!(!names.is_empty(), "{src}");
            // The catalog's entry points of the source are among them.
            for (spec, entries) in autopcg_gpu::sources::catalog() {
                if spec.source == src {
                    for e in entries {
                        assert!(names.contains(&e), "{e} not found in {src}: {names:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn cutting_keeps_exactly_the_named_kernels() {
        let text = source_text(KernelSource::Dot);
        let keep = vec!["dot3_last_block".to_string(), "dot_last_block".to_string()];
        let cut = keep_entry_points(text, &keep).unwrap();
        let mut left = defined_entry_points(&cut).unwrap();
        left.sort();
        assert_eq!(left, keep);
        // Helpers stay.
        assert!(cut.contains("dot3_last_block_body"));
        assert!(cut.contains("__device__ __forceinline__ void dot3_thread"));
        assert!(keep_entry_points(text, &["nope".to_string()]).is_err());
    }

    #[test]
    fn names_are_read_past_launch_bounds_and_comments() {
        let t =
            "// a { brace in a comment\nextern \"C\" __global__ void __launch_bounds__(N)\n    \
                 k1(int a) { if (a) { } }\n/* } */\nextern \"C\" __global__ void k2() {}\n";
        let d = definitions(t).unwrap();
        assert_eq!(
            d.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
            ["k1", "k2"]
        );
        assert_eq!(d[0].start, 0, "the attached comment goes with the kernel");
        let cut = keep_entry_points(t, &["k2".to_string()]).unwrap();
        assert_eq!(cut, "/* } */\nextern \"C\" __global__ void k2() {}\n");
    }
}
