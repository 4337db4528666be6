//! Command-line values with a fixed set of spellings, as clap `ValueEnum`s: clap rejects
//! anything else with the list of possible values, and `--help` shows them. The spellings are
//! those the library parsers accept (`attn_ref::Causal::parse`, `attn_kernels::Dtype::parse`,
//! `attn_kernels::Fp8Variant::parse`).

use attn_kernels::{Dtype, Fp8Variant};
use attn_ref::Causal;
use clap::ValueEnum;

/// The name clap gives a value (its command-line spelling).
pub fn spelling<T: ValueEnum>(v: &T) -> String {
    v.to_possible_value()
        .map(|p| p.get_name().to_string())
        .unwrap_or_default()
}

/// `--causal`: the causal mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CausalArg {
    /// No mask.
    None,
    /// Query i sees keys 0..=i (PyTorch `is_causal`).
    TopLeft,
    /// Aligned to the bottom-right corner (FlashAttention ≥ 2.1).
    BottomRight,
}

impl From<CausalArg> for Causal {
    fn from(c: CausalArg) -> Self {
        match c {
            CausalArg::None => Causal::None,
            CausalArg::TopLeft => Causal::TopLeft,
            CausalArg::BottomRight => Causal::BottomRight,
        }
    }
}

impl std::fmt::Display for CausalArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(Causal::from(*self).as_str())
    }
}

/// `--layout`: the memory order of Q, K, V and O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LayoutArg {
    /// `[B, H, S, D]` (PyTorch SDPA).
    Bhsd,
    /// `[B, S, H, D]` (FlashAttention, candle, mistral.rs).
    Bshd,
}

impl From<LayoutArg> for attn_kernels::Layout {
    fn from(l: LayoutArg) -> Self {
        match l {
            LayoutArg::Bhsd => attn_kernels::Layout::Bhsd,
            LayoutArg::Bshd => attn_kernels::Layout::Bshd,
        }
    }
}

/// `--schedule`: how a Hopper launch covers its work items.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScheduleArg {
    /// Persistent where the entry walks items, one CTA per item elsewhere.
    Auto,
    /// One CTA per item.
    Grid,
    /// One CTA per SM, each walking whole items (an error where the entry cannot).
    Persistent,
    /// As persistent, with the last partial round's items shared out by key tiles.
    StreamK,
}

impl From<ScheduleArg> for attn_kernels::TileSchedule {
    fn from(s: ScheduleArg) -> Self {
        match s {
            ScheduleArg::Auto => attn_kernels::TileSchedule::Auto,
            ScheduleArg::Grid => attn_kernels::TileSchedule::Grid,
            ScheduleArg::Persistent => attn_kernels::TileSchedule::Persistent(None),
            ScheduleArg::StreamK => attn_kernels::TileSchedule::StreamK(None),
        }
    }
}

/// `--dtype`: one storage type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DtypeArg {
    /// IEEE half.
    #[value(alias = "fp16")]
    F16,
    /// bfloat16.
    Bf16,
}

impl From<DtypeArg> for Dtype {
    fn from(d: DtypeArg) -> Self {
        match d {
            DtypeArg::F16 => Dtype::F16,
            DtypeArg::Bf16 => Dtype::Bf16,
        }
    }
}

impl DtypeArg {
    /// The canonical spelling (`f16`, `bf16`).
    pub fn as_str(self) -> &'static str {
        Dtype::from(self).as_str()
    }
}

/// `--dtype` of `oracle`: a 16-bit storage type, or FP8 E4M3 (per-head scales, f16 O).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StorageArg {
    /// IEEE half.
    #[value(alias = "fp16")]
    F16,
    /// bfloat16.
    Bf16,
    /// FP8 E4M3 codes with per-head scales.
    #[value(alias = "fp8")]
    E4m3,
}

impl StorageArg {
    /// The canonical spelling (`f16`, `bf16`, `e4m3`).
    pub fn as_str(self) -> &'static str {
        match self {
            StorageArg::F16 => "f16",
            StorageArg::Bf16 => "bf16",
            StorageArg::E4m3 => "e4m3",
        }
    }
}

impl std::fmt::Display for DtypeArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `bench --dtype`: one storage type or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DtypeChoice {
    /// IEEE half.
    #[value(alias = "fp16")]
    F16,
    /// bfloat16.
    Bf16,
    /// f16, then bf16.
    Both,
}

impl DtypeChoice {
    /// The storage types, in run order.
    pub fn dtypes(self) -> Vec<Dtype> {
        match self {
            DtypeChoice::F16 => vec![Dtype::F16],
            DtypeChoice::Bf16 => vec![Dtype::Bf16],
            DtypeChoice::Both => vec![Dtype::F16, Dtype::Bf16],
        }
    }
}

/// `bench --timing`: how a sample is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TimingArg {
    /// CUDA-graph replays for shapes whose launch is under 20 µs, events otherwise.
    Auto,
    /// Always CUDA-graph replays (both sides): launch overheads off the clock, so a baseline
    /// whose host-side cost exceeds its GPU time (SDPA's cuDNN decode) is timed on the GPU's
    /// work alone.
    Graph,
    /// Always one event pair per launch.
    Events,
}

/// `bench --shapes`: a shape set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShapeSet {
    /// Eight small and medium shapes, causal and not.
    Seed,
    /// Long sequences.
    Large,
    /// seed + large: the gate's performance stage.
    SeedLarge,
    /// One query row against 8192 keys.
    Decode,
    /// seed + large + decode.
    All,
}

/// `--fp8`: an FP8 variant, or the device's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Fp8Arg {
    /// The device's default variant.
    Auto,
    /// The Hopper engine's TMA + warp-specialized wgmma mainloop (sm_90a).
    Hopper,
    /// Hopper warpgroup MMA (sm_90a).
    Wgmma,
    /// E4M3 MMA for both products (sm_89+).
    Fp8,
    /// E4M3 MMA for Q·Kᵀ, f16 P·V (sm_89+).
    P16,
    /// Widened to f16 in registers (everywhere).
    Cvt,
}

impl Fp8Arg {
    /// The variant, with `auto` resolved by `default` (the device's default variant).
    pub fn resolve(self, default: impl FnOnce() -> Fp8Variant) -> Fp8Variant {
        match self {
            Fp8Arg::Auto => default(),
            Fp8Arg::Hopper => Fp8Variant::Hopper,
            Fp8Arg::Wgmma => Fp8Variant::Wgmma,
            Fp8Arg::Fp8 => Fp8Variant::Fp8,
            Fp8Arg::P16 => Fp8Variant::P16,
            Fp8Arg::Cvt => Fp8Variant::Cvt,
        }
    }
}

impl std::fmt::Display for Fp8Arg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&spelling(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every spelling the library parsers accept is a value of the flag, and means the same.
    #[test]
    fn spellings_match_the_library_parsers() {
        for c in CausalArg::value_variants() {
            assert_eq!(Causal::parse(&spelling(c)).unwrap(), Causal::from(*c));
            assert_eq!(c.to_string(), spelling(c));
        }
        for d in DtypeArg::value_variants() {
            assert_eq!(Dtype::parse(&spelling(d)).unwrap(), Dtype::from(*d));
        }
        assert_eq!(DtypeArg::from_str("fp16", false), Ok(DtypeArg::F16));
        assert_eq!(DtypeChoice::from_str("fp16", false), Ok(DtypeChoice::F16));
        assert_eq!(
            DtypeChoice::from_str("both", false).unwrap().dtypes(),
            [Dtype::F16, Dtype::Bf16]
        );
        for v in Fp8Variant::ALL {
            let arg = Fp8Arg::from_str(v.as_str(), false).unwrap();
            assert_eq!(arg.resolve(|| Fp8Variant::Cvt), v);
        }
        assert_eq!(Fp8Arg::Auto.resolve(|| Fp8Variant::P16), Fp8Variant::P16);
        let sets: Vec<String> = ShapeSet::value_variants().iter().map(spelling).collect();
        assert_eq!(sets, ["seed", "large", "seed-large", "decode", "all"]);
        assert!(CausalArg::from_str("causal", false).is_err());
    }
}

/// `--window L,R`: a sliding window, keys `L` left and `R` right of the (bottom-right
/// aligned) diagonal, −1 for unbounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowArg {
    /// Keys to the left of the diagonal (−1: unbounded).
    pub left: i64,
    /// Keys to the right of the diagonal (−1: unbounded).
    pub right: i64,
}

impl std::str::FromStr for WindowArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (l, r) = s
            .split_once(',')
            .ok_or_else(|| format!("expected L,R (two integers, -1 = unbounded), got `{s}`"))?;
        let side = |x: &str| {
            x.trim()
                .parse::<i64>()
                .map_err(|e| format!("`{}` in `{s}` is not an integer: {e}", x.trim()))
        };
        Ok(WindowArg {
            left: side(l)?,
            right: side(r)?,
        })
    }
}

#[cfg(test)]
mod window_tests {
    use super::WindowArg;

    #[test]
    fn window_spellings() {
        assert_eq!(
            "128,0".parse::<WindowArg>(),
            Ok(WindowArg {
                left: 128,
                right: 0
            })
        );
        assert_eq!(
            " -1 , 5".parse::<WindowArg>(),
            Ok(WindowArg { left: -1, right: 5 })
        );
        for bad in ["128", "a,1", "1,", "1,2,3"] {
            assert!(bad.parse::<WindowArg>().is_err(), "{bad}");
        }
    }
}
