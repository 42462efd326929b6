//! How a plan was chosen, step by step: the choice, its runners-up with their predicted times,
//! and why.
use serde::{Deserialize, Serialize};

/// How many runner-up choices an explanation lists per step.
pub const RUNNERS_UP: usize = 4;

/// One option considered for a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepOption {
    /// Candidate name (`format/kernel/tT/grid` for SpMV, `kernel tT bB` for vector steps).
    pub name: String,
    /// Predicted milliseconds per call.
    pub predicted_ms: f64,
    /// Predicted conversion milliseconds (SpMV only; 0 for CSR).
    pub conversion_ms: Option<f64>,
    /// What the choice minimised: predicted ms plus conversion / iterations.
    pub score_ms: f64,
}

impl StepOption {
    /// An option whose score is its predicted time (no conversion).
    pub fn timed(name: impl Into<String>, predicted_ms: f64) -> Self {
        StepOption {
            name: name.into(),
            predicted_ms,
            conversion_ms: None,
            score_ms: predicted_ms,
        }
    }
}

/// How one step was chosen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepExplain {
    /// The step (`spmv A`, `spmv K`, `update`, `dots`...).
    pub step: String,
    /// The choice, then up to [`RUNNERS_UP`] runners-up, best first.
    pub options: Vec<StepOption>,
    /// Why, in words.
    pub why: String,
    /// The classifier's label for this operand, where there is one (a second opinion).
    pub classifier: Option<String>,
}
