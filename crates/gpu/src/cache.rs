//! The on-disk cache of compiled kernel images.
//!
//! An entry is keyed by a SHA-256 over everything that decides the machine code: the kernel
//! source and every header, the NVRTC options (defines included), the target architecture and
//! the NVRTC version. The file holds a magic tag, the payload length and the payload's own
//! SHA-256, so a truncated or damaged entry is detected, deleted and recompiled; nothing about
//! the cache (an unwritable folder, a corrupt file) is ever fatal.
//!
//! Location: `$AUTOPCG_CACHE_DIR` if set, else `$XDG_CACHE_HOME/autopcg/kernels`, else
//! `$HOME/.cache/autopcg/kernels`; with none of them the cache lives in memory only.
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::compile::{compile_module, compile_options, Target};
use crate::probe::nvrtc_version;
use crate::sources::{ModuleSpec, HEADERS};
use crate::GpuError;

/// Environment variable overriding the cache folder.
pub const CACHE_DIR_ENV: &str = "AUTOPCG_CACHE_DIR";

const MAGIC: &[u8; 8] = b"APCGKC01";
const HEADER_LEN: usize = 8 + 8 + 32;

/// Counters of what the cache did since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheStats {
    /// Images read back from disk.
    pub hits: u64,
    /// Images compiled because no entry existed.
    pub misses: u64,
    /// Entries found damaged, deleted and recompiled.
    pub corrupt: u64,
    /// Entries that could not be written (the image was still used).
    pub write_failures: u64,
}

/// The default cache folder (see the module documentation), or `None` when no variable names
/// one.
pub fn default_cache_dir() -> Option<PathBuf> {
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(d) = nonempty(CACHE_DIR_ENV) {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = nonempty("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("autopcg").join("kernels"));
    }
    nonempty("HOME").map(|h| {
        PathBuf::from(h)
            .join(".cache")
            .join("autopcg")
            .join("kernels")
    })
}

/// The cache key of `spec` compiled for `target` by NVRTC `nvrtc` (major, minor): 64 hex digits.
pub fn cache_key(spec: &ModuleSpec, target: Target, nvrtc: (i32, i32)) -> String {
    let mut h = Sha256::new();
    let mut field = |label: &str, data: &[u8]| {
        h.update(label.as_bytes());
        h.update((data.len() as u64).to_le_bytes());
        h.update(data);
    };
    field("format", b"autopcg kernel cache 1");
    field("file", spec.source.file_name().as_bytes());
    field(
        "source",
        crate::sources::source_text(spec.source).as_bytes(),
    );
    for (name, text) in HEADERS {
        field("header", name.as_bytes());
        field("header-text", text.as_bytes());
    }
    for o in compile_options(spec, target) {
        field("option", o.as_bytes());
    }
    field("target", format!("{target:?}").as_bytes());
    field("nvrtc", format!("{}.{}", nvrtc.0, nvrtc.1).as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Encodes an image as a cache file.
fn encode(image: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + image.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(image.len() as u64).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(image));
    out.extend_from_slice(image);
    out
}

/// Decodes a cache file; `None` when anything is off.
fn decode(bytes: &[u8]) -> Option<Vec<u8>> {
    if bytes.len() < HEADER_LEN || &bytes[..8] != MAGIC {
        return None;
    }
    let len = u64::from_le_bytes(bytes[8..16].try_into().ok()?);
    let payload = &bytes[HEADER_LEN..];
    if payload.len() as u64 != len || payload.is_empty() {
        return None;
    }
    if Sha256::digest(payload).as_slice() != &bytes[16..HEADER_LEN] {
        return None;
    }
    Some(payload.to_vec())
}

/// Compiled images on disk, with counters.
#[derive(Debug)]
pub struct KernelCache {
    dir: Option<PathBuf>,
    stats: Mutex<CacheStats>,
}

impl KernelCache {
    /// A cache in `dir` (created when first written), or memory-only with `None`.
    pub fn new(dir: Option<PathBuf>) -> Self {
        KernelCache {
            dir,
            stats: Mutex::new(CacheStats::default()),
        }
    }

    /// A cache in [`default_cache_dir`].
    pub fn at_default_location() -> Self {
        KernelCache::new(default_cache_dir())
    }

    /// The folder, if the cache has one.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The counters so far.
    pub fn stats(&self) -> CacheStats {
        self.stats.lock().map(|s| *s).unwrap_or_default()
    }

    fn bump(&self, f: impl FnOnce(&mut CacheStats)) {
        if let Ok(mut s) = self.stats.lock() {
            f(&mut s);
        }
    }

    /// Path of the entry for `key`.
    pub fn entry_path(&self, key: &str) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(format!("{key}.bin")))
    }

    /// Reads the entry for `key`; a damaged entry is deleted, counted and reported as absent.
    pub fn load(&self, key: &str) -> Option<Vec<u8>> {
        let path = self.entry_path(key)?;
        let bytes = fs::read(&path).ok()?;
        match decode(&bytes) {
            Some(img) => Some(img),
            None => {
                self.bump(|s| s.corrupt += 1);
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    /// Writes the entry for `key` (to a temporary file renamed into place, so readers never see
    /// half an entry). Failures are counted, not returned.
    pub fn store(&self, key: &str, image: &[u8]) {
        let Some(path) = self.entry_path(key) else {
            return;
        };
        let ok = (|| -> std::io::Result<()> {
            let dir = path.parent().unwrap_or(Path::new("."));
            fs::create_dir_all(dir)?;
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let tmp = dir.join(format!("{key}.tmp.{}.{nanos}", std::process::id()));
            let mut f = fs::File::create(&tmp)?;
            f.write_all(&encode(image))?;
            f.sync_all()?;
            drop(f);
            fs::rename(&tmp, &path).inspect_err(|_| {
                let _ = fs::remove_file(&tmp);
            })
        })();
        if ok.is_err() {
            self.bump(|s| s.write_failures += 1);
        }
    }

    /// Deletes the entry for `key` (used when the driver rejects a cached image).
    pub fn invalidate(&self, key: &str) {
        if let Some(p) = self.entry_path(key) {
            let _ = fs::remove_file(p);
        }
    }

    /// The image of `spec` for `target`: from disk when a sound entry exists, else compiled by
    /// NVRTC and stored. Returns the image, its key and whether it came from disk.
    pub fn get_or_compile(
        &self,
        spec: &ModuleSpec,
        target: Target,
    ) -> Result<(Vec<u8>, String, bool), GpuError> {
        let key = cache_key(spec, target, nvrtc_version()?);
        if let Some(img) = self.load(&key) {
            self.bump(|s| s.hits += 1);
            return Ok((img, key, true));
        }
        let img = compile_module(spec, target)?;
        self.bump(|s| s.misses += 1);
        self.store(&key, &img);
        Ok((img, key, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::KernelSource;

    #[test]
    fn encode_decode_round_trip_and_damage_detection() {
        let img = b"some image bytes".to_vec();
        let enc = encode(&img);
        assert_eq!(decode(&enc), Some(img.clone()));
        // A flipped payload byte, a truncated file, a wrong magic, an empty payload.
        let mut bad = enc.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(decode(&bad), None);
        assert_eq!(decode(&enc[..enc.len() - 1]), None);
        let mut bad = enc.clone();
        bad[0] = b'X';
        assert_eq!(decode(&bad), None);
        assert_eq!(decode(&encode(&[])), None);
        assert_eq!(decode(&[]), None);
    }

    #[test]
    fn store_load_and_corrupt_entry_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let cache = KernelCache::new(Some(dir.path().join("nested")));
        let key = "k".repeat(64);
        assert_eq!(cache.load(&key), None);
        cache.store(&key, b"payload");
        assert_eq!(cache.load(&key).as_deref(), Some(&b"payload"[..]));
        let path = cache.entry_path(&key).unwrap();
        let mut bytes = fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n - 2] ^= 0xff;
        fs::write(&path, &bytes).unwrap();
        assert_eq!(cache.load(&key), None);
        assert!(!path.exists(), "a corrupt entry is deleted");
        assert_eq!(cache.stats().corrupt, 1);
        // Only the entry is left in the folder: no temporary files.
        cache.store(&key, b"again");
        let names: Vec<_> = fs::read_dir(dir.path().join("nested"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn unwritable_cache_is_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        fs::write(&file, b"x").unwrap();
        // The cache folder would have to be created below a regular file: impossible.
        let cache = KernelCache::new(Some(file.join("sub")));
        cache.store("key", b"payload");
        assert_eq!(cache.stats().write_failures, 1);
        assert_eq!(cache.load("key"), None);
    }

    #[test]
    fn key_depends_on_defines_target_and_version() {
        let a = ModuleSpec::dot(256);
        let b = ModuleSpec::dot(512);
        let k = |s: &ModuleSpec, t, v| cache_key(s, t, v);
        let base = k(&a, Target::Cubin(90), (13, 0));
        assert_eq!(base.len(), 64);
        assert_eq!(base, k(&a, Target::Cubin(90), (13, 0)));
        assert_ne!(base, k(&b, Target::Cubin(90), (13, 0)));
        assert_ne!(base, k(&a, Target::Cubin(80), (13, 0)));
        assert_ne!(base, k(&a, Target::Ptx(90), (13, 0)));
        assert_ne!(base, k(&a, Target::Cubin(90), (13, 1)));
        assert_ne!(
            base,
            k(
                &ModuleSpec::plain(KernelSource::Vector),
                Target::Cubin(90),
                (13, 0)
            )
        );
    }
}
