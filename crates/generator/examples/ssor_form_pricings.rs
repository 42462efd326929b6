//! SSOR-AI's form comparison under other pricings of the operands' products, matrix by matrix,
//! scored against measured iterations.
//!
//!     cargo run --release -p autopcg-generator --features model --example ssor_form_pricings -- \
//!         MODEL.json [--truth TABLE] MATRIX.mtx...
//!
//! For each matrix (first-order SSOR-AI, omega chosen as the solver does; the comparison reads
//! only the operands' structure) it prints the factored form's predicted time
//! (SpMV K + SpMV K^T) and the explicit form's (SpMV M), us, and the form each pricing picks:
//!
//! - `plan`: the plan's choice ([`choose_ssor_form_counted`]; the model's form tree where the
//!   model has one, the times shown then still the predicted ones); without a tree, each
//!   operand predicted in the regime its own CSR arrays and an iteration's vectors fall in
//!   (replayed within half of L2, launched alone past it);
//! - `iter-regime`: every operand of a form in the regime of that form's whole iteration (A,
//!   the form's operands and the vectors, against half of L2);
//! - `no-pacing`: as `plan`, with each launched-alone prediction less the host's launch pacing
//!   (the candidate's launch coefficient launched alone less its replayed one);
//! - `iter-ws`: as `plan`, with the launched-alone L2 terms taken at the form's iteration's
//!   working set instead of the operand's own;
//! - `both`: `no-pacing` and `iter-ws` together.
//!
//! With `--truth TABLE` (the table `tools/ssor_forms.sh` prints: a matrix name, then its rows,
//! entries, factored and explicit us per iteration), each pricing is scored on the matrices of
//! the table named by the files' stems. Conversions are spread over the plan's 500 expected
//! iterations in every pricing.
use std::collections::HashMap;
use std::path::Path;

use autopcg_catalog::{replays_like_the_solver, square_csr_bytes, DeviceProps};
use autopcg_generator::select::{amortised_ms, method_of, SpmvCounts};
use autopcg_generator::{choose_ssor_form_counted, explicit_counts, EXPECTED_ITERATIONS};
use autopcg_model::file::ModelFile;
use autopcg_model::spmv::{CandidateModel, SpmvModel, SpmvPrediction, CUSPARSE_SETUP_MS};
use autopcg_solver::{PrecondKind, Preconditioner, SsorForm};
use autopcg_sparse::features::KnownSymmetry;
use autopcg_sparse::mm::{read_matrix, ReadOptions};

/// How a launched-alone prediction is priced.
#[derive(Clone, Copy)]
struct Pricing {
    /// Every operand of a form in the regime of the form's iteration.
    iteration_regime: bool,
    /// The host's launch pacing taken out of launched-alone predictions.
    no_pacing: bool,
    /// Launched-alone L2 terms at the iteration's working set.
    iteration_ws: bool,
}

/// The predicted time of the operand's pick: among the candidates of `models` that apply and
/// that this build runs on the device, the least predicted time (`price`) plus conversion
/// spread over the expected iterations (the plan's score); its predicted time itself is
/// returned, as the plan's comparison reads it.
fn best(
    sp: &SpmvModel,
    models: &[CandidateModel],
    c: &SpmvCounts,
    props: &DeviceProps,
    price: impl Fn(&CandidateModel) -> f64,
) -> f64 {
    models
        .iter()
        .filter(|m| sp.applies(m.candidate.format, &c.work))
        .filter_map(|m| {
            let t = price(m);
            let p = SpmvPrediction {
                candidate: m.candidate,
                predicted_ms: t,
                conversion_ms: if m.candidate.is_cusparse() {
                    Some(CUSPARSE_SETUP_MS)
                } else {
                    sp.predict_conversion(m.candidate.format, &c.work)
                },
            };
            let method = method_of(&p, &c.work, props)?;
            method.check("spmv", props).ok()?;
            let csr = method.format() == autopcg_catalog::Format::Csr;
            let score = amortised_ms(t, p.conversion_ms, csr, EXPECTED_ITERATIONS)?;
            (t.is_finite() && t > 0.0 && score.is_finite()).then_some((score, t))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map_or(f64::INFINITY, |(_, t)| t)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: ssor_form_pricings MODEL.json [--truth TABLE] MATRIX.mtx...";
    let model_path = args.next().ok_or(usage)?;
    let model = ModelFile::load(&model_path)?;
    let props = autopcg_generator::model_device_props(&model);
    let sp = &model.spmv;
    let mut truth: HashMap<String, (f64, f64)> = HashMap::new();
    let mut files = Vec::new();
    while let Some(a) = args.next() {
        if a == "--truth" {
            let t = std::fs::read_to_string(args.next().ok_or(usage)?)?;
            for line in t.lines() {
                let f: Vec<&str> = line.split_whitespace().collect();
                if let (Some(name), Some(Ok(fact)), Some(Ok(expl))) = (
                    f.first(),
                    f.get(3).map(|v| v.parse::<f64>()),
                    f.get(4).map(|v| v.parse::<f64>()),
                ) {
                    truth.insert(name.to_string(), (fact, expl));
                }
            }
        } else {
            files.push(a);
        }
    }
    if files.is_empty() {
        return Err(usage.into());
    }
    let replayed_launch: HashMap<String, f64> = sp
        .replayed
        .iter()
        .filter(|c| {
            c.columns
                .first()
                .is_some_and(|t| t.term == autopcg_model::spmv::Term::Launch)
        })
        .map(|c| (c.candidate.name(), c.coef[0]))
        .collect();
    let pricings = [
        (
            "iter-regime",
            Pricing {
                iteration_regime: true,
                no_pacing: false,
                iteration_ws: false,
            },
        ),
        (
            "no-pacing",
            Pricing {
                iteration_regime: false,
                no_pacing: true,
                iteration_ws: false,
            },
        ),
        (
            "iter-ws",
            Pricing {
                iteration_regime: false,
                no_pacing: false,
                iteration_ws: true,
            },
        ),
        (
            "both",
            Pricing {
                iteration_regime: false,
                no_pacing: true,
                iteration_ws: true,
            },
        ),
    ];
    let half_l2 = |bytes: f64| replays_like_the_solver(bytes as u64, u64::from(props.l2_bytes));
    let mut names = vec!["plan"];
    names.extend(pricings.iter().map(|p| p.0));
    let mut right = vec![0usize; names.len()];
    let mut scored = 0usize;
    println!("model: {model_path}; f / e: predicted us per application, then the form picked");
    print!("{:12} {:>8}", "matrix", "measured");
    for n in &names {
        print!(" {n:>22}");
    }
    println!();
    for file in &files {
        let stem = Path::new(file)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or(file)
            .trim_end_matches(".mtx")
            .to_string();
        let a = read_matrix(file, &ReadOptions::default())?.matrix;
        let pre = Preconditioner::build(&a, &PrecondKind::ssor_ai())?;
        let Preconditioner::SsorFactored { k, kt, .. } = &pre else {
            return Err(format!("{file}: SSOR-AI did not build factored").into());
        };
        let ck = SpmvCounts::of_knowing(k, KnownSymmetry::Triangular);
        let ckt = SpmvCounts::of_knowing(kt, KnownSymmetry::Triangular);
        let cm = explicit_counts(&pre).ok_or("no explicit counts")?;
        let csr = |c: &SpmvCounts| square_csr_bytes(c.work.n, c.work.nnz) as f64;
        let vectors = 64.0 * a.nrows() as f64;
        let a_bytes = square_csr_bytes(a.nrows() as u64, a.nnz() as u64) as f64;
        let it_f = a_bytes + csr(&ck) + csr(&ckt) + vectors;
        let it_e = a_bytes + csr(&cm) + vectors;
        let mut picks = Vec::new();
        let plan =
            choose_ssor_form_counted(&model, &ck, &ckt, &cm, &props, EXPECTED_ITERATIONS, 1)?;
        let ms = |o: &str| {
            plan.explain
                .options
                .iter()
                .find(|x| x.name.starts_with(o))
                .map_or(f64::NAN, |x| x.score_ms)
        };
        picks.push((ms("factored"), ms("explicit"), plan.form));
        for (_, p) in &pricings {
            let price = |c: &SpmvCounts, it: f64| {
                let alone = if p.iteration_regime {
                    !half_l2(it)
                } else {
                    !sp.replays(&c.work)
                };
                let models = if alone { &sp.candidates } else { &sp.replayed };
                best(sp, models, c, &props, |m| {
                    let mut t = if alone && p.iteration_ws {
                        m.predict_at(&c.work, &props, it)
                    } else {
                        m.predict(&c.work, &props)
                    };
                    if alone && p.no_pacing {
                        if let Some(r) = replayed_launch.get(&m.candidate.name()) {
                            t -= (m.coef[0] - r).max(0.0);
                        }
                    }
                    t
                })
            };
            let f = price(&ck, it_f) + price(&ckt, it_f);
            let e = price(&cm, it_e);
            let form = if e < f {
                SsorForm::Explicit
            } else {
                SsorForm::Factored
            };
            picks.push((f, e, form));
        }
        let measured = truth.get(&stem).map(|&(f, e)| {
            if e < f {
                SsorForm::Explicit
            } else {
                SsorForm::Factored
            }
        });
        let letter = |f: SsorForm| if f == SsorForm::Explicit { "E" } else { "F" };
        print!("{stem:12} {:>8}", measured.map_or("-", letter));
        if measured.is_some() {
            scored += 1;
        }
        for (i, (f, e, form)) in picks.iter().enumerate() {
            let ok = match measured {
                Some(m) if m == *form => {
                    right[i] += 1;
                    " "
                }
                Some(_) => "x",
                None => " ",
            };
            print!(
                " {:>9.2} / {:>7.2} {}{}",
                f * 1e3,
                e * 1e3,
                letter(*form),
                ok
            );
        }
        println!();
    }
    if scored > 0 {
        print!("{:12} {:>8}", "right", format!("of {scored}"));
        for r in &right {
            print!(" {r:>22}");
        }
        println!();
    }
    Ok(())
}
