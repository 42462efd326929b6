//! What every CLI test file needs: the binary, running it, and its output as text or JSON.
#![allow(dead_code)] // each test file uses its own subset
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The binary cargo built for these tests; when the test binary was carried to another machine
/// (the GPU bundle), that path is gone: then `AUTOPCG_BIN`, else the bundle's own binary.
pub fn bin() -> Command {
    let built = PathBuf::from(env!("CARGO_BIN_EXE_autopcg"));
    let path = if built.exists() {
        built
    } else if let Some(p) = std::env::var_os("AUTOPCG_BIN") {
        PathBuf::from(p)
    } else {
        // Absolute, so that a test may run the binary from another working directory.
        let rel = Path::new("../../.gpu-bundle/bin/autopcg");
        std::env::current_dir().map_or_else(|_| rel.to_path_buf(), |d| d.join(rel))
    };
    Command::new(path)
}

/// Runs the binary with `args`.
pub fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("the binary runs")
}

/// Writes `text` to `dir/name`.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The standard error, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The standard output, parsed as JSON.
pub fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&o.stdout),
            stderr(o)
        )
    })
}
