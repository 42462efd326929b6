//! Reading the results: the fastest candidate (overall and among autopcg's own kernels), the
//! fastest of each format, and the text table `autopcg bench spmv` prints.
use std::fmt::Write as _;

use super::records::{RecordStatus, SpmvBench, SpmvRecord};

/// Index of the fastest correct record by median; with `own_only`, among autopcg's own kernels
/// (cuSPARSE left out). Ties go to the earlier record.
pub(crate) fn fastest_index(records: &[SpmvRecord], own_only: bool) -> Option<usize> {
    records
        .iter()
        .enumerate()
        .filter(|(_, r)| r.status.is_ok() && !(own_only && r.is_cusparse()))
        .filter_map(|(i, r)| r.median_ms.map(|t| (i, t)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i)
}

fn opt_f(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.prec$}"))
}

fn opt_u(v: Option<u32>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// The format, kernel, threads and blocks of `r` as the tables print them.
fn launch_columns(r: &SpmvRecord) -> [String; 4] {
    [
        r.launch.format.to_string(),
        r.launch.kernel.to_string(),
        opt_u(r.launch.threads),
        opt_u(r.launch.blocks),
    ]
}

/// `r` in the words of the summary's closing lines.
fn describe(r: &SpmvRecord) -> String {
    let [format, kernel, threads, blocks] = launch_columns(r);
    let (ms, gbps) = (opt_f(r.median_ms, 4), opt_f(r.gbps, 1));
    format!("{format} {kernel} ({threads} threads, {blocks} blocks): {ms} ms, {gbps} GB/s")
}

impl SpmvBench {
    /// The fastest correct record.
    pub fn fastest(&self) -> Option<&SpmvRecord> {
        self.best.and_then(|i| self.records.get(i))
    }

    /// The fastest correct record of each format that has one, in format order.
    pub fn fastest_per_format(&self) -> Vec<&SpmvRecord> {
        let mut out: Vec<&SpmvRecord> = Vec::new();
        for r in self.records.iter().filter(|r| r.status.is_ok()) {
            let Some(t) = r.median_ms else { continue };
            match out.iter_mut().find(|o| o.launch.format == r.launch.format) {
                None => out.push(r),
                Some(o) => {
                    if o.median_ms.is_some_and(|b| t < b) {
                        *o = r;
                    }
                }
            }
        }
        out.sort_by_key(|r| r.launch.format);
        out
    }

    /// The results as a text table: one line per candidate (format, kernel, threads, blocks,
    /// grid, median and min ms, GB/s, % of triad), the fastest marked, then the conversion
    /// times and the fastest candidate of each format.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let f = &self.matrix;
        let _ = writeln!(
            s,
            "SpMV on {} (sm_{}), matrix {} x {}, nnz {}, rows {:.2} +- {:.2} (max {})",
            self.device.name,
            self.device.arch(),
            f.n,
            f.ncols,
            f.nnz,
            f.row_len_mean,
            f.row_len_std,
            f.row_len_max
        );
        let _ = writeln!(s, "{}", self.bytes_formula);
        if self.records.iter().any(|r| r.l2_flushed) {
            let _ = writeln!(
                s,
                "timed with L2 cold: a read pass over twice the L2 ahead of every sample"
            );
        }
        let _ = writeln!(
            s,
            "bytes per SpMV for GB/s: {} ({:.1} MB)",
            self.bytes_csr_min,
            self.bytes_csr_min as f64 / 1e6
        );
        let triad = self.triad.as_ref().map(|t| t.gbps);
        match &self.triad {
            Some(t) => {
                let _ = writeln!(
                    s,
                    "triad a = b + s*c: {:.1} GB/s (3 x {} MiB, {} threads x {} blocks, median {:.4} ms)",
                    t.gbps,
                    (t.n * 8) >> 20,
                    t.threads,
                    t.blocks,
                    t.stats.median_ms
                );
            }
            None => {
                let _ = writeln!(s, "triad not measured");
            }
        }
        if let Some(v) = &self.cusparse_version {
            let _ = writeln!(s, "cuSPARSE {v}");
        }
        let _ = writeln!(
            s,
            "timing: median of >= {} repetitions and >= {} ms per candidate, CUDA events; x seed {}",
            self.options.min_reps, self.options.min_ms, self.options.seed
        );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{:<6} {:<28} {:>7} {:>8} {:<5} {:>10} {:>10} {:>9} {:>7}",
            "format",
            "kernel",
            "threads",
            "blocks",
            "grid",
            "median ms",
            "min ms",
            "GB/s",
            "%triad"
        );
        for (i, r) in self.records.iter().enumerate() {
            let grid = r
                .launch
                .grid
                .map_or_else(|| "-".to_string(), |g| g.to_string());
            let [format, kernel, threads, blocks] = launch_columns(r);
            let head = format!("{format:<6} {kernel:<28} {threads:>7} {blocks:>8} {grid:<5}");
            match &r.status {
                RecordStatus::Ok => {
                    let pct = match (r.gbps, triad) {
                        (Some(g), Some(t)) if t > 0.0 => Some(100.0 * g / t),
                        _ => None,
                    };
                    let mark = if Some(i) == self.best {
                        "  <- fastest"
                    } else {
                        ""
                    };
                    let _ = writeln!(
                        s,
                        "{head} {:>10} {:>10} {:>9} {:>7}{mark}",
                        opt_f(r.median_ms, 4),
                        opt_f(r.min_ms, 4),
                        opt_f(r.gbps, 1),
                        opt_f(pct, 1)
                    );
                }
                RecordStatus::Skipped(why) => {
                    let _ = writeln!(s, "{head} skipped: {why}");
                }
                RecordStatus::Failed(why) => {
                    let _ = writeln!(s, "{head} FAILED: {why}");
                }
            }
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{:<6} {:>12} {:>14} {:>10} {:>10}  status",
            "format", "convert ms", "GPU convert ms", "upload ms", "device MB"
        );
        for c in &self.conversions {
            let mut st = match &c.status {
                RecordStatus::Ok => "ok".to_string(),
                RecordStatus::Skipped(w) => format!("skipped: {w}"),
                RecordStatus::Failed(w) => format!("FAILED: {w}"),
            };
            if let Some(e) = &c.device_error {
                let _ = write!(st, "; GPU conversion FAILED: {e}");
            }
            let _ = writeln!(
                s,
                "{:<6} {:>12.1} {:>14} {:>10.1} {:>10.1}  {st}",
                c.format.to_string(),
                c.host_ms,
                opt_f(c.device_ms, 3),
                c.upload_ms,
                c.device_bytes as f64 / 1e6
            );
        }
        let _ = writeln!(s);
        let _ = writeln!(s, "fastest per format:");
        for r in self.fastest_per_format() {
            let [format, kernel, threads, blocks] = launch_columns(r);
            let _ = writeln!(
                s,
                "  {format:<6} {kernel:<28} {threads:>7} threads {blocks:>8} blocks {:>10} ms {:>9} GB/s",
                opt_f(r.median_ms, 4),
                opt_f(r.gbps, 1)
            );
        }
        if let Some(r) = self.best_own.and_then(|i| self.records.get(i)) {
            if Some(r) != self.fastest() {
                let _ = writeln!(s, "fastest of autopcg's kernels: {}", describe(r));
            }
        }
        match self.fastest() {
            Some(r) => {
                let _ = writeln!(s, "fastest: {}", describe(r));
            }
            None => {
                let _ = writeln!(s, "fastest: none (no candidate ran correctly)");
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{
        ConversionRecord, GridPolicy, SpmvBenchOptions, TriadResult, BYTES_FORMULA, TRIAD_ELEMS,
    };
    use crate::{DeviceProps, Format, TimingStats};
    use autopcg_sparse::features::features;
    use autopcg_sparse::CsrMatrix;

    fn props() -> DeviceProps {
        crate::testing::hopper_like_props()
    }

    #[test]
    fn fastest_leaves_out_failures_and_optionally_cusparse() {
        let recs = vec![
            record(Format::Csr, "spmv_csr_scalar", Some(2.0), RecordStatus::Ok),
            record(
                Format::Csr,
                "cusparse_spmv_csr_alg1",
                Some(1.0),
                RecordStatus::Ok,
            ),
            record(
                Format::Ell,
                "spmv_ell",
                Some(0.5),
                RecordStatus::Failed("wrong result".into()),
            ),
            record(Format::Coo, "spmv_coo_atomic", Some(2.0), RecordStatus::Ok),
        ];
        assert_eq!(fastest_index(&recs, false), Some(1));
        // Ties go to the earlier record.
        assert_eq!(fastest_index(&recs, true), Some(0));
        assert_eq!(fastest_index(&recs[2..3], false), None);
        assert_eq!(fastest_index(&[], true), None);
    }

    fn record(format: Format, kernel: &str, ms: Option<f64>, status: RecordStatus) -> SpmvRecord {
        let mut r = SpmvRecord::new(format, kernel.parse().unwrap(), 1000);
        r.status = status;
        r.median_ms = ms;
        r.min_ms = ms;
        r.max_ms = ms;
        r.gbps = ms.map(|t| 1000.0 / (t * 1e-3) / 1e9);
        if ms.is_some() {
            r.launch.threads = Some(256);
            r.launch.blocks = Some(4);
            r.launch.grid = Some(GridPolicy::Wave);
        }
        r
    }

    #[test]
    fn table_marks_the_fastest_and_shows_skips() {
        let a = CsrMatrix::from_triplets(2, 2, &[0, 1], &[0, 1], &[1.0, 2.0]).unwrap();
        let bench = SpmvBench {
            device: props(),
            matrix: features(&a),
            bytes_formula: BYTES_FORMULA.into(),
            bytes_csr_min: 1000,
            triad: Some(TriadResult {
                n: TRIAD_ELEMS,
                bytes: 24 * TRIAD_ELEMS as u64,
                threads: 256,
                blocks: 1000,
                stats: TimingStats {
                    median_ms: 1.0,
                    min_ms: 1.0,
                    max_ms: 1.0,
                    reps: 20,
                },
                gbps: 0.002,
            }),
            cusparse_version: Some("12.0.0".into()),
            compile_ms: 1.0,
            options: SpmvBenchOptions::default(),
            conversions: vec![
                ConversionRecord {
                    format: Format::Csr,
                    status: RecordStatus::Ok,
                    host_ms: 0.0,
                    upload_ms: 0.5,
                    device_bytes: 40,
                    device_ms: None,
                    device_error: None,
                },
                ConversionRecord {
                    format: Format::Ell,
                    status: RecordStatus::Ok,
                    host_ms: 2.0,
                    upload_ms: 0.5,
                    device_bytes: 48,
                    device_ms: Some(0.125),
                    device_error: None,
                },
                ConversionRecord {
                    format: Format::Dia,
                    status: RecordStatus::Ok,
                    host_ms: 2.0,
                    upload_ms: 0.5,
                    device_bytes: 48,
                    device_ms: None,
                    device_error: Some("out of memory".into()),
                },
            ],
            records: vec![
                record(Format::Csr, "spmv_csr_scalar", Some(2.0), RecordStatus::Ok),
                record(
                    Format::Csr,
                    "spmv_csr_vector_4",
                    Some(1.0),
                    RecordStatus::Ok,
                ),
                record(
                    Format::Ell,
                    "spmv_ell",
                    None,
                    RecordStatus::Skipped("ELL refused".into()),
                ),
                record(
                    Format::Coo,
                    "spmv_coo_atomic",
                    None,
                    RecordStatus::Failed("wrong result".into()),
                ),
                record(Format::Coo, "spmv_coo_segment", Some(3.0), RecordStatus::Ok),
            ],
            best: Some(1),
            best_own: Some(1),
        };
        let t = bench.table();
        let fastest: Vec<&str> = t.lines().filter(|l| l.contains("<- fastest")).collect();
        assert_eq!(fastest.len(), 1, "{t}");
        assert!(fastest[0].contains("spmv_csr_vector_4"), "{t}");
        // 1000 bytes in 1 ms = 0.001 GB/s, half the triad's 0.002.
        assert!(fastest[0].trim_end().ends_with("50.0  <- fastest"), "{t}");
        assert!(t.contains("skipped: ELL refused"), "{t}");
        assert!(t.contains("FAILED: wrong result"), "{t}");
        assert!(t.contains("12*nnz + 20*n"), "{t}");
        assert!(t.contains("GPU convert ms"), "{t}");
        let ell_line = t
            .lines()
            .find(|l| l.starts_with("ell ") && l.contains("ok"));
        assert!(ell_line.is_some_and(|l| l.contains(" 0.125 ")), "{t}");
        assert!(t.contains("GPU conversion FAILED: out of memory"), "{t}");
        let per = bench.fastest_per_format();
        assert_eq!(per.len(), 2);
        assert_eq!(per[0].launch.kernel.to_string(), "spmv_csr_vector_4");
        assert_eq!(per[1].launch.kernel.to_string(), "spmv_coo_segment");
        assert_eq!(
            bench.fastest().unwrap().launch.kernel.to_string(),
            "spmv_csr_vector_4"
        );
        // The kernel column is 28 wide whatever the kernel's name.
        for r in &bench.records {
            let name = r.launch.kernel.to_string();
            let line = t
                .lines()
                .find(|l| l.get(7..35).is_some_and(|k| k.trim_end() == name))
                .unwrap_or_else(|| panic!("no aligned line for {name}:\n{t}"));
            assert_eq!(&line[..7], format!("{:<6} ", r.launch.format.to_string()));
        }
        let json = serde_json::to_value(&bench).unwrap();
        assert_eq!(json["records"][2]["status"]["kind"], "skipped");
        assert_eq!(json["records"][2]["status"]["reason"], "ELL refused");
        assert_eq!(json["records"][0]["status"]["kind"], "ok");
        assert_eq!(json["best"], 1);
        assert_eq!(json["conversions"][1]["device_ms"], 0.125);
        assert!(json["conversions"][0].get("device_error").is_none());
        // Records written before the device conversion existed still read.
        let mut old = json["conversions"][0].clone();
        let o = old.as_object_mut().unwrap();
        o.remove("device_ms");
        let back: ConversionRecord = serde_json::from_value(old).unwrap();
        assert_eq!(back.device_ms, None);
    }
}
