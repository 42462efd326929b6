//! The kernel pool: every CUDA source file embedded in the binary, the modules built from them
//! (a source plus `-D` defines) and the entry points each module must contain.
//!
//! The sources live in the workspace's `kernels/` folder, their one home. The crate reaches them
//! through `crates/gpu/kernels`, a symbolic link to `../../kernels`, so that every
//! `include_str!` path stays inside the crate: `cargo package` follows the link and packs the
//! files themselves, and the packaged crate builds on its own. The `packaging` test checks that
//! the package lists every file named here ([`embedded_files`]).
use std::fmt;

pub use autopcg_catalog::DOT_BLOCK_SIZES;

/// Headers the kernel files include with `#include "name"`, handed to NVRTC by name.
pub const HEADERS: [(&str, &str); 2] = [
    ("common.cuh", include_str!("../kernels/common.cuh")),
    ("cg_scalars.cuh", include_str!("../kernels/cg_scalars.cuh")),
];

pub use autopcg_catalog::KernelSource;

/// The text of the header `name` (one of [`HEADERS`]), as embedded at build time.
pub fn header_text(name: &str) -> Option<&'static str> {
    HEADERS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// Every file under `kernels/` the crate embeds, as paths relative to the crate's root
/// (`kernels/vector.cu`): the sources of [`KernelSource::ALL`], then the [`HEADERS`].
pub fn embedded_files() -> Vec<String> {
    KernelSource::ALL
        .iter()
        .map(|s| s.file_name())
        .chain(HEADERS.iter().map(|(n, _)| *n))
        .map(|n| format!("kernels/{n}"))
        .collect()
}

/// The text of `src`, as embedded at build time.
pub fn source_text(src: KernelSource) -> &'static str {
    match src {
        KernelSource::Vector => include_str!("../kernels/vector.cu"),
        KernelSource::Dot => include_str!("../kernels/dot.cu"),
        KernelSource::Precond => include_str!("../kernels/precond.cu"),
        KernelSource::SpmvCsr => include_str!("../kernels/spmv_csr.cu"),
        KernelSource::SpmvEll => include_str!("../kernels/spmv_ell.cu"),
        KernelSource::SpmvDia => include_str!("../kernels/spmv_dia.cu"),
        KernelSource::SpmvCoo => include_str!("../kernels/spmv_coo.cu"),
        KernelSource::Convert => include_str!("../kernels/convert.cu"),
    }
}

/// A module: one source compiled with a set of `-D` defines. Two specs are the same module when
/// source and defines are equal (defines are kept sorted).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct ModuleSpec {
    /// The source file.
    pub source: KernelSource,
    defines: Vec<(String, String)>,
}

impl ModuleSpec {
    /// The source with no defines (every knob at its `#ifndef` default).
    pub fn plain(source: KernelSource) -> Self {
        ModuleSpec {
            source,
            defines: Vec::new(),
        }
    }

    /// Adds (or replaces) `-Dname=value`.
    pub fn define(mut self, name: impl Into<String>, value: impl fmt::Display) -> Self {
        let name = name.into();
        let value = value.to_string();
        match self
            .defines
            .binary_search_by(|(n, _)| n.as_str().cmp(&name))
        {
            Ok(i) => self.defines[i].1 = value,
            Err(i) => self.defines.insert(i, (name, value)),
        }
        self
    }

    /// The reduction module for `block_size` threads per block.
    pub fn dot(block_size: u32) -> Self {
        ModuleSpec::plain(KernelSource::Dot).define("BLOCK_SIZE", block_size)
    }

    /// The defines, sorted by name.
    pub fn defines(&self) -> &[(String, String)] {
        &self.defines
    }

    /// The defines as NVRTC options (`-DNAME=VALUE`).
    pub fn define_options(&self) -> Vec<String> {
        self.defines
            .iter()
            .map(|(n, v)| format!("-D{n}={v}"))
            .collect()
    }
}

impl fmt::Display for ModuleSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.source.file_name())?;
        for (n, v) in &self.defines {
            write!(f, " -D{n}={v}")?;
        }
        Ok(())
    }
}

/// Every module the crate's launch wrappers use, with the entry points each must export. The
/// registry compiles exactly these ahead of timing ([`crate::GpuDevice::compile_all`]), and the
/// `kernels_compile` test checks them without a GPU.
pub fn catalog() -> Vec<(ModuleSpec, Vec<String>)> {
    use crate::kernels::{
        convert::ConvertKernel,
        dot::{Dot3Kernel, DotKernel, DOT_FINISH},
        precond::PrecondKernel,
        refresh::RefreshKernel,
        spmv::SpmvKernel,
        ssor::SsorBuildKernel,
        vector::VectorKernel,
    };
    let mut vector: Vec<String> = VectorKernel::all().iter().map(|k| k.to_string()).collect();
    vector.push(crate::kernels::blocks::GATHER.to_string());
    vector.push(crate::scalars::POLL_GATHER.to_string());
    let mut out = vec![(ModuleSpec::plain(KernelSource::Vector), vector)];
    for bs in DOT_BLOCK_SIZES {
        let mut entries: Vec<String> = DotKernel::ALL.iter().map(|k| k.to_string()).collect();
        entries.push(DOT_FINISH.to_string());
        entries.extend(
            Dot3Kernel::ALL
                .iter()
                .flat_map(|k| k.entry_points().iter().chain(k.next_entry_points()))
                .map(|s| s.to_string()),
        );
        entries.extend(
            crate::kernels::blocks::entry_points(bs)
                .into_iter()
                .filter(|(spec, _)| spec.source == KernelSource::Dot)
                .map(|(_, e)| e.to_string()),
        );
        entries.sort();
        entries.dedup();
        out.push((ModuleSpec::dot(bs), entries));
    }
    out.push((
        ModuleSpec::plain(KernelSource::Precond),
        PrecondKernel::ALL
            .iter()
            .map(|k| k.to_string())
            .chain(RefreshKernel::ALL.iter().map(|k| k.to_string()))
            .chain(SsorBuildKernel::ALL.iter().map(|k| k.to_string()))
            .collect(),
    ));
    for src in [
        KernelSource::SpmvCsr,
        KernelSource::SpmvEll,
        KernelSource::SpmvDia,
        KernelSource::SpmvCoo,
    ] {
        let mut entries: Vec<String> = SpmvKernel::all()
            .into_iter()
            .filter(|k| k.source() == src)
            .flat_map(|k| {
                let mut v = k.entry_points();
                v.extend(k.dot3_entry_point().map(str::to_string));
                v
            })
            .collect();
        if src == KernelSource::SpmvCsr {
            entries.push(crate::kernels::spmv::MERGE_PARTITION.to_string());
            entries.extend(
                SpmvKernel::with_add_variant()
                    .into_iter()
                    .filter_map(SpmvKernel::add_entry_point)
                    .map(str::to_string),
            );
        }
        out.push((ModuleSpec::plain(src), entries));
    }
    out.push((
        ModuleSpec::plain(KernelSource::Convert),
        ConvertKernel::ALL.iter().map(|k| k.to_string()).collect(),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defines_are_sorted_and_replaced() {
        let m = ModuleSpec::plain(KernelSource::Dot)
            .define("ZETA", 1)
            .define("ALPHA", 2)
            .define("ZETA", 3);
        assert_eq!(m.define_options(), vec!["-DALPHA=2", "-DZETA=3"]);
        assert_eq!(m.to_string(), "dot.cu -DALPHA=2 -DZETA=3");
        assert_eq!(
            m,
            ModuleSpec::plain(KernelSource::Dot)
                .define("ALPHA", 2)
                .define("ZETA", 3)
        );
    }

    #[test]
    fn every_catalog_entry_is_declared_in_its_source() {
        for (spec, entries) in catalog() {
            assert!(!entries.is_empty(), "{spec} has no entry points");
            let text = crate::sources::source_text(spec.source);
            for e in entries {
                // The name followed by "(" and preceded by a blank or ")" (a __launch_bounds__).
                let pat = format!("{e}(");
                let declared = text.match_indices(&pat).any(|(i, _)| {
                    text[..i]
                        .chars()
                        .next_back()
                        .is_some_and(|c| c.is_whitespace() || c == ')')
                });
                assert!(declared, "{e} not declared in {}", spec.source);
            }
        }
    }

    #[test]
    fn embedded_headers_are_the_catalogs() {
        let names: Vec<&str> = HEADERS.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, KernelSource::HEADERS);
        for n in KernelSource::HEADERS {
            assert!(header_text(n).is_some_and(|t| !t.is_empty()), "{n}");
        }
        assert_eq!(header_text("nope.cuh"), None);
        let files = embedded_files();
        assert_eq!(files.len(), KernelSource::ALL.len() + HEADERS.len());
        assert!(files.contains(&"kernels/spmv_csr.cu".to_string()));
    }

    #[test]
    fn every_source_is_in_the_catalog() {
        let cat = catalog();
        for s in KernelSource::ALL {
            assert!(
                cat.iter().any(|(m, _)| m.source == s),
                "{s} missing from the catalog"
            );
        }
    }
}
