//! Input and output safety of the Matrix Market reader and writers: one regression test per case
//! of the reliability issue (declared sizes that would need gigabytes, a `.gz` of blank lines,
//! zero rows and bad diagonals, named by file line), the entry-line lookup, atomic writes and the
//! output-is-an-input check. The cases that would abort or be killed without the fixes also run
//! in a child process under an address-space limit, where an abort shows as a signal.
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use autopcg_sparse::io::{check_output, same_file, write_atomic};
use autopcg_sparse::mm::*;
use autopcg_sparse::{CsrMatrix, SparseError};

fn general() -> ReadOptions {
    ReadOptions::default()
}

fn spd() -> ReadChecks {
    ReadChecks {
        positive_diagonal: true,
        ..Default::default()
    }
}

fn limited(bytes: u64) -> ReadChecks {
    ReadChecks {
        memory_limit: Some(bytes),
        ..Default::default()
    }
}

/// The error of `r`, or a failure saying what was read instead (never the whole matrix).
#[track_caller]
fn err(r: Result<MmMatrix, SparseError>) -> SparseError {
    match r {
        Ok(m) => panic!(
            "expected an error, read a {} x {} matrix with {} entries",
            m.matrix.nrows(),
            m.matrix.ncols(),
            m.matrix.nnz()
        ),
        Err(e) => e,
    }
}

fn parse_checked(text: &str, checks: &ReadChecks) -> Result<MmMatrix, SparseError> {
    parse_matrix_checked(text.as_bytes(), "case.mtx", &general(), checks)
}

fn write_gz(path: &Path, text: &[u8]) {
    let f = std::fs::File::create(path).unwrap();
    let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
    gz.write_all(text).unwrap();
    gz.finish().unwrap();
}

const ROWS_4E9: &str = "%%MatrixMarket matrix coordinate real general\n\
                        4000000000 4000000000 1\n\
                        1 1 1\n";

const ROWS_1E8: &str = "%%MatrixMarket matrix coordinate real symmetric\n\
                        100000000 100000000 5\n\
                        1 1 1\n2 2 1\n3 3 1\n4 4 1\n5 5 1\n";

/// Memory the system reports available (Linux), to know whether a refusal is to be expected.
fn available_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb = |name: &str| -> Option<u64> {
        let l = info.lines().find(|l| l.starts_with(name))?;
        l[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    };
    Some((kb("MemAvailable:")? + kb("SwapFree:").unwrap_or(0)) * 1024)
}

/// Issue case: a 4-line file declaring 4e9 rows aborted ("memory allocation of 16000000004
/// bytes failed"). Now it is refused before anything of that size is allocated, saying what it
/// needs.
#[test]
fn declared_4e9_rows_is_refused_with_what_it_needs() {
    // One entry for 4e9 rows: the row pointer is the only row-sized array, 8 bytes a row with
    // the mirrored form's.
    let e = err(parse_checked(ROWS_4E9, &limited(1 << 30)));
    assert!(matches!(e, SparseError::OutOfMemory { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "case.mtx: needs 32.0 GB for 4000000000 rows, more than the limit of 1.1 GB"
    );
    // Without a limit: refused for what the machine has (where it has less than 32 GB).
    if available_bytes().is_some_and(|a| a < 32_000_000_000) {
        let e = err(parse_checked(ROWS_4E9, &ReadChecks::default()));
        let shown = e.to_string();
        assert!(
            shown.starts_with("case.mtx: needs 32.0 GB for 4000000000 rows, but only "),
            "{shown}"
        );
    }
    // With about as many entries as rows, the assembly's work arrays count: 64 bytes a row.
    let e = err(parse_checked(
        "%%MatrixMarket matrix coordinate real general\n24 24 3\n1 1 1\n2 2 1\n3 3 1\n",
        &limited(1000),
    ));
    assert_eq!(
        e.to_string(),
        "case.mtx: needs 1.6 kB for 24 rows, more than the limit of 1.0 kB"
    );
    // Read for solving: a row without a diagonal entry, found from the one entry there is.
    let e = err(parse_checked(ROWS_4E9, &spd()));
    assert_eq!(
        e.to_string(),
        "case.mtx: row 2 has no diagonal entry (A[2][2] = 0): a symmetric positive definite \
         matrix has a positive diagonal"
    );
}

/// Issue case: 1e8 rows declared with 5 entries took 35 s and 5.9 GB before any message. For
/// solving it is refused at once (row 6 has no diagonal), and a memory limit refuses it too;
/// read as it is (a valid matrix), it takes its row pointer and little time (next test).
#[test]
fn declared_1e8_rows_with_5_entries_fails_fast() {
    let t = Instant::now();
    let e = err(parse_checked(ROWS_1E8, &spd()));
    assert!(
        matches!(
            e,
            SparseError::BadDiagonal {
                row: 6,
                value: None,
                ..
            }
        ),
        "{e}"
    );
    let e = err(parse_checked(ROWS_1E8, &limited(256 << 20)));
    assert!(
        e.to_string().contains("needs 800.0 MB for 100000000 rows"),
        "{e}"
    );
    // Nothing of the matrix's order was touched: far below the seconds it took.
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

/// The 1e8-row file read without checks, in a child process whose peak resident memory is
/// measured: about the 400 MB of its row pointer, not gigabytes.
#[test]
fn declared_1e8_rows_read_as_they_are_take_their_row_pointer() {
    if !in_child() {
        let out = run_child(
            "declared_1e8_rows_read_as_they_are_take_their_row_pointer",
            None,
        );
        println!("{out}");
        return;
    }
    let t = Instant::now();
    let m = parse_checked(ROWS_1E8, &ReadChecks::default());
    let secs = t.elapsed().as_secs_f64();
    let m = m.map(|m| m.matrix);
    let shape = m.as_ref().map(|a| (a.nrows(), a.nnz(), a.get(4, 4))).ok();
    assert_eq!(shape, Some((100_000_000, 5, 1.0)));
    let peak = peak_rss();
    println!(
        "1e8 rows, 5 entries: {secs:.2} s, peak RSS {:?} MB",
        peak.map(|b| b >> 20)
    );
    if let Some(p) = peak {
        assert!(p < 1 << 30, "peak resident memory {} MB", p >> 20);
    }
}

/// Peak resident memory of this process (Linux), in bytes.
fn peak_rss() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let l = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = l[6..].trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb * 1024)
}

/// Runs test `name` of this binary alone in a child process (with `AUTOPCG_MM_CHILD` set), under
/// an address-space limit of `limit_kb` where `sh` can set one; returns its output, failing on
/// an abort or a signal.
fn run_child(name: &str, limit_kb: Option<u64>) -> String {
    let exe = std::env::current_exe().unwrap();
    let args = [name, "--exact", "--nocapture", "--test-threads=1"];
    let mut cmd = match limit_kb {
        Some(kb) if Path::new("/bin/sh").exists() => {
            let mut c = std::process::Command::new("/bin/sh");
            c.arg("-c")
                .arg(format!("ulimit -v {kb} && exec \"$0\" \"$@\""))
                .arg(&exe)
                .args(args);
            c
        }
        _ => {
            let mut c = std::process::Command::new(&exe);
            c.args(args);
            c
        }
    };
    // A fixed pool, whose thread stacks and allocator arenas fit the limit on any host.
    let out = cmd
        .env("AUTOPCG_MM_CHILD", "1")
        .env("RAYON_NUM_THREADS", "4")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "child `{name}` ended with {} (an abort or a signal is a failure):\n{text}",
        out.status
    );
    assert!(
        text.contains("1 passed"),
        "child `{name}` ran nothing:\n{text}"
    );
    text
}

fn in_child() -> bool {
    std::env::var_os("AUTOPCG_MM_CHILD").is_some()
}

/// Bytes of blank lines in the `.gz` of the next test (compressed to about 1/1000).
const BLANK_BYTES: usize = 512 << 20;

/// Issue case: a 2 MB `.gz` expanding to 2 GiB of blank lines held 2.1 GB of memory. Now the
/// reader holds one block: the child process that reads 512 MiB of blank lines (and of spaces
/// and of comment) stays far below that in peak resident memory.
#[test]
fn gz_of_blank_lines_is_read_in_bounded_memory() {
    if !in_child() {
        let out = run_child("gz_of_blank_lines_is_read_in_bounded_memory", None);
        println!("{out}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("blank.mtx.gz");
    {
        let f = std::fs::File::create(&p).unwrap();
        let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
        gz.write_all(b"%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n1 1 4\n")
            .unwrap();
        let newlines = vec![b'\n'; 1 << 20];
        for _ in 0..(BLANK_BYTES >> 20) / 2 {
            gz.write_all(&newlines).unwrap();
        }
        // One line of blank space longer than a block, and one long comment.
        let spaces = vec![b' '; 1 << 20];
        for _ in 0..(BLANK_BYTES >> 20) / 4 {
            gz.write_all(&spaces).unwrap();
        }
        gz.write_all(b"2 2 4\n%").unwrap();
        let xs = vec![b'x'; 1 << 20];
        for _ in 0..(BLANK_BYTES >> 20) / 4 {
            gz.write_all(&xs).unwrap();
        }
        gz.write_all(b"\n3 3 4\n").unwrap();
        gz.finish().unwrap();
    }
    let compressed = std::fs::metadata(&p).unwrap().len();
    let before = peak_rss();
    let t = Instant::now();
    let m = read_matrix_checked(&p, &general(), &spd()).unwrap();
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(m.matrix.diagonal(), vec![4.0, 4.0, 4.0]);
    // An error after the blank lines names the right line.
    let lines_before = 3 + (BLANK_BYTES >> 20) / 2 * (1 << 20);
    let after = peak_rss();
    println!(
        "read {} MiB of blank text from a {compressed}-byte .gz in {secs:.2} s; peak RSS {:?} MB \
         before, {:?} MB after",
        BLANK_BYTES >> 20,
        before.map(|b| b >> 20),
        after.map(|b| b >> 20)
    );
    if let Some(peak) = after {
        assert!(peak < 256 << 20, "peak resident memory {} MB", peak >> 20);
    }
    let e = {
        let q = dir.path().join("blank_bad.mtx.gz");
        let mut text = b"%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 4\n".to_vec();
        text.resize(text.len() + (lines_before - 3), b'\n');
        text.extend_from_slice(b"2 2 x\n");
        write_gz(&q, &text);
        err(read_matrix(&q, &general()))
    };
    assert!(
        matches!(e, SparseError::Parse { line, .. } if line == lines_before + 1),
        "{e}"
    );
}

/// Issue case: a zero row of a symmetric, otherwise positive definite file. For solving it is a
/// missing (zero) diagonal, named by its row, before any solver work.
#[test]
fn zero_row_in_a_symmetric_file_is_a_missing_diagonal() {
    let text = "%%MatrixMarket matrix coordinate real symmetric\n4 4 3\n1 1 2\n2 2 2\n4 4 2\n";
    let e = err(parse_checked(text, &spd()));
    assert_eq!(
        e.to_string(),
        "case.mtx: row 3 has no diagonal entry (A[3][3] = 0): a symmetric positive definite \
         matrix has a positive diagonal"
    );
    // As many diagonal entries as rows, one of them twice: found after assembly.
    let dup = "%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n1 1 2\n1 1 2\n3 3 2\n";
    let e = err(parse_checked(dup, &spd()));
    assert!(
        matches!(
            e,
            SparseError::BadDiagonal {
                row: 2,
                value: None,
                ..
            }
        ),
        "{e}"
    );
    // Read without the check, the file is a valid matrix.
    assert!(parse_checked(text, &ReadChecks::default()).is_ok());
}

/// Issue case (82 fuzz cases): "diagonal entry A[i][i] = v must be positive" named no file line.
#[test]
fn negative_diagonal_names_its_line() {
    let text = "%%MatrixMarket matrix coordinate real general\n% a comment\n3 3 5\n\
                1 1 4\n2 1 -1\n1 2 -1\n\n2 2 -2\n3 3 4\n";
    let expect = "case.mtx:8: diagonal entry A[2][2] = -2 must be positive: a symmetric \
                  positive definite matrix has a positive diagonal";
    let e = err(parse_checked(text, &spd()));
    assert_eq!(e.to_string(), expect);
    assert!(matches!(
        e,
        SparseError::BadDiagonal {
            line: 8,
            row: 2,
            value: Some(v),
            ..
        } if v == -2.0
    ));
    // The same from a plain file, a .gz (streamed), and with the solver's symmetry policies.
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("case.mtx");
    std::fs::write(&plain, text).unwrap();
    let gz = dir.path().join("case.mtx.gz");
    write_gz(&gz, text.as_bytes());
    for (p, policy) in [
        (&plain, SymmetryPolicy::RequireSymmetric),
        (&gz, SymmetryPolicy::RequireSymmetric),
        (&gz, SymmetryPolicy::AssumeSymmetric),
    ] {
        let o = ReadOptions {
            symmetry: policy,
            ..general()
        };
        let e = err(read_matrix_checked(p, &o, &spd()));
        let want = expect.replacen("case.mtx", &p.display().to_string(), 1);
        assert_eq!(e.to_string(), want);
    }
    // A zero diagonal entry, in a symmetric file and in a dense one.
    let zero = "%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 1 0\n2 2 1\n";
    let e = err(parse_checked(zero, &spd()));
    assert!(
        e.to_string()
            .starts_with("case.mtx:3: diagonal entry A[1][1] = 0 must"),
        "{e}"
    );
    let dense = "%%MatrixMarket matrix array real symmetric\n2 2\n1\n5\n-3\n";
    let e = err(parse_checked(dense, &spd()));
    assert!(
        e.to_string()
            .starts_with("case.mtx:5: diagonal entry A[2][2] = -3 must"),
        "{e}"
    );
    // Duplicates are summed before the sign is judged: -1 + 3 is positive.
    let sum = "%%MatrixMarket matrix coordinate real general\n1 1 2\n1 1 -1\n1 1 3\n";
    assert!(parse_checked(sum, &spd()).is_ok());
}

#[test]
fn missing_diagonal_names_the_row() {
    let text = "%%MatrixMarket matrix coordinate real general\n3 3 4\n1 1 1\n2 2 1\n3 2 1\n2 3 1\n";
    let e = err(parse_checked(text, &spd()));
    assert!(
        matches!(
            e,
            SparseError::BadDiagonal {
                line: 0,
                row: 3,
                value: None,
                ..
            }
        ),
        "{e}"
    );
    // A non-square matrix read for solving is refused by its size line.
    let rect = "%%MatrixMarket matrix coordinate real general\n2 3 1\n1 1 1\n";
    let e = err(parse_checked(rect, &spd()));
    assert!(matches!(e, SparseError::Parse { line: 2, .. }), "{e}");
}

#[test]
fn find_entry_line_in_plain_gz_symmetric_and_dense_files() {
    let dir = tempfile::tempdir().unwrap();
    let sym = "%%MatrixMarket matrix coordinate real symmetric\n% c\n3 3 4\n1 1 4\n\n3 1 -1\n\
               2 2 4\n3 3 4\n";
    for name in ["s.mtx", "s.mtx.gz"] {
        let p = dir.path().join(name);
        if name.ends_with(".gz") {
            write_gz(&p, sym.as_bytes());
        } else {
            std::fs::write(&p, sym).unwrap();
        }
        let at = |r, c| find_entry_line(&p, r, c).unwrap().map(|l| (l.line, l.text));
        assert_eq!(at(1, 1), Some((4, "1 1 4".to_string())));
        assert_eq!(at(3, 1), Some((6, "3 1 -1".to_string())));
        // The mirror of a stored entry.
        assert_eq!(at(1, 3), Some((6, "3 1 -1".to_string())));
        assert_eq!(at(3, 3), Some((8, "3 3 4".to_string())));
        assert_eq!(at(2, 1), None);
        assert_eq!(at(4, 4), None);
        assert_eq!(at(0, 1), None);
    }
    let dense = dir.path().join("d.mtx");
    std::fs::write(
        &dense,
        "%%MatrixMarket matrix array real symmetric\n3 3\n11\n21\n31\n22\n% c\n32\n33\n",
    )
    .unwrap();
    let at = |r, c| find_entry_line(&dense, r, c).unwrap().map(|l| l.text);
    assert_eq!(at(1, 1).as_deref(), Some("11"));
    assert_eq!(at(3, 1).as_deref(), Some("31"));
    assert_eq!(at(2, 3).as_deref(), Some("32"));
    assert_eq!(at(3, 3).as_deref(), Some("33"));
    let general = dir.path().join("g.mtx");
    std::fs::write(
        &general,
        "%%MatrixMarket matrix array real general\n2 2\n11\n21\n12\n22\n",
    )
    .unwrap();
    let line = |r, c| find_entry_line(&general, r, c).unwrap().map(|l| l.line);
    assert_eq!(line(1, 2), Some(5));
    assert_eq!(line(2, 1), Some(4));
    // A missing file is an Io error naming it.
    let e = find_entry_line(dir.path().join("none.mtx"), 1, 1).unwrap_err();
    assert!(e.to_string().contains("none.mtx"), "{e}");
}

/// What a solver's `BadDiagonal { row, value }` becomes, named by its line.
#[test]
fn diagonal_error_finds_the_line_of_a_solver_fault() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.mtx");
    std::fs::write(
        &p,
        "%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 1 1\n2 2 -0.5\n",
    )
    .unwrap();
    let e = diagonal_error(&p, 2, -0.5);
    let file = p.display().to_string();
    assert_eq!(
        e.to_string(),
        format!(
            "{file}:4: diagonal entry A[2][2] = -0.5 must be positive: a symmetric positive \
             definite matrix has a positive diagonal"
        )
    );
    let e = diagonal_error(&p, 3, 0.0);
    assert!(e.to_string().contains("row 3 has no diagonal entry"), "{e}");
    let a = CsrMatrix::from_triplets(2, 2, &[0, 1], &[0, 1], &[1.0, -0.5]).unwrap();
    assert_eq!(
        first_bad_diagonal(&a),
        Some(DiagonalFault {
            row: 2,
            value: Some(-0.5)
        })
    );
}

/// Names of the files in `dir`.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_failed_write_leaves_the_earlier_file_and_no_temporary() {
    let dir = tempfile::tempdir().unwrap();
    let good = CsrMatrix::from_triplets(2, 2, &[0, 1], &[0, 1], &[1.0, 2.0]).unwrap();
    let bad = CsrMatrix::from_triplets(2, 2, &[0, 1], &[0, 1], &[1.0, f64::NAN]).unwrap();
    for name in ["x.mtx", "x.mtx.gz"] {
        let p = dir.path().join(name);
        write_matrix(&p, &good, WriteSymmetry::General).unwrap();
        let before = std::fs::read(&p).unwrap();
        // The NaN is met while writing: the earlier file must survive whole.
        let e = write_matrix(&p, &bad, WriteSymmetry::General).unwrap_err();
        assert!(e.to_string().contains(name), "{e}");
        assert_eq!(std::fs::read(&p).unwrap(), before);
        assert_eq!(read_matrix(&p, &general()).unwrap().matrix, good);
        let e = write_vector(&p, &[1.0, f64::INFINITY]).unwrap_err();
        assert!(matches!(e, SparseError::Io { .. }), "{e}");
        assert_eq!(std::fs::read(&p).unwrap(), before);
    }
    assert_eq!(names(dir.path()), vec!["x.mtx", "x.mtx.gz"]);
}

#[test]
fn a_failing_writer_removes_its_temporary() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("out.txt");
    std::fs::write(&p, "old").unwrap();
    let e = write_atomic(&p, |w| {
        w.write_all(b"half of the new content")?;
        Err(std::io::Error::other("disk full (simulated)"))
    })
    .unwrap_err();
    assert!(e.to_string().contains("disk full (simulated)"), "{e}");
    assert!(e.to_string().contains("out.txt"), "{e}");
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "old");
    assert_eq!(names(dir.path()), vec!["out.txt"]);
    // A good write replaces it, keeping its permissions.
    write_atomic(&p, |w| w.write_all(b"new")).unwrap();
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
    assert_eq!(names(dir.path()), vec!["out.txt"]);
}

#[test]
fn writing_into_a_missing_or_read_only_folder_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let a = CsrMatrix::identity(3).unwrap();
    let e = write_matrix(dir.path().join("no/dir/a.mtx"), &a, WriteSymmetry::General).unwrap_err();
    assert!(matches!(e, SparseError::Io { .. }), "{e}");
    assert!(e.to_string().contains("no/dir/a.mtx"), "{e}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let ro = dir.path().join("ro");
        std::fs::create_dir(&ro).unwrap();
        let p = ro.join("a.mtx");
        write_matrix(&p, &a, WriteSymmetry::General).unwrap();
        let before = std::fs::read(&p).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        // The superuser writes anyway: only check the refusal where there is one.
        let refused = std::fs::File::create(ro.join("probe")).is_err();
        let r = write_matrix(&p, &CsrMatrix::identity(5).unwrap(), WriteSymmetry::General);
        if refused {
            assert!(matches!(r, Err(SparseError::Io { .. })), "{r:?}");
            assert_eq!(std::fs::read(&p).unwrap(), before);
        }
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(
            names(&ro).iter().all(|n| !n.contains(".tmp.")),
            "{:?}",
            names(&ro)
        );
    }
    // A folder as the target.
    let e = write_matrix(dir.path(), &a, WriteSymmetry::General).unwrap_err();
    assert!(matches!(e, SparseError::Io { .. }), "{e}");
}

#[test]
fn writing_through_a_symbolic_link_keeps_the_link() {
    #[cfg(unix)]
    {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target.mtx");
        let link = dir.path().join("link.mtx");
        std::fs::write(&target, "old").unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write_matrix(
            &link,
            &CsrMatrix::identity(2).unwrap(),
            WriteSymmetry::General,
        )
        .unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(std::fs::read_to_string(&target)
            .unwrap()
            .starts_with("%%MatrixMarket"));
        // A dangling link names the file to create.
        let dangling = dir.path().join("dangling.mtx");
        std::os::unix::fs::symlink("new.mtx", &dangling).unwrap();
        write_matrix(
            &dangling,
            &CsrMatrix::identity(2).unwrap(),
            WriteSymmetry::General,
        )
        .unwrap();
        assert!(dir.path().join("new.mtx").is_file());
        assert!(std::fs::symlink_metadata(&dangling)
            .unwrap()
            .file_type()
            .is_symlink());
    }
}

#[test]
fn an_output_naming_an_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("A.mtx");
    std::fs::write(&a, "x").unwrap();
    let other: PathBuf = dir.path().join("x.mtx");
    assert!(!same_file(&a, &other));
    assert!(check_output(&other, [&a]).is_ok());
    // The same file by another spelling, a hard link and a symbolic link.
    let spelled = dir.path().join(".").join("A.mtx");
    assert!(same_file(&a, &spelled));
    let hard = dir.path().join("hard.mtx");
    std::fs::hard_link(&a, &hard).unwrap();
    assert!(same_file(&a, &hard));
    #[cfg(unix)]
    {
        let soft = dir.path().join("soft.mtx");
        std::os::unix::fs::symlink(&a, &soft).unwrap();
        assert!(same_file(&soft, &a));
    }
    let e = check_output(&hard, [&other, &a]).unwrap_err();
    assert!(matches!(e, SparseError::OutputIsInput { .. }), "{e}");
    let shown = e.to_string();
    assert!(
        shown.contains("hard.mtx") && shown.contains("A.mtx"),
        "{shown}"
    );
    // Nothing was written.
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "x");
}

/// The cases that aborted (or were killed) before, in a child process whose address space is
/// capped at 3 GiB: every large allocation must be refused as an error, never abort.
#[test]
#[cfg_attr(
    not(target_os = "linux"),
    ignore = "the address-space cap is set with the shell's ulimit -v, relied on only on Linux"
)]
fn regressions_under_a_memory_cap_do_not_abort() {
    if !in_child() {
        run_child("regressions_under_a_memory_cap_do_not_abort", Some(3 << 20));
        return;
    }
    for checks in [ReadChecks::default(), spd()] {
        let e = err(parse_checked(ROWS_4E9, &checks));
        assert!(
            matches!(
                e,
                SparseError::OutOfMemory { .. } | SparseError::BadDiagonal { .. }
            ),
            "{e}"
        );
        // Fits the cap: read (a valid matrix), or refused for solving.
        let r = parse_checked(ROWS_1E8, &checks).map(|m| m.matrix.nnz());
        assert_eq!(r.is_ok(), !checks.positive_diagonal, "{r:?}");
    }
    // A vector declaring 4e9 values.
    let v = "%%MatrixMarket matrix coordinate real general\n4000000000 1 1\n1 1 1\n";
    let e = parse_vector(v.as_bytes(), "v.mtx").unwrap_err();
    assert!(e.to_string().starts_with("v.mtx: needs 32.0 GB"), "{e}");
    // A dense matrix declaring 4e9 rows and no column.
    let d = "%%MatrixMarket matrix array real general\n4000000000 0\n";
    let o = ReadOptions {
        require_square: false,
        ..general()
    };
    let e = err(parse_matrix(d.as_bytes(), "d.mtx", &o));
    assert!(matches!(e, SparseError::OutOfMemory { .. }), "{e}");
}
