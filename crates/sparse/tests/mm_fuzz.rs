//! Seeded mutation fuzzing of the Matrix Market reader, bounded in time so that CI runs it on
//! every build.
//!
//! Inputs: the small fixtures of `matrices/`, the first lines of the larger ones, and synthetic
//! files covering every header variant. Each case applies one to three seeded mutations (bit
//! flips, inserted and deleted bytes, truncation, deleted, duplicated and swapped lines, tokens
//! replaced by huge, negative, zero, NaN or infinite numbers, in the size line too, banner words
//! swapped, blank and comment lines inserted, entries appended) and reads the result in memory
//! with every symmetry policy, with and without the diagonal check, and as a vector; every fifth
//! case is also written gzip-compressed (or as a corrupt gzip stream) and read from disk, and
//! must give what the in-memory read gives. Every read must return `Ok` or an error whose text
//! names the file; a panic is caught and its seed listed.
//!
//! An abort cannot be caught in-process. The harness therefore runs in a child process under an
//! address-space limit (`ulimit -v`, Linux), where an allocation the reader failed to bound would
//! abort the child, and the parent reports the last seed the child started. Set
//! `AUTOPCG_FUZZ_CASES` to run more cases, `AUTOPCG_FUZZ_SEED` to start elsewhere,
//! `AUTOPCG_FUZZ_LIMIT_KB` for another limit.
use std::collections::BTreeMap;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use autopcg_sparse::mm::*;
use autopcg_sparse::SparseError;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Cases per run: each reads its input 5 to 7 times.
const CASES: u64 = 8000;

/// Address-space limit of the child, in KiB (2 GiB): far above what any case needs legitimately.
const LIMIT_KB: u64 = 2 << 20;

/// Row structures beyond this are refused (keeps each case fast: a legal matrix of millions of
/// empty rows is valid input, but costs time in proportion to its rows).
const MEMORY_LIMIT: u64 = 64 << 20;

const LABEL: &str = "fuzz.mtx";

fn corpus() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let dir = Path::new("../../matrices");
    for (name, keep) in [
        ("bcsstk01.mtx", usize::MAX),
        ("1138_bus.mtx", 400),
        ("poisson3d_16.mtx", 300),
        ("fem2d_3000.mtx", 300),
        ("bcsstk13.mtx", 200),
        ("s3rmt3m3.mtx", 200),
    ] {
        if let Ok(text) = std::fs::read(dir.join(name)) {
            // The first `keep` lines: the header stays, the entry count no longer matches,
            // which the mutations sometimes repair.
            let cut = text
                .iter()
                .enumerate()
                .filter(|(_, &c)| c == b'\n')
                .nth(keep)
                .map_or(text.len(), |(p, _)| p + 1);
            let mut kept = text[..cut].to_vec();
            fix_count(&mut kept, 0);
            out.push(kept);
        }
    }
    for s in [
        "%%MatrixMarket matrix coordinate real general\n3 3 4\n1 1 4.0\n2 1 -1.5\n3 3 2e1\n2 2 .5\n",
        "%%MatrixMarket matrix coordinate real symmetric\n% c\n3 3 5\n1 1 4\n2 1 -1\n2 2 4\n3 2 -1\n3 3 4\n",
        "%%MatrixMarket matrix coordinate integer symmetric\n2 2 3\n1 1 2\n2 1 -1\n2 2 2\n",
        "%%MatrixMarket matrix coordinate real general\n3 3 7\n1 1 2\n1 2 -1\n2 1 -1\n2 2 2\n2 3 -1\n3 2 -1\n3 3 2\n",
        "%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n",
        "%%MatrixMarket matrix array real symmetric\n3 3\n4\n-1\n0\n4\n-1\n4\n",
        "%%MatrixMarket matrix array real general\n4 1\n1.5\n-2\n\n0\n1e-300\n",
        "%%MatrixMarket matrix coordinate real general\n5 1 2\n2 1 3.5\n5 1 -1\n",
        "\u{feff}%%MatrixMarket matrix coordinate real general\r\n% crlf\r\n2 2 2\r\n1 1 1\r\n2 2 1\r\n",
        "%%MatrixMarket matrix coordinate real symmetric\n3 3 4\n1 1 1\n1 3 2\n3 1 2\n3 3 1\n",
    ] {
        out.push(s.as_bytes().to_vec());
    }
    out
}

const NASTY: &[&str] = &[
    "0",
    "-1",
    "-0",
    "1",
    "2",
    "4000000000",
    "4294967294",
    "4294967295",
    "4294967296",
    "100000000",
    "2147483648",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    "NaN",
    "nan",
    "inf",
    "-Infinity",
    "1e400",
    "-1e-400",
    "0x10",
    "1.5",
    "+3",
    "",
    "1e",
    "\u{0}",
];

const WORDS: &[&str] = &[
    "%%MatrixMarket",
    "matrix",
    "coordinate",
    "array",
    "real",
    "integer",
    "pattern",
    "complex",
    "general",
    "symmetric",
    "hermitian",
    "%",
];

fn line_ranges(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut s = 0;
    for (k, &c) in b.iter().enumerate() {
        if c == b'\n' {
            out.push((s, k + 1));
            s = k + 1;
        }
    }
    if s < b.len() {
        out.push((s, b.len()));
    }
    out
}

/// Token ranges (start, end) of `b`.
fn token_ranges(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut k = 0;
    while k < b.len() {
        if b[k].is_ascii_whitespace() {
            k += 1;
            continue;
        }
        let s = k;
        while k < b.len() && !b[k].is_ascii_whitespace() {
            k += 1;
        }
        out.push((s, k));
    }
    out
}

fn mutate(b: &mut Vec<u8>, rng: &mut ChaCha8Rng) {
    const CHARS: &[u8] = b"0123456789 \n\r\t%.-+eE";
    let op = rng.random_range(0..13);
    let at = |rng: &mut ChaCha8Rng, len: usize| rng.random_range(0..len.max(1));
    match op {
        0 if !b.is_empty() => {
            let k = at(rng, b.len());
            b[k] ^= 1 << rng.random_range(0..8);
        }
        1 => {
            let k = at(rng, b.len() + 1).min(b.len());
            b.insert(k, CHARS[rng.random_range(0..CHARS.len())]);
        }
        2 if !b.is_empty() => {
            let k = at(rng, b.len());
            b.remove(k);
        }
        3 => {
            let k = at(rng, b.len() + 1).min(b.len());
            b.truncate(k);
        }
        4..=6 => {
            let lines = line_ranges(b);
            if lines.is_empty() {
                return;
            }
            let (s, e) = lines[at(rng, lines.len())];
            match op {
                4 => {
                    b.drain(s..e);
                }
                5 => {
                    let copy = b[s..e].to_vec();
                    let times = if rng.random_bool(0.2) { 50 } else { 1 };
                    for _ in 0..times {
                        b.splice(e..e, copy.iter().copied());
                    }
                }
                _ => {
                    let (s2, e2) = lines[at(rng, lines.len())];
                    if (s2, e2) != (s, e) {
                        let (a, c) = if s < s2 {
                            ((s, e), (s2, e2))
                        } else {
                            ((s2, e2), (s, e))
                        };
                        let first = b[a.0..a.1].to_vec();
                        let second = b[c.0..c.1].to_vec();
                        b.splice(c.0..c.1, first);
                        b.splice(a.0..a.1, second);
                    }
                }
            }
        }
        7 | 8 => {
            // A token, anywhere (7) or in the size line (8), becomes a nasty number.
            let toks = if op == 8 {
                match size_line(b) {
                    Some((s, e)) => token_ranges(&b[s..e])
                        .into_iter()
                        .map(|(a, c)| (a + s, c + s))
                        .collect(),
                    None => Vec::new(),
                }
            } else {
                token_ranges(b)
            };
            if toks.is_empty() {
                return;
            }
            let (s, e) = toks[at(rng, toks.len())];
            let n = NASTY[rng.random_range(0..NASTY.len())];
            b.splice(s..e, n.bytes());
        }
        9 => {
            // Banner words.
            let toks = token_ranges(b);
            let first: Vec<_> = toks.into_iter().take(5).collect();
            if first.is_empty() {
                return;
            }
            let (s, e) = first[at(rng, first.len())];
            let w = WORDS[rng.random_range(0..WORDS.len())];
            b.splice(s..e, w.bytes());
        }
        10 => {
            // Blank lines, blank space or a comment somewhere.
            let lines = line_ranges(b);
            let k = lines.get(at(rng, lines.len())).map_or(b.len(), |l| l.0);
            let what: Vec<u8> = match rng.random_range(0..3) {
                0 => vec![b'\n'; rng.random_range(1..5000)],
                1 => vec![b' '; rng.random_range(1..5000)],
                _ => b"% a comment line\n".to_vec(),
            };
            b.splice(k..k, what);
        }
        11 => {
            // Entries appended (out of range, on the diagonal, above it).
            let i = rng.random_range(0..12);
            let j = rng.random_range(0..12);
            let v = ["1", "-2", "0", "1e300", "3.25"][rng.random_range(0..5)];
            if b.last().is_some_and(|&c| c != b'\n') {
                b.push(b'\n');
            }
            b.extend_from_slice(format!("{i} {j} {v}\n").as_bytes());
        }
        _ => {
            // The size line's entry count off by one.
            let d = rng.random_range(-1..=1);
            fix_count(b, d);
        }
    }
}

/// The size line (the first line after the banner that is neither blank nor a comment).
fn size_line(b: &[u8]) -> Option<(usize, usize)> {
    line_ranges(b).into_iter().skip(1).find(|(s, e)| {
        let t = b[*s..*e].trim_ascii_start();
        !t.is_empty() && t[0] != b'%'
    })
}

/// Sets the entry count of a coordinate size line to the number of data lines after it, plus
/// `delta`, so that mutated files get past the count check and reach the deeper checks.
fn fix_count(b: &mut Vec<u8>, delta: i64) {
    let Some((s, e)) = size_line(b) else {
        return;
    };
    let data = line_ranges(&b[e..])
        .into_iter()
        .filter(|(a, c)| {
            let t = b[e + a..e + c].trim_ascii_start();
            !t.is_empty() && t[0] != b'%'
        })
        .count();
    let toks = token_ranges(&b[s..e]);
    if let Some(&(a, c)) = toks.get(2) {
        let n = (data as i64 + delta).max(0);
        b.splice(s + a..s + c, n.to_string().bytes());
    }
}

/// How many reads ended how (`ok`, or the error's kind), for the summary.
static TALLY: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());

fn tally(r: &Result<(), SparseError>) {
    let kind = match r {
        Ok(()) => "ok".to_string(),
        Err(e) => format!("{e:?}")
            .split(|c: char| !c.is_alphanumeric())
            .next()
            .unwrap_or_default()
            .to_string(),
    };
    if let Ok(mut t) = TALLY.lock() {
        *t.entry(kind).or_default() += 1;
    }
}

/// One read: `Ok`, or an error that names the file.
fn judge(what: &str, r: Result<(), SparseError>, label: &str, seed: u64) -> Result<(), String> {
    tally(&r);
    match r {
        Ok(()) => Ok(()),
        Err(e) => {
            let shown = e.to_string();
            if shown.contains(label) {
                Ok(())
            } else {
                Err(format!(
                    "seed {seed} ({what}): error does not name the file: {shown}"
                ))
            }
        }
    }
}

/// What a read gave, for comparing the in-memory and the streamed reader.
fn outcome(r: &Result<MmMatrix, SparseError>) -> String {
    match r {
        Ok(m) => {
            let a = &m.matrix;
            let bits: Vec<u64> = a.data().iter().map(|v| v.to_bits()).collect();
            format!("ok {:?} {:?} {:?}", a.indptr(), a.indices(), bits)
        }
        // Where parsing stops on a block boundary differs ("holds at least"): compare the kind.
        Err(SparseError::Parse { .. }) => "parse error".into(),
        Err(e) => format!("{e:?}")
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string(),
    }
}

/// Runs one case; `Err` lists what went wrong.
fn case(seed: u64, corpus: &[Vec<u8>], dir: &Path) -> Result<(), String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut b = corpus[rng.random_range(0..corpus.len())].clone();
    for _ in 0..rng.random_range(1..=3) {
        mutate(&mut b, &mut rng);
    }
    if rng.random_bool(0.5) {
        fix_count(&mut b, 0);
    }
    let limited = ReadChecks {
        memory_limit: Some(MEMORY_LIMIT),
        ..Default::default()
    };
    let spd = ReadChecks {
        positive_diagonal: true,
        ..limited
    };
    let policies = [
        SymmetryPolicy::AsStored,
        SymmetryPolicy::RequireSymmetric,
        SymmetryPolicy::AssumeSymmetric,
    ];
    let mut memory = None;
    for (k, policy) in policies.into_iter().enumerate() {
        let o = ReadOptions {
            symmetry: policy,
            require_square: k != 0,
        };
        for checks in [limited, spd] {
            let r = parse_matrix_checked(&b, LABEL, &o, &checks);
            if k == 1 && checks.positive_diagonal {
                memory = Some(outcome(&r));
            }
            judge("parse_matrix", r.map(drop), LABEL, seed)?;
        }
    }
    judge(
        "parse_vector",
        parse_vector(&b, LABEL).map(drop),
        LABEL,
        seed,
    )?;
    if seed % 5 == 0 {
        // The streamed reader: the same outcome.
        let p = dir.join(format!("case{seed}.mtx.gz"));
        let mut gz = Vec::new();
        {
            let mut enc = flate2::write::GzEncoder::new(&mut gz, flate2::Compression::fast());
            enc.write_all(&b).map_err(|e| e.to_string())?;
            enc.finish().map_err(|e| e.to_string())?;
        }
        let corrupt = seed % 25 == 0;
        if corrupt && gz.len() > 12 {
            // Damage the compressed stream itself.
            let k = rng.random_range(10..gz.len());
            if rng.random_bool(0.5) {
                gz[k] ^= 0x55;
            } else {
                gz.truncate(k);
            }
        }
        std::fs::write(&p, &gz).map_err(|e| e.to_string())?;
        let label = p.display().to_string();
        let o = ReadOptions {
            symmetry: SymmetryPolicy::RequireSymmetric,
            require_square: true,
        };
        let r = read_matrix_checked(&p, &o, &spd);
        if !corrupt {
            let (m, s) = (memory.unwrap_or_default(), outcome(&r));
            if m != s {
                return Err(format!(
                    "seed {seed}: in memory `{m:.200}` but streamed `{s:.200}`"
                ));
            }
        }
        judge("read_matrix .gz", r.map(drop), &label, seed)?;
        judge("read_vector .gz", read_vector(&p).map(drop), &label, seed)?;
        let _ = std::fs::remove_file(&p);
    }
    Ok(())
}

fn run(first: u64, cases: u64) -> Vec<String> {
    let corpus = corpus();
    assert!(corpus.len() >= 10, "the corpus is missing its fixtures");
    let dir = tempfile::tempdir().unwrap();
    // Panics are counted, not printed.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut failures = Vec::new();
    for seed in first..first + cases {
        // The parent reads the last seed started when the child dies.
        eprintln!("seed {seed}");
        match catch_unwind(AssertUnwindSafe(|| case(seed, &corpus, dir.path()))) {
            Ok(Ok(())) => {}
            Ok(Err(msg)) => failures.push(msg),
            Err(p) => {
                let what = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!("seed {seed}: panic: {what}"));
            }
        }
    }
    std::panic::set_hook(hook);
    failures
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn fuzzed_inputs_never_panic_or_abort() {
    let first = env_u64("AUTOPCG_FUZZ_SEED", 0);
    let cases = env_u64("AUTOPCG_FUZZ_CASES", CASES);
    let limit_kb = env_u64("AUTOPCG_FUZZ_LIMIT_KB", LIMIT_KB);
    let in_child = std::env::var_os("AUTOPCG_FUZZ_CHILD").is_some();
    let sh = Path::new("/bin/sh");
    if !in_child && cfg!(target_os = "linux") && sh.exists() {
        let exe = std::env::current_exe().unwrap();
        let t = Instant::now();
        let out = std::process::Command::new(sh)
            .arg("-c")
            .arg(format!("ulimit -v {limit_kb} && exec \"$0\" \"$@\""))
            .arg(&exe)
            .args([
                "fuzzed_inputs_never_panic_or_abort",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("AUTOPCG_FUZZ_CHILD", "1")
            // A fixed pool (above 2, where the reader takes its parallel gap-closing path),
            // whose thread stacks and allocator arenas fit the address-space limit on any host.
            .env("RAYON_NUM_THREADS", "4")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().rev().find(|l| l.starts_with("seed "));
        let said: Vec<&str> = stderr.lines().filter(|l| !l.starts_with("seed ")).collect();
        assert!(
            out.status.success(),
            "the fuzz child ended with {} (an abort or a signal is a failure), last case \
             started: {last:?}\n{stdout}\n{}",
            out.status,
            said.join("\n")
        );
        println!(
            "{cases} cases from seed {first} in {:.1} s under a {} MiB address-space limit",
            t.elapsed().as_secs_f64(),
            limit_kb >> 10
        );
        for l in stdout
            .lines()
            .filter_map(|l| l.find("fuzz:").map(|p| &l[p..]))
        {
            println!("{l}");
        }
        return;
    }
    let t = Instant::now();
    let failures = run(first, cases);
    let tally = TALLY.lock().map(|t| format!("{t:?}")).unwrap_or_default();
    println!(
        "fuzz: {cases} cases, {} failures, {:.1} s; reads by outcome: {tally}",
        failures.len(),
        t.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {cases} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
