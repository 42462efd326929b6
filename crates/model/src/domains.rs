//! Test domains: the ranges of vector length inside which a kernel's time is modelled by one
//! line (method.md 3.1 and 3.2), and the benchmark sizes sampled in each.
//!
//! The domain ends follow the reduction domains of the method — (1024, 102400],
//! (102400, 1024^2], then upwards — with every range above 102400 cut into factors of 4
//! (400 Ki, 1 Mi, 4 Mi, 16 Mi, 64 Mi, 256 Mi): on today's GPUs the L2 cache (50-60 MB, so the
//! vectors of an update leave it between 1 Mi and 4 Mi elements) and the number of resident
//! threads change the slope well inside the method's wider domains, and a line per factor of 4
//! follows those changes (measured on an H200: with factors of 8 and 16 the update trees picked
//! a configuration within 3% of the best at only 70% of the held-out sizes). Vector updates use
//! the same ends.
use serde::{Deserialize, Serialize};

/// Upper ends of the test domains below the largest size; the first domain starts after 1024.
pub const DOMAIN_ENDS: [u64; 8] = [
    102_400,
    409_600,
    1 << 20,
    1 << 22,
    1 << 24,
    1 << 26,
    1 << 28,
    1 << 30,
];

/// Smallest size modelled (the lower, excluded end of the first domain).
pub const MIN_SIZE: u64 = 1024;

/// A range `(lo, hi]` of vector lengths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Domain {
    /// Excluded lower end.
    pub lo: u64,
    /// Included upper end.
    pub hi: u64,
}

impl Domain {
    /// True when `lo < n <= hi`.
    pub fn contains(&self, n: u64) -> bool {
        self.lo < n && n <= self.hi
    }
}

/// The test domains up to `max_n` (the largest length that fits the device's memory budget):
/// the ends of [`DOMAIN_ENDS`] below `max_n`, then `max_n`. Empty when `max_n <= MIN_SIZE`.
pub fn domains(max_n: u64) -> Vec<Domain> {
    let mut out = Vec::new();
    let mut lo = MIN_SIZE;
    for &e in &DOMAIN_ENDS {
        if e >= max_n {
            break;
        }
        out.push(Domain { lo, hi: e });
        lo = e;
    }
    if max_n > lo {
        out.push(Domain { lo, hi: max_n });
    }
    out
}

/// `k` sizes spread geometrically over `(lo, hi]`, the last one `hi`, strictly increasing
/// (fewer when the domain holds fewer integers).
pub fn sample_sizes(d: &Domain, k: usize) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::with_capacity(k);
    if k == 0 || d.hi <= d.lo {
        return out;
    }
    let (lo, hi) = (d.lo as f64, d.hi as f64);
    for i in 1..=k {
        let v = (lo * (hi / lo).powf(i as f64 / k as f64)).round() as u64;
        let v = v.clamp(d.lo + 1, d.hi);
        if out.last().is_none_or(|&l| v > l) {
            out.push(v);
        }
    }
    if let Some(l) = out.last_mut() {
        *l = d.hi;
    }
    out
}

/// Sizes held out of the fit: the geometric midpoints between consecutive sizes of
/// [`sample_sizes`] (and between `lo` and the first), so evaluation never sees a fitted size.
pub fn held_out_sizes(d: &Domain, k: usize) -> Vec<u64> {
    let s = sample_sizes(d, k);
    let mut prev = d.lo.max(1) as f64;
    let mut out = Vec::new();
    for &v in &s {
        let m = (prev * v as f64).sqrt().round() as u64;
        if d.contains(m) && !s.contains(&m) && out.last().is_none_or(|&l| m > l) {
            out.push(m);
        }
        prev = v as f64;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_cover_up_to_the_largest_size() {
        let d = domains(50_000_000);
        assert_eq!(d.first().unwrap().lo, 1024);
        assert_eq!(d.last().unwrap().hi, 50_000_000);
        for w in d.windows(2) {
            assert_eq!(w[0].hi, w[1].lo);
        }
        // 102400, 409600, 1 Mi, 4 Mi, 16 Mi, then 50 M.
        assert_eq!(d.len(), 6);
        assert!(domains(1000).is_empty());
        assert_eq!(domains(2000), vec![Domain { lo: 1024, hi: 2000 }]);
    }

    #[test]
    fn samples_and_held_out_sizes_stay_inside_and_apart() {
        for d in domains(3_000_000_000) {
            let s = sample_sizes(&d, 5);
            assert_eq!(s.len(), 5);
            assert_eq!(*s.last().unwrap(), d.hi);
            assert!(s.iter().all(|&v| d.contains(v)));
            assert!(s.windows(2).all(|w| w[0] < w[1]));
            let h = held_out_sizes(&d, 5);
            assert!(h.len() >= 4);
            assert!(h.iter().all(|v| d.contains(*v) && !s.contains(v)));
        }
        let tiny = Domain { lo: 10, hi: 12 };
        assert_eq!(sample_sizes(&tiny, 5), vec![11, 12]);
    }
}
