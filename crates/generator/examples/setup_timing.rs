//! Times the host side of an SSOR-AI setup on a generated 3D Poisson matrix: the factored
//! build, the explicit product's pattern and the whole product, a GPU plan chosen by the
//! committed H200 model with the SSOR-AI form left to the model, and a value-only refresh of
//! each form for new values (a prepared solver's update).
//!
//! `cargo run --release -p autopcg-generator --example setup_timing -- [N] [REPEATS]` (the
//! N^3 7-point Poisson matrix; defaults 96 and 3). Prints the best of the repeats.
use std::path::Path;

use autopcg_generator::{model_device_props, plan, ModelRef, PlanRequest, Target};
use autopcg_model::file::ModelFile;
use autopcg_solver::{PrecondKind, Preconditioner, SsorForm, ValueRefresh};

mod common;
use common::{best_ms, poisson_from_args};

fn main() {
    let (a, repeats) = poisson_from_args(96);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/nvidia-h200.json");
    let model = ModelFile::load(&path).expect("the committed H200 model");
    for kind in [PrecondKind::ssor_ai(), PrecondKind::ssor_ai2()] {
        let kind = kind.resolved_for(&a);
        let (build, pre) = best_ms(repeats, || Preconditioner::build(&a, &kind).unwrap());
        let (pattern, _) = best_ms(repeats, || pre.explicit_pattern().unwrap());
        let (explicit, _) = best_ms(repeats, || pre.to_explicit().unwrap());
        let (planned, p) = best_ms(repeats, || {
            let mut r = PlanRequest::new(&a, kind, Target::Gpu(model_device_props(&model)));
            r.model = Some(ModelRef {
                file: &model,
                label: "h200",
            });
            r.ssor_form_auto = true;
            plan(&r).unwrap()
        });
        println!(
            "{kind}: build (factored) {build:.1} ms, explicit pattern {pattern:.1} ms, explicit \
             product {explicit:.1} ms; plan with the model {planned:.1} ms (precond {:.1} ms, \
             select {:.1} ms, form {})",
            p.precond_ms,
            p.select_ms,
            p.precond_applied()
        );
        // New values of the same pattern: the diagonal doubled.
        let mut b = a.clone();
        for (i, w) in a.indptr().windows(2).enumerate() {
            for p in w[0] as usize..w[1] as usize {
                if a.indices()[p] as usize == i {
                    b.data_mut()[p] *= 2.0;
                }
            }
        }
        for form in [SsorForm::Factored, SsorForm::Explicit] {
            let kind = kind.with_form(form);
            let (fresh, _) = best_ms(repeats, || Preconditioner::build(&b, &kind).unwrap());
            let mut pre = Preconditioner::build(&a, &kind).unwrap();
            let (prepare, mut refresh) = best_ms(1, || ValueRefresh::new(&a, &kind, &pre).unwrap());
            let (refreshed, _) = best_ms(repeats, || refresh.refresh(&b, &mut pre).unwrap());
            println!(
                "{kind} ({form:?}) for new values: a new build {fresh:.1} ms, a refresh \
                 {refreshed:.1} ms (after {prepare:.1} ms preparing it once)"
            );
        }
    }
}
