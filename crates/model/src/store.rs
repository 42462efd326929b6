//! Where model files live and how the one for a device is found.
//!
//! A model file is named `<slug>.json` ([`autopcg_catalog::device_slug`] of the device name, e.g.
//! `nvidia-h200.json`). [`search_dirs`] lists, in order: `$AUTOPCG_MODEL_DIR` when set; the
//! `models/` folder of the current directory or of the nearest parent holding one (so a solve
//! run from inside the repository finds the committed models); the `models/` folder beside the
//! executable's parent (an installed tree `bin/`, `models/`); and the user's data directory
//! ([`user_model_dir`]).
use std::path::{Path, PathBuf};

/// Environment variable naming an extra folder searched first for model files.
pub const MODEL_DIR_ENV: &str = "AUTOPCG_MODEL_DIR";

/// `$XDG_DATA_HOME/autopcg/models`, else `$HOME/.local/share/autopcg/models`; `None` when
/// neither variable is set.
pub fn user_model_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d).join("autopcg").join("models"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".local/share/autopcg/models"))
}

/// The `models/` folder of `start` or of its nearest ancestor that has one.
pub fn repository_model_dir(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .map(|d| d.join("models"))
        .find(|m| m.is_dir())
}

/// The folders searched for model files, in order, without duplicates.
pub fn search_dirs() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut add = |p: PathBuf| {
        if !out.contains(&p) {
            out.push(p);
        }
    };
    if let Some(d) = std::env::var_os(MODEL_DIR_ENV).filter(|d| !d.is_empty()) {
        add(PathBuf::from(d));
    }
    if let Some(d) = std::env::current_dir()
        .ok()
        .and_then(|c| repository_model_dir(&c))
    {
        add(d);
    }
    if let Some(d) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().and_then(Path::parent).map(|p| p.join("models")))
        .filter(|d| d.is_dir())
    {
        add(d);
    }
    if let Some(d) = user_model_dir() {
        add(d);
    }
    out
}

/// [`search_dirs`] as one comma-separated line, for messages that say where a model was looked
/// for.
pub fn search_dirs_line() -> String {
    search_dirs()
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The file name of the model of a device called `name`.
pub fn model_file_name(name: &str) -> String {
    format!("{}.json", autopcg_catalog::device_slug(name))
}

/// The first existing model file for device `name` in `dirs`.
pub fn find_model_in(name: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    let file = model_file_name(name);
    dirs.iter().map(|d| d.join(&file)).find(|p| p.is_file())
}

/// The first existing model file for device `name` in [`search_dirs`].
pub fn find_model(name: &str) -> Option<PathBuf> {
    find_model_in(name, &search_dirs())
}

/// Where `autopcg tune` writes a new model by default: the repository's `models/` folder when
/// run from inside one, else the user's data directory, else `./models`.
pub fn default_model_path(name: &str) -> PathBuf {
    let dir = std::env::current_dir()
        .ok()
        .and_then(|c| repository_model_dir(&c))
        .or_else(user_model_dir)
        .unwrap_or_else(|| PathBuf::from("models"));
    dir.join(model_file_name(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_folder_holding_the_slug_file() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        std::fs::write(b.path().join("nvidia-h100.json"), "{}").unwrap();
        let dirs = vec![a.path().to_path_buf(), b.path().to_path_buf()];
        assert_eq!(
            find_model_in("NVIDIA H100 80GB HBM3", &dirs),
            Some(b.path().join("nvidia-h100.json"))
        );
        assert_eq!(find_model_in("NVIDIA H200", &dirs), None);
        std::fs::write(a.path().join("nvidia-h100.json"), "{}").unwrap();
        assert_eq!(
            find_model_in("NVIDIA H100 PCIe", &dirs),
            Some(a.path().join("nvidia-h100.json"))
        );
    }

    #[test]
    fn repository_dir_is_found_from_a_subfolder() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("models")).unwrap();
        std::fs::create_dir_all(root.path().join("a/b")).unwrap();
        assert_eq!(
            repository_model_dir(&root.path().join("a/b")),
            Some(root.path().join("models"))
        );
    }
}
