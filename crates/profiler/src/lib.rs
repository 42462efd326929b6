//! autopcg-profiler: the sweep `autopcg tune` runs once per GPU.
#![warn(missing_docs)]
