//! Output safety: atomic file writes and the same-file check.
//!
//! [`write_atomic`] writes a file the way an editor saves one: into a new temporary file in the
//! target's folder, flushed and synced to disk, then renamed over the target. A rename within one
//! folder replaces the name in one step, so the target is at every moment either the complete old
//! file or the complete new one: a full disk, a killed process or a failing writer never leaves a
//! truncated file, and never replaces a good earlier one. On any error the temporary file is
//! removed and the target is untouched.
//!
//! [`same_file`] tells whether two paths name one file (device and inode on Unix, canonical paths
//! elsewhere), so that a command can refuse an output that would overwrite one of its inputs
//! before it does any work; [`check_output`] is that refusal as an error.
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::SparseError;

/// Buffer between the caller's writes and the temporary file.
const BUF_BYTES: usize = 1 << 20;

/// Writes a file atomically: `body` writes the whole content into a buffered temporary file in
/// the folder of `path`, which is then flushed, synced to disk (`fsync`) and renamed to `path`.
///
/// On any error (`body` failing, a full disk, a rename refused) the temporary file is removed,
/// `path` keeps whatever it held before, and the error names `path`. An existing target keeps its
/// permissions. A symbolic link as `path` is followed: the file it points to is replaced and the
/// link stays. A target that exists but is not a regular file (`/dev/null`, a named pipe, a
/// terminal) cannot be replaced by a rename and is written directly.
pub fn write_atomic(
    path: impl AsRef<Path>,
    body: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), SparseError> {
    let path = path.as_ref();
    let io_err = |source| SparseError::Io {
        path: path.to_path_buf(),
        source,
    };
    // Follow a symbolic link, so that the link itself is not replaced by a regular file (a
    // dangling one names the file to create, as for `File::create`).
    let target = match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => match fs::canonicalize(path) {
            Ok(t) => t,
            Err(_) => parent_of(path).join(fs::read_link(path).map_err(io_err)?),
        },
        _ => path.to_path_buf(),
    };
    let existing = fs::metadata(&target).ok();
    if let Some(m) = &existing {
        if !m.is_file() {
            if m.is_dir() {
                return Err(io_err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "is a folder, not a file",
                )));
            }
            // A device or a pipe: no rename possible, write straight into it.
            let mut w = BufWriter::with_capacity(BUF_BYTES, File::create(&target).map_err(io_err)?);
            body(&mut w).map_err(io_err)?;
            return w.flush().map_err(io_err);
        }
    }
    let (tmp_path, file) = create_temp(&target).map_err(io_err)?;
    // From here on the temporary file is removed on every error.
    let guard = RemoveOnDrop(Some(tmp_path.clone()));
    if let Some(m) = &existing {
        // Best effort: a new file that cannot take the old permissions keeps the default ones.
        let _ = fs::set_permissions(&tmp_path, m.permissions());
    }
    let mut w = BufWriter::with_capacity(BUF_BYTES, file);
    body(&mut w).map_err(io_err)?;
    let file = w.into_inner().map_err(|e| io_err(e.into_error()))?;
    file.sync_all().map_err(io_err)?;
    drop(file);
    fs::rename(&tmp_path, &target).map_err(io_err)?;
    guard.disarm();
    sync_parent(&target);
    Ok(())
}

/// Removes the file it names when dropped, unless disarmed.
struct RemoveOnDrop(Option<PathBuf>);

impl RemoveOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = fs::remove_file(p);
        }
    }
}

/// The folder a file is created in: its parent, or the current folder for a bare name.
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Creates a new, empty temporary file beside `target` (`.NAME.tmp.PID.K`), never reusing an
/// existing name.
fn create_temp(target: &Path) -> io::Result<(PathBuf, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = parent_of(target);
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "names no file"))?;
    let pid = std::process::id();
    loop {
        let k = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.tmp.{pid}.{k}"));
        match File::options().write(true).create_new(true).open(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && k < 1 << 20 => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Syncs the folder holding `path`, so that the rename itself survives a crash. Best effort:
/// some systems cannot open a folder for syncing, and the data is already safe in the file.
fn sync_parent(path: &Path) {
    #[cfg(unix)]
    if let Ok(d) = File::open(parent_of(path)) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = path;
}

/// Whether `a` and `b` name the same existing file: the same device and inode on Unix (so hard
/// links, symbolic links and different spellings of one path all count), equal canonical paths
/// elsewhere. `false` when either does not exist or cannot be inspected.
pub fn same_file(a: impl AsRef<Path>, b: impl AsRef<Path>) -> bool {
    let (a, b) = (a.as_ref(), b.as_ref());
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (fs::metadata(a), fs::metadata(b)) {
            (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        match (fs::canonicalize(a), fs::canonicalize(b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        }
    }
}

/// Refuses an output path that names one of the inputs (see [`same_file`]), with
/// [`SparseError::OutputIsInput`]. Call it before any work, so that nothing is computed only to
/// be refused, and no input is ever overwritten.
pub fn check_output<P: AsRef<Path>>(
    output: impl AsRef<Path>,
    inputs: impl IntoIterator<Item = P>,
) -> Result<(), SparseError> {
    let output = output.as_ref();
    for input in inputs {
        let input = input.as_ref();
        if same_file(output, input) {
            return Err(SparseError::OutputIsInput {
                output: output.to_path_buf(),
                input: input.to_path_buf(),
            });
        }
    }
    Ok(())
}
