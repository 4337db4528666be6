//! The workspace's one 16-bit storage type enum: what the kernels store Q, K, V and O in,
//! what the emulation rounds to, and what the command line spells.

use crate::AttnError;

/// A 16-bit floating-point storage type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
}

impl Dtype {
    /// Both, in a fixed order.
    pub const ALL: [Dtype; 2] = [Dtype::F16, Dtype::Bf16];

    /// Rounds an f32 to this type (nearest, ties to even) and widens it back exactly.
    pub fn round(self, x: f32) -> f32 {
        match self {
            Dtype::F16 => half::f16::from_f32(x).to_f32(),
            Dtype::Bf16 => half::bf16::from_f32(x).to_f32(),
        }
    }

    /// The spelling in kernel names and on the command line (`f16`, `bf16`).
    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
        }
    }

    /// Parses `f16` (or `fp16`) and `bf16`.
    pub fn parse(s: &str) -> Result<Self, AttnError> {
        match s {
            "f16" | "fp16" => Ok(Dtype::F16),
            "bf16" => Ok(Dtype::Bf16),
            other => Err(AttnError::InvalidArgument(format!(
                "unknown dtype `{other}`: expected f16 or bf16"
            ))),
        }
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_round_trip_and_rounding_differs() {
        for d in Dtype::ALL {
            assert_eq!(Dtype::parse(d.as_str()).unwrap(), d);
        }
        assert_eq!(Dtype::parse("fp16").unwrap(), Dtype::F16);
        assert!(Dtype::parse("f32")
            .unwrap_err()
            .to_string()
            .contains("f16 or bf16"));
        let x = 1.0 + 1.0 / 512.0;
        assert_eq!(Dtype::F16.round(x), x);
        assert_ne!(Dtype::Bf16.round(x), x);
    }
}
