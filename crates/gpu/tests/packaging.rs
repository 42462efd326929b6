//! The crate packs the CUDA sources it embeds. `crates/gpu/kernels` is a symbolic link to the
//! workspace's `kernels/` (the one home of the sources); `include_str!` reads through it, and
//! `cargo package` follows it, so the packaged crate carries real copies and builds alone.
//! CPU only; the tests that need the workspace (and, for `cargo package`, to be run by cargo) are
//! reported ignored, with the reason said once, where they do not have it.
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, ExitCode};

use autopcg_gpu::sources::{embedded_files, header_text, source_text};
use autopcg_gpu::KernelSource;
use libtest_mimic::{Arguments, Completion, Trial};

/// The kernels folder as the crate sees it (tests run in the package's folder).
const CRATE_KERNELS: &str = "kernels";
/// The workspace's kernels folder, seen from the package's folder.
const WORKSPACE_KERNELS: &str = "../../kernels";

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

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

fn crate_kernels_link_to_the_workspace_folder(_: OsString) {
    let ws = Path::new(WORKSPACE_KERNELS);
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

fn package_lists_every_embedded_kernel_file(cargo: OsString) {
    let root = Path::new("../..");
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

/// Why the tests that need the workspace cannot run here, if they cannot.
fn outside_workspace() -> Option<String> {
    let inside = Path::new("../../Cargo.toml").is_file() && Path::new(WORKSPACE_KERNELS).is_dir();
    (!inside).then(|| "not inside the workspace".to_string())
}

/// A trial of `body` given `what` it needs; where that is missing (the reason), reported
/// ignored with the reason, which is printed once unless the tests are only listed.
fn needing(
    args: &Arguments,
    name: &'static str,
    what: Result<OsString, String>,
    body: fn(OsString),
) -> Trial {
    match what {
        Ok(v) => Trial::test(name, move || {
            body(v);
            Ok(())
        }),
        Err(why) => {
            if !args.list {
                eprintln!("note: {name} ignored: {why}");
            }
            Trial::ignorable_test(name, move || Ok(Completion::ignored_with(why)))
                .with_ignored_flag(true)
        }
    }
}

fn main() -> ExitCode {
    let args = Arguments::from_args();
    let workspace = || outside_workspace().map_or(Ok(OsString::new()), Err);
    let cargo = workspace().and_then(|_| {
        std::env::var_os("CARGO").ok_or_else(|| "not run by cargo (CARGO is not set)".into())
    });
    let trials = vec![
        Trial::test("embedded_texts_are_the_files_under_kernels", || {
            embedded_texts_are_the_files_under_kernels();
            Ok(())
        }),
        needing(
            &args,
            "crate_kernels_link_to_the_workspace_folder",
            workspace(),
            crate_kernels_link_to_the_workspace_folder,
        ),
        needing(
            &args,
            "package_lists_every_embedded_kernel_file",
            cargo,
            package_lists_every_embedded_kernel_file,
        ),
    ];
    libtest_mimic::run(&args, trials).exit_code()
}
