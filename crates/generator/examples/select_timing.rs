//! Times the host work of a plan on a generated 3D Poisson matrix: the counts the SpMV choice
//! reads (one pass against the separate feature and work passes), SSOR-AI's build and the
//! transpose its K^T no longer needs, the count of the explicit product's structure, its
//! pattern and the product formed (what a plan that chooses the explicit form spends); what a
//! GPU plan reads of first-order SSOR-AI through A's pattern instead (omega, the diagonal's
//! positions, the counts of K and K^T, the explicit product's count); and a whole plan with
//! the committed H200 model (matrix known symmetric, as a checked one is).
//!
//! `cargo run --release -p autopcg-generator --example select_timing -- [N] [REPEATS]` (the
//! N^3 7-point Poisson matrix; defaults 128 and 3). Prints the best of the repeats.
use std::path::Path;

use autopcg_generator::{model_device_props, plan, ModelRef, PlanRequest, SpmvCounts, Target};
use autopcg_model::file::ModelFile;
use autopcg_solver::{PrecondKind, Preconditioner};
use autopcg_sparse::features::{features_knowing, KnownSymmetry};

mod common;
use common::{best_ms, poisson_from_args};

fn main() {
    let (a, repeats) = poisson_from_args(128);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/nvidia-h200.json");
    let model = ModelFile::load(&path).expect("the committed H200 model");
    let sym = KnownSymmetry::Symmetric;
    let (one, _) = best_ms(repeats, || SpmvCounts::of_knowing(&a, sym));
    let (apart, _) = best_ms(repeats, || {
        rayon::join(
            || autopcg_model::work::spmv_work(&a),
            || features_knowing(&a, sym),
        )
    });
    let (search, _) = best_ms(repeats, || SpmvCounts::of(&a));
    println!(
        "counts of A: one pass {one:.1} ms, separate passes {apart:.1} ms, one pass with the \
         symmetry searched {search:.1} ms"
    );
    let kind = PrecondKind::ssor_ai().resolved_for(&a);
    let (build, pre) = best_ms(repeats, || Preconditioner::build(&a, &kind).unwrap());
    let Preconditioner::SsorFactored { k, .. } = &pre else {
        panic!("factored SSOR-AI");
    };
    let (transpose, _) = best_ms(repeats, || k.transpose());
    let (counted, _) = best_ms(repeats, || autopcg_generator::explicit_counts(&pre));
    let (pattern, _) = best_ms(repeats, || pre.explicit_pattern().unwrap());
    let (formed, _) = best_ms(repeats, || pre.to_explicit().unwrap());
    println!(
        "ssor-ai: build {build:.1} ms (a transpose of K alone: {transpose:.1} ms), count of \
         the explicit product {counted:.1} ms, its pattern {pattern:.1} ms, the product \
         formed {formed:.1} ms"
    );
    // What a GPU plan of first-order factored SSOR-AI reads instead, through A's pattern.
    let (omega_ms, omega) = best_ms(repeats, || autopcg_solver::auto_omega(&a));
    let (views_ms, v) = best_ms(repeats, || {
        autopcg_generator::factors::K1Factors::of(&a).expect("views")
    });
    let (features_ms, _) = best_ms(repeats, || v.features(omega, Some(sym)));
    let (explicit_ms, _) = best_ms(repeats, || v.explicit_counts());
    println!(
        "ssor-ai through A's pattern: omega {omega_ms:.1} ms ({:.1} ms with the views' \
         diagonal), diagonal positions {views_ms:.1} ms, counts of A, K and K^T in one pass \
         {features_ms:.1} ms, count of the explicit product {explicit_ms:.1} ms",
        best_ms(repeats, || v.auto_omega()).0
    );
    for kind in [PrecondKind::None, PrecondKind::ssor_ai()] {
        let (ms, p) = best_ms(repeats, || {
            let mut r = PlanRequest::new(&a, kind, Target::Gpu(model_device_props(&model)));
            r.symmetry = sym;
            r.ssor_form_auto = true;
            r.model = Some(ModelRef {
                file: &model,
                label: "h200",
            });
            plan(&r).unwrap()
        });
        println!(
            "plan {kind}: {ms:.1} ms (precond {:.1} ms, select {:.1} ms)",
            p.precond_ms, p.select_ms
        );
    }
}
