//! Tests of the vector-update and reduction models on synthetic records with known lines.
use super::candidate::cover_blocks;
use super::*;
use crate::domains::domains;
use crate::domains::{held_out_sizes, sample_sizes};
use crate::linear::tests::noise;
use crate::linear::Line;
use crate::profile::{DotRecord, LaunchSample, Timing, VectorRecord};
use autopcg_catalog::{Dot3Kernel, DotKernel, Reduction, VectorKernel, VectorOp};

const MAX_N: u64 = 50_000_000;

/// A candidate with its true time line.
struct Truth {
    kernel: KernelId,
    threads: u32,
    /// `None`: cover with `elems` per thread; `Some((i, blocks))`: grid-stride.
    grid: Option<(u32, u32)>,
    elems: u32,
    line: Line,
}

impl Truth {
    fn blocks(&self, n: u64) -> u32 {
        match self.grid {
            Some((_, b)) => b,
            None => cover_blocks(n, self.elems, self.threads),
        }
    }
}

/// Best A up to 200 000, B up to 800 000, C up to 30 000 000, D above; E never.
fn lines() -> [Line; 5] {
    [
        Line::new(3.0e-8, 0.004),
        Line::new(2.0e-8, 0.006),
        Line::new(1.5e-8, 0.010),
        Line::new(1.4e-8, 0.040),
        Line::new(4.0e-8, 0.020),
    ]
}

fn vector_truths(op: VectorOp) -> Vec<Truth> {
    let [a, b, c, d, e] = lines();
    let k = |v: VectorVariant| KernelId::Vector(op.kernel(v));
    vec![
        Truth {
            kernel: k(VectorVariant::Elem),
            threads: 256,
            grid: None,
            elems: 1,
            line: a,
        },
        Truth {
            kernel: k(VectorVariant::ElemV2),
            threads: 128,
            grid: None,
            elems: 2,
            line: b,
        },
        Truth {
            kernel: k(VectorVariant::GridV2),
            threads: 256,
            grid: Some((2, 528)),
            elems: 0,
            line: c,
        },
        Truth {
            kernel: k(VectorVariant::Grid),
            threads: 512,
            grid: Some((1, 264)),
            elems: 0,
            line: d,
        },
        Truth {
            kernel: k(VectorVariant::Elem),
            threads: 64,
            grid: None,
            elems: 1,
            line: e,
        },
    ]
}

fn dot_truths() -> Vec<Truth> {
    let [a, b, c, d, e] = lines();
    let shift = |l: Line| Line::new(l.a * 1.5, l.b * 2.0);
    let dot = |k: DotKernel| KernelId::Reduction(Reduction::Dot(k));
    let dot3 = |k: Dot3Kernel| KernelId::Reduction(Reduction::Dot3(k));
    vec![
        Truth {
            kernel: dot(DotKernel::Sequential),
            threads: 256,
            grid: None,
            elems: 1,
            line: e,
        },
        Truth {
            kernel: dot(DotKernel::FirstAdd),
            threads: 128,
            grid: None,
            elems: 2,
            line: a,
        },
        Truth {
            kernel: dot(DotKernel::Vec2),
            threads: 256,
            grid: Some((1, 264)),
            elems: 0,
            line: b,
        },
        Truth {
            kernel: dot(DotKernel::Vec2),
            threads: 256,
            grid: Some((3, 792)),
            elems: 0,
            line: c,
        },
        Truth {
            kernel: dot(DotKernel::LastBlock),
            threads: 512,
            grid: Some((2, 528)),
            elems: 0,
            line: d,
        },
        Truth {
            kernel: dot3(Dot3Kernel::TwoPass),
            threads: 256,
            grid: Some((1, 264)),
            elems: 0,
            line: shift(a),
        },
        Truth {
            kernel: dot3(Dot3Kernel::LastBlock),
            threads: 256,
            grid: Some((2, 528)),
            elems: 0,
            line: shift(c),
        },
    ]
}

fn timing(ms: f64) -> Timing {
    Timing {
        median_ms: ms,
        min_ms: 0.99 * ms,
        max_ms: 1.01 * ms,
        reps: 10,
    }
}

/// Every truth at the sample sizes and held-out sizes of every domain, with 0.5 %
/// seeded noise.
fn sizes() -> Vec<(u64, bool)> {
    let mut out = Vec::new();
    for d in domains(MAX_N) {
        out.extend(sample_sizes(&d, 5).into_iter().map(|n| (n, false)));
        out.extend(held_out_sizes(&d, 5).into_iter().map(|n| (n, true)));
    }
    out
}

fn vector_profile(seed: u64) -> Profile {
    let mut p = Profile::default();
    let mut s = seed;
    for op in [VectorOp::Axpy, VectorOp::CgUpdate] {
        for t in vector_truths(op) {
            let KernelId::Vector(kernel) = t.kernel else {
                unreachable!("vector truths are vector kernels")
            };
            for (n, held_out) in sizes() {
                let ms = t.line.eval(n as f64) * (1.0 + 0.005 * noise(&mut s));
                // As profiles written before records carried the elements per thread: the
                // model takes them from the kernel.
                p.vector.push(VectorRecord {
                    kernel,
                    op,
                    variant: kernel.variant(),
                    sample: LaunchSample {
                        n,
                        threads: t.threads,
                        blocks: t.blocks(n),
                        nb_multiple: t.grid.map(|g| g.0),
                        elems_per_thread: None,
                        held_out,
                        timing: timing(ms),
                    },
                });
            }
        }
    }
    p
}

fn dot_profile(seed: u64) -> Profile {
    let mut p = Profile::default();
    let mut s = seed;
    for t in dot_truths() {
        for (n, held_out) in sizes() {
            let ms = t.line.eval(n as f64) * (1.0 + 0.005 * noise(&mut s));
            let KernelId::Reduction(kernel) = t.kernel else {
                unreachable!("dot truths are reductions")
            };
            p.dot.push(DotRecord {
                kernel,
                sample: LaunchSample {
                    n,
                    threads: t.threads,
                    blocks: t.blocks(n),
                    nb_multiple: t.grid.map(|g| g.0),
                    elems_per_thread: t.grid.is_none().then_some(t.elems),
                    held_out,
                    timing: timing(ms),
                },
            });
        }
    }
    p
}

/// Checks the picks at every held-out size against the true lines: never more than 1 %
/// slower than the true best, and exactly the true best where the runner-up is 3 % slower.
fn check_picks(truths: &[Truth], pick: impl Fn(u64) -> Option<Pick>) {
    for (n, held_out) in sizes() {
        if !held_out {
            continue;
        }
        let x = n as f64;
        let mut by_time: Vec<&Truth> = truths.iter().collect();
        by_time.sort_by(|a, b| a.line.eval(x).total_cmp(&b.line.eval(x)));
        let best = by_time[0];
        let p = pick(n).unwrap();
        let t = truths
            .iter()
            .find(|t| t.kernel == p.kernel && t.threads == p.threads && t.blocks(n) == p.blocks)
            .unwrap_or_else(|| panic!("n = {n}: pick {p:?} is no candidate"));
        let (tp, tb) = (t.line.eval(x), best.line.eval(x));
        assert!(
            tp <= 1.01 * tb,
            "n = {n}: picked {} ({tp}), best {} ({tb})",
            t.kernel,
            best.kernel
        );
        if by_time[1].line.eval(x) > 1.03 * tb {
            assert!(
                std::ptr::eq(t, best),
                "n = {n}: picked {}, best {}",
                t.kernel,
                best.kernel
            );
        }
        assert_eq!(p.nb_multiple, t.grid.map(|g| g.0));
        assert!(
            (p.predicted_ms - tp).abs() / tp < 0.02,
            "n = {n}: {p:?} vs {tp}"
        );
    }
}

#[test]
fn vector_models_pick_the_known_best_at_held_out_sizes() {
    let p = vector_profile(11);
    let m = VectorModels::fit(&p).unwrap();
    assert_eq!(m.ops.keys().collect::<Vec<_>>(), ["axpy", "cg_update"]);
    for op in [VectorOp::Axpy, VectorOp::CgUpdate] {
        let truths = vector_truths(op);
        check_picks(&truths, |n| m.pick(op.name(), n));
        let tm = &m.ops[op.name()];
        assert_eq!(tm.max_n, MAX_N);
        assert_eq!(tm.candidates, 5);
        assert_eq!(tm.quality.len(), crate::domains::domains(MAX_N).len());
        for q in &tm.quality {
            assert_eq!((q.fitted, q.skipped), (5, 0));
            assert!(q.worst_rel_residual < 0.011, "{q:?}");
            assert!(q.median_rel_residual <= q.worst_rel_residual);
            assert!(q.leaf_worst_rel_residual <= q.worst_rel_residual);
            assert!(q.leaves >= 1);
        }
    }
    // Covering block counts follow n: one element per thread, then two.
    let a = m.pick("axpy", 150_000).unwrap();
    assert_eq!(
        (a.kernel.to_string().as_str(), a.threads, a.blocks),
        ("axpy_elem", 256, 586)
    );
    assert_eq!(a.variant, Some(VectorVariant::Elem));
    let b = m.pick("axpy", 500_001).unwrap();
    assert_eq!(
        (b.kernel.to_string().as_str(), b.threads, b.blocks),
        ("axpy_elem_v2", 128, 1954)
    );
    let c = m.pick("axpy", 5_000_000).unwrap();
    assert_eq!(
        (c.kernel.to_string().as_str(), c.blocks, c.nb_multiple),
        ("axpy_grid_v2", 528, Some(2))
    );
    let d = m.pick("axpy", 40_000_000).unwrap();
    assert_eq!(
        (d.kernel, d.blocks),
        (
            KernelId::Vector(VectorKernel::Axpy(VectorVariant::Grid)),
            264
        )
    );
    // Sizes beyond the measured range use the last leaf, below it the first.
    let name = |n: u64| m.pick("axpy", n).unwrap().kernel.to_string();
    assert_eq!(name(10 * MAX_N), "axpy_grid");
    assert_eq!(name(10), "axpy_elem");
    assert!(m.pick("xpay", 1000).is_none());

    let r = evaluate(&m, &p);
    let held = sizes().iter().filter(|s| s.1).count();
    assert_eq!(r.count, 2 * held);
    assert_eq!(
        (r.measured, r.not_measured, r.within),
        (r.count, 0, r.count)
    );
    assert_eq!(r.share_within, 1.0);
    assert!(r.meets_target());
    assert!(
        r.worst_ratio >= 1.0 && r.worst_ratio <= WITHIN_TOLERANCE,
        "{}",
        r.worst_ratio
    );
    assert!(r.max_abs_prediction_error < 0.03, "{}", r.table);
    assert_eq!(r.table.lines().count(), r.count + 1);
    assert!(r.table.starts_with("group"));
}

#[test]
fn dot_models_pick_the_known_best_per_family() {
    let p = dot_profile(5);
    let m = DotModels::fit(&p).unwrap();
    assert_eq!(
        m.families.keys().collect::<Vec<_>>(),
        [DOT_FAMILY, DOT3_FAMILY]
    );
    let truths = dot_truths();
    let (three, one): (Vec<Truth>, Vec<Truth>) = truths
        .into_iter()
        .partition(|t| matches!(t.kernel, KernelId::Reduction(Reduction::Dot3(_))));
    check_picks(&one, |n| m.pick(DOT_FAMILY, n));
    check_picks(&three, |n| m.pick(DOT3_FAMILY, n));
    // dot_first_add covers two elements per thread: learnt from the records.
    let f = m.pick(DOT_FAMILY, 50_001).unwrap();
    assert_eq!(
        (f.kernel.to_string().as_str(), f.blocks, f.nb_multiple),
        ("dot_first_add", 196, None)
    );
    let leaf = m.families[DOT_FAMILY].tree.lookup(50_001).unwrap();
    assert_eq!(
        leaf.label.policy,
        BlockPolicy::Cover {
            elems_per_thread: 2
        }
    );
    // dot_vec2 at two block counts are two candidates.
    assert_eq!(m.families[DOT_FAMILY].candidates, 5);
    assert_eq!(m.families[DOT3_FAMILY].candidates, 2);
    assert_eq!(
        m.pick(DOT3_FAMILY, 100_000).unwrap().kernel,
        KernelId::Reduction(Reduction::Dot3(Dot3Kernel::TwoPass))
    );
    assert_eq!(
        m.pick(DOT3_FAMILY, 40_000_000).unwrap().kernel,
        KernelId::Reduction(Reduction::Dot3(Dot3Kernel::LastBlock))
    );
    assert_eq!(Reduction::Dot(DotKernel::Vec2).family(), DOT_FAMILY);
    assert_eq!(Reduction::Dot3(Dot3Kernel::TwoPass).family(), DOT3_FAMILY);

    let r = evaluate(&m, &p);
    assert_eq!(r.count, 2 * sizes().iter().filter(|s| s.1).count());
    assert_eq!(r.within, r.count, "{}", r.table);
    assert!(r.meets_target());
}

#[test]
fn held_out_records_never_enter_the_fit() {
    let p = vector_profile(3);
    let mut q = p.clone();
    for r in q.vector.iter_mut().filter(|r| r.sample.held_out) {
        r.sample.timing = timing(r.sample.timing.median_ms * 100.0);
    }
    assert_eq!(
        VectorModels::fit(&p).unwrap(),
        VectorModels::fit(&q).unwrap()
    );
    // ... but they are what the evaluation judges: scaling every held-out time of the
    // best candidate makes its picks the slowest.
    let m = VectorModels::fit(&p).unwrap();
    let r = evaluate(&m, &q);
    assert_eq!(r.share_within, 1.0, "all scaled alike, ratios unchanged");
    let mut q2 = p.clone();
    for r in q2
        .vector
        .iter_mut()
        .filter(|r| r.sample.held_out && r.kernel == VectorKernel::Axpy(VectorVariant::GridV2))
    {
        r.sample.timing = timing(r.sample.timing.median_ms * 2.0);
    }
    let r = evaluate(&m, &q2);
    assert!(r.share_within < 1.0 && r.worst_ratio > 1.5, "{}", r.table);
    assert!(!r.meets_target());
    assert_eq!(r.worst_at.as_ref().map(|w| w.0.as_str()), Some("axpy"));
}

#[test]
fn picks_that_were_not_measured_are_reported() {
    let p = vector_profile(9);
    let m = VectorModels::fit(&p).unwrap();
    let n = held_out_sizes(&domains(MAX_N)[2], 5)[1];
    let picked = m.pick("axpy", n).unwrap();
    let mut q = p.clone();
    q.vector.retain(|r| {
        !(r.sample.held_out
            && r.op == VectorOp::Axpy
            && r.sample.n == n
            && r.kernel_id() == picked.kernel)
    });
    let r = evaluate(&m, &q);
    assert_eq!(r.not_measured, 1);
    assert_eq!(r.measured, r.count - 1);
    assert_eq!(r.within, r.count - 1);
    let row = r
        .rows
        .iter()
        .find(|x| x.group == "axpy" && x.n == n)
        .unwrap();
    assert_eq!((row.picked_ms, row.ratio), (None, None));
    assert!(r.table.contains("not measured"));
    // No held-out records at all: nothing to judge.
    let mut q = p.clone();
    q.vector.retain(|r| !r.sample.held_out);
    let r = evaluate(&m, &q);
    assert_eq!(r.count, 0);
    assert!(!r.meets_target());
}

fn close(a: &TreeModel, b: &TreeModel) {
    assert_eq!(a.tree.leaves().len(), b.tree.leaves().len());
    for (x, y) in a.tree.leaves().iter().zip(b.tree.leaves()) {
        assert_eq!((x.lo, x.hi, &x.label), (y.lo, y.hi, &y.label));
        assert!((x.line.a - y.line.a).abs() <= 1e-14 * x.line.a.abs());
        assert!((x.line.b - y.line.b).abs() <= 1e-14 * x.line.b.abs());
    }
    assert_eq!(a.quality.len(), b.quality.len());
    assert_eq!(
        (a.name.as_str(), a.max_n, a.candidates),
        (b.name.as_str(), b.max_n, b.candidates)
    );
}

#[test]
fn fitted_models_survive_a_serde_round_trip() {
    let v = VectorModels::fit(&vector_profile(1)).unwrap();
    let back: VectorModels = serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
    for (op, tm) in &v.ops {
        close(tm, &back.ops[op]);
        for (n, _) in sizes() {
            let (a, b) = (v.pick(op, n).unwrap(), back.pick(op, n).unwrap());
            assert_eq!(
                (&a.kernel, a.threads, a.blocks),
                (&b.kernel, b.threads, b.blocks)
            );
        }
    }
    let d = DotModels::fit(&dot_profile(1)).unwrap();
    let back: DotModels = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
    for (f, tm) in &d.families {
        close(tm, &back.families[f]);
    }
    let r = evaluate(&d, &dot_profile(1));
    let back: TreeEvalReport = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    assert_eq!(
        (back.count, back.within, &back.table),
        (r.count, r.within, &r.table)
    );
}

#[test]
fn profiles_without_usable_records_are_fit_errors() {
    let empty = Profile::default();
    let e = VectorModels::fit(&empty).unwrap_err();
    assert!(matches!(e, ModelError::Fit { .. }), "{e}");
    assert!(e.to_string().contains("vector-update"), "{e}");
    let e = DotModels::fit(&empty).unwrap_err();
    assert!(matches!(e, ModelError::Fit { .. }), "{e}");
    // Vector records do not make dot models.
    assert!(DotModels::fit(&vector_profile(1)).is_err());

    // One size per candidate and domain: no line anywhere.
    let mut p = vector_profile(1);
    let firsts: Vec<u64> = domains(MAX_N)
        .iter()
        .map(|d| sample_sizes(d, 5)[0])
        .collect();
    p.vector.retain(|r| firsts.contains(&r.sample.n));
    let e = VectorModels::fit(&p).unwrap_err().to_string();
    assert!(e.contains("two fitted sizes"), "{e}");

    // Only sizes below the first domain.
    let mut p = vector_profile(1);
    for r in &mut p.vector {
        r.sample.n = 1000;
    }
    let e = VectorModels::fit(&p).unwrap_err().to_string();
    assert!(e.contains("not above"), "{e}");

    // Invalid timings are dropped, not fitted; with nothing left it is an error.
    let mut p = dot_profile(1);
    for r in &mut p.dot {
        r.sample.timing.median_ms = f64::NAN;
    }
    let e = DotModels::fit(&p).unwrap_err();
    assert!(matches!(e, ModelError::Fit { .. }), "{e}");
    let mut p = dot_profile(1);
    p.dot[0].sample.timing.median_ms = -1.0;
    let m = DotModels::fit(&p).unwrap();
    assert_eq!(m.families[DOT_FAMILY].dropped_records, 1);
}

#[test]
fn covering_block_counts_no_rule_explains_are_errors() {
    let mut p = vector_profile(1);
    let r = p
        .vector
        .iter_mut()
        .find(|r| {
            r.kernel == VectorKernel::Axpy(VectorVariant::Elem)
                && r.sample.threads == 256
                && r.sample.n > 100_000
        })
        .unwrap();
    r.sample.blocks += 7;
    let e = VectorModels::fit(&p).unwrap_err().to_string();
    assert!(
        e.contains("axpy_elem") && e.contains("elements per thread"),
        "{e}"
    );
}
