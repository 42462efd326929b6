//! Saved plans whose SpMV steps are handed to cuSPARSE (`SpmvMethod::Cusparse`), for the
//! emission tests (tests/emit.rs) and the emulated driver (tests/emitted_driver.rs), which
//! include this file with `#[path]` next to their `common` module. The plans are the model's
//! own for their fixtures, with the SpMV of the named operands replaced (and their predictions
//! dropped): cuSPARSE is chosen by hand here, as the selection may come to choose it.
use autopcg_catalog::{CusparseAlg, SpmvMethod};
use autopcg_generator::saved::SavedPlan;
use autopcg_solver::gpu::{PrecondChoice, SpmvChoice};
use autopcg_solver::SsorForm;

use crate::common::*;

/// `c` handed to cuSPARSE with `alg` when `alg` is given.
fn hand_over(c: &mut SpmvChoice, alg: Option<CusparseAlg>) {
    if let Some(alg) = alg {
        c.method = SpmvMethod::Cusparse { alg };
        c.predicted_ms = None;
    }
}

/// `p` with A handed to cuSPARSE with `a`, and the preconditioner's operands (K then K^T, or
/// M) with the algorithms of `pre` in order (`None`, or past the end: the plan's own kernel).
pub fn with_cusparse(
    mut p: SavedPlan,
    a: Option<CusparseAlg>,
    pre: &[Option<CusparseAlg>],
) -> SavedPlan {
    let mut c = p.choice().clone();
    hand_over(&mut c.a, a);
    let mut pre = pre.iter().copied().chain(std::iter::repeat(None));
    match &mut c.precond {
        PrecondChoice::Factored { k, kt, .. } => {
            hand_over(k, pre.next().flatten());
            hand_over(kt, pre.next().flatten());
        }
        PrecondChoice::Explicit { m } => hand_over(m, pre.next().flatten()),
        PrecondChoice::None | PrecondChoice::Jacobi(_) => {}
    }
    c.source = "cuSPARSE forced by a test".into();
    p.set_choice(c).unwrap();
    p
}

/// Plans with cuSPARSE steps, named like [`plans`] (the fixture first): A alone by cuSPARSE's
/// merge-path algorithm (the model's SSOR-AI plan otherwise, graphs included); the factored
/// preconditioner's K and K^T by cuSPARSE (ALG1 and the library's default) with A on a kernel;
/// the explicit form with A and M both by cuSPARSE; and Jacobi with A by cuSPARSE.
pub fn cusparse_plans() -> Vec<(String, SavedPlan)> {
    let b13 = fixture("bcsstk13");
    let s3 = fixture("s3rmt3m3");
    let b1 = fixture("bcsstk01");
    let bus = fixture("1138_bus");
    vec![
        (
            "bcsstk13 ssor-ai auto, A by cusparse csr_alg2".into(),
            with_cusparse(
                saved("bcsstk13", &b13, ssor(1), true),
                Some(CusparseAlg::CsrAlg2),
                &[],
            ),
        ),
        (
            "s3rmt3m3 ssor-ai2 factored, K and K^T by cusparse".into(),
            with_cusparse(
                saved("s3rmt3m3", &s3, ssor(2), false),
                None,
                &[Some(CusparseAlg::CsrAlg1), Some(CusparseAlg::Default)],
            ),
        ),
        (
            "bcsstk01 ssor-ai explicit, A and M by cusparse".into(),
            with_cusparse(
                saved(
                    "bcsstk01",
                    &b1,
                    ssor(1).with_form(SsorForm::Explicit),
                    false,
                ),
                Some(CusparseAlg::CsrAlg2),
                &[Some(CusparseAlg::CsrAlg2)],
            ),
        ),
        (
            "1138_bus jacobi, A by cusparse default".into(),
            with_cusparse(
                saved("1138_bus", &bus, autopcg_solver::PrecondKind::Jacobi, false),
                Some(CusparseAlg::Default),
                &[],
            ),
        ),
    ]
}

/// The kernel of every step of the plan in the JSON an emitted solver prints (`plan.steps`,
/// which must be there).
pub fn step_kernels(j: &serde_json::Value) -> Vec<&str> {
    let steps = j["plan"]["steps"]
        .as_array()
        .unwrap_or_else(|| panic!("no plan.steps in {j}"));
    steps.iter().filter_map(|s| s["kernel"].as_str()).collect()
}
