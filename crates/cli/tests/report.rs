//! `autopcg report` on the committed H200 model, its profiles and shipped matrices (CPU only):
//! every section holds one plot per domain, family and matrix of the model; the file refers to
//! nothing outside itself; every plot is well-formed XML; bad input exits 2 naming the file and
//! never overwrites an input.
mod common;
use common::{bin, run, stderr};

use std::collections::HashSet;
use std::sync::OnceLock;

use autopcg_model::domains::domains;
use autopcg_model::ModelFile;

const MODEL: &str = "../../models/nvidia-h200.json";
const MATRICES: [&str; 2] = ["../../matrices/bcsstk01.mtx", "../../matrices/bcsstk13.mtx"];

/// The report of the committed model with both matrices, built once for every test.
fn full_report() -> &'static str {
    static PAGE: OnceLock<String> = OnceLock::new();
    PAGE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("report.html");
        let mut args = vec!["report", "--model", MODEL];
        for m in MATRICES {
            args.extend(["--matrix", m]);
        }
        args.extend(["--out", out.to_str().unwrap()]);
        let o = run(&args);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        std::fs::read_to_string(&out).unwrap()
    })
}

/// The text of `<section id="id">` up to its end.
fn section<'a>(page: &'a str, id: &str) -> &'a str {
    let open = format!("<section id=\"{id}\">");
    let start = page
        .find(&open)
        .unwrap_or_else(|| panic!("no section {id}"));
    let end = page[start..].find("</section>").expect("section ends") + start;
    &page[start..end]
}

/// Every `<svg ...>...</svg>` element of a text.
fn svgs(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(s) = rest.find("<svg") {
        let e = rest[s..].find("</svg>").expect("svg ends") + s + "</svg>".len();
        out.push(&rest[s..e]);
        rest = &rest[e..];
    }
    out
}

fn id_of(svg: &str) -> String {
    let tag = &svg[..svg.find('>').unwrap()];
    let i = tag.find(" id=\"").expect("every plot has an id") + 5;
    tag[i..i + tag[i..].find('"').unwrap()].to_string()
}

/// A small XML well-formedness check: tags nest and close, attributes are quoted, `&` starts
/// an entity, `<` only opens a tag.
fn check_xml(doc: &str) -> Result<(), String> {
    let mut stack: Vec<String> = Vec::new();
    let b = doc.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'<' => {
                let end = doc[i..].find('>').ok_or("a tag is not closed")? + i;
                let tag = &doc[i + 1..end];
                if let Some(name) = tag.strip_prefix('/') {
                    let top = stack.pop().ok_or(format!("</{name}> closes nothing"))?;
                    if top != name.trim() {
                        return Err(format!("</{name}> closes <{top}>"));
                    }
                } else {
                    let self_closing = tag.ends_with('/');
                    let body = tag.trim_end_matches('/');
                    let name: String = body.chars().take_while(|c| !c.is_whitespace()).collect();
                    if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '-') {
                        return Err(format!("bad tag <{tag}>"));
                    }
                    if body.matches('"').count() % 2 != 0 {
                        return Err(format!("unbalanced quotes in <{tag}>"));
                    }
                    if body.contains('<') {
                        return Err(format!("'<' inside <{tag}>"));
                    }
                    if !self_closing {
                        stack.push(name);
                    }
                }
                i = end + 1;
            }
            b'&' => {
                let semi = doc[i..].find(';').ok_or("a bare '&'")? + i;
                let ent = &doc[i + 1..semi];
                let ok = matches!(ent, "amp" | "lt" | "gt" | "quot" | "apos")
                    || ent.starts_with('#') && ent.len() > 1;
                if !ok {
                    return Err(format!("unknown entity &{ent};"));
                }
                i = semi + 1;
            }
            _ => i += 1,
        }
    }
    match stack.pop() {
        Some(open) => Err(format!("<{open}> is not closed")),
        None => Ok(()),
    }
}

fn model() -> ModelFile {
    ModelFile::load(MODEL).unwrap()
}

#[test]
fn every_domain_family_and_matrix_has_its_plot() {
    let page = full_report();
    let m = model();
    let trees: Vec<_> = m
        .vector
        .ops
        .values()
        .chain(m.dot.families.values())
        .collect();
    let domain_plots: usize = trees.iter().map(|t| domains(t.max_n).len()).sum();
    let vecdot = section(page, "vecdot");
    // One plot per operation and domain, and the eq. 3-2 table (the profile has its records).
    assert_eq!(svgs(vecdot).len(), domain_plots + 1);
    for (g, t) in trees.iter().enumerate() {
        for d in 0..domains(t.max_n).len() {
            assert!(
                vecdot.contains(&format!("id=\"vecdot-{g}-{d}\"")),
                "{g} {d}"
            );
        }
    }
    assert!(vecdot.contains("id=\"occupancy\""));
    // Every leaf of every tree is listed under its domain's plot.
    let leaves: usize = trees.iter().map(|t| t.tree.leaves().len()).sum();
    assert_eq!(vecdot.matches("<li><i style").count(), leaves);

    // One plot per SpMV kernel family (CSR vector kernels of every lane count are one), and
    // the selection on the held-out matrices.
    let families: HashSet<_> = m
        .spmv
        .candidates
        .iter()
        .map(|c| std::mem::discriminant(&c.kind))
        .collect();
    let spmv = section(page, "spmv");
    assert_eq!(svgs(spmv).len(), families.len() + 1);
    assert_eq!(
        svgs(spmv)
            .iter()
            .filter(|s| id_of(s).starts_with("spmv-family-"))
            .count(),
        families.len()
    );
    assert!(spmv.contains("id=\"spmv-selection\""));
    assert!(spmv.contains("cuSPARSE"));

    // Per matrix: pattern, row lengths, plan.
    let mats = section(page, "matrices");
    assert_eq!(svgs(mats).len(), 3 * MATRICES.len());
    for i in 0..MATRICES.len() {
        for p in ["spy", "rowlen", "plan"] {
            assert!(mats.contains(&format!("id=\"{p}-{i}\"")), "{p}-{i}");
        }
    }
    assert!(mats.contains("bcsstk13.mtx") && mats.contains("spmv A"));

    // Every plot is in a section, and every id is unique.
    let all = svgs(page);
    assert_eq!(
        all.len(),
        svgs(vecdot).len() + svgs(spmv).len() + svgs(mats).len()
    );
    let ids: HashSet<String> = all.iter().map(|s| id_of(s)).collect();
    assert_eq!(ids.len(), all.len());
}

#[test]
fn the_header_names_device_model_date_and_fit_statistics() {
    let page = full_report();
    let head = &page[page.find("<header").unwrap()..page.find("</header>").unwrap()];
    assert!(head.contains("NVIDIA H200"));
    assert!(head.contains("nvidia-h200.json"));
    // The profiles beside the model are found without being named.
    assert!(head.contains("nvidia-h200.profile.jsonl.gz"));
    assert!(head.contains("nvidia-h200.eval.jsonl.gz"));
    assert!(head.contains("id=\"fit-trees\"") && head.contains("id=\"fit-spmv\""));
    assert!(head.contains("min r²"));
    let m = model();
    for name in m.vector.ops.keys().chain(m.dot.families.keys()) {
        assert!(head.contains(&format!("<td>{name}</td>")), "{name}");
    }
    // A date: the report's own, YYYY-MM-DD.
    let i = head.find("report written</th><td>").unwrap() + "report written</th><td>".len();
    let d = &head[i..i + 10];
    assert!(
        d.len() == 10 && d.as_bytes()[4] == b'-' && d[..4].parse::<u32>().unwrap() >= 2024,
        "{d}"
    );
}

#[test]
fn the_file_refers_to_nothing_outside_itself_and_is_well_formed() {
    let page = full_report();
    for bad in [
        "http", "src=", "<link", "<script", "url(", "@import", "<img", "<iframe",
    ] {
        assert!(!page.contains(bad), "the report holds {bad:?}");
    }
    // Only links to its own anchors.
    for (i, _) in page.match_indices("href=\"") {
        assert_eq!(&page[i + 6..i + 7], "#", "{}", &page[i..i + 40]);
    }
    for s in svgs(page) {
        check_xml(s).unwrap_or_else(|e| panic!("{}: {e}", id_of(s)));
    }
    // The whole page too, past its doctype: nothing is left open or unescaped.
    let body = page.strip_prefix("<!DOCTYPE html>\n").expect("a doctype");
    check_xml(body).unwrap_or_else(|e| panic!("the page: {e}"));
    // The pattern of a 2003-row matrix is binned: it stays small.
    let spy = svgs(page)
        .into_iter()
        .find(|s| id_of(s) == "spy-1")
        .unwrap();
    assert!(spy.matches("<rect").count() <= 128 * 128 + 2);
    assert!(spy.len() < 600_000, "{} bytes", spy.len());
}

#[test]
fn the_xml_check_catches_what_it_should() {
    assert!(check_xml("<svg><g><rect x=\"1\"/></g></svg>").is_ok());
    assert!(check_xml("<svg><g></svg>").is_err());
    assert!(check_xml("<svg><text>a & b</text></svg>").is_err());
    assert!(check_xml("<svg x=\"1></svg>").is_err());
}

#[test]
fn without_profiles_beside_the_model_only_the_model_is_drawn() {
    let dir = tempfile::tempdir().unwrap();
    let model_copy = dir.path().join("gpu.json");
    std::fs::copy(MODEL, &model_copy).unwrap();
    let out = dir.path().join("r.html");
    let o = run(&[
        "report",
        "--model",
        model_copy.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let page = std::fs::read_to_string(&out).unwrap();
    let m = model();
    let domain_plots: usize = m
        .vector
        .ops
        .values()
        .chain(m.dot.families.values())
        .map(|t| domains(t.max_n).len())
        .sum();
    // No occupancy table and no selection plot without profiles.
    assert_eq!(svgs(section(&page, "vecdot")).len(), domain_plots);
    assert!(!page.contains("id=\"spmv-selection\""));
    assert!(page.contains("No profile"));
    assert_eq!(svgs(section(&page, "matrices")).len(), 0);
}

#[test]
fn bad_input_exits_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.html");
    let out_s = out.to_str().unwrap();
    let expect_2 = |args: &[&str], names: &str| {
        let o = run(args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(names), "{args:?}: {e}");
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(!out.exists(), "{args:?} wrote a report");
    };
    expect_2(
        &["report", "--model", "no/such/model.json", "--out", out_s],
        "no/such/model.json",
    );
    expect_2(
        &[
            "report",
            "--model",
            MODEL,
            "--matrix",
            "no/such.mtx",
            "--out",
            out_s,
        ],
        "no/such.mtx",
    );
    let garbage = dir.path().join("garbage.mtx");
    std::fs::write(
        &garbage,
        "%%MatrixMarket matrix coordinate real general\n3 3 1\nx y z\n",
    )
    .unwrap();
    expect_2(
        &[
            "report",
            "--model",
            MODEL,
            "--matrix",
            garbage.to_str().unwrap(),
            "--out",
            out_s,
        ],
        "garbage.mtx",
    );
    // A profile of another GPU.
    expect_2(
        &[
            "report",
            "--model",
            MODEL,
            "--eval",
            "../../models/nvidia-h100.eval.jsonl.gz",
            "--out",
            out_s,
        ],
        "nvidia-h100.eval.jsonl.gz",
    );
    let bad_model = dir.path().join("bad.json");
    std::fs::write(&bad_model, "{ \"schema\": 1, ").unwrap();
    expect_2(
        &[
            "report",
            "--model",
            bad_model.to_str().unwrap(),
            "--out",
            out_s,
        ],
        "bad.json",
    );
    // No GPU to find a model by: the message says to name one.
    let o = bin()
        .args(["report", "--out", out_s])
        .env("CUDA_VISIBLE_DEVICES", "")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--model"), "{}", stderr(&o));
    // --out is required.
    let o = run(&["report", "--model", MODEL]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn the_output_never_overwrites_an_input() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.mtx");
    std::fs::copy(MATRICES[0], &a).unwrap();
    let before = std::fs::read(&a).unwrap();
    let model_copy = dir.path().join("m.json");
    std::fs::copy(MODEL, &model_copy).unwrap();
    let model_before = std::fs::read(&model_copy).unwrap();
    for out in [&a, &model_copy] {
        let o = run(&[
            "report",
            "--model",
            model_copy.to_str().unwrap(),
            "--matrix",
            a.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains(out.file_name().unwrap().to_str().unwrap()));
    }
    assert_eq!(std::fs::read(&a).unwrap(), before);
    assert_eq!(std::fs::read(&model_copy).unwrap(), model_before);
}
