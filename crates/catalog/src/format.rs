//! The sparse storage formats.
use std::fmt;
use std::str::FromStr;

use crate::strser::string_serde;
use crate::ParseError;

/// A sparse storage format (method.md 3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Format {
    /// Compressed sparse rows.
    Csr,
    /// ELLPACK, padded to the longest row, column-major.
    Ell,
    /// Diagonals: offsets plus a dense band.
    Dia,
    /// Coordinate triplets.
    Coo,
    /// ELL for the first H entries of each row, COO for the rest.
    Hyb,
}

impl Format {
    /// Every format.
    pub const ALL: [Format; 5] = [
        Format::Csr,
        Format::Ell,
        Format::Dia,
        Format::Coo,
        Format::Hyb,
    ];

    /// The lower-case name (`csr`, `ell`, `dia`, `coo`, `hyb`).
    pub fn name(self) -> &'static str {
        match self {
            Format::Csr => "csr",
            Format::Ell => "ell",
            Format::Dia => "dia",
            Format::Coo => "coo",
            Format::Hyb => "hyb",
        }
    }

    /// True for the formats a host conversion may refuse for too much padding (ELL, DIA and
    /// HYB's ELL part).
    pub fn is_padded(self) -> bool {
        matches!(self, Format::Ell | Format::Dia | Format::Hyb)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        Format::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| ParseError::new("format", s, "csr, ell, dia, coo or hyb"))
    }
}

string_serde!(Format);
