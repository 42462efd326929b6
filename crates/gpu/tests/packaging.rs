//! The crate packs the CUDA sources it embeds. `crates/gpu/kernels` is a symbolic link to the
//! workspace's `kernels/` (the one home of the sources); `include_str!` reads through it, and
//! `cargo package` follows it, so the packaged crate carries real copies and builds alone.
//! CPU only; the test that runs `cargo package` skips (with one line) when not run by cargo or
//! outside the workspace.
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use autopcg_gpu::sources::{embedded_files, header_text, source_text};
use autopcg_gpu::KernelSource;

/// The kernels folder as the crate sees it (tests run in the package's folder).
const CRATE_KERNELS: &str = "kernels";
/// The workspace's kernels folder, seen from the package's folder.
const WORKSPACE_KERNELS: &str = "../../kernels";

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn embedded_texts_are_the_files_under_kernels() {
    let dir = Path::new(CRATE_KERNELS);
    for src in KernelSource::ALL {
        let path = dir.join(src.file_name());
        assert!(
            read(&path) == source_text(src),
            "{} differs from the embedded text of {src}",
            path.display()
        );
    }
    for name in KernelSource::HEADERS {
        let path = dir.join(name);
        let embedded = header_text(name).unwrap_or_else(|| panic!("{name} is not embedded"));
        assert!(
            read(&path) == embedded,
            "{} differs from the embedded text",
            path.display()
        );
    }
}

#[test]
fn crate_kernels_link_to_the_workspace_folder() {
    let ws = Path::new(WORKSPACE_KERNELS);
    if !ws.is_dir() {
        println!("crate_kernels_link_to_the_workspace_folder: skipped, not inside the workspace");
        return;
    }
    let link = Path::new(CRATE_KERNELS);
    // In a git checkout the link must be a link (a copy of the working tree made elsewhere, as
    // on the GPU host, may have replaced it by the files; the texts are checked above).
    if Path::new("../../.git").exists() {
        let meta = std::fs::symlink_metadata(link).unwrap();
        assert!(
            meta.file_type().is_symlink(),
            "{CRATE_KERNELS} must be a link to {WORKSPACE_KERNELS}, not a second copy"
        );
        assert_eq!(
            std::fs::canonicalize(link).unwrap(),
            std::fs::canonicalize(ws).unwrap()
        );
    }
    // Every CUDA file of the workspace is embedded (so none is left out of the package).
    let embedded: BTreeSet<String> = embedded_files().into_iter().collect();
    for entry in std::fs::read_dir(ws).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".cu") || name.ends_with(".cuh") {
            let rel = format!("kernels/{name}");
            assert!(
                embedded.contains(&rel),
                "{rel} is not embedded by the crate"
            );
        }
    }
}

#[test]
fn package_lists_every_embedded_kernel_file() {
    const NAME: &str = "package_lists_every_embedded_kernel_file";
    let Some(cargo) = std::env::var_os("CARGO") else {
        println!("{NAME}: skipped, not run by cargo (CARGO is not set)");
        return;
    };
    let root = Path::new("../..");
    if !root.join("Cargo.toml").is_file() || !Path::new(WORKSPACE_KERNELS).is_dir() {
        println!("{NAME}: skipped, not inside the workspace");
        return;
    }
    let out = Command::new(cargo)
        .args([
            "package",
            "-p",
            "autopcg-gpu",
            "--list",
            "--allow-dirty",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .unwrap_or_else(|e| panic!("running cargo package: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo package --list failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: BTreeSet<&str> = stdout.lines().map(str::trim).collect();
    assert!(
        listed.contains("src/lib.rs"),
        "unexpected listing:\n{stdout}"
    );
    let missing: Vec<String> = embedded_files()
        .into_iter()
        .filter(|f| !listed.contains(f.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "cargo package leaves out {missing:?}; listing:\n{stdout}"
    );
}
