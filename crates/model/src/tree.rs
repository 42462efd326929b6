//! The decision tree of method.md Alg. 3-1: from the time lines of the candidate launch
//! configurations in each test domain, the intervals of n on which each candidate is the
//! fastest, and an O(log) lookup from a size to its leaf.
//!
//! In one domain `(lo, hi]`, the lines cross each other only at their pairwise intersections;
//! between two consecutive crossings (or a crossing and a domain end) the order of the lines
//! cannot change, so one evaluation per sub-interval finds its fastest candidate. The tree is
//! generic over the label a leaf carries (a launch configuration in the vector and dot models).
use serde::{Deserialize, Deserializer, Serialize};

use crate::domains::Domain;
use crate::linear::Line;
use crate::ModelError;

/// One leaf: on sizes `lo < n <= hi` the candidate `label`, whose time line there is `line`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Leaf<L> {
    /// Excluded lower end.
    pub lo: u64,
    /// Included upper end.
    pub hi: u64,
    /// The fastest candidate on this interval.
    pub label: L,
    /// Its time line (milliseconds against elements) in the leaf's domain.
    pub line: Line,
}

impl<L> Leaf<L> {
    /// True when `lo < n <= hi`.
    pub fn contains(&self, n: u64) -> bool {
        self.lo < n && n <= self.hi
    }

    /// The predicted time at `n`, milliseconds.
    pub fn predict(&self, n: u64) -> f64 {
        self.line.eval(n as f64)
    }
}

/// Index of the candidate with the smallest time at `x`; ties go to the earliest candidate, so
/// identical lines resolve the same way everywhere.
fn argmin_at<L>(candidates: &[(L, Line)], x: f64) -> usize {
    let mut best = 0;
    let mut best_t = f64::INFINITY;
    for (i, (_, line)) in candidates.iter().enumerate() {
        let t = line.eval(x);
        if t < best_t {
            best = i;
            best_t = t;
        }
    }
    best
}

/// The candidates that can win somewhere inside `(lo, hi)`, in their original order.
///
/// A line no lower than another at both ends of the domain, and strictly higher at one end (or
/// identical to an earlier one), is higher at every point strictly inside, so it wins no
/// sub-interval of Alg. 3-1: dropping it before the pairwise intersections leaves the leaves
/// unchanged and saves the cubic cost of hundreds of grid-stride candidates.
fn undominated<L: Clone>(candidates: &[(L, Line)], lo: f64, hi: f64) -> Vec<(L, Line)> {
    let ends: Vec<(f64, f64)> = candidates
        .iter()
        .map(|(_, l)| (l.eval(lo), l.eval(hi)))
        .collect();
    let dominated = |i: usize| {
        let (a, b) = ends[i];
        ends.iter()
            .enumerate()
            .any(|(j, &(c, d))| j != i && c <= a && d <= b && (c < a || d < b || j < i))
    };
    (0..candidates.len())
        .filter(|&i| !dominated(i))
        .map(|i| candidates[i].clone())
        .collect()
}

/// Alg. 3-1 in one domain `(lo, hi]`: the leaves, in order, covering the domain, each naming the
/// fastest candidate on its interval; adjacent leaves of the same label are merged.
///
/// Intersections are real numbers; a leaf's integer bounds are their floors, which is exact
/// for integer sizes (`n <= s` if and only if `n <= floor(s)`). A sub-interval that holds no
/// integer is dropped. Empty `candidates` give no leaves. Errors when `lo >= hi` or a line is
/// not finite.
pub fn domain_leaves<L: Clone + PartialEq>(
    lo: u64,
    hi: u64,
    candidates: &[(L, Line)],
) -> Result<Vec<Leaf<L>>, ModelError> {
    if lo >= hi {
        return Err(ModelError::InvalidParameter(format!(
            "domain ({lo}, {hi}] is empty"
        )));
    }
    if let Some((_, l)) = candidates.iter().find(|(_, l)| !l.is_finite()) {
        return Err(ModelError::InvalidParameter(format!(
            "a candidate line is not finite: {l:?}"
        )));
    }
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let (flo, fhi) = (lo as f64, hi as f64);
    let candidates = undominated(candidates, flo, fhi);
    let candidates = candidates.as_slice();
    let mut cuts: Vec<f64> = Vec::new();
    for i in 0..candidates.len() {
        for j in i + 1..candidates.len() {
            if let Some(s) = candidates[i].1.intersect(&candidates[j].1) {
                if flo < s && s < fhi {
                    cuts.push(s);
                }
            }
        }
    }
    let leaf = |lo: u64, hi: u64, k: usize| Leaf {
        lo,
        hi,
        label: candidates[k].0.clone(),
        line: candidates[k].1,
    };
    if cuts.is_empty() {
        // No two lines cross inside the domain, so their order is the same at every size in
        // it: one evaluation anywhere decides. The midpoint keeps clear of the ends, where two
        // lines crossing exactly at an end would tie.
        let k = argmin_at(candidates, 0.5 * (flo + fhi));
        return Ok(vec![leaf(lo, hi, k)]);
    }
    cuts.sort_by(f64::total_cmp);
    cuts.dedup();
    // Interval ends as (real value, integer bound).
    let mut ends: Vec<(f64, u64)> = Vec::with_capacity(cuts.len() + 2);
    ends.push((flo, lo));
    // `s < hi` so its floor is below `hi` and fits u64.
    ends.extend(cuts.iter().map(|&s| (s, (s.floor() as u64).clamp(lo, hi))));
    ends.push((fhi, hi));
    let mut out: Vec<Leaf<L>> = Vec::new();
    for w in ends.windows(2) {
        let ((p, ilo), (q, ihi)) = (w[0], w[1]);
        if ihi <= ilo {
            continue; // no integer size inside
        }
        // Between consecutive crossings the order of the lines is fixed: test the middle.
        let k = argmin_at(candidates, 0.5 * (p + q));
        match out.last_mut() {
            Some(last) if last.label == candidates[k].0 => last.hi = ihi,
            _ => out.push(leaf(ilo, ihi, k)),
        }
    }
    Ok(out)
}

/// Leaves over all test domains, sorted by size, with a binary-search lookup.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecisionTree<L> {
    leaves: Vec<Leaf<L>>,
}

impl<L> Default for DecisionTree<L> {
    fn default() -> Self {
        DecisionTree { leaves: Vec::new() }
    }
}

impl<L: Clone + PartialEq> DecisionTree<L> {
    /// Runs [`domain_leaves`] in every domain and joins the leaves. Domains must be given in
    /// increasing order and not overlap; a domain with no candidate contributes no leaf.
    pub fn build(
        parts: impl IntoIterator<Item = (Domain, Vec<(L, Line)>)>,
    ) -> Result<DecisionTree<L>, ModelError> {
        let mut leaves = Vec::new();
        for (d, cands) in parts {
            leaves.extend(domain_leaves(d.lo, d.hi, &cands)?);
        }
        DecisionTree::from_leaves(leaves)
    }
}

impl<L> DecisionTree<L> {
    /// A tree from leaves that must be sorted, each non-empty (`lo < hi`), not overlapping
    /// (`hi` of one at most `lo` of the next) and with finite lines. Gaps are allowed.
    pub fn from_leaves(leaves: Vec<Leaf<L>>) -> Result<DecisionTree<L>, ModelError> {
        for (i, l) in leaves.iter().enumerate() {
            if l.lo >= l.hi {
                return Err(ModelError::InvalidParameter(format!(
                    "decision-tree leaf {i} is empty: ({}, {}]",
                    l.lo, l.hi
                )));
            }
            if !l.line.is_finite() {
                return Err(ModelError::InvalidParameter(format!(
                    "decision-tree leaf {i} has a non-finite line {:?}",
                    l.line
                )));
            }
        }
        if let Some(i) = leaves.windows(2).position(|w| w[0].hi > w[1].lo) {
            return Err(ModelError::InvalidParameter(format!(
                "decision-tree leaves {i} ({}, {}] and {} ({}, {}] overlap or are out of order",
                leaves[i].lo,
                leaves[i].hi,
                i + 1,
                leaves[i + 1].lo,
                leaves[i + 1].hi
            )));
        }
        Ok(DecisionTree { leaves })
    }

    /// The leaves, sorted by size.
    pub fn leaves(&self) -> &[Leaf<L>] {
        &self.leaves
    }

    /// True when the tree has no leaf.
    pub fn is_empty(&self) -> bool {
        self.leaves.is_empty()
    }

    /// The leaf for size `n`, by binary search: the leaf containing `n`; the first leaf for
    /// sizes at or below its lower end; the last leaf for sizes above its upper end; for a size
    /// in a gap between leaves (a domain nothing was fitted in), the next leaf above. `None`
    /// only for an empty tree.
    pub fn lookup(&self, n: u64) -> Option<&Leaf<L>> {
        let i = self.leaves.partition_point(|l| l.hi < n);
        self.leaves.get(i).or_else(|| self.leaves.last())
    }
}

impl<'de, L: Deserialize<'de>> Deserialize<'de> for DecisionTree<L> {
    /// Reads the leaves and checks them as [`DecisionTree::from_leaves`] does, so a hand-edited
    /// model file cannot break the lookup's ordering.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw<L> {
            leaves: Vec<Leaf<L>>,
        }
        let raw = Raw::<L>::deserialize(d)?;
        DecisionTree::from_leaves(raw.leaves).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans<L: Clone>(leaves: &[Leaf<L>]) -> Vec<(u64, u64, L)> {
        leaves
            .iter()
            .map(|l| (l.lo, l.hi, l.label.clone()))
            .collect()
    }

    #[test]
    fn three_lines_crossing_at_known_sizes() {
        // A = 0.5 n + 100, B = n + 40, C = 2 n: C < B for n < 40, B < A for n < 120, C < A for
        // n < 66.67. The fastest: C up to 40, B up to 120, A above.
        let c = vec![
            ("A", Line::new(0.5, 100.0)),
            ("B", Line::new(1.0, 40.0)),
            ("C", Line::new(2.0, 0.0)),
        ];
        let leaves = domain_leaves(0, 1000, &c).unwrap();
        assert_eq!(
            spans(&leaves),
            vec![(0, 40, "C"), (40, 120, "B"), (120, 1000, "A")]
        );
        assert_eq!(leaves[1].line, Line::new(1.0, 40.0));
        // Crossings that are not integers: C = B at 60.75, C = A at 80.83 (inside B's leaf, not
        // an end), B = A at 121 exactly.
        let c2 = vec![
            ("A", Line::new(0.5, 100.0)),
            ("B", Line::new(1.0, 39.5)),
            ("C", Line::new(2.0, -21.25)),
        ];
        let leaves = domain_leaves(10, 1000, &c2).unwrap();
        assert_eq!(
            spans(&leaves),
            vec![(10, 60, "C"), (60, 121, "B"), (121, 1000, "A")]
        );
        // Every integer size's leaf is as fast as the best line there.
        for n in 11..1000u64 {
            let x = n as f64;
            let best = c2
                .iter()
                .min_by(|p, q| p.1.eval(x).total_cmp(&q.1.eval(x)))
                .unwrap()
                .0;
            let leaf = leaves.iter().find(|l| l.contains(n)).unwrap();
            let t_leaf = leaf.line.eval(x);
            let t_best = c2.iter().find(|p| p.0 == best).unwrap().1.eval(x);
            assert!(t_leaf <= t_best, "n = {n}: leaf {} best {best}", leaf.label);
        }
    }

    #[test]
    fn a_domain_inside_one_crossing_interval_is_one_leaf() {
        let c = vec![
            ("A", Line::new(0.5, 100.0)),
            ("B", Line::new(1.0, 40.0)),
            ("C", Line::new(2.0, 0.0)),
        ];
        // Every crossing (40, 66.7, 120) is outside (200, 5000]: A everywhere.
        assert_eq!(
            spans(&domain_leaves(200, 5000, &c).unwrap()),
            vec![(200, 5000, "A")]
        );
        // Crossings exactly at the domain ends do not cut it.
        assert_eq!(
            spans(&domain_leaves(40, 120, &c).unwrap()),
            vec![(40, 120, "B")]
        );
        // One crossing inside, the others outside.
        assert_eq!(
            spans(&domain_leaves(100, 300, &c).unwrap()),
            vec![(100, 120, "B"), (120, 300, "A")]
        );
    }

    #[test]
    fn identical_and_parallel_lines() {
        // Identical lines: no crossing, the earlier candidate wins everywhere.
        let c = vec![("P", Line::new(1.0, 5.0)), ("Q", Line::new(1.0, 5.0))];
        assert_eq!(
            spans(&domain_leaves(0, 100, &c).unwrap()),
            vec![(0, 100, "P")]
        );
        // Parallel lines never cross: the lower one everywhere.
        let c = vec![("P", Line::new(1.0, 5.0)), ("Q", Line::new(1.0, 4.0))];
        assert_eq!(
            spans(&domain_leaves(0, 100, &c).unwrap()),
            vec![(0, 100, "Q")]
        );
        // A third line crossing both identical ones at 50: one cut, not two.
        let c = vec![
            ("P", Line::new(1.0, 5.0)),
            ("Q", Line::new(1.0, 5.0)),
            ("R", Line::new(0.5, 30.0)),
        ];
        assert_eq!(
            spans(&domain_leaves(0, 100, &c).unwrap()),
            vec![(0, 50, "P"), (50, 100, "R")]
        );
    }

    #[test]
    fn the_same_winner_on_both_sides_of_a_crossing_is_merged() {
        // B and C cross at 5 but A is below both everywhere: one leaf.
        let c = vec![
            ("A", Line::new(0.0, 1.0)),
            ("B", Line::new(1.0, 10.0)),
            ("C", Line::new(2.0, 5.0)),
        ];
        assert_eq!(
            spans(&domain_leaves(0, 100, &c).unwrap()),
            vec![(0, 100, "A")]
        );
    }

    #[test]
    fn sub_intervals_without_an_integer_are_dropped() {
        // C rises, A falls, they cross at 10.5; the flat B is below both only on (10.4, 10.6),
        // which holds no integer: C then A.
        let c = vec![
            ("A", Line::new(-1.0, 21.0)),
            ("B", Line::new(0.0, 10.4)),
            ("C", Line::new(1.0, 0.0)),
        ];
        let leaves = domain_leaves(0, 20, &c).unwrap();
        assert_eq!(spans(&leaves), vec![(0, 10, "C"), (10, 20, "A")]);
    }

    #[test]
    fn bad_domains_and_lines_are_errors() {
        let c = vec![("A", Line::new(1.0, 0.0))];
        assert!(domain_leaves(5, 5, &c).is_err());
        assert!(domain_leaves(6, 5, &c).is_err());
        assert!(domain_leaves(0, 5, &[("A", Line::new(f64::NAN, 0.0))]).is_err());
        assert!(domain_leaves::<&str>(0, 5, &[]).unwrap().is_empty());
    }

    proptest::proptest! {
        /// On random lines, every integer size of the domain lands in a leaf whose line is the
        /// lowest there (within rounding), and the leaves tile the domain.
        #[test]
        fn leaves_agree_with_a_scan_of_every_size(
            lines in proptest::collection::vec((-2.0f64..2.0, -200.0f64..200.0), 1..12),
            lo in 0u64..50,
            len in 1u64..400,
        ) {
            let c: Vec<(usize, Line)> =
                lines.iter().enumerate().map(|(i, &(a, b))| (i, Line::new(a, b))).collect();
            let hi = lo + len;
            let leaves = domain_leaves(lo, hi, &c).unwrap();
            proptest::prop_assert_eq!(leaves.first().unwrap().lo, lo);
            proptest::prop_assert_eq!(leaves.last().unwrap().hi, hi);
            for w in leaves.windows(2) {
                proptest::prop_assert_eq!(w[0].hi, w[1].lo);
                proptest::prop_assert!(w[0].label != w[1].label);
            }
            for n in lo + 1..=hi {
                let x = n as f64;
                let best = c.iter().map(|p| p.1.eval(x)).fold(f64::INFINITY, f64::min);
                let leaf = leaves.iter().find(|l| l.contains(n)).unwrap();
                let t = leaf.line.eval(x);
                proptest::prop_assert!(t <= best + 1e-9 * (1.0 + best.abs()),
                    "n = {}: leaf {} gives {}, best {}", n, leaf.label, t, best);
            }
        }
    }

    fn sample_tree() -> DecisionTree<String> {
        let c = |a: f64, b: f64| {
            vec![
                ("A".to_string(), Line::new(a, b)),
                ("B".to_string(), Line::new(2.0 * a, 0.0)),
            ]
        };
        // Domain 1: B up to 100 (crossing at b / a = 100), A above. Domain 2: B up to 3000.
        // Domain 3 missing (gap), domain 4: A only.
        DecisionTree::build(vec![
            (Domain { lo: 10, hi: 1000 }, c(1.0, 100.0)),
            (Domain { lo: 1000, hi: 5000 }, c(1.0, 3000.0)),
            (Domain { lo: 5000, hi: 8000 }, Vec::new()),
            (
                Domain { lo: 8000, hi: 9000 },
                vec![("A".to_string(), Line::new(1.0, 0.0))],
            ),
        ])
        .unwrap()
    }

    #[test]
    fn lookup_at_the_boundaries() {
        let t = sample_tree();
        assert_eq!(
            spans(t.leaves()),
            vec![
                (10, 100, "B".to_string()),
                (100, 1000, "A".to_string()),
                (1000, 3000, "B".to_string()),
                (3000, 5000, "A".to_string()),
                (8000, 9000, "A".to_string()),
            ]
        );
        let at = |n| {
            let l = t.lookup(n).unwrap();
            (l.lo, l.label.as_str())
        };
        assert_eq!(at(0), (10, "B")); // below the first leaf
        assert_eq!(at(10), (10, "B"));
        assert_eq!(at(11), (10, "B"));
        assert_eq!(at(100), (10, "B")); // upper end included
        assert_eq!(at(101), (100, "A"));
        assert_eq!(at(1000), (100, "A"));
        assert_eq!(at(1001), (1000, "B"));
        assert_eq!(at(3000), (1000, "B"));
        assert_eq!(at(3001), (3000, "A"));
        assert_eq!(at(5000), (3000, "A"));
        assert_eq!(at(6000), (8000, "A")); // in the gap: the next leaf above
        assert_eq!(at(9000), (8000, "A"));
        assert_eq!(at(u64::MAX), (8000, "A")); // above the last leaf
        assert!((t.lookup(200).unwrap().predict(200) - 300.0).abs() < 1e-12);
        assert!(DecisionTree::<String>::default().lookup(5).is_none());
    }

    #[test]
    fn serde_round_trip_and_checks_on_read() {
        let t = sample_tree();
        let s = serde_json::to_string(&t).unwrap();
        let back: DecisionTree<String> = serde_json::from_str(&s).unwrap();
        assert_eq!(back, t);
        // Leaves out of order are refused when read.
        let mut leaves = t.leaves().to_vec();
        leaves.swap(0, 1);
        let bad = serde_json::json!({ "leaves": leaves });
        assert!(serde_json::from_value::<DecisionTree<String>>(bad).is_err());
        let empty = vec![Leaf {
            lo: 5,
            hi: 5,
            label: 1u8,
            line: Line::new(0.0, 1.0),
        }];
        assert!(DecisionTree::from_leaves(empty).is_err());
    }
}
