//! autopcg-model: the performance models of autopcg, fitted once per GPU from the records
//! `autopcg tune` measures, and the decision rules every later solve reads.
//!
//! - [`profile`]: the profile records (JSON Lines, streamed, resumable) and their reader.
//! - [`work`]: work counts of every SpMV kernel on a matrix, the SpMV model's inputs.
//! - [`domains`]: the test domains of vector lengths and the sizes sampled in each.
//! - [`linear`]: the time line of one launch configuration in one domain (eq. 3-1), fitted on
//!   relative residuals.
//! - [`tree`]: Alg. 3-1, the per-domain decision tree over candidate lines, and its lookup.
//! - [`vecdot`]: the vector-update and dot-product models: per operation or family, lines per
//!   launch configuration and domain, their decision trees, and the held-out evaluation.
//! - [`file`](mod@file): model files: everything fitted for one GPU, saved and loaded with validation.
//! - [`link`]: the link between the GPUs of a host as `tune` measured it.
//! - [`store`]: where model files live and how the one for a device is found.
//! - [`spmv`]: the SpMV performance model: a time model per candidate (format, kernel, launch
//!   configuration), conversion costs, and the selection by predicted time.
//! - [`spmv_eval`]: evaluation of the SpMV model and classifier on held-out matrices (accuracy,
//!   selection quality against the best measured, a fixed rule and cuSPARSE).
//! - [`classifier`]: a decision-tree classifier from matrix features to the best SpMV candidate.
//! - [`nnls`]: non-negative least squares (Lawson–Hanson), the fitter of the SpMV time models.
//!
//! Kernel identities, formats, launch geometry, device properties ([`autopcg_catalog::DeviceProps`]) and eq. 3-2
//! are the catalogue's ([`autopcg_catalog`]); this crate never spells or parses a kernel name.
//!
//! This crate never touches a GPU: it fits and predicts on any machine.
#![warn(missing_docs)]

pub mod classifier;
pub mod domains;
pub mod epilogue;
pub mod error;
pub mod file;
pub mod form;
pub mod linear;
pub mod link;
pub mod nnls;
pub mod profile;
pub mod spmv;
pub mod spmv_eval;
#[cfg(test)]
mod spmv_synth;
pub mod store;
pub mod tree;
pub mod vecdot;
pub mod work;

pub use classifier::{ClassifierOptions, SpmvClassifier};
pub use epilogue::{EntrySlope, EpilogueModel};
pub use error::ModelError;
pub use file::{ModelFile, MODEL_SCHEMA};
pub use linear::{fit_line, FitStats, Line, LineFit};
pub use link::MeasuredLink;
pub use spmv::{SpmvCandidate, SpmvFitOptions, SpmvModel, SpmvPrediction};
pub use spmv_eval::{evaluate as evaluate_spmv, evaluate_against, FallbackRule, SpmvEvalReport};
pub use tree::{domain_leaves, DecisionTree, Leaf};
pub use vecdot::{
    evaluate, BlockPolicy, Candidate, DotModels, EvalRow, HeldOutModels, Pick, TreeEvalReport,
    TreeModel, VectorModels,
};
