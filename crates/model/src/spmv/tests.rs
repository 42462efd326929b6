//! Tests of the SpMV model on synthetic profiles with known truths.
use autopcg_catalog::{Format, GridPolicy, SpmvImpl, SpmvKernel};

use super::*;
use crate::profile::{SpmvRecord, Status, Timing};
use crate::spmv_synth::{self, linear_time, truths};

fn truth_time(c: &SpmvCandidate, w: &SpmvWork) -> f64 {
    let k = truths()
        .into_iter()
        .find(|(tc, _)| tc == c)
        .map(|(_, k)| k)
        .unwrap();
    linear_time(c, w, &k)
}

#[test]
fn recovers_known_linear_models_on_held_out_matrices() {
    let p = spmv_synth::profile(1);
    let m = SpmvModel::fit(&p, &SpmvFitOptions::default()).unwrap();
    m.validate().unwrap();
    // The pool's candidates, and cuSPARSE's two algorithms the synthetic profile measures.
    let own = |c: &&CandidateModel| !c.candidate.is_cusparse();
    assert_eq!(
        m.candidates.iter().filter(own).count(),
        truths().len(),
        "{:?}",
        m.dropped
    );
    assert_eq!(m.candidates.len(), truths().len() + 2, "{:?}", m.dropped);
    let table = m.table();
    assert!(table.contains("csr/spmv_csr_scalar/t256/wave"), "{table}");
    assert!(table.contains("csr/cusparse_spmv_csr_alg2/-/-"), "{table}");
    let mut errs = Vec::new();
    for mat in p.matrices.iter().filter(|m| m.set == MatrixSet::Eval) {
        // cuSPARSE's synthetic times follow the scalar kernel's truth, not a linear one.
        for pr in m
            .predict(&mat.work)
            .iter()
            .filter(|p| !p.candidate.is_cusparse())
        {
            let t = truth_time(&pr.candidate, &mat.work);
            errs.push(((pr.predicted_ms - t) / t).abs());
        }
    }
    assert!(errs.len() > 100);
    let (med, p90) = (quantile(&errs, 0.5), quantile(&errs, 0.9));
    assert!(med < 0.02 && p90 < 0.04, "median {med}, p90 {p90}");
    for c in m.candidates.iter().filter(own) {
        assert!(c.stats.median_rel_err < 0.02, "{:?}", c.stats);
        assert!(c.coef.iter().all(|v| *v >= 0.0));
    }
}

#[test]
fn selection_picks_the_known_best() {
    let p = spmv_synth::profile(2);
    let m = SpmvModel::fit(&p, &SpmvFitOptions::default()).unwrap();
    let mut formats = std::collections::BTreeSet::new();
    for mat in p.matrices.iter().filter(|m| m.set == MatrixSet::Eval) {
        let w = &mat.work;
        let chosen = m.select(w, None).unwrap();
        let best = truths()
            .into_iter()
            .filter(|(c, _)| m.applies(c.format, w))
            .map(|(c, k)| linear_time(&c, w, &k))
            .fold(f64::INFINITY, f64::min);
        let got = truth_time(&chosen.candidate, w);
        assert!(
            got <= best * 1.02,
            "{}: {} {got} vs {best}",
            mat.id,
            chosen.name()
        );
        formats.insert(chosen.candidate.format);
    }
    // The synthetic truths make more than one format win.
    assert!(formats.len() >= 2, "{formats:?}");
}

#[test]
fn padded_formats_apply_only_within_the_fill_limit() {
    let p = spmv_synth::profile(3);
    let m = SpmvModel::fit(&p, &SpmvFitOptions::default()).unwrap();
    let pl = p
        .matrices
        .iter()
        .find(|m| m.id.contains("powerlaw") && m.features.dia_fill_ratio > 3.0)
        .unwrap();
    let preds = m.predict(&pl.work);
    assert!(!preds.is_empty());
    assert!(preds.iter().all(|p| p.candidate.format != Format::Dia));
    assert!(preds
        .windows(2)
        .all(|w| w[0].predicted_ms <= w[1].predicted_ms));
    let stencil = p
        .matrices
        .iter()
        .find(|m| m.id.contains("poisson2d"))
        .unwrap();
    assert!(m
        .predict(&stencil.work)
        .iter()
        .any(|p| p.candidate.format == Format::Dia));
    // A stencil has no HYB COO part: HYB is the ELL kernel there and is not offered.
    assert_eq!(stencil.work.hyb_coo_nnz, 0);
    assert!(!m.applies(Format::Hyb, &stencil.work));
    assert!(m
        .predict(&stencil.work)
        .iter()
        .all(|p| p.candidate.format != Format::Hyb));
    assert!(pl.work.hyb_coo_nnz > 0 && m.applies(Format::Hyb, &pl.work));
}

#[test]
fn conversion_cost_is_amortised_over_the_iterations() {
    let p = spmv_synth::profile(4);
    let m = SpmvModel::fit(&p, &SpmvFitOptions::default()).unwrap();
    assert!(m.conversions.iter().any(|c| c.format == Format::Dia));
    // A large stencil: DIA is the fastest SpMV but its conversion costs many SpMVs.
    let mat = p
        .matrices
        .iter()
        .filter(|m| m.id.contains("poisson2d-60") || m.id.contains("poisson2d-55"))
        .max_by_key(|m| m.work.n)
        .unwrap();
    let w = &mat.work;
    let fastest = m.select(w, None).unwrap();
    assert_eq!(fastest.candidate.format, Format::Dia, "{}", fastest.name());
    let conv = m.predict_conversion(Format::Dia, w).unwrap();
    let truth_conv = 0.03 + 4e-6 * w.dia_slots as f64 + 1e-6 * w.n as f64;
    assert!(
        (conv - truth_conv).abs() / truth_conv < 0.05,
        "{conv} vs {truth_conv}"
    );
    assert_eq!(m.predict_conversion(Format::Csr, w), Some(0.0));
    let mut no_coo = m.clone();
    no_coo.conversions.retain(|c| c.format != Format::Coo);
    assert_eq!(no_coo.predict_conversion(Format::Coo, w), None);
    let once = m.select(w, Some(1.0)).unwrap();
    assert_eq!(once.candidate.format, Format::Csr, "{}", once.name());
    let many = m.select(w, Some(1e7)).unwrap();
    assert_eq!(many.candidate, fastest.candidate);
    // A NaN count is ignored.
    assert_eq!(
        m.select(w, Some(f64::NAN)).unwrap().candidate,
        fastest.candidate
    );
}

#[test]
fn skipped_and_failed_records_are_never_times() {
    let p = spmv_synth::profile(5);
    let base = SpmvModel::fit(&p, &SpmvFitOptions::default()).unwrap();
    let mut q = p.clone();
    let fit_ids: Vec<String> = q
        .matrices
        .iter()
        .filter(|m| m.set == MatrixSet::Fit)
        .map(|m| m.id.clone())
        .collect();
    for (i, id) in fit_ids.iter().enumerate() {
        let mut r = q
            .spmv
            .iter()
            .find(|r| &r.matrix == id && r.launch.kernel == SpmvImpl::Kernel(SpmvKernel::CsrScalar))
            .unwrap()
            .clone();
        r.timing = Some(Timing {
            median_ms: 1e3,
            min_ms: 1e3,
            max_ms: 1e3,
            reps: 1,
        });
        r.status = if i % 2 == 0 {
            Status::Failed("wrong result".into())
        } else {
            Status::Skipped("not applicable".into())
        };
        q.spmv.push(r);
    }
    let again = SpmvModel::fit(&q, &SpmvFitOptions::default()).unwrap();
    assert_eq!(base, again);
}

#[test]
fn a_missing_wave_record_takes_its_cover_twin() {
    let p = spmv_synth::profile(6);
    let times = measured_times(&p);
    let small = p.matrices.iter().find(|m| m.work.n < 1000).unwrap();
    let t = &times[&small.id];
    let cover = t.time_of("csr/spmv_csr_scalar/t256/cover").unwrap();
    assert_eq!(t.time_of("csr/spmv_csr_scalar/t256/wave"), Some(cover));
    // Only policies the profile measures somewhere are filled in.
    assert_eq!(t.time_of("csr/spmv_csr_scalar/t128/wave"), None);
    // A large matrix has its own wave record.
    let big = p.matrices.iter().find(|m| m.work.n > 4096).unwrap();
    assert!(p
        .spmv
        .iter()
        .any(|r| r.matrix == big.id && r.launch.grid == Some(GridPolicy::Wave)));
    assert_eq!(times[&big.id].cusparse.len(), 2);
    assert!(times[&big.id].best_own().is_some());
}

/// The replayed records of a matrix holding one grid policy take the twin the whole profile
/// measures (the launched-alone records' policies), so the fallback rule's and the
/// classifier's picks are judged in the replayed regime too.
#[test]
fn a_replayed_record_stands_in_for_a_policy_only_launched_alone_records_hold() {
    let mut p = spmv_synth::profile(6);
    let small = p
        .matrices
        .iter()
        .find(|m| m.work.n < 1000)
        .unwrap()
        .id
        .clone();
    let mut wave = p
        .spmv
        .iter()
        .find(|r| {
            r.matrix != small
                && r.launch.kernel == SpmvImpl::Kernel(SpmvKernel::CsrScalar)
                && r.launch.threads == Some(256)
                && r.launch.grid == Some(GridPolicy::Wave)
        })
        .expect("a wave record of CSR scalar at 256 threads")
        .clone();
    wave.matrix = small.clone();
    wave.replayed = true;
    wave.timing = Some(Timing {
        median_ms: 0.002,
        min_ms: 0.002,
        max_ms: 0.002,
        reps: 5,
    });
    p.spmv_replayed = vec![wave];
    let t = &measured_times_replayed(&p)[&small];
    assert_eq!(t.time_of("csr/spmv_csr_scalar/t256/wave"), Some(0.002));
    assert_eq!(t.time_of("csr/spmv_csr_scalar/t256/cover"), Some(0.002));
    // Not a policy measured anywhere at these threads: not filled in.
    assert_eq!(t.time_of("csr/spmv_csr_scalar/t128/wave"), None);
    // The launched-alone times are not the replayed ones.
    assert_ne!(
        measured_times(&p)[&small].time_of("csr/spmv_csr_scalar/t256/cover"),
        Some(0.002)
    );
}

#[test]
fn empty_or_fit_less_profiles_are_fit_errors() {
    let empty = Profile::default();
    assert!(matches!(
        SpmvModel::fit(&empty, &SpmvFitOptions::default()),
        Err(ModelError::Fit { .. })
    ));
    let mut p = spmv_synth::profile(7);
    p.matrices.retain(|m| m.set == MatrixSet::Eval);
    assert!(matches!(
        SpmvModel::fit(&p, &SpmvFitOptions::default()),
        Err(ModelError::Fit { .. })
    ));
    let mut q = spmv_synth::profile(7);
    q.spmv.clear();
    assert!(matches!(
        SpmvModel::fit(&q, &SpmvFitOptions::default()),
        Err(ModelError::Fit { .. })
    ));
    let opts = SpmvFitOptions {
        feature_sets: vec![],
        ..SpmvFitOptions::default()
    };
    assert!(matches!(
        SpmvModel::fit(&q, &opts),
        Err(ModelError::InvalidParameter(_))
    ));
}

#[test]
fn candidates_on_too_few_matrices_are_dropped_with_a_reason() {
    let mut p = spmv_synth::profile(8);
    let keep: Vec<String> = p
        .matrices
        .iter()
        .filter(|m| m.set == MatrixSet::Fit)
        .take(3)
        .map(|m| m.id.clone())
        .collect();
    p.spmv.retain(|r| {
        r.launch.kernel != SpmvImpl::Kernel(SpmvKernel::CsrVector(32)) || keep.contains(&r.matrix)
    });
    let m = SpmvModel::fit(&p, &SpmvFitOptions::default()).unwrap();
    let d = m
        .dropped
        .iter()
        .find(|d| d.name == "csr/spmv_csr_vector_32/t256/cover")
        .unwrap();
    assert_eq!(d.matrices, 3);
    assert!(d.reason.contains("fewer than 5"), "{}", d.reason);
    assert!(m.candidate("csr/spmv_csr_vector_32/t256/cover").is_none());
}

#[test]
fn model_serde_round_trip_and_validation() {
    let p = spmv_synth::profile(9);
    let m = SpmvModel::fit(&p, &SpmvFitOptions::default()).unwrap();
    let s = serde_json::to_string(&m).unwrap();
    let back: SpmvModel = serde_json::from_str(&s).unwrap();
    back.validate().unwrap();
    // JSON keeps every field; floats may come back within an ulp.
    assert_eq!(back.candidates.len(), m.candidates.len());
    assert_eq!(back.dropped, m.dropped);
    for (a, b) in back.candidates.iter().zip(&m.candidates) {
        assert_eq!(
            (&a.candidate, &a.columns, &a.features),
            (&b.candidate, &b.columns, &b.features)
        );
        for (x, y) in a.coef.iter().zip(&b.coef) {
            assert!((x - y).abs() <= 1e-14 * y.abs());
        }
    }
    for mat in &p.matrices {
        let (pa, pb) = (back.predict(&mat.work), m.predict(&mat.work));
        assert_eq!(pa.len(), pb.len());
        for (a, b) in pa.iter().zip(&pb) {
            assert!((a.predicted_ms - b.predicted_ms).abs() <= 1e-12 * b.predicted_ms);
        }
    }
    let mut bad = m.clone();
    bad.candidates[0].coef[0] = -1.0;
    assert!(matches!(bad.validate(), Err(ModelError::Invalid { .. })));
    bad.candidates[0].coef.pop();
    assert!(bad.validate().is_err());
}

#[test]
fn the_l2_split_is_chosen_when_cached_matrices_run_faster() {
    // Truth: every traffic cost is 3x cheaper for the L2-resident share.
    let t = truths();
    let cands: Vec<SpmvCandidate> = t.iter().map(|(c, _)| *c).collect();
    let l2 = u64::from(spmv_synth::device().l2_bytes);
    let time = |c: &SpmvCandidate, w: &SpmvWork| {
        let k = t.iter().find(|(tc, _)| tc == c).unwrap().1;
        let s = l2_share(working_set_bytes(c.format, w), l2, 1.0);
        let launch = k[0] + k[5] * term_value(Term::CooLaunch, c, w, &spmv_synth::device());
        let traffic = linear_time(c, w, &k) - launch;
        launch + traffic * (s / 3.0 + (1.0 - s))
    };
    let p = spmv_synth::profile_with(&time, &cands, 0.01, 10);
    let m = SpmvModel::fit(&p, &SpmvFitOptions::default()).unwrap();
    let with_l2 = m
        .candidates
        .iter()
        .filter(|c| c.features.l2_fraction.is_some())
        .count();
    assert!(
        with_l2 * 2 > m.candidates.len(),
        "{with_l2} of {}",
        m.candidates.len()
    );
    let base_only = SpmvModel::fit(
        &p,
        &SpmvFitOptions {
            feature_sets: vec![FeatureSet::defaults()[0].clone()],
            ..SpmvFitOptions::default()
        },
    )
    .unwrap();
    let eval_err = |model: &SpmvModel| {
        let mut e = Vec::new();
        for mat in p.matrices.iter().filter(|m| m.set == MatrixSet::Eval) {
            let own = model.predict(&mat.work);
            for pr in own.iter().filter(|p| !p.candidate.is_cusparse()) {
                let tt = time(&pr.candidate, &mat.work);
                e.push(((pr.predicted_ms - tt) / tt).abs());
            }
        }
        (quantile(&e, 0.5), quantile(&e, 0.9))
    };
    let (med, p90) = eval_err(&m);
    let (bmed, bp90) = eval_err(&base_only);
    assert!(
        med < 0.03 && p90 < 0.08,
        "chosen sets: median {med}, p90 {p90}"
    );
    assert!(bp90 > p90, "base set: median {bmed}, p90 {bp90}");
}

/// `predict_at` evaluates the L2 split at the working set it is given: at the product's own
/// it is `predict`; past L2 every traffic term is priced at its memory coefficient.
#[test]
fn a_prediction_at_another_working_set_moves_the_traffic_to_memory() {
    use autopcg_sparse::families::poisson2d_5pt;
    let a = poisson2d_5pt(40, 40).unwrap();
    let w = crate::work::spmv_work(&a);
    let dev = spmv_synth::device();
    let cand = SpmvCandidate::own(
        SpmvImpl::Kernel(SpmvKernel::CsrScalar),
        128,
        GridPolicy::Cover,
    );
    let fs = FeatureSet {
        l2_fraction: Some(1.0),
        ..FeatureSet::defaults()[0].clone()
    };
    let columns = fs.columns(KernelKind::of(&cand));
    // In L2 a row costs 1e-7 ms, from memory 4e-7; launch 2e-3.
    let coef: Vec<f64> = columns
        .iter()
        .map(|c| match (c.term, c.part) {
            (Term::Launch, _) => 2e-3,
            (Term::Rows, Residency::InL2) => 1e-7,
            (Term::Rows, Residency::OutL2) => 4e-7,
            _ => 0.0,
        })
        .collect();
    let m = CandidateModel {
        features: fs,
        columns,
        coef,
        ..CandidateModel::with_coefficients(cand, |_| 0.0)
    };
    let own = working_set_bytes(cand.format, &w);
    let n = w.n as f64;
    assert_eq!(m.predict_at(&w, &dev, own), m.predict(&w, &dev));
    // Alone, the share of its traffic the split puts in L2; beside 100 times L2 of other
    // data, all of it from memory.
    let s = l2_share(own, u64::from(dev.l2_bytes), 1.0);
    assert!(s > 0.1, "{s}");
    let alone = 2e-3 + n * (1e-7 * s + 4e-7 * (1.0 - s));
    assert!((m.predict(&w, &dev) - alone).abs() < 1e-9 * alone);
    let far = 100.0 * f64::from(dev.l2_bytes);
    let got = m.predict_at(&w, &dev, far);
    let want = 2e-3 + 4e-7 * n;
    assert!((got - want).abs() < 1e-6 * want, "{got} vs {want}");
    assert!(got > m.predict(&w, &dev));
}

#[test]
fn the_l2_sets_all_treat_the_l2_regime() {
    let sets = FeatureSet::with_l2();
    assert_eq!(sets.len() + 6, FeatureSet::defaults().len());
    assert!(sets
        .iter()
        .all(|f| f.l2_fraction.is_some() || !f.l2_knots.is_empty()));
}

#[test]
fn atomic_contention_counts_serialised_adds() {
    let mut w = crate::work::spmv_work(&autopcg_sparse::families::poisson2d_5pt(8, 8).unwrap());
    // Rows of 5 and fewer entries: sum len^2 / 32, below nnz.
    let n = w.n as f64;
    let mean = w.nnz as f64 / n;
    let want = n * (w.row_len_std.powi(2) + mean * mean) / 32.0;
    assert!((atomic_contention(&w) - want).abs() < 1e-9 * want);
    assert!(atomic_contention(&w) < w.nnz as f64);
    // Long rows: every warp adds to one address, capped at nnz.
    w.row_len_std = 0.0;
    w.nnz = w.n * 100;
    assert_eq!(atomic_contention(&w), w.nnz as f64);
    let c = SpmvCandidate::own(
        SpmvImpl::Kernel(SpmvKernel::CooAtomic),
        256,
        GridPolicy::Cover,
    );
    assert!(KernelKind::of(&c).terms().contains(&Term::Contention));
}

#[test]
fn depth_and_geometry_terms() {
    let dev = spmv_synth::device();
    // 2 SMs x 8 blocks of 256 threads in one wave.
    assert_eq!(GridPolicy::Wave.blocks(100_000, 256, &dev), 16);
    assert_eq!(GridPolicy::Cover.blocks(100_000, 256, &dev), 391);
    assert_eq!(GridPolicy::Cover.blocks(0, 256, &dev), 1);
    let w = crate::work::spmv_work(&autopcg_sparse::families::poisson2d_5pt(100, 100).unwrap());
    let c = |k: SpmvKernel, g: GridPolicy| SpmvCandidate::own(SpmvImpl::Kernel(k), 256, g);
    let cover = GridPolicy::Cover;
    assert_eq!(depth(&c(SpmvKernel::CsrScalar, cover), &w, &dev), 5.0);
    // 10000 rows over 4096 threads: 3 rounds of about 5 trips.
    let d = depth(&c(SpmvKernel::CsrScalar, GridPolicy::Wave), &w, &dev);
    assert!(d > 12.0 && d <= 15.0, "{d}");
    assert_eq!(depth(&c(SpmvKernel::CsrVector(4), cover), &w, &dev), 2.0);
    let kind = |k: SpmvImpl| KernelKind::of(&SpmvCandidate::own(k, 256, cover));
    assert_eq!(
        kind(SpmvImpl::Kernel(SpmvKernel::CsrMerge)),
        KernelKind::Generic
    );
    assert_eq!(
        kind(SpmvImpl::Kernel(SpmvKernel::CsrVector(8))),
        KernelKind::CsrVector { lanes: 8 }
    );
    assert_eq!(kind(SpmvImpl::Hyb(SpmvKernel::CooAtomic)), KernelKind::Hyb);
    assert_eq!(
        kind(SpmvImpl::Cusparse(autopcg_catalog::CusparseAlg::CsrAlg2)),
        KernelKind::Generic
    );
    // A format that is not the kernel's: no specific terms.
    let odd = SpmvCandidate {
        format: Format::Coo,
        ..c(SpmvKernel::CsrScalar, cover)
    };
    assert_eq!(KernelKind::of(&odd), KernelKind::Generic);
    assert!((l2_share(1.0, 1 << 20, 1.0) - 1.0).abs() < 1e-9);
    assert!((l2_share((1 << 20) as f64, 1 << 20, 1.0) - 0.5).abs() < 1e-12);
    assert_eq!(quantile(&[3.0, 1.0, 2.0], 0.5), 2.0);
    assert_eq!(quantile(&[1.0; 10], 0.9), 1.0);
    assert!((geomean(&[1.0, 4.0]) - 2.0).abs() < 1e-12);
}

#[test]
fn an_unknown_kernel_is_fitted_with_generic_terms() {
    // A load-balanced kernel whose time is linear in rows and entries.
    let mut cands: Vec<SpmvCandidate> = truths().into_iter().map(|(c, _)| c).collect();
    let merge = SpmvCandidate::own(
        SpmvImpl::Kernel(SpmvKernel::CsrMerge),
        256,
        GridPolicy::Cover,
    );
    cands.push(merge);
    let t = truths();
    let time = |c: &SpmvCandidate, w: &SpmvWork| {
        if *c == merge {
            6e-3 + 1.5e-6 * w.n as f64 + 1.1e-6 * w.nnz as f64
        } else {
            linear_time(c, w, &t.iter().find(|(tc, _)| tc == c).unwrap().1)
        }
    };
    let p = spmv_synth::profile_with(&time, &cands, 0.005, 11);
    let m = SpmvModel::fit(&p, &SpmvFitOptions::default()).unwrap();
    let cm = m.candidate(&merge.name()).unwrap();
    assert_eq!(cm.kind, KernelKind::Generic);
    assert!(cm.stats.median_rel_err < 0.01, "{:?}", cm.stats);
}

#[test]
fn a_model_with_given_coefficients_predicts_its_formula_and_validates() {
    use autopcg_sparse::families::poisson2d_5pt;
    let a = poisson2d_5pt(40, 40).unwrap();
    let w = crate::work::spmv_work(&a);
    let cand = |k| SpmvCandidate::own(SpmvImpl::Kernel(k), 128, GridPolicy::Cover);
    let price = |t: Term| match t {
        Term::Launch => 2e-3,
        Term::Rows => 1e-7,
        Term::Slots => 1e-6,
        Term::Nnz => -5.0,
        _ => f64::NAN,
    };
    let scalar = CandidateModel::with_coefficients(cand(SpmvKernel::CsrScalar), price);
    let vector = CandidateModel::with_coefficients(cand(SpmvKernel::CsrVector(4)), price);
    assert_eq!(vector.kind, KernelKind::CsrVector { lanes: 4 });
    // Negative and non-finite prices are 0.
    assert!(scalar.coef.iter().all(|c| c.is_finite() && *c >= 0.0));
    let dev = spmv_synth::device();
    let n = w.n as f64;
    let want_scalar = 2e-3 + 1e-7 * n + 1e-6 * w.scalar_warp_slots as f64;
    let want_vector = 2e-3 + 1e-7 * n + 1e-6 * w.vector_steps[1] as f64;
    for (m, want) in [(&scalar, want_scalar), (&vector, want_vector)] {
        let got = m.predict(&w, &dev);
        assert!((got - want).abs() <= 1e-12 * want, "{got} vs {want}");
    }
    // A model made of them is a valid model.
    let mut model = SpmvModel::fit(&spmv_synth::profile(8), &SpmvFitOptions::default()).unwrap();
    model.candidates = vec![scalar, vector];
    model.validate().unwrap();
    let p = model.predict(&w);
    assert_eq!(p.len(), 2);
}

/// The synthetic profile with replayed twins of the records of every fit matrix whose iteration
/// fits in half of L2: half the time launched alone (the launch pacing a replay removes), ELL
/// a further 0.4 (so that the regimes rank the formats apart). Returns the ids that fit.
fn with_replayed_twins(p: &mut Profile) -> std::collections::HashSet<String> {
    let l2 = p.device().unwrap().l2_bytes;
    let fits: std::collections::HashSet<String> = p
        .matrices
        .iter()
        .filter(|m| m.set == MatrixSet::Fit)
        .filter(|m| {
            let w = &m.work;
            autopcg_catalog::replays_spmv_at(l2, w.n, autopcg_catalog::square_csr_bytes(w.n, w.nnz))
        })
        .map(|m| m.id.clone())
        .collect();
    let twins: Vec<SpmvRecord> = p
        .spmv
        .iter()
        .filter(|r| fits.contains(&r.matrix))
        .map(|r| {
            let f = if r.launch.format == Format::Ell {
                0.2
            } else {
                0.5
            };
            SpmvRecord {
                timing: r.timing.as_ref().map(|t| Timing {
                    median_ms: f * t.median_ms,
                    min_ms: f * t.min_ms,
                    max_ms: f * t.max_ms,
                    reps: t.reps,
                }),
                replayed: true,
                l2_flushed: false,
                ..r.clone()
            }
        })
        .collect();
    // Through the profile's reader, as a tune's file gives them.
    let mut text = String::new();
    for r in &twins {
        let line = serde_json::to_string(&crate::profile::Record::Spmv(r.clone())).unwrap();
        assert!(line.contains("\"replayed\":true"), "{line}");
        text.push_str(&line);
        text.push('\n');
    }
    for r in text.lines() {
        let rec: crate::profile::Record = serde_json::from_str(r).unwrap();
        p.push(rec).unwrap();
    }
    assert_eq!(p.spmv_replayed.len(), twins.len());
    fits
}

/// A matrix whose iteration fits in half of L2 is predicted by the models of the replayed
/// records, and the choice follows them (ELL, the format the replays rank first wherever it
/// applies); every other matrix keeps the choice of a model fitted without replayed records.
#[test]
fn matrices_within_half_of_l2_are_chosen_by_the_replayed_regime() {
    let mut p = spmv_synth::profile(3);
    let alone = SpmvModel::fit(&p, &SpmvFitOptions::default()).unwrap();
    assert!(alone.replayed.is_empty());
    let fits = with_replayed_twins(&mut p);
    let fit_count = p
        .matrices
        .iter()
        .filter(|m| m.set == MatrixSet::Fit)
        .count();
    assert!(
        fits.len() >= 6 && fits.len() < fit_count,
        "{} of {fit_count}",
        fits.len()
    );
    let m = SpmvModel::fit(&p, &SpmvFitOptions::default()).unwrap();
    m.validate().unwrap();
    assert!(!m.replayed.is_empty(), "{:?}", m.notes);
    assert_eq!(
        m.candidates, alone.candidates,
        "the launched-alone regime is unchanged"
    );
    let (mut ell_chosen, mut small) = (0, 0);
    for mr in &p.matrices {
        let w = &mr.work;
        let chosen = m.select(w, None).unwrap();
        if m.replays(w) {
            small += 1;
            let rc = m
                .replayed
                .iter()
                .find(|c| c.candidate == chosen.candidate)
                .unwrap();
            assert_eq!(chosen.predicted_ms, rc.predict(w, &m.device), "{}", mr.id);
            if m.applies(Format::Ell, w) {
                assert_eq!(chosen.candidate.format, Format::Ell, "{}", mr.id);
                ell_chosen += 1;
            }
        } else {
            assert!(!fits.contains(&mr.id));
            assert_eq!(chosen, alone.select(w, None).unwrap(), "{}", mr.id);
        }
    }
    assert!(
        small >= fits.len() && ell_chosen >= 3,
        "{small} small, {ell_chosen} ELL"
    );
    // The file keeps the regime.
    let back: SpmvModel = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
    assert_eq!(back.replayed, m.replayed);
}
