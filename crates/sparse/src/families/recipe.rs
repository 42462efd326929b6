//! Recipes: how to rebuild a benchmark matrix exactly, so a profile can name its matrices
//! instead of storing them, and a model can be refitted (or its features recomputed) on any
//! machine.
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{generate, kron, poisson2d_5pt, Family, FamilyParams};
use crate::mm::{read_matrix, ReadOptions};
use crate::{CsrMatrix, SparseError};

/// How to build a benchmark matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum Recipe {
    /// A generated family ([`generate`]).
    Family {
        /// Family name as [`Family::name`] spells it.
        family: String,
        /// Its parameters.
        params: FamilyParams,
    },
    /// A Matrix Market file (a path relative to a base folder, e.g. `matrices/bcsstk13.mtx`)
    /// Kronecker-multiplied by the 5-point Poisson matrix of a `poisson2d x poisson2d` grid
    /// (`poisson2d = 1` gives the file's matrix scaled by 4: same structure).
    FileKron {
        /// Path relative to the base folder given to [`Recipe::build`].
        path: String,
        /// Grid side of the Poisson factor.
        poisson2d: usize,
    },
}

impl Recipe {
    /// A family recipe.
    pub fn family(f: Family, params: FamilyParams) -> Recipe {
        Recipe::Family {
            family: f.name().to_string(),
            params,
        }
    }

    /// Builds the matrix; file paths are taken relative to `base`.
    pub fn build(&self, base: &Path) -> Result<CsrMatrix, SparseError> {
        match self {
            Recipe::Family { family, params } => generate(family.parse()?, params),
            Recipe::FileKron { path, poisson2d } => {
                if *poisson2d == 0 {
                    return Err(SparseError::InvalidParameter(format!(
                        "recipe {self}: poisson2d must be at least 1"
                    )));
                }
                let a = read_matrix(base.join(path), &ReadOptions::default())?.matrix;
                kron(&a, &poisson2d_5pt(*poisson2d, *poisson2d)?)
            }
        }
    }
}

impl fmt::Display for Recipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Recipe::Family { family, params } => {
                write!(f, "{family} n={} seed={}", params.n, params.seed)?;
                if let Some(b) = params.bandwidth {
                    write!(f, " bandwidth={b}")?;
                }
                if let Some(m) = params.mean_row_len {
                    write!(f, " mean_row_len={m}")?;
                }
                if let Some(a) = params.alpha {
                    write!(f, " alpha={a}")?;
                }
                if let Some(e) = params.eps {
                    write!(f, " eps={e}")?;
                }
                if let Some(t) = params.theta {
                    write!(f, " theta={t}")?;
                }
                Ok(())
            }
            Recipe::FileKron { path, poisson2d } => {
                write!(f, "{path} kron poisson2d({poisson2d}x{poisson2d})")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn family_recipe_builds_the_family_matrix_and_names_it() {
        let mut p = FamilyParams::new(200, 7);
        p.bandwidth = Some(3);
        let r = Recipe::family(Family::Banded, p.clone());
        let a = r.build(Path::new(".")).unwrap();
        assert_eq!(a, generate(Family::Banded, &p).unwrap());
        assert_eq!(r.to_string(), "banded n=200 seed=7 bandwidth=3");
        let back: Recipe = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn file_kron_recipe_reads_relative_to_base() {
        let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let r = Recipe::FileKron {
            path: "matrices/bcsstk01.mtx".into(),
            poisson2d: 3,
        };
        let a = r.build(&base).unwrap();
        assert_eq!(a.nrows(), 48 * 9);
        let bad = Recipe::FileKron {
            path: "matrices/bcsstk01.mtx".into(),
            poisson2d: 0,
        };
        assert!(bad.build(&base).is_err());
        let unknown = Recipe::Family {
            family: "nope".into(),
            params: FamilyParams::new(3, 0),
        };
        assert!(unknown.build(&base).is_err());
    }
}
