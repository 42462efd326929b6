//! autopcg-generator: model + matrix -> plan.
#![warn(missing_docs)]
