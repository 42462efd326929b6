//! autopcg-model: the performance models of autopcg, fitted once per GPU from the records
//! `autopcg tune` measures, and the decision rules every later solve reads.
//!
//! - [`profile`]: the profile records (JSON Lines, streamed, resumable) and their reader.
//! - [`work`]: work counts of every SpMV kernel on a matrix, the SpMV model's inputs.
//! - [`domains`]: the test domains of vector lengths and the sizes sampled in each.
//! - [`device`]: the device identity and limits, and the slug model files are named by.
//! - [`linear`]: the time line of one launch configuration in one domain (eq. 3-1), fitted on
//!   relative residuals.
//! - [`occupancy`](mod@occupancy): eq. 3-2, the resident blocks per SM and the block-count
//!   unit `NB_nt`.
//! - [`tree`]: Alg. 3-1, the per-domain decision tree over candidate lines, and its lookup.
//! - [`vecdot`]: the vector-update and dot-product models: per operation or family, lines per
//!   launch configuration and domain, their decision trees, and the held-out evaluation.
//! - [`store`]: where model files live and how the one for a device is found.
//!
//! This crate never touches a GPU: it fits and predicts on any machine.
#![warn(missing_docs)]

pub mod device;
pub mod domains;
pub mod error;
pub mod linear;
pub mod occupancy;
pub mod profile;
pub mod store;
pub mod tree;
pub mod vecdot;
pub mod work;

pub use device::{device_slug, DeviceSpec};
pub use error::ModelError;
pub use linear::{fit_line, FitStats, Line, LineFit};
pub use occupancy::{occupancy, Limiter, Occupancy};
pub use tree::{domain_leaves, DecisionTree, Leaf};
pub use vecdot::{
    evaluate, BlockPolicy, Candidate, DotModels, EvalRow, HeldOutModels, Pick, TreeEvalReport,
    TreeModel, VectorModels,
};
