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
        assert!(e.options.windows(2).all(|w| w[0].score_ms <= w[1].score_ms));
    }
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
    // Without `ssor_form_auto`, the asked form stays.
    r.ssor_form_auto = false;
    assert_eq!(plan(&r).unwrap().precond_applied(), "ssor-ai-factored");
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
            let on_counts = choose_ssor_form(&m, k, kt, &counted, &props, 500.0).unwrap();
            let formed = SpmvCounts::of(&product);
            let on_product = choose_ssor_form(&m, k, kt, &formed, &props, 500.0).unwrap();
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
}

/// A matrix whose halves cost the GPU differently per nonzero: a 27-point 3D stencil (DIA)
/// then a 5-point 2D stencil (short rows, CSR), so that the split by rows and nonzeros is not
/// the split by predicted time.
fn uneven_halves() -> CsrMatrix {
    let stencil = families::poisson3d_27pt(40, 40, 40).unwrap();
    let flat = families::poisson2d_5pt(400, 400).unwrap();
    families::block_diag(&[stencil, flat]).unwrap()
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
    // The plans are those of the split used.
    for (k, p) in b.plans.blocks.iter().enumerate() {
        assert_eq!(p.rows, b.partition.range(k));
        let halo = p.steps().steps.last().cloned().unwrap();
        assert_eq!(
            (halo.format.as_str(), halo.kernel.as_str()),
            ("csr", "spmv_csr_scalar_add")
        );
        assert!(halo.predicted_ms.is_some());
    }
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
