//! Selection on the committed H200 model: plans are valid, every decision the entry point
//! makes is pinned (form, fallback, polling, CPU), not only checked for validity.
use std::path::Path;

use autopcg_catalog::{DeviceProps, Format, LaunchConfig, VectorVariant};
use autopcg_solver::gpu::PrecondChoice;
use autopcg_solver::{auto_omega, PrecondKind, SsorForm};
use autopcg_sparse::families;

use super::*;

/// The committed H200 model: a real fit, read as any solve reads it.
fn model() -> ModelFile {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/nvidia-h200.json");
    ModelFile::load(&p).expect("the committed H200 model loads")
}

fn gpu() -> Target {
    Target::Gpu(DeviceProps::hopper_like())
}

fn fixture(name: &str) -> CsrMatrix {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../matrices")
        .join(format!("{name}.mtx"));
    autopcg_sparse::mm::read_matrix(&p, &Default::default())
        .expect("fixture")
        .matrix
}

fn with_model<'a>(a: &'a CsrMatrix, kind: PrecondKind, m: &'a ModelFile) -> PlanRequest<'a> {
    let mut r = PlanRequest::new(a, kind, gpu());
    r.model = Some(ModelRef {
        file: m,
        label: "h200",
    });
    r
}

fn check_modelled(p: &SolvePlan) {
    let c = p.gpu.as_ref().expect("a GPU plan");
    assert!(c.a.predicted_ms.is_some_and(|t| t > 0.0));
    assert!(c.update.predicted_ms.is_some_and(|t| t > 0.0));
    assert!(c.dot3.predicted_ms.is_some_and(|t| t > 0.0));
    assert!(p.predicted_iteration_ms.is_some_and(|t| t > 0.0));
    assert_eq!(p.model.as_deref(), Some("h200"));
    for e in &p.explain {
        assert!(!e.options.is_empty());
        // The choice first: by score, but for a form chosen by the model's form tree, which
        // reads no score.
        if !e.why.starts_with("the form model") {
            assert!(e.options.windows(2).all(|w| w[0].score_ms <= w[1].score_ms));
        }
    }
}

/// What two plans of one matrix must share to be the same plan: the preconditioner as applied
/// (its omega's bits), every step, the explanations and the predicted time.
#[allow(clippy::type_complexity)]
fn summary(p: &SolvePlan) -> (String, Option<u64>, String, String, String, Option<f64>) {
    (
        p.kind.to_string(),
        p.kind.omega().map(f64::to_bits),
        p.precond_applied().to_string(),
        format!("{:?}", p.gpu),
        format!("{:?}", p.explain),
        p.predicted_iteration_ms,
    )
}

/// Other totals for a count made elsewhere: every row reads twice as far from its diagonal
/// (four times the lines of `x`), and one row takes an entry from each of up to 200 rows of
/// the commonest length, so rows and entries still add up while the longest row (what the
/// busiest thread's loop trips read) grows. Predictions in either regime of the SpMV model
/// (launched alone, where `x`'s lines weigh; replayed, where the loop trips do) differ.
fn disturb(t: &mut autopcg_sparse::features::StructureTotals) {
    t.x_lines *= 4;
    t.dist *= 2;
    let (l, &count) = t
        .hist
        .iter()
        .enumerate()
        .skip(2)
        .max_by_key(|&(_, &c)| c)
        .expect("a row of two entries or more");
    let k = (count.saturating_sub(1)).min(200) as usize;
    assert!(k > 0, "rows of the commonest length to take from");
    t.hist[l] -= k as u64 + 1;
    t.hist[l - 1] += k as u64;
    if t.hist.len() <= l + k {
        t.hist.resize(l + k + 1, 0);
    }
    t.hist[l + k] += 1;
}

#[test]
fn stencil_plan_is_valid_and_never_hyb_without_a_coo_part() {
    let m = model();
    let a = families::poisson3d_7pt(24, 24, 24).unwrap();
    let p = plan(&with_model(&a, PrecondKind::ssor_ai(), &m)).unwrap();
    check_modelled(&p);
    let c = p.gpu.as_ref().unwrap();
    assert_ne!(c.a.method.format(), Format::Hyb);
    assert!(matches!(c.precond, PrecondChoice::Factored { .. }));
    let steps: Vec<&str> = p.explain.iter().map(|e| e.step.as_str()).collect();
    assert_eq!(steps, ["spmv A", "spmv K", "spmv K^T", "update", "dots"]);
}

/// A model with a form tree picks the form by the tree, not by the predicted SpMV times: the
/// committed H200 model predicts the explicit form faster on s3rmt3m3 and on 3D Poisson 64^3
/// (above and in the README); a tree "iteration within L2: explicit, else factored" keeps
/// s3rmt3m3 explicit and makes 3D Poisson 64^3 factored, and a tree of one factored leaf makes
/// both factored.
#[test]
fn a_form_tree_in_the_model_picks_the_form() {
    use autopcg_model::form::{FormFeature, FormModel, FormPick, FormQuality, FormTree};
    let q = FormQuality {
        matrices: 6,
        right: 6,
        worst_slowdown: 1.0,
    };
    let with_tree = |tree: FormTree| {
        let mut m = model();
        m.ssor_form = Some(FormModel {
            tree,
            depth: 1,
            cross_validated: Vec::new(),
            cross_validated_error: Vec::new(),
            points: Vec::new(),
            fit: q.clone(),
            held_out: q.clone(),
        });
        m
    };
    let split = with_tree(FormTree::Split {
        feature: FormFeature::IterationL2,
        threshold: 1.0,
        below: Box::new(FormTree::Leaf(FormPick::Explicit)),
        above: Box::new(FormTree::Leaf(FormPick::Factored)),
    });
    let leaf = with_tree(FormTree::Leaf(FormPick::Factored));
    let plain = model();
    let small = fixture("s3rmt3m3");
    let big = families::poisson3d_7pt(64, 64, 64).unwrap();
    let applied = |a: &CsrMatrix, m: &ModelFile| {
        let mut r = with_model(a, PrecondKind::ssor_ai().with_omega(auto_omega(a)), m);
        r.ssor_form_auto = true;
        let p = plan(&r).unwrap();
        check_modelled(&p);
        let form = p
            .explain
            .iter()
            .find(|e| e.step == "ssor-ai form")
            .unwrap()
            .clone();
        (p.precond_applied().to_string(), form)
    };
    for a in [&small, &big] {
        let (applied, form) = applied(a, &plain);
        assert_eq!(applied, "ssor-ai-explicit");
        assert!(form.why.starts_with("least predicted"));
    }
    let (s, form) = applied(&small, &split);
    assert_eq!(s, "ssor-ai-explicit");
    assert!(form.why.contains("form model"), "{}", form.why);
    assert!(form.options[0].name.starts_with("explicit"));
    let (b, form) = applied(&big, &split);
    assert_eq!(b, "ssor-ai-factored");
    // The chosen form first, though its predicted time is the larger.
    assert!(form.options[0].name.starts_with("factored"));
    assert!(form.options[0].predicted_ms > form.options[1].predicted_ms);
    for a in [&small, &big] {
        assert_eq!(applied(a, &leaf).0, "ssor-ai-factored");
    }
    // Second order: the tree, fitted on first order's iterations, is not read; the predicted
    // times decide, as without a tree.
    // (3D Poisson 16^3: s3rmt3m3's second-order product is past its bound.)
    let p16 = families::poisson3d_7pt(16, 16, 16).unwrap();
    let second = |m: &ModelFile| {
        let kind = PrecondKind::ssor_ai2().with_omega(auto_omega(&p16));
        let mut r = with_model(&p16, kind, m);
        r.ssor_form_auto = true;
        let p = plan(&r).unwrap();
        let form = p
            .explain
            .iter()
            .find(|e| e.step == "ssor-ai form")
            .unwrap_or_else(|| panic!("no form comparison: {:?}", p.notes))
            .clone();
        (p.precond_applied().to_string(), form)
    };
    let (with_leaf, why) = second(&leaf);
    assert_eq!(with_leaf, second(&plain).0);
    // (The tree, a factored leaf, would have made it factored.)
    assert_eq!(with_leaf, "ssor-ai-explicit");
    assert!(why.why.starts_with("least predicted"), "{}", why.why);
    assert!(why.why.contains("not order 2"), "{}", why.why);
}

#[test]
fn the_model_chooses_the_explicit_form_where_it_predicts_it_faster() {
    let m = model();
    let a = fixture("s3rmt3m3");
    let kind = PrecondKind::ssor_ai().with_omega(auto_omega(&a));
    let mut r = with_model(&a, kind, &m);
    r.ssor_form_auto = true;
    let p = plan(&r).unwrap();
    check_modelled(&p);
    assert_eq!(p.precond_applied(), "ssor-ai-explicit");
    let form = &p.explain[0];
    assert_eq!(form.step, "ssor-ai form");
    assert!(form.options[0].name.starts_with("explicit"));
    assert!(form.options[0].predicted_ms < form.options[1].predicted_ms);
    // Rows of K^T of up to 36 entries, past one thread's merge and within what the device
    // gathers for a row: the product is the GPU backend's to form from A.
    assert_eq!(
        p.preconditioner,
        PlannedPrecond::SsorK1ExplicitFromA {
            omega: auto_omega(&a),
            n: a.nrows()
        }
    );
    assert_eq!(
        p.kind,
        PlannedPrecond::ssor_k1_explicit_kind(auto_omega(&a))
    );
    assert!(p.notes.iter().any(|n| n.contains("formed on the device")));
    // An arrow (a dense first row and column): row 0 of K^T holds every column, past what
    // the device gathers for a row, and the product is formed on the host.
    let n = DEVICE_EXPLICIT_KT_MAX + 100;
    let (mut rows, mut cols, mut vals) = (vec![0], vec![0], vec![2.0 * n as f64]);
    for i in 1..n as u32 {
        rows.extend([i, i, 0]);
        cols.extend([i, 0, i]);
        vals.extend([2.0, -1.0, -1.0]);
    }
    let arrow = CsrMatrix::from_triplets(n, n, &rows, &cols, &vals).unwrap();
    let omega = auto_omega(&arrow);
    // Its products priced as launched alone, where the model picks the explicit form for it
    // (the replayed regime prices the factored form cheaper): what is pinned here
    // is where an explicit product the model picks is formed.
    let mut alone = m.clone();
    alone.spmv.replayed.clear();
    let mut r = with_model(&arrow, PrecondKind::ssor_ai().with_omega(omega), &alone);
    r.ssor_form_auto = true;
    let p = plan(&r).unwrap();
    check_modelled(&p);
    assert_eq!(p.precond_applied(), "ssor-ai-explicit");
    assert!(matches!(
        p.preconditioner,
        PlannedPrecond::Built(Preconditioner::SsorExplicit { .. })
    ));
    assert!(!p.notes.iter().any(|n| n.contains("formed on the device")));
    // Within one thread's merge (a P1 FEM mesh, 5 entries at most): the product is the GPU
    // backend's to form from A, with the factors' omega; its host copy is the host's explicit
    // build.
    let fem = families::fem_p1_2d(20_000, 3).unwrap();
    let omega = auto_omega(&fem);
    let mut r = with_model(&fem, PrecondKind::ssor_ai().with_omega(omega), &m);
    r.ssor_form_auto = true;
    let p = plan(&r).unwrap();
    check_modelled(&p);
    assert_eq!(
        p.preconditioner,
        PlannedPrecond::SsorK1ExplicitFromA {
            omega,
            n: fem.nrows()
        }
    );
    assert!(p.notes.iter().any(|n| n.contains("formed on the device")));
    let mut pre = p.preconditioner.clone();
    assert_eq!(
        *pre.host(&fem).unwrap(),
        Preconditioner::build(&fem, &p.kind).unwrap()
    );
    // Without `ssor_form_auto`, the asked form stays.
    r.ssor_form_auto = false;
    assert_eq!(plan(&r).unwrap().precond_applied(), "ssor-ai-factored");
}

/// The explicit product's structure counted elsewhere (the GPU, in the prepared solver) is
/// what the form's comparison reads: the same totals plan what the host's count plans, a
/// count that fails or does not add up falls back to the host's (noted), and other totals give
/// other predictions (so the counter's values are the ones used).
#[test]
fn a_count_made_elsewhere_is_the_one_the_form_reads() {
    use crate::factors::{GramCounter, K1Factors};
    use autopcg_sparse::features::StructureTotals;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let m = model();
    let a = fixture("s3rmt3m3");
    let kind = PrecondKind::ssor_ai().with_omega(auto_omega(&a));
    let mut r = with_model(&a, kind, &m);
    r.ssor_form_auto = true;
    let host = plan(&r).unwrap();
    let summary = |p: &SolvePlan| {
        let form = p.explain.iter().find(|e| e.step == "ssor-ai form").unwrap();
        let opts: Vec<(String, f64)> = form
            .options
            .iter()
            .map(|o| (o.name.clone(), o.score_ms))
            .collect();
        (
            p.precond_applied().to_string(),
            format!("{:?}", p.gpu),
            opts,
        )
    };
    let calls = AtomicUsize::new(0);
    let same = |b: &CsrMatrix, longest: usize| -> Result<Option<StructureTotals>, String> {
        assert_eq!(
            longest,
            (0..b.nrows())
                .map(|i| K1Factors::of(b).unwrap().kt_row(i).len())
                .max()
                .unwrap()
        );
        calls.fetch_add(1, Ordering::Relaxed);
        Ok(Some(K1Factors::of(b).unwrap().gram_totals()))
    };
    r.gram_counter = Some(GramCounter(&same));
    let counted = plan(&r).unwrap();
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    assert_eq!(summary(&counted), summary(&host));
    assert!(!counted
        .notes
        .iter()
        .any(|n| n.contains("counted on the host")));
    // Refused (the device cannot count it): the host counts, silently.
    let refused = |_: &CsrMatrix, _| -> Result<Option<StructureTotals>, String> { Ok(None) };
    r.gram_counter = Some(GramCounter(&refused));
    let p = plan(&r).unwrap();
    assert_eq!(summary(&p), summary(&host));
    assert!(!p.notes.iter().any(|n| n.contains("counted on the host")));
    // Failed: the host counts, and the note says why.
    let failed =
        |_: &CsrMatrix, _| -> Result<Option<StructureTotals>, String> { Err("no room".into()) };
    r.gram_counter = Some(GramCounter(&failed));
    let p = plan(&r).unwrap();
    assert_eq!(summary(&p), summary(&host));
    assert!(p
        .notes
        .iter()
        .any(|n| n.contains("counted on the host") && n.contains("no room")));
    // Totals whose rows do not add up to the matrix's: the host counts, noted.
    let lost = |b: &CsrMatrix, _| -> Result<Option<StructureTotals>, String> {
        let mut t = K1Factors::of(b).unwrap().gram_totals();
        t.hist[1] += 1;
        Ok(Some(t))
    };
    r.gram_counter = Some(GramCounter(&lost));
    let p = plan(&r).unwrap();
    assert_eq!(summary(&p), summary(&host));
    assert!(p.notes.iter().any(|n| n.contains("does not add up")));
    // Other totals ([`disturb`]): other predictions.
    let other = |b: &CsrMatrix, _| -> Result<Option<StructureTotals>, String> {
        let mut t = K1Factors::of(b).unwrap().gram_totals();
        disturb(&mut t);
        Ok(Some(t))
    };
    r.gram_counter = Some(GramCounter(&other));
    let p = plan(&r).unwrap();
    assert_ne!(summary(&p).2, summary(&host).2);
}

/// The structure of A and of the factors counted elsewhere (the GPU, in the prepared solver)
/// is what the selection reads: the same totals plan what the host's pass plans, with every
/// prediction equal; a count that is refused, fails or does not add up falls back to the
/// host's (the last two noted); other totals give other predictions (so the counter's values
/// are the ones used).
#[test]
fn a_factor_count_made_elsewhere_is_the_one_the_selection_reads() {
    use crate::factors::{FactorCounter, K1Factors};
    use autopcg_sparse::features::K1Totals;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let m = model();
    for a in [
        fixture("s3rmt3m3"),
        families::poisson3d_7pt(30, 30, 30).unwrap(),
    ] {
        let omega = auto_omega(&a);
        let mut r = with_model(&a, PrecondKind::ssor_ai().with_omega(omega), &m);
        r.ssor_form_auto = true;
        r.symmetry = KnownSymmetry::Symmetric;
        let host = plan(&r).unwrap();
        let calls = AtomicUsize::new(0);
        let same = |b: &CsrMatrix, w: f64| -> Result<Option<K1Totals>, String> {
            assert_eq!(w, omega);
            calls.fetch_add(1, Ordering::Relaxed);
            Ok(Some(K1Factors::of(b).unwrap().factor_totals(w)))
        };
        r.factor_counter = Some(FactorCounter(&same));
        let counted = plan(&r).unwrap();
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        assert_eq!(summary(&counted), summary(&host));
        assert!(!counted.notes.iter().any(|n| n.contains("factors")));
        let refused = |_: &CsrMatrix, _| -> Result<Option<K1Totals>, String> { Ok(None) };
        r.factor_counter = Some(FactorCounter(&refused));
        let p = plan(&r).unwrap();
        assert_eq!(summary(&p), summary(&host));
        assert!(!p.notes.iter().any(|n| n.contains("factors")));
        let failed =
            |_: &CsrMatrix, _| -> Result<Option<K1Totals>, String> { Err("no room".into()) };
        r.factor_counter = Some(FactorCounter(&failed));
        let p = plan(&r).unwrap();
        assert_eq!(summary(&p), summary(&host));
        assert!(p
            .notes
            .iter()
            .any(|n| n.contains("counted on the host") && n.contains("no room")));
        let lost = |b: &CsrMatrix, w: f64| -> Result<Option<K1Totals>, String> {
            let mut t = K1Factors::of(b).unwrap().factor_totals(w);
            t.a.hist[1] += 1;
            Ok(Some(t))
        };
        r.factor_counter = Some(FactorCounter(&lost));
        let p = plan(&r).unwrap();
        assert_eq!(summary(&p), summary(&host));
        assert!(p.notes.iter().any(|n| n.contains("does not add up")));
        // Other totals of A and the factors ([`disturb`]): other predictions.
        let other = |b: &CsrMatrix, w: f64| -> Result<Option<K1Totals>, String> {
            let mut t = K1Factors::of(b).unwrap().factor_totals(w);
            for s in [&mut t.a, &mut t.k, &mut t.kt] {
                disturb(s);
            }
            Ok(Some(t))
        };
        r.factor_counter = Some(FactorCounter(&other));
        let p = plan(&r).unwrap();
        assert_ne!(summary(&p).4, summary(&host).4);
    }
}

/// Second-order factored SSOR-AI's factors counted elsewhere (the GPU, in the prepared solver)
/// are left to the backend with the plan the host's built factors give: the same SpMV choices,
/// explanations and predictions, with a model or by the fallback rule. Where the model may
/// choose the explicit form and the product is within its bound (20^3 Poisson, below 4e6
/// entries) the host builds them (it counts the product from them); outside it (40^3 Poisson:
/// K's ten entries a row bound the product past 8 nnz(A); s3rmt3m3), or with the form fixed,
/// the backend does. A count refused
/// builds on the host; one that fails or does not add up too, noted; other totals give other
/// predictions (the counter's are the ones read).
#[test]
fn second_order_factors_counted_elsewhere_are_left_to_the_backend() {
    use crate::factors::{structure_totals, FactorCounter, K1Factors, K2Counter, K2Totals};
    use autopcg_solver::{PlannedPrecond, Preconditioner};
    use autopcg_sparse::features::K1Totals;
    let m = model();
    let host_totals = |b: &CsrMatrix, w: f64| -> K2Totals {
        match Preconditioner::build(b, &PlannedPrecond::ssor_k2_kind(w)).unwrap() {
            Preconditioner::SsorFactored { k, kt, .. } => K2Totals {
                k: structure_totals(&k),
                kt: structure_totals(&kt),
            },
            other => panic!("factored form expected, got {}", other.kind_name()),
        }
    };
    let first = |b: &CsrMatrix, w: f64| -> Result<Option<K1Totals>, String> {
        Ok(Some(K1Factors::of(b).unwrap().factor_totals(w)))
    };
    let device_note = "second-order SSOR-AI's K = I - X + X^2";
    for (a, within) in [
        (families::poisson3d_7pt(40, 40, 40).unwrap(), false),
        (fixture("s3rmt3m3"), false),
        (families::poisson3d_7pt(20, 20, 20).unwrap(), true),
    ] {
        let omega = auto_omega(&a);
        let kind = PrecondKind::ssor_ai2().with_omega(omega);
        let same =
            |b: &CsrMatrix| -> Result<Option<K2Totals>, String> { Ok(Some(host_totals(b, omega))) };
        for (modelled, auto) in [(false, false), (true, false), (true, true)] {
            let tag = format!("n {}, model {modelled}, auto {auto}", a.nrows());
            let mut r = match modelled {
                true => with_model(&a, kind, &m),
                false => PlanRequest::new(&a, kind, gpu()),
            };
            r.ssor_form_auto = auto;
            r.symmetry = KnownSymmetry::Symmetric;
            let host = plan(&r).unwrap();
            assert!(
                matches!(host.preconditioner, PlannedPrecond::Built(_)),
                "{tag}"
            );
            r.factor_counter = Some(FactorCounter(&first));
            // Without the factors' counter nothing changes.
            assert_eq!(summary(&plan(&r).unwrap()), summary(&host), "{tag}");
            r.k2_counter = Some(K2Counter(&same));
            let p = plan(&r).unwrap();
            let left = !(modelled && auto && within);
            assert_eq!(
                matches!(p.preconditioner, PlannedPrecond::SsorK2FromA { .. }),
                left,
                "{tag}"
            );
            assert_eq!(
                p.notes.iter().any(|n| n.contains(device_note)),
                left,
                "{tag}"
            );
            assert_eq!(summary(&p), summary(&host), "{tag}");
            if modelled && auto && !within {
                assert!(p.notes.iter().any(|n| n.contains("kept factored")), "{tag}");
            }
            if !left {
                continue;
            }
            assert_eq!(p.kind, PlannedPrecond::ssor_k2_kind(omega), "{tag}");
            let refused = |_: &CsrMatrix| -> Result<Option<K2Totals>, String> { Ok(None) };
            r.k2_counter = Some(K2Counter(&refused));
            let q = plan(&r).unwrap();
            assert!(
                matches!(q.preconditioner, PlannedPrecond::Built(_)),
                "{tag}"
            );
            assert_eq!(summary(&q), summary(&host), "{tag}");
            let failed =
                |_: &CsrMatrix| -> Result<Option<K2Totals>, String> { Err("no room".into()) };
            r.k2_counter = Some(K2Counter(&failed));
            let q = plan(&r).unwrap();
            assert!(
                matches!(q.preconditioner, PlannedPrecond::Built(_)),
                "{tag}"
            );
            assert!(
                q.notes
                    .iter()
                    .any(|n| n.contains("built on the host") && n.contains("no room")),
                "{tag}: {:?}",
                q.notes
            );
            let lost = |b: &CsrMatrix| -> Result<Option<K2Totals>, String> {
                let mut t = host_totals(b, omega);
                t.kt.hist[1] += 1;
                Ok(Some(t))
            };
            r.k2_counter = Some(K2Counter(&lost));
            let q = plan(&r).unwrap();
            assert!(
                matches!(q.preconditioner, PlannedPrecond::Built(_)),
                "{tag}"
            );
            assert!(
                q.notes.iter().any(|n| n.contains("does not add up")),
                "{tag}"
            );
            if modelled {
                // Other totals of the factors ([`disturb`]): other predictions.
                let other = |b: &CsrMatrix| -> Result<Option<K2Totals>, String> {
                    let mut t = host_totals(b, omega);
                    for s in [&mut t.k, &mut t.kt] {
                        disturb(s);
                    }
                    Ok(Some(t))
                };
                r.k2_counter = Some(K2Counter(&other));
                let q = plan(&r).unwrap();
                assert!(
                    matches!(q.preconditioner, PlannedPrecond::SsorK2FromA { .. }),
                    "{tag}"
                );
                assert_ne!(summary(&q).4, summary(&host).4, "{tag}");
            }
        }
    }
}

/// SSOR-AI's checks of A read elsewhere (the GPU's, in the prepared solver) are what the plan
/// reads: the host's checks plan what the host's passes plan, with the automatic omega and every
/// prediction equal; a check refused or failed falls back to the host's passes (the failure
/// noted); a check finding a bad diagonal leaves the preconditioner to the host build, which
/// reports it; another coupling gives another omega (so the checker's values are the ones used).
#[test]
fn ssor_checks_read_elsewhere_are_the_ones_the_plan_reads() {
    use crate::factors::{K1Checker, K1Factors};
    use autopcg_sparse::features::K1Checks;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let m = model();
    for a in [
        fixture("s3rmt3m3"),
        families::poisson3d_7pt(30, 30, 30).unwrap(),
        families::fem_p1_2d(20_000, 3).unwrap(),
    ] {
        for with in [true, false] {
            let mut r = match with {
                true => with_model(&a, PrecondKind::ssor_ai(), &m),
                false => PlanRequest::new(&a, PrecondKind::ssor_ai(), gpu()),
            };
            r.ssor_form_auto = true;
            r.symmetry = KnownSymmetry::Symmetric;
            let host = plan(&r).unwrap();
            assert_eq!(host.kind.omega(), Some(auto_omega(&a)));
            let calls = AtomicUsize::new(0);
            let same = |b: &CsrMatrix| -> Result<Option<K1Checks>, String> {
                calls.fetch_add(1, Ordering::Relaxed);
                Ok(Some(K1Factors::of(b).unwrap().checks()))
            };
            r.k1_checker = Some(K1Checker(&same));
            let checked = plan(&r).unwrap();
            assert_eq!(calls.load(Ordering::Relaxed), 1);
            assert_eq!(summary(&checked), summary(&host));
            assert_eq!(checked.notes, host.notes);
            let refused = |_: &CsrMatrix| -> Result<Option<K1Checks>, String> { Ok(None) };
            r.k1_checker = Some(K1Checker(&refused));
            let p = plan(&r).unwrap();
            assert_eq!(summary(&p), summary(&host));
            assert_eq!(p.notes, host.notes);
            let failed =
                |_: &CsrMatrix| -> Result<Option<K1Checks>, String> { Err("no room".into()) };
            r.k1_checker = Some(K1Checker(&failed));
            let p = plan(&r).unwrap();
            assert_eq!(summary(&p), summary(&host));
            assert!(p
                .notes
                .iter()
                .any(|n| n.contains("read on the host") && n.contains("no room")));
            // A coupling of 4: omega 1/4, whatever A's own.
            let other = |b: &CsrMatrix| -> Result<Option<K1Checks>, String> {
                let mut c = K1Factors::of(b).unwrap().checks();
                c.coupling = 4.0;
                Ok(Some(c))
            };
            r.k1_checker = Some(K1Checker(&other));
            let p = plan(&r).unwrap();
            assert_eq!(p.kind.omega(), Some(0.25));
            // A bad diagonal found there: the host build reports it, with its row (1-based).
            let mut bad = a.clone();
            let d = bad.diagonal_positions()[7] as usize;
            bad.data_mut()[d] = -1.0;
            let found = |_: &CsrMatrix| -> Result<Option<K1Checks>, String> {
                let mut c = K1Factors::of(&a).unwrap().checks();
                c.bad_diagonal = Some(7);
                Ok(Some(c))
            };
            let mut r = PlanRequest::new(&bad, PrecondKind::ssor_ai(), gpu());
            r.k1_checker = Some(K1Checker(&found));
            match plan(&r) {
                Err(PlanError::Solver(PcgError::BadDiagonal { row: 8, .. })) => {}
                other => panic!("a bad diagonal found on the device gave {other:?}"),
            }
        }
    }
}

/// A count of A made elsewhere (the GPU's, for no preconditioner and Jacobi) is what the
/// selection reads: the host's totals give the host's plan and predictions, other totals
/// other predictions; a count refused, failed or not adding up falls back to the host's pass
/// (the last two noted). With SSOR-AI the factors' count counts A: the counter is not asked.
#[test]
fn an_a_count_made_elsewhere_is_the_one_the_selection_reads() {
    use crate::factors::{structure_totals, ACounter};
    use autopcg_sparse::features::StructureTotals;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let m = model();
    for a in [
        fixture("s3rmt3m3"),
        families::poisson3d_7pt(30, 30, 30).unwrap(),
        families::random_powerlaw_spd(3000, 9.0, 1.3, 5).unwrap(),
    ] {
        for kind in [PrecondKind::None, PrecondKind::Jacobi] {
            let mut r = with_model(&a, kind, &m);
            r.symmetry = KnownSymmetry::Symmetric;
            let host = plan(&r).unwrap();
            let calls = AtomicUsize::new(0);
            let same = |b: &CsrMatrix| -> Result<Option<StructureTotals>, String> {
                calls.fetch_add(1, Ordering::Relaxed);
                let mut t = structure_totals(b);
                // The device's histogram is GRAM_HIST long.
                t.hist.resize(1024, 0);
                Ok(Some(t))
            };
            r.a_counter = Some(ACounter(&same));
            let counted = plan(&r).unwrap();
            assert_eq!(calls.load(Ordering::Relaxed), 1);
            assert_eq!(summary(&counted), summary(&host), "{kind}");
            assert!(!counted.notes.iter().any(|n| n.contains("matrix's")));
            let refused = |_: &CsrMatrix| -> Result<Option<StructureTotals>, String> { Ok(None) };
            r.a_counter = Some(ACounter(&refused));
            let p = plan(&r).unwrap();
            assert_eq!(summary(&p), summary(&host));
            assert!(!p.notes.iter().any(|n| n.contains("matrix's")));
            let failed = |_: &CsrMatrix| -> Result<Option<StructureTotals>, String> {
                Err("no room".into())
            };
            r.a_counter = Some(ACounter(&failed));
            let p = plan(&r).unwrap();
            assert_eq!(summary(&p), summary(&host));
            assert!(p
                .notes
                .iter()
                .any(|n| n.contains("counted on the host") && n.contains("no room")));
            let lost = |b: &CsrMatrix| -> Result<Option<StructureTotals>, String> {
                let mut t = structure_totals(b);
                t.hist[1] += 1;
                Ok(Some(t))
            };
            r.a_counter = Some(ACounter(&lost));
            let p = plan(&r).unwrap();
            assert_eq!(summary(&p), summary(&host));
            assert!(p.notes.iter().any(|n| n.contains("does not add up")));
            // Other totals ([`disturb`]): other predictions.
            let other = |b: &CsrMatrix| -> Result<Option<StructureTotals>, String> {
                let mut t = structure_totals(b);
                disturb(&mut t);
                Ok(Some(t))
            };
            r.a_counter = Some(ACounter(&other));
            let p = plan(&r).unwrap();
            assert_ne!(summary(&p).4, summary(&host).4, "{kind}");
        }
        // SSOR-AI: A is counted with the factors.
        let calls = AtomicUsize::new(0);
        let counter = |b: &CsrMatrix| -> Result<Option<StructureTotals>, String> {
            calls.fetch_add(1, Ordering::Relaxed);
            Ok(Some(structure_totals(b)))
        };
        let mut r = with_model(&a, PrecondKind::ssor_ai(), &m);
        r.symmetry = KnownSymmetry::Symmetric;
        r.a_counter = Some(ACounter(&counter));
        plan(&r).unwrap();
        assert_eq!(calls.load(Ordering::Relaxed), 0);
    }
}

/// A caller that checked A symmetric (the prepared solver) saves the features' search for an
/// asymmetric pair, and K, K^T and M are known triangular and symmetric by construction: the
/// plans, explanations and predicted times are the same as with nothing known.
#[test]
fn known_symmetry_plans_what_the_search_plans() {
    let m = model();
    let p3 = families::poisson3d_7pt(24, 24, 24).unwrap();
    let s3 = fixture("s3rmt3m3");
    let s3_kind = PrecondKind::ssor_ai().with_omega(auto_omega(&s3));
    for (a, kind, form_auto) in [
        (&p3, PrecondKind::ssor_ai(), false),
        (&p3, PrecondKind::Jacobi, false),
        (&s3, s3_kind, true),
        (&s3, s3_kind.with_form(SsorForm::Explicit), false),
    ] {
        let mut r = with_model(a, kind, &m);
        r.ssor_form_auto = form_auto;
        let unknown = plan(&r).unwrap();
        r.symmetry = KnownSymmetry::Symmetric;
        let known = plan(&r).unwrap();
        assert_eq!(
            format!("{:?} {:?}", known.gpu, known.explain),
            format!("{:?} {:?}", unknown.gpu, unknown.explain),
            "{kind}"
        );
        assert_eq!(known.predicted_iteration_ms, unknown.predicted_iteration_ms);
    }
}

/// An SPD arrow matrix: row 0 couples to most rows, every seventh row to none, so the
/// explicit product has one row longer than any local histogram table, rows of two entries
/// and rows of one.
fn arrow(n: usize) -> CsrMatrix {
    let (mut r, mut c, mut v) = (vec![0u32], vec![0u32], vec![n as f64 + 1.0]);
    for i in 1..n as u32 {
        r.push(i);
        c.push(i);
        v.push(2.0);
        if i % 7 != 0 {
            r.extend([i, 0]);
            c.extend([0, i]);
            v.extend([-1.0, -1.0]);
        }
    }
    CsrMatrix::from_triplets(n, n, &r, &c, &v).unwrap()
}

/// Matrices whose explicit SSOR-AI products differ in shape: stencils, random, irregular, and
/// a single row.
fn count_cases() -> Vec<(&'static str, CsrMatrix)> {
    vec![
        (
            "poisson3d 7pt",
            families::poisson3d_7pt(21, 19, 17).unwrap(),
        ),
        ("poisson2d 5pt", families::poisson2d_5pt(70, 53).unwrap()),
        (
            "random spd",
            families::random_powerlaw_spd(5000, 8.0, 1.4, 5).unwrap(),
        ),
        ("arrow", arrow(3000)),
        (
            "n = 1",
            CsrMatrix::from_triplets(1, 1, &[0], &[0], &[2.0]).unwrap(),
        ),
    ]
}

/// The counts of a stored matrix, from its one pass, are those of the separate feature and
/// work passes: on the count cases, rectangular and empty-row matrices, a diagonal with a zero,
/// a negative or a NaN entry or a missing one, and under every statement of symmetry.
#[test]
fn one_pass_counts_equal_the_separate_passes() {
    use autopcg_model::work::spmv_work;
    use autopcg_sparse::features::{features_knowing, KnownSymmetry};
    let diag = |d: [f64; 4]| {
        let (mut r, mut c, mut v) = (vec![], vec![], vec![]);
        for i in 0..4u32 {
            if !d[i as usize].is_infinite() {
                r.push(i);
                c.push(i);
                v.push(d[i as usize]);
            }
            if i > 0 {
                r.extend([i, i - 1]);
                c.extend([i - 1, i]);
                v.extend([-1.0, -1.5]);
            }
        }
        CsrMatrix::from_triplets(4, 4, &r, &c, &v).unwrap()
    };
    let mut cases = count_cases();
    cases.extend([
        ("zero diagonal", diag([2.0, 0.0, 2.0, 2.0])),
        ("negative diagonal", diag([2.0, 2.0, 2.0, -1.0])),
        ("NaN diagonal", diag([f64::NAN, 2.0, 2.0, 2.0])),
        ("missing diagonal", diag([2.0, 2.0, f64::INFINITY, 2.0])),
        ("positive diagonal", diag([2.0, 2.0, 2.0, 2.0])),
        (
            "rectangular, empty rows",
            CsrMatrix::from_triplets(5, 9, &[0, 0, 3, 3, 3], &[0, 8, 1, 3, 7], &[1.0; 5]).unwrap(),
        ),
        (
            "tall",
            CsrMatrix::from_triplets(9, 3, &[0, 4, 8], &[0, 2, 1], &[1.0; 3]).unwrap(),
        ),
        ("large", families::poisson3d_7pt(40, 41, 42).unwrap()),
    ]);
    for (name, a) in &cases {
        for known in [KnownSymmetry::Unknown, KnownSymmetry::Symmetric] {
            let one = SpmvCounts::of_knowing(a, known);
            assert_eq!(one.features, features_knowing(a, known), "{name} {known:?}");
            let (mut w, v) = (one.work.clone(), spmv_work(a));
            assert!(
                (w.row_len_std - v.row_len_std).abs() <= 1e-12 * v.row_len_std.max(1.0),
                "{name}"
            );
            w.row_len_std = v.row_len_std;
            assert_eq!(w, v, "{name}");
        }
    }
    // The features differ where the diagonal does: the pass reads the values.
    let f = |d| SpmvCounts::of(&diag(d)).features.diag_positive;
    assert!(f([2.0, 2.0, 2.0, 2.0]));
    assert!(!f([2.0, 0.0, 2.0, 2.0]));
    assert!(!f([2.0, 2.0, f64::INFINITY, 2.0]));
}

#[test]
fn the_counted_explicit_structure_is_the_formed_patterns() {
    for (name, a) in count_cases() {
        for kind in [PrecondKind::ssor_ai(), PrecondKind::ssor_ai2()] {
            let pre = Preconditioner::build(&a, &kind.resolved_for(&a)).unwrap();
            let pattern = pre.explicit_pattern().unwrap().unwrap();
            let counted = explicit_counts(&pre).expect("factored SSOR-AI");
            let want = SpmvCounts::of(&pattern);
            assert_eq!(counted.features, want.features, "{name} {kind}");
            // The work counts are equal but for the row-length deviation, summed in floating
            // point by the stored matrix's count.
            let (mut w, v) = (counted.work.clone(), &want.work);
            assert!(
                (w.row_len_std - v.row_len_std).abs() <= 1e-12 * v.row_len_std,
                "{name} {kind}"
            );
            w.row_len_std = v.row_len_std;
            assert_eq!(&w, v, "{name} {kind}");
        }
    }
    assert_eq!(explicit_counts(&Preconditioner::None), None);
}

#[test]
fn the_form_compared_on_the_counts_is_the_one_compared_on_the_product() {
    let m = model();
    let props = DeviceProps::hopper_like();
    let mut forms = Vec::new();
    for a in [
        fixture("s3rmt3m3"),
        fixture("bcsstk13"),
        families::poisson3d_7pt(20, 20, 20).unwrap(),
        families::poisson3d_7pt(64, 64, 64).unwrap(),
    ] {
        for kind in [PrecondKind::ssor_ai(), PrecondKind::ssor_ai2()] {
            let pre = Preconditioner::build(&a, &kind.resolved_for(&a)).unwrap();
            let Preconditioner::SsorFactored { k, kt, .. } = &pre else {
                panic!("factored");
            };
            let Some(Preconditioner::SsorExplicit { m: product }) = pre.to_explicit().unwrap()
            else {
                panic!("explicit");
            };
            let counted = explicit_counts(&pre).unwrap();
            let on_counts = choose_ssor_form(&m, k, kt, &counted, &props, 500.0, 1).unwrap();
            let formed = SpmvCounts::of(&product);
            let on_product = choose_ssor_form(&m, k, kt, &formed, &props, 500.0, 1).unwrap();
            assert_eq!(on_counts.form, on_product.form);
            assert_eq!(on_counts.m.0.method, on_product.m.0.method);
            for (x, y) in [
                (&on_counts.explain, &on_product.explain),
                (&on_counts.m.1, &on_product.m.1),
            ] {
                assert_eq!(x.why, y.why);
                assert_eq!(x.classifier, y.classifier);
                assert_eq!(x.options.len(), y.options.len());
                for (o, p) in x.options.iter().zip(&y.options) {
                    assert_eq!(o.name, p.name);
                    assert!((o.score_ms - p.score_ms).abs() <= 1e-9 * p.score_ms);
                }
            }
            // The plan decides as the comparison on the formed product does, where the bound
            // on the product's size lets it compare.
            let mut r = with_model(&a, kind, &m);
            r.ssor_form_auto = true;
            let p = plan(&r).unwrap();
            let compared = ssor::explicit_within_bound(ssor::explicit_nnz_bound(k), a.nnz());
            let want = match on_product.form {
                SsorForm::Explicit if compared => "ssor-ai-explicit",
                _ => "ssor-ai-factored",
            };
            assert_eq!(p.precond_applied(), want);
            forms.push(on_counts.form);
        }
    }
    // Both forms occur, so the comparison is not of one constant answer.
    assert!(forms.contains(&SsorForm::Explicit) && forms.contains(&SsorForm::Factored));
}

#[test]
fn the_explicit_form_is_not_formed_past_its_bound() {
    let m = model();
    let a = families::random_powerlaw_spd(30_000, 12.0, 1.4, 3).unwrap();
    let kind = PrecondKind::ssor_ai().with_omega(auto_omega(&a));
    let mut r = with_model(&a, kind, &m);
    r.ssor_form_auto = true;
    let p = plan(&r).unwrap();
    assert_eq!(p.precond_applied(), "ssor-ai-factored");
    assert!(
        p.notes.iter().any(|n| n.contains("kept factored")),
        "{:?}",
        p.notes
    );
    assert!(p.explain.iter().all(|e| e.step != "ssor-ai form"));
}

#[test]
fn amortised_conversions_favour_csr_for_one_iteration() {
    let m = model();
    let props = DeviceProps::hopper_like();
    let a = families::poisson2d_5pt(300, 300).unwrap();
    let (one, _) = select_spmv(&m, "spmv A", &a, &props, 1.0).unwrap();
    let (many, _) = select_spmv(&m, "spmv A", &a, &props, 1e9).unwrap();
    assert_eq!(one.method.format(), Format::Csr);
    assert!(many.predicted_ms.unwrap() <= one.predicted_ms.unwrap());
    // An unknown conversion cost is not free: only CSR may go without one.
    assert_eq!(select::amortised_ms(1.0, None, false, 10.0), None);
    assert_eq!(select::amortised_ms(1.0, None, true, 10.0), Some(1.0));
    assert_eq!(select::amortised_ms(1.0, Some(5.0), false, 10.0), Some(1.5));
}

#[test]
fn small_vectors_get_no_idle_blocks() {
    let m = model();
    let props = DeviceProps::hopper_like();
    let (u, _) = select_update(&m, 2003, &props).unwrap();
    let per = match u.variant {
        VectorVariant::ElemV2 | VectorVariant::GridV2 => 1002,
        _ => 2003,
    };
    assert!(u64::from(u.config.blocks) <= (per as u64).div_ceil(u64::from(u.config.threads)));
    let (d, _) = select_dot3(&m, 2003).unwrap();
    assert!(u64::from(d.config.blocks) <= 1002u64.div_ceil(u64::from(d.config.threads)));
}

#[test]
fn without_a_model_the_fallback_rule_plans_and_polls_every_16_iterations() {
    let a = families::poisson2d_5pt(50, 50).unwrap();
    let p = plan(&PlanRequest::new(&a, PrecondKind::Jacobi, gpu())).unwrap();
    let c = p.gpu.as_ref().unwrap();
    assert_eq!(c.source, fallback::FALLBACK_RULE);
    assert_eq!(p.check_every, GPU_CHECK_EVERY);
    assert_eq!(c.graph_iters, 16);
    assert!(p.model.is_none() && p.explain.is_empty() && p.predicted_iteration_ms.is_none());
    assert_eq!(
        c.a.method,
        autopcg_catalog::SpmvMethod::Dia {
            config: LaunchConfig::new(256, 10)
        }
    );
}

#[test]
fn a_caller_polling_interval_is_kept() {
    let a = families::poisson2d_5pt(50, 50).unwrap();
    let mut r = PlanRequest::new(&a, PrecondKind::None, gpu());
    r.check_every = Some(1);
    let p = plan(&r).unwrap();
    assert_eq!(p.check_every, 1);
    assert_eq!(p.gpu.unwrap().graph_iters, 1);
    r.check_every = Some(100);
    let p = plan(&r).unwrap();
    assert_eq!((p.check_every, p.gpu.unwrap().graph_iters), (100, 50));
}

#[test]
fn a_model_without_an_answer_falls_back_with_a_note() {
    let mut m = model();
    m.dot.families.clear();
    let a = families::poisson2d_5pt(50, 50).unwrap();
    let p = plan(&with_model(&a, PrecondKind::None, &m)).unwrap();
    let c = p.gpu.as_ref().unwrap();
    assert_eq!(c.source, fallback::FALLBACK_RULE);
    assert!(p.model.is_none());
    assert!(
        p.notes
            .iter()
            .any(|n| n.contains("not used") && n.contains("dot3")),
        "{:?}",
        p.notes
    );
}

#[test]
fn the_cpu_runs_fixed_kernels_and_polls_every_iteration() {
    let m = model();
    let a = families::poisson2d_5pt(20, 20).unwrap();
    let mut r = PlanRequest::new(
        &a,
        PrecondKind::ssor_ai().with_form(SsorForm::Explicit),
        Target::Cpu { threads: 3 },
    );
    r.model = Some(ModelRef {
        file: &m,
        label: "h200",
    });
    let p = plan(&r).unwrap();
    assert!(p.gpu.is_none());
    assert_eq!(p.check_every, CPU_CHECK_EVERY);
    assert_eq!(p.precond_applied(), "ssor-ai-explicit");
    assert_eq!(p.steps.source, "fixed CPU kernels");
    assert!(p.steps.steps.iter().all(|s| s.config == "3 CPU threads"));
    assert!(p.notes.iter().any(|n| n.contains("not used on the CPU")));
}

#[test]
fn a_bad_diagonal_is_an_error_not_a_plan() {
    let a = CsrMatrix::from_triplets(2, 2, &[0, 1], &[0, 1], &[1.0, -1.0]).unwrap();
    let e = plan(&PlanRequest::new(&a, PrecondKind::Jacobi, gpu())).unwrap_err();
    assert!(e.to_string().contains("diagonal"), "{e}");
    // Unless the caller has the diagonal checked where the solve runs (the backend then
    // reports it): Jacobi is left to the backend without a host pass, on a GPU only.
    let mut r = PlanRequest::new(&a, PrecondKind::Jacobi, gpu());
    r.diagonal_checked = true;
    assert_eq!(
        plan(&r).unwrap().preconditioner,
        PlannedPrecond::JacobiFromA { n: 2 }
    );
    let mut r = PlanRequest::new(&a, PrecondKind::Jacobi, Target::Cpu { threads: 1 });
    r.diagonal_checked = true;
    assert!(plan(&r).is_err());
}

/// A matrix whose halves cost the GPU differently per nonzero: a 27-point 3D stencil (DIA)
/// then a 5-point 2D stencil (short rows, CSR), so that the split by rows and nonzeros is not
/// the split by predicted time.
fn uneven_halves() -> CsrMatrix {
    let stencil = families::poisson3d_27pt(40, 40, 40).unwrap();
    let flat = families::poisson2d_5pt(400, 400).unwrap();
    families::block_diag(&[stencil, flat]).unwrap()
}

/// A homogeneous stencil split by rows and nonzeros is balanced as predicted: the moves (a
/// split and a plan of every block each) are not tried.
#[test]
fn balanced_predictions_keep_the_split_without_trying_moves() {
    use crate::blocks::plan_blocks_balanced;
    let m = model();
    let a = families::poisson3d_7pt(48, 48, 48).unwrap();
    let b = plan_blocks_balanced(&with_model(&a, PrecondKind::Jacobi, &m), 3).unwrap();
    assert!(b.plans.blocks.iter().all(|p| p.modelled));
    assert_eq!(b.balance.by, "rows and nonzeros", "{:?}", b.balance);
    let why = b.balance.kept_because.as_deref().unwrap_or_default();
    assert!(why.contains("within 1% of the blocks' mean"), "{why}");
    assert_eq!(
        b.partition,
        autopcg_sparse::blocks::RowPartition::by_default_costs(&a, 3).unwrap()
    );
}

#[test]
fn block_rows_move_by_the_models_predictions() {
    use crate::blocks::plan_blocks_balanced;
    let m = model();
    let a = uneven_halves();
    let b = plan_blocks_balanced(&with_model(&a, PrecondKind::Jacobi, &m), 2).unwrap();
    // Every block was predicted by the model, the rows moved, and the slowest block got faster.
    assert!(b.plans.blocks.iter().all(|p| p.modelled));
    assert_eq!(b.balance.by, "predicted time", "{:?}", b.balance);
    assert!(b.balance.final_us < b.balance.initial_us, "{:?}", b.balance);
    let by_costs = autopcg_sparse::blocks::RowPartition::by_default_costs(&a, 2).unwrap();
    assert_ne!(b.partition, by_costs);
    // The plans are those of the split used, and each halo part runs the add kernel the model
    // predicts fastest on it among those with one.
    let split =
        autopcg_sparse::blocks::BlockSplit::new(&a, b.partition.clone()).expect("the split");
    let mut kernels = Vec::new();
    for ((k, p), blk) in b.plans.blocks.iter().enumerate().zip(split.blocks()) {
        assert_eq!(p.rows, b.partition.range(k));
        let halo = p.steps().steps.last().cloned().unwrap();
        assert_eq!(halo.step, "spmv halo");
        let (method, ms) = least_predicted_add_kernel(&m, &blk.halo);
        assert_eq!(p.halo_method, Some(method));
        assert_eq!(
            (
                halo.format.as_str(),
                halo.kernel.as_str(),
                halo.predicted_ms
            ),
            ("csr", method.entry_point().unwrap(), Some(ms))
        );
        assert_eq!(
            halo.config,
            format!(
                "{}, {} halo nonzeros",
                method.config.words(),
                blk.halo.nnz()
            )
        );
        kernels.push(halo.kernel);
    }
    // On the committed model: pinned, so that a change of the choice is seen.
    assert_eq!(kernels, ["spmv_csr_scalar_add", "spmv_csr_scalar_add"]);
}

/// The halo multiply with the least predicted time, found from the model's predictions
/// without the generator's selection: every CSR scalar and CSR vector candidate the model
/// predicts, launched as the candidate says on the halo part.
fn least_predicted_add_kernel(
    m: &ModelFile,
    halo: &CsrMatrix,
) -> (autopcg_solver::gpu::HaloMethod, f64) {
    use autopcg_catalog::{SpmvImpl, SpmvKernel};
    let w = autopcg_model::work::spmv_work(halo);
    let props = DeviceProps::hopper_like();
    let mut best: Option<(autopcg_solver::gpu::HaloMethod, f64)> = None;
    for p in m.spmv.predict(&w) {
        let SpmvImpl::Kernel(kernel @ (SpmvKernel::CsrScalar | SpmvKernel::CsrVector(_))) =
            p.candidate.kernel
        else {
            continue;
        };
        let (Some(threads), Some(grid)) = (p.candidate.threads, p.candidate.grid) else {
            continue;
        };
        let config = grid.config(kernel.work_items(w.n, w.nnz), threads, &props);
        if best.is_none_or(|b| p.predicted_ms < b.1) {
            best = Some((
                autopcg_solver::gpu::HaloMethod { kernel, config },
                p.predicted_ms,
            ));
        }
    }
    best.expect("the model predicts a CSR row kernel")
}

#[test]
fn block_rows_stay_split_by_rows_and_nonzeros_without_a_model() {
    use crate::blocks::plan_blocks_balanced;
    let a = uneven_halves();
    for target in [gpu(), Target::Cpu { threads: 2 }] {
        let b =
            plan_blocks_balanced(&PlanRequest::new(&a, PrecondKind::Jacobi, target), 2).unwrap();
        assert_eq!(b.balance.by, "rows and nonzeros");
        assert_eq!(b.balance.initial_us, b.balance.final_us);
        assert!(b.balance.kept_because.is_some());
        let by_costs = autopcg_sparse::blocks::RowPartition::by_default_costs(&a, 2).unwrap();
        assert_eq!(b.partition, by_costs);
        assert!(b.plans.blocks.iter().all(|p| !p.modelled));
    }
}

/// Launch cost of every candidate of [`row_kernel_model`], ms.
const SYNTH_LAUNCH_MS: f64 = 2e-3;
/// Cost of a thread slot of CSR scalar and of a step of CSR vector, ms.
const SYNTH_SLOT_MS: f64 = 1e-6;
/// Cost per row and lane of CSR vector, ms: more lanes cover fewer rows per warp.
const SYNTH_ROW_LANE_MS: f64 = SYNTH_SLOT_MS / 4.0;

/// The committed model with its SpMV candidates replaced by the CSR row kernels only, each
/// with a time model of known coefficients (no depth, fill or L2 terms), at 128 and 256
/// threads per block under the cover policy:
///
/// - CSR scalar: launch + `SYNTH_SLOT_MS` per thread slot (each warp as long as its longest
///   row); 256 threads launch a little cheaper than 128;
/// - CSR vector with L lanes: launch + `SYNTH_SLOT_MS` per step (a row of `len` entries takes
///   `ceil(len / L)`) + `L x SYNTH_ROW_LANE_MS` per row; 128 threads launch a little cheaper
///   than 256.
///
/// So rows of 1 or 2 entries favour the scalar kernel (the vector kernels pay for their idle
/// lanes on every row), and rows of 64 entries the vector kernel with 16 lanes
/// (`64 / L + L / 4` steps per row is least at L = 16).
fn row_kernel_model() -> ModelFile {
    use autopcg_catalog::{GridPolicy, SpmvCandidate, SpmvImpl, SpmvKernel};
    use autopcg_model::spmv::{CandidateModel, Term};
    let mut m = model();
    let mut kernels = vec![SpmvKernel::CsrScalar];
    kernels.extend(autopcg_catalog::CSR_LANES.map(SpmvKernel::CsrVector));
    let mut candidates = Vec::new();
    for kernel in kernels {
        for threads in [128, 256] {
            let candidate =
                SpmvCandidate::own(SpmvImpl::Kernel(kernel), threads, GridPolicy::Cover);
            let (lanes, cheap_threads) = match kernel {
                SpmvKernel::CsrVector(l) => (f64::from(l), 128),
                _ => (0.0, 256),
            };
            let launch = if threads == cheap_threads {
                SYNTH_LAUNCH_MS
            } else {
                1.5 * SYNTH_LAUNCH_MS
            };
            candidates.push(CandidateModel::with_coefficients(candidate, |t| match t {
                Term::Launch => launch,
                Term::Slots => SYNTH_SLOT_MS,
                Term::Rows => lanes * SYNTH_ROW_LANE_MS,
                _ => 0.0,
            }));
        }
    }
    m.spmv.candidates = candidates;
    // One regime: the synthetic candidates price every matrix, replayed or not.
    m.spmv.replayed.clear();
    m
}

/// A 2n x 2n SPD matrix whose two row blocks (`0..n`, `n..2n`) couple through rows of `len`
/// entries each: row `i` of the first block to columns `n + (i + k) mod n`, `k < len`, and
/// symmetrically; diagonally dominant.
fn coupled_halves(n: usize, len: usize) -> CsrMatrix {
    let (mut r, mut c, mut v) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..2 * n {
        r.push(i as u32);
        c.push(i as u32);
        v.push(len as f64 + 1.0);
    }
    for i in 0..n {
        for k in 0..len {
            let j = n + (i + k) % n;
            r.extend([i as u32, j as u32]);
            c.extend([j as u32, i as u32]);
            v.extend([-1.0, -1.0]);
        }
    }
    CsrMatrix::from_triplets(2 * n, 2 * n, &r, &c, &v).unwrap()
}

/// The plans of `a` split in two halves with `m` as the model.
fn halo_plans(a: &CsrMatrix, m: &ModelFile) -> crate::blocks::BlockPlans {
    let n = a.nrows();
    let part = autopcg_sparse::blocks::RowPartition::from_starts(vec![0, n / 2, n], n).unwrap();
    let split = autopcg_sparse::blocks::BlockSplit::new(a, part).unwrap();
    crate::blocks::plan_blocks(&with_model(a, PrecondKind::Jacobi, m), &split).unwrap()
}

#[test]
fn the_model_chooses_csr_vector_with_16_lanes_for_a_halo_of_long_rows() {
    use autopcg_catalog::SpmvKernel;
    use autopcg_solver::gpu::HaloMethod;
    let m = row_kernel_model();
    let (n, len) = (1024, 64);
    let a = coupled_halves(n, len);
    let plans = halo_plans(&a, &m);
    // Every row has 64 halo entries: L = 16 costs 64 / 16 steps + 16 / 4 per row, the least
    // (L = 8 and L = 32 cost 10 per row, the scalar kernel 64).
    let best_ms = SYNTH_LAUNCH_MS + n as f64 * (len as f64 / 16.0 + 4.0) * SYNTH_SLOT_MS;
    assert_eq!(plans.blocks.len(), 2);
    for p in &plans.blocks {
        let want = HaloMethod {
            kernel: SpmvKernel::CsrVector(16),
            // The cover policy: one thread per row and lane.
            config: LaunchConfig::new(128, (n * 16 / 128) as u32),
        };
        assert_eq!(p.halo_method, Some(want));
        assert_eq!(p.halo.kernel, "spmv_csr_vector_add_16");
        assert_eq!(
            p.halo.config,
            format!("128 threads x 128 blocks, {} halo nonzeros", n * len)
        );
        let ms = p.halo.predicted_ms.unwrap();
        assert!((ms - best_ms).abs() <= 1e-9 * best_ms, "{ms} vs {best_ms}");
        // The block's predicted time includes the halo's.
        assert!(p.modelled);
        let local_us = p.local.predicted_iteration_ms.unwrap() * 1e3;
        assert!((p.predicted_us - local_us - ms * 1e3).abs() < 1e-6);
        // And the block's steps (what --explain prints) end with it.
        let steps = p.steps();
        let shown = steps.steps.last().unwrap();
        assert_eq!(
            (shown.step.as_str(), shown.kernel.as_str()),
            ("spmv halo", "spmv_csr_vector_add_16")
        );
    }
}

#[test]
fn the_model_chooses_csr_scalar_for_single_entry_halo_rows_and_two_lanes_for_two() {
    use autopcg_catalog::SpmvKernel;
    let m = row_kernel_model();
    let n = 1024;
    // One halo entry per row: the scalar kernel takes 1 thread slot per row, the vector kernel
    // with L lanes 1 step + L / 4 per row.
    let plans = halo_plans(&coupled_halves(n, 1), &m);
    for p in &plans.blocks {
        let method = p.halo_method.unwrap();
        assert_eq!(method.kernel, SpmvKernel::CsrScalar);
        // The cover policy at the cheaper 256 threads: one thread per row.
        assert_eq!(method.config, LaunchConfig::new(256, 4));
        assert_eq!(p.halo.kernel, "spmv_csr_scalar_add");
        assert_eq!(
            p.halo.config,
            format!("256 threads x 4 blocks, {n} halo nonzeros")
        );
        let want = SYNTH_LAUNCH_MS + n as f64 * SYNTH_SLOT_MS;
        let ms = p.halo.predicted_ms.unwrap();
        assert!((ms - want).abs() <= 1e-9 * want, "{ms} vs {want}");
    }
    // Two per row: 2 thread slots per row for the scalar kernel, 1 step + 2 / 4 with two
    // lanes, so the lanes follow the row length.
    let plans = halo_plans(&coupled_halves(n, 2), &m);
    for p in &plans.blocks {
        let method = p.halo_method.unwrap();
        assert_eq!(method.kernel, SpmvKernel::CsrVector(2));
        assert_eq!(method.config, LaunchConfig::new(128, 16));
        assert_eq!(p.halo.kernel, "spmv_csr_vector_add_2");
        let want = SYNTH_LAUNCH_MS + n as f64 * 1.5 * SYNTH_SLOT_MS;
        let ms = p.halo.predicted_ms.unwrap();
        assert!((ms - want).abs() <= 1e-9 * want, "{ms} vs {want}");
    }
}

#[test]
fn without_a_model_the_halo_runs_csr_scalar_at_256_threads_and_on_the_cpu_nothing() {
    use autopcg_catalog::SpmvKernel;
    let a = coupled_halves(1024, 64);
    let part =
        autopcg_sparse::blocks::RowPartition::from_starts(vec![0, 1024, 2048], 2048).unwrap();
    let split = autopcg_sparse::blocks::BlockSplit::new(&a, part).unwrap();
    let p = crate::blocks::plan_blocks(&PlanRequest::new(&a, PrecondKind::Jacobi, gpu()), &split)
        .unwrap();
    for b in &p.blocks {
        let method = b.halo_method.unwrap();
        assert_eq!(method.kernel, SpmvKernel::CsrScalar);
        assert_eq!(method.config, LaunchConfig::new(256, 4));
        assert_eq!(b.halo.kernel, "spmv_csr_scalar_add");
        assert_eq!(b.halo.predicted_ms, None);
        assert!(!b.modelled);
    }
    let cpu = PlanRequest::new(&a, PrecondKind::Jacobi, Target::Cpu { threads: 2 });
    let p = crate::blocks::plan_blocks(&cpu, &split).unwrap();
    for b in &p.blocks {
        assert_eq!(b.halo_method, None);
        assert_eq!(b.halo.kernel, "cpu_csr");
    }
    // A block without halo entries costs nothing, with or without a model.
    let m = row_kernel_model();
    let d = families::poisson2d_5pt(20, 20).unwrap();
    let one = autopcg_sparse::blocks::BlockSplit::by_default_costs(&d, 1).unwrap();
    for r in [
        PlanRequest::new(&d, PrecondKind::Jacobi, gpu()),
        with_model(&d, PrecondKind::Jacobi, &m),
    ] {
        let p = crate::blocks::plan_blocks(&r, &one).unwrap();
        assert_eq!(p.blocks[0].halo.predicted_ms, Some(0.0));
        assert_eq!(
            p.blocks[0].halo_method.unwrap().kernel,
            SpmvKernel::CsrScalar
        );
    }
}

/// SSOR-AI's K of `a`, as the plan builds it.
fn gpu_k(a: &CsrMatrix, kind: PrecondKind) -> CsrMatrix {
    match Preconditioner::build(a, &kind).unwrap() {
        Preconditioner::SsorFactored { k, .. } => k,
        _ => panic!("factored form expected"),
    }
}

#[test]
fn cusparse_is_chosen_where_it_is_predicted_fastest_and_not_elsewhere() {
    use autopcg_catalog::{
        CusparseAlg, GridPolicy, SpmvCandidate, SpmvImpl, SpmvKernel, SpmvMethod,
    };
    use autopcg_model::spmv::{CandidateModel, Term};
    let props = DeviceProps::hopper_like();
    let a = families::poisson2d_5pt(100, 100).unwrap();
    // Two candidates with a launch cost only: whichever is cheaper is chosen.
    let two = |cusparse_ms: f64| {
        let mut m = model();
        let own = SpmvCandidate::own(
            SpmvImpl::Kernel(SpmvKernel::CsrScalar),
            256,
            GridPolicy::Cover,
        );
        let cu = SpmvCandidate::cusparse(CusparseAlg::CsrAlg2);
        m.spmv.candidates = vec![
            CandidateModel::with_coefficients(own, |t| match t {
                Term::Launch => 0.010,
                _ => 0.0,
            }),
            CandidateModel::with_coefficients(cu, |t| match t {
                Term::Launch => cusparse_ms,
                _ => 0.0,
            }),
        ];
        // One regime: the two candidates price the matrix whether or not it is replayed.
        m.spmv.replayed.clear();
        m
    };
    // Over many iterations cuSPARSE's one-time setup is repaid: the faster product wins.
    let (faster, e) = select_spmv(&two(0.008), "spmv A", &a, &props, 1e6).unwrap();
    assert_eq!(
        faster.method,
        SpmvMethod::Cusparse {
            alg: CusparseAlg::CsrAlg2
        }
    );
    assert_eq!(e.options[0].name, "csr/cusparse_spmv_csr_alg2/-/-");
    assert_eq!(
        e.options[0].conversion_ms,
        Some(autopcg_model::spmv::CUSPARSE_SETUP_MS)
    );
    let (slower, _) = select_spmv(&two(0.012), "spmv A", &a, &props, 1e6).unwrap();
    assert_eq!(slower.method.kernel_name(), "spmv_csr_scalar");
    // Over 500 iterations 2 us per product do not repay it.
    let (few, _) = select_spmv(&two(0.008), "spmv A", &a, &props, 500.0).unwrap();
    assert_eq!(few.method.kernel_name(), "spmv_csr_scalar");
    // The committed H200 model on the SSOR-AI factors of a power-law matrix: cuSPARSE's
    // first algorithm is predicted 10% under the merge-path kernel, 4 us a product, which
    // 500 iterations do not repay: the merge-path kernel is kept.
    let m = model();
    let p = families::random_powerlaw_spd(30_000, 12.0, 1.4, 3).unwrap();
    let kind = PrecondKind::SsorAi {
        order: 2,
        omega: Some(auto_omega(&p)),
        form: SsorForm::Factored,
    };
    let gpu = plan(&with_model(&p, kind, &m))
        .unwrap()
        .gpu
        .expect("a GPU plan");
    let PrecondChoice::Factored { k, kt, .. } = &gpu.precond else {
        panic!("factored form expected: {:?}", gpu.precond)
    };
    for c in [k, kt] {
        assert_eq!(c.method.kernel_name(), "spmv_csr_merge");
    }
    // (Among the candidates reading CSR, which need no conversion.)
    let fastest_csr = m
        .spmv
        .predict(&SpmvCounts::of(&gpu_k(&p, kind)).work)
        .into_iter()
        .find(|p| p.candidate.format == Format::Csr)
        .unwrap();
    assert_eq!(
        fastest_csr.candidate.name(),
        "csr/cusparse_spmv_csr_alg1/-/-"
    );
    let s = families::poisson3d_7pt(40, 40, 40).unwrap();
    let pl = plan(&with_model(&s, PrecondKind::None, &m)).unwrap();
    let a_method = pl.gpu.expect("a GPU plan").a.method;
    assert!(!a_method.is_cusparse(), "{a_method:?}");
}

/// Which plans leave first-order SSOR-AI to the GPU backend (built on the device from A) and
/// which build it on the host: pinned, as the setup's cost depends on it.
#[test]
fn first_order_factored_ssor_ai_on_a_gpu_is_built_from_a_on_the_device() {
    let m = model();
    let a = families::poisson3d_7pt(24, 24, 24).unwrap();
    let on_device = |r: &PlanRequest| plan(r).unwrap().preconditioner.built_by_backend();
    // With a model (factored asked, or kept by the form comparison) and without one.
    assert!(on_device(&with_model(&a, PrecondKind::ssor_ai(), &m)));
    let mut auto = with_model(&a, PrecondKind::ssor_ai(), &m);
    auto.ssor_form_auto = true;
    // Either form: the explicit product is formed on the device too.
    let p = plan(&auto).unwrap();
    assert!(p.preconditioner.built_by_backend());
    assert!(on_device(&PlanRequest::new(
        &a,
        PrecondKind::ssor_ai(),
        gpu()
    )));
    assert!(plan(&PlanRequest::new(&a, PrecondKind::ssor_ai(), gpu()))
        .unwrap()
        .notes
        .iter()
        .any(|n| n.contains("built on the device")));
    // The omega resolved the host way, and the choices those of the host-built factors.
    let p = plan(&PlanRequest::new(&a, PrecondKind::ssor_ai(), gpu())).unwrap();
    assert_eq!(p.kind.omega(), Some(auto_omega(&a)));
    let host = Preconditioner::build(&a, &p.kind).unwrap();
    let c = p.gpu.expect("a GPU plan");
    let want = crate::fallback::gpu_choice(&a, &host, &DeviceProps::hopper_like());
    assert_eq!(c, want.with_graph_iters(c.graph_iters));
    // Built on the host: the CPU, the explicit form, second order.
    let cpu = Target::Cpu { threads: 2 };
    assert!(!on_device(&PlanRequest::new(
        &a,
        PrecondKind::ssor_ai(),
        cpu
    )));
    let explicit = PrecondKind::ssor_ai().with_form(SsorForm::Explicit);
    assert!(!on_device(&PlanRequest::new(&a, explicit, gpu())));
    assert!(!on_device(&PlanRequest::new(
        &a,
        PrecondKind::ssor_ai2(),
        gpu()
    )));
    // Jacobi: its inverse diagonal is the backend's on a GPU, the host's on the CPU, with
    // and without a model.
    assert!(on_device(&PlanRequest::new(&a, PrecondKind::Jacobi, gpu())));
    assert!(on_device(&with_model(&a, PrecondKind::Jacobi, &m)));
    let cpu = Target::Cpu { threads: 2 };
    assert!(!on_device(&PlanRequest::new(&a, PrecondKind::Jacobi, cpu)));
    let j = plan(&PlanRequest::new(&a, PrecondKind::Jacobi, gpu())).unwrap();
    let host = Preconditioner::build(&a, &PrecondKind::Jacobi).unwrap();
    let want = crate::fallback::gpu_choice(&a, &host, &DeviceProps::hopper_like());
    let c = j.gpu.expect("a GPU plan");
    assert_eq!(c, want.with_graph_iters(c.graph_iters));
    // A pattern with more entries below the diagonal than above: K^T is a transpose.
    let t = CsrMatrix::from_triplets(
        3,
        3,
        &[0, 1, 2, 2, 2, 0],
        &[0, 1, 2, 0, 1, 2],
        &[2.0, 2.0, 2.0, 0.1, 0.1, 0.1],
    )
    .unwrap();
    assert!(!on_device(&PlanRequest::new(
        &t,
        PrecondKind::ssor_ai(),
        gpu()
    )));
}

/// An epilogue model whose every kernel's dot3 variant adds `excess_ms` to its product at any
/// length (flat lines for the plain and both fused variants, threads 32 to 1024).
fn flat_epilogue(excess_ms: f64) -> autopcg_model::EpilogueModel {
    use autopcg_model::domains::Domain;
    use autopcg_model::epilogue::{DomainLine, EpilogueLines};
    use autopcg_model::profile::EpilogueVariant;
    use autopcg_model::Line;
    let mut lines = Vec::new();
    for kernel in autopcg_catalog::SpmvKernel::with_dot3_variant() {
        for threads in [32, 64, 128, 256, 512, 1024] {
            for variant in EpilogueVariant::ALL {
                let b = if variant == EpilogueVariant::Plain {
                    0.01
                } else {
                    0.01 + excess_ms
                };
                lines.push(EpilogueLines {
                    kernel,
                    threads,
                    variant,
                    domains: vec![DomainLine {
                        domain: Domain {
                            lo: 1024,
                            hi: 1 << 30,
                        },
                        line: Line::new(0.0, b),
                    }],
                });
            }
        }
    }
    // Every variant keeps 6 blocks per SM at every thread count.
    let resident = autopcg_catalog::SpmvKernel::with_dot3_variant()
        .into_iter()
        .flat_map(|kernel| {
            [32, 64, 128, 256, 512, 1024].map(|threads| autopcg_model::epilogue::Residency {
                kernel,
                threads,
                blocks_per_sm: 6,
            })
        })
        .collect();
    autopcg_model::EpilogueModel {
        lines,
        per_entry: Vec::new(),
        resident,
        held_out: Default::default(),
        held_out_wide: Default::default(),
    }
}

/// Removes `m`'s epilogue part and returns the reduction's predicted time in the plan it then
/// makes for `a` without a preconditioner.
fn reduction_ms_without_epilogue(a: &CsrMatrix, m: &mut ModelFile) -> f64 {
    m.epilogue = None;
    plan(&with_model(a, PrecondKind::None, m))
        .unwrap()
        .gpu
        .unwrap()
        .dot3
        .predicted_ms
        .unwrap()
}

/// `flat_epilogue(excess_ms)` whose fused variants also cost `ms_per_entry` for every entry
/// of a row beyond three.
fn sloped_epilogue(excess_ms: f64, ms_per_entry: f64) -> autopcg_model::EpilogueModel {
    use autopcg_model::profile::EpilogueVariant;
    let mut e = flat_epilogue(excess_ms);
    for kernel in autopcg_catalog::SpmvKernel::with_dot3_variant() {
        for threads in [32, 64, 128, 256, 512, 1024] {
            for variant in [EpilogueVariant::Fused, EpilogueVariant::FusedAliased] {
                e.per_entry.push(autopcg_model::EntrySlope {
                    kernel,
                    threads,
                    variant,
                    domain: autopcg_model::domains::Domain {
                        lo: 1024,
                        hi: 1 << 30,
                    },
                    ms_per_entry,
                    sizes: 3,
                });
            }
        }
    }
    e
}

#[test]
fn the_entries_of_a_row_can_keep_the_dots_apart() {
    // The same rows, 7 and 27 entries a row: a cost per entry that leaves the 7-point
    // matrix's excess below the reduction puts the 27-point one's above it.
    let n = 40usize;
    let rows = (n * n * n) as f64;
    for (a, fused) in [
        (families::poisson3d_7pt(n, n, n).unwrap(), true),
        (families::poisson3d_27pt(n, n, n).unwrap(), false),
    ] {
        let mut m = model();
        let reduction = reduction_ms_without_epilogue(&a, &mut m);
        // Half the reduction from the rows, and a quarter of it for every 4 entries a row
        // beyond three: the 7-point matrix (a little under 4 such) gets under 0.75 of the
        // reduction, the 27-point one (about 23) over 1.9.
        let slope = 0.25 * reduction / (4.0 * rows);
        m.epilogue = Some(sloped_epilogue(0.5 * reduction, slope));
        let p = plan(&with_model(&a, PrecondKind::None, &m)).unwrap();
        check_modelled(&p);
        assert_eq!(
            p.gpu.as_ref().unwrap().fused_dots.is_some(),
            fused,
            "{} entries",
            a.nnz()
        );
        let dots = p.explain.iter().find(|e| e.step == "dots").unwrap();
        let expect = 0.5 * reduction + slope * (a.nnz() as f64 - 3.0 * rows);
        let excess = dots
            .options
            .iter()
            .find(|o| o.name.contains("dot3_next"))
            .unwrap()
            .predicted_ms;
        assert!((excess - expect).abs() < 1e-12, "{excess} {expect}");
        assert!(
            dots.why.contains(&format!("{} entries", a.nnz())),
            "{}",
            dots.why
        );
    }
}

#[test]
fn the_dots_go_into_the_spmv_where_the_epilogue_model_predicts_it_cheaper() {
    let a = families::poisson3d_7pt(40, 40, 40).unwrap();
    for kind in [PrecondKind::None, PrecondKind::Jacobi] {
        let mut m = model();
        m.epilogue = None;
        let rule = plan(&with_model(&a, kind, &m)).unwrap();
        let c = rule.gpu.as_ref().unwrap();
        let reduction = c.dot3.predicted_ms.unwrap();
        assert!(
            c.fused_dots.is_some(),
            "the rule fuses without epilogue lines"
        );
        let dots = rule.explain.iter().find(|e| e.step == "dots").unwrap();
        assert!(dots.why.contains("fallback rule"), "{}", dots.why);

        // Cheaper than the reduction: fused, and the dots step predicts the excess.
        m.epilogue = Some(flat_epilogue(0.5 * reduction));
        let p = plan(&with_model(&a, kind, &m)).unwrap();
        check_modelled(&p);
        let c = p.gpu.as_ref().unwrap();
        let (k, a_cfg) = c.a.method.dot3_variant().unwrap();
        let props = DeviceProps::hopper_like();
        assert_eq!(
            c.fused_dots,
            k.dot3_launch(a_cfg, 64_000, &props, Some(6)),
            "capped at the model's residency"
        );
        let dots = p.explain.iter().find(|e| e.step == "dots").unwrap();
        assert!(dots.options[0].name.contains("dot3_next"), "{dots:?}");
        assert!((dots.options[0].predicted_ms - 0.5 * reduction).abs() < 1e-12);
        assert_eq!(dots.options.len(), 2);
        let saved = rule.predicted_iteration_ms.unwrap() - p.predicted_iteration_ms.unwrap();
        assert!((saved - 0.5 * reduction).abs() < 1e-9, "{saved}");

        // Dearer: the reduction runs apart, the fused launch is the runner-up.
        m.epilogue = Some(flat_epilogue(2.0 * reduction));
        let p = plan(&with_model(&a, kind, &m)).unwrap();
        check_modelled(&p);
        let c = p.gpu.as_ref().unwrap();
        assert_eq!(c.fused_dots, None, "{kind:?}");
        let dots = p.explain.iter().find(|e| e.step == "dots").unwrap();
        assert!(dots.options[1].name.contains("dot3_next"), "{dots:?}");
        assert_eq!(p.predicted_iteration_ms, rule.predicted_iteration_ms);
    }
}

/// The reduction apart is charged the epilogue stage's median held-out error on the product
/// and the reduction: an excess a little above the reduction's time still fuses (the rule's
/// choice), one well above it does not.
#[test]
fn the_dots_go_apart_only_where_that_wins_by_more_than_the_models_error() {
    let a = families::poisson3d_7pt(40, 40, 40).unwrap();
    let mut m = model();
    let reduction = reduction_ms_without_epilogue(&a, &mut m);
    let fused_with = |excess: f64, err: f64| {
        let mut m = m.clone();
        let mut e = flat_epilogue(excess);
        e.held_out.median_rel_err = err;
        m.epilogue = Some(e);
        let p = plan(&with_model(&a, PrecondKind::None, &m)).unwrap();
        check_modelled(&p);
        let dots = p.explain.iter().find(|e| e.step == "dots").unwrap();
        assert!(dots.why.contains("charged"), "{}", dots.why);
        p.gpu.unwrap().fused_dots.is_some()
    };
    assert!(!fused_with(1.005 * reduction, 0.0), "no error: the cheaper");
    assert!(
        fused_with(1.005 * reduction, 0.02),
        "within the error: fused"
    );
    assert!(!fused_with(1.5 * reduction, 0.02), "beyond it: apart");
    // The charge itself.
    let mut e = flat_epilogue(reduction);
    e.held_out.median_rel_err = 0.02;
    m.epilogue = Some(e);
    assert!((apart_charge_ms(&m, 3.0, 1.0) - 1.08).abs() < 1e-12);
    m.epilogue = None;
    assert_eq!(apart_charge_ms(&m, 3.0, 1.0), 1.0);
}

#[test]
fn without_a_preconditioner_the_aliased_lines_decide() {
    use autopcg_model::profile::EpilogueVariant;
    let a = families::poisson3d_7pt(40, 40, 40).unwrap();
    let mut m = model();
    let reduction = reduction_ms_without_epilogue(&a, &mut m);
    // u = r cheap, r apart dear: fused without a preconditioner only.
    let mut e = flat_epilogue(0.5 * reduction);
    for l in &mut e.lines {
        if l.variant == EpilogueVariant::Fused {
            l.domains[0].line.b = 0.01 + 2.0 * reduction;
        }
    }
    m.epilogue = Some(e);
    let none = plan(&with_model(&a, PrecondKind::None, &m)).unwrap();
    assert!(none.gpu.unwrap().fused_dots.is_some());
    let jacobi = plan(&with_model(&a, PrecondKind::Jacobi, &m)).unwrap();
    assert_eq!(jacobi.gpu.unwrap().fused_dots, None);
}

#[test]
fn the_fused_launch_is_capped_at_the_blocks_the_variant_keeps_resident() {
    // 2D Poisson 1000^2: A's launch has hundreds of blocks; a residency of 2 blocks per SM
    // caps the fused grid at 2 x 132, below the rule's wave.
    let a = families::poisson2d_5pt(1000, 1000).unwrap();
    let mut m = model();
    m.epilogue = None;
    let rule = plan(&with_model(&a, PrecondKind::None, &m)).unwrap();
    let reduction = rule.gpu.as_ref().unwrap().dot3.predicted_ms.unwrap();
    let rule_blocks = rule.gpu.as_ref().unwrap().fused_dots.unwrap().blocks;
    let mut e = flat_epilogue(0.5 * reduction);
    e.resident.iter_mut().for_each(|r| r.blocks_per_sm = 2);
    m.epilogue = Some(e);
    let p = plan(&with_model(&a, PrecondKind::None, &m)).unwrap();
    let fused = p.gpu.as_ref().unwrap().fused_dots.unwrap();
    assert_eq!(fused.blocks, 2 * 132);
    assert!(rule_blocks > fused.blocks, "{rule_blocks}");
    // A residency of 0 keeps the dots apart.
    let mut e = flat_epilogue(0.5 * reduction);
    e.resident.iter_mut().for_each(|r| r.blocks_per_sm = 0);
    m.epilogue = Some(e);
    let p = plan(&with_model(&a, PrecondKind::None, &m)).unwrap();
    assert_eq!(p.gpu.as_ref().unwrap().fused_dots, None);
}

/// A's product is chosen with its dots: a product a little slower alone whose epilogue takes
/// the dots cheaply beats a faster one whose dots must run apart; where both epilogues are
/// dear, the faster product wins and the dots run apart.
#[test]
fn the_product_is_chosen_with_the_dots_beside_it() {
    use autopcg_catalog::{GridPolicy, SpmvCandidate, SpmvImpl, SpmvKernel};
    use autopcg_model::profile::EpilogueVariant;
    use autopcg_model::spmv::{CandidateModel, Term};
    let a = families::poisson2d_5pt(100, 100).unwrap();
    let mut m = model();
    let reduction = reduction_ms_without_epilogue(&a, &mut m);
    let candidate = |kernel, launch_ms: f64| {
        CandidateModel::with_coefficients(
            SpmvCandidate::own(SpmvImpl::Kernel(kernel), 256, GridPolicy::Cover),
            |t| match t {
                Term::Launch => launch_ms,
                _ => 0.0,
            },
        )
    };
    // Vector 8 alone is faster by a tenth of the reduction.
    m.spmv.candidates = vec![
        candidate(SpmvKernel::CsrVector(8), 0.010),
        candidate(SpmvKernel::CsrScalar, 0.010 + 0.1 * reduction),
    ];
    m.spmv.replayed.clear();
    // Vector 8's epilogue costs twice the reduction, the scalar kernel's a fifth of it.
    let epilogue = |scalar_excess: f64| {
        let mut e = flat_epilogue(scalar_excess);
        for l in &mut e.lines {
            if l.kernel == SpmvKernel::CsrVector(8) && l.variant != EpilogueVariant::Plain {
                l.domains[0].line.b = 0.01 + 2.0 * reduction;
            }
        }
        e
    };
    for kind in [PrecondKind::None, PrecondKind::Jacobi] {
        m.epilogue = Some(epilogue(0.2 * reduction));
        let p = plan(&with_model(&a, kind, &m)).unwrap();
        check_modelled(&p);
        let c = p.gpu.as_ref().unwrap();
        assert_eq!(c.a.method.kernel_name(), "spmv_csr_scalar", "{kind}");
        assert!(c.fused_dots.is_some(), "{kind}");
        let spmv = p.explain.iter().find(|e| e.step == "spmv A").unwrap();
        assert_eq!(spmv.options[0].name, "csr/spmv_csr_scalar/t256/cover");
        // The option predicts the product alone; its score adds the dots in its epilogue.
        assert!((spmv.options[0].predicted_ms - (0.010 + 0.1 * reduction)).abs() < 1e-12);
        assert!(
            (spmv.options[0].score_ms - (0.010 + 0.3 * reduction)).abs() < 1e-9,
            "{spmv:?}"
        );
        assert!((spmv.options[1].score_ms - (0.010 + reduction)).abs() < 1e-9);
        assert!(spmv.why.contains("three dots"), "{}", spmv.why);
        // Both epilogues dear: the faster product, the dots apart.
        m.epilogue = Some(epilogue(2.0 * reduction));
        let p = plan(&with_model(&a, kind, &m)).unwrap();
        let c = p.gpu.as_ref().unwrap();
        assert_eq!(c.a.method.kernel_name(), "spmv_csr_vector_8", "{kind}");
        assert_eq!(c.fused_dots, None, "{kind}");
    }
}

/// An epilogue line predicting the fused kernel faster than its plain product (extrapolated
/// past what the stage measured) prices the dots at zero: no discount on the product, and no
/// negative step in the plan's prediction.
#[test]
fn a_negative_epilogue_excess_counts_as_zero() {
    let a = families::poisson3d_7pt(40, 40, 40).unwrap();
    let mut m = model();
    let reduction = reduction_ms_without_epilogue(&a, &mut m);
    m.epilogue = Some(flat_epilogue(0.0));
    let zero = plan(&with_model(&a, PrecondKind::None, &m)).unwrap();
    m.epilogue = Some(flat_epilogue(-5.0 * reduction));
    let p = plan(&with_model(&a, PrecondKind::None, &m)).unwrap();
    check_modelled(&p);
    assert!(p.gpu.as_ref().unwrap().fused_dots.is_some());
    let dots = p.explain.iter().find(|e| e.step == "dots").unwrap();
    assert_eq!(dots.options[0].predicted_ms, 0.0, "{dots:?}");
    assert_eq!(summary(&p), summary(&zero));
}
