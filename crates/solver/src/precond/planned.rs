//! A plan's preconditioner: built on the host, or left to the GPU backend, which builds
//! first-order factored SSOR-AI (or Jacobi's inverse diagonal) from the matrix it has just
//! uploaded, so that the host neither forms `K` and `K^T diag(s)` (or `D^-1`) nor copies them
//! over the bus. Whatever needs the host arrays
//! (the CPU backend, a value refresh on the host, a transposing fallback) builds them when it
//! first needs them ([`PlannedPrecond::host`]).
use autopcg_sparse::CsrMatrix;

use super::{PrecondKind, Preconditioner, SsorForm};
use crate::PcgError;

/// The longest row of `K^T` (entries of `A`'s row from its diagonal on) for which the GPU
/// backend may form first-order SSOR-AI's explicit product on the device: a block takes in a
/// row of the product as bits over a span of this many columns, and the columns of a row of
/// `K^T` (the diagonals of the rows of `K` it unites) are the row's too, so a longer one spans
/// more (a plan asks for [`PlannedPrecond::SsorK1ExplicitFromA`] only within it). Within it
/// the device may still refuse a row whose columns span more and whose rows of `K` hold more
/// entries together than it sorts; the backend then forms the product on the host.
pub const DEVICE_EXPLICIT_KT_MAX: usize = 32 * 4096;

/// What a plan hands its backend as the preconditioner.
#[derive(Debug, Clone, PartialEq)]
pub enum PlannedPrecond {
    /// Built on the host.
    Built(Preconditioner),
    /// First-order SSOR-AI in the factored form, built from `A` where the solve runs (the GPU
    /// backend builds it on the device, from the CSR arrays of `A` it uploads).
    SsorK1FromA {
        /// The relaxation factor, resolved for the matrix.
        omega: f64,
        /// Rows of the matrix it is for.
        n: usize,
    },
    /// First-order SSOR-AI in the explicit form, its product `K^T diag(s) K` formed from `A`
    /// where the solve runs (the GPU backend forms it on the device from the CSR arrays of
    /// `A` it uploads, and on the host where the device does not take the matrix).
    SsorK1ExplicitFromA {
        /// The relaxation factor, resolved for the matrix.
        omega: f64,
        /// Rows of the matrix it is for.
        n: usize,
    },
    /// Second-order SSOR-AI in the factored form, built from `A` where the solve runs (the
    /// GPU backend builds `K = I - X + X^2` and `K^T diag(s)` on the device from the CSR
    /// arrays of `A` it uploads, and on the host where the device does not take the matrix).
    SsorK2FromA {
        /// The relaxation factor, resolved for the matrix.
        omega: f64,
        /// Rows of the matrix it is for.
        n: usize,
    },
    /// Jacobi, built from `A` where the solve runs (the GPU backend computes the inverse
    /// diagonal on the device from the CSR arrays of `A` it uploads, or that were uploaded
    /// ahead).
    JacobiFromA {
        /// Rows of the matrix it is for.
        n: usize,
    },
}

impl From<Preconditioner> for PlannedPrecond {
    fn from(p: Preconditioner) -> Self {
        PlannedPrecond::Built(p)
    }
}

impl PlannedPrecond {
    /// The kind this builds: its omega resolved, its form the one applied.
    pub fn ssor_k1_kind(omega: f64) -> PrecondKind {
        PrecondKind::SsorAi {
            order: 1,
            omega: Some(omega),
            form: SsorForm::Factored,
        }
    }

    /// The kind of [`PlannedPrecond::SsorK2FromA`]: second order, its omega resolved, the
    /// factored form.
    pub fn ssor_k2_kind(omega: f64) -> PrecondKind {
        PrecondKind::SsorAi {
            order: 2,
            omega: Some(omega),
            form: SsorForm::Factored,
        }
    }

    /// The kind of [`PlannedPrecond::SsorK1ExplicitFromA`]: its omega resolved, the explicit
    /// form.
    pub fn ssor_k1_explicit_kind(omega: f64) -> PrecondKind {
        Self::ssor_k1_kind(omega).with_form(SsorForm::Explicit)
    }

    /// The preconditioner as applied, as [`Preconditioner::kind_name`] names it.
    pub fn kind_name(&self) -> &str {
        match self {
            PlannedPrecond::Built(p) => p.kind_name(),
            PlannedPrecond::SsorK1FromA { .. } | PlannedPrecond::SsorK2FromA { .. } => {
                "ssor-ai-factored"
            }
            PlannedPrecond::SsorK1ExplicitFromA { .. } => "ssor-ai-explicit",
            PlannedPrecond::JacobiFromA { .. } => "jacobi",
        }
    }

    /// The host arrays, when they are built.
    pub fn built(&self) -> Option<&Preconditioner> {
        match self {
            PlannedPrecond::Built(p) => Some(p),
            PlannedPrecond::SsorK1FromA { .. }
            | PlannedPrecond::SsorK1ExplicitFromA { .. }
            | PlannedPrecond::SsorK2FromA { .. }
            | PlannedPrecond::JacobiFromA { .. } => None,
        }
    }

    /// True when the backend builds it from the matrix.
    pub fn built_by_backend(&self) -> bool {
        !matches!(self, PlannedPrecond::Built(_))
    }

    /// The host arrays, built from `a` first when the backend was to build them (the same
    /// preconditioner, value for value, as the backend's). `a` must be the matrix of the plan
    /// (or one of its pattern: the values are those of `a`).
    pub fn host(&mut self, a: &CsrMatrix) -> Result<&mut Preconditioner, PcgError> {
        let planned = match *self {
            PlannedPrecond::Built(_) => None,
            PlannedPrecond::SsorK1FromA { omega, n } => Some((Self::ssor_k1_kind(omega), n)),
            PlannedPrecond::SsorK1ExplicitFromA { omega, n } => {
                Some((Self::ssor_k1_explicit_kind(omega), n))
            }
            PlannedPrecond::SsorK2FromA { omega, n } => Some((Self::ssor_k2_kind(omega), n)),
            PlannedPrecond::JacobiFromA { n } => Some((PrecondKind::Jacobi, n)),
        };
        if let Some((kind, n)) = planned {
            if a.nrows() != n {
                return Err(PcgError::Dimension(format!(
                    "the preconditioner was planned for {n} rows, the matrix has {}",
                    a.nrows()
                )));
            }
            *self = PlannedPrecond::Built(Preconditioner::build(a, &kind)?);
        }
        match self {
            PlannedPrecond::Built(p) => Ok(p),
            _ => unreachable!("built just above"),
        }
    }

    /// As [`Preconditioner::dim`].
    pub fn dim(&self) -> Option<usize> {
        self.as_ref().dim()
    }

    /// The preconditioner as a backend takes it.
    pub fn as_ref(&self) -> PrecondRef<'_> {
        self.into()
    }
}

/// A preconditioner as a backend receives it: host arrays, or first-order factored SSOR-AI for
/// the backend to build from the matrix (see [`PlannedPrecond`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PrecondRef<'p> {
    /// Built on the host.
    Built(&'p Preconditioner),
    /// First-order factored SSOR-AI with this omega for a matrix of `n` rows, built by the
    /// backend.
    SsorK1FromA {
        /// The relaxation factor.
        omega: f64,
        /// Rows.
        n: usize,
    },
    /// First-order explicit SSOR-AI with this omega for a matrix of `n` rows, its product
    /// formed by the backend.
    SsorK1ExplicitFromA {
        /// The relaxation factor.
        omega: f64,
        /// Rows.
        n: usize,
    },
    /// Second-order factored SSOR-AI with this omega for a matrix of `n` rows, built by the
    /// backend.
    SsorK2FromA {
        /// The relaxation factor.
        omega: f64,
        /// Rows.
        n: usize,
    },
    /// Jacobi for a matrix of `n` rows, built by the backend.
    JacobiFromA {
        /// Rows.
        n: usize,
    },
}

impl<'p> From<&'p Preconditioner> for PrecondRef<'p> {
    fn from(p: &'p Preconditioner) -> Self {
        PrecondRef::Built(p)
    }
}

impl<'p> From<&'p PlannedPrecond> for PrecondRef<'p> {
    fn from(p: &'p PlannedPrecond) -> Self {
        match p {
            PlannedPrecond::Built(p) => PrecondRef::Built(p),
            &PlannedPrecond::SsorK1FromA { omega, n } => PrecondRef::SsorK1FromA { omega, n },
            &PlannedPrecond::SsorK1ExplicitFromA { omega, n } => {
                PrecondRef::SsorK1ExplicitFromA { omega, n }
            }
            &PlannedPrecond::SsorK2FromA { omega, n } => PrecondRef::SsorK2FromA { omega, n },
            &PlannedPrecond::JacobiFromA { n } => PrecondRef::JacobiFromA { n },
        }
    }
}

impl PrecondRef<'_> {
    /// As [`Preconditioner::kind_name`].
    pub fn kind_name(&self) -> &str {
        match self {
            PrecondRef::Built(p) => p.kind_name(),
            PrecondRef::SsorK1FromA { .. } | PrecondRef::SsorK2FromA { .. } => "ssor-ai-factored",
            PrecondRef::SsorK1ExplicitFromA { .. } => "ssor-ai-explicit",
            PrecondRef::JacobiFromA { .. } => "jacobi",
        }
    }

    /// As [`Preconditioner::dim`].
    pub fn dim(&self) -> Option<usize> {
        match self {
            PrecondRef::Built(p) => p.dim(),
            PrecondRef::SsorK1FromA { n, .. }
            | PrecondRef::SsorK1ExplicitFromA { n, .. }
            | PrecondRef::SsorK2FromA { n, .. }
            | PrecondRef::JacobiFromA { n } => Some(*n),
        }
    }

    /// True for the factored SSOR-AI form (built or to be built).
    pub fn is_factored(&self) -> bool {
        matches!(
            self,
            PrecondRef::Built(Preconditioner::SsorFactored { .. })
                | PrecondRef::SsorK1FromA { .. }
                | PrecondRef::SsorK2FromA { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::precond::poisson1d;

    #[test]
    fn the_host_copy_is_the_host_build() {
        let a = poisson1d(9);
        let mut p = PlannedPrecond::SsorK1FromA { omega: 0.8, n: 9 };
        assert_eq!(p.kind_name(), "ssor-ai-factored");
        assert_eq!(p.as_ref().dim(), Some(9));
        assert!(p.built().is_none() && p.built_by_backend());
        let want = Preconditioner::build(&a, &PlannedPrecond::ssor_k1_kind(0.8)).unwrap();
        assert_eq!(*p.host(&a).unwrap(), want);
        assert_eq!(p.kind_name(), want.kind_name());
        assert!(!p.built_by_backend());
        // Built once: a second call returns the same arrays.
        assert_eq!(*p.host(&a).unwrap(), want);
        let mut q = PlannedPrecond::SsorK1FromA { omega: 0.8, n: 8 };
        assert!(q.host(&a).unwrap_err().to_string().contains("8 rows"));
    }

    #[test]
    fn the_host_copy_of_second_order_is_the_host_build() {
        let a = poisson1d(9);
        let mut p = PlannedPrecond::SsorK2FromA { omega: 0.8, n: 9 };
        assert_eq!(p.kind_name(), "ssor-ai-factored");
        assert_eq!(p.as_ref(), PrecondRef::SsorK2FromA { omega: 0.8, n: 9 });
        assert_eq!(p.as_ref().dim(), Some(9));
        assert!(p.as_ref().is_factored());
        assert!(p.built().is_none() && p.built_by_backend());
        let kind = PlannedPrecond::ssor_k2_kind(0.8);
        assert_eq!(kind.to_string(), "ssor-ai2");
        let want = Preconditioner::build(&a, &kind).unwrap();
        assert_eq!(*p.host(&a).unwrap(), want);
        assert_eq!(p.kind_name(), want.kind_name());
        assert!(!p.built_by_backend());
        let mut q = PlannedPrecond::SsorK2FromA { omega: 0.8, n: 8 };
        assert!(q.host(&a).unwrap_err().to_string().contains("8 rows"));
    }

    #[test]
    fn the_host_copy_of_jacobi_is_the_host_build() {
        let a = poisson1d(9);
        let mut p = PlannedPrecond::JacobiFromA { n: 9 };
        assert_eq!(p.kind_name(), "jacobi");
        assert_eq!(p.as_ref(), PrecondRef::JacobiFromA { n: 9 });
        assert_eq!(p.as_ref().dim(), Some(9));
        assert!(!p.as_ref().is_factored());
        assert!(p.built().is_none() && p.built_by_backend());
        let want = Preconditioner::build(&a, &PrecondKind::Jacobi).unwrap();
        assert_eq!(*p.host(&a).unwrap(), want);
        assert!(!p.built_by_backend());
        let mut q = PlannedPrecond::JacobiFromA { n: 8 };
        assert!(q.host(&a).unwrap_err().to_string().contains("8 rows"));
    }

    /// The plan's limit is the device's.
    #[cfg(feature = "gpu")]
    #[test]
    fn the_explicit_row_limit_is_the_devices() {
        assert_eq!(
            DEVICE_EXPLICIT_KT_MAX,
            autopcg_gpu::kernels::ssor::GRAM_LONG_SPAN
        );
    }

    #[test]
    fn the_host_copy_of_the_explicit_form_is_the_host_build() {
        let a = poisson1d(9);
        let mut p = PlannedPrecond::SsorK1ExplicitFromA { omega: 0.8, n: 9 };
        assert_eq!(p.kind_name(), "ssor-ai-explicit");
        assert_eq!(
            p.as_ref(),
            PrecondRef::SsorK1ExplicitFromA { omega: 0.8, n: 9 }
        );
        assert_eq!(p.as_ref().kind_name(), "ssor-ai-explicit");
        assert!(!p.as_ref().is_factored());
        assert!(p.built().is_none() && p.built_by_backend());
        let kind = PlannedPrecond::ssor_k1_explicit_kind(0.8);
        assert_eq!(kind.to_string(), "ssor-ai-explicit");
        assert_eq!(kind.omega(), Some(0.8));
        let want = Preconditioner::build(&a, &kind).unwrap();
        assert_eq!(*p.host(&a).unwrap(), want);
        assert_eq!(p.kind_name(), want.kind_name());
        assert!(!p.built_by_backend());
    }
}
